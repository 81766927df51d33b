//! A cascade run on a copy of the graph: what the garbage collectors would do if an object
//! were deleted now (`syncgc plan`, and the summary a dry-run DELETE gets). The copy plays the
//! apiserver: a DELETE sets the object's `deletionTimestamp` and the finalizers its
//! propagation asks for, or removes it when it has none; the work the graph brings up is
//! decided by the collectors' own rules — [`decide::attempt_to_delete`], [`Orders::next`] for
//! deletion order, the waiting owners' releases. What nobody in the copy can do (a finalizer
//! of another controller) stays, and what waits on it waits.
//!
//! The mode says which collector acts. In standalone mode syncgc does everything. In
//! cooperative mode both look at every dependent, as both watch it: syncgc acts for armed
//! owners (in their deletion order), and Kubernetes' collector for the rest by its own rules —
//! no deletion order; every object that names an owner's uid is in its graph, so a
//! cluster-scoped dependent of a namespaced owner (which it never collects) holds that owner's
//! foreground deletion, and loses its reference under `orphan`; a reference whose apiVersion
//! the apiserver does not serve cannot be resolved, and its dependent stays.
//!
//! A DELETE's wave is the number of DELETEs on its causal chain: the first DELETEs after the
//! object's own are wave 1, and those their deletions bring about wave 2; a patch (arming a
//! dependent, dropping a reference) starts no wave, so siblings deleted in one step share one.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::api::Propagation;
use crate::graph::{Below, Flags, Graph, Mode, Observed, OwnerLink, ResourceId, Uid, Wave, Work};

use super::decide::{self, ActedBy, Attempt, Dependent, OwnerState};
use super::order::Orders;

/// What the copy needs besides the graph.
#[derive(Debug, Default)]
pub struct Facts {
    /// The finalizers of others (not `syncgc.io/synchronous`, `foregroundDeletion`, `orphan`)
    /// on each object that has some: nothing in the copy removes them.
    pub foreign: HashMap<Uid, Vec<String>>,
    /// References (dependent, owner) whose owner cannot be looked up by either collector: a
    /// kind that is not served or could not be listed, or a namespaced owner of a
    /// cluster-scoped object.
    pub unresolvable: HashSet<(Uid, Uid)>,
    /// References (dependent, owner) whose apiVersion is not served while their group and
    /// kind are: syncgc looks the owner up by group and kind, Kubernetes' collector cannot map
    /// the reference and retries it forever.
    pub unserved_version: HashSet<(Uid, Uid)>,
}

impl Facts {
    /// Notes the finalizers of other controllers that `observed` carries.
    pub fn note_foreign(&mut self, observed: &Observed) {
        if observed.places.others() {
            let names = observed.guards.foreign.iter().map(|f| f.to_string());
            self.foreign.insert(observed.uid, names.collect());
        }
    }
}

/// What holds an object that stays being deleted: a finalizer and, for a collector's, the
/// dependents it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalizerHold {
    pub finalizer: String,
    pub waits_for: Vec<Uid>,
}

/// What the cascade does to one object of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Its DELETE is sent in `wave` with `propagation` by `by` (wave 0: it was being deleted
    /// before, with the propagation its finalizers say), and it is gone at the end.
    Deleted {
        wave: usize,
        propagation: Propagation,
        by: ActedBy,
    },
    /// It stays being deleted: its DELETE sent in a wave (or before the plan, `None`), held
    /// by these finalizers.
    Terminating {
        sent: Option<(usize, Propagation)>,
        held: Vec<FinalizerHold>,
    },
    /// Its references to the tree are removed: it lives on.
    Orphaned,
    /// It lives on while these owners of it do: owners outside the tree, or owners that
    /// stay (for a finalizer of another controller) or cannot be looked up.
    Kept { by: Vec<Uid> },
    /// Its owner deletes its dependents in order, and the wave before its own never ends:
    /// `blocked_by` is the order value of that wave.
    Unreached { owner: Uid, blocked_by: Wave },
}

/// The outcome of a cascade.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Every object of the tree the cascade reached, but the object deleted.
    pub fates: BTreeMap<Uid, Fate>,
    /// Whether the object deleted is gone at the end.
    pub gone: bool,
    /// What holds the object deleted when it stays.
    pub held: Vec<FinalizerHold>,
    /// Requests the collectors send: DELETEs and patches.
    pub requests: usize,
    /// Waves in which DELETEs were sent.
    pub waves: usize,
}

