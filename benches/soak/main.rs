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

#[allow(dead_code)]
#[path = "../cluster/plane.rs"]
mod plane;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;
use syncgc::names::{
    DEADLINE_ANNOTATION, DELETION_ORDER_ANNOTATION, FOREGROUND_FINALIZER, SYNCHRONOUS_ANNOTATION,
    SYNCHRONOUS_FINALIZER, TIMEOUT_ANNOTATION,
};

use plane::{Kcm, Plane};

/// The label every soak object carries (the observer's selector) and its namespaces.
const LABEL: &str = "syncgc.io/soak";
const NAMESPACES: usize = 3;
const WORKERS: usize = 3;
/// The lease both replicas share, and the webhook configuration.
const NAME: &str = "syncgc-soak";
/// An armed owner's timeout: long beside any fault, so that a release by it is noticed.
const TIMEOUT: Duration = Duration::from_secs(120);
/// How long after its owner's deletion a tree must be gone: its timeout and the faults'.
const COLLECTED_WITHIN: Duration = Duration::from_secs(300);
/// How much history a violation prints.
const HISTORY: usize = 60;
/// How often the replicas' resident memory is sampled.
const MEMORY_EVERY: Duration = Duration::from_secs(30);
/// How long a replica may take to exit after SIGTERM (shutdown delay 0, items in flight, the
/// Lease's release).
const STOPS_WITHIN: Duration = Duration::from_secs(30);
/// The growth of a replica process's resident memory, from its first minute to its end, that
/// is a leak (and the fraction of the first minute's it must also exceed)...
const LEAK: (u64, f64) = (16 << 20, 0.5);
/// ...over a life at least this long.
const LEAK_AFTER: Duration = Duration::from_secs(600);
/// The never-faulted replica's memory is judged from this age on...
const STEADY_AFTER: Duration = Duration::from_secs(600);
/// ...over a life at least this long...
const STEADY_JUDGED: Duration = Duration::from_secs(1800);
/// ...and may grow by at most this much per hour (the least-squares slope of its samples).
const STEADY_GROWTH: f64 = 8.0 * 1048576.0;
/// The shortest life whose memory the results list.
const MEMORY_REPORTED: Duration = Duration::from_secs(300);

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

// --- the observer --------------------------------------------------------------------------

/// A soak object as the observer last saw it.
#[derive(Debug, Clone)]
struct Seen {
    key: String,
    /// Its owners, by uid, with whether the reference blocks.
    owners: Vec<(String, bool)>,
    /// Ever being deleted with the synchronous finalizer, or carried foregroundDeletion
    /// (sticky). An owner armed only after its DELETE was admitted (created while no webhook
    /// answered, armed by the collector as the DELETE ran) is not deleted synchronously.
    armed: bool,
    /// Carried the synchronous finalizer, being deleted or not (sticky).
    finalized: bool,
    foreground: bool,
    survivor: bool,
    wave: i64,
    deadline: Option<jiff::Timestamp>,
}

impl Seen {
    fn of(cm: &ConfigMap, before: Option<&Seen>) -> Self {
        let has = |f: &str| cm.finalizers().iter().any(|x| x == f);
        let annotation = |k: &str| cm.annotations().get(k).cloned();
        Self {
            key: key(cm),
            owners: cm
                .owner_references()
                .iter()
                .map(|r| (r.uid.clone(), r.block_owner_deletion == Some(true)))
                .collect(),
            armed: before.is_some_and(|b| b.armed)
                || (has(SYNCHRONOUS_FINALIZER) && cm.metadata.deletion_timestamp.is_some()),
            finalized: before.is_some_and(|b| b.finalized) || has(SYNCHRONOUS_FINALIZER),
            foreground: before.is_some_and(|b| b.foreground) || has(FOREGROUND_FINALIZER),
            survivor: cm.labels().get(LABEL).is_some_and(|v| v == "survivor"),
            wave: annotation(DELETION_ORDER_ANNOTATION)
                .and_then(|w| w.trim().parse().ok())
                .unwrap_or(0),
            deadline: annotation(DEADLINE_ANNOTATION)
                .and_then(|d| d.parse().ok())
                .or(before.and_then(|b| b.deadline)),
        }
    }
}

