//! What the graph keeps of one object: its node (flags, coordinates, owners, dependents), the
//! ownerReferences as links, what a watch observed of it, and its deletion-order wave.

use std::hash::{Hash, Hasher};
use std::num::NonZeroU16;
use std::ops::Deref;
use std::sync::Arc;

use super::{FinalizerPlaces, Flags, Guards, Mode, Uid};

/// An index into the table of watched resources (see `gc::discovery`). Two bytes, and two
/// as an `Option` too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId(NonZeroU16);

impl ResourceId {
    /// The resource at `index`, below `u16::MAX`: the table holds at most 65,535 resources.
    pub const fn new(index: u16) -> Self {
        match NonZeroU16::new(index.saturating_add(1)) {
            Some(id) => Self(id),
            None => unreachable!(),
        }
    }

    pub const fn index(self) -> usize {
        self.0.get() as usize - 1
    }
}

/// A digest of an object's identity besides its uid — API group, kind and name — so that an
/// ownerReference can be checked against the object the graph knows under its uid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Coordinates(u32);

impl Coordinates {
    /// `api_version` is `group/version`, or `version` for the core group.
    pub fn of(api_version: &str, kind: &str, name: &str) -> Self {
        Self::in_group(
            api_version.rsplit_once('/').map_or("", |(g, _)| g),
            kind,
            name,
        )
    }

    /// The coordinates of `kind` `name` in API group `group`.
    pub fn in_group(group: &str, kind: &str, name: &str) -> Self {
        let mut hasher = std::hash::DefaultHasher::new();
        (group, kind, name).hash(&mut hasher);
        Self(hasher.finish() as u32)
    }
}

/// One ownerReference, as the graph keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerLink {
    pub uid: Uid,
    pub coordinates: Coordinates,
    pub block_owner_deletion: bool,
    /// The apiserver serves the kind the reference names (when the object was observed): an
    /// owner of a kind not served, which the graph never sees, is never taken for absent.
    pub served: bool,
}

impl OwnerLink {
    /// Whether the dependent holding this reference keeps an owner from losing `finalizer`
    /// ([`Flags::ARMED`]: every dependent; [`Flags::FOREGROUND`]: those with
    /// `blockOwnerDeletion`).
    pub fn blocks(&self, finalizer: Flags) -> bool {
        finalizer == Flags::ARMED || (finalizer == Flags::FOREGROUND && self.block_owner_deletion)
    }
}

/// What the graph needs of an object, read from its metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub uid: Uid,
    pub coordinates: Coordinates,
    pub namespace: Option<String>,
    pub name: String,
    /// `metadata.resourceVersion` when it is a number (it is for etcd-backed resources), else 0.
    pub resource_version: u64,
    pub owners: Vec<OwnerLink>,
    pub flags: Flags,
    pub places: FinalizerPlaces,
    /// Its place in its waiting owners' deletion order.
    pub order: Order,
    /// `metadata.deletionTimestamp`, in seconds since the epoch.
    pub deleted_at: Option<i64>,
    /// Its part in the webhook's guards.
    pub guards: Guards,
}

#[cfg(test)]
impl Observed {
    /// For tests: the ConfigMap `o{n}` (uid `n`) in namespace `ns`, with blocking references
    /// to the ConfigMaps `owners`, and `flags` (with a `deletionTimestamp` when deleting).
    pub fn config_map(n: u128, owners: &[u128], flags: Flags) -> Self {
        let link = |o: u128| OwnerLink {
            uid: Uid::from_u128(o),
            coordinates: Coordinates::of("v1", "ConfigMap", &format!("o{o}")),
            block_owner_deletion: true,
            served: true,
        };
        Self {
            uid: Uid::from_u128(n),
            coordinates: Coordinates::of("v1", "ConfigMap", &format!("o{n}")),
            namespace: Some("ns".into()),
            name: format!("o{n}"),
            resource_version: 1,
            owners: owners.iter().map(|o| link(*o)).collect(),
            deleted_at: flags.contains(Flags::DELETING).then_some(1_000),
            flags,
            places: FinalizerPlaces::default(),
            order: Order::default(),
            guards: Guards::default(),
        }
    }
}

/// A dependent's wave in its waiting owners' deletion order (`syncgc.io/deletion-order`):
/// the highest wave is deleted first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Wave(pub i32);

impl Wave {
    /// Whether a dependent in this wave may be deleted for an owner whose dependents still in
    /// the graph (this one among them, and those being deleted) are in `waves`: no higher wave
    /// is left. Objects without the annotation are all in wave 0, so an owner without an order
    /// deletes every dependent at once.
    pub fn is_highest_of(self, waves: impl IntoIterator<Item = Wave>) -> bool {
        waves.into_iter().all(|other| other <= self)
    }
}

/// What `syncgc.io/deletion-order` says of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Order {
    /// Its wave (wave 0 without the annotation).
    Wave(Wave),
    /// A value that is not an integer (kept to be warned about): wave 0.
    Invalid(Box<str>),
}

impl Default for Order {
    fn default() -> Self {
        Self::Wave(Wave::default())
    }
}

impl Order {
    /// What `syncgc.io/deletion-order: value` says: wave 0 without it; an invalid order (to be
    /// warned about, and taken for wave 0) for a value that is not an integer.
    pub fn of(value: Option<&str>) -> Self {
        match value {
            None => Self::default(),
            Some(value) => value
                .trim()
                .parse()
                .map_or_else(|_| Self::Invalid(value.into()), |n| Self::Wave(Wave(n))),
        }
    }

    pub fn wave(&self) -> Wave {
        match self {
            Self::Wave(wave) => *wave,
            Self::Invalid(_) => Wave::default(),
        }
    }
}

