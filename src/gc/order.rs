//! Deletion order (`syncgc.io/deletion-order`): the dependents of a waiting owner go in waves,
//! the highest first, and the next wave starts only when every object of the current one is
//! gone (transitively: an object with dependents of its own waits for them before it goes).
//! The graph keeps each object's order; [`Orders`] keeps, per waiting owner, the wave its
//! deletion has reached, so that a dependent's turn costs one look-up; [`super::decide::in_turn`] is
//! the rule. The owner's deadline bounds the whole sequence: when it passes, the order is
//! abandoned and the remaining waves go at once.

use std::collections::{HashMap, HashSet};

use kube::runtime::events::EventType;

use super::Collector;
use super::collector::lock;
use super::decide::Wave;
use crate::api::Target;
use crate::graph::{Flags, Graph, Uid, Work};
use crate::names::DELETION_ORDER_ANNOTATION;

/// The reason of the Event that says a wave of ordered dependents starts.
pub const WAVE_REASON: &str = "SyncGCWave";
/// The reason of the Event that says the deadline passed before the last wave.
pub const ABANDONED_REASON: &str = "SyncGCOrderAbandoned";
/// The reason of the Warning Event on a dependent whose order is not an integer.
pub const INVALID_REASON: &str = "SyncGCInvalidOrder";

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
    pub fn in_turn(&self, graph: &Graph, owner: Uid, wave: Wave) -> bool {
        match self.owners.get(&owner) {
            Some(order) => order.abandoned || wave >= order.current,
            None => graph.in_turn_of(owner, wave),
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

/// What [`Collector::delete_dependents`] found.
struct Batch {
    uids: Vec<Uid>,
    /// A wave that starts, with how many objects it holds.
    started: Option<(Wave, usize)>,
    /// Dependents to warn about an invalid order, with the value.
    invalid: Vec<(Uid, String)>,
}

impl Collector {
    /// Whether `uid`, in `wave`, may be deleted for every owner of it that waits.
    pub(super) fn in_turn(&self, graph: &Graph, uid: Uid, wave: Wave) -> bool {
        let orders = lock(&self.orders);
        graph
            .waiting_owners_of(uid)
            .all(|owner| orders.in_turn(graph, owner, wave))
    }

    /// Queues the attempts to delete the dependents of the waiting owner `uid` that are still
    /// to be deleted (not being deleted, and not just deleted by this collector) in the wave
    /// its order has reached: the highest among its dependents still in the graph, or all of
    /// them once the order is abandoned. A wave that starts gets a `SyncGCWave` Event on
    /// `target`; a dependent with an invalid order, a Warning of its own the first time.
    pub(super) async fn delete_dependents(&self, uid: Uid, target: &Target) {
        let batch = self.batch(uid);
        if let Some((wave, count)) = batch.started {
            self.metrics.waves_started.inc();
            tracing::info!(owner = %target, wave = wave.0, count, "deleting a wave of dependents");
            let note = format!("deleting wave {}: {count} dependent(s)", wave.0);
            self.cluster
                .new_event(target, EventType::Normal, WAVE_REASON, note)
                .await;
        }
        for (dependent, value) in batch.invalid {
            let Some((dependent, _)) = self.observed(dependent) else {
                continue;
            };
            let note = format!(
                "{DELETION_ORDER_ANNOTATION} {value:?} is not an integer; it is deleted in wave 0"
            );
            tracing::warn!(%dependent, "{note}");
            self.event(&dependent, EventType::Warning, INVALID_REASON, note)
                .await;
        }
        for dependent in batch.uids {
            self.enqueue(Work::AttemptToDelete(dependent));
        }
    }

    fn batch(&self, uid: Uid) -> Batch {
        let graph = self.graph_read();
        let mut orders = lock(&self.orders);
        let waves = waves_of(&graph, uid);
        let highest = waves.iter().max().copied().unwrap_or_default();
        let known = orders.owners.get(&uid).copied();
        let abandoned = known.is_some_and(|o| o.abandoned);
        let current = if abandoned { Wave(i32::MIN) } else { highest };
        // Ordered once its dependents span two waves (all in one, as the ReplicaSets of a
        // Deployment that carries the annotation, which they copy, is no order).
        let ordered = known.is_some_and(|o| o.ordered) || waves.iter().any(|w| *w != highest);
        let started = (ordered && !abandoned && known.is_none_or(|o| o.current != highest))
            .then(|| (highest, waves.iter().filter(|w| **w == highest).count()));
        orders.owners.insert(
            uid,
            OwnerOrder {
                current,
                ordered,
                abandoned,
            },
        );
        let mut uids = Vec::new();
        let mut invalid = Vec::new();
        for (dependent, node, _) in graph.valid_dependents(uid) {
            if let Some(value) = graph.invalid_order(dependent)
                && orders.warned.insert(dependent)
            {
                invalid.push((dependent, value.to_owned()));
            }
            if !node.is(Flags::DELETING)
                && !self.recently_deleted(dependent)
                && graph.wave(dependent) >= current
            {
                uids.push(dependent);
            }
        }
        Batch {
            uids,
            started,
            invalid,
        }
    }

    /// The owner `uid`'s deadline passed: when waves of its ordered dependents are left
    /// besides the current one, says so on `target` and lets them all go at once. Whether it
    /// did (the owner then waits for its next look, so that the rest is deleted while it still
    /// waits).
    pub(super) async fn abandon_order(&self, uid: Uid, target: &Target) -> bool {
        let (current, later) = {
            let graph = self.graph_read();
            let mut orders = lock(&self.orders);
            let waves = waves_of(&graph, uid);
            // Unknown after a restart: the wave in progress is the highest left.
            let order = orders.owners.entry(uid).or_insert(OwnerOrder {
                current: waves.iter().max().copied().unwrap_or_default(),
                ordered: false,
                abandoned: false,
            });
            let later = waves.iter().filter(|w| **w < order.current).count();
            if order.abandoned || later == 0 {
                return false;
            }
            order.abandoned = true;
            order.ordered = true;
            (order.current, later)
        };
        tracing::warn!(owner = %target, wave = current.0, later, "the deadline passed before the last wave: the order is abandoned");
        let note = format!(
            "the deadline passed while wave {} was being deleted: the order is abandoned and the {later} dependent(s) of the later waves are deleted at once",
            current.0
        );
        self.cluster
            .new_event(target, EventType::Warning, ABANDONED_REASON, note)
            .await;
        true
    }
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
        assert!(orders.in_turn(&graph, owner, Wave(2)));
        assert!(orders.in_turn(&graph, owner, Wave(3)));
        assert!(!orders.in_turn(&graph, owner, Wave(1)));
        orders.owners.insert(owner, order(2, true));
        assert!(orders.in_turn(&graph, owner, Wave(-5)));
        // Unknown: from the graph, where nothing is ordered.
        assert!(orders.in_turn(&graph, Uid::from_u128(2), Wave(0)));
    }
}
