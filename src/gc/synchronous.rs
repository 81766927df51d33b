//! The synchronous finalizer (`syncgc.io/synchronous`): arming, the deadline, the wait and the
//! release. Under it an armed owner being deleted waits for its dependents under a deadline,
//! and is released (the finalizer removed) when they are gone — and the release barrier
//! agrees — or when the deadline passes; [`Synchronous`] does that, by [`super::decide`]'s
//! rules (`release`, `deadline`, `unproven`). Arming covers the opted-in objects found without
//! the finalizer and the intermediate objects of a tree whose owners wait.
//!
//! The deadline is fixed in memory the first time the owner is looked at, counted from its
//! `deletionTimestamp`, and stored on it (`syncgc.io/deadline`) so that a restart keeps it —
//! best-effort: an owner whose annotations leave no room, or whose update a policy refuses,
//! waits and is released all the same. A stored deadline is honoured only within
//! `[deletionTimestamp, deletionTimestamp + --timeout-max]`. An intermediate object syncgc
//! arms inherits the deadline of the owner that waits for it ([`Deadlines::inherit`]), so the
//! owner's own timeout bounds the whole transitive wait; when it passes with waves of the
//! deletion order left, the order is abandoned and the rest goes at once.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::runtime::events::EventType;
use parking_lot::Mutex;

use super::barrier::{self, Barrier, Verdict};
use super::context::Context;
use super::decide::{self, Deadline, OwnerState, Release, Unproven};
use super::waves::Waves;
use crate::api::{ApiError, Claims, Marks, Target};
use crate::graph::{Flags, Graph, Uid, Work};
use crate::metrics::Action;
use crate::names::{
    DEADLINE_ANNOTATION, ORPHAN_FINALIZER, Reason, SYNCHRONOUS_FINALIZER, TIMEOUT_ANNOTATION,
};

/// How soon an owner is looked at again while its controller has not observed its latest
/// generation.
const GENERATION_RECHECK: Duration = Duration::from_secs(1);
/// How many remaining dependents a `SyncGCWaiting` event names.
const NAMES_IN_EVENTS: usize = 5;

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

fn annotation<'a>(object: &'a DynamicObject, key: &str) -> Option<&'a str> {
    object
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The synchronous finalizer at work: what it reads and acts through, and the parts it asks.
pub struct Synchronous<'a> {
    pub cx: &'a Context,
    pub deadlines: &'a Deadlines,
    pub waves: &'a Waves,
    pub barrier: &'a Barrier,
}

