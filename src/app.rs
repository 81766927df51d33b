//! `syncgc run`: wires the parts together and runs them until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::aggregated;
use crate::api::{self, Cluster, RateLimiter};
use crate::duration::Backoff;
use crate::gc::watch::InitialList;
use crate::gc::{self, config::GcConfig};
use crate::graph::{Graph, Mode, Writer};
use crate::leader::{self, Election, Timing};
use crate::metrics::{self, Condition, Metrics, Readiness};
use crate::webhook::admit::{Policy, UnarmedDelete};
use crate::webhook::certificate::{Keeper, Validity};
use crate::webhook::handler::{self, Webhook};
use crate::webhook::managed::{CaSource, Managed};
use crate::webhook::registration::{
    Coverage, DEFAULT_EXCLUDED_NAMESPACES, GuardScope, Registration, ServerVersion, WebhookClient,
};
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

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Kubeconfig file; without it, KUBECONFIG, ~/.kube/config or the in-cluster configuration.
    #[arg(long, env = "SYNCGC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the plain-HTTP server for /metrics, /healthz and /readyz.
    #[arg(long, env = "SYNCGC_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Address of the HTTPS admission webhook (POST /mutate).
    #[arg(long, env = "SYNCGC_WEBHOOK_ADDR", default_value = "0.0.0.0:8443")]
    pub webhook_addr: SocketAddr,
    /// The webhook's serving certificate (PEM); reloaded when it changes.
    #[arg(
        long,
        env = "SYNCGC_TLS_CERT",
        default_value = "/etc/syncgc/tls/tls.crt"
    )]
    pub tls_cert: PathBuf,
    /// The webhook's private key (PEM); reloaded when it changes.
    #[arg(
        long,
        env = "SYNCGC_TLS_KEY",
        default_value = "/etc/syncgc/tls/tls.key"
    )]
    pub tls_key: PathBuf,
    /// Answer admission reviews only from clients that present a certificate signed by this CA
    /// (PEM): the apiserver, when its admission configuration gives it a client certificate for
    /// webhooks. Without it, anyone who reaches the webhook's port may post a review (and
    /// gets its answer only: side effects wait for the live object to bear the review out).
    #[arg(long, env = "SYNCGC_WEBHOOK_CLIENT_CA")]
    pub webhook_client_ca: Option<PathBuf>,
    /// cooperative: beside kube-controller-manager's garbage collector, syncgc handles its own
    /// finalizer; standalone: syncgc is the whole garbage collector (background, foreground,
    /// orphan), for control planes that run without kube-controller-manager's.
    #[arg(long, env = "SYNCGC_MODE", value_enum, default_value_t = Mode::Cooperative)]
    pub mode: Mode,
    /// What to do with a DELETE of an opted-in object that is not armed yet: let it go
    /// (not synchronously), or deny it and arm the object so that a retry is synchronous.
    #[arg(long, env = "SYNCGC_UNARMED_DELETE", value_enum, default_value_t = UnarmedDelete::Allow)]
    pub unarmed_delete: UnarmedDelete,
    /// Record why each object goes (the DELETEs the webhook lets through, and the references
    /// the collector removes), name the root of a cascade in the User-Agent of the
    /// collector's requests, and serve them as `deletioncauses` (`syncgc explain --why-deleted`).
    #[arg(long, env = "SYNCGC_RECORD_CAUSES", default_value_t = true, action = clap::ArgAction::Set,
          value_name = "BOOL")]
    pub record_causes: bool,
    /// Timeouts and the client's rate.
    #[command(flatten)]
    pub collector: gc::config::CollectorArgs,
    /// Garbage-collector workers.
    #[arg(long, env = "SYNCGC_WORKERS", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub workers: u16,
    /// Leader election among replicas (boxed: it would make every `Command` as big).
    #[command(flatten)]
    pub leader_election: Box<LeaderElectionArgs>,
    /// A resource never watched, as `plural` (core group) or `plural.group` (repeatable).
    #[arg(long = "ignore-resource", env = "SYNCGC_IGNORE_RESOURCES", value_delimiter = ',', value_name = "RESOURCE",
          default_values_t = ["events".to_owned(), "events.events.k8s.io".to_owned()])]
    pub ignored_resources: Vec<String>,
    /// How often the served resources are discovered again when no CustomResourceDefinition
    /// or APIService change asks sooner.
    #[arg(long, env = "SYNCGC_REDISCOVERY_INTERVAL", default_value = "20s", value_parser = crate::duration::parse)]
    pub rediscovery_interval: Duration,
    /// How each watch lists: `stream` (a streaming list: the objects come as the watch's first
    /// events, from the watch cache; Kubernetes 1.27+ with its WatchList feature on),
    /// `watch-cache` (the apiserver's watch cache, all at once, as informers and
    /// kube-controller-manager do; the watch then brings the graph up to date), `etcd`
    /// (consistent, a page at a time: slower to become ready, the same graph), or `auto`:
    /// `stream` where WatchList is on by default (1.32, and 1.34 on), else `watch-cache`.
    #[arg(long, env = "SYNCGC_INITIAL_LIST", value_enum, default_value_t = InitialList::Auto)]
    pub initial_list: InitialList,
    /// Before an owner goes, confirm with a fresh read of its namespace (or of the cluster, for
    /// a cluster-scoped owner) that nothing refers to it any more. Turning it off only serves
    /// to measure what it costs: an owner may then go while a dependent the watches have not
    /// delivered yet exists.
    #[arg(long, env = "SYNCGC_RELEASE_BARRIER", default_value_t = true, action = clap::ArgAction::Set)]
    pub release_barrier: bool,
    /// On SIGTERM, how long the webhook goes on answering (while `/readyz/webhook` fails) before
    /// it stops taking connections: the time the removal of the pod's endpoint takes to reach
    /// every apiserver, which would otherwise call a webhook that is gone.
    #[arg(long, env = "SYNCGC_SHUTDOWN_DELAY", default_value = "5s", value_parser = crate::duration::parse)]
    pub shutdown_delay: Duration,
    /// Serve `/debug/graph` (the graph around an object: kinds and names of objects in any
    /// namespace) on the metrics address.
    #[arg(long, env = "SYNCGC_DEBUG_GRAPH", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub debug_graph: bool,
    /// Where the webhook is registered and how the apiserver reaches it.
    #[command(flatten)]
    pub webhook: WebhookArgs,
    /// Create and keep up to date the MutatingWebhookConfiguration (--webhook-config-name):
    /// rules and fields for the server's version, and the CA bundle of --tls-secret or
    /// --webhook-ca-file. Every replica may do it; a replica writes only what differs.
    #[arg(long, env = "SYNCGC_MANAGE_WEBHOOK")]
    pub manage_webhook: bool,
    /// With --manage-webhook, the CA bundle (PEM) to publish, read again when it changes
    /// (for a certificate from cert-manager: the Secret's ca.crt).
    #[arg(
        long,
        env = "SYNCGC_WEBHOOK_CA_FILE",
        value_name = "FILE",
        conflicts_with = "tls_secret"
    )]
    pub webhook_ca_file: Option<PathBuf>,
    /// Keep a CA and the serving certificate in this Secret, as NAMESPACE/NAME (keys ca.crt,
    /// ca.key, tls.crt, tls.key): generated when missing, renewed before they expire, served
    /// without a restart. Replaces --tls-cert and --tls-key; needs --manage-webhook, which
    /// publishes each new CA before a certificate it signed is served.
    #[arg(long, env = "SYNCGC_TLS_SECRET", value_name = "NAMESPACE/NAME", requires = "manage_webhook", value_parser = secret_name)]
    pub tls_secret: Option<(String, String)>,
    /// Certificates kept in --tls-secret: how long they are valid and when they are renewed.
    #[command(flatten)]
    pub validity: ValidityArgs,
}

