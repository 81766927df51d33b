//! The report of `syncgc explain KIND/NAME`, pure: the object, its finalizers and who
//! removes each, the tree of dependents still present with what blocks (the graph's one walk,
//! [`Graph::walk`]), the waves of its deletion order (the graph's).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::gc::order;
use crate::graph::{Flags, Graph, Order, OwnerLink, ResourceId, Uid, Wave};
use crate::names::{
    DEADLINE_ANNOTATION, DELETION_ORDER_ANNOTATION, FOREGROUND_FINALIZER, SYNCHRONOUS_FINALIZER,
};
use crate::report::Remover;

/// An object as the report shows it.
#[derive(Debug, Clone)]
pub struct Explained {
    /// Its API group ("" for the core group).
    pub group: String,
    pub kind: String,
    pub meta: ObjectMeta,
}

impl Explained {
    pub(super) fn title(&self) -> String {
        let name = self.meta.name.as_deref().unwrap_or_default();
        crate::api::described(&self.kind, self.meta.namespace.as_deref(), name)
    }

    pub(super) fn finalizers(&self) -> &[String] {
        self.meta.finalizers.as_deref().unwrap_or_default()
    }

    /// Its uid, as the graph keys it.
    pub(super) fn uid(&self) -> Uid {
        Uid::parse(self.meta.uid.as_deref().unwrap_or_default())
    }

    /// Being deleted, and kept by finalizers.
    pub(super) fn blocked(&self) -> bool {
        self.meta.deletion_timestamp.is_some() && !self.finalizers().is_empty()
    }

    fn has(&self, finalizer: &str) -> bool {
        self.finalizers().iter().any(|f| f == finalizer)
    }
}

/// The objects of a scope as the report reads them: their graph, and each object by uid.
pub struct InScope<'a> {
    pub graph: &'a Graph,
    pub objects: &'a HashMap<Uid, (ResourceId, Explained)>,
}

impl InScope<'_> {
    fn object(&self, uid: Uid) -> Option<&Explained> {
        self.objects.get(&uid).map(|(_, o)| o)
    }
}

/// The report on `object`, whose dependents are in `scope` and for which syncgc's release
/// barrier last said `barrier` (the note of its latest `SyncGCBarrier` Event); and whether
/// something keeps it from going (it is being deleted and still has finalizers).
pub fn report(object: &Explained, scope: &InScope, barrier: Option<&str>) -> (String, bool) {
    let mut out = String::new();
    let uid = object.meta.uid.clone().unwrap_or_default();
    let _ = writeln!(out, "{}  (uid {uid})", object.title());
    let deleting = object.meta.deletion_timestamp.as_ref();
    match deleting {
        Some(at) => {
            let _ = writeln!(out, "  being deleted since {}", at.0);
        }
        None => {
            let _ = writeln!(out, "  not being deleted");
        }
    }
    if let Some(deadline) = object
        .meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEADLINE_ANNOTATION))
    {
        let _ = writeln!(out, "  syncgc releases it at the latest at {deadline}");
    }
    if object.finalizers().is_empty() {
        let _ = writeln!(out, "  no finalizers");
    } else {
        let _ = writeln!(out, "  finalizers:");
        for finalizer in object.finalizers() {
            let _ = writeln!(
                out,
                "    {finalizer}: removed by {}",
                Remover::of(finalizer)
            );
        }
    }
    let tree = tree(object, scope);
    let blocking = blocking(&tree);
    if tree.is_empty() {
        let _ = writeln!(out, "  no dependents");
    } else {
        let _ = writeln!(out, "  dependents ({} blocking):", blocking);
        for entry in &tree {
            let _ = writeln!(out, "{}", entry.line());
        }
    }
    let blocked = object.blocked();
    let waits = object.has(SYNCHRONOUS_FINALIZER) || object.has(FOREGROUND_FINALIZER);
    let direct = direct(object, scope);
    if waits && let Some(order) = waves(object, &direct, scope) {
        out.push_str(&order);
    }
    if let Some(note) = barrier.filter(|_| blocked && waits && blocking == 0) {
        let _ = writeln!(
            out,
            "  held only by syncgc's release barrier, which confirms with a fresh read that nothing refers to it any more; it last said: {note}"
        );
    }
    if blocked {
        let _ = writeln!(out, "blocked: it stays until its finalizers are removed");
    }
    (out, blocked)
}

/// The dependents below `object` in `scope`, depth first, down to `MAX_LEVEL`; below a
/// reference that does not reach its owner (no dependency), nothing.
pub fn tree(object: &Explained, scope: &InScope) -> Vec<TreeEntry> {
    let root = Uid::parse(object.meta.uid.as_deref().unwrap_or_default());
    let mut outside = HashSet::new();
    let mut entries = Vec::new();
    for step in scope.graph.walk(root) {
        let owner = if step.owner == root {
            Some(object)
        } else {
            scope.object(step.owner)
        };
        let (Some(owner), Some(dependent)) = (owner, scope.object(step.uid)) else {
            continue;
        };
        if step.depth > MAX_LEVEL || outside.contains(&step.owner) {
            outside.insert(step.uid);
            continue;
        }
        let link = link(owner, dependent, scope);
        if link.is_none() {
            outside.insert(step.uid);
        }
        entries.push(entry(owner, dependent, link, step.depth));
    }
    entries
}

/// How many of the direct dependents in `tree` block their owner.
pub(super) fn blocking(tree: &[TreeEntry]) -> usize {
    tree.iter()
        .filter(|e| e.level == 1 && !e.blocks.is_empty())
        .count()
}

