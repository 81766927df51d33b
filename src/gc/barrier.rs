//! The release barrier. The graph is fed by watches, and a watch can lag, restart, or not exist
//! yet (a kind whose CustomResourceDefinition was created a moment ago): when the graph says the
//! last dependent of an owner is gone, that may only mean the graph has not seen the others.
//! So before an owner's `syncgc.io/synchronous` (or, in standalone mode, `foregroundDeletion`)
//! is removed, the collector checks, after the graph has said so:
//!
//! 1. **Discovery is settled**: a consistent read of every CustomResourceDefinition and
//!    APIService finds each one in the graph at that resourceVersion or later, every CRD
//!    that is Established is among the discovered resources, and the discovery those changes
//!    asked for has been taken in.
//! 2. **A consistent read of the owner's scope** (its namespace; the whole cluster for a
//!    cluster-scoped owner), every watched resource, metadata only, from etcd, succeeds and
//!    finds no object that refers to the owner — nor to a dependent deleted on its behalf (its
//!    tree), so that a grandchild the graph never saw is caught too.
//!
//! The read is the proof; the watches are the fast path. A watch that is listing again or
//! failing does not hold an owner whose scope the read covers (the read sees what the watch
//! has not delivered), but a resource that cannot be read holds every owner in its scope: a
//! conversion webhook that is down, say, holds the owners in the namespaces where objects of
//! that kind are stored, until it answers again or their deadlines pass.
//!
//! An owner the collector deleted on behalf of another owner that still waits (an intermediate
//! owner of a tree) goes without a round of its own: the owner it was deleted for does not go
//! before a round finds nothing that refers to any member of its tree, so what the watches
//! have not delivered still holds the top of the tree, and a tree costs one round, not one per
//! intermediate owner (each released, as upstream does, when the graph shows its own
//! dependents gone).
//!
//! The reads are shared: one round per scope at a time, and a round serves every owner that
//! reached the barrier before it began. An owner that finds no such round waits for one
//! without keeping a worker: the worker that reads the round queues every owner it serves when
//! it ends, and reads the next at once while owners wait for it. An owner the barrier holds is
//! looked at again within [`RECHECK`], at once when a watch recovers or discovery catches up;
//! its deadline still bounds the wait.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::events::EventType;
use tokio::sync::Notify;

use super::Collector;
use super::collector::lock;
use super::discovery::{self, Resource};
use super::meta;
use super::watch;
use crate::api::Target;
use crate::graph::{Coordinates, Flags, Graph, Node, Observed, ResourceId, Uid, Work};

/// How soon an owner held by the barrier is looked at again at the latest.
pub const RECHECK: Duration = Duration::from_secs(1);
/// How often a resting scope looks whether work is still queued.
const REST_STEP: Duration = Duration::from_millis(5);
/// How many resources a round reads at once.
const READS_AT_ONCE: usize = 8;
/// The resources whose objects say what is served.
const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";
const API_SERVICES: &str = "apiservices.apiregistration.k8s.io";
pub const DISCOVERY_SOURCES: [&str; 2] = [CRDS, API_SERVICES];

/// What the graph builder tells the barrier: whether discovery has taken in every change that
/// asked for it.
#[derive(Debug, Default)]
pub struct Progress {
    asked: AtomicU64,
    taken_in: AtomicU64,
    /// Wakes the discovery task.
    pub rediscover: Notify,
}

impl Progress {
    /// Asks for a discovery (a CRD or APIService changed, or the barrier found one that did).
    pub fn ask_discovery(&self) {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.rediscover.notify_one();
    }

    /// What a discovery that starts now covers (pass it to [`Progress::taken_in`]).
    pub fn discovery_starts(&self) -> u64 {
        self.asked.load(Ordering::SeqCst)
    }

    /// A discovery that started at `covering` has been taken in.
    pub fn taken_in(&self, covering: u64) {
        self.taken_in.fetch_max(covering, Ordering::SeqCst);
    }