fn key(cm: &ConfigMap) -> String {
    format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any())
}

#[derive(Default)]
struct Observer {
    present: HashMap<String, Seen>,
    /// Namespace/name → uid, for the workload's checks.
    by_key: HashMap<String, String>,
    history: VecDeque<String>,
    violations: Vec<String>,
    /// Deletions checked against the invariants, and those only a relist showed.
    checked: u64,
    unordered: u64,
    released_by_deadline: u64,
    /// Gone with the synchronous finalizer but never seen being deleted with it.
    armed_as_deleted: u64,
    /// A relist in progress: the uids it has shown.
    relisting: Option<HashSet<String>>,
    relists: u64,
    /// What the workload deletes itself once its tree is collected (`namespace/name`), until
    /// it is seen gone: a survivor among them is not held to survive.
    retired: HashSet<String>,
    /// When the last object of each present owner's tree was seen gone.
    tree_emptied: HashMap<String, std::time::Instant>,
    /// Armed owners released (not by their deadline): from the last object of their tree seen
    /// gone to their own DELETED event.
    releases: Vec<Duration>,
}

impl Observer {
    fn note(&mut self, line: String) {
        if self.history.len() == HISTORY * 4 {
            self.history.pop_front();
        }
        self.history
            .push_back(format!("{} {line}", jiff::Timestamp::now()));
    }

    fn violation(&mut self, what: String) {
        let history: Vec<String> = self
            .history
            .iter()
            .rev()
            .take(HISTORY)
            .rev()
            .cloned()
            .collect();
        eprintln!(
            "VIOLATION: {what}\n  history (oldest first):\n    {}",
            history.join("\n    ")
        );
        self.violations.push(what);
    }

    fn apply(&mut self, cm: &ConfigMap) {
        let uid = cm.uid().unwrap_or_default();
        if let Some(seen) = &mut self.relisting {
            seen.insert(uid.clone());
        }
        let seen = Seen::of(cm, self.present.get(&uid));
        let deleting = if cm.metadata.deletion_timestamp.is_some() {
            " deleting"
        } else {
            ""
        };
        self.note(format!(
            "seen {}{deleting} finalizers={:?} owners={}",
            seen.key,
            cm.finalizers(),
            seen.owners.len()
        ));
        self.by_key.insert(seen.key.clone(), uid.clone());
        self.present.insert(uid, seen);
    }

    /// The uids that (transitively) depend on `uid` and are present; only blocking references
    /// when `blocking_only`.
    fn dependents(&self, uid: &str, blocking_only: bool) -> Vec<String> {
        let mut found = Vec::new();
        let mut frontier = vec![uid.to_owned()];
        let mut visited = HashSet::from([uid.to_owned()]);
        while let Some(owner) = frontier.pop() {
            for (dependent, seen) in &self.present {
                let refers = seen
                    .owners
                    .iter()
                    .any(|(o, block)| *o == owner && (*block || !blocking_only));
                if refers && visited.insert(dependent.clone()) {
                    found.push(seen.key.clone());
                    if !blocking_only {
                        frontier.push(dependent.clone());
                    }
                }
            }
        }
        found
    }

