//! Deletion order (`syncgc.io/deletion-order`): the dependents of a waiting owner go in waves,
//! the highest first, and the next wave starts only when every object of the current one is
//! gone (transitively: an object with dependents of its own waits for them before it goes).
//! The graph keeps each object's order; [`Orders`] keeps, per waiting owner, the wave its
//! deletion has reached, so that a dependent's turn costs one look-up; [`Wave::is_highest_of`] is
//! the rule. The owner's deadline bounds the whole sequence: when it passes, the order is
//! abandoned and the remaining waves go at once. Pure: the workers' side, which says and
//! queues what it decides, is [`super::waves`]; `syncgc plan` runs it on a copy.

use std::collections::{HashMap, HashSet};

use crate::graph::{Flags, Graph, Uid, Wave};

/// The deletion order of each waiting owner, as far as its deletion has gone.
#[derive(Debug, Default)]
pub struct Orders {
    owners: HashMap<Uid, OwnerOrder>,
    /// Dependents already warned about an invalid order.
    warned: HashSet<Uid>,
}

#[derive(Debug, Clone, Copy)]
struct OwnerOrder {
    /// The wave its dependents are deleted in: the highest left when it was last looked at.
    current: Wave,
    /// Its dependents are ordered: a wave was announced.
    ordered: bool,
    /// Its deadline passed: what is left goes at once.
    abandoned: bool,
}

impl Orders {
    /// Whether a dependent in `wave` may be deleted for the waiting owner `owner`: from the wave
    /// its deletion has reached when known, from its dependents in the graph otherwise. A wave
    /// remembered too high (the last object of the wave just went) only makes the dependent
    /// wait for the owner's next look, which deletes it.
    fn wave_reached(&self, graph: &Graph, owner: Uid, wave: Wave) -> bool {
        match self.owners.get(&owner) {
            Some(order) => order.abandoned || wave >= order.current,
            None => graph.wave_reached(owner, wave),
        }
    }

    /// Forgets the owners and dependents that are gone. (Not an owner the graph does not
    /// show waiting yet: its watch may lag the read that found it waiting.)
    pub fn forget(&mut self, graph: &Graph) {
        let observed = |uid: &Uid| graph.node(*uid).is_some_and(|n| !n.is(Flags::VIRTUAL));
        self.owners.retain(|uid, _| observed(uid));
        self.warned.retain(observed);
    }
}

/// The next dependents of a waiting owner to delete ([`Orders::next`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub uids: Vec<Uid>,
    /// A wave that starts, with how many objects it holds.
    pub started: Option<(Wave, usize)>,
    /// Dependents to warn about an invalid order, with the value.
    pub invalid: Vec<(Uid, String)>,
}

/// The deadline passed before the last wave: the wave in progress, and how many dependents
/// of the later waves now go at once ([`Orders::abandon`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Abandoned {
    pub current: Wave,
    pub later: usize,
}

impl Orders {
    /// Whether `uid`, in `wave`, may be deleted for every owner of it that waits.
    pub fn in_turn(&self, graph: &Graph, uid: Uid, wave: Wave) -> bool {
        graph
            .waiting_owners_of(uid)
            .all(|owner| self.wave_reached(graph, owner, wave))
    }

    /// The dependents of the waiting owner `owner` still to be deleted (not being deleted,
    /// and not `deleted` already by this collector) in the wave its order has reached: the
    /// highest among its dependents still in the graph, or all of them once the order is
    /// abandoned; the wave that starts, if one does (an order spans two waves at least); and
    /// the dependents with an invalid order not warned about yet.
    pub fn next(&mut self, graph: &Graph, owner: Uid, deleted: impl Fn(Uid) -> bool) -> Batch {
        let waves = waves_of(graph, owner);
        let highest = waves.iter().max().copied().unwrap_or_default();
        let known = self.owners.get(&owner).copied();
        let abandoned = known.is_some_and(|o| o.abandoned);
        let current = if abandoned { Wave(i32::MIN) } else { highest };
        // Ordered once its dependents span two waves (all in one, as the ReplicaSets of a
        // Deployment that carries the annotation, which they copy, is no order).
        let ordered = known.is_some_and(|o| o.ordered) || waves.iter().any(|w| *w != highest);
        let started = (ordered && !abandoned && known.is_none_or(|o| o.current != highest))
            .then(|| (highest, waves.iter().filter(|w| **w == highest).count()));
        self.owners.insert(
            owner,
            OwnerOrder {
                current,
                ordered,
                abandoned,
            },
        );
        let mut batch = Batch {
            started,
            ..Batch::default()
        };
        for (dependent, node, _) in graph.valid_dependents(owner) {
            if let Some(value) = graph.invalid_order(dependent)
                && self.warned.insert(dependent)
            {
                batch.invalid.push((dependent, value.to_owned()));
            }
            if !node.is(Flags::DELETING) && !deleted(dependent) && graph.wave(dependent) >= current
            {
                batch.uids.push(dependent);
            }
        }
        batch
    }