    /// Whether every ask for a discovery has been answered.
    pub fn discovery_settled(&self) -> bool {
        self.taken_in.load(Ordering::SeqCst) >= self.asked.load(Ordering::SeqCst)
    }
}

/// Where the objects that may refer to an owner live.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    Namespace(String),
    Cluster,
}

impl Scope {
    pub fn of(namespace: Option<&str>) -> Self {
        namespace.map_or(Self::Cluster, |ns| Self::Namespace(ns.to_owned()))
    }

    fn namespace(&self) -> Option<&str> {
        match self {
            Self::Namespace(ns) => Some(ns),
            Self::Cluster => None,
        }
    }

    /// Whether objects of `resource` may refer to an owner in this scope (a cluster-scoped
    /// object cannot have a namespaced owner).
    fn covers(&self, resource: &Resource) -> bool {
        *self == Self::Cluster || resource.namespaced
    }
}

/// Why the barrier holds an owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// A CustomResourceDefinition or APIService changed, and discovery has not caught up.
    Discovery(String),
    /// A resource in the owner's scope could not be read.
    Unreadable { resource: String, error: String },
    /// An object refers to the owner, or to a dependent deleted on its behalf.
    Dependent {
        resource: String,
        namespace: Option<String>,
        name: String,
    },
}

impl Hold {
    /// The reason, for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Discovery(_) => "discovery",
            Self::Unreadable { .. } => "unreadable",
            Self::Dependent { .. } => "dependent",
        }
    }
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Discovery(what) => write!(f, "discovery to catch up: {what}"),
            Self::Unreadable { resource, error } => {
                write!(f, "a read of {resource} to succeed ({error})")
            }
            Self::Dependent {
                resource,
                namespace,
                name,
            } => {
                let name = match namespace {
                    Some(ns) => format!("{ns}/{name}"),
                    None => name.clone(),
                };
                write!(
                    f,
                    "{resource} {name} to go: a fresh read shows it still refers to the owner's tree"
                )
            }
        }
    }
}

/// An object that refers to an owner the graph does not show alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrer {
    pub uid: Uid,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: String,
    /// What its reference names.
    pub coordinates: Coordinates,
    pub blocking: bool,
}

/// What one round of consistent reads of a scope found.
#[derive(Debug)]
pub struct Round {
    started: Instant,
    /// The references to owners that the graph shows gone, unknown or being deleted (the only
    /// ones a waiting owner's check can need), by the owner's uid.
    references: HashMap<Uid, Vec<Referrer>>,
    /// What keeps the round from vouching for anything.
    unsure: Option<Hold>,
}

/// An owner at the barrier, as the check needs it.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    pub uid: Uid,
    pub coordinates: Coordinates,
    pub namespace: Option<&'a str>,
    /// Only references with `blockOwnerDeletion` hold it (foreground deletion).
    pub blocking_only: bool,
}

/// Whether `round` lets `owner`, whose tree (dependents deleted on its behalf, transitively)
/// is `tree`, go: the first reason it does not.
pub fn check(round: &Round, owner: Owner<'_>, tree: &HashSet<Uid>) -> Option<Hold> {
    if let Some(unsure) = &round.unsure {
        return Some(unsure.clone());
    }
    let holding = |referrer: &Referrer| Hold::Dependent {
        resource: referrer.resource.clone(),
        namespace: referrer.namespace.clone(),
        name: referrer.name.clone(),
    };
    let own = round.references.get(&owner.uid).into_iter().flatten();
    if let Some(referrer) = own
        .filter(|r| r.coordinates == owner.coordinates)
        .filter(|r| owner.namespace.is_none() || r.namespace.as_deref() == owner.namespace)
        .find(|r| r.blocking || !owner.blocking_only)
    {
        return Some(holding(referrer));
    }
    // References between members of the tree (a cycle) are the graph's matter.
    tree.iter()
        .filter(|uid| **uid != owner.uid)
        .flat_map(|uid| round.references.get(uid).into_iter().flatten())
        .find(|r| !tree.contains(&r.uid))
        .map(holding)
}

