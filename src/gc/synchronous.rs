//! The synchronous finalizer: an armed owner being deleted waits for its dependents under a
//! deadline, and is released (its `syncgc.io/synchronous` removed) when they are gone or the
//! deadline passes.
//!
//! The deadline is fixed in memory the first time the owner is looked at, counted from its
//! `deletionTimestamp`, and stored on it (`syncgc.io/deadline`) so that a restart keeps it —
//! best-effort: an owner whose annotations leave no room, or whose update a policy refuses,
//! waits and is released all the same. A stored deadline is honoured only within
//! `[deletionTimestamp, deletionTimestamp + --timeout-max]`. An intermediate object syncgc
//! arms inherits the deadline of the owner that waits for it (see
//! [`super::collector`]), so the owner's own timeout bounds the whole transitive wait.

use std::time::Duration;

use jiff::Timestamp;
use kube::api::DynamicObject;
use kube::runtime::events::EventType;

use super::Collector;
use super::barrier::{self, Verdict};
use super::collector::lock;
use super::decide::{self, Deadline, Release, Unproven};
use crate::api::{ApiError, Target};
use crate::graph::{Uid, Work};
use crate::names::{
    DEADLINE_ANNOTATION, ORPHAN_FINALIZER, SYNCHRONOUS_FINALIZER, TIMEOUT_ANNOTATION,
};

/// How soon an owner is looked at again while its controller has not observed its latest
/// generation.
const GENERATION_RECHECK: Duration = Duration::from_secs(1);
/// How many remaining dependents a `SyncGCWaiting` event names.
const NAMES_IN_EVENTS: usize = 5;

impl Collector {
    /// An armed owner being deleted: fix its deadline, delete its dependents, release it when
    /// they are gone or the deadline passes.
    pub(super) async fn sync_synchronous(&self, uid: Uid, target: &Target) -> Result<(), ApiError> {
        let Some(object) = self.cluster.get(target).await? else {
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
        let left = self.graph_read().valid_dependents(uid).count();
        let now = Timestamp::now();
        let observed = object.data["status"]["observedGeneration"].as_i64();
        let until_deadline = deadline.duration_since(now).unsigned_abs();
        let release = decide::release(now, deadline, left, meta.generation, observed);
        if release != Release::Now {
            self.barrier.kept(uid, false);
        }
        match release {
            Release::Now => {
                let verdict = self.through_barrier(uid, target, false).await;
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
                        self.queue.add_after(Work::SyncOwner(uid), after);
                        Ok(())
                    }
                }
            }
            Release::TimedOut => {
                if self.abandon_order(uid, target).await {
                    self.delete_dependents(uid, target).await;
                    // Behind them: they are deleted while it still waits.
                    self.enqueue(Work::SyncOwner(uid));
                    return Ok(());
                }
                let left = self.graph_read().valid_dependents(uid).count();
                let left = format!("{left} dependent(s) left");
                self.release(uid, target, deleted_at, Some(left)).await
            }
            Release::WaitForGeneration => {
                let recheck = GENERATION_RECHECK.min(until_deadline);
                self.queue.add_after(Work::SyncOwner(uid), recheck);
                Ok(())
            }
            Release::Wait => {
                if !finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
                    self.delete_dependents(uid, target).await;
                }
                self.queue.add_after(Work::SyncOwner(uid), until_deadline);
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
        let max = self.config.timeouts.max;
        let remembered = lock(&self.deadlines).get(&uid).copied();
        if let Some(at) = remembered
            && decide::within_bounds(deleted_at, at, max)
        {
            return at;
        }
        let (count, names) = {
            let graph = self.graph_read();
            let names: Vec<String> = graph
                .valid_dependents(uid)
                .take(NAMES_IN_EVENTS)
                .map(|(_, n, _)| n.name.to_string())
                .collect();
            (graph.transitive_dependents(uid), names)
        };
        let base =
            annotation(object, TIMEOUT_ANNOTATION).and_then(|t| crate::duration::parse(t).ok());
        let timeout = self.config.timeouts.for_owner(count, base);
        let choice = decide::deadline(
            deleted_at,
            annotation(object, DEADLINE_ANNOTATION),
            timeout,
            max,
        );
        let at = choice.at();
        lock(&self.deadlines).insert(uid, at);
        if let Deadline::Stored(_) = choice {
            return at;
        }
        if let Deadline::Replaced { stored, .. } = &choice {
            let note = format!(
                "its {DEADLINE_ANNOTATION} {stored:?} lies outside [deletionTimestamp, deletionTimestamp + {max:?}] (copied from elsewhere?); waiting until {at} instead"
            );
            tracing::warn!(owner = %target, "{note}");
            self.event(target, EventType::Warning, "SyncGCDeadlineReplaced", note)
                .await;
        }
        let patch = serde_json::json!({
            "metadata": { "annotations": { DEADLINE_ANNOTATION: at.to_string() } }
        });
        if let Err(err) = self
            .act(
                "store_deadline",
                self.cluster.merge_metadata(target, &patch),
            )
            .await
        {
            tracing::warn!(owner = %target, %err, "could not store the deadline; it is kept in memory");
            let note = format!(
                "could not store the deadline {at} ({}, HTTP {}); it is kept in memory, and a restart of syncgc fixes it again from the deletionTimestamp",
                err.reason(),
                err.status().unwrap_or_default()
            );
            self.event(target, EventType::Warning, "SyncGCDeadlineNotStored", note)
                .await;
        }
        let mut note = format!("waiting for {count} dependent(s) to be deleted, until {at}");
        if !names.is_empty() {
            note.push_str(&format!(": {}", names.join(", ")));
        }
        self.event(target, EventType::Normal, "SyncGCWaiting", note)
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
        self.finish(uid, target, SYNCHRONOUS_FINALIZER).await?;
        lock(&self.deadlines).remove(&uid);
        let waited = Timestamp::now()
            .duration_since(deleted_at)
            .as_secs_f64()
            .max(0.0);
        let outcome = if timed_out.is_some() {
            "timed_out"
        } else {
            "released"
        };
        self.metrics
            .synchronous_deletion_duration
            .with_label_values(&[outcome])
            .observe(waited);
        if let Some(left) = timed_out {
            self.metrics.timeouts.inc();
            tracing::warn!(owner = %target, waited, %left, "released by timeout");
            let note = format!("released after {waited:.0}s by its timeout, {left}");
            self.event(target, EventType::Warning, "SyncGCTimedOut", note)
                .await;
        } else {
            tracing::info!(owner = %target, waited, "released: all dependents are gone");
            let note = format!("all dependents are gone after {waited:.1}s");
            self.event(target, EventType::Normal, "SyncGCReleased", note)
                .await;
        }
        Ok(())
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