/// The reference of `dependent` to `owner`, when it really refers to it as the collector sees
/// it ([`Graph::link`]): one with the owner's uid that names another object, or a namespaced
/// owner from elsewhere, is no dependency.
fn link(owner: &Explained, dependent: &Explained, scope: &InScope) -> Option<OwnerLink> {
    scope.graph.link(owner.uid(), dependent.uid())
}

/// A dependent in the tree below an object.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TreeEntry {
    /// How far below the object: 1 for its direct dependents.
    pub level: usize,
    pub object: String,
    pub uid: String,
    pub deleting: bool,
    /// `false` for an object with a reference to the owner's uid that does not reach it.
    pub dependency: bool,
    /// Why it blocks its owner; empty when it does not.
    pub blocks: Vec<String>,
}

impl TreeEntry {
    fn line(&self) -> String {
        let state = if self.deleting {
            " (being deleted)"
        } else {
            ""
        };
        let marks = if !self.dependency {
            "  (refers to the owner's uid, but not to it: another name, kind or group, or \
             another namespace; not a dependent)"
                .to_owned()
        } else if self.blocks.is_empty() {
            String::new()
        } else {
            format!("  BLOCKS: {}", self.blocks.join("; "))
        };
        let indent = 2 + 2 * self.level;
        format!("{:indent$}{}{state}{marks}", "", self.object)
    }
}

/// The entry of `dependent`, `level` below the object, whose reference to `owner` is `link`
/// (none: it does not reach it).
fn entry(
    owner: &Explained,
    dependent: &Explained,
    link: Option<OwnerLink>,
    level: usize,
) -> TreeEntry {
    let mut why = Vec::new();
    let blocks = |finalizer: &str| {
        owner.has(finalizer) && link.is_some_and(|l| l.blocks(Flags::of_finalizer(finalizer)))
    };
    if blocks(SYNCHRONOUS_FINALIZER) {
        why.push("the owner waits for every dependent".to_owned());
    } else if blocks(FOREGROUND_FINALIZER) {
        why.push("blockOwnerDeletion".to_owned());
    }
    if !why.is_empty() {
        if dependent.has(SYNCHRONOUS_FINALIZER) {
            why.push("armed: it waits for its own dependents".to_owned());
        }
        let others: Vec<&str> = dependent
            .finalizers()
            .iter()
            .map(String::as_str)
            .filter(|f| *f != SYNCHRONOUS_FINALIZER)
            .collect();
        if !others.is_empty() {
            why.push(format!("its finalizers: {}", others.join(", ")));
        }
    }
    TreeEntry {
        level,
        object: dependent.title(),
        uid: dependent.meta.uid.clone().unwrap_or_default(),
        deleting: dependent.meta.deletion_timestamp.is_some(),
        dependency: link.is_some(),
        blocks: why,
    }
}

/// How deep the tree goes.
const MAX_LEVEL: usize = 16;

/// The direct dependents of `object` that really refer to it (see [`link`]).
pub(super) fn direct(object: &Explained, scope: &InScope) -> Vec<Explained> {
    let uid = Uid::parse(object.meta.uid.as_deref().unwrap_or_default());
    scope
        .graph
        .dependents(uid)
        .iter()
        .filter_map(|d| scope.object(*d))
        .filter(|d| link(object, d, scope).is_some())
        .cloned()
        .collect()
}

impl InScope<'_> {
    /// The deletion-order wave `o` is in, as the collector's graph has it.
    fn order(&self, o: &Explained) -> Order {
        let uid = Uid::parse(o.meta.uid.as_deref().unwrap_or_default());
        match self.graph.invalid_order(uid) {
            Some(value) => Order::Invalid(value.into()),
            None => Order::Wave(self.graph.wave(uid)),
        }
    }
}

/// The waves of `object`'s dependents with how many objects each holds, the one in progress
/// (the highest) first ([`order::wave_counts`]); `None` when none carries an order.
pub(super) fn wave_counts(object: &Explained, scope: &InScope) -> Option<Vec<(Wave, usize)>> {
    order::wave_counts(scope.graph, object.uid())
}

/// The deletion order of a waiting owner's `direct` dependents, when they carry one: the
/// waves left, the one in progress (the highest), and what holds each of its objects.
fn waves(object: &Explained, direct: &[Explained], scope: &InScope) -> Option<String> {
    let counts = wave_counts(object, scope)?;
    let (current, count) = counts[0];
    let mut out = format!(
        "  deletion order: wave {} in progress ({count} object(s) left)",
        current.0
    );
    if counts.len() > 1 {
        let later: Vec<String> = counts[1..]
            .iter()
            .map(|(w, n)| format!("{} ({n})", w.0))
            .collect();
        let _ = write!(out, ", then wave(s) {}", later.join(", "));
    }
    out.push('\n');
    for dependent in direct.iter().filter(|o| scope.order(o).wave() == current) {
        let mut why = Vec::new();
        if dependent.meta.deletion_timestamp.is_none() {
            why.push("not yet deleted".to_owned());
        }
        if !dependent.finalizers().is_empty() {
            why.push(format!(
                "its finalizers: {}",
                dependent.finalizers().join(", ")
            ));
        }
        let own = dependent
            .meta
            .uid
            .as_deref()
            .map_or(0, |uid| scope.graph.dependents(Uid::parse(uid)).len());
        if own > 0 {
            why.push(format!("{own} dependent(s) of its own"));
        }
        if let Order::Invalid(value) = scope.order(dependent) {
            why.push(format!(
                "{DELETION_ORDER_ANNOTATION} {value:?} is not an integer: wave 0"
            ));
        }
        let _ = writeln!(
            out,
            "    wave {} holds {}: {}",
            current.0,
            dependent.title(),
            why.join("; ")
        );
    }
    Some(out)
}
