//! The graph builder, the graph's one writer (upstream's `GraphBuilder`): it takes in what
//! discovery finds, keeps one watch per resource (GroupVersionResource: a resource served at
//! another version gets a new watch), applies the watches' events to the graph and queues the
//! work they bring up.
//!
//! Discovery runs beside it: at start, every [`GcConfig::rediscovery`](super::config::GcConfig), and
//! at once (after a short pause that gathers a burst) when a CustomResourceDefinition or an
//! APIService changes, since those change what is served, or when a worker asks.
//!
//! It does not know the collector: it hands the work the watches bring up to a [`Sink`].

use parking_lot::RwLock;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch as signal};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::duration::Backoff;

use super::config::GcConfig;
use super::discovery::{self, Aliases, Found, Rediscovery};
use super::watch::{self, GraphEvent, InitialList, WatchState};
use crate::api::Cluster;
use crate::graph::{ResourceId, Uid, Work, Writer};
use crate::metrics::Metrics;

/// How long a burst of CRD or APIService changes is gathered before discovering again.
const GATHER: Duration = Duration::from_millis(200);
/// How long the builder waits, at its start, for the apiserver's version (which says how the
/// watches list); without it they list as every version can.
const VERSION_WITHIN: Duration = Duration::from_secs(10);
/// The longest wait between two attempts at a discovery that failed as a whole.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Where the graph builder hands what the watches bring up: the collector's queue, its record
/// of recent deletions, the owners its release barrier holds.
pub trait Sink: Send + Sync + 'static {
    /// Work an event brought up; `first`: ahead of the work queued before.
    fn enqueue(&self, work: Work, first: bool);
    /// A watch saw `uid` deleted.
    fn gone(&self, uid: Uid);
    /// What the graph or the watches know changed: the owners held for it look again.
    fn wake_held(&self);
}

/// What the graph builder reads and asks besides its sink.
#[derive(Clone)]
pub struct Parts {
    pub cluster: Cluster,
    pub metrics: Metrics,
    pub config: GcConfig,
    /// Asked by the workers (a read that names a kind not served) for a discovery.
    pub rediscovery: Arc<Rediscovery>,
}

struct Builder {
    sink: Arc<dyn Sink>,
    parts: Parts,
    /// How each watch lists, on this apiserver.
    initial_list: InitialList,
    /// The graph's one writer.
    graph: Writer,
    /// The table of resources' one writer.
    discovery: discovery::ResourcesWriter,
    events: mpsc::Sender<GraphEvent>,
    watches: HashMap<ResourceId, JoinHandle<()>>,
    aliases: Arc<RwLock<Aliases>>,
    /// The watches that must list before the workers start; `None` before the first
    /// discovery.
    pending: Option<HashSet<ResourceId>>,
    /// Whose events make discovery look again.
    sources: Vec<ResourceId>,
}

/// Runs the graph builder until `shutdown`; `synced` turns true once every watch of the first
/// discovery has listed (or failed to, three times).
pub async fn run(
    sink: Arc<dyn Sink>,
    parts: Parts,
    graph: Writer,
    discovery: discovery::ResourcesWriter,
    synced: signal::Sender<bool>,
    shutdown: CancellationToken,
) {
    let (events_tx, mut events) = mpsc::channel::<GraphEvent>(4096);
    let (found_tx, mut found) = mpsc::channel::<Found>(1);
    let discoverer = tokio::spawn(discover(parts.clone(), found_tx, shutdown.clone()));
    // Whether the apiserver streams lists follows from its version, asked once.
    let version = tokio::time::timeout(VERSION_WITHIN, parts.cluster.server_version())
        .await
        .ok()
        .and_then(Result::ok);
    let initial_list =
        (parts.config.initial_list).on(version.and_then(|version| version.parse().ok()));
    tracing::info!(?initial_list, "how each watch lists");
    let mut builder = Builder {
        initial_list,
        sink,
        parts,
        graph,
        discovery,
        events: events_tx,
        watches: HashMap::new(),
        aliases: Arc::default(),
        pending: None,
        sources: Vec::new(),
    };
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            Some(found) = found.recv() => {
                builder.take_in(found);
                builder.sink.wake_held();
                if builder.pending.as_ref().is_some_and(HashSet::is_empty) {
                    let _ = synced.send(true);
                }
            }
            Some(event) = events.recv() => {
                match &event {
                    GraphEvent::Listed(id, _) | GraphEvent::ListFailed(id) => {
                        if let Some(pending) = &mut builder.pending
                            && pending.remove(id)
                            && pending.is_empty()
                        {
                            let _ = synced.send(true);
                        }
                    }
                    GraphEvent::Apply(id, _)
                    | GraphEvent::Page(id, _)
                    | GraphEvent::Delete(id, _) => {
                        if builder.sources.contains(id) {
                            tracing::debug!("a CRD or APIService changed: discovering again");
                            builder.parts.rediscovery.ask();
                        }
                    }
                    GraphEvent::Unserved(_) | GraphEvent::State(..) => {}
                }
                apply(&builder.graph, &*builder.sink, event);
            }
        }
    }
    for task in builder.watches.into_values() {
        task.abort();
    }
    let _ = discoverer.await;
}

