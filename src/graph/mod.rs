//! The ownership graph: every watched object as a node keyed by uid, with its owners and
//! dependents, fed by the watches through [`Graph::apply`], [`Graph::delete`] and
//! [`Graph::reset`], each of which says which owners need another look.
//!
//! One task writes the graph; everyone else reads. Nothing here does I/O.

mod uid;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

pub use uid::Uid;

/// An index into the table of watched resources (see `gc::discovery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId(pub u16);

/// One ownerReference, as the graph keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerLink {
    pub uid: Uid,
    pub block_owner_deletion: bool,
}

/// What the graph needs of an object, read from its metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub uid: Uid,
    pub namespace: Option<String>,
    pub name: String,
    pub owners: Vec<OwnerLink>,
    pub flags: Flags,
}

/// Bits of an object's state, packed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flags(u8);

impl Flags {
    /// Referenced as an owner but not (or no longer) seen by any watch.
    pub const VIRTUAL: Self = Self(1);
    /// Has a `deletionTimestamp`.
    pub const DELETING: Self = Self(1 << 1);
    /// Carries `syncgc.io/synchronous`.
    pub const ARMED: Self = Self(1 << 2);
    /// Annotated `syncgc.io/synchronous: "true"`.
    pub const OPTED_IN: Self = Self(1 << 3);
    /// Carries `foregroundDeletion`.
    pub const FOREGROUND: Self = Self(1 << 4);
    /// Carries `orphan`.
    pub const ORPHAN: Self = Self(1 << 5);

    pub const fn empty() -> Self {
        Self(0)
    }

    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    #[must_use]
    pub const fn with(self, other: Self, on: bool) -> Self {
        if on {
            Self(self.0 | other.0)
        } else {
            Self(self.0 & !other.0)
        }
    }
}

impl std::ops::BitOr for Flags {
    type Output = Self;
    fn bitor(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

/// A node: one object (or a virtual stand-in for an owner not seen).
#[derive(Debug, Clone)]
pub struct Node {
    pub resource: Option<ResourceId>,
    pub flags: Flags,
    pub namespace: Option<Arc<str>>,
    pub name: Box<str>,
    pub owners: Box<[OwnerLink]>,
    pub dependents: Vec<Uid>,
}

impl Node {
    pub fn is(&self, flag: Flags) -> bool {
        self.flags.contains(flag)
    }

    /// An armed object whose deletion has started: syncgc holds it until its dependents go.
    pub fn waiting_for_dependents(&self) -> bool {
        self.is(Flags::ARMED) && self.is(Flags::DELETING) && !self.is(Flags::VIRTUAL)
    }
}

/// Something a worker should look at again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Work {
    /// An armed, deleting owner: delete its dependents, release it when they are gone.
    SyncOwner(Uid),
    /// A dependent of a waiting owner: delete it, or drop its reference.
    AttemptToDelete(Uid),
    /// An opted-in object that does not carry the finalizer: arm it.
    Arm(Uid),
}

/// The graph.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<Uid, Node>,
    namespaces: HashSet<Arc<str>>,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn node(&self, uid: Uid) -> Option<&Node> {
        self.nodes.get(&uid)
    }

    /// The uids of the objects that name `uid` as an owner.
    pub fn dependents(&self, uid: Uid) -> &[Uid] {
        self.nodes.get(&uid).map_or(&[], |n| &n.dependents)
    }

    /// (observed, virtual) node counts.
    pub fn counts(&self) -> (usize, usize) {
        let virtual_nodes = self.nodes.values().filter(|n| n.is(Flags::VIRTUAL)).count();
        (self.nodes.len() - virtual_nodes, virtual_nodes)
    }

    /// The number of direct and indirect dependents of `uid`, each counted once (cycles end).
    pub fn transitive_dependents(&self, uid: Uid) -> usize {
        let mut seen = HashSet::from([uid]);
        let mut stack = vec![uid];
        while let Some(next) = stack.pop() {
            for dependent in self.dependents(next) {
                if seen.insert(*dependent) {
                    stack.push(*dependent);
                }
            }
        }
        seen.len() - 1
    }

