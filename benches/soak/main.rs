//! The soak (`hack/soak.sh DURATION`): two syncgc replicas with leader election on the local
//! control plane, cooperative for the first half and standalone (kube-controller-manager
//! without its garbage collector) for the second, under a workload that keeps creating and
//! deleting trees of ConfigMaps of mixed shapes while a fault injector strikes at random
//! intervals. An observer of its own (one watch on every soak object, so its events come in
//! the apiserver's order) checks the invariants as events arrive and at the end:
//!
//! - no armed owner is released while a dependent of it (transitively) exists, nor a
//!   foreground one while a blocking dependent does, but by its deadline (armed: deleted while
//!   it carried the synchronous finalizer; one created while its webhook was away and armed by
//!   the collector only as its DELETE ran is counted apart);
//! - no wave of a deletion order goes while a higher one of the same owner is left;
//! - no object that must survive is deleted (anchors, bystanders, dependents with another live
//!   owner);
//! - every deleted owner's tree that syncgc collects (an armed owner's; in standalone mode
//!   every one) is gone within its timeout plus the faults' time (in cooperative mode
//!   kube-controller-manager collects the others, and those it is late with are counted);
//! - at the end no soak object refers to an owner that is gone;
//! - the replicas' webhooks answer but while their own process is down or stopped;
//! - memory: no replica process grows by more than [`LEAK`] over a life of at least
//!   [`LEAK_AFTER`] (its resident memory, sampled every [`MEMORY_EVERY`], from its first minute
//!   to its end; the faults restart replicas, so each process's life is measured apart).
//!
//! Faults: SIGKILL of the leader, SIGSTOP of the leader for longer than its lease, a restart
//! of kube-apiserver, a restart of etcd, etcd compacted behind a stopped replica's watches
//! (the apiserver restarted without its watch cache meanwhile, so they resume into 410 Gone),
//! the apiserver's in-flight limits squeezed without flow control (429s), and a replica
//! restarted on a clock two minutes off. The replicas run with a controller's credentials
//! (`controller.kubeconfig`: the admin's are never refused a 429); the workload and the
//! observer with the admin's. A violation fails the run and prints the history around it.
//!
//! `--steady`: standalone for the whole run, and the first replica is never faulted (it takes
//! the lease first; the faults aimed at a replica strike the other, the rest the apiserver and
//! etcd), so one process lives the whole run; its growth per hour after its first ten minutes
//! is reported and, over a life of [`STEADY_JUDGED`] or more, judged against
//! [`STEADY_GROWTH`].
//!
//! The parts: [`workload`] (what it creates and deletes), [`faults`] (the fault injector),
//! [`observer`] (what it watches and the invariants it checks) and [`report`] (the results);
//! here the replicas and the run's outline.
//!
//! [`LEAK`]: observer::LEAK
//! [`LEAK_AFTER`]: observer::LEAK_AFTER

mod faults;
mod observer;
mod report;
mod workload;

#[allow(dead_code)]
#[path = "../cluster/plane.rs"]
mod plane;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;
use syncgc::names::SYNCHRONOUS_ANNOTATION;

use faults::{FAULTS, Fault, strike};
use observer::{
    COLLECTED_WITHIN, Life, MEMORY_EVERY, Observer, STEADY_AFTER, STEADY_GROWTH, STEADY_JUDGED,
    answers, check_collected, key, observe, sample_memory, steady_growth,
};
use plane::{Kcm, Plane};
use report::{mib, report};
use workload::{Counts, Pending, config_map, one_tree, retire};

/// The label every soak object carries (the observer's selector) and its namespaces.
const LABEL: &str = "syncgc.io/soak";
const NAMESPACES: usize = 3;
const WORKERS: usize = 3;
/// The lease both replicas share, and the webhook configuration.
const NAME: &str = "syncgc-soak";
/// An armed owner's timeout: long beside any fault, so that a release by it is noticed.
const TIMEOUT: Duration = Duration::from_secs(120);

