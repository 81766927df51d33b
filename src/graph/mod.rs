//! The ownership graph: every watched object as a node keyed by uid, with its owners and
//! dependents, fed by the watches through [`Graph::apply`], [`Graph::delete`], [`Graph::reset`]
//! and [`Graph::unserve`], each of which says which objects need another look.
//!
//! One task writes the graph; everyone else reads. Nothing here does I/O.
//!
//! - [`uid`]: object uids as 128-bit numbers; [`index`]: the nodes by uid, in shards that
//!   grow one at a time.
//! - [`flags`]: the bits of an object's state the graph keeps, and where its finalizers stand.
//! - [`guards`]: what an object says to the guards (protected, a finalizer handler, the
//!   finalizers of others it carries).
//! - [`node`]: what the graph keeps of one object (its node, its references as links, what a
//!   watch observed of it, its deletion-order wave).
//! - [`shared`]: the graph shared between its one writer and its readers.
//! - [`below`]: the objects below one, walked once for everyone who asks.

mod below;
mod flags;
mod guards;
mod index;
mod node;
mod shared;
mod uid;

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

pub use below::Below;
pub use flags::{FinalizerPlaces, Flags};
pub use guards::{Guards, Handles, protects};
use node::reaching;
pub use node::{
    Coordinates, Dependents, Node, Observed, Order, OwnerLink, Owners, ResourceId, Wave,
};
pub use shared::{Reader, Writer};
pub use uid::{Uid, UidHash};

/// Which deletions syncgc carries out.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Beside the cluster's own garbage collector: syncgc handles its finalizer and the
    /// dependents of the owners that carry it; kube-controller-manager does the rest.
    #[default]
    Cooperative,
    /// The whole garbage collector: background, `foregroundDeletion` and `orphan` too, for
    /// control planes that run without kube-controller-manager's.
    Standalone,
}

impl Mode {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Cooperative => "cooperative",
            Self::Standalone => "standalone",
        }
    }
}

/// Something a worker should look at again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Work {
    /// An owner being deleted that waits for its dependents (armed, or in foreground deletion
    /// in standalone mode): delete them, and release it when they are gone.
    SyncOwner(Uid),
    /// A dependent whose owners may all be gone or waiting: delete it, or drop its references.
    AttemptToDelete(Uid),
    /// An owner being deleted with `orphan` (standalone mode): drop its dependents'
    /// references to it, then the finalizer.
    Orphan(Uid),
    /// An opted-in object that does not carry the finalizer: arm it.
    Arm(Uid),
}

impl Work {
    /// The object the item is about.
    pub fn uid(self) -> Uid {
        match self {
            Self::SyncOwner(uid)
            | Self::AttemptToDelete(uid)
            | Self::Orphan(uid)
            | Self::Arm(uid) => uid,
        }
    }

    /// The item's name in logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::SyncOwner(_) => "sync_owner",
            Self::AttemptToDelete(_) => "attempt_to_delete",
            Self::Orphan(_) => "orphan",
            Self::Arm(_) => "arm",
        }
    }
}

/// One object of a [`Graph::walk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub uid: Uid,
    /// The owner it was reached from.
    pub owner: Uid,
    /// How far below the walk's start: 1 for a direct dependent.
    pub depth: usize,
}

/// The graph. `S` hashes its maps keyed by uid: the process's keyed [`UidHash`], always; a
/// parameter only so that the graph benchmark can measure the same graph with another hasher
/// as its baseline.
#[derive(Debug)]
pub struct Graph<S = UidHash> {
    mode: Mode,
    /// Each node boxed: the index's empty slots (up to half of them right after it grows)
    /// then cost a pointer each, not a whole node, so memory per object stays the same from
    /// thousands of objects to millions.
    nodes: index::Nodes<S>,
    namespaces: HashSet<Arc<String>>,
    /// When each observed object being deleted got its deletionTimestamp (seconds since the
    /// epoch); only those, so nodes stay small.
    deleted_at: HashMap<Uid, i64, S>,
    /// The order of each observed object not in wave 0 or with an invalid order; only those,
    /// so nodes stay small.
    orders: HashMap<Uid, Order, S>,
    /// What each observed object that says something to the guards says; only those.
    guards: HashMap<Uid, Guards, S>,
    /// The protected objects and the finalizer handlers among them, for the question every
    /// DELETE asks first: is there any?
    protected: HashSet<Uid, S>,
    handlers: HashSet<Uid, S>,
    /// The uid of each Namespace observed, by name.
    namespace_objects: HashMap<Box<str>, Uid>,
}