/// A scope's rounds: the last one read, whether one is being read, the owners waiting for a
/// round that begins after they arrived, and when the next may begin.
#[derive(Debug, Default)]
struct Rounds {
    last: Option<Arc<Round>>,
    reading: bool,
    waiting: HashSet<Uid>,
    rested: Option<Rested>,
}

/// When a scope has rested after a round. Rounds of a scope are shared by the owners that
/// arrive while it rests: the intermediate owners of a large tree, say, arrive one after
/// another as their own dependents go, and a round for each would keep the apiserver reading
/// the scope while the collector's deletions wait for it.
#[derive(Debug, Clone, Copy)]
struct Rested {
    /// As long as the round took: rounds take at most half the time.
    at_least: Instant,
    /// While work is queued (more owners are likely to arrive), up to four times as long.
    at_most: Instant,
}

impl Rested {
    fn after(round: &Round) -> Self {
        let now = Instant::now();
        let took = now.duration_since(round.started);
        Self {
            at_least: now + took,
            at_most: now + 4 * took,
        }
    }
}

/// The dependents deleted on behalf of a waiting owner.
#[derive(Debug)]
struct Tree {
    members: HashSet<Uid>,
    since: Instant,
}

/// The barrier's state: rounds by scope, when the owners at it arrived, trees (and for each
/// member, an owner whose tree it is in), and the owners it holds.
#[derive(Debug)]
pub struct Barrier {
    enabled: bool,
    rounds: Mutex<HashMap<Scope, Rounds>>,
    deleted_for: Mutex<HashMap<Uid, Uid>>,
    /// When each owner at the barrier arrived, by whether only blocking references keep it
    /// (foreground deletion) or any does (syncgc's finalizer): since then, every look at it
    /// found the graph showing no dependent that keeps it.
    arrived: Mutex<HashMap<(Uid, bool), Instant>>,
    trees: Mutex<HashMap<Uid, Tree>>,
    held: Mutex<HashMap<Uid, Hold>>,
}

impl Barrier {
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            rounds: Mutex::default(),
            deleted_for: Mutex::default(),
            arrived: Mutex::default(),
            trees: Mutex::default(),
            held: Mutex::default(),
        }
    }

    /// `dependent` is being deleted on behalf of the waiting `owners`.
    pub fn deleting_for(&self, owners: impl IntoIterator<Item = Uid>, dependent: Uid) {
        if !self.enabled {
            return;
        }
        let mut trees = lock(&self.trees);
        let mut deleted_for = lock(&self.deleted_for);
        for owner in owners {
            deleted_for.insert(dependent, owner);
            trees
                .entry(owner)
                .or_insert_with(|| Tree {
                    members: HashSet::new(),
                    since: Instant::now(),
                })
                .members
                .insert(dependent);
        }
    }

    /// The graph shows `owner` a dependent that keeps it (one with `blockOwnerDeletion`,
    /// when `blocking_only`): it is not at the barrier; when it comes back, it needs a round
    /// that begins after that.
    pub fn kept(&self, owner: Uid, blocking_only: bool) {
        if self.enabled {
            lock(&self.arrived).remove(&(owner, blocking_only));
        }
    }

    /// `owner` and every member of its tree, transitively.
    fn tree(&self, owner: Uid) -> HashSet<Uid> {
        let trees = lock(&self.trees);
        let mut all = HashSet::from([owner]);
        let mut stack = vec![owner];
        while let Some(next) = stack.pop() {
            for member in trees.get(&next).into_iter().flat_map(|t| &t.members) {
                if all.insert(*member) {
                    stack.push(*member);
                }
            }
        }
        all
    }

    /// Forgets what concerns objects the graph no longer shows waiting, and rounds no owner
    /// is using. Trees are kept for `keep` (the longest an owner can wait), since a member's
    /// tree matters to its owner after the member is gone.
    pub fn forget(&self, graph: &Graph, keep: Duration) {
        let waiting = |uid: &Uid| graph.node(*uid).is_some_and(Node::waits_for_dependents);
        lock(&self.held).retain(|uid, _| waiting(uid));
        lock(&self.arrived).retain(|(uid, _), _| waiting(uid));
        let mut trees = lock(&self.trees);
        trees.retain(|uid, tree| waiting(uid) || tree.since.elapsed() < keep);
        lock(&self.deleted_for).retain(|_, owner| trees.contains_key(owner));
        lock(&self.rounds).retain(|_, rounds| rounds.reading || !rounds.waiting.is_empty());
    }
}