fn secret_name(text: &str) -> Result<(String, String), String> {
    crate::names::namespaced_name(text)
        .ok_or_else(|| format!("{text:?} is not a Secret as NAMESPACE/NAME"))
}

/// The certificates of `--tls-secret`.
#[derive(Debug, Args)]
pub struct ValidityArgs {
    /// How long a new CA is valid.
    #[arg(long, env = "SYNCGC_TLS_CA_VALIDITY", default_value = "87600h", value_parser = crate::duration::parse)]
    pub tls_ca_validity: Duration,
    /// How long a new serving certificate is valid (never longer than its CA).
    #[arg(long, env = "SYNCGC_TLS_CERT_VALIDITY", default_value = "8760h", value_parser = crate::duration::parse)]
    pub tls_cert_validity: Duration,
    /// How long before it expires a CA or a serving certificate is renewed.
    #[arg(long, env = "SYNCGC_TLS_RENEW_BEFORE", default_value = "720h", value_parser = crate::duration::parse)]
    pub tls_renew_before: Duration,
}

/// The MutatingWebhookConfiguration: its name, how the apiserver reaches the webhook, and
/// what it sends there.
#[derive(Debug, Args)]
pub struct WebhookArgs {
    /// The MutatingWebhookConfiguration's name.
    #[arg(
        long,
        alias = "name",
        env = "SYNCGC_WEBHOOK_CONFIG_NAME",
        default_value = "syncgc"
    )]
    pub webhook_config_name: String,
    /// The webhook's URL, for a webhook outside the cluster, e.g. https://127.0.0.1:8443/mutate.
    #[arg(long, alias = "url", env = "SYNCGC_WEBHOOK_URL", value_name = "URL",
          conflicts_with = "webhook_service", value_parser = url_client)]
    pub webhook_url: Option<WebhookClient>,
    /// The webhook's Service, as NAMESPACE/NAME (port 443, path /mutate).
    #[arg(long, alias = "service", env = "SYNCGC_WEBHOOK_SERVICE", value_name = "NAMESPACE/NAME",
          value_parser = service_client)]
    pub webhook_service: Option<WebhookClient>,
    /// Seconds the apiserver waits for an answer.
    #[arg(long, alias = "timeout-seconds", env = "SYNCGC_WEBHOOK_TIMEOUT_SECONDS", default_value_t = 3,
          value_parser = clap::value_parser!(i32).range(1..=30))]
    pub webhook_timeout_seconds: i32,
    /// A namespace whose objects the webhook never sees (repeatable).
    #[arg(long = "exclude-namespace", env = "SYNCGC_EXCLUDE_NAMESPACES", value_delimiter = ',', value_name = "NAME",
          default_values_t = DEFAULT_EXCLUDED_NAMESPACES.map(str::to_owned))]
    pub excluded_namespaces: Vec<String>,
    /// The guards on DELETE (syncgc.io/protected, syncgc.io/max-cascade,
    /// syncgc.io/handles-finalizers): their webhook then sees the DELETEs of the objects
    /// labelled syncgc.io/guarded, which syncgc keeps on what a guard may concern, and every
    /// Pod's eviction. `--guards=false`: no guard acts.
    #[arg(long, env = "SYNCGC_GUARDS", default_value_t = true, action = clap::ArgAction::Set,
          value_name = "BOOL")]
    pub guards: bool,
    /// The cascade limit of every object without `syncgc.io/max-cascade`: a DELETE that would
    /// delete more objects is refused (needs the guards). Off by default: set, it makes every
    /// DELETE in the cluster reach the guards.
    #[arg(long, env = "SYNCGC_MAX_CASCADE", value_name = "OBJECTS")]
    pub max_cascade: Option<usize>,
}