/// Applies one watch event to the graph and hands the work it brings up to `sink`. An owner
/// waiting for its dependents that has none left goes ahead of the work queued before: its
/// release may be what the rest of its tree waits for.
pub(super) fn apply(graph: &Writer, sink: &dyn Sink, event: GraphEvent) {
    let work: Vec<(Work, bool)> = {
        let mut graph = graph.write();
        let work: Vec<Work> = match event {
            GraphEvent::Apply(id, observed) => graph.apply(id, observed),
            GraphEvent::Page(id, page) => page
                .into_iter()
                .flat_map(|observed| graph.apply(id, observed))
                .collect(),
            GraphEvent::Delete(_, uid) => {
                sink.gone(uid);
                graph.delete(uid)
            }
            GraphEvent::Listed(id, Some(listed)) => graph.reset(id, &listed),
            GraphEvent::Listed(_, None) => Vec::new(),
            GraphEvent::Unserved(id) => graph.unserve(id),
            GraphEvent::State(_, state) => {
                // A read that failed with the watch may succeed now.
                if state == WatchState::Watching {
                    sink.wake_held();
                }
                Vec::new()
            }
            GraphEvent::ListFailed(_) => Vec::new(),
        };
        work.into_iter()
            .map(|work| {
                let first = match work {
                    Work::SyncOwner(uid) => {
                        graph.node(uid).is_some_and(|n| n.dependents.is_empty())
                    }
                    _ => false,
                };
                (work, first)
            })
            .collect()
    };
    for (work, first) in work {
        sink.enqueue(work, first);
    }
}

impl Builder {
    /// Takes in a discovery: starts, restarts and stops watches as it says.
    fn take_in(&mut self, found: Found) {
        tracing::debug!(
            resources = found.resources.len(),
            failed = found.failed.len(),
            "discovered"
        );
        let changes = self.discovery.update(found);
        let (failed, aliases) = {
            let resources = self.discovery.read();
            self.sources = discovery::SOURCES
                .iter()
                .filter_map(|name| resources.by_name(name))
                .collect();
            let failed: Vec<String> = resources.failed_groups().iter().cloned().collect();
            (failed, resources.aliases().clone())
        };
        *self.aliases.write() = aliases;
        let metrics = self.parts.metrics.clone();
        metrics
            .discovery_failed_groups
            .set(i64::try_from(failed.len()).unwrap_or(i64::MAX));
        if changes.failed_changed {
            if failed.is_empty() {
                tracing::info!("every API group answers discovery again");
            } else {
                tracing::warn!(
                    groups = ?failed,
                    "discovery failed for these API groups; their resources keep the watches they had, and discovery tries again"
                );
            }
        }
        let first = self.pending.is_none();
        let mut started = HashSet::new();
        for id in changes.added.iter().chain(&changes.moved) {
            if self.start(*id, first) {
                started.insert(*id);
            }
        }
        for id in &changes.removed {
            if let Some(task) = self.watches.remove(id) {
                task.abort();
            }
            // The graph learns it through the same channel as the watch's last events.
            let events = self.events.clone();
            let id = *id;
            tokio::spawn(async move { events.send(GraphEvent::Unserved(id)).await });
        }
        for (change, ids) in [
            ("added", &changes.added),
            ("moved", &changes.moved),
            ("removed", &changes.removed),
        ] {
            metrics
                .resource_changes
                .with_label_values(&[change])
                .inc_by(ids.len() as u64);
        }
        if !first {
            let resources = self.discovery.read();
            let name = |id: &ResourceId| {
                resources
                    .get(*id)
                    .map(|r| format!("{} ({})", discovery::resource_name(&r.api), r.api.version))
            };
            for (what, ids) in [
                ("watching a new resource", &changes.added),
                ("watching a resource at another version", &changes.moved),
                ("no longer served; stopped watching", &changes.removed),
            ] {
                for resource in ids.iter().filter_map(name) {
                    tracing::info!(%resource, "{what}");
                }
            }
        }
        if first {
            tracing::info!(resources = started.len(), "watching resources");
            self.pending = Some(started);
        }
        metrics.watched_resources.set(self.watches.len() as i64);
    }

    /// Starts (or restarts) the watch of `id` at its version; false when it is not watched.
    /// `fresh`: the graph holds no object of it yet (the first discovery).
    fn start(&mut self, id: ResourceId, fresh: bool) -> bool {
        let Some(resource) = self
            .discovery
            .read()
            .get(id)
            .filter(|r| r.watched && r.served)
            .cloned()
        else {
            return false;
        };
        tracing::debug!(resource = %discovery::resource_name(&resource.api), version = %resource.api.version, "watching");
        let task = tokio::spawn(watch::watch(
            self.parts.cluster.streams().clone(),
            id,
            resource,
            self.initial_list,
            fresh,
            self.aliases.clone(),
            self.events.clone(),
            self.parts.metrics.clone(),
        ));
        if let Some(old) = self.watches.insert(id, task) {
            old.abort();
        }
        true
    }
}

/// Discovers the served resources whenever asked (and every rediscovery interval), sending
/// what it finds to the builder; a discovery that fails as a whole is retried with backoff.
async fn discover(parts: Parts, found: mpsc::Sender<Found>, shutdown: CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_millis(500), MAX_BACKOFF);
    loop {
        let wait = match discovery::discover(parts.cluster.streams(), &parts.config.ignored).await {
            Ok(answer) => {
                backoff.reset();
                if found.send(answer).await.is_err() {
                    return;
                }
                parts.config.rediscovery
            }
            Err(err) => {
                parts.metrics.discovery_errors.inc();
                let wait = backoff.failed();
                tracing::warn!(%err, retry_in = ?wait, "discovering the served resources");
                wait
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
            () = parts.rediscovery.asked() => {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(GATHER) => {}
                }
            }
        }
    }
}