    /// Owners waiting for their dependents, with their uids.
    pub fn waiting_owners(&self) -> impl Iterator<Item = Uid> + '_ {
        self.nodes
            .iter()
            .filter(|(_, n)| n.waiting_for_dependents())
            .map(|(uid, _)| *uid)
    }

    fn intern(&mut self, namespace: Option<String>) -> Option<Arc<str>> {
        let namespace = namespace?;
        if let Some(existing) = self.namespaces.get(namespace.as_str()) {
            return Some(existing.clone());
        }
        let interned: Arc<str> = namespace.into();
        self.namespaces.insert(interned.clone());
        Some(interned)
    }

    /// An object was added or changed.
    pub fn apply(&mut self, resource: ResourceId, object: Observed) -> Vec<Work> {
        let Observed {
            uid,
            namespace,
            name,
            owners,
            flags,
        } = object;
        let namespace = self.intern(namespace);
        let mut work = Vec::new();
        let old_owners: Box<[OwnerLink]> = match self.nodes.get_mut(&uid) {
            Some(node) => {
                let old = std::mem::replace(&mut node.owners, owners.clone().into());
                node.resource = Some(resource);
                node.flags = flags;
                node.namespace = namespace;
                node.name = name.into();
                old
            }
            None => {
                self.nodes.insert(
                    uid,
                    Node {
                        resource: Some(resource),
                        flags,
                        namespace,
                        name: name.into(),
                        owners: owners.clone().into(),
                        dependents: Vec::new(),
                    },
                );
                Box::default()
            }
        };
        for gone in old_owners
            .iter()
            .filter(|o| !owners.iter().any(|n| n.uid == o.uid))
        {
            self.unlink(gone.uid, uid, &mut work);
        }
        for added in owners
            .iter()
            .filter(|o| !old_owners.iter().any(|n| n.uid == o.uid))
        {
            let owner = self.nodes.entry(added.uid).or_insert_with(|| Node {
                resource: None,
                flags: Flags::VIRTUAL,
                namespace: None,
                name: Box::default(),
                owners: Box::default(),
                dependents: Vec::new(),
            });
            owner.dependents.push(uid);
            if owner.waiting_for_dependents() {
                work.push(Work::SyncOwner(added.uid));
            }
        }
        if flags.contains(Flags::ARMED | Flags::DELETING) {
            work.push(Work::SyncOwner(uid));
        } else if flags.contains(Flags::OPTED_IN)
            && !flags.contains(Flags::ARMED)
            && !flags.contains(Flags::DELETING)
        {
            work.push(Work::Arm(uid));
        }
        work
    }

    /// An object is gone. It stays as a virtual node while dependents still name it.
    pub fn delete(&mut self, uid: Uid) -> Vec<Work> {
        let mut work = Vec::new();
        let Some(node) = self.nodes.get_mut(&uid) else {
            return work;
        };
        let owners = std::mem::take(&mut node.owners);
        if node.dependents.is_empty() {
            self.nodes.remove(&uid);
        } else {
            node.flags = Flags::VIRTUAL;
            node.resource = None;
        }
        for owner in owners.iter() {
            self.unlink(owner.uid, uid, &mut work);
        }
        work
    }

    /// A relist of `resource` is complete: objects of it that were not listed are gone.
    pub fn reset(&mut self, resource: ResourceId, listed: &HashSet<Uid>) -> Vec<Work> {
        let missed: Vec<Uid> = self
            .nodes
            .iter()
            .filter(|(uid, n)| n.resource == Some(resource) && !listed.contains(uid))
            .map(|(uid, _)| *uid)
            .collect();
        missed
            .into_iter()
            .flat_map(|uid| self.delete(uid))
            .collect()
    }

    /// Removes `dependent` from `owner`'s dependents; a virtual owner left without dependents
    /// goes, a waiting one gets another look.
    fn unlink(&mut self, owner: Uid, dependent: Uid, work: &mut Vec<Work>) {
        let Some(node) = self.nodes.get_mut(&owner) else {
            return;
        };
        node.dependents.retain(|d| *d != dependent);
        if node.is(Flags::VIRTUAL) && node.dependents.is_empty() {
            self.nodes.remove(&owner);
        } else if node.waiting_for_dependents() {
            work.push(Work::SyncOwner(owner));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CM: ResourceId = ResourceId(0);

    fn uid(n: u128) -> Uid {
        Uid::from_u128(n)
    }

    fn object(n: u128, owners: &[u128], flags: Flags) -> Observed {
        Observed {
            uid: uid(n),
            namespace: Some("ns".into()),
            name: format!("o{n}"),
            owners: owners
                .iter()
                .map(|o| OwnerLink {
                    uid: uid(*o),
                    block_owner_deletion: true,
                })
                .collect(),
            flags,
        }
    }

    const WAITING: Flags = Flags(Flags::ARMED.0 | Flags::DELETING.0);

    #[test]
    fn owners_referenced_before_they_are_seen_are_virtual_until_then() {
        let mut g = Graph::new();
        g.apply(CM, object(2, &[1], Flags::empty()));
        assert!(g.node(uid(1)).unwrap().is(Flags::VIRTUAL));
        assert_eq!(g.counts(), (1, 1));
        g.apply(CM, object(1, &[], Flags::empty()));
        assert!(!g.node(uid(1)).unwrap().is(Flags::VIRTUAL));
        assert_eq!(g.dependents(uid(1)), [uid(2)]);
        assert_eq!(g.counts(), (2, 0));
    }

    #[test]
    fn a_waiting_owner_gets_another_look_when_a_dependent_goes_or_drops_it() {
        let mut g = Graph::new();
        g.apply(CM, object(1, &[], Flags::ARMED));
        g.apply(CM, object(2, &[1], Flags::empty()));
        g.apply(CM, object(3, &[1], Flags::empty()));
        assert_eq!(
            g.apply(CM, object(1, &[], WAITING)),
            [Work::SyncOwner(uid(1))]
        );
        assert_eq!(g.delete(uid(2)), [Work::SyncOwner(uid(1))]);
        assert_eq!(
            g.apply(CM, object(3, &[], Flags::empty())),
            [Work::SyncOwner(uid(1))]
        );
        assert!(g.dependents(uid(1)).is_empty());
        // A new dependent of a waiting owner is looked at too.
        assert_eq!(
            g.apply(CM, object(4, &[1], Flags::empty())),
            [Work::SyncOwner(uid(1))]
        );
    }

    #[test]
    fn deleted_owners_stay_virtual_while_dependents_name_them() {
        let mut g = Graph::new();
        g.apply(CM, object(1, &[], Flags::empty()));
        g.apply(CM, object(2, &[1], Flags::empty()));
        g.delete(uid(1));
        assert!(g.node(uid(1)).unwrap().is(Flags::VIRTUAL));
        g.delete(uid(2));
        assert!(g.node(uid(1)).is_none());
        assert_eq!(g.counts(), (0, 0));
    }

    #[test]
    fn opted_in_objects_without_the_finalizer_are_armed() {
        let mut g = Graph::new();
        assert_eq!(
            g.apply(CM, object(1, &[], Flags::OPTED_IN)),
            [Work::Arm(uid(1))]
        );
        assert!(
            g.apply(CM, object(1, &[], Flags::OPTED_IN | Flags::ARMED))
                .is_empty()
        );
        assert!(
            g.apply(CM, object(2, &[], Flags::OPTED_IN | Flags::DELETING))
                .is_empty()
        );
    }

    #[test]
    fn a_relist_removes_what_was_missed() {
        let mut g = Graph::new();
        g.apply(CM, object(1, &[], WAITING));
        g.apply(CM, object(2, &[1], Flags::empty()));
        g.apply(ResourceId(1), object(3, &[], Flags::empty()));
        let work = g.reset(CM, &HashSet::from([uid(1)]));
        assert_eq!(work, [Work::SyncOwner(uid(1))]);
        assert!(g.node(uid(2)).is_none());
        assert!(g.node(uid(3)).is_some(), "other resources are left alone");
    }

    #[test]
    fn transitive_dependents_count_each_once_and_end_on_cycles() {
        let mut g = Graph::new();
        g.apply(CM, object(1, &[3], Flags::empty()));
        g.apply(CM, object(2, &[1], Flags::empty()));
        g.apply(CM, object(3, &[2], Flags::empty()));
        g.apply(CM, object(4, &[1, 2], Flags::empty()));
        assert_eq!(g.transitive_dependents(uid(1)), 3);
        assert_eq!(g.transitive_dependents(uid(4)), 0);
    }

    #[test]
    fn namespaces_are_interned() {
        let mut g = Graph::new();
        g.apply(CM, object(1, &[], Flags::empty()));
        g.apply(CM, object(2, &[], Flags::empty()));
        let a = g.node(uid(1)).unwrap().namespace.clone().unwrap();
        let b = g.node(uid(2)).unwrap().namespace.clone().unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
