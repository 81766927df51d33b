//! The observer: one watch on every soak object of the run, and the invariants checked as its
//! events arrive (early releases, waves, survivors), against the trees the workload deleted
//! (collected in time) and at the end; each replica process's resident memory over its life and
//! what is a leak; whether a replica's webhook answers.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;
use syncgc::names::{
    DEADLINE_ANNOTATION, DELETION_ORDER_ANNOTATION, FOREGROUND_FINALIZER, SYNCHRONOUS_FINALIZER,
};

use crate::workload::{Counts, Pending};
use crate::{LABEL, Replica, plane};

/// How long after its owner's deletion a tree must be gone: its timeout and the faults'.
pub const COLLECTED_WITHIN: Duration = Duration::from_secs(300);
/// How much history a violation prints.
const HISTORY: usize = 60;
/// How often the replicas' resident memory is sampled.
pub const MEMORY_EVERY: Duration = Duration::from_secs(30);

/// The growth of a replica process's resident memory, from its first minute to its end, that
/// is a leak (and the fraction of the first minute's it must also exceed)...
pub const LEAK: (u64, f64) = (16 << 20, 0.5);
/// ...over a life at least this long.
pub const LEAK_AFTER: Duration = Duration::from_secs(600);
/// The never-faulted replica's memory is judged from this age on...
pub const STEADY_AFTER: Duration = Duration::from_secs(600);
/// ...over a life at least this long...
pub const STEADY_JUDGED: Duration = Duration::from_secs(1800);
/// ...and may grow by at most this much per hour (the least-squares slope of its samples).
pub const STEADY_GROWTH: f64 = 8.0 * 1048576.0;

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

pub fn key(cm: &ConfigMap) -> String {
    format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any())
}

#[derive(Default)]
pub struct Observer {
    present: HashMap<String, Seen>,
    /// Namespace/name → uid, for the workload's checks.
    by_key: HashMap<String, String>,
    history: VecDeque<String>,
    pub violations: Vec<String>,
    /// Deletions checked against the invariants, and those only a relist showed.
    pub checked: u64,
    pub unordered: u64,
    pub released_by_deadline: u64,
    /// Gone with the synchronous finalizer but never seen being deleted with it.
    pub armed_as_deleted: u64,
    /// A relist in progress: the uids it has shown.
    relisting: Option<HashSet<String>>,
    pub relists: u64,
    /// What the workload deletes itself once its tree is collected (`namespace/name`), until
    /// it is seen gone: a survivor among them is not held to survive.
    pub retired: HashSet<String>,
    /// When the last object of each present owner's tree was seen gone.
    tree_emptied: HashMap<String, std::time::Instant>,
    /// Armed owners released (not by their deadline): from the last object of their tree seen
    /// gone to their own DELETED event.
    pub releases: Vec<Duration>,
}

impl Observer {
    pub fn note(&mut self, line: String) {
        if self.history.len() == HISTORY * 4 {
            self.history.pop_front();
        }
        self.history
            .push_back(format!("{} {line}", jiff::Timestamp::now()));
    }

    pub fn violation(&mut self, what: String) {
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
pub async fn observe(client: Client, observer: Arc<Mutex<Observer>>, namespaces: HashSet<String>) {
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

/// Marks the pending trees whose objects are all gone as collected, and returns what stays of
/// them; with `last`, or once one has waited past [`COLLECTED_WITHIN`], the rest are
/// violations.
pub fn check_collected(
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

/// One replica process's resident memory over its life.
pub struct Life {
    pub half: &'static str,
    pub replica: String,
    pub pid: u32,
    /// (age, bytes), every [`MEMORY_EVERY`].
    pub samples: Vec<(Duration, u64)>,
}

impl Life {
    /// The first sample a minute or more into the life (start-up done, watches listed).
    pub fn settled(&self) -> Option<(Duration, u64)> {
        self.samples
            .iter()
            .copied()
            .find(|(age, _)| *age >= Duration::from_secs(60))
    }

    pub fn last(&self) -> Option<(Duration, u64)> {
        self.samples.last().copied()
    }

    /// The growth from [`Life::settled`] to the end, and over how long.
    pub fn growth(&self) -> Option<(i64, Duration)> {
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
    pub fn leaks(&self) -> bool {
        let (Some((_, from)), Some((age, to))) = (self.settled(), self.last()) else {
            return false;
        };
        age >= LEAK_AFTER && to > from + LEAK.0 && to as f64 > from as f64 * (1.0 + LEAK.1)
    }
}

/// Samples every running replica's resident memory into its process's [`Life`].
pub fn sample_memory(replicas: &Mutex<Vec<Replica>>, half: &'static str, lives: &mut Vec<Life>) {
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

/// The never-faulted replica's life (the first replica's only one) and its growth per hour
/// after [`STEADY_AFTER`].
pub fn steady_growth(lives: &[Life]) -> Option<(&Life, f64)> {
    let life = lives.iter().find(|l| l.replica == Replica::name_of(0))?;
    Some((life, life.slope_per_hour(STEADY_AFTER)?))
}

/// Whether the webhook at `webhook` answers an admission review.
pub async fn answers(webhook: SocketAddr) -> bool {
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