impl<S: BuildHasher + Default + Clone> Default for Graph<S> {
    fn default() -> Self {
        Self {
            mode: Mode::default(),
            nodes: index::Nodes::default(),
            namespaces: HashSet::default(),
            deleted_at: HashMap::default(),
            orders: HashMap::default(),
            guards: HashMap::default(),
            protected: HashSet::default(),
            handlers: HashSet::default(),
            namespace_objects: HashMap::default(),
        }
    }
}

impl Graph {
    pub fn new(mode: Mode) -> Self {
        Self::hashed_with(mode)
    }
}

impl<S: BuildHasher + Default + Clone> Graph<S> {
    /// An empty graph whose uid maps hash with `S` (the benchmark's baseline).
    pub fn hashed_with(mode: Mode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn node(&self, uid: Uid) -> Option<&Node> {
        self.nodes.get(&uid)
    }

    /// The uids of the objects that name `uid` as an owner.
    pub fn dependents(&self, uid: Uid) -> &[Uid] {
        self.nodes.get(&uid).map_or(&[], |n| &n.dependents)
    }

    /// The wave of the observed object `uid` in its waiting owners' deletion order.
    pub fn wave(&self, uid: Uid) -> Wave {
        self.orders.get(&uid).map(Order::wave).unwrap_or_default()
    }

    /// The value of `syncgc.io/deletion-order` on `uid` when it is not an integer.
    pub fn invalid_order(&self, uid: Uid) -> Option<&str> {
        match self.orders.get(&uid)? {
            Order::Invalid(value) => Some(value),
            Order::Wave(_) => None,
        }
    }

    /// The owners of `uid` that wait for their dependents (see [`Node::waits_for_dependents`]).
    pub fn waiting_owners_of(&self, uid: Uid) -> impl Iterator<Item = Uid> + '_ {
        self.nodes
            .get(&uid)
            .into_iter()
            .flat_map(|n| n.owners.iter())
            .filter(|link| self.node(link.uid).is_some_and(Node::waits_for_dependents))
            .map(|link| link.uid)
    }

    /// Whether a dependent in `wave` may be deleted for the owner `owner` (see
    /// [`Wave::is_highest_of`]).
    pub fn wave_reached(&self, owner: Uid, wave: Wave) -> bool {
        self.orders.is_empty()
            || wave.is_highest_of(self.valid_dependents(owner).map(|(d, ..)| self.wave(d)))
    }

    /// The dependents of `uid` whose references really reach it (see
    /// [`Node::is_owner_through`]), with their link to it.
    pub fn valid_dependents(&self, uid: Uid) -> impl Iterator<Item = (Uid, &Node, OwnerLink)> {
        let owner = self.node(uid);
        owner
            .map_or(&[][..], |n| &n.dependents)
            .iter()
            .filter_map(move |d| {
                let dependent = self.node(*d)?;
                Some((*d, dependent, reaching(owner?, uid, dependent)?))
            })
    }

    /// The reference of `dependent` to `owner` when it really reaches it (see
    /// [`Graph::valid_dependents`]).
    pub fn link(&self, owner: Uid, dependent: Uid) -> Option<OwnerLink> {
        reaching(self.node(owner)?, owner, self.node(dependent)?)
    }

    /// Whether `node` waits for its dependents in this mode.
    fn waits(&self, node: &Node) -> bool {
        node.waits_in(self.mode)
    }

    /// Whether the node `uid` exists and waits for its dependents.
    fn waits_by_uid(&self, uid: Uid) -> bool {
        self.nodes.get(&uid).is_some_and(|n| self.waits(n))
    }

    /// (observed, virtual) node counts.
    pub fn counts(&self) -> (usize, usize) {
        let virtual_nodes = self.nodes.values().filter(|n| n.is(Flags::VIRTUAL)).count();
        (self.nodes.len() - virtual_nodes, virtual_nodes)
    }