impl WebhookArgs {
    /// How the apiserver reaches the webhook, if a flag says.
    pub fn client(&self) -> Option<WebhookClient> {
        self.webhook_url
            .clone()
            .or_else(|| self.webhook_service.clone())
    }

    /// The registration, but for what only the cluster knows (set to no CA and `Every`).
    pub fn registration(
        &self,
        client: WebhookClient,
        unarmed_delete: UnarmedDelete,
        server: ServerVersion,
    ) -> Registration {
        Registration {
            name: self.webhook_config_name.clone(),
            client,
            ca_bundle: Vec::new(),
            timeout_seconds: self.webhook_timeout_seconds,
            excluded_namespaces: self.excluded_namespaces.clone(),
            unarmed_delete,
            guards: GuardScope::of(self.guards, self.max_cascade),
            server,
            scope: Coverage::Every,
            own_user: None,
        }
    }
}

fn url_client(text: &str) -> Result<WebhookClient, String> {
    match text.parse()? {
        url @ WebhookClient::Url(_) => Ok(url),
        WebhookClient::Service { .. } => Err(format!("{text:?} is not an https:// URL")),
    }
}

fn service_client(text: &str) -> Result<WebhookClient, String> {
    match text.parse()? {
        service @ WebhookClient::Service { .. } => Ok(service),
        WebhookClient::Url(_) => Err(format!("{text:?} is not a Service as NAMESPACE/NAME")),
    }
}

