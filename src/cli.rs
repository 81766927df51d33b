//! The command line: `syncgc run` and `syncgc certs`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::certs::{DevCerts, SubjectAltNames};

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
    Run(RunArgs),
    /// Write development certificates: a CA and a serving certificate signed by it.
    Certs(CertsArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Kubeconfig file; without it, KUBECONFIG, ~/.kube/config or the in-cluster configuration.
    #[arg(long, env = "SYNCGC_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the plain-HTTP server for /metrics, /healthz and /readyz.
    #[arg(long, env = "SYNCGC_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
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
        Command::Run(args) => crate::app::run(args).await,
        Command::Certs(args) => certs(args),
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

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
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
    fn certs_rejects_a_bad_ip() {
        assert!(Cli::try_parse_from(["syncgc", "certs", "--out", "d", "--ip", "nope"]).is_err());
    }
}