/// How long a replica may take to exit after SIGTERM (shutdown delay 0, items in flight, the
/// Lease's release).
const STOPS_WITHIN: Duration = Duration::from_secs(30);

// --- randomness (no crate: a xorshift seeded from the clock) --------------------------------

struct Rng(u64);

impl Rng {
    fn new(salt: u64) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Self((nanos ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = high.saturating_sub(low).as_millis() as u64;
        low + Duration::from_millis(self.below(span + 1))
    }
}

/// The name of syncgc's `--mode`, as the results say it too.
fn mode(standalone: bool) -> &'static str {
    if standalone {
        "standalone"
    } else {
        "cooperative"
    }
}

// --- the replicas ----------------------------------------------------------------------------

struct Replica {
    name: String,
    metrics: SocketAddr,
    webhook: SocketAddr,
    child: Option<Child>,
    /// When `child` was started.
    started: Instant,
    /// Not expected to answer until then (stopped, restarting).
    quiet_until: Instant,
}

impl Replica {
    fn name_of(index: usize) -> String {
        format!("soak-{index}")
    }

    fn new(index: usize) -> Result<Self> {
        Ok(Self {
            name: Replica::name_of(index),
            metrics: plane::free_port()?,
            webhook: plane::free_port()?,
            child: None,
            started: Instant::now(),
            quiet_until: Instant::now(),
        })
    }

    fn start(&mut self, plane: &Plane, standalone: bool, skew: Option<&str>) -> Result<()> {
        // A controller's credentials: the admin's (system:masters) are never refused a 429.
        let kubeconfig = PathBuf::from(std::env::var("SYNCGC_KUBECONFIG")?)
            .with_file_name("controller.kubeconfig");
        let mut command = Command::new(plane::syncgc_binary());
        command
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--webhook-addr", &self.webhook.to_string()])
            .args(["--metrics-addr", &self.metrics.to_string()])
            .arg("--tls-cert")
            .arg(plane.certs().join("tls.crt"))
            .arg("--tls-key")
            .arg(plane.certs().join("tls.key"))
            .args(["--mode", mode(standalone)])
            .args(["--leader-election-namespace", "syncgc-system"])
            .args(["--leader-election-lease", NAME])
            .args(["--leader-election-lease-duration", "4s"])
            .args(["--leader-election-renew-deadline", "3s"])
            .args(["--leader-election-retry-period", "500ms"])
            .args(["--timeout-base", &syncgc::duration::format(TIMEOUT)])
            .args(["--timeout-per-dependent", "0s"])
            .args(["--shutdown-delay", "0s", "--qps", "200", "--burst", "400"])
            .env("POD_NAME", &self.name)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(std::env::temp_dir().join(format!("{NAME}-{}.log", self.name)))?,
            );
        if let Some(skew) = skew {
            command
                .env(
                    "LD_PRELOAD",
                    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                )
                .env("FAKETIME", skew)
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        self.child = Some(command.spawn().context("starting syncgc run")?);
        self.started = Instant::now();
        self.quiet_until = Instant::now() + Duration::from_secs(15);
        Ok(())
    }

    fn pid(&self) -> Option<String> {
        self.child.as_ref().map(|c| c.id().to_string())
    }

    fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").args([signal, &pid]).status();
        }
    }

    /// Signals the process and waits for it to exit: a violation when it has not within
    /// [`STOPS_WITHIN`] (it is killed then).
    fn stop(&mut self, signal: &str) -> Option<String> {
        self.signal(signal);
        let mut child = self.child.take()?;
        let deadline = Instant::now() + STOPS_WITHIN;
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        Some(format!(
            "{} {} did not exit within {STOPS_WITHIN:?} of {signal}",
            jiff::Timestamp::now(),
            self.name
        ))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.stop("-KILL");
    }
}

/// Whether the replica whose metrics are at `metrics` leads.
async fn leads(metrics: SocketAddr) -> bool {
    plane::http_get(metrics, "/metrics")
        .await
        .is_ok_and(|(_, body)| body.lines().any(|l| l == "syncgc_leader 1"))
}