impl Collector {
    /// The release barrier for the owner `uid` (see the module's documentation): whether it
    /// may go. When not, it is queued again: by the round it waits for, or, when the barrier
    /// holds it (which is counted, and said in an Event when the reason changes), within
    /// [`RECHECK`]. The owner's finalizer is removed only after `true`.
    pub(super) async fn passes_barrier(
        &self,
        uid: Uid,
        target: &Target,
        blocking_only: bool,
    ) -> bool {
        if !self.barrier.enabled {
            return true;
        }
        if self.in_waiting_tree(uid) {
            tracing::debug!(owner = %target, "passes with the tree it was deleted for");
            return true;
        }
        let arrived = *lock(&self.barrier.arrived)
            .entry((uid, blocking_only))
            .or_insert_with(Instant::now);
        let scope = Scope::of(target.namespace.as_deref());
        // A round that began after the owner arrived; else it waits for one, and reads it
        // when none is being read.
        let round = {
            let mut all = lock(&self.barrier.rounds);
            let rounds = all.entry(scope.clone()).or_default();
            match &rounds.last {
                Some(round) if round.started >= arrived => Some(round.clone()),
                _ => {
                    rounds.waiting.insert(uid);
                    if std::mem::replace(&mut rounds.reading, true) {
                        return false;
                    }
                    None
                }
            }
        };
        let Some(round) = round else {
            self.read_rounds(&scope).await;
            return false;
        };
        let Some(coordinates) = self.graph_read().node(uid).map(|n| n.coordinates) else {
            return false;
        };
        let owner = Owner {
            uid,
            coordinates,
            namespace: target.namespace.as_deref(),
            blocking_only,
        };
        let hold = check(&round, owner, &self.barrier.tree(uid)).or_else(|| self.settled());
        lock(&self.barrier.arrived).remove(&(uid, blocking_only));
        let Some(hold) = hold else {
            tracing::debug!(owner = %target, "passed the release barrier");
            lock(&self.barrier.held).remove(&uid);
            return true;
        };
        let before = lock(&self.barrier.held).insert(uid, hold.clone());
        self.metrics
            .barrier_holds
            .with_label_values(&[hold.reason()])
            .inc();
        self.queue.add_after(Work::SyncOwner(uid), RECHECK);
        if before.as_ref() != Some(&hold) {
            tracing::info!(owner = %target, %hold, "every dependent the graph knows of is gone; held by the release barrier");
            let note = format!(
                "every dependent the graph knows of is gone; before releasing, waiting for {hold}"
            );
            self.cluster
                .new_event(target, EventType::Normal, BARRIER_REASON, note)
                .await;
        }
        false
    }

    /// Reads rounds of `scope` while owners wait for one, queueing after each the owners it
    /// serves (those that arrived before it began, or left the barrier meanwhile).
    async fn read_rounds(&self, scope: &Scope) {
        loop {
            let rested = lock(&self.barrier.rounds)
                .get(scope)
                .and_then(|rounds| rounds.rested);
            if let Some(rested) = rested {
                self.rest(rested).await;
            }
            let round = Arc::new(self.read(scope).await);
            let (served, more) = {
                let mut all = lock(&self.barrier.rounds);
                let rounds = all.entry(scope.clone()).or_default();
                rounds.rested = Some(Rested::after(&round));
                let arrived = lock(&self.barrier.arrived);
                let served: Vec<Uid> = rounds
                    .waiting
                    .iter()
                    .copied()
                    .filter(|uid| {
                        [false, true].iter().all(|blocking_only| {
                            arrived
                                .get(&(*uid, *blocking_only))
                                .is_none_or(|at| *at <= round.started)
                        })
                    })
                    .collect();
                for uid in &served {
                    rounds.waiting.remove(uid);
                }
                rounds.reading = !rounds.waiting.is_empty();
                rounds.last = Some(round);
                (served, rounds.reading)
            };
            for uid in served {
                self.enqueue_first(Work::SyncOwner(uid));
            }
            if !more {
                return;
            }
        }
    }