/// The flags of leader election, by client-go's rules.
#[derive(Debug, Args)]
pub struct LeaderElectionArgs {
    /// Elect a leader among replicas with a Lease; only the leader's workers act.
    #[arg(long, env = "SYNCGC_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// The namespace of the leader Lease; without it, the pod's own (POD_NAMESPACE, else the
    /// service account's namespace file), else syncgc-system.
    #[arg(long, env = "SYNCGC_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// The name of the leader Lease.
    #[arg(long, env = "SYNCGC_LEADER_ELECTION_LEASE", default_value = "syncgc")]
    pub leader_election_lease: String,
    /// How long a lease lasts unchanged, as other replicas observe it, before one of them may
    /// take it over.
    #[arg(long, env = "SYNCGC_LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = crate::duration::parse)]
    pub leader_election_lease_duration: Duration,
    /// How long a leader keeps trying to renew its lease before it stops leading; shorter
    /// than the lease duration.
    #[arg(long, env = "SYNCGC_LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = crate::duration::parse)]
    pub leader_election_renew_deadline: Duration,
    /// How long replicas wait between two tries to take or renew the lease; shorter than the
    /// renew deadline.
    #[arg(long, env = "SYNCGC_LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = crate::duration::parse)]
    pub leader_election_retry_period: Duration,
}

impl RunArgs {
    /// What the flags say together that each alone cannot: checked before anything starts.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.collector.validate()
    }
}

/// Builds a single-threaded runtime.
pub type RuntimeBuilder = fn() -> std::io::Result<tokio::runtime::Runtime>;

/// The collector's runtime, shut down without waiting when it is dropped: dropping a runtime
/// waits for its tasks, which the async context `run` returns from forbids (a start-up error
/// after it was built, such as a certificate file that cannot be read, would end in a panic).
struct Background(Option<tokio::runtime::Runtime>);

