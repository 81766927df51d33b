//! A cascade run on a copy of the graph: what the garbage collector would do if an object
//! were deleted now (`syncgc plan`, and the summary a dry-run DELETE gets). The copy plays the
//! apiserver: a DELETE sets the object's `deletionTimestamp` and the finalizers its
//! propagation asks for, or removes it when it has none; the work the graph brings up is
//! decided by the workers' own rules — [`decide::attempt_to_delete`], [`Orders::next`] for
//! deletion order, the waiting owners' releases — in rounds: each round takes the work the
//! last one brought up, so the round in which an object's DELETE is sent is its wave. What
//! nobody in the copy can do (a finalizer of another controller) stays, and what waits on it
//! waits.
//!
//! Both modes run the same rules: in cooperative mode Kubernetes' own collector does the
//! background, foreground and orphan parts, as syncgc's standalone mode does them.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::api::Propagation;
use crate::graph::{Flags, Graph, Mode, OwnerLink, ResourceId, Uid, Work};

use super::decide::{self, Attempt, Dependent, OwnerState};
use super::order::Orders;

/// The finalizers the garbage collector removes.
const COLLECTORS: [Flags; 3] = [Flags::ARMED, Flags::FOREGROUND, Flags::ORPHAN];

/// More rounds than any tree needs: a cascade that has not ended by then is not going to.
const ROUNDS: usize = 10_000;

/// What the copy needs besides the graph.
#[derive(Debug, Default)]
pub struct Facts {
    /// The finalizers of others (not `syncgc.io/synchronous`, `foregroundDeletion`, `orphan`)
    /// on each object that has some: nothing in the copy removes them.
    pub foreign: HashMap<Uid, Vec<String>>,
    /// References (dependent, owner) whose owner cannot be looked up: a kind that is not
    /// served or could not be listed, or a namespaced owner of a cluster-scoped object.
    pub unresolvable: HashSet<(Uid, Uid)>,
}

/// What the cascade does to one object of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Its DELETE is sent in `wave` (1 for the first DELETEs after the object's own), with
    /// `propagation`.
    Deleted {
        wave: usize,
        propagation: Propagation,
    },
    /// Its references to the tree are removed: it lives on.
    Orphaned,
    /// It lives on while these owners of it do: owners outside the tree, or owners that
    /// stay (for a finalizer of another controller) or cannot be looked up.
    Kept { by: Vec<Uid> },
}

/// The outcome of a cascade.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Every object of the tree the cascade reached, but the object deleted.
    pub fates: BTreeMap<Uid, Fate>,
    /// Objects being deleted that stay for finalizers of others (each with them); what waits
    /// for them waits too.
    pub waiting: BTreeMap<Uid, Vec<String>>,
    /// Whether the object deleted is gone at the end.
    pub gone: bool,
    /// Requests the collector sends: DELETEs and patches.
    pub requests: usize,
    /// Rounds in which DELETEs were sent.
    pub waves: usize,
}

/// Runs the DELETE of `target` with `propagation` on `graph` (a copy, changed as the
/// apiserver would change it) to its end.
pub fn run(graph: &mut Graph, facts: &Facts, target: Uid, propagation: Propagation) -> Outcome {
    Cascade {
        graph,
        facts,
        orders: Orders::default(),
        outcome: Outcome::default(),
        sent: HashSet::new(),
        rounds_with_deletes: Vec::new(),
        round: 0,
    }
    .run(target, propagation)
}

struct Cascade<'a> {
    graph: &'a mut Graph,
    facts: &'a Facts,
    orders: Orders,
    outcome: Outcome,
    /// The objects a DELETE was sent for.
    sent: HashSet<Uid>,
    rounds_with_deletes: Vec<usize>,
    round: usize,
}