/// Runs the DELETE of `target` with `propagation` on `graph` (a copy, changed as the
/// apiserver would change it) to its end, with the collectors of `mode`.
pub fn run(
    graph: &mut Graph,
    facts: &Facts,
    mode: Mode,
    target: Uid,
    propagation: Propagation,
) -> Outcome {
    Cascade {
        graph,
        facts,
        mode,
        orders: Orders::default(),
        outcome: Outcome::default(),
        sent: HashMap::new(),
        queue: BTreeMap::new(),
    }
    .run(target, propagation)
}

struct Cascade<'a> {
    graph: &'a mut Graph,
    facts: &'a Facts,
    mode: Mode,
    orders: Orders,
    outcome: Outcome,
    /// The objects a DELETE was sent for, with its wave, propagation and sender; wave 0 for
    /// those being deleted already, with the propagation their finalizers say.
    sent: HashMap<Uid, (usize, Propagation, ActedBy)>,
    /// The work to do, by the wave that brought it up.
    queue: BTreeMap<usize, Vec<Work>>,
}

impl Cascade<'_> {
    fn run(mut self, target: Uid, propagation: Propagation) -> Outcome {
        let tree: HashSet<Uid> = self.graph.tree(target).collect();
        // Enough steps for any tree: a cascade that has not ended by then is not going to.
        let mut steps = 64 * tree.len() + 10_000;
        // What the collectors are doing already: the objects being deleted.
        for uid in &tree {
            if let Some(node) = self.graph.node(*uid).filter(|n| n.is(Flags::DELETING)) {
                let flags = node.flags;
                let propagation = Propagation::from_finalizers(
                    flags.contains(Flags::ORPHAN),
                    flags.contains(Flags::FOREGROUND),
                );
                let by = if self.mode == Mode::Standalone || flags.contains(Flags::ARMED) {
                    ActedBy::Syncgc
                } else {
                    ActedBy::Kubernetes
                };
                self.sent.insert(*uid, (0, propagation, by));
                let mut work = vec![Work::SyncOwner(*uid)];
                if flags.contains(Flags::ORPHAN) {
                    work.push(Work::Orphan(*uid));
                }
                self.enqueue(0, work);
            }
        }
        let work = self.delete(target, propagation);
        self.outcome.requests = 0;
        self.enqueue(0, work);
        while let Some((wave, mut work)) = self.queue.pop_first() {
            work.sort();
            work.dedup();
            for item in work {
                if steps == 0 {
                    break;
                }
                steps -= 1;
                if tree.contains(&item.uid()) {
                    self.process(wave, item);
                }
            }
        }
        self.outcome.gone = self.gone(target);
        if !self.outcome.gone {
            self.outcome.held = self.holds(target);
        }
        for uid in &tree {
            if *uid != target {
                self.settle(*uid);
            }
        }
        let mut waves: Vec<usize> = self
            .sent
            .values()
            .map(|(wave, ..)| *wave)
            .filter(|wave| *wave > 0)
            .collect();
        waves.sort_unstable();
        waves.dedup();
        self.outcome.waves = waves.len();
        // Waves numbered from 1 without gaps.
        let number = |wave: usize| {
            if wave == 0 {
                return 0;
            }
            waves.iter().position(|w| *w == wave).map_or(0, |i| i + 1)
        };
        for fate in self.outcome.fates.values_mut() {
            match fate {
                Fate::Deleted { wave, .. } => *wave = number(*wave),
                Fate::Terminating {
                    sent: Some((wave, _)),
                    ..
                } => *wave = number(*wave),
                _ => {}
            }
        }
        self.outcome
    }

    fn enqueue(&mut self, wave: usize, work: Vec<Work>) {
        if !work.is_empty() {
            self.queue.entry(wave).or_default().extend(work);
        }
    }

    fn gone(&self, uid: Uid) -> bool {
        self.graph.node(uid).is_none_or(|n| n.is(Flags::VIRTUAL))
    }

    /// What is left of `uid` at the end: gone after its DELETE; being deleted, held by its
    /// finalizers; not reached, living on with the owners of it that live (or cannot be
    /// looked up), or behind a wave of its owner's deletion order that never ends.
    fn settle(&mut self, uid: Uid) {
        let sent = self.sent.get(&uid).copied();
        if self.gone(uid) {
            if let Some((wave, propagation, by)) = sent {
                self.outcome.fates.insert(
                    uid,
                    Fate::Deleted {
                        wave,
                        propagation,
                        by,
                    },
                );
            }
            return;
        }
        if self.graph.node(uid).is_some_and(|n| n.is(Flags::DELETING)) {
            let held = self.holds(uid);
            // Its DELETE's, when the cascade sent it.
            let sent = sent
                .filter(|(wave, ..)| *wave > 0)
                .map(|(wave, propagation, _)| (wave, propagation));
            self.outcome
                .fates
                .insert(uid, Fate::Terminating { sent, held });
            return;
        }
        if self.outcome.fates.contains_key(&uid) {
            return;
        }
        if let Some((owner, blocked_by)) = self.unreached(uid) {
            self.outcome
                .fates
                .insert(uid, Fate::Unreached { owner, blocked_by });
            return;
        }
        let Some(node) = self.graph.node(uid) else {
            return;
        };
        let links = node.owners.to_vec();
        let collector = self.collector_for(uid, &links);
        let by = links
            .iter()
            .filter(|link| {
                matches!(
                    self.owner_state(uid, link, collector),
                    OwnerState::Solid | OwnerState::Unresolvable
                )
            })
            .map(|link| link.uid)
            .collect();
        self.outcome.fates.insert(uid, Fate::Kept { by });
    }

    /// The waiting owner of `uid` whose deletion order has not reached it, with the wave that
    /// holds it there: the highest left among that owner's dependents.
    fn unreached(&self, uid: Uid) -> Option<(Uid, Wave)> {
        let wave = self.graph.wave(uid);
        self.graph.waiting_owners_of(uid).find_map(|owner| {
            let highest = self
                .graph
                .valid_dependents(owner)
                .map(|(d, ..)| self.graph.wave(d))
                .max()?;
            (highest > wave).then_some((owner, highest))
        })
    }

    /// The finalizers that hold `uid`, each with the dependents it waits for.
    fn holds(&self, uid: Uid) -> Vec<FinalizerHold> {
        let Some(node) = self.graph.node(uid) else {
            return Vec::new();
        };
        let mut held = Vec::new();
        for flag in Flags::COLLECTORS {
            if let Some(finalizer) = flag.finalizer().filter(|_| node.is(flag)) {
                held.push(FinalizerHold {
                    finalizer: finalizer.to_owned(),
                    waits_for: self.blocking(uid, flag),
                });
            }
        }
        for finalizer in self.facts.foreign.get(&uid).into_iter().flatten() {
            held.push(FinalizerHold {
                finalizer: finalizer.clone(),
                waits_for: Vec::new(),
            });
        }
        held
    }

    /// The dependents of `uid` that keep it from losing the collector's `finalizer`: for
    /// `foregroundDeletion` beside Kubernetes' collector, every object naming its uid with
    /// `blockOwnerDeletion` (its graph links by uid alone); otherwise those whose references
    /// reach it.
    fn blocking(&self, uid: Uid, finalizer: Flags) -> Vec<Uid> {
        if finalizer == Flags::FOREGROUND && self.mode == Mode::Cooperative {
            return self
                .graph
                .dependents(uid)
                .iter()
                .copied()
                .filter(|d| self.link(*d, uid).is_some_and(|l| l.blocks(finalizer)))
                .collect();
        }
        self.graph
            .valid_dependents(uid)
            .filter(|(.., link)| link.blocks(finalizer))
            .map(|(d, ..)| d)
            .collect()
    }

    /// The reference of `dependent` to `owner`.
    fn link(&self, dependent: Uid, owner: Uid) -> Option<OwnerLink> {
        let node = self.graph.node(dependent)?;
        node.owners.iter().find(|l| l.uid == owner).copied()
    }

    fn process(&mut self, wave: usize, work: Work) {
        match work {
            Work::AttemptToDelete(uid) => self.attempt_to_delete(wave, uid),
            Work::SyncOwner(uid) => self.sync_owner(wave, uid),
            Work::Orphan(uid) => self.orphan(wave, uid),
            Work::Arm(_) => {}
        }
    }

    /// Which collector decides about the dependent `uid` with owners `links`: syncgc in
    /// standalone mode or for an owner that waits synchronously, Kubernetes' otherwise.
    fn collector_for(&self, uid: Uid, links: &[OwnerLink]) -> ActedBy {
        let synchronous = links.iter().any(|link| {
            self.owner_state(uid, link, ActedBy::Syncgc) == OwnerState::WaitingSynchronous
        });
        if self.mode == Mode::Standalone || synchronous {
            ActedBy::Syncgc
        } else {
            ActedBy::Kubernetes
        }
    }

    /// How the dependent `uid` sees its owner through `link`, in the eyes of `collector`.
    fn owner_state(&self, uid: Uid, link: &OwnerLink, collector: ActedBy) -> OwnerState {
        let key = (uid, link.uid);
        if self.facts.unresolvable.contains(&key)
            || (collector == ActedBy::Kubernetes && self.facts.unserved_version.contains(&key))
        {
            return OwnerState::Unresolvable;
        }
        let from = self.graph.node(uid).and_then(|n| n.namespace());
        let owner = self.graph.node(link.uid);
        // A namespaced owner of a cluster-scoped object cannot be looked up.
        if from.is_none() && owner.is_some_and(|o| o.seen() && o.namespace().is_some()) {
            return OwnerState::Unresolvable;
        }
        if let Some(state) =
            decide::owner_in_graph(self.graph, link.uid, link.coordinates, from, collector)
        {
            return state;
        }
        match owner {
            // Never seen, of a kind not served: no read can find it absent.
            Some(owner) if !owner.seen() && !link.served => OwnerState::Unresolvable,
            // Not listed, or not what the reference names: no such owner.
            _ => OwnerState::Absent,
        }
    }

    /// Both collectors look at a dependent (in cooperative mode; syncgc alone in standalone):
    /// syncgc first, then Kubernetes' collector if syncgc left it.
    fn attempt_to_delete(&mut self, wave: usize, uid: Uid) {
        self.attempt_by(wave, uid, ActedBy::Syncgc);
        if self.mode == Mode::Cooperative {
            self.attempt_by(wave, uid, ActedBy::Kubernetes);
        }
    }

    fn attempt_by(&mut self, wave: usize, uid: Uid, collector: ActedBy) {
        let Some(node) = self.graph.node(uid) else {
            return;
        };
        if node.is(Flags::VIRTUAL) || node.is(Flags::DELETING) {
            return;
        }
        let links = node.owners.to_vec();
        let flags = node.flags;
        let owners: Vec<OwnerState> = links
            .iter()
            .map(|l| self.owner_state(uid, l, collector))
            .collect();
        let (mode, dependent) = match collector {
            ActedBy::Syncgc => {
                let in_turn = self.orders.in_turn(self.graph, uid, self.graph.wave(uid));
                (self.mode, Dependent::of(self.graph, uid, flags, in_turn))
            }
            ActedBy::Kubernetes => (
                Mode::Standalone,
                Dependent::as_kubernetes_sees(self.graph, uid, flags),
            ),
        };
        match decide::attempt_to_delete(mode, &owners, dependent) {
            Attempt::Wait => {}
            Attempt::Keep { drop } => {
                let by = links
                    .iter()
                    .zip(&owners)
                    .filter(|(_, state)| **state == OwnerState::Solid)
                    .map(|(link, _)| link.uid)
                    .collect();
                self.outcome.fates.insert(uid, Fate::Kept { by });
                let dropped: Vec<Uid> = drop.iter().map(|i| links[*i].uid).collect();
                let work = self.rewrite(uid, |links| links.retain(|l| !dropped.contains(&l.uid)));
                self.enqueue(wave, work);
            }
            Attempt::Arm => {
                let mut work = self.change(uid, |flags| flags.with(Flags::ARMED, true));
                work.push(Work::AttemptToDelete(uid));
                self.enqueue(wave, work);
            }
            Attempt::Delete {
                propagation,
                unblock,
            } => {
                if !unblock.is_empty() {
                    let unblocked: Vec<Uid> = unblock.iter().map(|i| links[*i].uid).collect();
                    let work = self.rewrite(uid, |links| {
                        for link in links.iter_mut().filter(|l| unblocked.contains(&l.uid)) {
                            link.block_owner_deletion = false;
                        }
                    });
                    self.enqueue(wave, work);
                }
                self.sent.insert(uid, (wave + 1, propagation, collector));
                let work = self.delete(uid, propagation);
                self.enqueue(wave + 1, work);
            }
        }
    }

    /// A waiting owner: its dependents deleted — in their turn by syncgc, all at once by
    /// Kubernetes' collector — unless it orphans them, and its finalizers removed once what
    /// they wait for is gone.
    fn sync_owner(&mut self, wave: usize, uid: Uid) {
        let Some(node) = self.graph.node(uid) else {
            return;
        };
        let flags = node.flags;
        if !flags.contains(Flags::DELETING) || flags.contains(Flags::VIRTUAL) {
            return;
        }
        let kubernetes_foreground =
            self.mode == Mode::Cooperative && flags.contains(Flags::FOREGROUND);
        if !flags.contains(Flags::ORPHAN) {
            let sent = &self.sent;
            let batch = self.orders.next(self.graph, uid, |d| sent.contains_key(&d));
            let mut work: Vec<Work> = batch.uids.into_iter().map(Work::AttemptToDelete).collect();
            if kubernetes_foreground {
                work.extend(
                    self.graph
                        .dependents(uid)
                        .iter()
                        .map(|d| Work::AttemptToDelete(*d)),
                );
            }
            self.enqueue(wave, work);
        }
        for finalizer in [Flags::FOREGROUND, Flags::ARMED] {
            let left = self.blocking(uid, finalizer).len();
            if flags.contains(finalizer) && decide::finalizer_done(left) {
                let work = self.change(uid, |flags| flags.with(finalizer, false));
                self.enqueue(wave, work);
            }
        }
    }

    /// An owner deleted with `orphan`: its dependents' references to it removed (every
    /// object naming its uid, beside Kubernetes' collector), then the finalizer.
    fn orphan(&mut self, wave: usize, uid: Uid) {
        let orphaning = self
            .graph
            .node(uid)
            .is_some_and(|n| n.is(Flags::ORPHAN) && n.is(Flags::DELETING));
        if !orphaning {
            return;
        }
        let dependents: Vec<Uid> = match self.mode {
            Mode::Cooperative => self.graph.dependents(uid).to_vec(),
            Mode::Standalone => self
                .graph
                .valid_dependents(uid)
                .map(|(dependent, ..)| dependent)
                .collect(),
        };
        for dependent in dependents {
            self.outcome.fates.insert(dependent, Fate::Orphaned);
            let work = self.rewrite(dependent, |links| links.retain(|l| l.uid != uid));
            self.enqueue(wave, work);
        }
        let work = self.change(uid, |flags| flags.with(Flags::ORPHAN, false));
        self.enqueue(wave, work);
    }

    /// The DELETE of `uid` with `propagation`, as the apiserver takes it.
    fn delete(&mut self, uid: Uid, propagation: Propagation) -> Vec<Work> {
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
        let finalized = !Flags::COLLECTORS
            .iter()
            .any(|f| observed.flags.contains(*f))
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

/// Runs the DELETE of `tree`'s root with `propagation` on a copy of the part of the graph it
/// reads: the tree (the object and what depends on it, transitively) and the owners of its
/// objects; with the resource of each object of the tree.
pub fn on_copy(tree: &Below, propagation: Propagation) -> (Outcome, HashMap<Uid, ResourceId>) {
    let (graph, target) = (tree.graph(), tree.root());
    let mut copy = Graph::new(Mode::Standalone);
    let mut facts = Facts::default();
    let mut resources = HashMap::new();
    for uid in tree.tree() {
        let Some((resource, observed)) = graph.observed(uid) else {
            continue;
        };
        for owner in &observed.owners {
            if let Some((resource, observed)) = graph.observed(owner.uid) {
                copy.apply(resource, observed);
            }
        }
        facts.note_foreign(&observed);
        resources.insert(uid, resource);
        copy.apply(resource, observed);
    }
    (
        run(&mut copy, &facts, graph.mode(), target, propagation),
        resources,
    )
}

impl Outcome {
    /// The objects of the tree whose DELETE is sent: those gone at the end, and those left
    /// being deleted.
    pub fn sent(&self) -> impl Iterator<Item = Uid> + '_ {
        self.fates.iter().filter_map(|(uid, fate)| match fate {
            Fate::Deleted { .. } | Fate::Terminating { sent: Some(_), .. } => Some(*uid),
            _ => None,
        })
    }
}