    /// `uid` is gone, `last` as its DELETE event showed it (`None` when only a relist showed
    /// it gone: then its order is unknown and only its survival is checked).
    fn gone(&mut self, uid: &str, last: Option<&ConfigMap>) {
        let Some(seen) = self.present.get(uid).cloned() else {
            return;
        };
        let ordered = last.is_some();
        let seen = last.map_or(seen.clone(), |cm| Seen::of(cm, Some(&seen)));
        self.note(format!("gone {}", seen.key));
        let retired = self.retired.remove(&seen.key);
        if seen.survivor && !retired {
            self.violation(format!("{} must survive, and was deleted", seen.key));
        }
        if ordered {
            self.checked += 1;
            if seen.finalized && !seen.armed {
                self.armed_as_deleted += 1;
            }
            let by_deadline = seen
                .deadline
                .is_some_and(|d| jiff::Timestamp::now() >= d - jiff::SignedDuration::from_secs(2));
            let left = if seen.armed {
                self.dependents(uid, false)
            } else if seen.foreground {
                self.dependents(uid, true)
            } else {
                Vec::new()
            };
            if seen.armed
                && left.is_empty()
                && let Some(emptied) = self.tree_emptied.get(uid)
            {
                self.releases.push(emptied.elapsed());
            }
            if !left.is_empty() {
                if by_deadline {
                    self.released_by_deadline += 1;
                } else {
                    self.violation(format!(
                        "{} went while its dependents {left:?} exist (armed: {}, foreground: {})",
                        seen.key, seen.armed, seen.foreground
                    ));
                }
            }
            // A wave goes only when every higher wave of the same owners is gone.
            for (owner, _) in &seen.owners {
                let owner_deadline = self.present.get(owner).and_then(|o| o.deadline);
                if owner_deadline.is_some_and(|d| jiff::Timestamp::now() >= d) {
                    continue;
                }
                let higher: Vec<String> = self
                    .present
                    .iter()
                    .filter(|(u, s)| {
                        u.as_str() != uid
                            && s.wave > seen.wave
                            && s.owners.iter().any(|(o, _)| o == owner)
                    })
                    .map(|(_, s)| s.key.clone())
                    .collect();
                if !higher.is_empty() && self.present.get(owner).is_some_and(|o| o.armed) {
                    self.violation(format!(
                        "{} (wave {}) went while {higher:?} of a higher wave of the same owner exist",
                        seen.key, seen.wave
                    ));
                }
            }
        } else {
            self.unordered += 1;
        }
        self.by_key.remove(&seen.key);
        self.present.remove(uid);
        self.tree_emptied.remove(uid);
        // Every present owner above it, transitively, has just lost a member of its tree.
        let now = std::time::Instant::now();
        let mut above: Vec<String> = seen.owners.iter().map(|(o, _)| o.clone()).collect();
        let mut visited = HashSet::new();
        while let Some(owner) = above.pop() {
            let Some(present) = self.present.get(&owner) else {
                continue;
            };
            if visited.insert(owner.clone()) {
                above.extend(present.owners.iter().map(|(o, _)| o.clone()));
                self.tree_emptied.insert(owner, now);
            }
        }
    }
}

/// Watches the soak objects of `namespaces` (those of this run) into `observer`.
async fn observe(client: Client, observer: Arc<Mutex<Observer>>, namespaces: HashSet<String>) {
    let api: Api<ConfigMap> = Api::all(client);
    let config = watcher::Config::default().labels(LABEL);
    let ours = |cm: &ConfigMap| cm.namespace().is_some_and(|ns| namespaces.contains(&ns));
    let events = watcher(api, config).default_backoff().filter(|event| {
        std::future::ready(match event {
            Ok(watcher::Event::Apply(cm) | watcher::Event::Delete(cm))
            | Ok(watcher::Event::InitApply(cm)) => ours(cm),
            _ => true,
        })
    });
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let mut observer = observer.lock();
        match event {
            Ok(watcher::Event::Apply(cm)) => observer.apply(&cm),
            Ok(watcher::Event::Delete(cm)) => {
                observer.gone(&cm.uid().unwrap_or_default(), Some(&cm))
            }
            Ok(watcher::Event::Init) => observer.relisting = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(cm)) => observer.apply(&cm),
            Ok(watcher::Event::InitDone) => {
                let listed = observer.relisting.take().unwrap_or_default();
                observer.relists += 1;
                let missing: Vec<String> = observer
                    .present
                    .keys()
                    .filter(|u| !listed.contains(*u))
                    .cloned()
                    .collect();
                for uid in missing {
                    observer.gone(&uid, None);
                }
            }
            Err(err) => observer.note(format!("observer's watch: {err}")),
        }
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