impl Cascade<'_> {
    fn run(mut self, target: Uid, propagation: Propagation) -> Outcome {
        let tree = self.tree(target);
        let mut work = self.delete(target, propagation);
        self.outcome.requests = 0;
        while !work.is_empty() && self.round < ROUNDS {
            self.round += 1;
            work.sort();
            work.dedup();
            let mut next = Vec::new();
            for item in work {
                let uid = item_uid(item);
                if tree.contains(&uid) {
                    next.extend(self.process(item));
                }
            }
            work = next;
        }
        self.outcome.gone = self.graph.node(target).is_none_or(|n| n.is(Flags::VIRTUAL));
        for uid in &tree {
            self.settle(*uid);
        }
        self.outcome.fates.remove(&target);
        self.outcome.waves = self.rounds_with_deletes.len();
        let waves = &self.rounds_with_deletes;
        for fate in self.outcome.fates.values_mut() {
            if let Fate::Deleted { wave, .. } = fate {
                *wave = waves.iter().position(|r| r == wave).map_or(0, |i| i + 1);
            }
        }
        self.outcome
    }

    /// What is left of `uid` at the end: being deleted, it waits on the finalizers of others
    /// it carries; not reached, it stays while the owners of it that live (or cannot be
    /// looked up) do.
    fn settle(&mut self, uid: Uid) {
        let Some(node) = self.graph.node(uid).filter(|n| !n.is(Flags::VIRTUAL)) else {
            return;
        };
        if node.is(Flags::DELETING) {
            if let Some(finalizers) = self.facts.foreign.get(&uid) {
                self.outcome.waiting.insert(uid, finalizers.clone());
            }
            return;
        }
        if self.outcome.fates.contains_key(&uid) {
            return;
        }
        let by = node
            .owners
            .iter()
            .filter(|link| {
                matches!(
                    self.owner_state(uid, link),
                    OwnerState::Solid | OwnerState::Unresolvable
                )
            })
            .map(|link| link.uid)
            .collect();
        self.outcome.fates.insert(uid, Fate::Kept { by });
    }

    /// `target` and the objects whose references reach it, transitively.
    fn tree(&self, target: Uid) -> HashSet<Uid> {
        let mut tree = HashSet::from([target]);
        let mut stack = vec![target];
        while let Some(next) = stack.pop() {
            for (dependent, ..) in self.graph.valid_dependents(next) {
                if tree.insert(dependent) {
                    stack.push(dependent);
                }
            }
        }
        tree
    }

    fn process(&mut self, work: Work) -> Vec<Work> {
        match work {
            Work::AttemptToDelete(uid) => self.attempt_to_delete(uid),
            Work::SyncOwner(uid) => self.sync_owner(uid),
            Work::Orphan(uid) => self.orphan(uid),
            Work::Arm(_) => Vec::new(),
        }
    }

    /// How the dependent `uid` sees its owner through `link`.
    fn owner_state(&self, uid: Uid, link: &OwnerLink) -> OwnerState {
        if self.facts.unresolvable.contains(&(uid, link.uid)) {
            return OwnerState::Unresolvable;
        }
        let from = self.graph.node(uid).and_then(|n| n.namespace());
        match self.graph.node(link.uid) {
            Some(owner)
                if owner.seen()
                    && owner.coordinates == link.coordinates
                    && owner.in_reach_of(from) =>
            {
                OwnerState::of(owner.flags)
            }
            // Not listed, or not what the reference names: no such owner.
            _ => OwnerState::Absent,
        }
    }

    fn attempt_to_delete(&mut self, uid: Uid) -> Vec<Work> {
        let Some(node) = self.graph.node(uid) else {
            return Vec::new();
        };
        if node.is(Flags::VIRTUAL) || node.is(Flags::DELETING) {
            return Vec::new();
        }
        let links = node.owners.to_vec();
        let flags = node.flags;
        let owners: Vec<OwnerState> = links.iter().map(|l| self.owner_state(uid, l)).collect();
        let in_turn = self.orders.in_turn(self.graph, uid, self.graph.wave(uid));
        let dependent = Dependent::of(self.graph, uid, flags, in_turn);
        match decide::attempt_to_delete(Mode::Standalone, &owners, dependent) {
            Attempt::Wait => Vec::new(),
            Attempt::Keep { drop } => {
                let by = links
                    .iter()
                    .zip(&owners)
                    .filter(|(_, state)| **state == OwnerState::Solid)
                    .map(|(link, _)| link.uid)
                    .collect();
                self.outcome.fates.insert(uid, Fate::Kept { by });
                let dropped: Vec<Uid> = drop.iter().map(|i| links[*i].uid).collect();
                self.rewrite(uid, |links| links.retain(|l| !dropped.contains(&l.uid)))
            }
            Attempt::Arm => {
                let mut work = self.change(uid, |flags| flags.with(Flags::ARMED, true));
                work.push(Work::AttemptToDelete(uid));
                work
            }
            Attempt::Delete {
                propagation,
                unblock,
            } => {
                let mut work = Vec::new();
                if !unblock.is_empty() {
                    let unblocked: Vec<Uid> = unblock.iter().map(|i| links[*i].uid).collect();
                    work.extend(self.rewrite(uid, |links| {
                        for link in links.iter_mut().filter(|l| unblocked.contains(&l.uid)) {
                            link.block_owner_deletion = false;
                        }
                    }));
                }
                self.outcome.fates.insert(
                    uid,
                    Fate::Deleted {
                        wave: self.round,
                        propagation,
                    },
                );
                if self.rounds_with_deletes.last() != Some(&self.round) {
                    self.rounds_with_deletes.push(self.round);
                }
                work.extend(self.delete(uid, propagation));
                work
            }
        }
    }

    /// A waiting owner: its dependents deleted in their turn (unless it orphans them), and
    /// its finalizers removed once what they wait for is gone.
    fn sync_owner(&mut self, uid: Uid) -> Vec<Work> {
        let Some(node) = self.graph.node(uid) else {
            return Vec::new();
        };
        let flags = node.flags;
        if !flags.contains(Flags::DELETING) || flags.contains(Flags::VIRTUAL) {
            return Vec::new();
        }
        let mut work = Vec::new();
        if !flags.contains(Flags::ORPHAN) {
            let sent = &self.sent;
            let batch = self.orders.next(self.graph, uid, |d| sent.contains(&d));
            work.extend(batch.uids.into_iter().map(Work::AttemptToDelete));
        }
        for finalizer in [Flags::FOREGROUND, Flags::ARMED] {
            let left = self
                .graph
                .valid_dependents(uid)
                .filter(|(.., link)| link.blocks(finalizer))
                .count();
            let done = if finalizer == Flags::FOREGROUND {
                decide::foreground_done(left)
            } else {
                left == 0
            };
            if flags.contains(finalizer) && done {
                work.extend(self.change(uid, |flags| flags.with(finalizer, false)));
            }
        }
        work
    }

    /// An owner deleted with `orphan`: its dependents' references to it removed, then the
    /// finalizer.
    fn orphan(&mut self, uid: Uid) -> Vec<Work> {
        let dependents: Vec<Uid> = self
            .graph
            .valid_dependents(uid)
            .map(|(dependent, ..)| dependent)
            .collect();
        let mut work = Vec::new();
        for dependent in dependents {
            self.outcome.fates.insert(dependent, Fate::Orphaned);
            work.extend(self.rewrite(dependent, |links| links.retain(|l| l.uid != uid)));
        }
        work.extend(self.change(uid, |flags| flags.with(Flags::ORPHAN, false)));
        work
    }

    /// The DELETE of `uid` with `propagation`, as the apiserver takes it.
    fn delete(&mut self, uid: Uid, propagation: Propagation) -> Vec<Work> {
        self.sent.insert(uid);
        self.change(uid, |flags| {
            flags
                .with(Flags::DELETING, true)
                .with(Flags::FOREGROUND, propagation == Propagation::Foreground)
                .with(Flags::ORPHAN, propagation == Propagation::Orphan)
        })
    }

    /// A write of `uid`'s flags (a DELETE, or a finalizer added or removed): an object being
    /// deleted that is left without finalizers is gone.
    fn change(&mut self, uid: Uid, change: impl FnOnce(Flags) -> Flags) -> Vec<Work> {
        let Some((resource, mut observed)) = self.graph.observed(uid) else {
            return Vec::new();
        };
        self.outcome.requests += 1;
        observed.flags = change(observed.flags);
        let finalized = !COLLECTORS.iter().any(|f| observed.flags.contains(*f))
            && !self.facts.foreign.contains_key(&uid);
        if observed.flags.contains(Flags::DELETING) && finalized {
            return self.graph.delete(uid);
        }
        observed.deleted_at = observed.deleted_at.or(Some(0));
        self.graph.apply(resource, observed)
    }

    /// A patch of `uid`'s ownerReferences.
    fn rewrite(&mut self, uid: Uid, rewrite: impl FnOnce(&mut Vec<OwnerLink>)) -> Vec<Work> {
        let Some((resource, mut observed)) = self.graph.observed(uid) else {
            return Vec::new();
        };
        self.outcome.requests += 1;
        rewrite(&mut observed.owners);
        self.graph.apply(resource, observed)
    }
}

