//! The garbage collector. In cooperative mode it handles syncgc's finalizer and the dependents
//! of the owners that carry it, beside the cluster's own GC; in standalone mode it is the whole
//! GC (background, `foregroundDeletion`, `orphan`). The mode only changes which work the graph
//! brings up (see [`crate::graph::Mode`]) and which owners a decision acts for.
//!
//! - [`discovery`]: which resources to watch, rediscovered periodically.
//! - [`watch`]: one metadata-only watch per resource, feeding the graph's one writer.
//! - [`queue`]: the deduplicating, delaying, backing-off work queue.
//! - [`decide`]: the pure decisions.
//! - [`absent`]: owners verified absent, so that their many dependents cost one read.
//! - [`debug`]: `/debug/graph`, the graph around one object.
//! - `workers`: the actions, through [`crate::api::Cluster`].
//!
//! Workers start only once every watch has listed once; `/readyz` says so.

pub mod absent;
pub mod debug;
pub mod decide;
pub mod discovery;
pub mod queue;
pub mod watch;
mod workers;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::{mpsc, watch as signal};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::absent::AbsentOwners;
use self::decide::Timeouts;
use self::discovery::Resources;
use self::queue::WorkQueue;
use self::watch::GraphEvent;
use crate::api::Cluster;
use crate::graph::{Graph, Mode, ResourceId, Uid, Work};
use crate::metrics::{Metrics, Readiness};

/// How the garbage collector is configured.
#[derive(Debug, Clone)]
pub struct GcConfig {
    pub timeouts: Timeouts,
    pub workers: usize,
    /// Resources never watched, as `plural` (core) or `plural.group`.
    pub ignored: Vec<String>,
    /// How often the served resources are discovered again.
    pub rediscovery: Duration,
}

/// Everything the collector's tasks share. The graph has one writer (the task fed by the
/// watches); workers and the webhook only read it.
pub struct Shared {
    pub graph: Arc<RwLock<Graph>>,
    pub resources: RwLock<Resources>,
    pub queue: WorkQueue<Work>,
    cluster: Cluster,
    metrics: Metrics,
    recorder: Recorder,
    config: GcConfig,
    /// Owners waiting for their dependents, since their deletionTimestamp.
    waiting: Mutex<HashMap<Uid, Timestamp>>,
    /// Owners verified absent by a live read.
    absent: Mutex<AbsentOwners>,
    /// Objects this collector deleted that no watch has reported gone yet, with when.
    deleted: Mutex<HashMap<Uid, Instant>>,
}

/// How many absent owners are remembered.
const ABSENT_OWNERS: usize = 1024;
/// How long an object this collector deleted is not looked at again while no watch reports it
/// gone (it may be held by finalizers, or the watch may lag).
const DELETED_GRACE: Duration = Duration::from_secs(30);

impl Shared {
    pub fn new(
        graph: Arc<RwLock<Graph>>,
        cluster: Cluster,
        metrics: Metrics,
        config: GcConfig,
    ) -> Self {
        let recorder = Recorder::new(
            cluster.client.clone(),
            Reporter {
                controller: workers::EVENT_REPORTER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Self {
            graph,
            resources: RwLock::new(Resources::default()),
            queue: WorkQueue::default(),
            cluster,
            metrics,
            recorder,
            config,
            waiting: Mutex::new(HashMap::new()),
            absent: Mutex::new(AbsentOwners::new(ABSENT_OWNERS)),
            deleted: Mutex::new(HashMap::new()),
        }
    }

    pub fn graph_read(&self) -> RwLockReadGuard<'_, Graph> {
        self.graph.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn mode(&self) -> Mode {
        self.graph_read().mode()
    }

    fn enqueue(&self, work: Work) {
        self.metrics
            .queue_adds
            .with_label_values(&[work.name()])
            .inc();
        self.queue.add(work);
    }

    fn absent_owners(&self) -> std::sync::MutexGuard<'_, AbsentOwners> {
        self.absent.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn note_deleted(&self, uid: Uid) {
        self.deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid, Instant::now());
    }

    fn recently_deleted(&self, uid: Uid) -> bool {
        self.deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&uid)
            .is_some_and(|at| at.elapsed() < DELETED_GRACE)
    }

    fn start_waiting(&self, uid: Uid, since: Timestamp) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(uid)
            .or_insert(since);
    }

    fn stop_waiting(&self, uid: Uid) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&uid);
    }

    /// Applies one watch event to the graph and queues the work it brings up.
    fn apply(&self, event: GraphEvent) {
        let work = {
            let mut graph = self.graph.write().unwrap_or_else(|e| e.into_inner());
            match event {
                GraphEvent::Apply(id, observed) => graph.apply(id, observed),
                GraphEvent::Delete(_, uid) => {
                    self.deleted
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&uid);
                    graph.delete(uid)
                }
                GraphEvent::Listed(id, listed) => graph.reset(id, &listed),
                GraphEvent::Unserved(id) => graph.unserve(id),
                GraphEvent::ListFailed(_) => Vec::new(),
            }
        };
        for work in work {
            self.enqueue(work);
        }
    }

    /// Refreshes the gauges that describe the graph and the waiting owners.
    fn observe(&self) {
        let (observed, virtual_nodes) = self.graph_read().counts();
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
        let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        self.metrics
            .owners_waiting
            .set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
        let oldest = waiting.values().min().map_or(0, |since| {
            Timestamp::now().duration_since(*since).as_secs().max(0)
        });
        self.metrics.oldest_waiting_owner_seconds.set(oldest);
        self.deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, at| at.elapsed() < DELETED_GRACE);
    }
}

