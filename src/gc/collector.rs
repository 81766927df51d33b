//! The collector: the state its workers share, the worker loop, and the actions (upstream's
//! `attemptToDeleteItem`, `attemptToOrphan`, `processDeletingDependentsItem`, and arming the
//! opted-in objects found unarmed). Each worker takes an item from the queue, reads the graph
//! (and the live object where the graph cannot decide), asks [`super::decide`], and acts
//! through the API seam, here: arming, deleting, orphaning, fixing and storing an owner's
//! deadline, releasing it. The rules are [`super::decide`]'s; the parts keep their own state
//! and answer from it: the deadlines in force in [`super::synchronous`], the deletion order in
//! [`super::order`], the release barrier in [`super::barrier`].

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::runtime::events::EventType;
use tokio::sync::watch as signal;

use super::GcConfig;
use super::absent::{self, AbsentOwners};
use super::barrier::{self, Barrier, Hold, Owner, Reads, Verdict};
use super::decide::{
    self, Attempt, Deadline, Dependent, OwnerState, Plan, Propagation, Release, Unproven,
};
use super::discovery::{Rediscovery, Resources};
use super::order::{Abandoned, Orders};
use super::queue::WorkQueue;
use super::synchronous::{self, Deadlines};
use crate::api::{ApiError, Changed, Cluster, Marks, Target};
use crate::graph::{Flags, Graph, Mode, Node, Reader, Uid, Work};
use crate::metrics::Metrics;
use crate::names::{
    DEADLINE_ANNOTATION, DELETION_ORDER_ANNOTATION, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Reason,
    SYNCHRONOUS_FINALIZER, TIMEOUT_ANNOTATION,
};

/// How many dependents of one orphaning owner are patched at once.
const ORPHAN_CONCURRENCY: usize = 16;
/// How many absent owners are remembered.
const ABSENT_OWNERS: usize = 1024;
/// How long an object this collector deleted is not looked at again while no watch reports it
/// gone (it may be held by finalizers, or the watch may lag).
const DELETED_GRACE: Duration = Duration::from_secs(30);

/// What the collector's tasks share. The graph has one writer (the graph builder, which holds
/// its [`crate::graph::Writer`]); the workers only read it.
pub struct Collector {
    graph: Reader,
    resources: Arc<RwLock<Resources>>,
    pub queue: WorkQueue<Work>,
    pub(super) cluster: Cluster,
    pub(super) metrics: Metrics,
    pub(super) config: GcConfig,
    /// Owners verified absent by a live read.
    absent: Mutex<AbsentOwners>,
    /// Objects this collector deleted that no watch has reported gone yet, with when.
    deleted: Mutex<HashMap<Uid, Instant>>,
    /// How far each waiting owner's deletion order has gone.
    pub(super) orders: Mutex<Orders>,
    /// The deadlines in force for waiting owners (see [`super::synchronous`]).
    pub(super) deadlines: Deadlines,
    /// Asks the graph builder for a discovery.
    pub(super) rediscovery: Arc<Rediscovery>,
    pub(super) barrier: Barrier,
    /// How many discoveries changed what is served (0 before the first).
    discoveries: tokio::sync::watch::Sender<u64>,
}

impl Collector {
    pub fn new(graph: Reader, cluster: Cluster, metrics: Metrics, config: GcConfig) -> Self {
        let resources = Arc::<RwLock<Resources>>::default();
        let rediscovery = Arc::<Rediscovery>::default();
        let barrier = Barrier::new(
            config.barrier,
            Reads {
                cluster: cluster.clone(),
                graph: graph.clone(),
                resources: resources.clone(),
                rediscovery: rediscovery.clone(),
                metrics: metrics.clone(),
            },
        );
        Self {
            graph,
            resources,
            queue: WorkQueue::default(),
            cluster,
            metrics,
            absent: Mutex::new(AbsentOwners::new(ABSENT_OWNERS)),
            deleted: Mutex::default(),
            orders: Mutex::default(),
            deadlines: Deadlines::default(),
            rediscovery,
            barrier,
            discoveries: tokio::sync::watch::Sender::new(0),
            config,
        }
    }