    /// `uid` and every object that names it as an owner, directly or not, each once (cycles
    /// end), `uid` first: the one walk over dependents. By uid, as Kubernetes' collector links
    /// them, whether or not a reference really reaches its owner.
    pub fn tree(&self, uid: Uid) -> impl Iterator<Item = Uid> + '_ {
        std::iter::once(uid).chain(self.walk(uid).map(|step| step.uid))
    }

    /// The objects below `uid` ([`Graph::tree`] without it), depth first, each a dependent of
    /// the one before it or of an earlier one: with the owner it was reached from and how far
    /// below `uid` it is (1 for a direct dependent). Dependents in the order they were seen.
    pub fn walk(&self, uid: Uid) -> impl Iterator<Item = Step> + '_ {
        let mut seen = HashSet::from([uid]);
        let mut stack = Vec::new();
        let mut push = move |stack: &mut Vec<Step>, owner: Uid, depth: usize| {
            for dependent in self.dependents(owner).iter().rev() {
                if seen.insert(*dependent) {
                    stack.push(Step {
                        uid: *dependent,
                        owner,
                        depth,
                    });
                }
            }
        };
        push(&mut stack, uid, 1);
        std::iter::from_fn(move || {
            let step = stack.pop()?;
            push(&mut stack, step.uid, step.depth + 1);
            Some(step)
        })
    }

    /// The number of direct and indirect dependents of `uid`.
    pub fn transitive_dependents(&self, uid: Uid) -> usize {
        self.tree(uid).count() - 1
    }

    /// The object `uid`, its owners, and its dependents, transitively (each once); empty when
    /// the graph does not know `uid`.
    pub fn neighbourhood(&self, uid: Uid) -> Vec<Uid> {
        let Some(node) = self.nodes.get(&uid) else {
            return Vec::new();
        };
        let mut seen: Vec<Uid> = vec![uid];
        for owner in node.owners.iter() {
            if !seen.contains(&owner.uid) {
                seen.push(owner.uid);
            }
        }
        let owners = seen.clone();
        seen.extend(self.tree(uid).filter(|d| !owners.contains(d)));
        seen
    }

    /// Owners waiting synchronously for their dependents, with their deletionTimestamps
    /// (seconds since the epoch) where known.
    pub fn waiting_owners(&self) -> impl Iterator<Item = (Uid, Option<i64>)> + '_ {
        self.deleted_at
            .keys()
            .filter_map(|uid| Some((*uid, self.nodes.get(uid)?)))
            .filter(|(_, n)| n.waiting_synchronously())
            .map(|(uid, _)| (uid, self.deleted_at.get(&uid).copied()))
    }

    /// What the observed object `uid` says to the guards, when it says something.
    pub fn guards(&self, uid: Uid) -> Option<&Guards> {
        self.guards.get(&uid)
    }

    /// The protected objects.
    pub fn protected(&self) -> impl ExactSizeIterator<Item = Uid> + '_ {
        self.protected.iter().copied()
    }

    /// The finalizer handlers.
    pub fn handlers(&self) -> impl ExactSizeIterator<Item = Uid> + '_ {
        self.handlers.iter().copied()
    }

    fn set_guards(&mut self, uid: Uid, guards: Guards) {
        let mark = |set: &mut HashSet<Uid, S>, on: bool| {
            if on {
                set.insert(uid);
            } else if !set.is_empty() {
                set.remove(&uid);
            }
        };
        mark(&mut self.protected, guards.protected);
        mark(&mut self.handlers, guards.handles.is_some());
        if guards.is_empty() {
            without(&mut self.guards, uid);
        } else {
            self.guards.insert(uid, guards);
        }
    }

    /// Every observed object that says something to the guards.
    pub fn guarded(&self) -> impl Iterator<Item = (Uid, &Guards)> + '_ {
        self.guards.iter().map(|(uid, guards)| (*uid, guards))
    }

    /// When the namespace `name` got its deletionTimestamp (seconds since the epoch), if it
    /// is being deleted.
    pub fn namespace_deleted_at(&self, name: &str) -> Option<i64> {
        self.deleted_at(*self.namespace_objects.get(name)?)
    }

    /// The uid of the Namespace `name`, when observed.
    pub fn namespace_uid(&self, name: &str) -> Option<Uid> {
        self.namespace_objects.get(name).copied()
    }

    /// Whether the owner `uid` is going: seen deleted, or waiting for its dependents.
    pub fn going(&self, uid: Uid) -> bool {
        self.node(uid)
            .is_some_and(|n| n.is(Flags::GONE) || n.waits_for_dependents())
    }

    /// What makes the deletion of `uid` a step of a cascade: the first owner of it that is
    /// going, else its namespace when that is being deleted.
    pub fn cause_of(&self, uid: Uid) -> Option<Uid> {
        let node = self.node(uid)?;
        node.owners
            .iter()
            .map(|l| l.uid)
            .find(|o| self.going(*o))
            .or_else(|| {
                let namespace = self.namespace_uid(node.namespace()?)?;
                self.deleted_at(namespace).map(|_| namespace)
            })
    }

    /// The observed objects in the namespace `name`: every node looked at, for the rare
    /// question (a namespace's DELETE under a cascade limit).
    pub fn in_namespace<'a>(&'a self, name: &'a str) -> impl Iterator<Item = Uid> + 'a {
        self.nodes
            .iter()
            .filter(move |(_, n)| !n.is(Flags::VIRTUAL) && n.namespace() == Some(name))
            .map(|(uid, _)| *uid)
    }

    /// The deletionTimestamp of `uid` (seconds since the epoch), if it is being deleted.
    pub fn deleted_at(&self, uid: Uid) -> Option<i64> {
        self.deleted_at.get(&uid).copied()
    }

    fn intern(&mut self, namespace: Option<String>) -> Option<Arc<String>> {
        let namespace = namespace?;
        if let Some(existing) = self.namespaces.get(&namespace) {
            return Some(existing.clone());
        }
        let interned = Arc::new(namespace);
        self.namespaces.insert(interned.clone());
        Some(interned)
    }

    /// What the graph knows of the observed object `uid`, as a watch would deliver it again:
    /// its resource and its [`Observed`] (for a change made on a copy, as a plan does).
    pub fn observed(&self, uid: Uid) -> Option<(ResourceId, Observed)> {
        let node = self.nodes.get(&uid)?;
        let resource = node.resource?;
        Some((
            resource,
            Observed {
                uid,
                coordinates: node.coordinates,
                namespace: node.namespace().map(str::to_owned),
                name: node.name.to_string(),
                resource_version: node.resource_version,
                owners: node.owners.to_vec(),
                flags: node.flags,
                places: node.places,
                order: self.orders.get(&uid).cloned().unwrap_or_default(),
                deleted_at: self.deleted_at(uid),
                guards: self.guards.get(&uid).cloned().unwrap_or_default(),
            },
        ))
    }

    /// An object was added or changed.
    pub fn apply(&mut self, resource: ResourceId, object: Observed) -> Vec<Work> {
        let Observed {
            uid,
            coordinates,
            namespace,
            name,
            resource_version,
            owners,
            flags,
            places,
            order,
            deleted_at,
            guards,
        } = object;
        self.set_guards(uid, guards);
        if namespace.is_none() && coordinates == Coordinates::in_group("", "Namespace", &name) {
            self.namespace_objects.insert(name.as_str().into(), uid);
        }
        let namespace = self.intern(namespace);
        if order == Order::default() {
            without(&mut self.orders, uid);
        } else {
            self.orders.insert(uid, order);
        }
        match deleted_at.filter(|_| flags.contains(Flags::DELETING)) {
            Some(at) => self.deleted_at.insert(uid, at),
            None => without(&mut self.deleted_at, uid),
        };
        let mut work = Vec::new();
        let node = self
            .nodes
            .get_or_insert_with(uid, Node::boxed_virtual_owner);
        let old_owners = std::mem::replace(&mut node.owners, owners.clone().into());
        node.resource = Some(resource);
        node.flags = flags;
        node.places = places;
        node.coordinates = coordinates;
        node.resource_version = resource_version;
        node.namespace = namespace;
        node.name = name.into();
        let standalone = self.mode == Mode::Standalone;
        // What is read of a node is read while at hand: each lookup hashes its uid.
        let node_waits = node.waits_in(self.mode);
        for gone in old_owners
            .iter()
            .filter(|o| !owners.iter().any(|n| n.uid == o.uid))
        {
            self.unlink(gone.uid, uid, &mut work);
        }
        for link in &owners {
            match old_owners.iter().find(|o| o.uid == link.uid) {
                None => {
                    let owner = self
                        .nodes
                        .get_or_insert_with(link.uid, Node::boxed_virtual_owner);
                    owner.dependents.push(uid);
                    let (owner_virtual, owner_waits) =
                        (owner.is(Flags::VIRTUAL), owner.waits_in(self.mode));
                    if standalone
                        && (owner_virtual
                            || !self.nodes[&link.uid].is_owner_through(&self.nodes[&uid], link))
                    {
                        // Never seen, seen deleted, or not what the reference names: verify,
                        // and collect if it is gone.
                        work.push(Work::AttemptToDelete(uid));
                    }
                    if owner_waits {
                        work.push(Work::SyncOwner(link.uid));
                    }
                    continue;
                }
                Some(old) if old.block_owner_deletion == link.block_owner_deletion => continue,
                Some(_) => {}
            }
            if self.waits_by_uid(link.uid) {
                work.push(Work::SyncOwner(link.uid));
            }
        }
        if node_waits {
            work.push(Work::SyncOwner(uid));
        }
        if standalone && flags.contains(Flags::DELETING | Flags::ORPHAN) {
            work.push(Work::Orphan(uid));
        }
        if flags.needs_arming() {
            work.push(Work::Arm(uid));
        }
        work
    }

    /// An object is gone. It stays as a virtual node while dependents still name it; in
    /// standalone mode they get another look.
    pub fn delete(&mut self, uid: Uid) -> Vec<Work> {
        self.forget(uid, Flags::GONE)
    }

    /// A relist of `resource` is complete: objects of it that were not listed are gone.
    pub fn reset(&mut self, resource: ResourceId, listed: &HashSet<Uid, UidHash>) -> Vec<Work> {
        self.of_resource(resource)
            .into_iter()
            .filter(|uid| !listed.contains(uid))
            .flat_map(|uid| self.delete(uid))
            .collect()
    }

    /// `resource` is no longer served: its objects are no longer seen, but that does not mean
    /// they are gone (an aggregated API may be down), so they become virtual, not gone.
    pub fn unserve(&mut self, resource: ResourceId) -> Vec<Work> {
        self.of_resource(resource)
            .into_iter()
            .flat_map(|uid| self.forget(uid, Flags::empty()))
            .collect()
    }

    fn of_resource(&self, resource: ResourceId) -> Vec<Uid> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.resource == Some(resource))
            .map(|(uid, _)| *uid)
            .collect()
    }

    /// Stops seeing `uid`: `Flags::GONE` when it is known to be deleted.
    fn forget(&mut self, uid: Uid, gone: Flags) -> Vec<Work> {
        let mut work = Vec::new();
        let Some(node) = self.nodes.get_mut(&uid) else {
            return work;
        };
        let owners = std::mem::take(&mut node.owners);
        without(&mut self.deleted_at, uid);
        without(&mut self.orders, uid);
        without(&mut self.guards, uid);
        for set in [&mut self.protected, &mut self.handlers] {
            if !set.is_empty() {
                set.remove(&uid);
            }
        }
        if node.namespace.is_none() && self.namespace_objects.get(&*node.name) == Some(&uid) {
            self.namespace_objects.remove(&*node.name);
        }
        if node.dependents.is_empty() {
            self.nodes.remove(&uid);
        } else {
            node.flags = Flags::VIRTUAL | gone;
            node.resource = None;
            if self.mode == Mode::Standalone && gone == Flags::GONE {
                work.extend(node.dependents.iter().map(|d| Work::AttemptToDelete(*d)));
            }
        }
        for owner in owners.iter() {
            self.unlink(owner.uid, uid, &mut work);
        }
        work
    }

    /// Removes `dependent` from `owner`'s dependents; a virtual owner left without dependents
    /// goes, a waiting one gets another look.
    fn unlink(&mut self, owner: Uid, dependent: Uid, work: &mut Vec<Work>) {
        let Some(node) = self.nodes.get_mut(&owner) else {
            return;
        };
        node.dependents.remove(dependent);
        if node.is(Flags::VIRTUAL) && node.dependents.is_empty() {
            self.nodes.remove(&owner);
        } else if node.waits_in(self.mode) {
            work.push(Work::SyncOwner(owner));
        }
    }
}

