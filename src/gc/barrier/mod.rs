//! The release barrier. The graph is fed by watches, and a watch can lag, restart, or not exist
//! yet (a kind whose CustomResourceDefinition was created a moment ago): when the graph says the
//! last dependent of an owner is gone, that may only mean the graph has not seen the others.
//! So before an owner's `syncgc.io/synchronous` (or, in standalone mode, `foregroundDeletion`)
//! is removed, a round of reads that began after the graph said so must find:
//!
//! 1. **Nothing served that discovery has not found**: a consistent read of every
//!    CustomResourceDefinition and APIService finds each one known to discovery, or serving
//!    nothing (a CRD not Established or without a served version, an APIService not
//!    Available). What a CRD or APIService says beyond that (a conversion `caBundle`
//!    rewritten, an availability that flaps) does not hold anything.
//! 2. **No reference to the owner's tree**: a consistent read of the owner's scope (its
//!    namespace; the whole cluster for a cluster-scoped owner), every watched resource,
//!    metadata only, from etcd, succeeds and finds no object that refers to the owner — nor
//!    to a dependent deleted on its behalf (its tree), so that a grandchild the graph never
//!    saw is caught too.
//!
//! The read is the proof; the watches are the fast path. A watch that is listing again or
//! failing does not hold an owner whose scope the read covers (the read sees what the watch
//! has not delivered), but a resource that cannot be read holds every owner in its scope: a
//! conversion webhook that is down, say, holds the owners in the namespaces where objects of
//! that kind are stored, until it answers again or their deadlines pass (the barrier never
//! outlasts an owner's deadline; see [`super::synchronous`]).
//!
//! An owner the collector deleted on behalf of another owner that still waits (an intermediate
//! owner of a tree) goes without a round of its own: the owner it was deleted for does not go
//! before a round finds nothing that refers to any member of its tree, so what the watches
//! have not delivered still holds the top of the tree, and a tree costs one round, not one per
//! intermediate owner (each released, as upstream does, when the graph shows its own
//! dependents gone).
//!
//! The rounds are read by the barrier's own task ([`Barrier::run`]), never by a worker, under
//! a request budget of their own: the collector's deletes and patches do not wait for the
//! barrier's reads, nor the reads for them. One round per scope at a time, up to
//! [`SCOPES_AT_ONCE`] scopes at once, and when owners wait in more namespaces than that, one
//! round of the whole cluster for all of them (unless the last such round found a resource it
//! could not read); a round serves every owner that reached the barrier before it began, and
//! the owners it serves are queued when it ends. An owner the barrier
//! holds is looked again at once when a watch recovers or discovery catches up, and otherwise
//! within a second, then less and less often while the same hold lasts ([`recheck`]).
//!
//! What a round costs: one list per watched resource in the scope, and a read of each CRD or
//! APIService that discovery does not know. The lists are consistent reads: on 1.20 a watch
//! cache cannot vouch for a kind that had no event since the revision asked for (a list at a
//! resourceVersion waits for it up to three seconds, then fails), so each goes to etcd; from
//! 1.31 (`ConsistentListFromCache`) the apiserver serves the same requests from its watch
//! cache. So a lone release costs a round whose length grows with the number of kinds served;
//! many releases share rounds, whatever their namespaces.
//!
//! Here the bookkeeping and the barrier's task; [`hold`]: what holds an owner, decided from a
//! round's findings (pure); [`read`]: a round's reads.

mod hold;
mod read;

use parking_lot::{Mutex, MutexGuard, RwLockReadGuard};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kube::runtime::events::EventType;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use self::hold::{
    HANDOVER, Hold, ORPHAN_WAIT, Referrer, Round, Scope, WaitingOwner, check, recheck,
    serves_objects,
};
pub use self::read::Reads;
use super::context::Context;
use crate::api::Target;
use crate::graph::{Graph, Node, Uid};
use crate::names::Reason;

