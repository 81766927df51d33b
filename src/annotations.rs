//! The rules of syncgc's annotations, which the webhook (warnings on a write, the timeout a
//! DELETE is told) and the collector (Events, the deadline it fixes) both follow: how long an
//! owner may wait for its dependents, and what is wrong with an object's `syncgc.io/`
//! annotations.

use std::time::Duration;

use crate::graph::Handles;
use crate::graph::Order;
use crate::names::{
    DEADLINE_ANNOTATION, DELETION_ORDER_ANNOTATION, HANDLES_FINALIZERS_ANNOTATION,
    HANDLES_FINALIZERS_SCOPE_ANNOTATION, MAX_CASCADE_ANNOTATION, PROPAGATION_ANNOTATION,
    PROTECTED_ANNOTATION, SYNCHRONOUS_ANNOTATION, TIMEOUT_ANNOTATION,
};

/// How long an owner may wait for its dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub base: Duration,
    pub per_dependent: Duration,
    pub max: Duration,
}

impl Timeouts {
    /// `base + per_dependent × dependents`, capped by `max`; the owner's `syncgc.io/timeout`
    /// (`annotation`), when it is a duration, replaces the base (one that is not leaves it:
    /// [`annotation_problems`] says so).
    pub fn for_owner(&self, dependents: usize, annotation: Option<&str>) -> Duration {
        let per = self
            .per_dependent
            .saturating_mul(u32::try_from(dependents).unwrap_or(u32::MAX));
        annotation
            .and_then(|t| crate::duration::parse(t).ok())
            .unwrap_or(self.base)
            .saturating_add(per)
            .min(self.max)
    }
}

/// The annotations syncgc reads or writes; any other `syncgc.io/` annotation is a typo.
pub const ANNOTATIONS: [&str; 9] = [
    SYNCHRONOUS_ANNOTATION,
    TIMEOUT_ANNOTATION,
    PROPAGATION_ANNOTATION,
    DELETION_ORDER_ANNOTATION,
    PROTECTED_ANNOTATION,
    MAX_CASCADE_ANNOTATION,
    HANDLES_FINALIZERS_ANNOTATION,
    HANDLES_FINALIZERS_SCOPE_ANNOTATION,
    DEADLINE_ANNOTATION,
];

/// What `syncgc.io/max-cascade: value` allows: a non-negative integer, else nothing (a value
/// that is not one never refuses a DELETE; [`annotation_problems`] says so).
pub fn max_cascade(value: Option<&str>) -> Option<usize> {
    value?.trim().parse().ok()
}

