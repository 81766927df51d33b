//! The garbage collector. In cooperative mode it handles syncgc's finalizer and the dependents
//! of the owners that carry it, beside the cluster's own GC; in standalone mode it is the whole
//! GC (background, `foregroundDeletion`, `orphan`). The mode only changes which work the graph
//! brings up (see [`crate::graph::Mode`]) and which owners a decision acts for.
//!
//! Its parts, as the upstream collector's:
//!
//! - [`discovery`]: which resources to watch (per GroupResource, partial failures tolerated).
//! - [`watch`]: one metadata-only watch per resource, reading [`crate::api::meta`]: the
//!   metadata the collector needs and nothing else.
//! - [`builder`]: the graph builder, the graph's one writer: discovery, the watches, and the
//!   work their events bring up; rediscovers at once when CRDs or APIServices change.
//! - [`queue`]: the deduplicating, delaying, backing-off work queue.
//! - [`decide`]: the pure decisions.
//! - [`config`]: how it is configured ([`config::GcConfig`], and the flags of
//!   [`config::CollectorArgs`] that `syncgc plan` shares).
//! - [`context`]: what every worker reads and acts through (the graph and resource readers,
//!   the API seam, metrics, the queue, the configuration, the objects deleted lately).
//! - [`collector`]: the worker loop and dispatch, and upstream's `attemptToDeleteItem` and
//!   `attemptToOrphan`; it hands waiting owners and unarmed objects to the parts below.
//! - [`synchronous`]: the synchronous finalizer: arming, deadlines ([`synchronous::Deadlines`]),
//!   the wait and the release.
//! - [`foreground`]: the foreground wait (`foregroundDeletion`, standalone mode).
//! - [`order`]: deletion order: which of a waiting owner's dependents go next, in waves
//!   ([`order::Orders`], pure, decided from the graph); [`waves`]: the workers' side, which
//!   says and queues it.
//! - [`barrier`]: the release barrier: no owner goes before a fresh read confirms that
//!   nothing refers to it any more (its bookkeeping; what holds an owner; a round's reads).
//! - [`cascade`]: a cascade run on a copy of the graph by the same rules, to its end: what a
//!   DELETE would take down (`syncgc plan`, a dry-run DELETE's warnings); [`snapshot`]: a
//!   scope's metadata read once into a graph for it (`syncgc plan` and `syncgc explain`).
//! - [`guard`]: the guards on DELETE (protected objects, cascade limits, finalizer handlers'
//!   holds), judged on the graph: for the webhook's reviews and the collector's own DELETEs.
//! - [`selection`]: which objects carry `syncgc.io/guarded`, the label the guards' DELETE
//!   webhook selects by (decided from the graph; kept by the leader).
//! - [`needs`]: what a finalizer handler needs to act (its account, bindings, configuration,
//!   Services), held with it.
//! - [`terminating`]: a protected object in a namespace being deleted holds it for a bounded
//!   time, and its siblings go meanwhile.
//! - [`causes`]: why each object went: the record the webhook and the collector write, the
//!   followed cascades, the root's Event and syncgc's `deletioncauses`.
//! - [`absent`]: owners verified absent, so that their many dependents cost one read.
//! - [`debug`]: `/debug/graph`, the graph around one object.
//! - `harness` (unit tests): the workers' scenarios, step by step, on paused time.
//!
//! Workers start only once every watch has listed once; `/readyz` says so.

pub mod absent;
pub mod barrier;
pub mod builder;
pub mod cascade;
pub mod causes;
pub mod collector;
pub mod config;
pub mod context;
pub mod debug;
pub mod decide;
pub mod discovery;
pub mod foreground;
pub mod guard;
#[cfg(test)]
mod harness;
pub mod needs;
pub mod order;
pub mod queue;
pub mod selection;
pub mod snapshot;
pub mod synchronous;
pub mod terminating;
pub mod watch;
pub mod waves;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch as signal;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use self::collector::Collector;
use crate::metrics::Readiness;