    /// Whether `uid` was deleted on behalf of an owner that still waits: that owner does not
    /// go before a round finds nothing that refers to any member of its tree.
    fn in_waiting_tree(&self, uid: Uid) -> bool {
        let Some(owner) = lock(&self.barrier.deleted_for).get(&uid).copied() else {
            return false;
        };
        self.graph_read()
            .node(owner)
            .is_some_and(Node::waits_for_dependents)
    }

    /// Waits until the scope has `rested` (see [`Rested`]).
    async fn rest(&self, rested: Rested) {
        tokio::time::sleep_until(rested.at_least.into()).await;
        while !self.queue.idle() && Instant::now() < rested.at_most {
            tokio::time::sleep(REST_STEP).await;
        }
    }

    /// The part of condition 1 kept in memory: discovery has taken in what asked for it.
    fn settled(&self) -> Option<Hold> {
        (!self.progress.discovery_settled()).then(|| {
            Hold::Discovery(
                "a CustomResourceDefinition or APIService changed; discovering again".into(),
            )
        })
    }

    /// Looks again at every owner the barrier holds (a watch recovered, discovery caught up).
    pub(super) fn wake_held(&self) {
        let held: Vec<Uid> = lock(&self.barrier.held).keys().copied().collect();
        for uid in held {
            self.enqueue(Work::SyncOwner(uid));
        }
    }

    /// One round: consistent reads of every watched resource in `scope`, and of the discovery
    /// sources.
    async fn read(&self, scope: &Scope) -> Round {
        let started = Instant::now();
        self.metrics.barrier_rounds.inc();
        // Discovery as of the round's start: the resources read are those it had taken in, so
        // a discovery asked for earlier and taken in during the read does not vouch for it.
        let unsettled = self.settled();
        let (reads, known): (Vec<(Resource, bool, bool)>, HashSet<String>) = {
            let resources = self.resources();
            let known = resources
                .served()
                .map(|(_, r)| discovery::resource_name(&r.api))
                .collect();
            let sources: Vec<ResourceId> = DISCOVERY_SOURCES
                .iter()
                .filter_map(|name| resources.by_name(name))
                .collect();
            let reads = resources
                .served()
                .filter(|(_, r)| r.watched)
                .filter_map(|(id, r)| {
                    let referrers = scope.covers(r);
                    let source = sources.contains(&id);
                    (referrers || source).then(|| (r.clone(), referrers, source))
                })
                .collect();
            (reads, known)
        };
        let results: Vec<Result<Found, Hold>> = futures::stream::iter(reads)
            .map(|(resource, referrers, source)| {
                self.read_one(scope, resource, referrers, source, &known)
            })
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;
        let mut round = Round {
            started,
            references: HashMap::new(),
            unsure: None,
        };
        let mut unknown_crds = Vec::new();
        for result in results {
            match result {
                Ok(found) => {
                    for (uid, referrer) in found.references {
                        round.references.entry(uid).or_default().push(referrer);
                    }
                    round.unsure = round.unsure.take().or(found.unseen);
                    unknown_crds.extend(found.unknown_crds);
                }
                Err(hold) => round.unsure = round.unsure.take().or(Some(hold)),
            }
        }
        round.unsure = round.unsure.or(unsettled);
        if round.unsure.is_none() {
            round.unsure = self.established(unknown_crds).await;
        }
        tracing::debug!(?scope, references = round.references.len(), unsure = ?round.unsure, "release barrier: read the scope");
        round
    }