/// One replica process's resident memory over its life.
struct Life {
    half: &'static str,
    replica: String,
    pid: u32,
    /// (age, bytes), every [`MEMORY_EVERY`].
    samples: Vec<(Duration, u64)>,
}

impl Life {
    /// The first sample a minute or more into the life (start-up done, watches listed).
    fn settled(&self) -> Option<(Duration, u64)> {
        self.samples
            .iter()
            .copied()
            .find(|(age, _)| *age >= Duration::from_secs(60))
    }

    fn last(&self) -> Option<(Duration, u64)> {
        self.samples.last().copied()
    }

    /// The growth from [`Life::settled`] to the end, and over how long.
    fn growth(&self) -> Option<(i64, Duration)> {
        let ((from_age, from), (to_age, to)) = (self.settled()?, self.last()?);
        Some((to as i64 - from as i64, to_age.saturating_sub(from_age)))
    }

    /// The growth per hour, in bytes, from `after` on: the least-squares slope of the samples
    /// (one sample's noise does not decide it); `None` with fewer than two samples.
    fn slope_per_hour(&self, after: Duration) -> Option<f64> {
        let points: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|(age, _)| *age >= after)
            .map(|(age, bytes)| (age.as_secs_f64() / 3600.0, *bytes as f64))
            .collect();
        let n = points.len() as f64;
        if points.len() < 2 {
            return None;
        }
        let (mx, my) = points
            .iter()
            .fold((0.0, 0.0), |(x, y), (px, py)| (x + px / n, y + py / n));
        let (sxy, sxx) = points.iter().fold((0.0, 0.0), |(sxy, sxx), (x, y)| {
            (sxy + (x - mx) * (y - my), sxx + (x - mx) * (x - mx))
        });
        (sxx > 0.0).then(|| sxy / sxx)
    }

    /// Whether the life is long enough to judge and grew by more than [`LEAK`].
    fn leaks(&self) -> bool {
        let (Some((_, from)), Some((age, to))) = (self.settled(), self.last()) else {
            return false;
        };
        age >= LEAK_AFTER && to > from + LEAK.0 && to as f64 > from as f64 * (1.0 + LEAK.1)
    }
}

/// Samples every running replica's resident memory into its process's [`Life`].
fn sample_memory(replicas: &Mutex<Vec<Replica>>, half: &'static str, lives: &mut Vec<Life>) {
    for replica in replicas.lock().iter() {
        let Some(pid) = replica.child.as_ref().map(Child::id) else {
            continue;
        };
        let Ok(bytes) = plane::rss(pid) else {
            continue;
        };
        let age = replica.started.elapsed();
        match lives.iter_mut().find(|l| l.pid == pid && l.half == half) {
            Some(life) => life.samples.push((age, bytes)),
            None => lives.push(Life {
                half,
                replica: replica.name.clone(),
                pid,
                samples: vec![(age, bytes)],
            }),
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.stop("-KILL");
    }
}

/// Whether the webhook at `webhook` answers an admission review.
async fn answers(webhook: SocketAddr) -> bool {
    let out = tokio::process::Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "3",
            "-H",
            "Content-Type: application/json",
        ])
        .args(["-d", "{}", &format!("https://{webhook}/mutate")])
        .output()
        .await;
    out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("\"response\""))
}

/// Whether the replica whose metrics are at `metrics` leads.
async fn leads(metrics: SocketAddr) -> bool {
    plane::http_get(metrics, "/metrics")
        .await
        .is_ok_and(|(_, body)| body.lines().any(|l| l == "syncgc_leader 1"))
}