/// Runs the collector until `shutdown`: discovery and watches, the graph's writer, and — once
/// every watch has listed — the workers.
pub async fn run(
    shared: Arc<Shared>,
    readiness: Readiness,
    leading: signal::Receiver<bool>,
    shutdown: CancellationToken,
) {
    let (events_tx, mut events_rx) = mpsc::channel::<GraphEvent>(4096);
    let (synced_tx, mut synced_rx) = signal::channel(false);
    let mut watches: HashMap<ResourceId, JoinHandle<()>> = HashMap::new();

    // The first discovery decides which watches must list before the workers start.
    let mut backoff = Duration::from_millis(500);
    let first = loop {
        match discovery::discover(&shared.cluster.client, &shared.config.ignored).await {
            Ok(found) => break found,
            Err(err) => {
                tracing::warn!(%err, retry_in = ?backoff, "discovering resources");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    };
    let initial: HashSet<ResourceId> = {
        let mut resources = shared.resources.write().unwrap_or_else(|e| e.into_inner());
        let added = resources.update(first).added;
        added
            .into_iter()
            .filter(|id| watched(&resources, *id))
            .collect()
    };
    for id in &initial {
        start_watch(&shared, *id, &events_tx, &mut watches);
    }
    tracing::info!(resources = initial.len(), "watching resources");
    shared.metrics.watched_resources.set(watches.len() as i64);

    // The graph's one writer.
    let writer = {
        let shared = shared.clone();
        let mut pending = initial;
        tokio::spawn(async move {
            if pending.is_empty() {
                let _ = synced_tx.send(true);
            }
            while let Some(event) = events_rx.recv().await {
                if let GraphEvent::Listed(id, _) | GraphEvent::ListFailed(id) = &event
                    && pending.remove(id)
                    && pending.is_empty()
                {
                    let _ = synced_tx.send(true);
                }
                shared.apply(event);
            }
        })
    };

    tokio::select! {
        () = shutdown.cancelled() => {}
        _ = synced_rx.wait_for(|synced| *synced) => {
            let (observed, virtual_nodes) = shared.graph_read().counts();
            tracing::info!(observed, virtual_nodes, "every watch has listed; starting workers");
            readiness.set(true);
        }
    }
    let workers: Vec<JoinHandle<()>> = (0..shared.config.workers.max(1))
        .map(|_| tokio::spawn(work(shared.clone(), leading.clone())))
        .collect();

    let mut rediscover = tokio::time::interval(shared.config.rediscovery);
    rediscover.tick().await;
    let mut observe = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = observe.tick() => shared.observe(),
            _ = rediscover.tick() => {
                match discovery::discover(&shared.cluster.client, &shared.config.ignored).await {
                    Ok(found) => {
                        let changes = shared
                            .resources
                            .write()
                            .unwrap_or_else(|e| e.into_inner())
                            .update(found);
                        for id in changes.added {
                            if watched(&shared.resources.read().unwrap_or_else(|e| e.into_inner()), id) {
                                start_watch(&shared, id, &events_tx, &mut watches);
                            }
                        }
                        for id in changes.removed {
                            if let Some(task) = watches.remove(&id) {
                                task.abort();
                            }
                            let _ = events_tx.send(GraphEvent::Unserved(id)).await;
                        }
                        shared.metrics.watched_resources.set(watches.len() as i64);
                    }
                    Err(err) => tracing::warn!(%err, "rediscovering resources"),
                }
            }
        }
    }
    readiness.set(false);
    shared.queue.shut_down();
    for task in watches.into_values() {
        task.abort();
    }
    drop(events_tx);
    for worker in workers {
        let _ = worker.await;
    }
    let _ = writer.await;
}

fn watched(resources: &Resources, id: ResourceId) -> bool {
    resources.get(id).is_some_and(|r| r.watched)
}

fn start_watch(
    shared: &Arc<Shared>,
    id: ResourceId,
    events: &mpsc::Sender<GraphEvent>,
    watches: &mut HashMap<ResourceId, JoinHandle<()>>,
) {
    let Some(resource) = shared
        .resources
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(id)
        .cloned()
    else {
        return;
    };
    tracing::debug!(resource = %discovery::resource_name(&resource.api), "watching");
    let task = tokio::spawn(watch::watch(
        shared.cluster.client.clone(),
        id,
        resource,
        events.clone(),
        shared.metrics.clone(),
    ));
    if let Some(old) = watches.insert(id, task) {
        old.abort();
    }
}

/// Resolves when this replica stops leading (never, if nobody can change that any more).
async fn lost(leading: &mut signal::Receiver<bool>) {
    if leading.wait_for(|leader| !*leader).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// One worker: while this replica leads, takes items until the queue shuts down.
async fn work(shared: Arc<Shared>, mut leading: signal::Receiver<bool>) {
    loop {
        if leading.wait_for(|leader| *leader).await.is_err() {
            return;
        }
        let item = tokio::select! {
            item = shared.queue.next() => match item {
                Some(item) => item,
                None => return,
            },
            () = lost(&mut leading) => continue,
        };
        match shared.process(item).await {
            Ok(()) => shared.queue.forget(&item),
            Err(err) if err.is_retryable() => {
                let delay = shared.queue.retry(item);
                shared
                    .metrics
                    .queue_retries
                    .with_label_values(&[item.name()])
                    .inc();
                tracing::debug!(?item, %err, retry_in = ?delay, "retrying");
            }
            Err(err) => {
                shared.queue.forget(&item);
                tracing::warn!(?item, %err, "giving up on an item");
            }
        }
        shared.queue.done(&item);
    }
}