    /// Reads `resource` in `scope`: the references to owners the graph does not show alive
    /// (when `referrers`), and whether the graph has seen every object (when it is a
    /// discovery `source`; a CRD is known when it names one of the `known` resources).
    async fn read_one(
        &self,
        scope: &Scope,
        resource: Resource,
        referrers: bool,
        source: bool,
        known: &HashSet<String>,
    ) -> Result<Found, Hold> {
        let name = discovery::resource_name(&resource.api);
        let collection = Target::collection(
            &resource.api,
            if referrers { scope.namespace() } else { None },
        );
        let aliases = self.resources().aliases().clone();
        let mut found = Found::default();
        let result = self
            .cluster
            .list_metadata(&collection, |page: Vec<meta::Meta>| {
                let graph = self.graph_read();
                for object in &page {
                    let Some(observed) = watch::observe(&resource.api, object, &aliases) else {
                        continue;
                    };
                    if source && found.unseen.is_none() {
                        found.note_source(&graph, &name, &observed);
                        if name == CRDS && !known.contains(&observed.name) {
                            found
                                .unknown_crds
                                .push((resource.clone(), observed.name.clone()));
                        }
                    }
                    if !referrers {
                        continue;
                    }
                    for link in &observed.owners {
                        let alive = graph
                            .node(link.uid)
                            .is_some_and(|n| !n.is(Flags::VIRTUAL) && !n.is(Flags::DELETING));
                        if !alive {
                            found.references.push((
                                link.uid,
                                Referrer {
                                    uid: observed.uid,
                                    resource: name.clone(),
                                    namespace: observed.namespace.clone(),
                                    name: observed.name.clone(),
                                    coordinates: link.coordinates,
                                    blocking: link.block_owner_deletion,
                                },
                            ));
                        }
                    }
                }
            })
            .await;
        self.metrics.barrier_reads.inc();
        match result {
            Ok(()) => Ok(found),
            Err(err) => Err(Hold::Unreadable {
                resource: name,
                error: err.to_string(),
            }),
        }
    }

    /// Of the CRDs discovery does not know, the first that is Established (so its objects may
    /// exist): discovery is asked to look again.
    async fn established(&self, crds: Vec<(Resource, String)>) -> Option<Hold> {
        for (resource, name) in crds {
            let target = Target {
                resource: resource.api.clone(),
                namespace: None,
                name: name.clone(),
                uid: String::new(),
            };
            self.metrics.barrier_reads.inc();
            let object = match self.cluster.get(&target).await {
                Ok(Some(object)) => object,
                Ok(None) => continue,
                Err(err) => {
                    return Some(Hold::Unreadable {
                        resource: format!("{CRDS} {name}"),
                        error: err.to_string(),
                    });
                }
            };
            let established = object.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Established" && c["status"] == "True");
            if established {
                self.progress.ask_discovery();
                return Some(Hold::Discovery(format!(
                    "CustomResourceDefinition {name} is established and not discovered yet"
                )));
            }
        }
        None
    }
}

/// What the read of one resource found.
#[derive(Debug, Default)]
struct Found {
    references: Vec<(Uid, Referrer)>,
    /// A discovery source's object the graph has not seen at its current version.
    unseen: Option<Hold>,
    /// CRDs (by name) that discovery does not know.
    unknown_crds: Vec<(Resource, String)>,
}

impl Found {
    fn note_source(&mut self, graph: &Graph, resource: &str, observed: &Observed) {
        let seen = graph.node(observed.uid).is_some_and(|n| {
            !n.is(Flags::VIRTUAL) && n.resource_version >= observed.resource_version
        });
        if !seen {
            self.unseen = Some(Hold::Discovery(format!(
                "{resource} {} changed and the graph has not seen it yet",
                observed.name
            )));
        }
    }
}