// --- the workload ----------------------------------------------------------------------------

/// A tree the workload deleted, and what of it must go.
struct Pending {
    owner: String,
    deleted: Instant,
    must_go: Vec<String>,
    /// What stays once the tree is collected (dependents with another owner, an orphaning's
    /// dependents), as `namespace/name`: retired then, see [`retire`].
    stays: Vec<String>,
    /// syncgc collects it (an armed owner's, or any in standalone mode); in cooperative mode
    /// kube-controller-manager collects the others, and how soon is not syncgc's to answer for.
    by_syncgc: bool,
}

#[derive(Default)]
struct Counts {
    trees: u64,
    objects: u64,
    deletes: BTreeMap<&'static str, u64>,
    collected: Vec<Duration>,
    /// Trees kube-controller-manager had not collected in time (cooperative mode).
    late_by_kcm: u64,
    /// Objects deleted by the workload once the tree they stayed from was collected.
    retired: u64,
}

fn config_map(name: &str, role: &str, owners: Vec<OwnerReference>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(LABEL.to_owned(), role.to_owned())].into()),
            owner_references: (!owners.is_empty()).then_some(owners),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn reference(owner: &ConfigMap, block: bool) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.name_any(),
        uid: owner.uid().unwrap_or_default(),
        block_owner_deletion: Some(block),
        controller: None,
    }
}

/// One tree: created, then deleted as its shape says; returns what must go.
async fn one_tree(
    api: &Api<ConfigMap>,
    anchor: &ConfigMap,
    id: u64,
    standalone: bool,
    rng: &mut Rng,
    counts: &Mutex<Counts>,
) -> Result<Pending> {
    let armed = rng.chance(60);
    let ordered = armed && rng.chance(30);
    let mut owner = config_map(&format!("t{id}"), "tree", vec![]);
    if armed {
        owner.metadata.annotations = Some(
            [
                (SYNCHRONOUS_ANNOTATION.to_owned(), "true".to_owned()),
                (
                    TIMEOUT_ANNOTATION.to_owned(),
                    syncgc::duration::format(TIMEOUT),
                ),
            ]
            .into(),
        );
    }
    let owner = api.create(&PostParams::default(), &owner).await?;
    let ns = owner.namespace().unwrap_or_default();
    let mut must_go = vec![format!("{ns}/{}", owner.name_any())];
    let mut survivors = Vec::new();
    let n = 1 + rng.below(6);
    for d in 0..n {
        let name = format!("t{id}-d{d}");
        let mut owners = vec![reference(&owner, rng.chance(70))];
        let shared = rng.chance(15);
        if shared {
            owners.push(reference(anchor, false));
        }
        let mut dependent = config_map(&name, if shared { "survivor" } else { "tree" }, owners);
        if ordered {
            dependent.metadata.annotations = Some(
                [(
                    DELETION_ORDER_ANNOTATION.to_owned(),
                    rng.below(3).to_string(),
                )]
                .into(),
            );
        }
        let dependent = api.create(&PostParams::default(), &dependent).await?;
        if shared {
            survivors.push(format!("{ns}/{name}"));
        } else {
            must_go.push(format!("{ns}/{name}"));
        }
        if !shared && rng.chance(30) {
            for g in 0..1 + rng.below(2) {
                let grandchild = format!("{name}-g{g}");
                api.create(
                    &PostParams::default(),
                    &config_map(
                        &grandchild,
                        "tree",
                        vec![reference(&dependent, rng.chance(50))],
                    ),
                )
                .await?;
                must_go.push(format!("{ns}/{grandchild}"));
            }
        }
    }
    // A dependent created an instant before its owner's DELETE.
    if rng.chance(30) {
        let late = format!("t{id}-late");
        api.create(
            &PostParams::default(),
            &config_map(&late, "tree", vec![reference(&owner, true)]),
        )
        .await?;
        must_go.push(format!("{ns}/{late}"));
    }
    let (params, how) = if armed {
        (DeleteParams::background(), "armed")
    } else {
        match rng.below(3) {
            0 => (DeleteParams::background(), "background"),
            1 => (DeleteParams::foreground(), "foreground"),
            _ => (DeleteParams::orphan(), "orphan"),
        }
    };
    api.delete(&owner.name_any(), &params).await?;
    {
        let mut counts = counts.lock();
        counts.trees += 1;
        counts.objects += must_go.len() as u64 + survivors.len() as u64;
        *counts.deletes.entry(how).or_default() += 1;
    }
    let mut stays = survivors;
    if how == "orphan" {
        // Its dependents stay and lose the reference, but for one no watch of the garbage
        // collector's had reported yet, which it collects later (upstream does the same:
        // docs/limitations.md): they are not held to survive, and the check at the end finds
        // none still referring to the owner.
        stays.extend(must_go.drain(1..));
    }
    Ok(Pending {
        owner: must_go[0].clone(),
        deleted: Instant::now(),
        must_go,
        stays,
        by_syncgc: armed || standalone,
    })
}