impl Synchronous<'_> {
    /// An armed owner being deleted: fix its deadline, delete its dependents, release it when
    /// they are gone or the deadline passes.
    pub async fn sync(&self, uid: Uid, target: &Target) -> Result<(), ApiError> {
        let cx = self.cx;
        let Some(object) = cx.cluster.get(target).await? else {
            return Ok(());
        };
        let meta = &object.metadata;
        let finalizers = meta.finalizers.as_deref().unwrap_or_default();
        let Some(deleted_at) = meta.deletion_timestamp.as_ref().map(|t| t.0) else {
            return Ok(());
        };
        if !finalizers.iter().any(|f| f == SYNCHRONOUS_FINALIZER) {
            return Ok(());
        }
        let deadline = self.deadline(uid, target, &object, deleted_at).await;
        let left = cx.graph().valid_dependents(uid).count();
        let now = crate::api::clock::now();
        let observed = object.data["status"]["observedGeneration"].as_i64();
        let until_deadline = deadline.duration_since(now).unsigned_abs();
        let release = decide::release(now, deadline, left, meta.generation, observed);
        if release != Release::Now {
            self.barrier.kept(uid, false);
        }
        match release {
            Release::Now => {
                let verdict = self.barrier.through(cx, uid, target, false).await;
                let recheck = match &verdict {
                    Verdict::Pass => return self.release(uid, target, deleted_at, None).await,
                    Verdict::Held { since, .. } => barrier::recheck(since.elapsed()),
                    // The round queues it; the deadline bounds the wait should it never end.
                    Verdict::Round => until_deadline,
                };
                match decide::unproven(now, deadline, recheck) {
                    Unproven::TimedOut => {
                        let hold = match verdict {
                            Verdict::Held { hold, .. } => Some(hold),
                            _ => self.barrier.holding(uid),
                        };
                        let unproven = hold.map_or_else(
                            || "its read had not ended".to_owned(),
                            |hold| format!("it was waiting for {hold}"),
                        );
                        let left = format!(
                            "no dependent left that the graph knows of, and the release barrier could not confirm it: {unproven}"
                        );
                        self.release(uid, target, deleted_at, Some(left)).await
                    }
                    Unproven::LookAgain(after) => {
                        cx.queue.add_after(Work::SyncOwner(uid), after);
                        Ok(())
                    }
                }
            }
            Release::TimedOut => {
                if self.waves.abandon(cx, uid, target).await {
                    self.waves.delete_next(cx, uid, target).await;
                    // Behind them: they are deleted while it still waits.
                    cx.enqueue(Work::SyncOwner(uid));
                    return Ok(());
                }
                let left = cx.graph().valid_dependents(uid).count();
                let left = format!("{left} dependent(s) left");
                self.release(uid, target, deleted_at, Some(left)).await
            }
            Release::WaitForGeneration => {
                let recheck = GENERATION_RECHECK.min(until_deadline);
                cx.queue.add_after(Work::SyncOwner(uid), recheck);
                Ok(())
            }
            Release::Wait => {
                if !finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
                    self.waves.delete_next(cx, uid, target).await;
                }
                cx.queue.add_after(Work::SyncOwner(uid), until_deadline);
                Ok(())
            }
        }
    }

    /// The deadline in force for the owner `uid`, deleted at `deleted_at`: the one in memory
    /// (fixed earlier, or inherited) while it lies within bounds; otherwise the stored one
    /// within bounds, or a new one, which is then stored — best-effort.
    async fn deadline(
        &self,
        uid: Uid,
        target: &Target,
        object: &DynamicObject,
        deleted_at: Timestamp,
    ) -> Timestamp {
        let max = self.cx.config.timeouts.max;
        if let Some(at) = self.deadlines.within_bounds(uid, deleted_at, max) {
            return at;
        }
        let (count, names) = {
            let graph = self.cx.graph();
            let names: Vec<String> = graph
                .valid_dependents(uid)
                .take(NAMES_IN_EVENTS)
                .map(|(_, n, _)| n.name.to_string())
                .collect();
            (graph.transitive_dependents(uid), names)
        };
        let problems = crate::annotations::annotation_problems(
            object
                .metadata
                .annotations
                .iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.as_str())),
            Some(max),
        );
        if !problems.is_empty() {
            let note = problems.join("; ");
            tracing::warn!(owner = %target, "{note}");
            self.cx
                .event(target, EventType::Warning, Reason::InvalidAnnotation, note)
                .await;
        }
        let timeout = self
            .cx
            .config
            .timeouts
            .for_owner(count, annotation(object, TIMEOUT_ANNOTATION));
        let choice = decide::deadline(
            deleted_at,
            annotation(object, DEADLINE_ANNOTATION),
            timeout,
            max,
        );
        let at = choice.at();
        self.deadlines.fix(uid, at);
        if let Deadline::Stored(_) = choice {
            return at;
        }
        if let Deadline::Replaced { stored, .. } = &choice {
            let note = format!(
                "its {DEADLINE_ANNOTATION} {stored:?} lies outside [deletionTimestamp, deletionTimestamp + {max:?}] (copied from elsewhere?); waiting until {at} instead"
            );
            tracing::warn!(owner = %target, "{note}");
            self.cx
                .event(target, EventType::Warning, Reason::DeadlineReplaced, note)
                .await;
        }
        let patch = serde_json::json!({
            "metadata": { "annotations": { DEADLINE_ANNOTATION: at.to_string() } }
        });
        let stored = self
            .cx
            .act(
                Action::StoreDeadline,
                self.cx.cluster.merge_metadata(target, &patch),
            )
            .await;
        if let Err(ApiError::NotLeading { .. }) = stored {
            // Not stored because this replica may no longer lead: whoever leads next fixes it
            // and stores it; so does this one, should it lead again.
            self.deadlines.forget(uid);
            return at;
        }
        if let Err(err) = stored {
            tracing::warn!(owner = %target, %err, "could not store the deadline; it is kept in memory");
            let note = format!(
                "could not store the deadline {at} ({}, HTTP {}); it is kept in memory, and a restart of syncgc fixes it again from the deletionTimestamp",
                err.reason(),
                err.status().unwrap_or_default()
            );
            self.cx
                .event(target, EventType::Warning, Reason::DeadlineNotStored, note)
                .await;
        }
        let mut note = format!("waiting for {count} dependent(s) to be deleted, until {at}");
        if !names.is_empty() {
            note.push_str(&format!(": {}", names.join(", ")));
        }
        self.cx
            .event(target, EventType::Normal, Reason::Waiting, note)
            .await;
        at
    }

    /// Removes syncgc's finalizer from the owner: all its dependents gone, or `timed_out`
    /// with what was left.
    async fn release(
        &self,
        uid: Uid,
        target: &Target,
        deleted_at: Timestamp,
        timed_out: Option<String>,
    ) -> Result<(), ApiError> {
        self.cx
            .remove_finalizer(uid, target, SYNCHRONOUS_FINALIZER)
            .await?;
        self.deadlines.forget(uid);
        let waited = crate::api::clock::now()
            .duration_since(deleted_at)
            .as_secs_f64()
            .max(0.0);
        let outcome = if timed_out.is_some() {
            "timed_out"
        } else {
            "released"
        };
        self.cx
            .metrics
            .synchronous_deletion_duration
            .with_label_values(&[outcome])
            .observe(waited);
        if let Some(left) = timed_out {
            self.cx.metrics.timeouts.inc();
            tracing::warn!(owner = %target, waited, %left, "released by timeout");
            let note = format!("released after {waited:.0}s by its timeout, {left}");
            self.cx
                .event(target, EventType::Warning, Reason::TimedOut, note)
                .await;
        } else {
            tracing::info!(owner = %target, waited, "released: all dependents are gone");
            let note = format!("all dependents are gone after {waited:.1}s");
            self.cx
                .event(target, EventType::Normal, Reason::Released, note)
                .await;
        }
        Ok(())
    }

    /// Arms `uid`, a dependent whose owners wait for it synchronously (`references` and how
    /// it sees each, `owners`), so that they wait for its own dependents too: it inherits the
    /// earliest of their deadlines, stored with the finalizer where there is room.
    pub async fn arm_for_owners(
        &self,
        uid: Uid,
        target: &Target,
        references: &[OwnerReference],
        owners: &[OwnerState],
    ) -> Result<(), ApiError> {
        let cx = self.cx;
        let inherited = self.deadlines.inherit(
            uid,
            references
                .iter()
                .map(|r| Uid::parse(&r.uid))
                .zip(owners.iter().copied()),
        );
        let value = inherited.map(|d| d.to_string());
        let annotation = value.as_deref().map(|v| (DEADLINE_ANNOTATION, v));
        let marks = Marks {
            label: None,
            annotation,
        };
        // The collector arms dependents for its own cascade: no request's word to check.
        let claims = Claims::default();
        let add = |marks| {
            cx.act(
                Action::Arm,
                cx.cluster
                    .add_finalizer_with(target, SYNCHRONOUS_FINALIZER, marks, &claims),
            )
        };
        let armed = match add(marks).await {
            // No room for the annotation (or a policy refuses it): the deadline is kept in
            // memory only.
            Err(err) if annotation.is_some() && err.is_invalid() => add(Marks::default()).await,
            armed => armed,
        };
        match armed {
            Ok(_) | Err(ApiError::Terminating(_)) => {}
            Err(err) => return Err(err),
        }
        cx.enqueue(Work::AttemptToDelete(uid));
        Ok(())
    }

    /// An opted-in object found without the finalizer (created while the webhook was away).
    pub async fn arm(&self, uid: Uid) -> Result<(), ApiError> {
        let cx = self.cx;
        let Some((target, flags)) = cx.observed(uid) else {
            return Ok(());
        };
        if !flags.needs_arming() {
            return Ok(());
        }
        let Some(meta) = cx.cluster.get_metadata(&target).await? else {
            return Ok(());
        };
        if !Flags::of_object(&meta).needs_arming() {
            return Ok(());
        }
        match cx.act(Action::Arm, cx.cluster.arm(&target)).await {
            Ok(_) => {
                tracing::info!(object = %target, "armed an opted-in object found without the finalizer or its label");
                Ok(())
            }
            Err(ApiError::Terminating(_) | ApiError::Replaced(..)) => Ok(()),
            Err(err) => Err(err),
        }
    }
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