/// How often the gauges that describe the graph are refreshed.
const GAUGES_INTERVAL: Duration = Duration::from_secs(5);

/// Runs the collector until `shutdown`: the graph builder (discovery and watches), and — once
/// every watch has listed — the workers, which act while this replica leads.
pub async fn run(
    collector: Arc<Collector>,
    graph: crate::graph::Writer,
    resources: discovery::ResourcesWriter,
    readiness: Readiness,
    leading: signal::Receiver<bool>,
    shutdown: CancellationToken,
) {
    let (synced_tx, mut synced_rx) = signal::channel(false);
    let parts = builder::Parts {
        cluster: collector.cx.cluster.clone(),
        metrics: collector.cx.metrics.clone(),
        config: collector.cx.config.clone(),
        rediscovery: collector.rediscovery.clone(),
    };
    let builder = tokio::spawn(builder::run(
        collector.clone(),
        parts,
        graph,
        resources,
        synced_tx,
        shutdown.clone(),
    ));
    // The barrier minds which owners were deleted before this replica began to lead.
    let leads = {
        let collector = collector.clone();
        let mut leading = leading.clone();
        tokio::spawn(async move {
            while leading.wait_for(|leader| *leader).await.is_ok() {
                collector.barrier.leads_from(crate::api::clock::now());
                if leading.wait_for(|leader| !*leader).await.is_err() {
                    return;
                }
            }
        })
    };
    let barrier = {
        let collector = collector.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let served = |uid: crate::graph::Uid| {
                collector
                    .cx
                    .enqueue_first(crate::graph::Work::SyncOwner(uid));
            };
            let idle = || collector.cx.queue.idle();
            collector.barrier.run(served, idle, shutdown).await;
        })
    };
    tokio::select! {
        () = shutdown.cancelled() => {}
        _ = synced_rx.wait_for(|synced| *synced) => {
            let (observed, virtual_nodes) = collector.cx.graph().counts();
            tracing::info!(observed, virtual_nodes, "every watch has listed; starting workers");
            readiness.set(true);
        }
    }
    let selection = collector.cx.config.guards.then(|| {
        tokio::spawn(selection::run(
            collector.clone(),
            leading.clone(),
            shutdown.clone(),
        ))
    });
    let spawn = || {
        tokio::spawn(collector::work(
            collector.clone(),
            leading.clone(),
            shutdown.clone(),
        ))
    };
    let configured = collector.cx.config.workers.max(1);
    let mut workers: Vec<JoinHandle<()>> = if shutdown.is_cancelled() {
        Vec::new()
    } else {
        (0..configured).map(|_| spawn()).collect()
    };
    let mut degraded = false;
    let mut gauges = tokio::time::interval(GAUGES_INTERVAL);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = gauges.tick() => {
                collector.refresh_gauges();
                // A worker ends only at shutdown; one that ended otherwise is started again,
                // and the collector is not ready until it has been.
                let ended = workers.iter().filter(|w| w.is_finished()).count();
                if ended > 0 && !shutdown.is_cancelled() {
                    tracing::error!(ended, configured, "workers ended before shutdown; starting them again");
                    readiness.fail(
                        crate::metrics::Condition::Collector,
                        format!("{} of {configured} workers run", configured - ended),
                    );
                    workers.retain(|w| !w.is_finished());
                    workers.extend((0..ended).map(|_| spawn()));
                    degraded = true;
                } else if degraded {
                    readiness.set(true);
                    degraded = false;
                }
            }
        }
    }
    readiness.set(false);
    collector.cx.queue.shut_down();
    for worker in workers {
        let _ = worker.await;
    }
    let _ = builder.await;
    let _ = barrier.await;
    if let Some(selection) = selection {
        let _ = selection.await;
    }
    leads.abort();
}
