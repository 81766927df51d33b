//! The workers: each takes an item from the queue, reads the graph and the live object, and
//! acts through the API seam. Decisions come from [`super::decide`].

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use kube::runtime::events::{Event, EventType};

use super::Shared;
use super::decide::{self, Attempt, OwnerState};
use crate::api::{ApiError, Target};
use crate::graph::{Flags, Uid, Work};
use crate::names::{
    DEADLINE_ANNOTATION, ORPHAN_FINALIZER, SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER,
    TIMEOUT_ANNOTATION,
};

/// How soon an owner is looked at again while its controller has not observed its latest
/// generation.
const GENERATION_RECHECK: Duration = Duration::from_secs(1);
/// How many remaining dependents a `SyncGCWaiting` event names.
const NAMES_IN_EVENTS: usize = 5;

impl Shared {
    /// Works on one item. `Err` of a retryable error queues it again with backoff.
    pub(super) async fn process(&self, work: Work) -> Result<(), ApiError> {
        match work {
            Work::SyncOwner(uid) => self.sync_owner(uid).await,
            Work::AttemptToDelete(uid) => self.attempt_to_delete(uid).await,
            Work::Arm(uid) => self.arm(uid).await,
        }
    }

    /// The target of the graph node `uid`, if it is an observed object of a known resource.
    fn target(&self, uid: Uid) -> Option<(Target, Flags, bool)> {
        let graph = self.graph.read().unwrap_or_else(|e| e.into_inner());
        let node = graph.node(uid)?;
        let resources = self.resources.read().unwrap_or_else(|e| e.into_inner());
        let resource = resources.get(node.resource?)?;
        Some((
            Target {
                resource: resource.api.clone(),
                namespace: node.namespace.as_deref().map(str::to_owned),
                name: node.name.to_string(),
                uid: uid.to_string(),
            },
            node.flags,
            !node.dependents.is_empty(),
        ))
    }

