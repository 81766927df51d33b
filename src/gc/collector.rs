//! The collector: the worker loop, dispatch, and upstream's `attemptToDeleteItem` and
//! `attemptToOrphan`. Each worker takes an item from the queue and hands it to the part that
//! owns it: an owner that waits goes to the foreground wait ([`super::foreground`]) and the
//! synchronous finalizer ([`super::synchronous`]), an opted-in object found unarmed to the
//! latter; a dependent whose owners may be gone or waiting, and an orphaning owner, are
//! handled here. Every part reads the graph (and the live object where the graph cannot
//! decide), asks [`super::decide`], and acts through the [`Context`]; the deletion order
//! ([`super::order`]) and the release barrier ([`super::barrier`]) keep their own state.

use parking_lot::Mutex;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::events::EventType;
use tokio::sync::watch as signal;
use tokio_util::sync::CancellationToken;

use super::absent::{self, AbsentOwners};
use super::barrier::{Barrier, Reads};
use super::context::Context;
use super::decide::{self, ActedBy, Attempt, Dependent, FastPath, OwnerState, Propagation};
use super::discovery::Rediscovery;
use super::foreground::Foreground;
use super::synchronous::{Deadlines, Synchronous};
use super::waves::Waves;
use crate::api::{ApiError, Claims, Target};
use crate::graph::{Flags, Mode, Uid, Work};
use crate::metrics::Action;
use crate::names::{ORPHAN_FINALIZER, PROTECTED_ANNOTATION, Reason};

/// How many dependents of one orphaning owner are patched at once.
const ORPHAN_CONCURRENCY: usize = 16;
/// How many absent owners are remembered.
const ABSENT_OWNERS: usize = 1024;

/// The collector: the workers' context and the parts that keep state of their own. The graph
/// and the table of resources have one writer (the graph builder); the workers only read them.
pub struct Collector {
    pub cx: Context,
    /// Owners verified absent by a live read.
    absent: Mutex<AbsentOwners>,
    /// How far each waiting owner's deletion order has gone.
    waves: Waves,
    /// The deadlines in force for waiting owners (see [`super::synchronous`]).
    pub(super) deadlines: Deadlines,
    /// Asks the graph builder for a discovery.
    pub rediscovery: Arc<Rediscovery>,
    pub barrier: Barrier,
}

impl Collector {
    /// The workers over `cx`, with a release barrier reading through the same handles.
    pub fn new(cx: Context) -> Self {
        let rediscovery = Arc::<Rediscovery>::default();
        let barrier = Barrier::new(cx.config.barrier, Reads::of(&cx, rediscovery.clone()));
        Self {
            cx,
            absent: Mutex::new(AbsentOwners::new(ABSENT_OWNERS)),
            waves: Waves::default(),
            deadlines: Deadlines::default(),
            rediscovery,
            barrier,
        }
    }

    fn synchronous(&self) -> Synchronous<'_> {
        Synchronous {
            cx: &self.cx,
            deadlines: &self.deadlines,
            waves: &self.waves,
            barrier: &self.barrier,
        }
    }

    fn foreground(&self) -> Foreground<'_> {
        Foreground {
            cx: &self.cx,
            waves: &self.waves,
            barrier: &self.barrier,
        }
    }

    /// Refreshes the gauges that describe the graph and the waiting owners (from the graph
    /// alone), and forgets what no longer matters.
    pub(super) fn refresh_gauges(&self) {
        let cx = &self.cx;
        let now = crate::api::clock::now().as_second();
        let (observed, virtual_nodes, waiting, oldest) = {
            let graph = cx.graph();
            let (observed, virtual_nodes) = graph.counts();
            let mut waiting = 0usize;
            let mut oldest = 0i64;
            for (_, since) in graph.waiting_owners() {
                waiting += 1;
                oldest = oldest.max(since.map_or(0, |s| now - s));
            }
            self.deadlines.forget_gone(&graph);
            self.waves.forget(&graph);
            cx.forget_deleted(&graph);
            self.barrier.forget(&graph, cx.config.timeouts.max);
            (observed, virtual_nodes, waiting, oldest)
        };
        let gauge = |kind: &str, n: usize| {
            cx.metrics
                .graph_nodes
                .with_label_values(&[kind])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        gauge("observed", observed);
        gauge("virtual", virtual_nodes);
        cx.metrics
            .queue_depth
            .set(i64::try_from(cx.queue.len()).unwrap_or(i64::MAX));
        cx.metrics
            .owners_waiting
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
        cx.metrics.oldest_waiting_owner_seconds.set(oldest.max(0));
    }
}