/// What a cascade from an object of the live graph would do, in numbers: the summary a
/// dry-run DELETE is told.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preview {
    /// The objects deleted, counted by kind.
    pub deleted: BTreeMap<String, usize>,
    pub waves: usize,
    pub orphaned: usize,
    pub kept: usize,
    /// Objects that stay being deleted for finalizers of others.
    pub waiting: usize,
    /// Whether the object deleted is gone at the end.
    pub gone: bool,
}

/// Runs the DELETE of `target` with `propagation` on a copy of the part of `graph` it reads:
/// the tree (the object and what depends on it, transitively) and the owners of its objects.
/// The graph knows which objects carry finalizers of others, not their names.
pub fn preview(
    graph: &Graph,
    target: Uid,
    propagation: Propagation,
    kind: impl Fn(ResourceId) -> String,
) -> Preview {
    let mut copy = Graph::new(Mode::Standalone);
    let mut facts = Facts::default();
    let mut kinds = HashMap::new();
    let mut stack = vec![target];
    let mut tree = HashSet::from([target]);
    while let Some(uid) = stack.pop() {
        if let Some((resource, observed)) = graph.observed(uid) {
            for owner in &observed.owners {
                if let Some((resource, observed)) = graph.observed(owner.uid) {
                    copy.apply(resource, observed);
                }
            }
            if observed.places.others() {
                facts.foreign.insert(uid, Vec::new());
            }
            kinds.insert(uid, kind(resource));
            copy.apply(resource, observed);
        }
        for (dependent, ..) in graph.valid_dependents(uid) {
            if tree.insert(dependent) {
                stack.push(dependent);
            }
        }
    }
    let outcome = run(&mut copy, &facts, target, propagation);
    let mut preview = Preview {
        waves: outcome.waves,
        waiting: outcome.waiting.len(),
        gone: outcome.gone,
        ..Preview::default()
    };
    for (uid, fate) in &outcome.fates {
        match fate {
            Fate::Deleted { .. } => {
                let kind = kinds.get(uid).cloned().unwrap_or_default();
                *preview.deleted.entry(kind).or_default() += 1;
            }
            Fate::Orphaned => preview.orphaned += 1,
            Fate::Kept { .. } => preview.kept += 1,
        }
    }
    preview
}

