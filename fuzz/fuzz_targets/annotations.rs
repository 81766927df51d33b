//! The parsers of syncgc's annotations on arbitrary values: `syncgc.io/timeout` (a duration),
//! `syncgc.io/max-cascade`, `syncgc.io/deletion-order`, `syncgc.io/handles-finalizers`, and the
//! warnings about them. Their values are written by whoever may write an object; none may
//! panic, a timeout never passes the longest wait, and each warning says what the parser does.
//!
//! The input: eight bytes (the dependents an owner has, and the timeouts' settings), then the
//! value.

#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use syncgc::annotations::{ANNOTATIONS, Timeouts, annotation_problems, max_cascade};
use syncgc::graph::{Guards, Order};
use syncgc::names::{
    DELETION_ORDER_ANNOTATION, HANDLES_FINALIZERS_ANNOTATION, MAX_CASCADE_ANNOTATION,
    TIMEOUT_ANNOTATION,
};

fuzz_target!(|data: &[u8]| {
    let (head, value) = data.split_at(data.len().min(8));
    let mut settings = [0u8; 8];
    settings[..head.len()].copy_from_slice(head);
    let settings = u64::from_le_bytes(settings);
    let value = String::from_utf8_lossy(value);
    let value = value.as_ref();

    let duration = syncgc::duration::parse(value);
    if let Ok(duration) = duration {
        syncgc::duration::format(duration);
    }

    let timeouts = Timeouts {
        base: Duration::from_secs(settings & 0xffff),
        per_dependent: Duration::from_millis((settings >> 16) & 0xffff),
        max: Duration::from_secs((settings >> 32) & 0xffff),
    };
    let dependents = (settings >> 48) as usize * 1_000;
    let timeout = timeouts.for_owner(dependents, Some(value));
    assert!(
        timeout <= timeouts.max,
        "{timeout:?} past {:?}",
        timeouts.max
    );

    let max = max_cascade(Some(value));
    let order = Order::of(Some(value));
    let guards = Guards::from_parts(Some(value), Some(value), Some(value), value.split(','));

    let warned = |key: &str| !annotation_problems([(key, value)], Some(timeouts.max)).is_empty();
    assert_eq!(
        warned(TIMEOUT_ANNOTATION),
        duration.as_ref().map_or(true, |d| *d > timeouts.max),
        "timeout {value:?}"
    );
    assert_eq!(
        warned(MAX_CASCADE_ANNOTATION),
        max.is_none(),
        "max-cascade {value:?}"
    );
    assert_eq!(
        warned(DELETION_ORDER_ANNOTATION),
        matches!(order, Order::Invalid(_)),
        "deletion-order {value:?}"
    );
    assert_eq!(
        warned(HANDLES_FINALIZERS_ANNOTATION),
        guards.handles.is_none(),
        "handles-finalizers {value:?}"
    );
    // Every annotation, and the value as a key (a typo, or someone else's).
    for key in ANNOTATIONS {
        annotation_problems([(key, value)], None);
    }
    annotation_problems([(value, value)], Some(timeouts.max));
});
