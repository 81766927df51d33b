//! The fault injector: the kinds of fault, each struck at the replica that leads, at the other,
//! or at kube-apiserver and etcd (through `hack/cluster.sh`), and what it showed: how long the
//! other replica took to lead, the 429s the replicas met, the lists again after 410 Gone.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use parking_lot::Mutex;

use crate::plane::{self, Plane};
use crate::{Replica, Rng, leader, leads};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    KillLeader,
    PauseLeader,
    RestartApiserver,
    RestartEtcd,
    CompactBehindAWatch,
    SqueezeInflight,
    SkewAClock,
}

pub const FAULTS: [Fault; 7] = [
    Fault::KillLeader,
    Fault::PauseLeader,
    Fault::RestartApiserver,
    Fault::RestartEtcd,
    Fault::CompactBehindAWatch,
    Fault::SqueezeInflight,
    Fault::SkewAClock,
];

fn cluster(args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/cluster.sh"))
        .args(args)
        .envs(env.iter().copied())
        .output()?;
    if !out.status.success() {
        bail!(
            "hack/cluster.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// What a fault showed.
#[derive(Default)]
pub struct Struck {
    /// How long the other replica took to lead, when the leader went.
    pub handover: Option<Duration>,
    /// The 429s the replicas met (items queued again as `throttled`).
    pub throttled: u64,
    /// The lists again after 410 Gone of the replica whose watches were compacted away.
    pub relisted: u64,
    /// A replica that did not exit when it was told to.
    pub unstopped: Option<String>,
}

impl Struck {
    fn handover(took: Option<Duration>) -> Self {
        Self {
            handover: took,
            ..Self::default()
        }
    }
}

/// Each replica's count of items queued again after a 429.
async fn throttled(replicas: &Mutex<Vec<Replica>>) -> Vec<f64> {
    let addresses: Vec<SocketAddr> = replicas.lock().iter().map(|r| r.metrics).collect();
    let mut counts = Vec::new();
    for metrics in addresses {
        let count = plane::metric(
            metrics,
            "syncgc_queue_retries_total",
            "reason=\"throttled\"",
        )
        .await
        .unwrap_or(0.0);
        counts.push(count);
    }
    counts
}

/// The replica a fault aimed at the leader strikes, and the one a fault aimed at the follower
/// does: with a never-faulted replica (the first), both are the other.
fn targets(lead: usize, steady: bool) -> (usize, usize) {
    if steady { (1, 1) } else { (lead, 1 - lead) }
}

/// Strikes `fault`; says what it showed, with the handover time when it moved the lease.
pub async fn strike(
    fault: Fault,
    plane: &Plane,
    replicas: &Mutex<Vec<Replica>>,
    standalone: bool,
    steady: bool,
    rng: &mut Rng,
) -> Result<Struck> {
    let Some(lead) = leader(replicas, Duration::from_secs(30)).await else {
        bail!("no replica leads");
    };
    let (at_leader, at_follower) = targets(lead, steady);
    // How long the other replica took to lead, when the one struck led.
    let handover = |started: Instant| async move {
        if at_leader != lead {
            return None;
        }
        let other = 1 - lead;
        let deadline = started + Duration::from_secs(60);
        loop {
            let metrics = replicas.lock()[other].metrics;
            if leads(metrics).await {
                return Some(started.elapsed());
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    match fault {
        Fault::KillLeader => {
            let started = Instant::now();
            let _ = replicas.lock()[at_leader].stop("-KILL");
            let took = handover(started).await;
            tokio::time::sleep(rng.between(Duration::from_secs(1), Duration::from_secs(5))).await;
            replicas.lock()[at_leader].start(plane, standalone, None)?;
            Ok(Struck::handover(took))
        }
        Fault::PauseLeader => {
            let started = Instant::now();
            let pause = rng.between(Duration::from_secs(6), Duration::from_secs(12));
            {
                let mut replicas = replicas.lock();
                replicas[at_leader].quiet_until = Instant::now() + pause + Duration::from_secs(5);
                replicas[at_leader].signal("-STOP");
            }
            let took = handover(started).await;
            tokio::time::sleep(pause.saturating_sub(started.elapsed())).await;
            replicas.lock()[at_leader].signal("-CONT");
            Ok(Struck::handover(took))
        }
        Fault::RestartApiserver => {
            cluster(&["restart-apiserver"], &[])?;
            Ok(Struck::default())
        }
        Fault::RestartEtcd => {
            cluster(&["restart-etcd"], &[])?;
            Ok(Struck::default())
        }
        Fault::CompactBehindAWatch => {
            // The follower's watches fall behind while it is stopped; the apiserver restarts
            // without its watch cache (the follower's connections close, and watches read etcd
            // from then on), and etcd is compacted past them: they resume into 410 Gone.
            let metrics = replicas.lock()[at_follower].metrics;
            let relists = || async move {
                plane::metric(metrics, "syncgc_watch_relists_total", "")
                    .await
                    .unwrap_or(0.0)
            };
            let before = relists().await;
            {
                let mut replicas = replicas.lock();
                replicas[at_follower].quiet_until = Instant::now() + Duration::from_secs(40);
                replicas[at_follower].signal("-STOP");
            }
            let restarted = cluster(
                &["restart-apiserver"],
                &[("SYNCGC_APISERVER_WATCH_CACHE", "false")],
            );
            tokio::time::sleep(Duration::from_secs(8)).await;
            let compacted = cluster(&["compact"], &[]);
            replicas.lock()[at_follower].signal("-CONT");
            tokio::time::sleep(Duration::from_secs(10)).await;
            let after = relists().await;
            let normal = cluster(&["restart-apiserver"], &[]);
            restarted?;
            compacted?;
            normal?;
            Ok(Struck {
                relisted: (after - before).max(0.0) as u64,
                ..Struck::default()
            })
        }
        Fault::SqueezeInflight => {
            // Without flow control, a request over the limits is refused with 429 at once.
            let squeezed = [
                ("SYNCGC_APISERVER_INFLIGHT", "4"),
                ("SYNCGC_APISERVER_MUTATING_INFLIGHT", "2"),
                ("SYNCGC_APISERVER_FLOW_CONTROL", "false"),
            ];
            let before = throttled(replicas).await;
            cluster(&["restart-apiserver"], &squeezed)?;
            tokio::time::sleep(rng.between(Duration::from_secs(20), Duration::from_secs(40))).await;
            let after = throttled(replicas).await;
            cluster(&["restart-apiserver"], &[])?;
            let met = before
                .iter()
                .zip(&after)
                .map(|(b, a)| (a - b).max(0.0) as u64)
                .sum();
            Ok(Struck {
                throttled: met,
                ..Struck::default()
            })
        }
        Fault::SkewAClock => {
            // The leader restarted on a clock two minutes off, either way.
            let skew = if rng.chance(50) { "+120s" } else { "-120s" };
            let started = Instant::now();
            let unstopped = replicas.lock()[at_leader].stop("-TERM");
            let took = handover(started).await;
            replicas.lock()[at_leader].start(plane, standalone, Some(skew))?;
            Ok(Struck {
                unstopped,
                ..Struck::handover(took)
            })
        }
    }
}