/// How often a resting scope looks whether work is still queued.
const REST_STEP: Duration = Duration::from_millis(5);
/// How many resources a round reads at once.
pub(super) const READS_AT_ONCE: usize = 16;
/// How many scopes are read at once.
pub const SCOPES_AT_ONCE: usize = 4;
/// The barrier's request budget, at least (calls a second, burst): its reads are lists of one
/// namespace, a millisecond or two of the apiserver's time each.
const BUDGET: (f64, u32) = (500.0, 500);
/// Rounds a second the budget allows at least, whatever the number of resources a round reads:
/// on a cluster serving hundreds of kinds a lone release pays in requests, not in waiting for
/// them.
const ROUNDS_A_SECOND: f64 = 4.0;

/// What the barrier answers an owner that arrives at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing refers to it any more: it may go.
    Pass,
    /// It waits for a round that begins after it arrived; the round queues it when it ends.
    Round,
    /// A round that began after it arrived did not prove it free: `hold` says why, `changed`
    /// whether that differs from what held it before, `since` when the barrier first held it
    /// in this wait.
    Held {
        hold: Hold,
        changed: bool,
        since: Instant,
    },
}

/// A scope's rounds: the last one read, whether one is due or being read, the owners waiting
/// for a round that begins after they arrived, and when the next may begin.
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

/// What held an owner last, and since when.
#[derive(Debug)]
struct Held {
    hold: Hold,
    since: Instant,
}

/// The barrier's bookkeeping, under one lock (taken after the graph's, never before).
#[derive(Debug, Default)]
struct Ledger {
    rounds: HashMap<Scope, Rounds>,
    /// When each owner at the barrier arrived, by whether only blocking references keep it
    /// (foreground deletion) or any does (syncgc's finalizer): since then, every look at it
    /// found the graph showing no dependent that keeps it.
    arrived: HashMap<(Uid, bool), Instant>,
    /// Trees, and for each member, an owner whose tree it is in.
    trees: HashMap<Uid, Tree>,
    deleted_for: HashMap<Uid, Uid>,
    held: HashMap<Uid, Held>,
    /// Since when this replica leads (the apiserver's time, in seconds).
    leading_since: Option<i64>,
}

impl Ledger {
    /// `owner` and every member of its tree, transitively.
    fn tree(&self, owner: Uid) -> HashSet<Uid> {
        let mut all = HashSet::from([owner]);
        let mut stack = vec![owner];
        while let Some(next) = stack.pop() {
            for member in self.trees.get(&next).into_iter().flat_map(|t| &t.members) {
                if all.insert(*member) {
                    stack.push(*member);
                }
            }
        }
        all
    }

    /// Takes in the round just read for `scope`: the owners it serves (those that arrived
    /// before it began, or left the barrier meanwhile) stop waiting and are returned. A round
    /// of the whole cluster serves the owners waiting in every namespace.
    fn serve(&mut self, scope: &Scope, round: Arc<Round>) -> Vec<Uid> {
        let arrived = &self.arrived;
        let mut served = Vec::new();
        for (waiting_in, rounds) in &mut self.rounds {
            if waiting_in != scope && *scope != Scope::Cluster {
                continue;
            }
            let now_served: Vec<Uid> = rounds
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
            for uid in &now_served {
                rounds.waiting.remove(uid);
            }
            rounds.reading = !rounds.waiting.is_empty();
            served.extend(now_served);
        }
        let rounds = self.rounds.entry(scope.clone()).or_default();
        rounds.rested = Some(Rested::after(&round));
        rounds.last = Some(round);
        served
    }

