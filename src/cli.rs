//! The command line: `syncgc run`, `certs`, `webhook-config` and `explain`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::certs::{DevCerts, SubjectAltNames};
use crate::graph::Mode;
use crate::webhook::admit::UnarmedDelete;
use crate::webhook::registration::Registration;
use crate::webhook::registration::{DEFAULT_EXCLUDED_NAMESPACES, ServerVersion};

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
    /// Before an owner goes, confirm with a fresh read of its namespace (or of the cluster, for
    /// a cluster-scoped owner) that nothing refers to it any more. Turning it off only serves
    /// to measure what it costs: an owner may then go while a dependent the watches have not
    /// delivered yet exists.
    #[arg(long, env = "SYNCGC_RELEASE_BARRIER", default_value_t = true, action = clap::ArgAction::Set)]
    pub release_barrier: bool,
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
    /// The webhook's URL, e.g. https://127.0.0.1:8443/mutate.
    #[arg(long)]
    pub url: String,
    /// The CA certificate (PEM) that signed the webhook's serving certificate.
    #[arg(long, value_name = "FILE")]
    pub ca_file: PathBuf,
    /// The configuration's name.
    #[arg(long, default_value = "syncgc")]
    pub name: String,
    /// Seconds the apiserver waits for an answer.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=30))]
    pub timeout_seconds: i32,
    /// A namespace whose objects the webhook never sees (repeatable).
    #[arg(long = "exclude-namespace", value_name = "NAME", default_values_t = DEFAULT_EXCLUDED_NAMESPACES.map(str::to_owned))]
    pub excluded_namespaces: Vec<String>,
    /// The `--unarmed-delete` policy syncgc runs with: `deny` needs every DELETE, `allow`
    /// only those of armed objects.
    #[arg(long, env = "SYNCGC_UNARMED_DELETE", value_enum, default_value_t = UnarmedDelete::Allow)]
    pub unarmed_delete: UnarmedDelete,
    /// The Kubernetes version the configuration is for (1.28 and later get matchConditions);
    /// without it, the cluster of the kubeconfig is asked.
    #[arg(long, value_name = "VERSION")]
    pub server_version: Option<ServerVersion>,
    /// Kubeconfig file, to ask the cluster its version; without it, KUBECONFIG,
    /// ~/.kube/config or the in-cluster configuration.
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

/// Parses the command line, sets up logging and runs the subcommand.
pub async fn main() -> ExitCode {
    let Cli {
        log_format,
        command,
    } = Cli::parse();
    init_logging(log_format);
    let result = match command {
        Command::Run(args) => crate::app::run(*args).await,
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
        url,
        ca_file,
        name,
        timeout_seconds,
        excluded_namespaces,
        unarmed_delete,
        server_version,
        kubeconfig,
    } = args;
    let ca_bundle = std::fs::read(&ca_file)
        .map_err(|err| anyhow::anyhow!("reading {}: {err}", ca_file.display()))?;
    let server = match server_version {
        Some(version) => version,
        None => {
            let asked = async {
                let client = crate::api::client(crate::api::config(kubeconfig.as_deref()).await?)?;
                crate::api::server_version(&client).await
            };
            let version = asked.await.map_err(|err| {
                anyhow::anyhow!(
                    "asking the cluster for its version: {err}; give --server-version (e.g. 1.30)"
                )
            })?;
            version
                .parse()
                .map_err(|err| anyhow::anyhow!("the cluster's version: {err}"))?
        }
    };
    let registration = Registration {
        name,
        url,
        ca_bundle,
        timeout_seconds,
        excluded_namespaces,
        unarmed_delete,
        server,
    };
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