impl super::builder::Sink for Collector {
    fn enqueue(&self, work: Work, first: bool) {
        if first {
            self.cx.enqueue_first(work);
        } else {
            self.cx.enqueue(work);
        }
    }

    fn gone(&self, uid: Uid) {
        self.cx.gone(uid);
    }

    /// Looks again at every owner the barrier holds (a watch recovered, discovery caught up).
    fn wake_held(&self) {
        for uid in self.barrier.held() {
            self.cx.enqueue(Work::SyncOwner(uid));
        }
    }
}

/// Resolves when this replica stops leading (never, if nobody can change that any more).
async fn lost(leading: &mut signal::Receiver<bool>) {
    if leading.wait_for(|leader| !*leader).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// One worker: while this replica leads, takes items until the queue shuts down; a worker of a
/// replica that does not lead stops at `shutdown` (leader election goes on until the collector
/// has stopped, so its end is no signal). An item that fails is queued again with capped
/// backoff, whatever the error: none is ever dropped.
pub async fn work(
    collector: Arc<Collector>,
    mut leading: signal::Receiver<bool>,
    shutdown: CancellationToken,
) {
    loop {
        let leads = tokio::select! {
            led = leading.wait_for(|leader| *leader) => led.is_ok(),
            () = shutdown.cancelled() => false,
        };
        if !leads {
            return;
        }
        let item = tokio::select! {
            item = collector.cx.queue.next() => match item {
                Some(item) => item,
                None => return,
            },
            () = lost(&mut leading) => continue,
        };
        // A panic on one item (a bug, or input nobody thought of) fails that item, not the
        // worker: it is logged, counted and queued again with backoff like any failure.
        let processed = std::panic::AssertUnwindSafe(collector.process(item))
            .catch_unwind()
            .await;
        let failed = match processed {
            Ok(Ok(())) => None,
            Ok(Err(err)) => {
                if err.is_retryable() {
                    tracing::debug!(?item, %err, "retrying");
                } else {
                    tracing::warn!(?item, %err, "failed; retrying with backoff");
                }
                Some(err.reason())
            }
            Err(panic) => {
                let panic = panic_message(panic.as_ref());
                tracing::error!(?item, %panic, "a worker panicked on an item; retrying it with backoff");
                collector
                    .cx
                    .metrics
                    .worker_panics
                    .with_label_values(&[item.name()])
                    .inc();
                Some("panic")
            }
        };
        match failed {
            None => collector.cx.queue.forget(&item),
            Some(reason) => {
                collector.cx.queue.retry(item);
                collector
                    .cx
                    .metrics
                    .queue_retries
                    .with_label_values(&[item.name(), reason])
                    .inc();
            }
        }
        collector.cx.queue.done(&item);
    }
}

impl Collector {
    /// Keeps the protected dependent `target` that its owners' going would delete: its
    /// references to them are removed instead (as the webhook does when it refuses such a
    /// DELETE), while it is still protected as read. `false`: it is not protected any more,
    /// and goes as any dependent.
    async fn keep_protected(&self, target: &Target) -> Result<bool, ApiError> {
        let Some(meta) = self.cx.cluster.get_metadata(target).await? else {
            return Ok(true);
        };
        let value = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROTECTED_ANNOTATION));
        if !crate::graph::protects(value.map(String::as_str)) {
            return Ok(false);
        }
        let references = meta.owner_references.clone().unwrap_or_default();
        let owners: Vec<String> = references.iter().map(|r| r.uid.clone()).collect();
        let claims = Claims {
            annotations: vec![(PROTECTED_ANNOTATION, "true".to_owned())],
            finalizers: Vec::new(),
        };
        tracing::info!(dependent = %target, "keeping a protected dependent: removing its references to its owners");
        let cause = owners.first().map(|o| Uid::parse(o));
        self.cx
            .caused(
                cause,
                self.cx.act(
                    Action::RemoveOwnerReferences,
                    self.cx
                        .cluster
                        .remove_owner_references(target, &references, &owners, &claims),
                ),
            )
            .await?;
        if let Some(owner) = owners.first() {
            self.cx.record_orphaned(target, owner);
        }
        Ok(true)
    }
}