    pub fn graph_read(&self) -> RwLockReadGuard<'_, Graph> {
        self.graph.read()
    }

    pub fn resources(&self) -> RwLockReadGuard<'_, Resources> {
        self.resources.read()
    }

    /// The table of resources, shared: to name the kinds of the graph's objects elsewhere.
    pub fn resource_table(&self) -> Arc<RwLock<Resources>> {
        self.resources.clone()
    }

    /// Follows how many discoveries changed what is served (the resources or the groups
    /// that fail); 0 until the first discovery.
    pub fn discoveries(&self) -> tokio::sync::watch::Receiver<u64> {
        self.discoveries.subscribe()
    }

    pub(super) fn discovered(&self) {
        self.discoveries.send_modify(|n| *n += 1);
    }

    pub(super) fn resources_write(&self) -> RwLockWriteGuard<'_, Resources> {
        self.resources.write()
    }

    pub fn mode(&self) -> Mode {
        self.graph_read().mode()
    }

    pub(super) fn enqueue(&self, work: Work) {
        self.count_add(work);
        self.queue.add(work);
    }

    /// Queues `work` ahead of the work [`Collector::enqueue`] queued.
    pub(super) fn enqueue_first(&self, work: Work) {
        self.count_add(work);
        self.queue.add_first(work);
    }

    fn count_add(&self, work: Work) {
        self.metrics
            .queue_adds
            .with_label_values(&[work.name()])
            .inc();
    }

    fn note_deleted(&self, uid: Uid) {
        self.deleted.lock().insert(uid, Instant::now());
    }

    pub(super) fn recently_deleted(&self, uid: Uid) -> bool {
        self.deleted
            .lock()
            .get(&uid)
            .is_some_and(|at| at.elapsed() < DELETED_GRACE)
    }

    /// Forgets that this collector deleted `uid`: a watch reported it gone.
    pub(super) fn gone(&self, uid: Uid) {
        self.deleted.lock().remove(&uid);
    }

    /// Refreshes the gauges that describe the graph and the waiting owners (from the graph
    /// alone), and forgets what no longer matters.
    pub(super) fn refresh_gauges(&self) {
        let now = crate::api::clock::now().as_second();
        let (observed, virtual_nodes, waiting, oldest) = {
            let graph = self.graph_read();
            let (observed, virtual_nodes) = graph.counts();
            let mut waiting = 0usize;
            let mut oldest = 0i64;
            for (_, since) in graph.waiting_owners() {
                waiting += 1;
                oldest = oldest.max(since.map_or(0, |s| now - s));
            }
            self.deadlines.forget_gone(&graph);
            self.orders.lock().forget(&graph);
            self.deleted
                .lock()
                .retain(|uid, at| at.elapsed() < DELETED_GRACE && graph.node(*uid).is_some());
            self.barrier.forget(&graph, self.config.timeouts.max);
            (observed, virtual_nodes, waiting, oldest)
        };
        let gauge = |kind: &str, n: usize| {
            self.metrics
                .graph_nodes
                .with_label_values(&[kind])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        gauge("observed", observed);
        gauge("virtual", virtual_nodes);
        self.metrics
            .queue_depth
            .set(i64::try_from(self.queue.len()).unwrap_or(i64::MAX));
        self.metrics
            .owners_waiting
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
        self.metrics.oldest_waiting_owner_seconds.set(oldest.max(0));
    }
}

