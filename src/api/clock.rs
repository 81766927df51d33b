//! The apiserver's clock, as syncgc estimates it. A deadline is the apiserver's time
//! (`deletionTimestamp` plus the timeout, or `syncgc.io/deadline`); compared with this
//! machine's clock, a node whose clock runs two minutes ahead would release every waiting
//! owner two minutes early, and one behind would keep them longer. So every deadline is
//! compared with [`now`]: this machine's clock moved by the offset that the `Date` header of the
//! apiserver's answers shows (every answer through [`super::client`], the watches' and the
//! probes' among them). The header has whole seconds, so clocks within [`AGREE`] of each other
//! are taken to agree; beyond that the estimate is right to about a second.

use std::sync::atomic::{AtomicI64, Ordering};

use jiff::{SignedDuration, Timestamp};

/// How far apart the clocks must be before syncgc corrects for it.
pub const AGREE: SignedDuration = SignedDuration::from_secs(2);

/// The apiserver's clock minus this machine's, in milliseconds.
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// The apiserver's time now, as estimated.
pub fn now() -> Timestamp {
    let machine = machine_now();
    machine.checked_add(offset()).unwrap_or(machine)
}

/// This machine's time.
#[cfg(not(test))]
fn machine_now() -> Timestamp {
    Timestamp::now()
}

/// This machine's time as tokio's clock moves it on from the wall clock of the first call:
/// in unit tests that pause time, deadlines come as the paused clock advances.
#[cfg(test)]
fn machine_now() -> Timestamp {
    static START: std::sync::OnceLock<(Timestamp, std::time::Instant)> = std::sync::OnceLock::new();
    let (wall, instant) = *START.get_or_init(|| (Timestamp::now(), std::time::Instant::now()));
    let elapsed = tokio::time::Instant::now()
        .into_std()
        .saturating_duration_since(instant);
    wall + SignedDuration::try_from(elapsed).unwrap_or(SignedDuration::ZERO)
}

/// The apiserver's clock minus this machine's, as last estimated (zero while they agree).
pub fn offset() -> SignedDuration {
    SignedDuration::from_millis(OFFSET_MS.load(Ordering::Relaxed))
}

/// The offset an answer dated `date` (the `Date` header: the second in which the apiserver
/// answered) shows when it arrives at `received` on this machine's clock: zero within
/// [`AGREE`], else whole seconds.
pub fn estimate(date: Timestamp, received: Timestamp) -> SignedDuration {
    // The answer left within the second `date` names: its middle is the best guess.
    let server = date + SignedDuration::from_millis(500);
    let offset = server.duration_since(received);
    if offset.abs() < AGREE {
        SignedDuration::ZERO
    } else {
        SignedDuration::from_secs(offset.as_secs_f64().round() as i64)
    }
}

/// Takes in the `Date` header of an answer that arrived now.
pub fn observe(date: &http::HeaderValue) {
    let Some(date) = date
        .to_str()
        .ok()
        .and_then(|d| jiff::fmt::rfc2822::parse(d).ok())
    else {
        return;
    };
    let estimated = estimate(date.timestamp(), Timestamp::now());
    let millis = i64::try_from(estimated.as_millis()).unwrap_or(0);
    if OFFSET_MS.swap(millis, Ordering::Relaxed) != millis {
        tracing::warn!(
            apiserver_minus_syncgc = %estimated,
            "the apiserver's clock and this machine's disagree; deadlines follow the apiserver's"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_within_two_seconds_agree_and_beyond_the_offset_is_whole_seconds() {
        let received: Timestamp = "2026-11-24T12:00:00.300Z".parse().unwrap();
        let at = |s: &str| -> Timestamp { s.parse().unwrap() };
        // The same second, or one off: they agree.
        assert_eq!(
            estimate(at("2026-11-24T12:00:00Z"), received),
            SignedDuration::ZERO
        );
        assert_eq!(
            estimate(at("2026-11-24T11:59:59Z"), received),
            SignedDuration::ZERO
        );
        assert_eq!(
            estimate(at("2026-11-24T12:00:01Z"), received),
            SignedDuration::ZERO
        );
        // This machine two minutes ahead: the apiserver's clock is behind by that.
        assert_eq!(
            estimate(at("2026-11-24T11:58:00Z"), received),
            SignedDuration::from_secs(-120)
        );
        // And behind.
        assert_eq!(
            estimate(at("2026-11-24T12:02:00Z"), received),
            SignedDuration::from_secs(120)
        );
    }

    #[test]
    fn the_date_header_is_read_as_http_writes_it() {
        let date = jiff::fmt::rfc2822::parse("Tue, 24 Nov 2026 19:53:21 GMT").unwrap();
        assert_eq!(
            date.timestamp(),
            "2026-11-24T19:53:21Z".parse::<Timestamp>().unwrap()
        );
    }
}
