//! The deadlines in force for armed owners being deleted ([`Deadlines`]). Under the synchronous
//! finalizer an armed owner waits for its dependents under a deadline, and is released (its
//! `syncgc.io/synchronous` removed) when they are gone or the deadline passes; the workers in
//! [`super::collector`] do that, by [`super::decide`]'s rules (`release`, `deadline`).
//!
//! The deadline is fixed in memory the first time the owner is looked at, counted from its
//! `deletionTimestamp`, and stored on it (`syncgc.io/deadline`) so that a restart keeps it —
//! best-effort: an owner whose annotations leave no room, or whose update a policy refuses,
//! waits and is released all the same. A stored deadline is honoured only within
//! `[deletionTimestamp, deletionTimestamp + --timeout-max]`. An intermediate object syncgc
//! arms inherits the deadline of the owner that waits for it ([`Deadlines::inherit`]), so the
//! owner's own timeout bounds the whole transitive wait. The workers act on it in
//! [`super::collector`] (`sync_synchronous`).

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::DynamicObject;
use parking_lot::Mutex;

use super::decide::{self, OwnerState};
use crate::graph::{Flags, Graph, Uid};

/// How soon an owner is looked at again while its controller has not observed its latest
/// generation.
pub(super) const GENERATION_RECHECK: Duration = Duration::from_secs(1);
/// How many remaining dependents a `SyncGCWaiting` event names.
pub(super) const NAMES_IN_EVENTS: usize = 5;

/// The deadlines in force for waiting owners, kept here whether or not they could be stored
/// on the owners.
#[derive(Debug, Default)]
pub struct Deadlines(Mutex<HashMap<Uid, Timestamp>>);

impl Deadlines {
    /// The deadline fixed for `uid` (deleted at `deleted_at`), while it lies within bounds.
    pub fn within_bounds(
        &self,
        uid: Uid,
        deleted_at: Timestamp,
        max: Duration,
    ) -> Option<Timestamp> {
        let at = self.0.lock().get(&uid).copied()?;
        decide::within_bounds(deleted_at, at, max).then_some(at)
    }

    pub fn fix(&self, uid: Uid, at: Timestamp) {
        self.0.lock().insert(uid, at);
    }

    /// The deadline an object armed for the owners that wait for it inherits: the earliest of
    /// theirs (`owners`: each owner's uid and how the object sees it), so that their own
    /// timeouts bound the whole transitive wait. It is fixed for `uid`.
    pub fn inherit(
        &self,
        uid: Uid,
        owners: impl IntoIterator<Item = (Uid, OwnerState)>,
    ) -> Option<Timestamp> {
        let mut deadlines = self.0.lock();
        let inherited = owners
            .into_iter()
            .filter(|(_, state)| *state == OwnerState::WaitingSynchronous)
            .filter_map(|(owner, _)| deadlines.get(&owner).copied())
            .min()?;
        deadlines.insert(uid, inherited);
        Some(inherited)
    }

    /// Forgets the deadline of `uid`, released.
    pub fn forget(&self, uid: Uid) {
        self.0.lock().remove(&uid);
    }

    /// Forgets the deadlines of the objects the graph no longer shows.
    pub fn forget_gone(&self, graph: &Graph) {
        self.0
            .lock()
            .retain(|uid, _| graph.node(*uid).is_some_and(|n| !n.is(Flags::VIRTUAL)));
    }
}

pub(super) fn annotation<'a>(object: &'a DynamicObject, key: &str) -> Option<&'a str> {
    object
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_armed_object_inherits_the_earliest_deadline_of_the_owners_that_wait_for_it() {
        let deadlines = Deadlines::default();
        let at = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
        let (first, second, solid, armed) = (
            Uid::from_u128(1),
            Uid::from_u128(2),
            Uid::from_u128(3),
            Uid::from_u128(9),
        );
        deadlines.fix(first, at(60));
        deadlines.fix(second, at(30));
        deadlines.fix(solid, at(5));
        let owners = [
            (first, OwnerState::WaitingSynchronous),
            (second, OwnerState::WaitingSynchronous),
            (solid, OwnerState::Solid),
        ];
        assert_eq!(
            deadlines.inherit(armed, owners),
            Some(at(30)),
            "not the solid owner's"
        );
        let max = Duration::from_secs(3600);
        assert_eq!(
            deadlines.within_bounds(armed, at(0), max),
            Some(at(30)),
            "fixed for it"
        );
        assert_eq!(
            deadlines.within_bounds(armed, at(31), max),
            None,
            "before its deletion: out of bounds"
        );
        assert_eq!(
            deadlines.inherit(Uid::from_u128(10), [(solid, OwnerState::Solid)]),
            None
        );
        deadlines.forget(armed);
        assert_eq!(deadlines.within_bounds(armed, at(0), max), None);
    }
}