fn item_uid(work: Work) -> Uid {
    match work {
        Work::SyncOwner(uid) | Work::AttemptToDelete(uid) | Work::Orphan(uid) | Work::Arm(uid) => {
            uid
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Observed, Order, ResourceId, Wave};

    fn uid(n: u128) -> Uid {
        Uid::from_u128(n)
    }

    /// A graph of ConfigMaps `o{n}`: each `(n, owners, flags)`.
    fn graph(objects: &[(u128, &[u128], Flags)]) -> Graph {
        let mut graph = Graph::new(Mode::Standalone);
        for (n, owners, flags) in objects {
            graph.apply(ResourceId::new(1), Observed::config_map(*n, owners, *flags));
        }
        graph
    }

    fn deleted(outcome: &Outcome) -> Vec<(u128, usize)> {
        outcome
            .fates
            .iter()
            .filter_map(|(uid, fate)| match fate {
                Fate::Deleted { wave, .. } => Some((uid.as_u128(), *wave)),
                _ => None,
            })
            .collect()
    }

    const NONE: Flags = Flags::empty();

    #[test]
    fn a_background_delete_takes_the_tree_level_by_level() {
        let mut g = graph(&[
            (1, &[], NONE),
            (2, &[1], NONE),
            (3, &[1], NONE),
            (4, &[2], NONE),
        ]);
        let outcome = run(&mut g, &Facts::default(), uid(1), Propagation::Background);
        assert!(outcome.gone);
        assert_eq!(deleted(&outcome), [(2, 1), (3, 1), (4, 2)]);
        assert_eq!(outcome.waves, 2);
        assert_eq!(outcome.requests, 3);
    }

    #[test]
    fn an_armed_owner_waits_and_its_dependents_with_dependents_are_armed_first() {
        let mut g = graph(&[(1, &[], Flags::ARMED), (2, &[1], NONE), (3, &[2], NONE)]);
        let outcome = run(&mut g, &Facts::default(), uid(1), Propagation::Background);
        assert!(outcome.gone);
        // o2 is armed (a patch), then deleted; o3 goes while o2 waits for it.
        assert_eq!(deleted(&outcome), [(2, 1), (3, 2)]);
        // arm o2, delete o2, delete o3, release o2, release o1.
        assert_eq!(outcome.requests, 5);
    }

    #[test]
    fn a_dependent_with_another_living_owner_is_kept_and_named() {
        let mut g = graph(&[(1, &[], NONE), (9, &[], NONE), (2, &[1, 9], NONE)]);
        let outcome = run(&mut g, &Facts::default(), uid(1), Propagation::Foreground);
        assert!(outcome.gone);
        assert_eq!(
            outcome.fates.get(&uid(2)),
            Some(&Fate::Kept { by: vec![uid(9)] })
        );
    }

    #[test]
    fn an_orphaning_delete_leaves_the_dependents() {
        let mut g = graph(&[(1, &[], NONE), (2, &[1], NONE), (3, &[2], NONE)]);
        let outcome = run(&mut g, &Facts::default(), uid(1), Propagation::Orphan);
        assert!(outcome.gone);
        assert_eq!(outcome.fates.get(&uid(2)), Some(&Fate::Orphaned));
        // o3's owner lives: nothing happens to it.
        assert_eq!(
            outcome.fates.get(&uid(3)),
            Some(&Fate::Kept { by: vec![uid(2)] })
        );
        assert_eq!(outcome.waves, 0);
    }

    #[test]
    fn a_foreign_finalizer_keeps_its_object_and_what_waits_for_it() {
        let mut g = graph(&[(1, &[], NONE), (2, &[1], NONE), (3, &[2], NONE)]);
        let facts = Facts {
            foreign: HashMap::from([(uid(2), vec!["example.com/hold".to_owned()])]),
            ..Facts::default()
        };
        let outcome = run(&mut g, &facts, uid(1), Propagation::Foreground);
        assert!(!outcome.gone, "the owner waits for o2 in foreground");
        assert_eq!(
            outcome.waiting,
            BTreeMap::from([(uid(2), vec!["example.com/hold".to_owned()])])
        );
        // o2 was deleted in foreground: o3 goes, o2 stays for the finalizer.
        assert_eq!(deleted(&outcome), [(2, 1), (3, 2)]);
    }

    #[test]
    fn an_owner_that_cannot_be_looked_up_keeps_its_dependent() {
        let mut g = graph(&[(1, &[], NONE), (2, &[1, 7], NONE)]);
        let facts = Facts {
            unresolvable: HashSet::from([(uid(2), uid(7))]),
            ..Facts::default()
        };
        let outcome = run(&mut g, &facts, uid(1), Propagation::Background);
        assert_eq!(
            outcome.fates.get(&uid(2)),
            Some(&Fate::Kept { by: vec![uid(7)] })
        );
    }

    #[test]
    fn deletion_order_makes_waves_of_an_armed_owners_dependents() {
        let mut g = Graph::new(Mode::Standalone);
        let resource = ResourceId::new(1);
        g.apply(resource, Observed::config_map(1, &[], Flags::ARMED));
        for (n, wave) in [(2, 2), (3, 1), (4, 1), (5, 0)] {
            g.apply(
                resource,
                Observed {
                    order: Order::Wave(Wave(wave)),
                    ..Observed::config_map(n, &[1], NONE)
                },
            );
        }
        let outcome = run(&mut g, &Facts::default(), uid(1), Propagation::Background);
        assert!(outcome.gone);
        assert_eq!(deleted(&outcome), [(2, 1), (3, 2), (4, 2), (5, 3)]);
    }

    #[test]
    fn a_preview_runs_on_a_copy_of_the_tree_and_counts_by_kind() {
        let mut g = graph(&[(1, &[], Flags::ARMED), (2, &[1], NONE), (9, &[], NONE)]);
        let held = Observed {
            places: crate::graph::FinalizerPlaces::of_list([Flags::empty()]),
            ..Observed::config_map(3, &[1], NONE)
        };
        g.apply(ResourceId::new(2), held);
        g.apply(ResourceId::new(1), Observed::config_map(4, &[1, 9], NONE));
        let before: Vec<_> = (1..=4).map(|n| g.observed(uid(n))).collect();
        let kind = |id: ResourceId| ["Secret", "ConfigMap", "Pod"][id.index()].to_owned();
        let preview = preview(&g, uid(1), Propagation::Background, kind);
        assert_eq!(
            preview,
            Preview {
                deleted: [("ConfigMap".to_owned(), 1), ("Pod".to_owned(), 1)].into(),
                waves: 1,
                orphaned: 0,
                kept: 1,
                waiting: 1,
                gone: false,
            }
        );
        let after: Vec<_> = (1..=4).map(|n| g.observed(uid(n))).collect();
        assert_eq!(before, after, "the graph is left as it was");
    }

    #[test]
    fn a_cycle_ends() {
        let mut g = graph(&[(1, &[3], NONE), (2, &[1], NONE), (3, &[2], NONE)]);
        let outcome = run(&mut g, &Facts::default(), uid(1), Propagation::Foreground);
        assert!(outcome.gone);
        assert_eq!(deleted(&outcome).len(), 2);
    }
}