/// A node: one object (or a virtual stand-in for an owner not seen). 72 bytes: most objects
/// have one owner or none, and no dependents, and the layout is made for them.
#[derive(Debug, Clone)]
pub struct Node {
    pub resource: Option<ResourceId>,
    pub flags: Flags,
    pub places: FinalizerPlaces,
    pub coordinates: Coordinates,
    pub resource_version: u64,
    /// Interned: one allocation per namespace, a thin pointer per node.
    pub(super) namespace: Option<Arc<String>>,
    pub name: Box<str>,
    pub owners: Owners,
    pub dependents: Dependents,
}

/// An object's ownerReferences, the first one inline.
#[derive(Debug, Clone, Default)]
pub enum Owners {
    #[default]
    None,
    One(OwnerLink),
    Many(Box<[OwnerLink]>),
}

impl Deref for Owners {
    type Target = [OwnerLink];

    fn deref(&self) -> &[OwnerLink] {
        match self {
            Self::None => &[],
            Self::One(link) => std::slice::from_ref(link),
            Self::Many(links) => links,
        }
    }
}

impl From<Vec<OwnerLink>> for Owners {
    fn from(links: Vec<OwnerLink>) -> Self {
        match links[..] {
            [] => Self::None,
            [link] => Self::One(link),
            _ => Self::Many(links.into()),
        }
    }
}

/// The uids of the objects that name a node as an owner: nothing but a null pointer for the
/// many objects that own nothing.
#[derive(Debug, Clone, Default)]
#[expect(
    clippy::box_collection,
    reason = "8 bytes in every node instead of 24; the box exists only for owners"
)]
pub struct Dependents(pub(super) Option<Box<Vec<Uid>>>);

impl Deref for Dependents {
    type Target = [Uid];

    fn deref(&self) -> &[Uid] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl Dependents {
    /// Adds `uid`, growing the list by a quarter rather than doubling it: most owners keep a
    /// handful of dependents for a long time, and a doubled list is up to half empty.
    pub(super) fn push(&mut self, uid: Uid) {
        let list = self.0.get_or_insert_default();
        if list.len() == list.capacity() {
            list.reserve_exact((list.len() / 4).max(1));
        }
        list.push(uid);
    }

    pub(super) fn remove(&mut self, uid: Uid) {
        if let Some(list) = &mut self.0 {
            list.retain(|d| *d != uid);
            if list.is_empty() {
                self.0 = None;
            }
        }
    }
}

impl Node {
    pub fn is(&self, flag: Flags) -> bool {
        self.flags.contains(flag)
    }

    pub(super) fn boxed_virtual_owner() -> Box<Self> {
        Box::new(Self {
            resource: None,
            flags: Flags::VIRTUAL,
            places: FinalizerPlaces::default(),
            coordinates: Coordinates::default(),
            resource_version: 0,
            namespace: None,
            name: Box::default(),
            owners: Owners::None,
            dependents: Dependents::default(),
        })
    }

    /// The namespace, `None` for a cluster-scoped object.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref().map(String::as_str)
    }

    /// An armed object whose deletion has started: syncgc holds it until its dependents go.
    pub fn waiting_synchronously(&self) -> bool {
        self.is(Flags::ARMED) && self.is(Flags::DELETING) && !self.is(Flags::VIRTUAL)
    }

    /// An object in foreground deletion: it goes once its blocking dependents are gone.
    pub fn waiting_in_foreground(&self) -> bool {
        self.is(Flags::FOREGROUND) && self.is(Flags::DELETING) && !self.is(Flags::VIRTUAL)
    }

    /// Waits for its dependents in `mode`: synchronously, or in foreground deletion when
    /// syncgc carries that out (standalone).
    pub(super) fn waits_in(&self, mode: Mode) -> bool {
        self.waiting_synchronously() || (mode == Mode::Standalone && self.waiting_in_foreground())
    }

    /// Waits for its dependents: synchronously or in foreground deletion.
    pub fn waits_for_dependents(&self) -> bool {
        self.waiting_synchronously() || self.waiting_in_foreground()
    }

    /// Seen by a watch: observed now, or seen deleted.
    pub fn seen(&self) -> bool {
        !self.is(Flags::VIRTUAL) || self.is(Flags::GONE)
    }

    /// Whether a reference from an object in `namespace` can reach this node: it is
    /// cluster-scoped, or in the same namespace.
    pub fn in_reach_of(&self, namespace: Option<&str>) -> bool {
        self.namespace.is_none() || self.namespace() == namespace
    }

    /// Whether a reference naming `coordinates` (group, kind, name), from a dependent in the
    /// namespace `from`, really refers to this node: it names this object, and a namespaced
    /// owner is in the dependent's namespace. The rule of [`Node::is_owner_through`] and of
    /// `decide::owner_in_graph`; the workers' live reads and the release barrier check the
    /// same two conditions apart, to say which one failed.
    pub fn is_named_by(&self, coordinates: Coordinates, from: Option<&str>) -> bool {
        self.coordinates == coordinates && self.in_reach_of(from)
    }

    /// Whether `dependent`, through `link`, really refers to this node ([`Node::is_named_by`]).
    /// References to owners never seen are taken as they are.
    pub fn is_owner_through(&self, dependent: &Node, link: &OwnerLink) -> bool {
        !self.seen() || self.is_named_by(link.coordinates, dependent.namespace())
    }
}

/// The reference of `dependent` to `owner` (uid `uid`) when it really reaches it.
pub(super) fn reaching(owner: &Node, uid: Uid, dependent: &Node) -> Option<OwnerLink> {
    let link = *dependent.owners.iter().find(|l| l.uid == uid)?;
    owner.is_owner_through(dependent, &link).then_some(link)
}
