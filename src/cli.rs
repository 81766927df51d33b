//! The command line: `syncgc run`, `certs`, `webhook-config`, `plan`, `explain`, `disarm` and
//! `check`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::app::{RunArgs, WebhookArgs};
use crate::certs::{DevCerts, SubjectAltNames};
use crate::check::CheckArgs;
use crate::disarm::DisarmArgs;
use crate::explain::Ending;
use crate::plan::PlanArgs;
use crate::report::Output;
use crate::webhook::admit::UnarmedDelete;
use crate::webhook::registration::{Coverage, ServerVersion};

#[derive(Debug, Parser)]
#[command(
    name = "syncgc",
    version = crate::names::VERSION,
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
    /// Print the MutatingWebhookConfiguration (JSON) for a webhook reached by URL or Service.
    WebhookConfig(WebhookConfigArgs),
    /// Before deleting: what a DELETE of an object would take down, as the garbage
    /// collector would run it (deleted in which wave, orphaned, kept, waiting on finalizers
    /// of others), the timeout syncgc would fix, and how long it would take.
    Plan(PlanArgs),
    /// Say what keeps an object from going: its finalizers and who removes them, and the
    /// dependents that block it. Exits 1 while the object is being deleted and blocked; with
    /// --watch, follows it until it is gone.
    Explain(ExplainArgs),
    /// For uninstalling: take syncgc's finalizer and armed label off every object, releasing
    /// those being deleted. Refuses while syncgc runs, unless forced.
    Disarm(DisarmArgs),
    /// Is syncgc working here? One line per check (the apiserver reaches the webhook, a
    /// replica leads, the certificate verifies, the permissions, the metrics), each with what
    /// to do when it fails. Exits 1 when a check fails; with --pre, checks a cluster before
    /// installing.
    Check(CheckArgs),
    /// Print the completion script of syncgc's command line for a shell: `source <(syncgc
    /// completion bash)`, or write it where the shell looks (`syncgc completion zsh >
    /// "${fpath[1]}/_syncgc"`, `syncgc completion fish > ~/.config/fish/completions/syncgc.fish`).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The object, as KIND/NAME (KIND: kind, plural or kind.group, any case).
    #[arg(value_name = "KIND/NAME")]
    pub object: String,
    /// Its namespace; the kubeconfig's by default.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub access: crate::api::Access,
    /// Output format: text, or the same report as JSON or YAML.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Follow the object: a line (with -o json, a JSON object) each time where its deletion
    /// stands changes (dependents left, blocking, wave, release barrier), until it is gone.
    /// Exits 0 once it is gone, 3 if syncgc released it by its timeout.
    #[arg(long, short = 'w', conflicts_with = "why_deleted")]
    pub watch: bool,
    /// Why the object, now gone, went: its DELETE, who sent it, and the causes up to the root
    /// of the cascade, from the running syncgc's record (the last deletions of the past hour),
    /// read through its API (`deletioncauses.syncgc.io`).
    #[arg(long)]
    pub why_deleted: bool,
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
    /// The user syncgc runs as, such as `system:serviceaccount:syncgc-system:syncgc`: from
    /// 1.28 on, its own DELETEs (judged in the process) skip the guards' webhook. `syncgc run
    /// --manage-webhook` asks the apiserver.
    #[arg(long, value_name = "USER")]
    pub own_user: Option<String>,
    /// To ask the cluster.
    #[command(flatten)]
    pub access: crate::api::Access,
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
    // The commands that answer a question (check, explain, plan) exit 2 on errors, as their
    // answers take 0, 1 and 3; the others 1.
    let done = |result: anyhow::Result<()>| result.map(|()| ExitCode::SUCCESS);
    let (result, on_error) = match command {
        Command::Run(args) => (done(args.run(collector_runtime).await), 1),
        Command::Certs(args) => (done(certs(args)), 1),
        Command::Completion { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "syncgc", &mut std::io::stdout());
            (Ok(ExitCode::SUCCESS), 1)
        }
        Command::WebhookConfig(args) => (done(webhook_config(args).await), 1),
        Command::Disarm(args) => (done(args.run().await), 1),
        Command::Plan(args) => (done(plan(&args).await), 2),
        Command::Check(args) => {
            let answer = args.run().await;
            (answer.map(|ok| ExitCode::from(if ok { 0 } else { 1 })), 2)
        }
        Command::Explain(ExplainArgs {
            object,
            namespace,
            access,
            output,
            why_deleted: true,
            ..
        }) => {
            let answer = async {
                let cluster = access
                    .cluster(None, std::time::Duration::from_secs(30))
                    .await?;
                let why = crate::explain::why::why_deleted(&cluster, &object, namespace.as_deref())
                    .await?;
                print!("{}", output.whole(|| &why, || why.text())?);
                Ok(ExitCode::SUCCESS)
            }
            .await;
            (answer, 2)
        }
        Command::Explain(ExplainArgs {
            object,
            namespace,
            access,
            output,
            watch,
            ..
        }) => {
            let answer =
                crate::explain::explain(&access, &object, namespace.as_deref(), output, watch)
                    .await;
            let code = |outcome| match outcome {
                Ending::Free => ExitCode::SUCCESS,
                Ending::Blocked => ExitCode::from(1),
                Ending::TimedOut => ExitCode::from(3),
            };
            (answer.map(code), 2)
        }
    };
    result.unwrap_or_else(|err| {
        tracing::error!("{err:#}");
        ExitCode::from(on_error)
    })
}

async fn plan(args: &PlanArgs) -> anyhow::Result<()> {
    let plan = args.run().await?;
    print!("{}", args.output.whole(|| &plan, || plan.text())?);
    Ok(())
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
        own_user,
        access,
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
                let cluster = access.client().await?;
                let version: ServerVersion = crate::api::server_version(&cluster)
                    .await?
                    .parse()
                    .map_err(|err| anyhow::anyhow!("the cluster's version: {err}"))?;
                let mut registration = webhook.registration(client, unarmed_delete, version);
                if !version.match_conditions() {
                    let found = crate::gc::discovery::discover(&cluster, &[]).await?;
                    registration.scope = Coverage::of_discovery(&found.resources, &found.failed);
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
    registration.own_user = own_user;
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
        // The message and the fields at the top level of each line, where log pipelines look.
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::time::Duration;

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
    fn rates_above_zero_and_a_maximum_wait_no_shorter_than_the_base() {
        let run = |args: &[&str]| {
            Cli::try_parse_from([&["syncgc", "run"][..], args].concat()).map(|cli| {
                match cli.command {
                    Command::Run(args) => args,
                    _ => panic!("not run"),
                }
            })
        };
        for bad in [
            &["--qps", "0"][..],
            &["--qps", "-1"],
            &["--qps", "x"],
            &["--burst", "0"],
        ] {
            let err = run(bad).unwrap_err().to_string();
            assert!(err.contains(bad[1]), "{bad:?}: {err}");
        }
        assert!(run(&["--qps", "0.5"]).unwrap().validate().is_ok());
        let err = run(&["--timeout-base", "2h"])
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("--timeout-max"), "{err}");
        assert!(run(&["--timeout-base", "1h"]).unwrap().validate().is_ok());
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