/// The index of the replica that leads, waiting up to `within` for one.
async fn leader(replicas: &Mutex<Vec<Replica>>, within: Duration) -> Option<usize> {
    let deadline = Instant::now() + within;
    loop {
        let candidates: Vec<(usize, SocketAddr, bool)> = replicas
            .lock()
            .iter()
            .enumerate()
            .map(|(i, r)| (i, r.metrics, r.child.is_some()))
            .collect();
        for (i, metrics, up) in candidates {
            if up && leads(metrics).await {
                return Some(i);
            }
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// --- the run ---------------------------------------------------------------------------------

struct Options {
    duration: Duration,
    out: PathBuf,
    /// One mode (standalone) for the whole run, and the first replica never faulted.
    steady: bool,
}

fn options() -> Result<Options> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let steady = args.iter().any(|a| a == "--steady");
    let mut args = args.into_iter().filter(|a| a != "--steady");
    let duration = args
        .next()
        .context("usage: hack/soak.sh DURATION [OUT] [--steady]")?;
    let duration = syncgc::duration::parse(&duration)?;
    let out = args.next().map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/benches/results/soak.md"
            ))
        },
        PathBuf::from,
    );
    Ok(Options {
        duration,
        out,
        steady,
    })
}

#[derive(Default)]
struct Tally {
    faults: BTreeMap<Fault, u64>,
    fault_errors: Vec<String>,
    handovers: Vec<Duration>,
    throttled: u64,
    relisted: u64,
    webhook_probes: u64,
    webhook_failures: Vec<String>,
    memory: Vec<Life>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let options = options()?;
    let work = tempfile::tempdir()?;
    let mut plane = Plane::connect(work.path()).await?;
    let client = plane.client.clone();
    let namespaces: Vec<String> = {
        let mut names = Vec::new();
        for _ in 0..NAMESPACES {
            names.push(plane.namespace("soak", &[(LABEL, "true")]).await?);
        }
        names
    };
    release_leftovers(&client, &namespaces).await?;
    let observer = Arc::new(Mutex::new(Observer::default()));
    let observing = tokio::spawn(observe(
        client.clone(),
        observer.clone(),
        namespaces.iter().cloned().collect(),
    ));
    let replicas = Arc::new(Mutex::new(vec![Replica::new(0)?, Replica::new(1)?]));
    let counts = Arc::new(Mutex::new(Counts::default()));
    let pending: Arc<Mutex<Vec<Pending>>> = Arc::default();
    let mut tally = Tally::default();
    let started = Instant::now();
    let mut rng = Rng::new(7);

