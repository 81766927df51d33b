//! The command line: `syncgc run`, `certs`, `webhook-config` and `explain`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::certs::{DevCerts, SubjectAltNames};
use crate::gc::watch::InitialList;
use crate::graph::Mode;
use crate::webhook::admit::UnarmedDelete;
use crate::webhook::registration::{
    DEFAULT_EXCLUDED_NAMESPACES, Registration, Scope, ServerVersion, WebhookClient,
};

#[derive(Debug, Parser)]
#[command(
    name = "syncgc",
    version,
    about = "Synchronous garbage collection for Kubernetes"
)]
pub struct Cli {
    /// Log format.
    #[arg(long, env = "SYNCGC_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run syncgc against a cluster.
    Run(Box<RunArgs>),
    /// Write development certificates: a CA and a serving certificate signed by it.
    Certs(CertsArgs),
    /// Print the MutatingWebhookConfiguration (JSON) for a webhook reached by URL.
    WebhookConfig(WebhookConfigArgs),
    /// Say what keeps an object from going: its finalizers and who removes them, and the
    /// dependents that block it. Exits 1 while the object is being deleted and blocked.
    Explain(ExplainArgs),
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The object, as KIND/NAME (KIND: kind, plural or kind.group, any case).
    #[arg(value_name = "KIND/NAME")]
    pub object: String,
    /// Its namespace; the kubeconfig's by default.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Kubeconfig file; without it, KUBECONFIG, ~/.kube/config or the in-cluster configuration.
    #[arg(long, env = "SYNCGC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

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
    /// cooperative: beside kube-controller-manager's garbage collector, syncgc handles its own
    /// finalizer; standalone: syncgc is the whole garbage collector (background, foreground,
    /// orphan), for control planes that run without kube-controller-manager's.
    #[arg(long, env = "SYNCGC_MODE", value_enum, default_value_t = Mode::Cooperative)]
    pub mode: Mode,
    /// What to do with a DELETE of an opted-in object that is not armed yet: let it go
    /// (not synchronously), or deny it and arm the object so that a retry is synchronous.
    #[arg(long, env = "SYNCGC_UNARMED_DELETE", value_enum, default_value_t = UnarmedDelete::Allow)]
    pub unarmed_delete: UnarmedDelete,
    /// How long an owner waits for its dependents at least (`syncgc.io/timeout` overrides it).
    #[arg(long, env = "SYNCGC_TIMEOUT_BASE", default_value = "60s", value_parser = duration)]
    pub timeout_base: Duration,
    /// How much longer it waits for each direct and indirect dependent.
    #[arg(long, env = "SYNCGC_TIMEOUT_PER_DEPENDENT", default_value = "500ms", value_parser = duration)]
    pub timeout_per_dependent: Duration,
    /// The longest an owner waits; then it is released anyway.
    #[arg(long, env = "SYNCGC_TIMEOUT_MAX", default_value = "1h", value_parser = duration)]
    pub timeout_max: Duration,
    /// Garbage-collector workers.
    #[arg(long, env = "SYNCGC_WORKERS", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub workers: u16,
    /// Client-side limit on the garbage collector's calls to the apiserver, per second.
    #[arg(long, env = "SYNCGC_QPS", default_value_t = 50.0)]
    pub qps: f64,
    /// Calls allowed in a burst above --qps.
    #[arg(long, env = "SYNCGC_BURST", default_value_t = 100)]
    pub burst: u32,
    /// Leader election among replicas (boxed: it would make every `Command` as big).
    #[command(flatten)]
    pub leader_election: Box<LeaderElectionArgs>,
    /// A resource never watched, as `plural` (core group) or `plural.group` (repeatable).
    #[arg(long = "ignore-resource", env = "SYNCGC_IGNORE_RESOURCES", value_delimiter = ',', value_name = "RESOURCE",
          default_values_t = ["events".to_owned(), "events.events.k8s.io".to_owned()])]
    pub ignored_resources: Vec<String>,
    /// How often the served resources are discovered again when no CustomResourceDefinition
    /// or APIService change asks sooner.
    #[arg(long, env = "SYNCGC_REDISCOVERY_INTERVAL", default_value = "20s", value_parser = duration)]
    pub rediscovery_interval: Duration,
    /// Where each watch's first list is read: `watch-cache` (the apiserver's watch cache, all
    /// at once, as informers and kube-controller-manager do; the watch then brings the graph up
    /// to date) or `etcd` (consistent, a page at a time: slower to become ready, the same graph).
    #[arg(long, env = "SYNCGC_INITIAL_LIST", value_enum, default_value_t = InitialList::WatchCache)]
    pub initial_list: InitialList,
    /// Before an owner goes, confirm with a fresh read of its namespace (or of the cluster, for
    /// a cluster-scoped owner) that nothing refers to it any more. Turning it off only serves
    /// to measure what it costs: an owner may then go while a dependent the watches have not
    /// delivered yet exists.
    #[arg(long, env = "SYNCGC_RELEASE_BARRIER", default_value_t = true, action = clap::ArgAction::Set)]
    pub release_barrier: bool,
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
    crate::webhook::registration::namespaced_name(text)
        .ok_or_else(|| format!("{text:?} is not a Secret as NAMESPACE/NAME"))
}