/// The name of the Event that says why the barrier holds an owner.
pub const BARRIER_REASON: &str = "SyncGCBarrier";

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(n: u8) -> Uid {
        Uid::parse(&format!("00000000-0000-0000-0000-0000000000{n:02}"))
    }

    fn referrer(ns: Option<&str>, coordinates: Coordinates, blocking: bool) -> Referrer {
        Referrer {
            uid: uid(99),
            resource: "secrets".into(),
            namespace: ns.map(str::to_owned),
            name: "s".into(),
            coordinates,
            blocking,
        }
    }

    fn round(references: Vec<(Uid, Referrer)>) -> Round {
        let mut round = Round {
            started: Instant::now(),
            references: HashMap::new(),
            unsure: None,
        };
        for (uid, r) in references {
            round.references.entry(uid).or_default().push(r);
        }
        round
    }

    const CM: fn() -> Coordinates = || Coordinates::in_group("", "ConfigMap", "owner");

    fn owner(blocking_only: bool) -> Owner<'static> {
        Owner {
            uid: uid(1),
            coordinates: CM(),
            namespace: Some("ns"),
            blocking_only,
        }
    }

    #[test]
    fn an_owner_nothing_refers_to_goes() {
        let round = round(vec![(uid(9), referrer(Some("ns"), CM(), true))]);
        assert_eq!(check(&round, owner(false), &HashSet::from([uid(1)])), None);
    }

    #[test]
    fn a_reference_the_graph_has_not_seen_holds_the_owner() {
        let round = round(vec![(uid(1), referrer(Some("ns"), CM(), false))]);
        let hold = check(&round, owner(false), &HashSet::from([uid(1)]));
        assert!(matches!(hold, Some(Hold::Dependent { ref name, .. }) if name == "s"));
        // In foreground deletion only a blocking reference holds it.
        assert_eq!(check(&round, owner(true), &HashSet::from([uid(1)])), None);
    }

    #[test]
    fn references_that_do_not_reach_the_owner_do_not_hold_it() {
        let other = Coordinates::in_group("", "Secret", "owner");
        let round = round(vec![
            (uid(1), referrer(Some("ns"), other, true)),
            (uid(1), referrer(Some("elsewhere"), CM(), true)),
        ]);
        assert_eq!(check(&round, owner(false), &HashSet::from([uid(1)])), None);
    }

    #[test]
    fn a_reference_to_a_deleted_member_of_the_tree_holds_the_owner() {
        let other = Coordinates::in_group("apps", "ReplicaSet", "rs");
        let round = round(vec![(uid(2), referrer(Some("ns"), other, false))]);
        assert!(check(&round, owner(false), &HashSet::from([uid(1), uid(2)])).is_some());
        assert_eq!(check(&round, owner(false), &HashSet::from([uid(1)])), None);
    }

    #[test]
    fn a_round_that_cannot_vouch_holds_every_owner() {
        let mut round = round(Vec::new());
        round.unsure = Some(Hold::Unreadable {
            resource: "widgets.example.com".into(),
            error: "503".into(),
        });
        assert_eq!(
            check(&round, owner(false), &HashSet::new()).map(|h| h.reason()),
            Some("unreadable")
        );
    }

    #[test]
    fn trees_are_followed_transitively() {
        let barrier = Barrier::new(true);
        barrier.deleting_for([uid(1)], uid(2));
        barrier.deleting_for([uid(2)], uid(3));
        barrier.deleting_for([uid(7)], uid(8));
        assert_eq!(
            barrier.tree(uid(1)),
            HashSet::from([uid(1), uid(2), uid(3)])
        );
    }

    #[test]
    fn discovery_is_settled_once_what_asked_is_taken_in() {
        let progress = Progress::default();
        assert!(progress.discovery_settled());
        let covering = progress.discovery_starts();
        progress.ask_discovery();
        progress.taken_in(covering);
        assert!(!progress.discovery_settled());
        let covering = progress.discovery_starts();
        progress.taken_in(covering);
        assert!(progress.discovery_settled());
    }
}