    /// The scopes whose owners wait for a round that is not being read (not `active`): when
    /// more namespaces wait than are read at once, the whole cluster in one round instead,
    /// so that a round's cost does not grow with the number of namespaces waiting.
    fn due(&self, active: &HashSet<Scope>) -> Vec<Scope> {
        let due: Vec<Scope> = self
            .rounds
            .iter()
            .filter(|(scope, rounds)| rounds.reading && !active.contains(*scope))
            .map(|(scope, _)| scope.clone())
            .collect();
        // A resource that could not be read in the whole cluster may be readable in most
        // namespaces (a conversion webhook that is down fails the reads of the namespaces
        // where its objects are): then each namespace is read on its own again.
        let cluster_unreadable = self
            .rounds
            .get(&Scope::Cluster)
            .and_then(|rounds| rounds.last.as_ref())
            .is_some_and(|round| matches!(round.unsure, Some(Hold::Unreadable { .. })));
        if due.len() + active.len() <= SCOPES_AT_ONCE || cluster_unreadable {
            return due;
        }
        if active.contains(&Scope::Cluster) {
            // The next round of the cluster serves them.
            return Vec::new();
        }
        vec![Scope::Cluster]
    }
}

/// The release barrier: its bookkeeping, and the task that reads its rounds ([`Reads`]).
pub struct Barrier {
    enabled: bool,
    state: Mutex<Ledger>,
    /// Wakes the task that reads rounds.
    wake: Notify,
    reads: Reads,
}

impl Barrier {
    /// A barrier reading through `reads`.
    pub fn new(enabled: bool, reads: Reads) -> Self {
        Self {
            enabled,
            state: Mutex::default(),
            wake: Notify::new(),
            reads,
        }
    }

