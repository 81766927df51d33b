//! The workers: each takes an item from the queue, reads the graph (and the live object where
//! the graph cannot decide), and acts through the API seam. Decisions come from
//! [`super::decide`].

use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::DynamicObject;
use kube::runtime::events::{Event, EventType};

use super::Shared;
use super::absent;
use super::decide::{self, Attempt, Dependent, OwnerState, Propagation};
use super::watch::flags_of;
use crate::api::{ApiError, Changed, Target};
use crate::graph::{Coordinates, Flags, Graph, Mode, Node, Uid, Work};
use crate::names::{
    DEADLINE_ANNOTATION, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, SYNCHRONOUS_FINALIZER,
    TIMEOUT_ANNOTATION,
};

/// How soon an owner is looked at again while its controller has not observed its latest
/// generation.
const GENERATION_RECHECK: Duration = Duration::from_secs(1);
/// How many remaining dependents a `SyncGCWaiting` event names.
const NAMES_IN_EVENTS: usize = 5;
/// How many dependents of one orphaning owner are patched at once.
const ORPHAN_CONCURRENCY: usize = 16;
/// The controller named in syncgc's Events.
pub(super) const EVENT_REPORTER: &str = "syncgc";

/// What the graph alone says about a dependent.
enum Plan {
    /// Nothing to do.
    Done,
    /// Delete it, on the condition that it is still as the graph saw it.
    Delete {
        target: Target,
        propagation: Propagation,
        resource_version: u64,
    },
    /// The graph cannot decide (an owner it has not seen, or references to rewrite): read it.
    Live(Target),
}

impl Shared {
    /// Works on one item. `Err` of a retryable error queues it again with backoff.
    pub(super) async fn process(&self, work: Work) -> Result<(), ApiError> {
        match work {
            Work::SyncOwner(uid) => self.sync_owner(uid).await,
            Work::AttemptToDelete(uid) => self.attempt_to_delete(uid).await,
            Work::Orphan(uid) => self.orphan(uid).await,
            Work::Arm(uid) => self.arm(uid).await,
        }
    }

    /// The target of the graph node `uid`, if it is an object seen by a watch of a known
    /// resource, with its flags.
    fn observed(&self, uid: Uid) -> Option<(Target, Flags)> {
        let graph = self.graph_read();
        let node = graph.node(uid)?;
        Some((self.target_of(uid, node)?, node.flags))
    }

    fn target_of(&self, uid: Uid, node: &Node) -> Option<Target> {
        if node.is(Flags::VIRTUAL) {
            return None;
        }
        let resources = self.resources.read().unwrap_or_else(|e| e.into_inner());
        let resource = resources.get(node.resource?)?;
        Some(Target {
            resource: resource.api.clone(),
            namespace: node.namespace().map(str::to_owned),
            name: node.name.to_string(),
            uid: uid.to_string(),
        })
    }

    /// An owner being deleted that waits for its dependents: in foreground (standalone mode)
    /// and synchronously (armed), each with its own finalizer.
    async fn sync_owner(&self, uid: Uid) -> Result<(), ApiError> {
        let Some((target, flags)) = self.observed(uid) else {
            return Ok(());
        };
        if !flags.contains(Flags::DELETING) {
            return Ok(());
        }
        let foreground = if self.mode() == Mode::Standalone && flags.contains(Flags::FOREGROUND) {
            self.sync_foreground(uid, &target).await
        } else {
            Ok(())
        };
        let synchronous = if flags.contains(Flags::ARMED) {
            self.sync_synchronous(uid, &target).await
        } else {
            Ok(())
        };
        foreground.and(synchronous)
    }

    /// The dependents of `uid` that are still to be deleted (not being deleted, and not just
    /// deleted by this collector).
    fn to_delete(&self, uid: Uid) -> Vec<Uid> {
        let graph = self.graph_read();
        graph
            .valid_dependents(uid)
            .filter(|(d, node, _)| !node.is(Flags::DELETING) && !self.recently_deleted(*d))
            .map(|(d, ..)| d)
            .collect()
    }