/// What a panic said, as its payload carries it (`panic!` with a string or a format).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

impl Collector {
    /// Works on one item. `Err` of a retryable error queues it again with backoff.
    pub(super) async fn process(&self, work: Work) -> Result<(), ApiError> {
        match work {
            Work::SyncOwner(uid) => self.sync_owner(uid).await,
            Work::AttemptToDelete(uid) => self.attempt_to_delete(uid).await,
            Work::Orphan(uid) => self.orphan(uid).await,
            Work::Arm(uid) => self.synchronous().arm(uid).await,
        }
    }

    /// An owner being deleted that waits for its dependents: in foreground (standalone mode)
    /// and synchronously (armed), each with its own finalizer.
    async fn sync_owner(&self, uid: Uid) -> Result<(), ApiError> {
        let Some((target, flags)) = self.cx.observed(uid) else {
            return Ok(());
        };
        if !flags.contains(Flags::DELETING) {
            return Ok(());
        }
        let foreground = if self.cx.mode() == Mode::Standalone && flags.contains(Flags::FOREGROUND)
        {
            self.foreground().sync(uid, &target).await
        } else {
            Ok(())
        };
        let synchronous = if flags.contains(Flags::ARMED) {
            self.synchronous().sync(uid, &target).await
        } else {
            Ok(())
        };
        foreground.and(synchronous)
    }

    /// `attemptToDeleteItem`: a dependent whose owners may be gone or waiting for it. Decided
    /// from the graph when it has seen every owner (then deleted with the uid and
    /// resourceVersion it saw as preconditions, so that a change in between stops the
    /// deletion), from live reads otherwise.
    async fn attempt_to_delete(&self, uid: Uid) -> Result<(), ApiError> {
        if self.cx.recently_deleted(uid) {
            return Ok(());
        }
        let (plan, target) = {
            let graph = self.cx.graph();
            let Some(node) = graph.node(uid) else {
                return Ok(());
            };
            let plan = decide::fast_path(&graph, uid, node, || self.waves.in_turn(&graph, uid));
            if plan == FastPath::Done {
                return Ok(());
            }
            let Some(target) = self.cx.target_of(uid, node) else {
                return Ok(());
            };
            (plan, target)
        };
        match plan {
            FastPath::Done => Ok(()),
            FastPath::Delete {
                propagation,
                resource_version,
            } => {
                self.delete_dependent(uid, &target, propagation, Some(resource_version))
                    .await
            }
            FastPath::Live => self.attempt_to_delete_live(uid, &target).await,
        }
    }

