//! `syncgc run`: wires the parts together and runs them until SIGTERM or SIGINT.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::{self, Cluster, RateLimiter};
use crate::cli::{LeaderElectionArgs, RunArgs};
use crate::duration::Backoff;
use crate::gc::decide::Timeouts;
use crate::gc::{self, GcConfig};
use crate::graph::Graph;
use crate::leader::{self, Election, Timing};
use crate::metrics::{self, Metrics, Readiness};
use crate::webhook::admit::Policy;
use crate::webhook::certificate::{Keeper, Validity};
use crate::webhook::handler::{self, Webhook};
use crate::webhook::managed::{CaSource, Managed};
use crate::webhook::registration::ServerVersion;
use crate::webhook::server::{self, Limits};
use crate::webhook::tls::{Reload, ReloadingCert};

/// How often the apiserver connection is checked once established.
const PROBE_INTERVAL: Duration = Duration::from_secs(15);
/// The longest wait between two attempts to reach the apiserver.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Time limit of one call to the apiserver.
const API_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the serving certificate files are checked for changes.
const CERT_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Builds a single-threaded runtime.
pub type RuntimeBuilder = fn() -> std::io::Result<tokio::runtime::Runtime>;

/// Runs syncgc until SIGTERM or SIGINT. The garbage collector (discovery, watches, graph
/// builder, workers, release barrier, and its client's connections) runs on a runtime and a
/// thread of its own, built by `collector_runtime`: its tasks hand work to each other many
/// times per object (a watch event to the builder, the builder to a worker, a worker to its
/// request), and on one thread none of those hand-overs wakes another thread. The webhook and
/// the metrics keep the multi-threaded runtime.
pub async fn run(args: RunArgs, collector_runtime: RuntimeBuilder) -> anyhow::Result<()> {
    let RunArgs {
        kubeconfig,
        metrics_addr,
        webhook_addr,
        tls_cert,
        tls_key,
        mode,
        unarmed_delete,
        timeout_base,
        timeout_per_dependent,
        timeout_max,
        workers,
        qps,
        burst,
        ignored_resources,
        rediscovery_interval,
        initial_list,
        release_barrier,
        leader_election: election_args,
        debug_graph,
        webhook: webhook_args,
        manage_webhook,
        webhook_ca_file,
        tls_secret,
        validity,
    } = args;
    let LeaderElectionArgs {
        leader_election,
        leader_election_namespace,
        leader_election_lease,
        leader_election_lease_duration,
        leader_election_renew_deadline,
        leader_election_retry_period,
    } = *election_args;
    // client-go's rules for the three durations, checked before anything starts.
    let election_timing = leader_election
        .then(|| {
            Timing::new(
                leader_election_lease_duration,
                leader_election_renew_deadline,
                leader_election_retry_period,
            )
        })
        .transpose()?;
    let validity = Validity {
        ca: validity.tls_ca_validity,
        cert: validity.tls_cert_validity,
        renew_before: validity.tls_renew_before,
    }
    .check()
    .map_err(anyhow::Error::msg)?;
    // With --manage-webhook: where the webhook is, and where the CA bundle comes from.
    let managed_client = match (manage_webhook, webhook_args.client()) {
        (false, _) => None,
        (true, Some(client)) => Some(client),
        (true, None) => anyhow::bail!("--manage-webhook needs --webhook-service or --webhook-url"),
    };
    if managed_client.is_some() && tls_secret.is_none() && webhook_ca_file.is_none() {
        anyhow::bail!("--manage-webhook needs --tls-secret or --webhook-ca-file for the CA bundle");
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));

    let metrics = Metrics::new().context("registering metrics")?;
    let readiness = Readiness::default();
    let config = api::config(kubeconfig.as_deref()).await?;
    let client = api::client(config.clone())?;
    // The webhook answers within the apiserver's timeout: its calls are not rate-limited.
    let webhook_cluster = Cluster::new(client.clone(), None, API_TIMEOUT, metrics.clone());
    let collector_runtime = collector_runtime().context("starting the collector's runtime")?;
    // Built in the collector's runtime, so that the client's tasks run there.
    let gc_client = {
        let _in = collector_runtime.enter();
        api::client(config)?
    };
    let limiter = Arc::new(RateLimiter::new(qps, burst));
    let gc_cluster = Cluster::new(gc_client, Some(limiter), API_TIMEOUT, metrics.clone());

    // From the Secret syncgc keeps (set by the managing rounds), or from files.
    let cert = if tls_secret.is_some() {
        Arc::new(ReloadingCert::empty())
    } else {
        let cert = Arc::new(ReloadingCert::load(&tls_cert, &tls_key)?);
        let reload_metrics = metrics.clone();
        tokio::spawn(
            cert.clone()
                .watch(CERT_CHECK_INTERVAL, shutdown.clone(), move |outcome| {
                    let result = match outcome {
                        Ok(Reload::Unchanged) => return,
                        Ok(Reload::Reloaded) => "reloaded",
                        Err(_) => "error",
                    };
                    reload_metrics
                        .certificate_reloads
                        .with_label_values(&[result])
                        .inc();
                }),
        );
        cert
    };
    let graph = Arc::new(RwLock::new(Graph::new(mode)));
    tracing::info!(?mode, "garbage collector mode");
    let webhook = handler::router(Webhook {
        graph: graph.clone(),
        policy: Policy { unarmed_delete },
        metrics: metrics.clone(),
        cluster: webhook_cluster.clone(),
        body_timeout: Duration::from_secs(10),
    });
    let webhook_listener = TcpListener::bind(webhook_addr)
        .await
        .with_context(|| format!("binding the webhook address {webhook_addr}"))?;
    tracing::info!(
        addr = %webhook_listener.local_addr()?,
        "serving the admission webhook (HTTPS, POST /mutate)"
    );
    let webhook_server = tokio::spawn(server::serve(
        webhook_listener,
        cert.clone(),
        webhook,
        Limits::default(),
        shutdown.clone(),
    ));

    let gc = Arc::new(gc::Collector::new(
        graph,
        gc_cluster,
        metrics.clone(),
        GcConfig {
            timeouts: Timeouts {
                base: timeout_base,
                per_dependent: timeout_per_dependent,
                max: timeout_max,
            },
            workers: usize::from(workers),
            ignored: ignored_resources,
            rediscovery: rediscovery_interval,
            initial_list,
            barrier: release_barrier,
        },
    ));
    let metrics_listener = TcpListener::bind(metrics_addr)
        .await
        .with_context(|| format!("binding the metrics address {metrics_addr}"))?;
    let mut metrics_router = metrics::router(metrics.clone(), readiness.clone());
    if debug_graph {
        metrics_router = metrics_router.merge(gc::debug::router(gc.clone()));
    }
    tracing::info!(
        addr = %metrics_listener.local_addr()?,
        debug_graph,
        "serving /metrics, /healthz, /readyz (and with --debug-graph /debug/graph)"
    );
    let metrics_server = axum::serve(metrics_listener, metrics_router)
        .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let metrics_server = tokio::spawn(metrics_server.into_future());

    let (leading_tx, leading) = tokio::sync::watch::channel(election_timing.is_none());
    // Without an election this replica always leads: the sender lives as long as `run`.
    let (election, _always_leading) = if let Some(timing) = election_timing {
        let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "syncgc".to_owned());
            format!("{host}-{}", std::process::id())
        });
        let (namespace, from) = leader::lease_namespace_here(leader_election_namespace);
        tracing::info!(%identity, lease = %leader_election_lease, %namespace, namespace_from = from, "electing a leader");
        let election = Election {
            namespace,
            name: leader_election_lease,
            identity,
            timing,
        };
        // Not rate-limited with the collector's calls, and answered within the renew deadline.
        let cluster = Cluster::new(client.clone(), None, timing.renew_deadline, metrics.clone());
        let task = tokio::spawn(election.run(
            cluster,
            leading_tx,
            readiness.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
        (Some(task), None)
    } else {
        metrics.leader.set(1);
        (None, Some(leading_tx))
    };
    let managed = managed_client.map(|reached| {
        let ca = match tls_secret {
            Some(secret) => CaSource::Secret(Box::new(Keeper::new(
                &webhook_cluster,
                secret,
                reached.subject_alt_names(),
                validity,
            ))),
            None => CaSource::File(webhook_ca_file.unwrap_or_default()),
        };
        tracing::info!(configuration = %webhook_args.webhook_config_name, ?reached, "managing the webhook configuration");
        let managed = Managed {
            registration: webhook_args.registration(reached, unarmed_delete, ServerVersion::MATCH_CONDITIONS),
            cluster: webhook_cluster,
            ca,
            cert: cert.clone(),
            collector: gc.clone(),
            readiness: readiness.clone(),
            metrics: metrics.clone(),
        };
        tokio::spawn(managed.run(shutdown.clone()))
    });
    let collector = {
        let run = gc::run(gc, readiness.clone(), leading, shutdown.clone());
        std::thread::Builder::new()
            .name("collector".into())
            .spawn(move || collector_runtime.block_on(run))
            .context("starting the collector's thread")?
    };

    tokio::select! {
        () = shutdown.cancelled() => {}
        () = watch_apiserver(&client, &metrics) => {}
    }
    readiness.set(false);
    tokio::task::spawn_blocking(move || collector.join())
        .await
        .context("garbage collector thread")?
        .map_err(|_| anyhow::anyhow!("the garbage collector panicked"))?;
    if let Some(election) = election {
        election.await.context("leader election task")?;
    }
    if let Some(managed) = managed {
        managed.await.context("webhook management task")?;
    }
    tracing::info!("shutting down: finishing in-flight admission reviews");
    webhook_server.await.context("webhook server task")?;
    metrics_server.await.context("metrics server task")??;
    tracing::info!("stopped");
    Ok(())
}

/// Keeps `syncgc_apiserver_connected` true to whether the apiserver answers, checking more often
/// (with exponential backoff) while it does not.
async fn watch_apiserver(client: &kube::Client, metrics: &Metrics) {
    let mut backoff = Backoff::new(Duration::from_millis(250), MAX_BACKOFF);
    let mut connected = false;
    loop {
        match api::server_version(client).await {
            Ok(version) => {
                if !connected {
                    tracing::info!(%version, "connected to kube-apiserver");
                }
                connected = true;
                backoff.reset();
            }
            Err(err) => {
                tracing::warn!(%err, retry_in = ?backoff.peek(), "kube-apiserver does not answer");
                connected = false;
            }
        }
        metrics.apiserver_connected.set(i64::from(connected));
        tokio::time::sleep(if connected {
            PROBE_INTERVAL
        } else {
            backoff.failed()
        })
        .await;
    }
}

async fn cancel_on_signal(token: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => (term, int),
        (Err(err), _) | (_, Err(err)) => {
            tracing::error!(%err, "cannot listen for SIGTERM/SIGINT");
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
    token.cancel();
}