/// What the DELETE of `tree`'s root with `propagation` would do ([`on_copy`]), in numbers.
pub fn preview(
    tree: &Below,
    propagation: Propagation,
    kind: impl Fn(ResourceId) -> String,
) -> Preview {
    let (outcome, resources) = on_copy(tree, propagation);
    let kinds: HashMap<Uid, String> = resources.into_iter().map(|(u, r)| (u, kind(r))).collect();
    let mut preview = Preview {
        waves: outcome.waves,
        gone: outcome.gone,
        ..Preview::default()
    };
    for (uid, fate) in &outcome.fates {
        match fate {
            Fate::Deleted { .. } => {
                let kind = kinds.get(uid).cloned().unwrap_or_default();
                *preview.deleted.entry(kind).or_default() += 1;
            }
            Fate::Terminating { .. } => preview.waiting += 1,
            Fate::Orphaned => preview.orphaned += 1,
            Fate::Kept { .. } | Fate::Unreached { .. } => preview.kept += 1,
        }
    }
    preview
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Observed, Order, ResourceId, Wave};
    use crate::names::FOREGROUND_FINALIZER;

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

    /// The DELETE of o1 with `propagation` on `g`, in `mode`.
    fn cascade(g: &mut Graph, facts: &Facts, mode: Mode, propagation: Propagation) -> Outcome {
        run(g, facts, mode, uid(1), propagation)
    }

    /// o`n` carries a finalizer of another controller.
    fn held(n: u128) -> Facts {
        Facts {
            foreign: HashMap::from([(uid(n), vec!["example.com/hold".to_owned()])]),
            ..Facts::default()
        }
    }

    /// o1 with `flags`, and a dependent in each `(n, wave)` of its deletion order.
    fn ordered(flags: Flags, waves: &[(u128, i32)]) -> Graph {
        let mut g = Graph::new(Mode::Standalone);
        let resource = ResourceId::new(1);
        g.apply(resource, Observed::config_map(1, &[], flags));
        for (n, wave) in waves {
            let dependent = Observed {
                order: Order::Wave(Wave(*wave)),
                ..Observed::config_map(*n, &[1], NONE)
            };
            g.apply(resource, dependent);
        }
        g
    }

    #[test]
    fn a_background_delete_takes_the_tree_level_by_level() {
        let mut g = graph(&[
            (1, &[], NONE),
            (2, &[1], NONE),
            (3, &[1], NONE),
            (4, &[2], NONE),
        ]);
        let outcome = cascade(
            &mut g,
            &Facts::default(),
            Mode::Standalone,
            Propagation::Background,
        );
        assert!(outcome.gone);
        assert_eq!(deleted(&outcome), [(2, 1), (3, 1), (4, 2)]);
        assert_eq!(outcome.waves, 2);
        assert_eq!(outcome.requests, 3);
    }

    #[test]
    fn an_armed_owner_waits_and_its_dependents_with_dependents_are_armed_first() {
        let mut g = graph(&[(1, &[], Flags::ARMED), (2, &[1], NONE), (3, &[2], NONE)]);
        let outcome = cascade(
            &mut g,
            &Facts::default(),
            Mode::Standalone,
            Propagation::Background,
        );
        assert!(outcome.gone);
        // o2 is armed (a patch), then deleted; o3 goes while o2 waits for it.
        assert_eq!(deleted(&outcome), [(2, 1), (3, 2)]);
        // arm o2, delete o2, delete o3, release o2, release o1.
        assert_eq!(outcome.requests, 5);
    }

    #[test]
    fn a_dependent_with_another_living_owner_is_kept_and_named() {
        let mut g = graph(&[(1, &[], NONE), (9, &[], NONE), (2, &[1, 9], NONE)]);
        let outcome = cascade(
            &mut g,
            &Facts::default(),
            Mode::Standalone,
            Propagation::Foreground,
        );
        assert!(outcome.gone);
        assert_eq!(
            outcome.fates.get(&uid(2)),
            Some(&Fate::Kept { by: vec![uid(9)] })
        );
    }

    #[test]
    fn an_orphaning_delete_leaves_the_dependents() {
        let mut g = graph(&[(1, &[], NONE), (2, &[1], NONE), (3, &[2], NONE)]);
        let outcome = cascade(
            &mut g,
            &Facts::default(),
            Mode::Standalone,
            Propagation::Orphan,
        );
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
        let facts = held(2);
        let outcome = cascade(&mut g, &facts, Mode::Standalone, Propagation::Foreground);
        assert!(!outcome.gone, "the owner waits for o2 in foreground");
        assert_eq!(outcome.held, [hold(FOREGROUND_FINALIZER, &[2])]);
        // o2 was deleted in foreground: o3 goes, o2 stays for the finalizer.
        assert_eq!(
            outcome.fates.get(&uid(2)),
            Some(&Fate::Terminating {
                sent: Some((1, Propagation::Foreground)),
                held: vec![hold("example.com/hold", &[])],
            })
        );
        assert_eq!(deleted(&outcome), [(3, 2)]);
    }

    fn hold(finalizer: &str, waits_for: &[u128]) -> FinalizerHold {
        FinalizerHold {
            finalizer: finalizer.to_owned(),
            waits_for: waits_for.iter().map(|n| uid(*n)).collect(),
        }
    }

    fn both(
        objects: &[(u128, &[u128], Flags)],
        facts: &Facts,
        propagation: Propagation,
    ) -> [Outcome; 2] {
        [Mode::Cooperative, Mode::Standalone].map(|mode| {
            let mut g = graph(objects);
            run(&mut g, facts, mode, uid(1), propagation)
        })
    }

    #[test]
    fn an_owner_held_behind_a_held_descendant_stays_being_deleted_and_says_why() {
        let facts = held(3);
        let objects: &[(u128, &[u128], Flags)] = &[
            (1, &[], NONE),
            (2, &[1], NONE),
            (3, &[2], NONE),
            (4, &[3], NONE),
        ];
        for outcome in both(objects, &facts, Propagation::Foreground) {
            assert!(!outcome.gone);
            assert_eq!(outcome.held, [hold(FOREGROUND_FINALIZER, &[2])]);
            // o2 and o3 are deleted in foreground (each has a dependent) and stay.
            assert_eq!(
                outcome.fates.get(&uid(2)),
                Some(&Fate::Terminating {
                    sent: Some((1, Propagation::Foreground)),
                    held: vec![hold(FOREGROUND_FINALIZER, &[3])],
                })
            );
            assert_eq!(
                outcome.fates.get(&uid(3)),
                Some(&Fate::Terminating {
                    sent: Some((2, Propagation::Foreground)),
                    held: vec![hold("example.com/hold", &[])],
                })
            );
            assert_eq!(deleted(&outcome), [(4, 3)]);
        }
    }

    #[test]
    fn an_object_being_deleted_already_is_in_the_outcome() {
        let objects: &[(u128, &[u128], Flags)] = &[
            (1, &[], NONE),
            (2, &[1], Flags::DELETING.with(Flags::FOREGROUND, true)),
            (3, &[2], NONE),
        ];
        for outcome in both(objects, &Facts::default(), Propagation::Background) {
            assert!(outcome.gone);
            assert_eq!(deleted(&outcome), [(2, 0), (3, 1)]);
            assert_eq!(outcome.waves, 1);
        }
    }

    #[test]
    fn beside_kubernetes_a_foreground_owner_deletes_every_dependent_at_once() {
        let mut g = ordered(NONE, &[(2, 1), (3, 0)]);
        g.apply(ResourceId::new(1), Observed::config_map(4, &[3], NONE));
        let outcome = cascade(
            &mut g,
            &Facts::default(),
            Mode::Cooperative,
            Propagation::Foreground,
        );
        assert!(outcome.gone);
        assert_eq!(deleted(&outcome), [(2, 1), (3, 1), (4, 2)]);
        assert_eq!(
            outcome.fates.get(&uid(3)),
            Some(&Fate::Deleted {
                wave: 1,
                propagation: Propagation::Foreground,
                by: ActedBy::Kubernetes,
            })
        );
    }

    #[test]
    fn siblings_deleted_in_one_step_share_a_wave_and_each_says_its_propagation() {
        // An armed owner: o2 (with a dependent) is armed, then deleted, with o3.
        let objects: &[(u128, &[u128], Flags)] = &[
            (1, &[], Flags::ARMED),
            (2, &[1], NONE),
            (3, &[1], NONE),
            (4, &[2], NONE),
        ];
        for outcome in both(objects, &Facts::default(), Propagation::Background) {
            assert_eq!(deleted(&outcome), [(2, 1), (3, 1), (4, 2)]);
            assert_eq!(
                outcome.fates.get(&uid(2)),
                Some(&Fate::Deleted {
                    wave: 1,
                    propagation: Propagation::Background,
                    by: ActedBy::Syncgc,
                })
            );
        }
    }

    /// A cluster-scoped object o5 naming the namespaced o1 with blockOwnerDeletion.
    fn with_cluster_scoped_dependent(owner_flags: Flags) -> Graph {
        let mut g = graph(&[(1, &[], owner_flags), (2, &[1], NONE)]);
        g.apply(
            ResourceId::new(2),
            Observed {
                namespace: None,
                ..Observed::config_map(5, &[1], NONE)
            },
        );
        g
    }

    #[test]
    fn a_cluster_scoped_dependent_holds_a_foreground_delete_beside_kubernetes_only() {
        let mut g = with_cluster_scoped_dependent(NONE);
        let outcome = cascade(
            &mut g,
            &Facts::default(),
            Mode::Cooperative,
            Propagation::Foreground,
        );
        assert!(!outcome.gone, "Kubernetes' collector waits for o5 for good");
        assert_eq!(outcome.held, [hold(FOREGROUND_FINALIZER, &[5])]);
        assert_eq!(
            outcome.fates.get(&uid(5)),
            Some(&Fate::Kept { by: vec![uid(1)] })
        );
        assert_eq!(deleted(&outcome), [(2, 1)]);

        let mut g = with_cluster_scoped_dependent(NONE);
        let outcome = cascade(
            &mut g,
            &Facts::default(),
            Mode::Standalone,
            Propagation::Foreground,
        );
        assert!(
            outcome.gone,
            "syncgc does not take o5 for a dependent of o1"
        );
        assert_eq!(
            outcome.fates.get(&uid(5)),
            Some(&Fate::Kept { by: vec![uid(1)] })
        );
    }

    #[test]
    fn an_orphaning_delete_beside_kubernetes_drops_a_cluster_scoped_reference_too() {
        let mut g = with_cluster_scoped_dependent(NONE);
        let outcome = cascade(
            &mut g,
            &Facts::default(),
            Mode::Cooperative,
            Propagation::Orphan,
        );
        assert!(outcome.gone);
        assert_eq!(outcome.fates.get(&uid(5)), Some(&Fate::Orphaned));
        assert_eq!(outcome.fates.get(&uid(2)), Some(&Fate::Orphaned));
    }

    #[test]
    fn a_reference_at_a_version_not_served_keeps_its_dependent_beside_kubernetes() {
        let facts = Facts {
            unserved_version: HashSet::from([(uid(2), uid(1))]),
            ..Facts::default()
        };
        let objects: &[(u128, &[u128], Flags)] = &[(1, &[], NONE), (2, &[1], NONE)];
        let [cooperative, standalone] = both(objects, &facts, Propagation::Background);
        assert_eq!(
            cooperative.fates.get(&uid(2)),
            Some(&Fate::Kept { by: vec![uid(1)] })
        );
        assert_eq!(deleted(&standalone), [(2, 1)]);
    }

    #[test]
    fn a_wave_that_never_ends_says_it_blocks_the_next() {
        let mut g = ordered(Flags::ARMED, &[(2, 1), (3, 0)]);
        let facts = held(2);
        let outcome = cascade(&mut g, &facts, Mode::Cooperative, Propagation::Background);
        assert!(!outcome.gone);
        assert_eq!(
            outcome.fates.get(&uid(3)),
            Some(&Fate::Unreached {
                owner: uid(1),
                blocked_by: Wave(1)
            })
        );
    }

    #[test]
    fn an_owner_that_cannot_be_looked_up_keeps_its_dependent() {
        let mut g = graph(&[(1, &[], NONE), (2, &[1, 7], NONE)]);
        let facts = Facts {
            unresolvable: HashSet::from([(uid(2), uid(7))]),
            ..Facts::default()
        };
        let outcome = cascade(&mut g, &facts, Mode::Standalone, Propagation::Background);
        assert_eq!(
            outcome.fates.get(&uid(2)),
            Some(&Fate::Kept { by: vec![uid(7)] })
        );
    }

    #[test]
    fn deletion_order_makes_waves_of_an_armed_owners_dependents() {
        let mut g = ordered(Flags::ARMED, &[(2, 2), (3, 1), (4, 1), (5, 0)]);
        let outcome = cascade(
            &mut g,
            &Facts::default(),
            Mode::Standalone,
            Propagation::Background,
        );
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
        let preview = preview(&Below::new(&g, uid(1)), Propagation::Background, kind);
        assert_eq!(
            preview,
            Preview {
                // The Pod's DELETE is sent; it stays, held.
                deleted: [("ConfigMap".to_owned(), 1)].into(),
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
    fn a_preview_keeps_a_dependent_whose_other_owner_is_of_a_kind_not_served() {
        let mut g = graph(&[(1, &[], Flags::ARMED)]);
        let mut dependent = Observed::config_map(2, &[1, 7], NONE);
        dependent.owners[1].served = false;
        g.apply(ResourceId::new(1), dependent);
        let preview = preview(&Below::new(&g, uid(1)), Propagation::Background, |_| {
            "ConfigMap".into()
        });
        assert!(preview.deleted.is_empty(), "{preview:?}");
        assert_eq!(preview.kept, 1);
        // Of a kind served, an owner never seen is absent.
        let g = graph(&[(1, &[], Flags::ARMED), (2, &[1, 7], NONE)]);
        let preview = super::preview(&Below::new(&g, uid(1)), Propagation::Background, |_| {
            "ConfigMap".into()
        });
        assert_eq!(preview.deleted.get("ConfigMap"), Some(&1));
    }

    #[test]
    fn a_cycle_ends() {
        let mut g = graph(&[(1, &[3], NONE), (2, &[1], NONE), (3, &[2], NONE)]);
        let outcome = cascade(
            &mut g,
            &Facts::default(),
            Mode::Standalone,
            Propagation::Foreground,
        );
        assert!(outcome.gone);
        assert_eq!(deleted(&outcome).len(), 2);
    }
}
