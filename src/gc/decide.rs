//! The garbage collector's decisions, pure: what to do with a dependent given the state of its
//! owners, and how long an owner may wait for its dependents.

use std::time::Duration;

/// An owner as a dependent sees it (the upstream GC's vocabulary in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// Exists and is not being deleted [solid].
    Solid,
    /// Armed by syncgc and being deleted without `orphan`: waits for this dependent
    /// [waiting for dependents deletion].
    WaitingSynchronous,
    /// Being deleted, not by syncgc's rules (the cluster's GC handles it).
    Deleting,
    /// Being deleted with `orphan`: its dependents are to be kept.
    Orphaning,
    /// Gone, or replaced by an object with another uid [dangling].
    Absent,
}

/// What to do with a dependent of a waiting owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Nothing, for now.
    Wait,
    /// It keeps living (another owner is solid or orphaning); drop only its references to the
    /// owners at these indices, which wait for it.
    Keep { drop: Vec<usize> },
    /// Delete it; arm it first when it has dependents of its own, so the wait is transitive.
    Delete { arm_first: bool },
}

/// `attemptToDeleteItem` for a dependent with `owners` (in ownerReference order), one of which
/// waits for it.
pub fn attempt_to_delete(owners: &[OwnerState], has_dependents: bool, armed: bool) -> Attempt {
    if !owners.contains(&OwnerState::WaitingSynchronous) {
        return Attempt::Wait;
    }
    let kept_alive = owners
        .iter()
        .any(|o| matches!(o, OwnerState::Solid | OwnerState::Orphaning));
    if kept_alive {
        let drop = owners
            .iter()
            .enumerate()
            .filter(|(_, o)| **o == OwnerState::WaitingSynchronous)
            .map(|(i, _)| i)
            .collect();
        return Attempt::Keep { drop };
    }
    Attempt::Delete {
        arm_first: has_dependents && !armed,
    }
}

/// How long an owner may wait for its dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub base: Duration,
    pub per_dependent: Duration,
    pub max: Duration,
}

impl Timeouts {
    /// `base + per_dependent × dependents`, capped by `max`; `base_override` (the owner's
    /// `syncgc.io/timeout`) replaces the base.
    pub fn for_owner(&self, dependents: usize, base_override: Option<Duration>) -> Duration {
        let per = self
            .per_dependent
            .saturating_mul(u32::try_from(dependents).unwrap_or(u32::MAX));
        base_override
            .unwrap_or(self.base)
            .saturating_add(per)
            .min(self.max)
    }
}

/// Whether an owner's controller has seen its latest spec (`status.observedGeneration` has
/// caught up with `metadata.generation`); owners without an observedGeneration have.
pub fn generation_caught_up(generation: Option<i64>, observed_generation: Option<i64>) -> bool {
    match (generation, observed_generation) {
        (Some(generation), Some(observed)) => observed >= generation,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::OwnerState::*;
    use super::*;

    #[test]
    fn a_dependent_whose_owners_all_go_is_deleted() {
        assert_eq!(
            attempt_to_delete(&[WaitingSynchronous], false, false),
            Attempt::Delete { arm_first: false }
        );
        assert_eq!(
            attempt_to_delete(&[Absent, WaitingSynchronous, Deleting], false, false),
            Attempt::Delete { arm_first: false }
        );
    }

    #[test]
    fn a_dependent_with_dependents_is_armed_first_unless_it_is() {
        assert_eq!(
            attempt_to_delete(&[WaitingSynchronous], true, false),
            Attempt::Delete { arm_first: true }
        );
        assert_eq!(
            attempt_to_delete(&[WaitingSynchronous], true, true),
            Attempt::Delete { arm_first: false }
        );
    }

    #[test]
    fn a_solid_or_orphaning_owner_keeps_it_and_only_waiting_references_go() {
        assert_eq!(
            attempt_to_delete(
                &[WaitingSynchronous, Solid, WaitingSynchronous],
                false,
                false
            ),
            Attempt::Keep { drop: vec![0, 2] }
        );
        assert_eq!(
            attempt_to_delete(&[Orphaning, WaitingSynchronous], false, false),
            Attempt::Keep { drop: vec![1] }
        );
    }

    #[test]
    fn without_a_waiting_owner_it_is_not_syncgcs_to_collect() {
        for owners in [&[][..], &[Absent], &[Deleting, Absent], &[Solid]] {
            assert_eq!(
                attempt_to_delete(owners, false, false),
                Attempt::Wait,
                "{owners:?}"
            );
        }
    }

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
        assert_eq!(
            t.for_owner(10, Some(Duration::from_secs(2))),
            Duration::from_secs(7)
        );
        assert!(t.for_owner(100, None) > t.for_owner(10, None));
    }

    #[test]
    fn generations() {
        assert!(generation_caught_up(Some(3), Some(3)));
        assert!(!generation_caught_up(Some(3), Some(2)));
        assert!(generation_caught_up(Some(3), None));
        assert!(generation_caught_up(None, None));
    }
}