/// Resolves when this replica stops leading (never, if nobody can change that any more).
async fn lost(leading: &mut signal::Receiver<bool>) {
    if leading.wait_for(|leader| !*leader).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// One worker: while this replica leads, takes items until the queue shuts down. An item that
/// fails is queued again with capped backoff, whatever the error: none is ever dropped.
pub async fn work(collector: Arc<Collector>, mut leading: signal::Receiver<bool>) {
    loop {
        if leading.wait_for(|leader| *leader).await.is_err() {
            return;
        }
        let item = tokio::select! {
            item = collector.queue.next() => match item {
                Some(item) => item,
                None => return,
            },
            () = lost(&mut leading) => continue,
        };
        match collector.process(item).await {
            Ok(()) => collector.queue.forget(&item),
            Err(err) => {
                let delay = collector.queue.retry(item);
                collector
                    .metrics
                    .queue_retries
                    .with_label_values(&[item.name(), err.reason()])
                    .inc();
                if err.is_retryable() {
                    tracing::debug!(?item, %err, retry_in = ?delay, "retrying");
                } else {
                    tracing::warn!(?item, %err, retry_in = ?delay, "failed; retrying with backoff");
                }
            }
        }
        collector.queue.done(&item);
    }
}

impl Collector {
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
    pub(super) fn observed(&self, uid: Uid) -> Option<(Target, Flags)> {
        let graph = self.graph_read();
        let node = graph.node(uid)?;
        Some((self.target_of(uid, node)?, node.flags))
    }

    pub(super) fn target_of(&self, uid: Uid, node: &Node) -> Option<Target> {
        if node.is(Flags::VIRTUAL) {
            return None;
        }
        let resources = self.resources();
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

    /// `processDeletingDependentsItem`: deletes every dependent; removes `foregroundDeletion`
    /// once no dependent with `blockOwnerDeletion` is left and the release barrier agrees —
    /// or, since upstream would have removed it once the graph showed none, once the barrier
    /// has held it for `--timeout-base`, with a Warning saying what was not proven.
    async fn sync_foreground(&self, uid: Uid, target: &Target) -> Result<(), ApiError> {
        self.delete_dependents(uid, target).await;
        let blocking = self
            .graph_read()
            .valid_dependents(uid)
            .filter(|(.., link)| link.blocks(Flags::FOREGROUND))
            .count();
        if !decide::foreground_done(blocking) {
            self.barrier.kept(uid, true);
            return Ok(());
        }
        let bound = self.config.timeouts.base;
        match self.through_barrier(uid, target, true).await {
            Verdict::Pass => {}
            Verdict::Held { hold, since, .. } if since.elapsed() >= bound => {
                let note = format!(
                    "no dependent blocking its deletion is left that the graph knows of; removing foregroundDeletion after {bound:?} held by the release barrier, which could not confirm it: waiting for {hold}"
                );
                tracing::warn!(owner = %target, %hold, "{note}");
                self.event(target, EventType::Warning, Reason::BarrierTimedOut, note)
                    .await;
            }
            Verdict::Held { since, .. } => {
                let held_for = since.elapsed();
                let recheck = barrier::recheck(held_for).min(bound.saturating_sub(held_for));
                self.queue.add_after(Work::SyncOwner(uid), recheck);
                return Ok(());
            }
            Verdict::Round => {
                // The round queues it; this bounds the wait should the round never end.
                self.queue.add_after(Work::SyncOwner(uid), bound);
                return Ok(());
            }
        }
        tracing::debug!(owner = %target, "no blocking dependent left: removing foregroundDeletion");
        self.remove_finalizer(uid, target, FOREGROUND_FINALIZER)
            .await
    }

    /// The release barrier for the owner `uid`, which the graph shows free of what keeps it
    /// (see [`barrier`]). A hold is counted, and said in an Event when what holds the owner
    /// changes; the caller queues the owner again.
    pub(super) async fn through_barrier(
        &self,
        uid: Uid,
        target: &Target,
        blocking_only: bool,
    ) -> Verdict {
        let (coordinates, deleted_at) = {
            let graph = self.graph_read();
            let Some(node) = graph.node(uid) else {
                return Verdict::Round;
            };
            (node.coordinates, graph.deleted_at(uid))
        };
        let verdict = self.barrier.arrive(Owner {
            uid,
            coordinates,
            namespace: target.namespace.as_deref(),
            blocking_only,
            inherited: self.barrier.inherited(deleted_at),
        });
        match &verdict {
            Verdict::Pass => tracing::debug!(owner = %target, "passed the release barrier"),
            Verdict::Round => {}
            Verdict::Held { hold, changed, .. } => {
                self.metrics
                    .barrier_holds
                    .with_label_values(&[hold.reason()])
                    .inc();
                if *changed {
                    self.barrier_held(target, hold).await;
                }
            }
        }
        verdict
    }

    async fn barrier_held(&self, target: &Target, hold: &Hold) {
        tracing::info!(owner = %target, %hold, "every dependent the graph knows of is gone; held by the release barrier");
        let note = format!(
            "every dependent the graph knows of is gone; before releasing, waiting for {hold}"
        );
        self.cluster
            .new_event(target, EventType::Normal, Reason::Barrier, note)
            .await;
    }

    /// Looks again at every owner the barrier holds (a watch recovered, discovery caught up).
    pub(super) fn wake_held(&self) {
        for uid in self.barrier.held() {
            self.enqueue(Work::SyncOwner(uid));
        }
    }

    /// Removes a finalizer whose work is done from the object `uid`, counting it.
    pub(super) async fn remove_finalizer(
        &self,
        uid: Uid,
        target: &Target,
        finalizer: &'static str,
    ) -> Result<(), ApiError> {
        let at = self
            .graph_read()
            .node(uid)
            .and_then(|n| n.places.of_finalizer(Flags::of_finalizer(finalizer)));
        let changed = self
            .act(
                "remove_finalizer",
                self.cluster.remove_finalizer(target, finalizer, at),
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

    /// `attemptToDeleteItem`: a dependent whose owners may be gone or waiting for it. Decided
    /// from the graph when it has seen every owner (then deleted with the uid and
    /// resourceVersion it saw as preconditions, so that a change in between stops the
    /// deletion), from live reads otherwise.
    async fn attempt_to_delete(&self, uid: Uid) -> Result<(), ApiError> {
        if self.recently_deleted(uid) {
            return Ok(());
        }
        let (plan, target) = {
            let graph = self.graph_read();
            let Some(node) = graph.node(uid) else {
                return Ok(());
            };
            let plan = decide::plan(&graph, uid, node, || self.in_turn(&graph, uid));
            if plan == Plan::Done {
                return Ok(());
            }
            let Some(target) = self.target_of(uid, node) else {
                return Ok(());
            };
            (plan, target)
        };
        match plan {
            Plan::Done => Ok(()),
            Plan::Delete {
                propagation,
                resource_version,
            } => {
                self.delete_dependent(uid, &target, propagation, Some(resource_version))
                    .await
            }
            Plan::Live => self.attempt_to_delete_live(uid, &target).await,
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
            let in_turn = self.in_turn(&graph, uid);
            (
                graph.mode(),
                Dependent::of(&graph, uid, Flags::of_object(&meta), in_turn),
            )
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
                let inherited = self.deadlines.inherit(
                    uid,
                    references
                        .iter()
                        .map(|r| Uid::parse(&r.uid))
                        .zip(owners.iter().copied()),
                );
                let value = inherited.map(|d| d.to_string());
                let annotation = value.as_deref().map(|v| (DEADLINE_ANNOTATION, v));
                let armed = self
                    .act(
                        "arm",
                        self.cluster.add_finalizer_with(
                            target,
                            SYNCHRONOUS_FINALIZER,
                            Marks {
                                label: None,
                                annotation,
                            },
                        ),
                    )
                    .await;
                let armed = match armed {
                    // No room for the annotation (or a policy refuses it): the deadline is
                    // kept in memory only.
                    Err(err) if annotation.is_some() && err.reason() == "invalid" => {
                        self.act(
                            "arm",
                            self.cluster.add_finalizer(target, SYNCHRONOUS_FINALIZER),
                        )
                        .await
                    }
                    armed => armed,
                };
                match armed {
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
        let waiting: Vec<Uid> = self.graph_read().waiting_owners_of(uid).collect();
        self.barrier.deleting_for(waiting, uid);
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
        let coordinates = self.resources().aliases().coordinates(
            &reference.api_version,
            &reference.kind,
            &reference.name,
        );
        let elsewhere = {
            let graph = self.graph_read();
            match graph.node(uid) {
                Some(owner) if owner.seen() && owner.coordinates == coordinates => {
                    if owner.in_reach_of(dependent.namespace.as_deref()) {
                        return Ok(OwnerState::of(owner.flags));
                    }
                    owner.namespace().map(str::to_owned)
                }
                _ => None,
            }
        };
        let resolved = {
            let resources = self.resources();
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
        let key = absent::Key {
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
        if self.absent.lock().contains(&key) {
            return Ok(OwnerState::Absent);
        }
        let owner = Target {
            resource: api,
            namespace: key.namespace.clone(),
            name: reference.name.clone(),
            uid: reference.uid.clone(),
        };
        let meta = self.cluster.get_metadata(&owner).await?;
        let found = if meta.is_some() { "present" } else { "absent" };
        self.metrics.owner_reads.with_label_values(&[found]).inc();
        let Some(meta) = meta else {
            self.absent.lock().insert(key);
            return Ok(OwnerState::Absent);
        };
        Ok(OwnerState::of(Flags::of_object(&meta)))
    }

    async fn invalid_namespace(&self, dependent: &Target, note: String) {
        tracing::warn!(%dependent, "{note}");
        self.event(
            dependent,
            EventType::Warning,
            Reason::OwnerRefInvalidNamespace,
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
        self.remove_finalizer(uid, &target, ORPHAN_FINALIZER).await
    }

    /// An opted-in object found without the finalizer (created while the webhook was away).
    async fn arm(&self, uid: Uid) -> Result<(), ApiError> {
        let Some((target, flags)) = self.observed(uid) else {
            return Ok(());
        };
        if !flags.needs_arming() {
            return Ok(());
        }
        let Some(meta) = self.cluster.get_metadata(&target).await? else {
            return Ok(());
        };
        if !Flags::of_object(&meta).needs_arming() {
            return Ok(());
        }
        match self.act("arm", self.cluster.arm(&target)).await {
            Ok(_) => {
                tracing::info!(object = %target, "armed an opted-in object found without the finalizer or its label");
                Ok(())
            }
            Err(ApiError::Terminating(_) | ApiError::Replaced(..)) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Queues the attempts to delete the dependents of the waiting owner `uid` that its order
    /// has reached ([`Orders::next`]). A wave that starts gets a `SyncGCWave` Event on
    /// `target`; a dependent with an invalid order, a Warning of its own the first time.
    pub(super) async fn delete_dependents(&self, uid: Uid, target: &Target) {
        let batch = {
            let graph = self.graph_read();
            self.orders
                .lock()
                .next(&graph, uid, |dependent| self.recently_deleted(dependent))
        };
        if let Some((wave, count)) = batch.started {
            self.metrics.waves_started.inc();
            tracing::info!(owner = %target, wave = wave.0, count, "deleting a wave of dependents");
            let note = format!("deleting wave {}: {count} dependent(s)", wave.0);
            self.cluster
                .new_event(target, EventType::Normal, Reason::Wave, note)
                .await;
        }
        for (dependent, value) in batch.invalid {
            let Some((dependent, _)) = self.observed(dependent) else {
                continue;
            };
            let note = format!(
                "{DELETION_ORDER_ANNOTATION} {value:?} is not an integer; it is deleted in wave 0"
            );
            tracing::warn!(%dependent, "{note}");
            self.event(&dependent, EventType::Warning, Reason::InvalidOrder, note)
                .await;
        }
        for dependent in batch.uids {
            self.enqueue(Work::AttemptToDelete(dependent));
        }
    }

    /// The owner `uid`'s deadline passed: abandons its order if waves are left besides the
    /// current one ([`Orders::abandon`]), saying so on `target`. Whether it did.
    pub(super) async fn abandon_order(&self, uid: Uid, target: &Target) -> bool {
        let abandoned = {
            let graph = self.graph_read();
            self.orders.lock().abandon(&graph, uid)
        };
        let Some(Abandoned { current, later }) = abandoned else {
            return false;
        };
        tracing::warn!(owner = %target, wave = current.0, later, "the deadline passed before the last wave: the order is abandoned");
        let note = format!(
            "the deadline passed while wave {} was being deleted: the order is abandoned and the {later} dependent(s) of the later waves are deleted at once",
            current.0
        );
        self.cluster
            .new_event(target, EventType::Warning, Reason::OrderAbandoned, note)
            .await;
        true
    }

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
        let now = crate::api::clock::now();
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
                let recheck = synchronous::GENERATION_RECHECK.min(until_deadline);
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
        if let Some(at) = self.deadlines.within_bounds(uid, deleted_at, max) {
            return at;
        }
        let (count, names) = {
            let graph = self.graph_read();
            let names: Vec<String> = graph
                .valid_dependents(uid)
                .take(synchronous::NAMES_IN_EVENTS)
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
            self.event(target, EventType::Warning, Reason::InvalidAnnotation, note)
                .await;
        }
        let timeout = self
            .config
            .timeouts
            .for_owner(count, synchronous::annotation(object, TIMEOUT_ANNOTATION));
        let choice = decide::deadline(
            deleted_at,
            synchronous::annotation(object, DEADLINE_ANNOTATION),
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
            self.event(target, EventType::Warning, Reason::DeadlineReplaced, note)
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
            self.event(target, EventType::Warning, Reason::DeadlineNotStored, note)
                .await;
        }
        let mut note = format!("waiting for {count} dependent(s) to be deleted, until {at}");
        if !names.is_empty() {
            note.push_str(&format!(": {}", names.join(", ")));
        }
        self.event(target, EventType::Normal, Reason::Waiting, note)
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
        self.remove_finalizer(uid, target, SYNCHRONOUS_FINALIZER)
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
        self.metrics
            .synchronous_deletion_duration
            .with_label_values(&[outcome])
            .observe(waited);
        if let Some(left) = timed_out {
            self.metrics.timeouts.inc();
            tracing::warn!(owner = %target, waited, %left, "released by timeout");
            let note = format!("released after {waited:.0}s by its timeout, {left}");
            self.event(target, EventType::Warning, Reason::TimedOut, note)
                .await;
        } else {
            tracing::info!(owner = %target, waited, "released: all dependents are gone");
            let note = format!("all dependents are gone after {waited:.1}s");
            self.event(target, EventType::Normal, Reason::Released, note)
                .await;
        }
        Ok(())
    }

    /// Runs an action, counting it by result.
    pub(super) async fn act<T>(
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

    pub(super) async fn event(
        &self,
        target: &Target,
        type_: EventType,
        reason: Reason,
        note: String,
    ) {
        self.cluster.event(target, type_, reason, note).await;
    }
}

impl Collector {
    /// Whether `uid` may be deleted now for every owner of it that waits (its wave reached).
    fn in_turn(&self, graph: &Graph, uid: Uid) -> bool {
        self.orders.lock().in_turn(graph, uid, graph.wave(uid))
    }
}