    /// `processDeletingDependentsItem`: deletes every dependent; removes `foregroundDeletion`
    /// once no dependent with `blockOwnerDeletion` is left.
    async fn sync_foreground(&self, uid: Uid, target: &Target) -> Result<(), ApiError> {
        for dependent in self.to_delete(uid) {
            self.enqueue(Work::AttemptToDelete(dependent));
        }
        let blocking = self
            .graph_read()
            .valid_dependents(uid)
            .filter(|(.., link)| link.block_owner_deletion)
            .count();
        if blocking > 0 {
            return Ok(());
        }
        tracing::debug!(owner = %target, "no blocking dependent left: removing foregroundDeletion");
        self.finish(target, FOREGROUND_FINALIZER).await
    }

    /// Removes a finalizer whose work is done, counting it.
    async fn finish(&self, target: &Target, finalizer: &'static str) -> Result<(), ApiError> {
        let changed = self
            .act(
                "remove_finalizer",
                self.cluster.remove_finalizer(target, finalizer),
            )
            .await?;
        if changed == Changed::Yes {
            self.metrics
                .gc_finalizers_removed
                .with_label_values(&[finalizer])
                .inc();
        }
        Ok(())
    }

    /// An armed owner being deleted: fix its deadline, delete its dependents, release it when
    /// they are gone or the deadline passes.
    async fn sync_synchronous(&self, uid: Uid, target: &Target) -> Result<(), ApiError> {
        let Some(object) = self.cluster.get(target).await? else {
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
            None => self.fix_deadline(uid, target, &object, deleted_at).await?,
        };
        let now = Timestamp::now();
        if now >= deadline {
            return self.release(uid, target, deleted_at, true).await;
        }

        let left = self.graph_read().valid_dependents(uid).count();
        if left == 0 {
            let generation = meta.generation;
            let observed = object.data["status"]["observedGeneration"].as_i64();
            if !decide::generation_caught_up(generation, observed) {
                self.queue
                    .add_after(Work::SyncOwner(uid), GENERATION_RECHECK);
                return Ok(());
            }
            return self.release(uid, target, deleted_at, false).await;
        }
        if !finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
            for dependent in self.to_delete(uid) {
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
                .valid_dependents(uid)
                .take(NAMES_IN_EVENTS)
                .map(|(_, n, _)| n.name.to_string())
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
        self.event(target, EventType::Normal, "SyncGCWaiting", note)
            .await;
        Ok(deadline)
    }

    /// Removes syncgc's finalizer from the owner.
    async fn release(
        &self,
        uid: Uid,
        target: &Target,
        deleted_at: Timestamp,
        timed_out: bool,
    ) -> Result<(), ApiError> {
        self.finish(target, SYNCHRONOUS_FINALIZER).await?;
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
            let left = self.graph_read().valid_dependents(uid).count();
            tracing::warn!(owner = %target, waited, left, "released by timeout");
            let note =
                format!("released after {waited:.0}s by its timeout, {left} dependent(s) left");
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

    /// `attemptToDeleteItem`: a dependent whose owners may be gone or waiting for it. Decided
    /// from the graph when it has seen every owner (then deleted with the uid and
    /// resourceVersion it saw as preconditions, so that a change in between stops the
    /// deletion), from live reads otherwise.
    async fn attempt_to_delete(&self, uid: Uid) -> Result<(), ApiError> {
        if self.recently_deleted(uid) {
            return Ok(());
        }
        let plan = {
            let graph = self.graph_read();
            match graph.node(uid) {
                Some(node) => self.plan(&graph, uid, node),
                None => Plan::Done,
            }
        };
        match plan {
            Plan::Done => Ok(()),
            Plan::Delete {
                target,
                propagation,
                resource_version,
            } => {
                self.delete_dependent(uid, &target, propagation, Some(resource_version))
                    .await
            }
            Plan::Live(target) => self.attempt_to_delete_live(uid, &target).await,
        }
    }

    fn plan(&self, graph: &Graph, uid: Uid, node: &Node) -> Plan {
        if node.is(Flags::DELETING) {
            return Plan::Done;
        }
        let Some(target) = self.target_of(uid, node) else {
            return Plan::Done;
        };
        let mut owners = Vec::with_capacity(node.owners.len());
        for link in node.owners.iter() {
            match graph.node(link.uid) {
                Some(owner) if owner.seen() && owner.is_owner_through(node, link) => {
                    owners.push(state_of(owner.flags));
                }
                _ => return Plan::Live(target),
            }
        }
        match decide::attempt_to_delete(graph.mode(), &owners, dependent_of(graph, uid, node.flags))
        {
            Attempt::Wait => Plan::Done,
            Attempt::Delete {
                propagation,
                unblock,
            } if unblock.is_empty() && node.resource_version != 0 => Plan::Delete {
                target,
                propagation,
                resource_version: node.resource_version,
            },
            _ => Plan::Live(target),
        }
    }

    async fn attempt_to_delete_live(&self, uid: Uid, target: &Target) -> Result<(), ApiError> {
        let Some(meta) = self.cluster.get_metadata(target).await? else {
            return Ok(());
        };
        if meta.deletion_timestamp.is_some() {
            return Ok(());
        }
        let references = meta.owner_references.clone().unwrap_or_default();
        let mut owners = Vec::with_capacity(references.len());
        for reference in &references {
            owners.push(self.owner_state(reference, target).await?);
        }
        let (mode, dependent) = {
            let graph = self.graph_read();
            (graph.mode(), dependent_of(&graph, uid, flags_of(&meta)))
        };
        let uids = |indices: &[usize]| -> Vec<String> {
            indices.iter().map(|i| references[*i].uid.clone()).collect()
        };
        match decide::attempt_to_delete(mode, &owners, dependent) {
            Attempt::Wait => Ok(()),
            Attempt::Keep { drop } => {
                tracing::debug!(dependent = %target, owners = ?uids(&drop), "keeping it: dropping references");
                self.act(
                    "remove_owner_references",
                    self.cluster
                        .remove_owner_references(target, &references, &uids(&drop)),
                )
                .await
            }
            Attempt::Arm => {
                match self
                    .act(
                        "arm",
                        self.cluster.add_finalizer(target, SYNCHRONOUS_FINALIZER),
                    )
                    .await
                {
                    Ok(_) | Err(ApiError::Terminating(_)) => {}
                    Err(err) => return Err(err),
                }
                self.enqueue(Work::AttemptToDelete(uid));
                Ok(())
            }
            Attempt::Delete {
                propagation,
                unblock,
            } => {
                let mut resource_version = meta.resource_version.clone();
                if !unblock.is_empty() {
                    tracing::debug!(dependent = %target, "a possible cycle: unblocking its references");
                    self.act(
                        "unblock_owner_references",
                        self.cluster
                            .unblock_owner_references(target, &references, &uids(&unblock)),
                    )
                    .await?;
                    resource_version = None;
                }
                let resource_version = resource_version.and_then(|v| v.parse().ok());
                self.delete_dependent(uid, target, propagation, resource_version)
                    .await
            }
        }
    }

    async fn delete_dependent(
        &self,
        uid: Uid,
        target: &Target,
        propagation: Propagation,
        resource_version: Option<u64>,
    ) -> Result<(), ApiError> {
        let deleted = self
            .act(
                "delete",
                self.cluster
                    .delete(target, propagation, resource_version.map(|v| v.to_string())),
            )
            .await?;
        self.note_deleted(uid);
        if deleted {
            tracing::debug!(object = %target, propagation = propagation.as_str(), "deleted");
            self.metrics
                .gc_deletions
                .with_label_values(&[propagation.as_str()])
                .inc();
        }
        Ok(())
    }

    /// The state of the owner `reference` of `dependent` names: from the graph where it has
    /// seen that owner, from a live read (or the cache of absent owners) where not.
    async fn owner_state(
        &self,
        reference: &OwnerReference,
        dependent: &Target,
    ) -> Result<OwnerState, ApiError> {
        let uid = Uid::parse(&reference.uid);
        let coordinates = Coordinates::of(&reference.api_version, &reference.kind, &reference.name);
        let elsewhere = {
            let graph = self.graph_read();
            match graph.node(uid) {
                Some(owner) if owner.seen() && owner.coordinates == coordinates => {
                    if owner.in_reach_of(dependent.namespace.as_deref()) {
                        return Ok(state_of(owner.flags));
                    }
                    owner.namespace().map(str::to_owned)
                }
                _ => None,
            }
        };
        let resolved = {
            let resources = self.resources.read().unwrap_or_else(|e| e.into_inner());
            resources
                .by_kind(&reference.api_version, &reference.kind)
                .map(|(_, r)| (r.api.clone(), r.namespaced))
        };
        let Some((api, namespaced)) = resolved else {
            return Err(ApiError::UnknownKind {
                api_version: reference.api_version.clone(),
                kind: reference.kind.clone(),
            });
        };
        if namespaced && dependent.namespace.is_none() {
            let note = format!(
                "ownerRef [{}/{}, name: {}, uid: {}] names a namespaced owner; a cluster-scoped object cannot have one, so it is never collected",
                reference.api_version, reference.kind, reference.name, reference.uid
            );
            self.invalid_namespace(dependent, note).await;
            return Ok(OwnerState::Unresolvable);
        }
        if let Some(namespace) = elsewhere {
            let note = format!(
                "ownerRef [{}/{}, name: {}, uid: {}] does not exist in namespace {:?} (an object with that uid lives in {namespace:?})",
                reference.api_version,
                reference.kind,
                reference.name,
                reference.uid,
                dependent.namespace.as_deref().unwrap_or_default()
            );
            self.invalid_namespace(dependent, note).await;
        }
        let key = absent::Coordinates {
            namespace: if namespaced {
                dependent.namespace.clone()
            } else {
                None
            },
            group: api.group.clone(),
            kind: api.kind.clone(),
            name: reference.name.clone(),
            uid: reference.uid.clone(),
        };
        if self.absent_owners().contains(&key) {
            return Ok(OwnerState::Absent);
        }
        let owner = Target {
            resource: api,
            namespace: key.namespace.clone(),
            name: reference.name.clone(),
            uid: reference.uid.clone(),
        };
        let Some(meta) = self.cluster.get_metadata(&owner).await? else {
            self.absent_owners().insert(key);
            return Ok(OwnerState::Absent);
        };
        Ok(state_of(flags_of(&meta)))
    }

    async fn invalid_namespace(&self, dependent: &Target, note: String) {
        tracing::warn!(%dependent, "{note}");
        self.event(
            dependent,
            EventType::Warning,
            "OwnerRefInvalidNamespace",
            note,
        )
        .await;
    }

    /// `attemptToOrphan`: an owner being deleted with `orphan` (standalone mode). Removes its
    /// dependents' references to it, then the finalizer.
    async fn orphan(&self, uid: Uid) -> Result<(), ApiError> {
        let Some((target, flags)) = self.observed(uid) else {
            return Ok(());
        };
        if !flags.contains(Flags::DELETING | Flags::ORPHAN) {
            return Ok(());
        }
        let dependents: Vec<Target> = {
            let graph = self.graph_read();
            graph
                .valid_dependents(uid)
                .filter_map(|(d, node, _)| self.target_of(d, node))
                .collect()
        };
        let owner = [target.uid.clone()];
        let owner = &owner;
        let results: Vec<Result<(), ApiError>> = futures::stream::iter(dependents)
            .map(|dependent| async move {
                let Some(meta) = self.cluster.get_metadata(&dependent).await? else {
                    return Ok(());
                };
                let references = meta.owner_references.unwrap_or_default();
                self.act(
                    "remove_owner_references",
                    self.cluster
                        .remove_owner_references(&dependent, &references, owner),
                )
                .await
            })
            .buffer_unordered(ORPHAN_CONCURRENCY)
            .collect()
            .await;
        results.into_iter().collect::<Result<(), _>>()?;
        tracing::debug!(owner = %target, "dependents orphaned: removing orphan");
        self.finish(&target, ORPHAN_FINALIZER).await
    }

    /// An opted-in object found without the finalizer (created while the webhook was away).
    async fn arm(&self, uid: Uid) -> Result<(), ApiError> {
        let Some((target, flags)) = self.observed(uid) else {
            return Ok(());
        };
        if !flags.contains(Flags::OPTED_IN) || flags.contains(Flags::ARMED) {
            return Ok(());
        }
        let Some(meta) = self.cluster.get_metadata(&target).await? else {
            return Ok(());
        };
        let flags = flags_of(&meta);
        if !flags.contains(Flags::OPTED_IN) || flags.contains(Flags::DELETING) {
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

    async fn event(&self, target: &Target, type_: EventType, reason: &str, note: String) {
        let reference = ObjectReference {
            api_version: Some(target.resource.api_version.clone()),
            kind: Some(target.resource.kind.clone()),
            name: Some(target.name.clone()),
            namespace: target.namespace.clone(),
            uid: Some(target.uid.clone()),
            resource_version: None,
            field_path: None,
        };
        let action = if reason.starts_with("SyncGC") {
            "SynchronousDeletion"
        } else {
            "GarbageCollection"
        };
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        let published = if reference.namespace.is_some() {
            self.recorder.publish(&event, &reference).await
        } else {
            self.cluster_scoped_event(event, reference).await
        };
        if let Err(err) = published {
            tracing::debug!(%err, reason, "could not record an event");
        }
    }

    /// An Event about a cluster-scoped object: the events.k8s.io API of Kubernetes before
    /// 1.22 only takes those in `kube-system`, where the recorder does not put them.
    async fn cluster_scoped_event(
        &self,
        event: Event,
        regarding: ObjectReference,
    ) -> Result<(), kube::Error> {
        use k8s_openapi::api::events::v1::Event as K8sEvent;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let now = Timestamp::now();
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or("syncgc"),
            now.as_nanosecond()
        );
        let event = K8sEvent {
            action: Some(event.action),
            reason: Some(event.reason),
            note: event.note,
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            metadata: ObjectMeta {
                name: Some(name),
                ..Default::default()
            },
            reporting_controller: Some(EVENT_REPORTER.to_owned()),
            reporting_instance: Some(
                std::env::var("POD_NAME").unwrap_or_else(|_| EVENT_REPORTER.to_owned()),
            ),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            ..Default::default()
        };
        kube::Api::<K8sEvent>::namespaced(self.cluster.client.clone(), "kube-system")
            .create(&Default::default(), &event)
            .await
            .map(drop)
    }
}

/// What the decision needs of a dependent with `flags`: its own, and its dependents' from the
/// graph.
fn dependent_of(graph: &Graph, uid: Uid, flags: Flags) -> Dependent {
    let mut has_dependents = false;
    let mut dependent_waits = false;
    for (_, dependent, _) in graph.valid_dependents(uid) {
        has_dependents = true;
        dependent_waits |= dependent.waiting_in_foreground() || dependent.waiting_synchronously();
    }
    Dependent {
        has_dependents,
        dependent_waits,
        armed: flags.contains(Flags::ARMED),
        own: Propagation::from_finalizers(
            flags.contains(Flags::ORPHAN),
            flags.contains(Flags::FOREGROUND),
        ),
    }
}

/// How a dependent sees an owner with `flags` (see [`OwnerState`]).
fn state_of(flags: Flags) -> OwnerState {
    if flags.contains(Flags::GONE) {
        OwnerState::Absent
    } else if !flags.contains(Flags::DELETING) || flags.contains(Flags::ORPHAN) {
        OwnerState::Solid
    } else if flags.contains(Flags::ARMED) {
        OwnerState::WaitingSynchronous
    } else if flags.contains(Flags::FOREGROUND) {
        OwnerState::WaitingForeground
    } else {
        OwnerState::Solid
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