/// `map` without `uid`, and what it held. Most objects have no entry in the graph's side maps
/// (no order, no guards, not being deleted), which are often empty then: an empty map is not
/// hashed into.
fn without<V, S: BuildHasher>(map: &mut HashMap<Uid, V, S>, uid: Uid) -> Option<V> {
    if map.is_empty() {
        return None;
    }
    map.remove(&uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waves_go_from_the_highest_and_default_to_zero() {
        assert_eq!(Order::of(None), Order::Wave(Wave(0)));
        assert_eq!(Order::of(Some("3")), Order::Wave(Wave(3)));
        assert_eq!(Order::of(Some(" -2 ")), Order::Wave(Wave(-2)));
        assert_eq!(Order::of(Some("first")), Order::Invalid("first".into()));
        assert_eq!(Order::of(Some("1.5")).wave(), Wave(0));
        assert_eq!(Order::of(Some("")).wave(), Wave(0));
        let left = [Wave(0), Wave(2), Wave(2), Wave(-1)];
        assert!(Wave(2).is_highest_of(left));
        assert!(!Wave(0).is_highest_of(left));
        assert!(!Wave(-1).is_highest_of(left));
        assert!(
            Wave(0).is_highest_of([Wave(0), Wave(0)]),
            "no order: all at once"
        );
        assert!(
            Wave(-1).is_highest_of([Wave(-1)]),
            "the last wave, once the others are gone"
        );
    }

    const CM: ResourceId = ResourceId::new(0);

    fn uid(n: u128) -> Uid {
        Uid::from_u128(n)
    }

    fn link(n: u128, block_owner_deletion: bool) -> OwnerLink {
        OwnerLink {
            uid: uid(n),
            coordinates: Coordinates::of("v1", "ConfigMap", &format!("o{n}")),
            block_owner_deletion,
            served: true,
        }
    }

    fn in_namespace(ns: &str, n: u128, owners: &[u128], flags: Flags) -> Observed {
        Observed {
            namespace: Some(ns.into()),
            ..Observed::config_map(n, owners, flags)
        }
    }

    fn object(n: u128, owners: &[u128], flags: Flags) -> Observed {
        Observed::config_map(n, owners, flags)
    }

    const WAITING: Flags = Flags::ARMED.with(Flags::DELETING, true);
    const FOREGROUND: Flags = Flags::FOREGROUND.with(Flags::DELETING, true);
    const ORPHANING: Flags = Flags::ORPHAN.with(Flags::DELETING, true);

    /// The graph's invariant: each owner's dependents are exactly the objects naming it.
    fn check(g: &Graph) {
        for (uid, node) in g.nodes.iter() {
            for owner in node.owners.iter() {
                assert!(
                    g.dependents(owner.uid).contains(uid),
                    "{uid} not under its owner"
                );
            }
            for dependent in node.dependents.iter() {
                let d = g.node(*dependent).expect("dependents exist");
                assert!(d.owners.iter().any(|o| o.uid == *uid), "stale dependent");
            }
            if node.is(Flags::VIRTUAL) {
                assert!(
                    !node.dependents.is_empty(),
                    "virtual nodes without dependents go"
                );
            }
        }
    }

    #[test]
    fn owners_referenced_before_they_are_seen_are_virtual_until_then() {
        let mut g = Graph::new(Mode::Cooperative);
        g.apply(CM, object(2, &[1], Flags::empty()));
        assert!(g.node(uid(1)).unwrap().is(Flags::VIRTUAL));
        assert_eq!(g.counts(), (1, 1));
        g.apply(CM, object(1, &[], Flags::empty()));
        assert!(!g.node(uid(1)).unwrap().is(Flags::VIRTUAL));
        assert_eq!(g.dependents(uid(1)), [uid(2)]);
        assert_eq!(g.counts(), (2, 0));
        check(&g);
    }

    #[test]
    fn a_waiting_owner_gets_another_look_when_a_dependent_goes_or_drops_it() {
        let mut g = Graph::new(Mode::Cooperative);
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
        check(&g);
    }

    #[test]
    fn cooperative_mode_leaves_foreground_orphan_and_background_to_the_cluster() {
        let mut g = Graph::new(Mode::Cooperative);
        g.apply(CM, object(1, &[], Flags::empty()));
        g.apply(CM, object(2, &[1], Flags::empty()));
        assert!(g.apply(CM, object(1, &[], FOREGROUND)).is_empty());
        assert!(g.apply(CM, object(1, &[], ORPHANING)).is_empty());
        assert!(g.delete(uid(1)).is_empty());
        assert!(g.apply(CM, object(3, &[9], Flags::empty())).is_empty());
    }

    #[test]
    fn standalone_mode_collects_in_the_background() {
        let mut g = Graph::new(Mode::Standalone);
        g.apply(CM, object(1, &[], Flags::empty()));
        assert!(g.apply(CM, object(2, &[1], Flags::empty())).is_empty());
        assert!(g.apply(CM, object(3, &[1], Flags::empty())).is_empty());
        let mut work = g.delete(uid(1));
        work.sort();
        assert_eq!(
            work,
            [Work::AttemptToDelete(uid(2)), Work::AttemptToDelete(uid(3))]
        );
        assert!(g.node(uid(1)).unwrap().is(Flags::VIRTUAL | Flags::GONE));
        // An owner never seen is verified; a dependent of a gone owner is collected.
        assert_eq!(
            g.apply(CM, object(4, &[9], Flags::empty())),
            [Work::AttemptToDelete(uid(4))]
        );
        assert_eq!(
            g.apply(CM, object(5, &[1], Flags::empty())),
            [Work::AttemptToDelete(uid(5))]
        );
        check(&g);
    }

    #[test]
    fn standalone_mode_handles_foreground_and_orphan() {
        let mut g = Graph::new(Mode::Standalone);
        g.apply(CM, object(1, &[], Flags::empty()));
        g.apply(CM, object(2, &[1], Flags::empty()));
        assert_eq!(
            g.apply(CM, object(1, &[], FOREGROUND)),
            [Work::SyncOwner(uid(1))]
        );
        // Unblocking a reference to a foreground owner is a change it waits for.
        let mut unblocked = object(2, &[], Flags::empty());
        unblocked.owners = vec![link(1, false)];
        assert_eq!(g.apply(CM, unblocked), [Work::SyncOwner(uid(1))]);
        assert_eq!(g.delete(uid(2)), [Work::SyncOwner(uid(1))]);
        assert_eq!(
            g.apply(CM, object(3, &[], ORPHANING)),
            [Work::Orphan(uid(3))]
        );
        check(&g);
    }

    #[test]
    fn deleted_owners_stay_virtual_while_dependents_name_them() {
        let mut g = Graph::new(Mode::Cooperative);
        g.apply(CM, object(1, &[], Flags::empty()));
        g.apply(CM, object(2, &[1], Flags::empty()));
        g.delete(uid(1));
        assert!(g.node(uid(1)).unwrap().is(Flags::VIRTUAL));
        g.delete(uid(2));
        assert!(g.node(uid(1)).is_none());
        assert_eq!(g.counts(), (0, 0));
    }

    #[test]
    fn an_unserved_resource_is_not_taken_for_deleted() {
        let mut g = Graph::new(Mode::Standalone);
        g.apply(ResourceId::new(1), object(1, &[], Flags::empty()));
        g.apply(CM, object(2, &[1], Flags::empty()));
        assert!(g.unserve(ResourceId::new(1)).is_empty());
        let owner = g.node(uid(1)).unwrap();
        assert!(owner.is(Flags::VIRTUAL) && !owner.is(Flags::GONE));
        check(&g);
    }

    #[test]
    fn references_reach_an_owner_only_with_its_coordinates_and_from_its_namespace() {
        let mut g = Graph::new(Mode::Standalone);
        g.apply(CM, in_namespace("a", 1, &[], Flags::empty()));
        g.apply(CM, in_namespace("a", 2, &[1], Flags::empty()));
        g.apply(CM, in_namespace("b", 3, &[1], Flags::empty()));
        let mut wrong_kind = in_namespace("a", 4, &[], Flags::empty());
        wrong_kind.owners = vec![OwnerLink {
            coordinates: Coordinates::of("v1", "Secret", "o1"),
            ..link(1, true)
        }];
        g.apply(CM, wrong_kind);
        let mut other_namespace = in_namespace("b", 5, &[], Flags::empty());
        other_namespace.owners = vec![link(1, true)];
        assert_eq!(
            g.apply(CM, other_namespace),
            [Work::AttemptToDelete(uid(5))]
        );
        let valid: Vec<Uid> = g.valid_dependents(uid(1)).map(|(d, ..)| d).collect();
        assert_eq!(valid, [uid(2)]);
        assert_eq!(g.dependents(uid(1)).len(), 4);
        // Another version of the same group and kind is the same owner.
        assert_eq!(
            Coordinates::of("rbac.authorization.k8s.io/v1", "Role", "r"),
            Coordinates::of("rbac.authorization.k8s.io/v1beta1", "Role", "r")
        );
    }

    #[test]
    fn opted_in_objects_without_the_finalizer_are_armed() {
        let mut g = Graph::new(Mode::Cooperative);
        assert_eq!(
            g.apply(CM, object(1, &[], Flags::OPTED_IN)),
            [Work::Arm(uid(1))]
        );
        // Armed before the label existed: labelled.
        assert_eq!(
            g.apply(CM, object(1, &[], Flags::OPTED_IN | Flags::ARMED)),
            [Work::Arm(uid(1))]
        );
        let armed = Flags::OPTED_IN | Flags::ARMED | Flags::LABELLED;
        assert!(g.apply(CM, object(1, &[], armed)).is_empty());
        assert!(
            g.apply(CM, object(2, &[], Flags::OPTED_IN | Flags::DELETING))
                .is_empty()
        );
    }

    #[test]
    fn a_relist_removes_what_was_missed() {
        let mut g = Graph::new(Mode::Cooperative);
        g.apply(CM, object(1, &[], WAITING));
        g.apply(CM, object(2, &[1], Flags::empty()));
        g.apply(ResourceId::new(1), object(3, &[], Flags::empty()));
        let work = g.reset(CM, &[uid(1)].into_iter().collect());
        assert_eq!(work, [Work::SyncOwner(uid(1))]);
        assert!(g.node(uid(2)).is_none());
        assert!(g.node(uid(3)).is_some(), "other resources are left alone");
    }

    /// GC-26: event sequences from the upstream graph tests keep the invariant.
    #[test]
    fn the_invariant_holds_through_rewiring_and_out_of_order_events() {
        let mut g = Graph::new(Mode::Standalone);
        // Dependents before owners, a chain, then a middle owner goes.
        g.apply(CM, object(4, &[3], Flags::empty()));
        g.apply(CM, object(3, &[1, 2], Flags::empty()));
        check(&g);
        g.apply(CM, object(1, &[], Flags::empty()));
        g.apply(CM, object(2, &[], Flags::empty()));
        g.apply(CM, object(4, &[2, 1], Flags::empty()));
        check(&g);
        g.delete(uid(3));
        check(&g);
        g.delete(uid(2));
        g.apply(CM, object(4, &[], Flags::empty()));
        check(&g);
        assert_eq!(g.counts(), (2, 0));
    }

    #[test]
    fn transitive_dependents_count_each_once_and_end_on_cycles() {
        let mut g = Graph::new(Mode::Cooperative);
        g.apply(CM, object(1, &[3], Flags::empty()));
        g.apply(CM, object(2, &[1], Flags::empty()));
        g.apply(CM, object(3, &[2], Flags::empty()));
        g.apply(CM, object(4, &[1, 2], Flags::empty()));
        assert_eq!(g.transitive_dependents(uid(1)), 3);
        assert_eq!(g.transitive_dependents(uid(4)), 0);
    }

    #[test]
    fn the_walk_is_depth_first_with_each_object_once_under_the_owner_it_was_reached_from() {
        let mut g = Graph::new(Mode::Cooperative);
        g.apply(CM, object(2, &[1], Flags::empty()));
        g.apply(CM, object(3, &[2], Flags::empty()));
        g.apply(CM, object(4, &[1], Flags::empty()));
        g.apply(CM, object(5, &[3, 4], Flags::empty()));
        g.apply(CM, object(1, &[5], Flags::empty()));
        let steps: Vec<(u128, u128, usize)> = g
            .walk(uid(1))
            .map(|s| (s.uid.as_u128(), s.owner.as_u128(), s.depth))
            .collect();
        assert_eq!(steps, [(2, 1, 1), (3, 2, 2), (5, 3, 3), (4, 1, 1)]);
        let tree: Vec<u128> = g.tree(uid(1)).map(|u| u.as_u128()).collect();
        assert_eq!(tree, [1, 2, 3, 5, 4], "the cycle back to o1 ends");
    }

    #[test]
    fn the_neighbourhood_is_the_owners_and_every_dependent_below() {
        let mut g = Graph::new(Mode::Cooperative);
        g.apply(CM, object(2, &[1], Flags::empty()));
        g.apply(CM, object(3, &[2], Flags::empty()));
        g.apply(CM, object(4, &[3, 2], Flags::empty()));
        g.apply(CM, object(2, &[1, 4], Flags::empty()));
        g.apply(CM, object(5, &[], Flags::empty()));
        let mut around = g.neighbourhood(uid(2));
        around.sort();
        assert_eq!(around, [uid(1), uid(2), uid(3), uid(4)]);
        assert!(g.neighbourhood(uid(9)).is_empty());
        assert_eq!(
            (Flags::DELETING | Flags::ARMED).names(),
            ["deleting", "armed"]
        );
    }

    #[test]
    fn namespaces_are_interned() {
        let mut g = Graph::new(Mode::Cooperative);
        g.apply(CM, object(1, &[], Flags::empty()));
        g.apply(CM, object(2, &[], Flags::empty()));
        let a = g.node(uid(1)).unwrap().namespace.clone().unwrap();
        let b = g.node(uid(2)).unwrap().namespace.clone().unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn a_node_is_small_and_its_first_owner_inline() {
        assert_eq!(std::mem::size_of::<Node>(), 72);
        assert_eq!(std::mem::size_of::<Option<ResourceId>>(), 2);
        let one: Owners = vec![link(1, true)].into();
        assert!(matches!(one, Owners::One(_)));
        assert_eq!(&*one, [link(1, true)]);
        let two: Owners = vec![link(1, true), link(2, false)].into();
        assert_eq!(two.len(), 2);
        assert!(Owners::from(Vec::new()).is_empty());
        assert_eq!(ResourceId::new(7).index(), 7);
    }

    #[test]
    fn a_dependents_list_frees_itself_when_empty() {
        let mut dependents = Dependents::default();
        dependents.push(uid(1));
        dependents.push(uid(2));
        dependents.remove(uid(1));
        assert_eq!(&*dependents, [uid(2)]);
        dependents.remove(uid(2));
        assert!(dependents.0.is_none());
    }
}
