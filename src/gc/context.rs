//! What every worker reads and acts through ([`Context`]): the graph and the table of
//! resources (read-only: the graph builder writes both), the API seam, the metrics, the work
//! queue, the configuration, and the objects this collector deleted lately. The parts above it
//! (the synchronous finalizer, the foreground wait, the deletion order, the release barrier)
//! and the collector's own items each take a context, never each other's state.

use std::collections::HashMap;
use std::time::Duration;

use kube::runtime::events::EventType;
use parking_lot::{Mutex, RwLockReadGuard};
use tokio::time::Instant;

use super::causes::Done;
use super::config::GcConfig;
use super::discovery::{self, Resources};
use super::queue::WorkQueue;
use crate::api::{ApiError, Changed, Cluster, Target};
use crate::graph::{Flags, Graph, Mode, Node, Reader, Uid, Work};
use crate::metrics::{Action, Metrics};
use crate::names::Reason;

/// How long an object this collector deleted is not looked at again while no watch reports it
/// gone (it may be held by finalizers, or the watch may lag).
const DELETED_GRACE: Duration = Duration::from_secs(30);

/// What the workers share below their parts.
pub struct Context {
    pub(super) graph: Reader,
    pub(super) resources: discovery::ResourcesReader,
    pub cluster: Cluster,
    pub metrics: Metrics,
    pub queue: WorkQueue<Work>,
    pub config: GcConfig,
    /// Objects this collector deleted that no watch has reported gone yet, with when.
    deleted: Mutex<HashMap<Uid, Instant>>,
}

impl Context {
    pub fn new(
        graph: Reader,
        resources: discovery::ResourcesReader,
        cluster: Cluster,
        metrics: Metrics,
        config: GcConfig,
    ) -> Self {
        Self {
            graph,
            resources,
            cluster,
            metrics,
            queue: WorkQueue::default(),
            config,
            deleted: Mutex::default(),
        }
    }