impl Background {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("the runtime until dropped").handle()
    }

    /// Runs `future` to its end on this runtime, on the calling thread.
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.0
            .as_ref()
            .expect("the runtime until dropped")
            .block_on(future)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl RunArgs {
    /// Runs syncgc until SIGTERM or SIGINT. The garbage collector (discovery, watches, graph
    /// builder, workers, release barrier, and its client's connections) runs on a runtime and a
    /// thread of its own, built by `collector_runtime`: its tasks hand work to each other many
    /// times per object (a watch event to the builder, the builder to a worker, a worker to its
    /// request), and on one thread none of those hand-overs wakes another thread. The webhook and
    /// the metrics keep the multi-threaded runtime.
    pub async fn run(self, collector_runtime: RuntimeBuilder) -> anyhow::Result<()> {
        self.validate()?;
        tracing::info!(
            version = crate::names::VERSION,
            mode = ?self.mode,
            guards = self.webhook.guards,
            max_cascade = self.webhook.max_cascade,
            unarmed_delete = ?self.unarmed_delete,
            excluded_namespaces = ?self.webhook.excluded_namespaces,
            webhook_timeout_seconds = self.webhook.webhook_timeout_seconds,
            manage_webhook = self.manage_webhook,
            "syncgc starting"
        );
        let RunArgs {
            kubeconfig,
            metrics_addr,
            webhook_addr,
            tls_cert,
            tls_key,
            webhook_client_ca,
            mode,
            unarmed_delete,
            record_causes,
            collector: collector_args,
            workers,
            ignored_resources,
            rediscovery_interval,
            initial_list,
            release_barrier,
            leader_election: election_args,
            shutdown_delay,
            debug_graph,
            webhook: webhook_args,
            manage_webhook,
            webhook_ca_file,
            tls_secret,
            validity,
        } = self;
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
            (true, None) => {
                anyhow::bail!("--manage-webhook needs --webhook-service or --webhook-url")
            }
        };
        if managed_client.is_some() && tls_secret.is_none() && webhook_ca_file.is_none() {
            anyhow::bail!(
                "--manage-webhook needs --tls-secret or --webhook-ca-file for the CA bundle"
            );
        }
        let shutdown = CancellationToken::new();
        tokio::spawn(cancel_on_signal(shutdown.clone()));

        let metrics = Metrics::new().context("registering metrics")?;
        let readiness = Readiness::default();
        let config = api::config(kubeconfig.as_deref()).await?;
        let client = api::client(config.clone())?;
        // The webhook answers within the apiserver's timeout: its calls are not rate-limited.
        let webhook_cluster = Cluster::new(client.clone(), None, API_TIMEOUT, metrics.clone());
        let collector_runtime = Background(Some(
            collector_runtime().context("starting the collector's runtime")?,
        ));
        // Built in the collector's runtime, so that the client's tasks run there.
        let (gc_client, gc_streams) = {
            let _in = collector_runtime.handle().enter();
            (api::client(config.clone())?, api::streams(config)?)
        };
        let timeouts = collector_args.timeouts();
        let gc::config::CollectorArgs { qps, burst, .. } = collector_args.clone();
        let limiter = Arc::new(RateLimiter::new(qps, burst));
        let gc_cluster = Cluster::new(gc_client, Some(limiter), API_TIMEOUT, metrics.clone())
            .with_streams(gc_streams);
        // With an election, what the collector writes leaves only while this replica's lease
        // holds by its own clock.
        let fence = api::Fence::default();
        let gc_cluster = if election_timing.is_some() {
            gc_cluster.with_fence(fence.clone())
        } else {
            gc_cluster
        };

        // From the Secret syncgc keeps (set by the managing passes), or from files.
        let clients = |cert: ReloadingCert| match &webhook_client_ca {
            Some(ca) => cert.with_client_ca(ca),
            None => Ok(cert),
        };
        let cert = if tls_secret.is_some() {
            Arc::new(clients(ReloadingCert::empty())?)
        } else {
            let cert = Arc::new(clients(ReloadingCert::load(&tls_cert, &tls_key)?)?);
            let reload_metrics = metrics.clone();
            tokio::spawn(cert.clone().watch(
                CERT_CHECK_INTERVAL,
                shutdown.clone(),
                move |outcome| {
                    let result = match outcome {
                        Ok(Reload::Unchanged) => return,
                        Ok(Reload::Reloaded) => "reloaded",
                        Err(_) => "error",
                    };
                    reload_metrics
                        .certificate_reloads
                        .with_label_values(&[result])
                        .inc();
                },
            ));
            cert
        };
        let graph = Writer::new(Graph::new(mode));
        let causes = record_causes.then(gc::causes::Causes::default);
        let resources = gc::discovery::ResourcesWriter::default();
        tracing::info!(?mode, "garbage collector mode");
        // What each finalizer handler needs, read on every replica: each one's webhook judges.
        let needs = gc::needs::Needs::default();
        if webhook_args.guards {
            tokio::spawn(gc::needs::run(
                needs.clone(),
                graph.reader(),
                resources.reader(),
                webhook_cluster.clone(),
                metrics.clone(),
                shutdown.clone(),
            ));
        }
        let gc = Arc::new(gc::Collector::new(gc::context::Context::new(
            graph.reader(),
            resources.reader(),
            gc_cluster,
            metrics.clone(),
            GcConfig {
                timeouts,
                workers: usize::from(workers),
                ignored: ignored_resources,
                rediscovery: rediscovery_interval,
                initial_list,
                barrier: release_barrier,
                causes: causes.clone(),
                guards: webhook_args.guards,
                needs: needs.clone(),
            },
        )));
        // How the aggregation layer's front proxy vouches for users, read from the cluster; what
        // the users of syncgc's API and of the debug endpoints may read, asked of it.
        let front_proxy = Arc::new(parking_lot::RwLock::new(None));
        let access = aggregated::access::Access::new(webhook_cluster.clone());
        let delegated = aggregated::bearer::Delegated::new(webhook_cluster.clone(), access.clone());
        let webhook = handler::router(Webhook {
            graph: graph.reader(),
            resources: resources.reader(),
            policy: Policy {
                unarmed_delete,
                timeouts: Some(timeouts),
                max_cascade: webhook_args.max_cascade,
                guards: webhook_args.guards,
            },
            metrics: metrics.clone(),
            cluster: webhook_cluster.clone(),
            body_timeout: Duration::from_secs(10),
            causes: causes.clone(),
            readiness: readiness.clone(),
            authenticate: webhook_client_ca.is_some(),
            needs: needs.clone(),
        })
        // The metrics and probes on the webhook's port too, which every NetworkPolicy of an
        // install lets the apiserver reach: `syncgc check` reads them there through the
        // apiserver's proxy, wherever the apiserver runs.
        .merge(metrics::router(metrics.clone(), readiness.clone()))
        // syncgc.io/v1alpha1, to the aggregation layer's front proxy only.
        .merge(aggregated::router(Arc::new(aggregated::Aggregated {
            front_proxy: front_proxy.clone(),
            access: access.clone(),
            graph: graph.reader(),
            resources: resources.reader(),
            causes: causes.clone(),
            cluster: webhook_cluster.clone(),
            collector: collector_args,
            readiness: readiness.clone(),
            peers: aggregated::peers::Peers::new(&cert, webhook_cluster.clone()),
        })));
        tokio::spawn(aggregated::follow_front_proxy(
            front_proxy,
            cert.clone(),
            webhook_cluster.clone(),
            shutdown.clone(),
        ));
        if let Some(causes) = &causes {
            tokio::spawn(gc::causes::summarize(
                causes.clone(),
                graph.reader(),
                webhook_cluster.clone(),
            ));
        }
        let webhook_listener = TcpListener::bind(webhook_addr)
            .await
            .with_context(|| format!("binding the webhook address {webhook_addr}"))?;
        tracing::info!(
            addr = %webhook_listener.local_addr()?,
            "serving the admission webhook (HTTPS, POST /mutate; and /metrics, /healthz, /readyz)"
        );
        let webhook_stop = CancellationToken::new();
        tokio::spawn(stop_webhook_after(
            shutdown.clone(),
            shutdown_delay,
            readiness.clone(),
            webhook_stop.clone(),
        ));
        let webhook_server = tokio::spawn(server::serve(
            webhook_listener,
            cert.clone(),
            webhook,
            Limits::default(),
            metrics.webhook_connections.clone(),
            webhook_stop.clone(),
        ));

        let metrics_listener = TcpListener::bind(metrics_addr)
            .await
            .with_context(|| format!("binding the metrics address {metrics_addr}"))?;
        let mut metrics_router = metrics::router(metrics.clone(), readiness.clone());
        if debug_graph {
            metrics_router = metrics_router.merge(gc::debug::router(gc.clone()).layer(
                axum::middleware::from_fn_with_state(delegated, aggregated::bearer::authorized),
            ));
        }
        tracing::info!(
            addr = %metrics_listener.local_addr()?,
            debug_graph,
            "serving /metrics, /healthz, /readyz (and with --debug-graph /debug/graph)"
        );
        // Up as long as the webhook, so that probes see it shutting down.
        let metrics_server = axum::serve(metrics_listener, metrics_router)
            .with_graceful_shutdown(webhook_stop.clone().cancelled_owned());
        let metrics_server = tokio::spawn(metrics_server.into_future());

        let (leading_tx, leading) = tokio::sync::watch::channel(election_timing.is_none());
        // Without an election this replica always leads: the sender lives as long as `run`.
        let (election, _always_leading) = if let Some(timing) = election_timing {
            let identity = crate::api::client::replica();
            let (namespace, from) = leader::lease_namespace_here(leader_election_namespace);
            tracing::info!(%identity, lease = %leader_election_lease, %namespace, namespace_from = from, "electing a leader");
            let election = Election {
                namespace,
                name: leader_election_lease,
                identity,
                timing,
                mode: mode.as_str(),
            };
            // Not rate-limited with the collector's calls, and answered within the renew deadline.
            let cluster =
                Cluster::new(client.clone(), None, timing.renew_deadline, metrics.clone());
            // Stopped only once the collector has stopped: a leader keeps renewing while its
            // workers finish their items, and releases the Lease after their last write.
            let stop = CancellationToken::new();
            let task = tokio::spawn(election.run(
                cluster,
                leading_tx,
                fence,
                readiness.clone(),
                metrics.clone(),
                stop.clone(),
            ));
            (Some((task, stop)), None)
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
            resources: resources.reader(),
            readiness: readiness.clone(),
            metrics: metrics.clone(),
            own_user: Default::default(),
        };
        tokio::spawn(managed.run(shutdown.clone()))
    });
        let collector = {
            let run = gc::run(
                gc,
                graph,
                resources,
                readiness.clone(),
                leading,
                shutdown.clone(),
            );
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
        if let Some((election, stop)) = election {
            stop.cancel();
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
        metrics
            .apiserver_clock_offset
            .set(api::clock::offset().as_secs());
        tokio::time::sleep(if connected {
            PROBE_INTERVAL
        } else {
            backoff.failed()
        })
        .await;
    }
}

/// Once `shutdown` is asked for, fails the webhook's readiness, goes on answering for `delay`,
/// then stops the webhook (`stop`).
async fn stop_webhook_after(
    shutdown: CancellationToken,
    delay: Duration,
    readiness: Readiness,
    stop: CancellationToken,
) {
    shutdown.cancelled().await;
    readiness.fail(Condition::Webhook, "shutting down");
    if !delay.is_zero() {
        tracing::info!(
            ?delay,
            "answering admission reviews a while longer, until the endpoint's removal has reached the apiservers"
        );
        tokio::time::sleep(delay).await;
    }
    stop.cancel();
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