    async fn attempt_to_delete_live(&self, uid: Uid, target: &Target) -> Result<(), ApiError> {
        let Some(meta) = self.cx.cluster.get_metadata(target).await? else {
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
            let graph = self.cx.graph();
            let in_turn = self.waves.in_turn(&graph, uid);
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
                let dropped = uids(&drop);
                let cause = dropped.first().map(|o| Uid::parse(o));
                self.cx
                    .caused(
                        cause,
                        self.cx.act(
                            Action::RemoveOwnerReferences,
                            self.cx.cluster.remove_owner_references(
                                target,
                                &references,
                                &dropped,
                                &Claims::default(),
                            ),
                        ),
                    )
                    .await?;
                if let Some(owner) = dropped.first() {
                    self.cx.record_orphaned(target, owner);
                }
                Ok(())
            }
            Attempt::Arm => {
                self.synchronous()
                    .arm_for_owners(uid, target, &references, &owners)
                    .await
            }
            Attempt::Delete {
                propagation,
                unblock,
            } => {
                let mut resource_version = meta.resource_version.clone();
                if !unblock.is_empty() {
                    tracing::debug!(dependent = %target, "a possible cycle: unblocking its references");
                    self.cx
                        .act(
                            Action::UnblockOwnerReferences,
                            self.cx.cluster.unblock_owner_references(
                                target,
                                &references,
                                &uids(&unblock),
                            ),
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
        let protected = self.cx.graph().guards(uid).is_some_and(|g| g.protected);
        if protected && self.keep_protected(target).await? {
            return Ok(());
        }
        self.cx.judge_delete(uid, target, propagation)?;
        let waiting: Vec<Uid> = self.cx.graph().waiting_owners_of(uid).collect();
        self.barrier.deleting_for(waiting, uid);
        let cause = self.cx.graph().cause_of(uid);
        let deleted = self
            .cx
            .caused(
                cause,
                self.cx.act(
                    Action::Delete,
                    self.cx.cluster.delete(
                        target,
                        propagation,
                        resource_version.map(|v| v.to_string()),
                    ),
                ),
            )
            .await?;
        self.cx.note_deleted(uid);
        if deleted {
            self.cx.record_deleted(target, cause);
            tracing::debug!(object = %target, propagation = propagation.as_str(), "deleted");
            self.cx
                .metrics
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
        let coordinates = self.cx.resources().aliases().coordinates(
            &reference.api_version,
            &reference.kind,
            &reference.name,
        );
        let elsewhere = {
            let graph = self.cx.graph();
            let from = dependent.namespace.as_deref();
            if let Some(state) =
                decide::owner_in_graph(&graph, uid, coordinates, from, ActedBy::Syncgc)
            {
                return Ok(state);
            }
            // The object with that uid, named as the reference names it, lives elsewhere.
            graph
                .node(uid)
                .filter(|owner| owner.seen() && owner.coordinates == coordinates)
                .and_then(|owner| owner.namespace().map(str::to_owned))
        };
        let resolved = {
            let resources = self.cx.resources();
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
        let key = absent::AbsentKey {
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
        let meta = self.cx.cluster.get_metadata(&owner).await?;
        let found = if meta.is_some() { "present" } else { "absent" };
        self.cx
            .metrics
            .owner_reads
            .with_label_values(&[found])
            .inc();
        let Some(meta) = meta else {
            self.absent.lock().insert(key);
            return Ok(OwnerState::Absent);
        };
        Ok(OwnerState::of(Flags::of_object(&meta)))
    }

    async fn invalid_namespace(&self, dependent: &Target, note: String) {
        tracing::warn!(%dependent, "{note}");
        self.cx
            .event(
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
        let Some((target, flags)) = self.cx.observed(uid) else {
            return Ok(());
        };
        if !flags.contains(Flags::DELETING | Flags::ORPHAN) {
            return Ok(());
        }
        let dependents: Vec<Target> = {
            let graph = self.cx.graph();
            graph
                .valid_dependents(uid)
                .filter_map(|(d, node, _)| self.cx.target_of(d, node))
                .collect()
        };
        let owner = [target.uid.clone()];
        let owner = &owner;
        let results: Vec<Result<(), ApiError>> = futures::stream::iter(dependents)
            .map(|dependent| async move {
                let Some(meta) = self.cx.cluster.get_metadata(&dependent).await? else {
                    return Ok(());
                };
                let references = meta.owner_references.unwrap_or_default();
                self.cx
                    .caused(
                        Some(uid),
                        self.cx.act(
                            Action::RemoveOwnerReferences,
                            self.cx.cluster.remove_owner_references(
                                &dependent,
                                &references,
                                owner,
                                &Claims::default(),
                            ),
                        ),
                    )
                    .await?;
                self.cx.record_orphaned(&dependent, &owner[0]);
                Ok(())
            })
            .buffer_unordered(ORPHAN_CONCURRENCY)
            .collect()
            .await;
        results.into_iter().collect::<Result<(), _>>()?;
        tracing::debug!(owner = %target, "dependents orphaned: removing orphan");
        self.cx
            .remove_finalizer(uid, &target, ORPHAN_FINALIZER)
            .await
    }
}