    /// The owner `owner`'s deadline passed: when waves of its ordered dependents are left
    /// besides the current one, the order is abandoned and they all go at once (the owner then
    /// waits for its next look, so that the rest is deleted while it still waits).
    pub fn abandon(&mut self, graph: &Graph, owner: Uid) -> Option<Abandoned> {
        let waves = waves_of(graph, owner);
        // Unknown after a restart: the wave in progress is the highest left.
        let order = self.owners.entry(owner).or_insert(OwnerOrder {
            current: waves.iter().max().copied().unwrap_or_default(),
            ordered: false,
            abandoned: false,
        });
        let later = waves.iter().filter(|w| **w < order.current).count();
        if order.abandoned || later == 0 {
            return None;
        }
        order.abandoned = true;
        order.ordered = true;
        Some(Abandoned {
            current: order.current,
            later,
        })
    }
}

/// The waves of the dependents of the waiting owner `owner` still in the graph, with how many
/// objects each holds, the one in progress (the highest) first; `None` when none of them
/// carries an order (a valid one or not).
pub fn wave_counts(graph: &Graph, owner: Uid) -> Option<Vec<(Wave, usize)>> {
    let ordered = |d: Uid| graph.wave(d) != Wave::default() || graph.invalid_order(d).is_some();
    if !graph.valid_dependents(owner).any(|(d, ..)| ordered(d)) {
        return None;
    }
    let mut counts: Vec<(Wave, usize)> = Vec::new();
    for wave in waves_of(graph, owner) {
        match counts.iter_mut().find(|(w, _)| *w == wave) {
            Some((_, n)) => *n += 1,
            None => counts.push((wave, 1)),
        }
    }
    counts.sort_by_key(|(wave, _)| std::cmp::Reverse(*wave));
    Some(counts)
}

/// The waves of the dependents of `uid` still in the graph.
fn waves_of(graph: &Graph, uid: Uid) -> Vec<Wave> {
    graph
        .valid_dependents(uid)
        .map(|(d, ..)| graph.wave(d))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_owner_decides_by_its_current_wave_and_lets_all_go_once_abandoned() {
        let graph = Graph::new(crate::graph::Mode::Cooperative);
        let owner = Uid::from_u128(1);
        let mut orders = Orders::default();
        let order = |current, abandoned| OwnerOrder {
            current: Wave(current),
            ordered: true,
            abandoned,
        };
        orders.owners.insert(owner, order(2, false));
        assert!(orders.wave_reached(&graph, owner, Wave(2)));
        assert!(orders.wave_reached(&graph, owner, Wave(3)));
        assert!(!orders.wave_reached(&graph, owner, Wave(1)));
        orders.owners.insert(owner, order(2, true));
        assert!(orders.wave_reached(&graph, owner, Wave(-5)));
        // Unknown: from the graph, where nothing is ordered.
        assert!(orders.wave_reached(&graph, Uid::from_u128(2), Wave(0)));
    }

    /// An armed owner being deleted (uid 1) with a dependent in each of `waves` (uids 10…).
    fn ordered(waves: &[Option<&str>]) -> Graph {
        use crate::graph::{Mode, Observed, Order, ResourceId};
        let mut graph = Graph::new(Mode::Cooperative);
        let waiting = Flags::ARMED.with(Flags::DELETING, true);
        graph.apply(ResourceId::new(0), Observed::config_map(1, &[], waiting));
        for (i, wave) in waves.iter().enumerate() {
            let dependent = Observed {
                order: Order::of(*wave),
                ..Observed::config_map(10 + i as u128, &[1], Flags::empty())
            };
            graph.apply(ResourceId::new(0), dependent);
        }
        graph
    }

    #[test]
    fn an_order_deletes_the_highest_wave_first_and_announces_each_wave_once() {
        let graph = ordered(&[Some("2"), Some("2"), None, Some("x")]);
        let (owner, uid) = (Uid::from_u128(1), Uid::from_u128);
        let mut orders = Orders::default();
        let batch = orders.next(&graph, owner, |_| false);
        let mut uids = batch.uids.clone();
        uids.sort();
        assert_eq!(uids, [uid(10), uid(11)], "wave 2 first");
        assert_eq!(batch.started, Some((Wave(2), 2)));
        assert_eq!(batch.invalid, [(uid(13), "x".to_owned())]);
        let again = orders.next(&graph, owner, |d| d == uid(10));
        assert_eq!(again.uids, [uid(11)], "not what was just deleted");
        assert_eq!(again.started, None, "announced once");
        assert!(again.invalid.is_empty(), "warned once");
        assert!(!orders.in_turn(&graph, uid(12), Wave(0)), "wave 0 waits");
        assert!(orders.in_turn(&graph, uid(10), Wave(2)));
    }

    #[test]
    fn at_the_deadline_an_order_is_abandoned_once_and_every_wave_goes() {
        let graph = ordered(&[Some("1"), None, Some("-1")]);
        let (owner, uid) = (Uid::from_u128(1), Uid::from_u128);
        let mut orders = Orders::default();
        assert_eq!(
            orders.abandon(&graph, owner),
            Some(Abandoned {
                current: Wave(1),
                later: 2
            }),
            "unknown after a restart: the highest wave is in progress"
        );
        assert_eq!(orders.abandon(&graph, owner), None, "once");
        let batch = orders.next(&graph, owner, |_| false);
        assert_eq!(batch.uids.len(), 3);
        assert_eq!(batch.started, None, "no wave announced once abandoned");
        assert!(orders.in_turn(&graph, uid(12), Wave(-1)));
        let unordered = ordered(&[None, None]);
        assert_eq!(
            Orders::default().abandon(&unordered, owner),
            None,
            "nothing later"
        );
    }
}
