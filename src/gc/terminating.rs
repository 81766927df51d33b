//! A protected object in a namespace already being deleted (its DELETE let through while
//! syncgc was away, or before the object was protected). The namespace controller deletes each
//! kind as a collection, and a collection's DELETE stops at the first item refused: one
//! protected object would keep every sibling of its kind after it, and the namespace, for as
//! long as it is refused. So the refusal is bounded ([`hold`]: from the namespace's deletion, as
//! long as a synchronous owner with as many dependents may wait), and while it lasts the
//! leader deletes the siblings the namespace controller could not ([`held`]) and says so with
//! a Warning Event on the namespace (a namespace being deleted takes no new Events about its
//! objects).

use std::collections::{BTreeMap, HashMap};

use crate::annotations::Timeouts;
use crate::graph::{Flags, Graph, Node, ResourceId, Uid};

/// From when to when (the apiserver's seconds) the protected objects of `namespace`, being
/// deleted, hold it. `None`: the namespace is not being deleted.
pub fn hold(graph: &Graph, namespace: &str, timeouts: Option<Timeouts>) -> Option<(i64, i64)> {
    let since = graph.namespace_deleted_at(namespace)?;
    let held = graph
        .protected()
        .filter(|uid| graph.node(*uid).and_then(Node::namespace) == Some(namespace))
        .count();
    Some((since, since.saturating_add(hold_timeout(timeouts, held))))
}

/// The seconds a hold on `objects` objects lasts: as long as a synchronous owner with as many
/// dependents may wait (no end without the collector's timeouts).
pub fn hold_timeout(timeouts: Option<Timeouts>, objects: usize) -> i64 {
    timeouts.map_or(i64::MAX / 2, |t| {
        i64::try_from(t.for_owner(objects, None).as_secs()).unwrap_or(i64::MAX / 2)
    })
}

/// A protected object holding its namespace, being deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedHold {
    pub object: Uid,
    /// The Namespace's uid, when observed.
    pub namespace: Option<Uid>,
    pub namespace_name: String,
    /// When the hold ends (the apiserver's seconds).
    pub until: i64,
    /// The objects of its kind in its namespace that are neither protected nor being deleted:
    /// a collection's DELETE stopped at the protected one leaves them.
    pub siblings: Vec<Uid>,
}

/// Every protected object, not being deleted, whose namespace is being deleted and whose
/// hold has not ended at `now`. Each such namespace's hold is computed once, and its objects
/// read in one pass.
pub fn held(graph: &Graph, timeouts: Timeouts, now: i64) -> Vec<ProtectedHold> {
    let mut by_namespace: BTreeMap<&str, Vec<(Uid, Option<ResourceId>)>> = BTreeMap::new();
    for uid in graph.protected() {
        let Some(node) = graph.node(uid).filter(|n| !n.is(Flags::DELETING)) else {
            continue;
        };
        if let Some(namespace) = node.namespace() {
            by_namespace
                .entry(namespace)
                .or_default()
                .push((uid, node.resource));
        }
    }
    let mut held = Vec::new();
    for (namespace, protected) in by_namespace {
        let Some((_, until)) = hold(graph, namespace, Some(timeouts)) else {
            continue;
        };
        if now >= until {
            continue;
        }
        let siblings = siblings(graph, namespace);
        for (object, resource) in protected {
            held.push(ProtectedHold {
                object,
                namespace: graph.namespace_uid(namespace),
                namespace_name: namespace.to_owned(),
                until,
                siblings: resource
                    .and_then(|r| siblings.get(&r).cloned())
                    .unwrap_or_default(),
            });
        }
    }
    held
}

/// The objects of `namespace` neither protected nor being deleted, by resource.
fn siblings(graph: &Graph, namespace: &str) -> HashMap<ResourceId, Vec<Uid>> {
    let mut siblings: HashMap<ResourceId, Vec<Uid>> = HashMap::new();
    for uid in graph.in_namespace(namespace) {
        if graph.guards(uid).is_some_and(|g| g.protected) {
            continue;
        }
        if let Some(resource) = graph
            .node(uid)
            .filter(|n| !n.is(Flags::DELETING))
            .and_then(|n| n.resource)
        {
            siblings.entry(resource).or_default().push(uid);
        }
    }
    for uids in siblings.values_mut() {
        uids.sort();
    }
    siblings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Coordinates, Guards, Mode, Observed};
    use std::time::Duration;

    const CM: ResourceId = ResourceId::new(0);
    const SECRET: ResourceId = ResourceId::new(1);
    const DELETED: i64 = 10_000;

    fn timeouts() -> Timeouts {
        Timeouts {
            base: Duration::from_secs(60),
            per_dependent: Duration::from_secs(1),
            max: Duration::from_secs(600),
        }
    }

    fn protected(n: u128) -> Observed {
        Observed {
            guards: Guards {
                protected: true,
                ..Guards::default()
            },
            ..Observed::config_map(n, &[], Flags::empty())
        }
    }

    fn graph(namespace_deleting: bool) -> Graph {
        let mut graph = Graph::new(Mode::Cooperative);
        let flags = if namespace_deleting {
            Flags::DELETING
        } else {
            Flags::empty()
        };
        graph.apply(
            CM,
            Observed {
                coordinates: Coordinates::in_group("", "Namespace", "ns"),
                namespace: None,
                name: "ns".to_owned(),
                deleted_at: namespace_deleting.then_some(DELETED),
                ..Observed::config_map(100, &[], flags)
            },
        );
        graph.apply(CM, protected(1));
        graph.apply(CM, protected(2));
        graph.apply(CM, Observed::config_map(3, &[], Flags::empty()));
        graph.apply(CM, Observed::config_map(4, &[], Flags::DELETING));
        graph.apply(SECRET, Observed::config_map(5, &[], Flags::empty()));
        graph
    }

    /// Two protected objects hold their namespace for the base timeout and a second each;
    /// their unprotected siblings of the same kind are to go meanwhile, not the others.
    #[test]
    fn protected_objects_hold_a_namespace_being_deleted_for_a_bounded_time() {
        let graph = graph(true);
        assert_eq!(
            hold(&graph, "ns", Some(timeouts())),
            Some((DELETED, DELETED + 62))
        );
        let found = held(&graph, timeouts(), DELETED + 61);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].siblings, vec![Uid::from_u128(3)]);
        assert_eq!(found[0].namespace, Some(Uid::from_u128(100)));
        assert!(held(&graph, timeouts(), DELETED + 62).is_empty(), "ended");
        assert_eq!(
            hold(&graph, "ns", None).map(|(_, until)| until > DELETED + 1_000_000),
            Some(true)
        );
    }

    #[test]
    fn a_namespace_not_being_deleted_is_not_held() {
        let graph = graph(false);
        assert_eq!(hold(&graph, "ns", Some(timeouts())), None);
        assert!(held(&graph, timeouts(), DELETED).is_empty());
    }
}