/// What is wrong with an object's `syncgc.io/` annotations, a sentence each, saying what syncgc
/// does instead: an opt-in other than `"true"` or `"false"`, a timeout that is not a duration
/// or longer than `timeout_max`, an unknown propagation, a deletion order that is not an
/// integer, and an annotation syncgc does not know (a typo). The webhook answers them as
/// warnings; the collector records them as Events.
pub fn annotation_problems<'a>(
    annotations: impl IntoIterator<Item = (&'a str, &'a str)>,
    timeout_max: Option<Duration>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, value) in annotations {
        let problem = match key {
            SYNCHRONOUS_ANNOTATION if value == "true" || value == "false" => None,
            SYNCHRONOUS_ANNOTATION => Some(format!(
                "{key}: {value:?} is neither \"true\" nor \"false\": the object is not opted in \
                 (only \"true\", exactly, opts in)"
            )),
            TIMEOUT_ANNOTATION => match crate::duration::parse(value) {
                Err(err) => Some(format!(
                    "{key}: {value:?} is not a duration such as \"90s\" or \"5m\" ({err}): the \
                     default timeout applies"
                )),
                Ok(timeout) => timeout_max.filter(|max| timeout > *max).map(|max| {
                    format!("{key}: {value:?} is longer than the longest wait, {max:?}: capped")
                }),
            },
            PROPAGATION_ANNOTATION => (!["Foreground", "Background", "Orphan"].contains(&value))
                .then(|| {
                    format!(
                        "{key}: {value:?} is not Foreground, Background or Orphan: ignored (a \
                         DELETE that names no policy gets the resource's default)"
                    )
                }),
            DELETION_ORDER_ANNOTATION => match Order::of(Some(value)) {
                Order::Invalid(_) => Some(format!(
                    "{key}: {value:?} is not an integer: the object is deleted in wave 0"
                )),
                Order::Wave(_) => None,
            },
            PROTECTED_ANNOTATION if value == "true" || value == "false" => None,
            PROTECTED_ANNOTATION => Some(format!(
                "{key}: {value:?} is neither \"true\" nor \"false\": the object is not protected \
                 (only \"true\", exactly, protects)"
            )),
            MAX_CASCADE_ANNOTATION => max_cascade(Some(value)).is_none().then(|| {
                format!(
                    "{key}: {value:?} is not a non-negative integer: no limit applies to this \
                     object's cascade"
                )
            }),
            HANDLES_FINALIZERS_ANNOTATION => Handles::parse(value, None)
                .err()
                .map(|err| format!("{key}: {value:?} {err}: this workload holds nothing")),
            HANDLES_FINALIZERS_SCOPE_ANNOTATION => (!["namespace", "cluster"].contains(&value))
                .then(|| {
                    format!(
                        "{key}: {value:?} is neither \"namespace\" nor \"cluster\": the scope is \
                         the workload's namespace"
                    )
                }),
            DEADLINE_ANNOTATION => None,
            _ if key.starts_with("syncgc.io/") => Some(format!(
                "{key} is not an annotation syncgc knows ({}); ignored",
                ANNOTATIONS[..8].join(", ")
            )),
            _ => None,
        };
        problems.extend(problem);
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_grows_with_the_dependents_up_to_the_cap() {
        let t = Timeouts {
            base: Duration::from_secs(30),
            per_dependent: Duration::from_millis(500),
            max: Duration::from_secs(600),
        };
        assert_eq!(t.for_owner(0, None), Duration::from_secs(30));
        assert_eq!(t.for_owner(10, None), Duration::from_secs(35));
        assert_eq!(t.for_owner(100_000, None), Duration::from_secs(600));
        assert_eq!(t.for_owner(10, Some("2s")), Duration::from_secs(7));
        assert_eq!(t.for_owner(10, Some("banana")), Duration::from_secs(35));
        assert!(t.for_owner(100, None) > t.for_owner(10, None));
    }

    #[test]
    fn annotation_problems_name_each_mistake_and_what_syncgc_does_instead() {
        let check = |pairs: &[(&str, &str)]| {
            annotation_problems(pairs.iter().copied(), Some(Duration::from_secs(3600)))
        };
        let fine = [
            ("syncgc.io/synchronous", "true"),
            ("syncgc.io/timeout", "90s"),
            ("syncgc.io/propagation", "Foreground"),
            ("syncgc.io/deletion-order", " -2 "),
            ("syncgc.io/deadline", "2026-11-24T12:00:00Z"),
            ("syncgc.io/protected", "true"),
            ("syncgc.io/max-cascade", "0"),
            (
                "syncgc.io/handles-finalizers",
                "example.com/a, example.com/b",
            ),
            ("syncgc.io/handles-finalizers-scope", "cluster"),
            ("example.com/other", "anything"),
        ];
        assert_eq!(check(&fine), Vec::<String>::new());
        assert!(check(&[("syncgc.io/synchronous", "false")]).is_empty());
        for (pair, says) in [
            (("syncgc.io/synchronous", "True"), "is not opted in"),
            (("syncgc.io/synchronous", "yes"), "only \"true\", exactly"),
            (("syncgc.io/timeout", "ninety"), "default timeout applies"),
            (("syncgc.io/timeout", "2h"), "capped"),
            (("syncgc.io/propagation", "foreground"), "ignored"),
            (("syncgc.io/deletion-order", "first"), "wave 0"),
            (("syncgc.io/protected", "yes"), "not protected"),
            (("syncgc.io/max-cascade", "-1"), "no limit applies"),
            (("syncgc.io/max-cascade", "ten"), "no limit applies"),
            (("syncgc.io/handles-finalizers", ""), "holds nothing"),
            (("syncgc.io/handles-finalizers", "a b/c"), "holds nothing"),
            (
                ("syncgc.io/handles-finalizers-scope", "all"),
                "workload's namespace",
            ),
            (
                ("syncgc.io/synchronus", "true"),
                "not an annotation syncgc knows",
            ),
        ] {
            let problems = check(&[pair]);
            assert_eq!(problems.len(), 1, "{pair:?}: {problems:?}");
            assert!(problems[0].contains(says), "{pair:?}: {problems:?}");
            assert!(problems[0].starts_with(pair.0), "{problems:?}");
        }
        // Without a known longest wait, any duration is fine.
        assert!(annotation_problems([("syncgc.io/timeout", "200h")], None).is_empty());
    }
}