    fn state(&self) -> MutexGuard<'_, Ledger> {
        self.state.lock()
    }

    fn graph(&self) -> RwLockReadGuard<'_, Graph> {
        self.reads.graph.read()
    }

    /// `owner`, which the graph shows free of what keeps it, arrives at the barrier: whether
    /// it may go (see [`Verdict`]).
    pub fn arrive(&self, owner: WaitingOwner<'_>) -> Verdict {
        if !self.enabled {
            return Verdict::Pass;
        }
        let graph = self.graph();
        let mut state = self.state();
        let tree_waits = state
            .deleted_for
            .get(&owner.uid)
            .and_then(|top| graph.node(*top))
            .is_some_and(Node::waits_for_dependents);
        drop(graph);
        if tree_waits {
            return Verdict::Pass;
        }
        let key = (owner.uid, owner.blocking_only);
        let arrived = *state.arrived.entry(key).or_insert_with(Instant::now);
        let scope = Scope::of(owner.namespace);
        // A round of the whole cluster vouches for every namespace too.
        let fresh = [&scope, &Scope::Cluster]
            .into_iter()
            .filter_map(|s| state.rounds.get(s)?.last.clone())
            .filter(|round| round.started >= arrived)
            .max_by_key(|round| round.started);
        let Some(round) = fresh else {
            let rounds = state.rounds.entry(scope).or_default();
            rounds.waiting.insert(owner.uid);
            if !std::mem::replace(&mut rounds.reading, true) {
                self.wake.notify_one();
            }
            return Verdict::Round;
        };
        let hold = check(&round, owner, &state.tree(owner.uid));
        state.arrived.remove(&key);
        let Some(hold) = hold else {
            state.held.remove(&owner.uid);
            return Verdict::Pass;
        };
        let now = Instant::now();
        let before = state.held.get(&owner.uid);
        let changed = before.map(|h| &h.hold) != Some(&hold);
        let since = before.map_or(now, |h| h.since);
        if matches!(hold, Hold::Orphan { .. }) && since.elapsed() >= ORPHAN_WAIT {
            tracing::info!(owner = %owner.uid, %hold, "no longer waiting for an object whose owner is gone: the garbage collector would have deleted a leftover of the tree by now");
            state.held.remove(&owner.uid);
            return Verdict::Pass;
        }
        state.held.insert(
            owner.uid,
            Held {
                hold: hold.clone(),
                since,
            },
        );
        Verdict::Held {
            hold,
            changed,
            since,
        }
    }

    /// This replica leads from `at` (the apiserver's time).
    pub fn leads_from(&self, at: jiff::Timestamp) {
        self.state().leading_since = Some(at.as_second());
    }

    /// Whether an owner deleted at `deleted_at` (the apiserver's time, in seconds) is
    /// [`WaitingOwner::inherited`]: deleted before this replica began to lead, or within
    /// [`HANDOVER`] after, while the replica before may still have acted.
    pub fn inherited(&self, deleted_at: Option<i64>) -> bool {
        match (self.state().leading_since, deleted_at) {
            (Some(since), Some(at)) => at < since + HANDOVER.as_secs() as i64,
            _ => true,
        }
    }

    /// `dependent` is being deleted on behalf of the waiting `owners`.
    pub fn deleting_for(&self, owners: impl IntoIterator<Item = Uid>, dependent: Uid) {
        if !self.enabled {
            return;
        }
        let mut state = self.state();
        for owner in owners {
            state.deleted_for.insert(dependent, owner);
            state
                .trees
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
    /// that begins after that, and a hold counts from then.
    pub fn kept(&self, owner: Uid, blocking_only: bool) {
        if self.enabled {
            let mut state = self.state();
            state.arrived.remove(&(owner, blocking_only));
            state.held.remove(&owner);
        }
    }

    /// What held `owner` the last time a round did.
    pub fn holding(&self, owner: Uid) -> Option<Hold> {
        self.state().held.get(&owner).map(|h| h.hold.clone())
    }

    /// The owners the barrier holds.
    pub fn held(&self) -> Vec<Uid> {
        self.state().held.keys().copied().collect()
    }

    /// Forgets what concerns objects the graph no longer shows waiting, and rounds no owner
    /// is using. Trees are kept for `keep` (the longest an owner can wait), since a member's
    /// tree matters to its owner after the member is gone.
    pub fn forget(&self, graph: &Graph, keep: Duration) {
        let waiting = |uid: &Uid| graph.node(*uid).is_some_and(Node::waits_for_dependents);
        let mut state = self.state();
        state.held.retain(|uid, _| waiting(uid));
        state.arrived.retain(|(uid, _), _| waiting(uid));
        state
            .trees
            .retain(|uid, tree| waiting(uid) || tree.since.elapsed() < keep);
        let Ledger {
            trees, deleted_for, ..
        } = &mut *state;
        deleted_for.retain(|_, owner| trees.contains_key(owner));
        state
            .rounds
            .retain(|_, rounds| rounds.reading || !rounds.waiting.is_empty());
    }

    /// The owner `uid`, which the graph shows free of what keeps it, at the barrier (see
    /// [`Barrier::arrive`]). A hold is counted, and said in an Event when what holds the
    /// owner changes; the caller queues the owner again.
    pub async fn through(
        &self,
        cx: &Context,
        uid: Uid,
        target: &Target,
        blocking_only: bool,
    ) -> Verdict {
        let (coordinates, deleted_at) = {
            let graph = cx.graph();
            let Some(node) = graph.node(uid) else {
                return Verdict::Round;
            };
            (node.coordinates, graph.deleted_at(uid))
        };
        let verdict = self.arrive(WaitingOwner {
            uid,
            coordinates,
            namespace: target.namespace.as_deref(),
            blocking_only,
            inherited: self.inherited(deleted_at),
        });
        match &verdict {
            Verdict::Pass => tracing::debug!(owner = %target, "passed the release barrier"),
            Verdict::Round => {}
            Verdict::Held { hold, changed, .. } => {
                cx.metrics
                    .barrier_holds
                    .with_label_values(&[hold.reason()])
                    .inc();
                if *changed {
                    tracing::info!(owner = %target, %hold, "every dependent the graph knows of is gone; held by the release barrier");
                    let note = format!(
                        "every dependent the graph knows of is gone; before releasing, waiting for {hold}"
                    );
                    cx.new_event(target, EventType::Normal, Reason::Barrier, note)
                        .await;
                }
            }
        }
        verdict
    }

    /// Reads rounds until `shutdown`: for every scope where owners wait, one round at a
    /// time (after the scope has rested), up to [`SCOPES_AT_ONCE`] scopes at once; each
    /// owner a round serves goes to `served`. `idle` says whether the collector has work
    /// queued (a resting scope waits longer while it has).
    pub async fn run(
        &self,
        served: impl Fn(Uid),
        idle: impl Fn() -> bool,
        shutdown: CancellationToken,
    ) {
        let mut reading = FuturesUnordered::new();
        let mut active: HashSet<Scope> = HashSet::new();
        loop {
            let due = self.state().due(&active);
            for scope in due {
                if reading.len() >= SCOPES_AT_ONCE {
                    break;
                }
                active.insert(scope.clone());
                reading.push(self.round(scope, &idle));
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.wake.notified() => {}
                Some((scope, owners)) = reading.next(), if !reading.is_empty() => {
                    active.remove(&scope);
                    for uid in owners {
                        served(uid);
                    }
                }
            }
        }
    }

    /// One round of `scope`, once it has rested: the owners it serves.
    async fn round(&self, scope: Scope, idle: &impl Fn() -> bool) -> (Scope, Vec<Uid>) {
        let rested = self.state().rounds.get(&scope).and_then(|r| r.rested);
        if let Some(rested) = rested {
            tokio::time::sleep_until(rested.at_least).await;
            while !idle() && Instant::now() < rested.at_most {
                tokio::time::sleep(REST_STEP).await;
            }
        }
        let round = Arc::new(self.reads.round(&scope).await);
        let served = self.state().serve(&scope, round);
        (scope, served)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::discovery;
    use crate::graph::Coordinates;

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
            dangling: false,
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

    fn owner(blocking_only: bool) -> WaitingOwner<'static> {
        WaitingOwner {
            uid: uid(1),
            coordinates: CM(),
            namespace: Some("ns"),
            blocking_only,
            inherited: false,
        }
    }

    #[test]
    fn an_inherited_owner_is_held_by_an_object_of_its_scope_whose_owner_is_gone() {
        let gone = Referrer {
            dangling: true,
            ..referrer(
                Some("ns"),
                Coordinates::in_group("", "ConfigMap", "gone"),
                false,
            )
        };
        let found = round(vec![(uid(7), gone.clone())]);
        let tree = HashSet::from([uid(1)]);
        // Seen deleted from the start, its tree is known: that object is none of its.
        assert_eq!(check(&found, owner(false), &tree), None);
        let inherited = WaitingOwner {
            inherited: true,
            ..owner(false)
        };
        assert_eq!(
            check(&found, inherited, &tree).map(|h| h.reason()),
            Some("orphan")
        );
        // Only blocking references hold an owner in foreground deletion.
        let foreground = WaitingOwner {
            inherited: true,
            ..owner(true)
        };
        assert_eq!(check(&found, foreground, &tree), None);
        // Another namespace's objects are not its.
        let elsewhere = round(vec![(
            uid(7),
            Referrer {
                namespace: Some("other".into()),
                ..gone.clone()
            },
        )]);
        assert_eq!(check(&elsewhere, inherited, &tree), None);
        // An owner that exists (being deleted, say) is not gone.
        let alive = round(vec![(
            uid(7),
            Referrer {
                dangling: false,
                ..gone
            },
        )]);
        assert_eq!(check(&alive, inherited, &tree), None);
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
        let mut state = Ledger::default();
        for (owner, member) in [(1, 2), (2, 3), (7, 8)] {
            state.trees.entry(uid(owner)).or_insert_with(|| Tree {
                members: HashSet::new(),
                since: Instant::now(),
            });
            state
                .trees
                .get_mut(&uid(owner))
                .unwrap()
                .members
                .insert(uid(member));
        }
        assert_eq!(state.tree(uid(1)), HashSet::from([uid(1), uid(2), uid(3)]));
    }

    #[test]
    fn a_round_serves_the_owners_that_arrived_before_it_began() {
        let scope = Scope::Namespace("ns".into());
        let mut state = Ledger::default();
        let before = Instant::now();
        let round = Arc::new(round(Vec::new()));
        let after = Instant::now() + Duration::from_millis(1);
        state.arrived.insert((uid(1), false), before);
        state.arrived.insert((uid(2), false), after);
        // Arrived before it began in one wait, after it in the other (foreground too).
        state.arrived.insert((uid(3), false), before);
        state.arrived.insert((uid(3), true), after);
        let rounds = state.rounds.entry(scope.clone()).or_default();
        rounds.waiting.extend([uid(1), uid(2), uid(3), uid(4)]);
        rounds.reading = true;
        let mut served = state.serve(&scope, round);
        served.sort();
        // uid(4) left the barrier meanwhile: served too, it finds the graph has changed.
        assert_eq!(served, vec![uid(1), uid(4)]);
        let rounds = &state.rounds[&scope];
        assert!(
            rounds.reading,
            "the owners still waiting get the next round"
        );
        assert_eq!(rounds.waiting, HashSet::from([uid(2), uid(3)]));
    }

    #[test]
    fn a_round_of_the_cluster_serves_every_namespace_when_many_wait() {
        let mut state = Ledger::default();
        let namespaces: Vec<Scope> = (0..SCOPES_AT_ONCE + 1)
            .map(|i| Scope::Namespace(format!("ns-{i}")))
            .collect();
        let before = Instant::now();
        for (i, scope) in namespaces.iter().enumerate() {
            let uid = uid(i as u8 + 1);
            state.arrived.insert((uid, false), before);
            let rounds = state.rounds.entry(scope.clone()).or_default();
            rounds.waiting.insert(uid);
            rounds.reading = true;
        }
        let mut active = HashSet::new();
        assert_eq!(state.due(&active), vec![Scope::Cluster]);
        active.insert(Scope::Cluster);
        assert!(
            state.due(&active).is_empty(),
            "they wait for the next round of the cluster"
        );
        let round = Arc::new(round(Vec::new()));
        assert_eq!(state.serve(&Scope::Cluster, round).len(), namespaces.len());
        active.clear();
        assert!(state.due(&active).is_empty());
        // Few namespaces waiting: each is read on its own.
        state.rounds.get_mut(&namespaces[0]).unwrap().reading = true;
        assert_eq!(state.due(&active), vec![namespaces[0].clone()]);
    }

    #[test]
    fn a_long_hold_is_looked_at_less_often() {
        assert_eq!(recheck(Duration::ZERO), Duration::from_secs(1));
        assert_eq!(recheck(Duration::from_secs(8)), Duration::from_secs(2));
        assert_eq!(recheck(Duration::from_secs(600)), Duration::from_secs(10));
    }

    #[test]
    fn what_serves_objects() {
        let crd = |versions: serde_json::Value, established: &str| {
            serde_json::json!({ "spec": { "versions": versions },
                "status": { "conditions": [{ "type": "Established", "status": established }] } })
        };
        let crds = "customresourcedefinitions.apiextensions.k8s.io";
        let served = serde_json::json!([{ "name": "v1", "served": false }, { "name": "v2", "served": true }]);
        let unserved = serde_json::json!([{ "name": "v1", "served": false }]);
        assert!(serves_objects(crds, &crd(served.clone(), "True")));
        assert!(!serves_objects(crds, &crd(served, "False")));
        assert!(
            !serves_objects(crds, &crd(unserved, "True")),
            "no served version"
        );
        let v1beta1 = serde_json::json!({ "spec": { "version": "v1" },
            "status": { "conditions": [{ "type": "Established", "status": "True" }] } });
        assert!(serves_objects(crds, &v1beta1));
        let api_service = |available: &str| serde_json::json!({ "status": { "conditions": [{ "type": "Available", "status": available }] } });
        assert!(serves_objects(
            discovery::API_SERVICES,
            &api_service("True")
        ));
        assert!(!serves_objects(
            discovery::API_SERVICES,
            &api_service("False")
        ));
    }
}