    let halves: &[(u32, bool)] = if options.steady {
        &[(0, true)]
    } else {
        &[(0, false), (1, true)]
    };
    for &(half, standalone) in halves {
        let mode = mode(standalone);
        println!(
            "soak: {mode} {}, {:?}",
            if options.steady { "run" } else { "half" },
            options.duration / halves.len() as u32
        );
        plane
            .kcm(Kcm {
                gc: !standalone,
                ..Kcm::DEFAULT_LIMITS
            })
            .await?;
        for i in 0..2 {
            replicas.lock()[i].start(&plane, standalone, None)?;
            if options.steady && i == 0 {
                // The never-faulted replica leads first, alone, so it does the work while it
                // keeps the lease.
                leader(&replicas, Duration::from_secs(60))
                    .await
                    .context("the never-faulted replica did not take the lease")?;
            }
        }
        let webhook = replicas.lock()[0].webhook;
        plane
            .register_webhook(NAME, webhook, (LABEL, "true"), 5)
            .await?;
        leader(&replicas, Duration::from_secs(60))
            .await
            .context("no replica took the lease")?;
        // Anchors (owners that live) and bystanders (objects nothing deletes).
        let mut anchors = Vec::new();
        for ns in &namespaces {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let anchor = api
                .create(
                    &PostParams::default(),
                    &config_map(&format!("anchor-{half}"), "survivor", vec![]),
                )
                .await?;
            for b in 0..5 {
                let mut bystander =
                    config_map(&format!("bystander-{half}-{b}"), "survivor", vec![]);
                if b % 2 == 0 {
                    bystander.metadata.annotations =
                        Some([(SYNCHRONOUS_ANNOTATION.to_owned(), "true".to_owned())].into());
                }
                api.create(&PostParams::default(), &bystander).await?;
            }
            anchors.push((api, anchor));
        }
        let half_ends = started + options.duration * (half + 1) / halves.len() as u32;
        let workload: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (api, anchor) = anchors[w % anchors.len()].clone();
                let (counts, pending) = (counts.clone(), pending.clone());
                tokio::spawn(async move {
                    let mut rng = Rng::new(w as u64 + 100 * half as u64);
                    let mut id = (half as u64) << 40 | (w as u64) << 32;
                    while Instant::now() < half_ends {
                        id += 1;
                        match one_tree(&api, &anchor, id, standalone, &mut rng, &counts).await {
                            Ok(tree) => pending.lock().push(tree),
                            // The apiserver restarting or refusing (429): try again.
                            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                        }
                        tokio::time::sleep(
                            rng.between(Duration::from_millis(200), Duration::from_millis(1500)),
                        )
                        .await;
                    }
                })
            })
            .collect();

        let mut next_fault =
            Instant::now() + rng.between(Duration::from_secs(15), Duration::from_secs(40));
        let mut next_probe = Instant::now();
        let mut next_sample = Instant::now();
        let mut fault_index = rng.below(FAULTS.len() as u64) as usize;
        let mut retiring = Vec::new();
        while Instant::now() < half_ends {
            if Instant::now() >= next_probe {
                next_probe = Instant::now() + Duration::from_secs(5);
                let probes: Vec<(String, SocketAddr, bool)> = replicas
                    .lock()
                    .iter()
                    .map(|r| {
                        (
                            r.name.clone(),
                            r.webhook,
                            r.child.is_some() && Instant::now() >= r.quiet_until,
                        )
                    })
                    .collect();
                for (name, webhook, expected) in probes {
                    if !expected {
                        continue;
                    }
                    tally.webhook_probes += 1;
                    if !answers(webhook).await {
                        let failure = format!(
                            "{} the webhook of {name} did not answer",
                            jiff::Timestamp::now()
                        );
                        eprintln!("{failure}");
                        tally.webhook_failures.push(failure);
                    }
                }
                retiring.extend(check_collected(&observer, &pending, &counts, false));
                retire(&client, &observer, &mut retiring, &counts).await;
            }
            if Instant::now() >= next_sample {
                next_sample = Instant::now() + MEMORY_EVERY;
                sample_memory(&replicas, mode, &mut tally.memory);
            }
            if Instant::now() >= next_fault {
                // Round robin from a random start, so each kind comes as often.
                let fault = FAULTS[fault_index % FAULTS.len()];
                fault_index += 1;
                println!("soak: {:?} {fault:?}", started.elapsed());
                observer.lock().note(format!("fault {fault:?}"));
                match strike(
                    fault,
                    &plane,
                    &replicas,
                    standalone,
                    options.steady,
                    &mut rng,
                )
                .await
                {
                    Ok(struck) => {
                        tally.handovers.extend(struck.handover);
                        tally.throttled += struck.throttled;
                        tally.relisted += struck.relisted;
                        if let Some(unstopped) = struck.unstopped {
                            observer.lock().violation(unstopped);
                        }
                    }
                    Err(err) => {
                        eprintln!("fault {fault:?}: {err:#}");
                        tally.fault_errors.push(format!("{fault:?}: {err:#}"));
                    }
                }
                *tally.faults.entry(fault).or_default() += 1;
                next_fault =
                    Instant::now() + rng.between(Duration::from_secs(20), Duration::from_secs(50));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for worker in workload {
            let _ = worker.await;
        }
        // Every tree of this half is collected before the replicas change modes.
        let settle = Instant::now() + COLLECTED_WITHIN;
        while !pending.lock().is_empty() && Instant::now() < settle {
            let _ = check_collected(&observer, &pending, &counts, false);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let _ = check_collected(&observer, &pending, &counts, true);
        sample_memory(&replicas, mode, &mut tally.memory);
        for replica in replicas.lock().iter_mut() {
            if let Some(unstopped) = replica.stop("-TERM") {
                observer.lock().violation(unstopped);
            }
        }
    }

    // At the end: no soak object refers to an owner that is gone.
    let dangling = {
        let mut dangling = Vec::new();
        let mut uids = HashSet::new();
        let mut all = Vec::new();
        for ns in &namespaces {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            for cm in api.list(&ListParams::default()).await? {
                uids.insert(cm.uid().unwrap_or_default());
                all.push(cm);
            }
        }
        for cm in &all {
            for reference in cm.owner_references() {
                if !uids.contains(&reference.uid) {
                    dangling.push(format!("{} refers to {} (gone)", key(cm), reference.name));
                }
            }
        }
        dangling
    };
    for d in &dangling {
        observer
            .lock()
            .violation(format!("dangling reference: {d}"));
    }
    for life in tally.memory.iter().filter(|l| l.leaks()) {
        let (from, to) = (
            life.settled().unwrap_or_default(),
            life.last().unwrap_or_default(),
        );
        observer.lock().violation(format!(
            "{} (pid {}) grew from {:.1} MiB at {:?} to {:.1} MiB at {:?}",
            life.replica,
            life.pid,
            mib(from.1),
            from.0,
            mib(to.1),
            to.0
        ));
    }
    if options.steady
        && let Some((life, per_hour)) = steady_growth(&tally.memory)
    {
        let age = life.last().map_or(Duration::ZERO, |(age, _)| age);
        if age >= STEADY_JUDGED && per_hour > STEADY_GROWTH {
            observer.lock().violation(format!(
                "the never-faulted {} (pid {}) grew by {:.1} MiB per hour after its first {} minutes",
                life.replica,
                life.pid,
                per_hour / 1048576.0,
                STEADY_AFTER.as_secs() / 60
            ));
        }
    }
    observing.abort();
    release_leftovers(&client, &[]).await?;
    plane.kcm(Kcm::DEFAULT_LIMITS).await?;
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let _ = webhooks.delete(NAME, &DeleteParams::default()).await;
    for ns in &namespaces {
        let _ = plane.drop_namespace(ns).await;
    }

    let observer = observer.lock();
    let counts = counts.lock();
    let report = report(&options, started.elapsed(), &observer, &counts, &tally);
    print!("{report}");
    if let Some(dir) = options.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&options.out, &report)?;
    let violations = observer.violations.len() + tally.webhook_failures.len();
    if violations > 0 {
        bail!(
            "{violations} violation(s); see above and {}",
            options.out.display()
        );
    }
    Ok(())
}

/// Clears the finalizers of the soak objects outside `keep` and deletes their namespaces: what
/// an earlier run left (its replicas gone, nothing would release them) and, at the end, this
/// run's own.
async fn release_leftovers(client: &Client, keep: &[String]) -> Result<()> {
    let all: Api<ConfigMap> = Api::all(client.clone());
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut dropped = HashSet::new();
    for cm in all.list(&ListParams::default().labels(LABEL)).await? {
        let Some(ns) = cm.namespace().filter(|ns| !keep.contains(ns)) else {
            continue;
        };
        if !cm.finalizers().is_empty() {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
            let clear = serde_json::json!({ "metadata": { "finalizers": null } });
            api.patch(
                &cm.name_any(),
                &PatchParams::default(),
                &Patch::Merge(clear),
            )
            .await?;
        }
        if dropped.insert(ns.clone()) {
            let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
        }
    }
    Ok(())
}