/// The certificates of `--tls-secret`.
#[derive(Debug, Args)]
pub struct ValidityArgs {
    /// How long a new CA is valid.
    #[arg(long, env = "SYNCGC_TLS_CA_VALIDITY", default_value = "87600h", value_parser = duration)]
    pub tls_ca_validity: Duration,
    /// How long a new serving certificate is valid (never longer than its CA).
    #[arg(long, env = "SYNCGC_TLS_CERT_VALIDITY", default_value = "8760h", value_parser = duration)]
    pub tls_cert_validity: Duration,
    /// How long before it expires a CA or a serving certificate is renewed.
    #[arg(long, env = "SYNCGC_TLS_RENEW_BEFORE", default_value = "720h", value_parser = duration)]
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
            server,
            scope: Scope::Every,
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

fn duration(text: &str) -> Result<Duration, crate::duration::DurationError> {
    crate::duration::parse(text)
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
    #[arg(long, env = "SYNCGC_LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = duration)]
    pub leader_election_lease_duration: Duration,
    /// How long a leader keeps trying to renew its lease before it stops leading; shorter
    /// than the lease duration.
    #[arg(long, env = "SYNCGC_LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = duration)]
    pub leader_election_renew_deadline: Duration,
    /// How long replicas wait between two tries to take or renew the lease; shorter than the
    /// renew deadline.
    #[arg(long, env = "SYNCGC_LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = duration)]
    pub leader_election_retry_period: Duration,
}

#[derive(Debug, Args)]
pub struct WebhookConfigArgs {
    /// The configuration's name, and where the webhook is (--webhook-url or --webhook-service).
    #[command(flatten)]
    pub webhook: WebhookArgs,
    /// The CA certificate (PEM) that signed the webhook's serving certificate.
    #[arg(long, value_name = "FILE")]
    pub ca_file: PathBuf,
    /// The `--unarmed-delete` policy syncgc runs with: `deny` needs every DELETE, `allow`
    /// only those of armed objects.
    #[arg(long, env = "SYNCGC_UNARMED_DELETE", value_enum, default_value_t = UnarmedDelete::Allow)]
    pub unarmed_delete: UnarmedDelete,
    /// The Kubernetes version the configuration is for (1.28 and later get matchConditions);
    /// without it, the cluster of the kubeconfig is asked, and before 1.28 its discovery
    /// narrows the rules as `syncgc run --manage-webhook` does.
    #[arg(long, value_name = "VERSION")]
    pub server_version: Option<ServerVersion>,
    /// Kubeconfig file, to ask the cluster; without it, KUBECONFIG, ~/.kube/config or the
    /// in-cluster configuration.
    #[arg(long, env = "SYNCGC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CertsArgs {
    /// Directory to write ca.crt, ca.key, tls.crt and tls.key into.
    #[arg(long)]
    pub out: PathBuf,
    /// A DNS subject alternative name of the serving certificate (repeatable).
    #[arg(long = "dns", value_name = "NAME")]
    pub dns: Vec<String>,
    /// An IP subject alternative name of the serving certificate (repeatable).
    #[arg(long = "ip", value_name = "IP")]
    pub ips: Vec<IpAddr>,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

/// Parses the command line, sets up logging and runs the subcommand. `collector_runtime`
/// builds the single-threaded runtime the garbage collector of `syncgc run` runs on.
pub async fn main(collector_runtime: crate::app::RuntimeBuilder) -> ExitCode {
    let Cli {
        log_format,
        command,
    } = Cli::parse();
    init_logging(log_format);
    let result = match command {
        Command::Run(args) => crate::app::run(*args, collector_runtime).await,
        Command::Certs(args) => certs(args),
        Command::WebhookConfig(args) => webhook_config(args).await,
        Command::Explain(ExplainArgs {
            object,
            namespace,
            kubeconfig,
        }) => {
            return match crate::explain::explain(
                kubeconfig.as_deref(),
                &object,
                namespace.as_deref(),
            )
            .await
            {
                Ok(false) => ExitCode::SUCCESS,
                Ok(true) => ExitCode::from(1),
                Err(err) => {
                    tracing::error!("{err:#}");
                    ExitCode::from(2)
                }
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            ExitCode::FAILURE
        }
    }
}

fn certs(args: CertsArgs) -> anyhow::Result<()> {
    let CertsArgs {
        out,
        dns,
        ips,
        force,
    } = args;
    let sans = SubjectAltNames { dns, ips };
    DevCerts::generate(&sans)?.write(&out, force)?;
    tracing::info!(dir = %out.display(), ?sans, "wrote ca.crt, ca.key, tls.crt, tls.key");
    Ok(())
}

async fn webhook_config(args: WebhookConfigArgs) -> anyhow::Result<()> {
    let WebhookConfigArgs {
        webhook,
        ca_file,
        unarmed_delete,
        server_version,
        kubeconfig,
    } = args;
    let client = webhook.client().ok_or_else(|| {
        anyhow::anyhow!("say where the webhook is: --webhook-url or --webhook-service")
    })?;
    let ca_bundle = std::fs::read(&ca_file)
        .map_err(|err| anyhow::anyhow!("reading {}: {err}", ca_file.display()))?;
    let mut registration = match server_version {
        Some(server) => webhook.registration(client, unarmed_delete, server),
        None => {
            let asked = async {
                let cluster = crate::api::client(crate::api::config(kubeconfig.as_deref()).await?)?;
                let version: ServerVersion = crate::api::server_version(&cluster)
                    .await?
                    .parse()
                    .map_err(|err| anyhow::anyhow!("the cluster's version: {err}"))?;
                let mut registration = webhook.registration(client, unarmed_delete, version);
                if !version.match_conditions() {
                    let found = crate::gc::discovery::discover(&cluster, &[]).await?;
                    registration.scope = Scope::of_discovery(&found.resources, &found.failed);
                    tracing::warn!(
                        %version,
                        "before 1.28 the rules list the API groups the cluster serves now: apply this again when a new group comes (syncgc run --manage-webhook does it by itself)"
                    );
                }
                anyhow::Ok(registration)
            };
            asked.await.map_err(|err| {
                anyhow::anyhow!("asking the cluster: {err:#}; give --server-version (e.g. 1.30)")
            })?
        }
    };
    registration.ca_bundle = ca_bundle;
    println!(
        "{}",
        serde_json::to_string_pretty(&registration.configuration())?
    );
    Ok(())
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn certs_takes_repeated_sans() {
        let cli = Cli::try_parse_from([
            "syncgc",
            "certs",
            "--out",
            "d",
            "--dns",
            "a",
            "--dns",
            "b",
            "--ip",
            "127.0.0.1",
        ])
        .unwrap();
        let Command::Certs(args) = cli.command else {
            panic!("not certs")
        };
        assert_eq!(args.dns, ["a", "b"]);
        assert_eq!(args.ips, ["127.0.0.1".parse::<IpAddr>().unwrap()]);
        assert!(!args.force);
    }

    #[test]
    fn leader_election_has_client_gos_defaults_and_no_fixed_namespace() {
        let cli = Cli::try_parse_from(["syncgc", "run"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        let election = &args.leader_election;
        assert!(election.leader_election);
        assert_eq!(election.leader_election_namespace, None);
        assert_eq!(
            election.leader_election_lease_duration,
            Duration::from_secs(15)
        );
        assert_eq!(
            election.leader_election_renew_deadline,
            Duration::from_secs(10)
        );
        assert_eq!(
            election.leader_election_retry_period,
            Duration::from_secs(2)
        );
    }

    #[test]
    fn certs_rejects_a_bad_ip() {
        assert!(Cli::try_parse_from(["syncgc", "certs", "--out", "d", "--ip", "nope"]).is_err());
    }
}