    pub fn graph(&self) -> RwLockReadGuard<'_, Graph> {
        self.graph.read()
    }

    pub fn resources(&self) -> RwLockReadGuard<'_, Resources> {
        self.resources.read()
    }

    pub fn mode(&self) -> Mode {
        self.graph().mode()
    }

    pub fn enqueue(&self, work: Work) {
        self.count_add(work);
        self.queue.add(work);
    }

    /// Queues `work` ahead of the work [`Context::enqueue`] queued.
    pub fn enqueue_first(&self, work: Work) {
        self.count_add(work);
        self.queue.add_first(work);
    }

    fn count_add(&self, work: Work) {
        self.metrics
            .queue_adds
            .with_label_values(&[work.name()])
            .inc();
    }

    pub fn note_deleted(&self, uid: Uid) {
        self.deleted.lock().insert(uid, Instant::now());
    }

    pub fn recently_deleted(&self, uid: Uid) -> bool {
        self.deleted
            .lock()
            .get(&uid)
            .is_some_and(|at| at.elapsed() < DELETED_GRACE)
    }

    /// Forgets that this collector deleted `uid`: a watch reported it gone.
    pub fn gone(&self, uid: Uid) {
        self.deleted.lock().remove(&uid);
    }

    /// Forgets the deletions long past or of objects the graph no longer shows.
    pub fn forget_deleted(&self, graph: &Graph) {
        self.deleted
            .lock()
            .retain(|uid, at| at.elapsed() < DELETED_GRACE && graph.node(*uid).is_some());
    }

    /// The target of the graph node `uid`, if it is an object seen by a watch of a known
    /// resource, with its flags.
    pub fn observed(&self, uid: Uid) -> Option<(Target, Flags)> {
        let graph = self.graph();
        let node = graph.node(uid)?;
        Some((self.target_of(uid, node)?, node.flags))
    }

    pub fn target_of(&self, uid: Uid, node: &Node) -> Option<Target> {
        self.resources().target_of(uid, node)
    }

    /// Runs `call`, whose requests are a step of the cascade through `owner`, naming the
    /// cascade's root in their User-Agent (see [`super::causes`]); as it is without an owner
    /// or with causes off.
    pub async fn caused<T>(&self, owner: Option<Uid>, call: impl Future<Output = T>) -> T {
        let header = owner
            .zip(self.config.causes.as_ref())
            .map(|(owner, causes)| {
                let graph = self.graph();
                let resources = self.resources();
                let kind = |uid| {
                    let resource = graph.node(uid)?.resource?;
                    Some(resources.get(resource)?.api.kind.clone())
                };
                causes.header(&graph, kind, owner)
            });
        match header {
            Some(header) => crate::api::caused_by(&header, call).await,
            None => call.await,
        }
    }

    /// What the guards say of a DELETE of `uid` this collector is about to send, judged here
    /// as the webhook would (see [`super::guard::judge_own`]): a refusal as an error to retry
    /// (a handler's hold; a protected object its cascade would reach) — but for the object's
    /// own protection, which the collector keeps itself by dropping references. `Ok` when the
    /// guards are off or let it through.
    pub fn judge_delete(
        &self,
        uid: Uid,
        target: &Target,
        propagation: crate::api::Propagation,
    ) -> Result<(), ApiError> {
        use super::guard::{self, Judgement};
        if !self.config.guards {
            return Ok(());
        }
        let bounds = guard::Bounds {
            max_cascade: None,
            timeouts: Some(self.config.timeouts),
        };
        let now = crate::api::clock::now().as_second();
        let (verdict, protected) = {
            let graph = self.graph();
            let resources = self.resources();
            let verdict = guard::judge_own(
                &graph,
                |id| resources.kind(id),
                &self.config.needs,
                uid,
                propagation,
                &bounds,
                now,
            );
            (verdict, graph.guards(uid).is_some_and(|g| g.protected))
        };
        match verdict {
            // Its own protection: kept by the caller, which reads it live first.
            Some(Judgement::Refuse {
                guard: guard::Guard::Protected,
                ..
            }) if protected => Ok(()),
            Some(Judgement::Refuse { message, .. }) => Err(ApiError::Held {
                target: target.to_string(),
                message,
            }),
            _ => Ok(()),
        }
    }

    /// Records that `target`'s references to `owner` were removed (when causes are on).
    pub fn record_orphaned(&self, target: &Target, owner: &str) {
        self.record_done(target, Done::Orphaned, Some(owner.to_owned()));
    }

    /// Records that the collector deleted `target`, a step of the cascade through `cause`
    /// (when causes are on): its DELETE reaches syncgc's webhook only when a guard applies.
    pub fn record_deleted(&self, target: &Target, cause: Option<Uid>) {
        self.record_done(target, Done::Deleted, cause.map(|c| c.to_string()));
    }

    fn record_done(&self, target: &Target, action: Done, cause: Option<String>) {
        if let Some(causes) = &self.config.causes {
            causes.record(super::causes::Entry {
                uid: target.uid.clone(),
                kind: target.resource.kind.clone(),
                namespace: target.namespace.clone(),
                name: target.name.clone(),
                action,
                by: "syncgc".to_owned(),
                at: crate::api::clock::now().as_second(),
                cause,
            });
        }
    }

    /// Runs an action, counting it by result.
    pub async fn act<T>(
        &self,
        action: Action,
        call: impl Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        let result = call.await;
        let outcome = if result.is_ok() { "ok" } else { "error" };
        self.metrics
            .gc_actions
            .with_label_values(&[action.as_str(), outcome])
            .inc();
        result
    }

    /// Removes a finalizer whose work is done from the object `uid`, counting it.
    pub async fn remove_finalizer(
        &self,
        uid: Uid,
        target: &Target,
        finalizer: &'static str,
    ) -> Result<(), ApiError> {
        let at = self
            .graph()
            .node(uid)
            .and_then(|n| n.places.of_finalizer(Flags::of_finalizer(finalizer)));
        let changed = self
            .act(
                Action::RemoveFinalizer,
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

    /// An Event about `target`, in the series of its reason.
    pub async fn event(&self, target: &Target, type_: EventType, reason: Reason, note: String) {
        self.cluster.event(target, type_, reason, note).await;
    }

    /// An Event about `target` of its own: the next step of the same thing.
    pub async fn new_event(&self, target: &Target, type_: EventType, reason: Reason, note: String) {
        self.cluster.new_event(target, type_, reason, note).await;
    }
}
