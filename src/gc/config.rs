//! How the collector is configured: what `syncgc run` hands the collector ([`GcConfig`]), and
//! the flags that say how long owners wait and how fast it calls the apiserver
//! ([`CollectorArgs`], which `syncgc plan` takes too).

use std::time::Duration;

use super::{causes, needs, watch};
use crate::annotations::Timeouts;

/// How the garbage collector is configured.
#[derive(Debug, Clone)]
pub struct GcConfig {
    pub timeouts: Timeouts,
    pub workers: usize,
    /// Resources never watched, as `plural` (core) or `plural.group`.
    pub ignored: Vec<String>,
    /// How often the served resources are discovered again when nothing asks sooner.
    pub rediscovery: Duration,
    /// Where each watch's first list is read.
    pub initial_list: watch::InitialList,
    /// Whether owners pass the release barrier before they go (see [`super::barrier`]).
    pub barrier: bool,
    /// The record of why objects go, which the collector's requests name (`None`: causes
    /// neither recorded nor named).
    pub causes: Option<causes::Causes>,
    /// The guards on DELETE are on: the leader keeps their selection ([`super::selection`]).
    pub guards: bool,
    /// What each finalizer handler needs to act ([`needs`]): selected with it.
    pub needs: needs::Needs,
}

/// How long owners wait and how fast the collector calls the apiserver: flags of `syncgc run`,
/// which `syncgc plan` takes too (the same defaults and variables) to say what a DELETE takes.
#[derive(Debug, Clone, clap::Args)]
pub struct CollectorArgs {
    /// How long an owner waits for its dependents at least (`syncgc.io/timeout` overrides it).
    #[arg(long, env = "SYNCGC_TIMEOUT_BASE", default_value = "60s", value_parser = crate::duration::parse)]
    pub timeout_base: Duration,
    /// How much longer it waits for each direct and indirect dependent.
    #[arg(long, env = "SYNCGC_TIMEOUT_PER_DEPENDENT", default_value = "500ms", value_parser = crate::duration::parse)]
    pub timeout_per_dependent: Duration,
    /// The longest an owner waits; then it is released anyway.
    #[arg(long, env = "SYNCGC_TIMEOUT_MAX", default_value = "1h", value_parser = crate::duration::parse)]
    pub timeout_max: Duration,
    /// Client-side limit on the garbage collector's calls to the apiserver, per second.
    #[arg(long, env = "SYNCGC_QPS", default_value_t = 50.0, value_parser = positive)]
    pub qps: f64,
    /// Calls allowed in a burst above --qps.
    #[arg(long, env = "SYNCGC_BURST", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub burst: u32,
}

impl CollectorArgs {
    pub fn timeouts(&self) -> Timeouts {
        Timeouts {
            base: self.timeout_base,
            per_dependent: self.timeout_per_dependent,
            max: self.timeout_max,
        }
    }

    /// What the flags say together that each alone cannot.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.timeout_max >= self.timeout_base,
            "--timeout-max ({:?}) is shorter than --timeout-base ({:?}): no owner could wait as long as the base says",
            self.timeout_max,
            self.timeout_base
        );
        Ok(())
    }
}

/// A number above zero (a rate of zero would all but stop the collector).
fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(n) if n > 0.0 && n.is_finite() => Ok(n),
        Ok(_) => Err(format!("{text} is not above zero")),
        Err(err) => Err(format!("{text:?} is not a number: {err}")),
    }
}