    /// An armed owner being deleted: fix its deadline, delete its dependents, release it when
    /// they are gone or the deadline passes.
    async fn sync_owner(&self, uid: Uid) -> Result<(), ApiError> {
        let Some((target, flags, _)) = self.target(uid) else {
            return Ok(());
        };
        if !flags.contains(Flags::ARMED | Flags::DELETING) {
            return Ok(());
        }
        let Some(object) = self.cluster.get(&target).await? else {
            self.stop_waiting(uid);
            return Ok(());
        };
        let meta = &object.metadata;
        let finalizers = meta.finalizers.as_deref().unwrap_or_default();
        let Some(deleted_at) = meta.deletion_timestamp.as_ref().map(|t| t.0) else {
            return Ok(());
        };
        if !finalizers.iter().any(|f| f == SYNCHRONOUS_FINALIZER) {
            self.stop_waiting(uid);
            return Ok(());
        }
        self.start_waiting(uid, deleted_at);

        let deadline = match annotation(&object, DEADLINE_ANNOTATION).and_then(|d| d.parse().ok()) {
            Some(deadline) => deadline,
            None => self.fix_deadline(uid, &target, &object, deleted_at).await?,
        };
        let now = Timestamp::now();
        if now >= deadline {
            return self.release(uid, &target, &object, deleted_at, true).await;
        }

        let dependents = self.graph_read().dependents(uid).to_vec();
        if dependents.is_empty() {
            let generation = meta.generation;
            let observed = object.data["status"]["observedGeneration"].as_i64();
            if !decide::generation_caught_up(generation, observed) {
                self.queue
                    .add_after(Work::SyncOwner(uid), GENERATION_RECHECK);
                return Ok(());
            }
            return self.release(uid, &target, &object, deleted_at, false).await;
        }
        if !finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
            for dependent in dependents {
                self.enqueue(Work::AttemptToDelete(dependent));
            }
        }
        let left = deadline.duration_since(now).unsigned_abs();
        self.queue.add_after(Work::SyncOwner(uid), left);
        Ok(())
    }

    /// Stores the owner's deadline on it (so that a restart keeps it) and says so in an Event.
    async fn fix_deadline(
        &self,
        uid: Uid,
        target: &Target,
        object: &DynamicObject,
        deleted_at: Timestamp,
    ) -> Result<Timestamp, ApiError> {
        let (count, names) = {
            let graph = self.graph_read();
            let names: Vec<String> = graph
                .dependents(uid)
                .iter()
                .filter_map(|d| graph.node(*d))
                .take(NAMES_IN_EVENTS)
                .map(|n| n.name.to_string())
                .collect();
            (graph.transitive_dependents(uid), names)
        };
        let base =
            annotation(object, TIMEOUT_ANNOTATION).and_then(|t| crate::duration::parse(t).ok());
        let timeout = self.config.timeouts.for_owner(count, base);
        let deadline = deleted_at
            .checked_add(
                jiff::SignedDuration::try_from(timeout).unwrap_or(jiff::SignedDuration::MAX),
            )
            .unwrap_or(Timestamp::MAX);
        let patch = serde_json::json!({
            "metadata": { "annotations": { DEADLINE_ANNOTATION: deadline.to_string() } }
        });
        self.act("fix_deadline", self.cluster.merge_metadata(target, &patch))
            .await?;
        let mut note = format!("waiting for {count} dependent(s) to be deleted, until {deadline}");
        if !names.is_empty() {
            note.push_str(&format!(": {}", names.join(", ")));
        }
        self.event(object, EventType::Normal, "SyncGCWaiting", note)
            .await;
        Ok(deadline)
    }

    /// Removes syncgc's finalizer from the owner.
    async fn release(
        &self,
        uid: Uid,
        target: &Target,
        object: &DynamicObject,
        deleted_at: Timestamp,
        timed_out: bool,
    ) -> Result<(), ApiError> {
        self.act(
            "release",
            self.cluster.remove_finalizer(target, SYNCHRONOUS_FINALIZER),
        )
        .await?;
        let waited = Timestamp::now()
            .duration_since(deleted_at)
            .as_secs_f64()
            .max(0.0);
        let outcome = if timed_out { "timed_out" } else { "released" };
        self.metrics
            .synchronous_deletion_duration
            .with_label_values(&[outcome])
            .observe(waited);
        self.stop_waiting(uid);
        if timed_out {
            self.metrics.timeouts.inc();
            let left = self.graph_read().dependents(uid).len();
            tracing::warn!(owner = %target, waited, left, "released by timeout");
            let note =
                format!("released after {waited:.0}s by its timeout, {left} dependent(s) left");
            self.event(object, EventType::Warning, "SyncGCTimedOut", note)
                .await;
        } else {
            tracing::info!(owner = %target, waited, "released: all dependents are gone");
            let note = format!("all dependents are gone after {waited:.1}s");
            self.event(object, EventType::Normal, "SyncGCReleased", note)
                .await;
        }
        Ok(())
    }

    /// A dependent of a waiting owner: delete it, or drop its references to waiting owners
    /// when another owner keeps it alive.
    async fn attempt_to_delete(&self, uid: Uid) -> Result<(), ApiError> {
        let Some((target, flags, has_dependents)) = self.target(uid) else {
            return Ok(());
        };
        if flags.contains(Flags::DELETING) {
            return Ok(());
        }
        let Some(meta) = self.cluster.get_metadata(&target).await? else {
            return Ok(());
        };
        if meta.deletion_timestamp.is_some() {
            return Ok(());
        }
        let references = meta.owner_references.clone().unwrap_or_default();
        let mut owners = Vec::with_capacity(references.len());
        for reference in &references {
            owners.push(
                self.owner_state(reference, target.namespace.as_deref())
                    .await?,
            );
        }
        let armed = meta
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == SYNCHRONOUS_FINALIZER);
        match decide::attempt_to_delete(&owners, has_dependents, armed) {
            Attempt::Wait => Ok(()),
            Attempt::Keep { drop } => {
                let uids: Vec<String> = drop.iter().map(|i| references[*i].uid.clone()).collect();
                self.act(
                    "remove_owner_references",
                    self.cluster
                        .remove_owner_references(&target, &references, &uids),
                )
                .await
            }
            Attempt::Delete { arm_first: true } => {
                match self
                    .act(
                        "arm",
                        self.cluster.add_finalizer(&target, SYNCHRONOUS_FINALIZER),
                    )
                    .await
                {
                    Ok(_) | Err(ApiError::Terminating(_)) => {}
                    Err(err) => return Err(err),
                }
                self.enqueue(Work::AttemptToDelete(uid));
                Ok(())
            }
            Attempt::Delete { arm_first: false } => self
                .act(
                    "delete",
                    self.cluster.delete(&target, meta.resource_version),
                )
                .await
                .map(drop),
        }
    }

    /// The state of the owner `reference` names, from the graph where it has seen the owner,
    /// from a live read where not (the owner may not have been seen yet).
    async fn owner_state(
        &self,
        reference: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
        namespace: Option<&str>,
    ) -> Result<OwnerState, ApiError> {
        let uid = Uid::parse(&reference.uid);
        if let Some(node) = self.graph_read().node(uid)
            && !node.is(Flags::VIRTUAL)
        {
            return Ok(state_of(node.flags));
        }
        let resolved = {
            let resources = self.resources.read().unwrap_or_else(|e| e.into_inner());
            resources
                .by_kind(&reference.api_version, &reference.kind)
                .map(|(_, r)| (r.api.clone(), r.namespaced))
        };
        let Some((api, namespaced)) = resolved else {
            // A kind this apiserver does not serve: it cannot be verified, so it is not
            // taken for absent.
            return Ok(OwnerState::Solid);
        };
        let owner = Target {
            resource: api,
            namespace: if namespaced {
                namespace.map(str::to_owned)
            } else {
                None
            },
            name: reference.name.clone(),
            uid: reference.uid.clone(),
        };
        let Some(meta) = self.cluster.get_metadata(&owner).await? else {
            return Ok(OwnerState::Absent);
        };
        let finalizers = meta.finalizers.as_deref().unwrap_or_default();
        let has = |f: &str| finalizers.iter().any(|x| x == f);
        Ok(state_of(
            Flags::empty()
                .with(Flags::DELETING, meta.deletion_timestamp.is_some())
                .with(Flags::ARMED, has(SYNCHRONOUS_FINALIZER))
                .with(Flags::ORPHAN, has(ORPHAN_FINALIZER)),
        ))
    }

    /// An opted-in object found without the finalizer (created while the webhook was away).
    async fn arm(&self, uid: Uid) -> Result<(), ApiError> {
        let Some((target, flags, _)) = self.target(uid) else {
            return Ok(());
        };
        if !flags.contains(Flags::OPTED_IN) || flags.contains(Flags::ARMED) {
            return Ok(());
        }
        let Some(meta) = self.cluster.get_metadata(&target).await? else {
            return Ok(());
        };
        let opted_in = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(SYNCHRONOUS_ANNOTATION))
            .is_some_and(|v| v == "true");
        if !opted_in || meta.deletion_timestamp.is_some() {
            return Ok(());
        }
        match self
            .act(
                "arm",
                self.cluster.add_finalizer(&target, SYNCHRONOUS_FINALIZER),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(object = %target, "armed an opted-in object found without the finalizer");
                Ok(())
            }
            Err(ApiError::Terminating(_) | ApiError::Replaced(..)) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Runs an action, counting it by result.
    async fn act<T>(
        &self,
        action: &'static str,
        call: impl Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        let result = call.await;
        let outcome = if result.is_ok() { "ok" } else { "error" };
        self.metrics
            .gc_actions
            .with_label_values(&[action, outcome])
            .inc();
        result
    }

    async fn event(&self, object: &DynamicObject, type_: EventType, reason: &str, note: String) {
        let Some(types) = &object.types else { return };
        let reference = ObjectReference {
            api_version: Some(types.api_version.clone()),
            kind: Some(types.kind.clone()),
            name: object.metadata.name.clone(),
            namespace: object.metadata.namespace.clone(),
            uid: object.metadata.uid.clone(),
            resource_version: object.metadata.resource_version.clone(),
            field_path: None,
        };
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "SynchronousDeletion".to_owned(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, &reference).await {
            tracing::debug!(%err, reason, "could not record an event");
        }
    }
}

fn state_of(flags: Flags) -> OwnerState {
    if !flags.contains(Flags::DELETING) {
        OwnerState::Solid
    } else if flags.contains(Flags::ORPHAN) {
        OwnerState::Orphaning
    } else if flags.contains(Flags::ARMED) {
        OwnerState::WaitingSynchronous
    } else {
        OwnerState::Deleting
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