// --- the faults ------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillLeader,
    PauseLeader,
    RestartApiserver,
    RestartEtcd,
    CompactBehindAWatch,
    SqueezeInflight,
    SkewAClock,
}

const FAULTS: [Fault; 7] = [
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

/// Strikes `fault`; returns the handover time when it moved the lease.
/// What a fault showed.
#[derive(Default)]
struct Struck {
    /// How long the other replica took to lead, when the leader went.
    handover: Option<Duration>,
    /// The 429s the replicas met (items queued again as `throttled`).
    throttled: u64,
    /// The lists again after 410 Gone of the replica whose watches were compacted away.
    relisted: u64,
    /// A replica that did not exit when it was told to.
    unstopped: Option<String>,
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

async fn strike(
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

/// The never-faulted replica's life (the first replica's only one) and its growth per hour
/// after [`STEADY_AFTER`].
fn steady_growth(lives: &[Life]) -> Option<(&Life, f64)> {
    let life = lives.iter().find(|l| l.replica == Replica::name_of(0))?;
    Some((life, life.slope_per_hour(STEADY_AFTER)?))
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

/// Marks the pending trees whose objects are all gone as collected, and returns what stays of
/// them; with `last`, or once one has waited past [`COLLECTED_WITHIN`], the rest are
/// violations.
fn check_collected(
    observer: &Mutex<Observer>,
    pending: &Mutex<Vec<Pending>>,
    counts: &Mutex<Counts>,
    last: bool,
) -> Vec<String> {
    let mut observer = observer.lock();
    let mut pending = pending.lock();
    let mut late = Vec::new();
    let mut stays = Vec::new();
    pending.retain(|tree| {
        let left: Vec<&String> = tree
            .must_go
            .iter()
            .filter(|k| observer.by_key.contains_key(*k))
            .collect();
        // The observer has seen what the workload made by then.
        if left.is_empty() && tree.deleted.elapsed() > Duration::from_secs(1) {
            counts.lock().collected.push(tree.deleted.elapsed());
            stays.extend(tree.stays.iter().cloned());
            return false;
        }
        if last || tree.deleted.elapsed() > COLLECTED_WITHIN {
            let what = format!(
                "the tree of {} is not gone {:?} after its deletion: {left:?} left",
                tree.owner,
                tree.deleted.elapsed()
            );
            if tree.by_syncgc {
                late.push(what);
            } else {
                observer.note(format!("kube-controller-manager: {what}"));
                counts.lock().late_by_kcm += 1;
            }
            return false;
        }
        true
    });
    for what in late {
        observer.violation(what);
    }
    stays
}

/// Deletes what stayed of collected trees (`namespace/name`), the observer told first so that
/// it does not hold a survivor to survive: the objects alive stay about as many over the run,
/// and a replica's memory follows what it leaks, not what the workload keeps. What cannot be
/// deleted now (the apiserver restarting or refusing) is tried again next time.
async fn retire(
    client: &Client,
    observer: &Mutex<Observer>,
    retiring: &mut Vec<String>,
    counts: &Mutex<Counts>,
) {
    let mut again = Vec::new();
    for key in retiring.drain(..) {
        let Some((ns, name)) = key.split_once('/') else {
            continue;
        };
        observer.lock().retired.insert(key.clone());
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => counts.lock().retired += 1,
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(_) => again.push(key),
        }
    }
    *retiring = again;
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn percentile(values: &mut [Duration], p: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort();
    let at = ((values.len() as f64 - 1.0) * p).round() as usize;
    values[at]
}

fn report(
    options: &Options,
    took: Duration,
    observer: &Observer,
    counts: &Counts,
    tally: &Tally,
) -> String {
    let mut out = String::new();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name\t: ").map(str::to_owned))
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let _ = writeln!(out, "# Soak");
    let _ = writeln!(
        out,
        "\n{} on {cpu} ({cores} cores), Kubernetes v1.20.2, syncgc at commit {}; \
         `hack/soak.sh {}{}` ran {:.0} minutes: two replicas, {}.\n",
        jiff::Timestamp::now().strftime("%Y-%m-%d"),
        env!("SYNCGC_COMMIT"),
        syncgc::duration::format(options.duration),
        if options.steady { " --steady" } else { "" },
        took.as_secs_f64() / 60.0,
        if options.steady {
            "standalone throughout; the first never faulted (it takes the lease first, and the \
             faults aimed at a replica strike the other)"
        } else {
            "cooperative for the first half and standalone for the second"
        }
    );
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| trees created and deleted | {} |", counts.trees);
    let _ = writeln!(out, "| objects in them | {} |", counts.objects);
    for (how, n) in &counts.deletes {
        let _ = writeln!(out, "| owners deleted {how} | {n} |");
    }
    let mut collected = counts.collected.clone();
    let _ = writeln!(
        out,
        "| trees collected, p50 / p99 / max after the owner's DELETE | {} / {:.1}s / {:.1}s / {:.1}s |",
        collected.len(),
        percentile(&mut collected, 0.5).as_secs_f64(),
        percentile(&mut collected, 0.99).as_secs_f64(),
        percentile(&mut collected, 1.0).as_secs_f64()
    );
    let mut releases = observer.releases.clone();
    let _ = writeln!(
        out,
        "| armed owners released, p50 / p99 / max from the last of their tree seen gone to their own DELETED event | {} / {:.0}ms / {:.0}ms / {:.0}ms |",
        releases.len(),
        percentile(&mut releases, 0.5).as_secs_f64() * 1000.0,
        percentile(&mut releases, 0.99).as_secs_f64() * 1000.0,
        percentile(&mut releases, 1.0).as_secs_f64() * 1000.0
    );
    let _ = writeln!(
        out,
        "| objects deleted by the workload once the tree they stayed from was collected | {} |",
        counts.retired
    );
    let _ = writeln!(
        out,
        "| trees kube-controller-manager collected after {}s or not by the half's end (cooperative, unarmed: not syncgc's) | {} |",
        COLLECTED_WITHIN.as_secs(),
        counts.late_by_kcm
    );
    let _ = writeln!(
        out,
        "| deletions checked in the apiserver's order (early release, waves, survivors) | {} |",
        observer.checked
    );
    let _ = writeln!(
        out,
        "| deletions only a relist showed (survivors checked) | {} |",
        observer.unordered
    );
    let _ = writeln!(out, "| observer relists | {} |", observer.relists);
    let _ = writeln!(
        out,
        "| owners released by their deadline with dependents left | {} |",
        observer.released_by_deadline
    );
    let _ = writeln!(
        out,
        "| owners armed by the collector as their unarmed DELETE ran (not synchronous) | {} |",
        observer.armed_as_deleted
    );
    let _ = writeln!(out, "| webhook probes | {} |", tally.webhook_probes);
    let mut handovers = tally.handovers.clone();
    let _ = writeln!(
        out,
        "| lease handovers, p50 / max | {} / {:.1}s / {:.1}s |",
        handovers.len(),
        percentile(&mut handovers, 0.5).as_secs_f64(),
        percentile(&mut handovers, 1.0).as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| 429s the replicas met while squeezed (items queued again) | {} |",
        tally.throttled
    );
    let _ = writeln!(
        out,
        "| watches listed again after 410 Gone, behind a compaction | {} |",
        tally.relisted
    );
    let _ = writeln!(
        out,
        "| **violations** | **{}** |",
        observer.violations.len() + tally.webhook_failures.len()
    );
    let _ = writeln!(out, "\n| fault | injected |\n|---|---|");
    for fault in FAULTS {
        let _ = writeln!(
            out,
            "| {fault:?} | {} |",
            tally.faults.get(&fault).copied().unwrap_or(0)
        );
    }
    let lives = &tally.memory;
    let _ = writeln!(
        out,
        "\n{} replica processes; resident memory of those that lived {} minutes or more \
         (a leak: over {} minutes, growth by more than {} MiB and {:.0}%):\n\n\
         | half | replica | life min | MiB at 1 min | max MiB | MiB at end | growth MiB/h |\n\
         |---|---|---|---|---|---|---|",
        lives.len(),
        MEMORY_REPORTED.as_secs() / 60,
        LEAK_AFTER.as_secs() / 60,
        LEAK.0 >> 20,
        LEAK.1 * 100.0
    );
    for life in lives {
        let (Some((_, from)), Some((age, to)), Some((growth, over))) =
            (life.settled(), life.last(), life.growth())
        else {
            continue;
        };
        if age < MEMORY_REPORTED {
            continue;
        }
        let max = life.samples.iter().map(|(_, b)| *b).max().unwrap_or(0);
        let per_hour = growth as f64 / 1048576.0 / over.as_secs_f64().max(1.0) * 3600.0;
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {per_hour:+.1} |",
            life.half,
            life.replica,
            age.as_secs_f64() / 60.0,
            mib(from),
            mib(max),
            mib(to)
        );
    }
    if options.steady {
        match steady_growth(lives) {
            Some((life, per_hour)) => {
                let _ = writeln!(
                    out,
                    "\nThe never-faulted replica ({}, pid {}, {} samples over {:.0} minutes): \
                     **{:+.2} MiB per hour** after its first {} minutes (least-squares slope; \
                     target ≤ {:.0} MiB per hour, judged over {} minutes or more).",
                    life.replica,
                    life.pid,
                    life.samples.len(),
                    life.last().map_or(0.0, |(age, _)| age.as_secs_f64() / 60.0),
                    per_hour / 1048576.0,
                    STEADY_AFTER.as_secs() / 60,
                    STEADY_GROWTH / 1048576.0,
                    STEADY_JUDGED.as_secs() / 60
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "\nThe never-faulted replica lived less than {} minutes: no growth to report.",
                    STEADY_AFTER.as_secs() / 60
                );
            }
        }
    }
    if !observer.violations.is_empty() || !tally.webhook_failures.is_empty() {
        let _ = writeln!(out, "\n## Violations\n");
        for v in observer.violations.iter().chain(&tally.webhook_failures) {
            let _ = writeln!(out, "- {v}");
        }
    }
    if !tally.fault_errors.is_empty() {
        let _ = writeln!(out, "\n## Faults that could not be injected\n");
        for e in &tally.fault_errors {
            let _ = writeln!(out, "- {e}");
        }
    }
    out
}
