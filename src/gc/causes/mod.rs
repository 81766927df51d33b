//! Why each object went: a bounded record, in memory, of the DELETEs the webhook let through
//! — who sent each, and the owner (or namespace) whose going made it a step of a cascade —
//! and of the references the collector removed. Following the causes up gives the root of a
//! cascade and the user who deleted it. The collector names that root in the User-Agent of the
//! requests it sends for it ([`Causes::header`]), where the apiserver's audit log records it;
//! syncgc's API serves the record as `deletioncauses` ([`crate::aggregated`]), which
//! `syncgc explain --why-deleted` reads.
//!
//! A DELETE's entry is only a claim until the cluster confirms it: the webhook cannot tell a
//! review the apiserver sent from one anybody posted, so what it admits waits ([`Pending`])
//! until the graph shows the object being deleted, or gone after it was seen, and is dropped
//! unconfirmed after [`CONFIRM_WITHIN`]. Only then is it recorded and its cascade followed.
//!
//! The record holds the last [`CAPACITY`] entries and none older than [`KEEP`], each field cut
//! to [`MAX_FIELD`] bytes; at most [`MAX_PENDING`] claims wait, and the cascades followed hold
//! at most [`MAX_MEMBERS`] objects together. A restart loses it. Each replica holds what its
//! own webhook saw; what one replica answers joins what every replica holds ([`Gathered`],
//! [`crate::aggregated::peers`]).
//!
//! - [`follow`]: the cascades followed to their end, and their summary Events.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use tokio::time::Instant;

use crate::api::Target;
use crate::graph::{Below, Flags, Graph, ResourceId, Uid};

mod follow;

pub use follow::{Member, summarize};
use follow::{Tracked, members};

/// The most entries kept.
pub const CAPACITY: usize = 50_000;
/// How long an entry is kept (seconds).
pub const KEEP: i64 = 3600;
/// The longest field of an entry kept (bytes); longer ones are cut, marked `…`.
pub const MAX_FIELD: usize = 512;
/// The most admitted DELETEs waiting for the cluster to confirm them.
pub const MAX_PENDING: usize = 4096;
/// How long an admitted DELETE waits for the cluster to confirm it: longer than the
/// apiserver waits for any webhook.
pub const CONFIRM_WITHIN: Duration = Duration::from_secs(60);
/// The most objects the cascades followed at once hold together; a cascade that would pass it
/// is recorded but not followed.
pub const MAX_MEMBERS: usize = 1_000_000;

/// What was done to an object.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Done {
    /// Its references to owners going were removed.
    Orphaned,
    /// Its DELETE went ahead (what a replica of another version says it did, too).
    #[serde(other)]
    Deleted,
}

/// What was done to one object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub uid: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub action: Done,
    /// The user who sent the request.
    pub by: String,
    /// When (seconds since the epoch).
    pub at: i64,
    /// The uid of the owner, or of the namespace, whose going caused it; none for the root of
    /// a cascade (a DELETE of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

impl Entry {
    /// The entry with each field cut to [`MAX_FIELD`] bytes.
    pub fn bounded(mut self) -> Self {
        for field in [&mut self.uid, &mut self.kind, &mut self.name, &mut self.by] {
            cut(field, MAX_FIELD);
        }
        if let Some(namespace) = &mut self.namespace {
            cut(namespace, MAX_FIELD);
        }
        if let Some(cause) = &mut self.cause {
            cut(cause, MAX_FIELD);
        }
        self
    }

    /// `Kind namespace/name`.
    pub fn described(&self) -> String {
        crate::api::described(&self.kind, self.namespace.as_deref(), &self.name)
    }
}

/// The record, shared by the webhook (which writes the DELETEs), the collector (which writes
/// its orphaning and reads the roots) and syncgc's API (which reads it).
#[derive(Debug, Clone, Default)]
pub struct Causes(Arc<Mutex<Record>>);

#[derive(Debug, Default)]
struct Record {
    entries: HashMap<Uid, Entry>,
    /// In the order written, to drop the oldest first.
    order: VecDeque<(Uid, i64)>,
    /// The DELETEs admitted and not yet confirmed, the latest admission of each object.
    pending: HashMap<Uid, Pending>,
    /// The cascades started by DELETEs this replica's webhook let through, until they end.
    cascades: Vec<Tracked>,
}

/// A DELETE the webhook let through, waiting for the cluster to confirm it.
#[derive(Debug)]
pub struct Pending {
    pub entry: Entry,
    /// Whether the graph held the object when its DELETE was admitted: then its absence
    /// confirms it.
    pub seen: bool,
    /// The cascade it starts, when it is a cascade's root: to follow once confirmed.
    pub cascade: Option<(Target, Vec<Member>)>,
    pub admitted: Instant,
}

impl Pending {
    /// The DELETE of `below`'s root let through, said by `entry`, from one read of the graph:
    /// its cause (an owner or the namespace going), whether the graph holds it, and, when it
    /// is a cascade's root (no cause, and a `root` to follow: it does not orphan), the cascade
    /// to follow — the objects of the namespace `namespace` for a Namespace's DELETE, else
    /// its tree.
    pub fn of(
        below: &Below,
        kind: &dyn Fn(ResourceId) -> String,
        mut entry: Entry,
        root: Option<Target>,
        namespace: Option<&str>,
    ) -> Self {
        let (graph, object) = (below.graph(), below.root());
        let cause = graph.cause_of(object);
        let seen = graph.node(object).is_some_and(|n| !n.is(Flags::VIRTUAL));
        let cascade = root
            .filter(|_| seen && cause.is_none())
            .map(|root| (root, members(below, kind, namespace)));
        entry.cause = cause.map(|c| c.to_string());
        Self {
            entry,
            seen,
            cascade,
            admitted: Instant::now(),
        }
    }

    /// Whether `graph` confirms the deletion: the object is being deleted, or gone after it
    /// was seen.
    fn confirmed(&self, graph: &Graph, uid: Uid) -> bool {
        match graph.node(uid) {
            Some(node) if !node.is(Flags::VIRTUAL) => node.is(Flags::DELETING),
            _ => self.seen,
        }
    }
}

impl Causes {
    /// Records `entry` (replacing an earlier one of its object), dropping the entries over
    /// [`CAPACITY`] or older than [`KEEP`].
    pub fn record(&self, entry: Entry) {
        self.0.lock().record(entry);
    }

    /// Holds the DELETE `pending` admitted until the cluster confirms it ([`Causes::confirm`]);
    /// a later admission of the same object replaces it.
    pub fn admitted(&self, pending: Pending) {
        let uid = Uid::parse(&pending.entry.uid);
        let pending = Pending {
            entry: pending.entry.bounded(),
            ..pending
        };
        let mut record = self.0.lock();
        if record.pending.len() >= MAX_PENDING && !record.pending.contains_key(&uid) {
            let oldest = record
                .pending
                .iter()
                .min_by_key(|(_, p)| p.admitted)
                .map(|(uid, _)| *uid);
            if let Some(oldest) = oldest {
                record.pending.remove(&oldest);
            }
        }
        record.pending.insert(uid, pending);
    }

    /// Records the admitted DELETEs that `graph` confirms, and follows the cascades they
    /// start; drops those left unconfirmed for [`CONFIRM_WITHIN`] (a review nobody's DELETE
    /// followed: nothing of it is kept).
    pub fn confirm(&self, graph: &Graph, now: Instant) {
        let mut record = self.0.lock();
        let uids: Vec<Uid> = record.pending.keys().copied().collect();
        for uid in uids {
            record.confirm_one(graph, uid, now);
        }
    }

    /// Whether the DELETE of `uid` is recorded already (confirmed).
    pub fn has(&self, uid: Uid) -> bool {
        self.0.lock().entries.contains_key(&uid)
    }
}

impl Record {
    fn record(&mut self, entry: Entry) {
        let entry = entry.bounded();
        let uid = Uid::parse(&entry.uid);
        let at = entry.at;
        self.entries.insert(uid, entry);
        self.order.push_back((uid, at));
        while let Some(&(oldest, written)) = self.order.front() {
            if self.order.len() <= CAPACITY && written > at - KEEP {
                break;
            }
            self.order.pop_front();
            // Only when this is its latest entry.
            if self.entries.get(&oldest).is_some_and(|e| e.at == written) {
                self.entries.remove(&oldest);
            }
        }
    }

    /// Confirms, records or drops the admitted DELETE of `uid` (see [`Causes::confirm`]).
    fn confirm_one(&mut self, graph: &Graph, uid: Uid, now: Instant) {
        let Some(pending) = self.pending.get(&uid) else {
            return;
        };
        if pending.confirmed(graph, uid) {
            let Some(pending) = self.pending.remove(&uid) else {
                return;
            };
            self.record(pending.entry);
            if let Some((root, members)) = pending.cascade {
                self.start_cascade(root, members.into_iter(), pending.admitted);
            }
        } else if now.duration_since(pending.admitted) > CONFIRM_WITHIN {
            self.pending.remove(&uid);
        }
    }
}

impl Causes {
    /// The entry of `uid`.
    pub fn get(&self, uid: Uid) -> Option<Entry> {
        self.0.lock().entries.get(&uid).cloned()
    }

    /// The entries of the objects named `name` of `kind` (any case, or its plural) in
    /// `namespace`: the latest first.
    pub fn find(&self, kind: &str, namespace: Option<&str>, name: &str) -> Vec<Entry> {
        let kind = kind.to_ascii_lowercase();
        let mut found: Vec<Entry> = self
            .0
            .lock()
            .entries
            .values()
            .filter(|e| {
                e.name == name
                    && e.namespace.as_deref() == namespace
                    && (e.kind.to_ascii_lowercase() == kind
                        || format!("{}s", e.kind.to_ascii_lowercase()) == kind)
            })
            .cloned()
            .collect();
        found.sort_by_key(|e| std::cmp::Reverse(e.at));
        found
    }

    /// The chain of causes from `uid` up — its entry, its cause's, … to the root of its cascade,
    /// as far as the record holds them — confirming by `graph` (when given) the admitted
    /// DELETEs on the way.
    fn chain_confirmed(&self, uid: Uid, graph: Option<&Graph>) -> Vec<Entry> {
        let mut record = self.0.lock();
        walk(uid, |uid| {
            if let Some(graph) = graph {
                record.confirm_one(graph, uid, Instant::now());
            }
            record.entries.get(&uid).cloned()
        })
    }

    /// What this replica's record holds of `asked`: the entries of its scope, and of each of its
    /// uids, with their causes up as far as this record holds them, each entry once. What
    /// replicas say of one object is joined by [`Gathered`].
    pub fn gather(&self, asked: &Asked) -> Vec<Entry> {
        let record = self.0.lock();
        let mut found: HashMap<Uid, Entry> = match &asked.scope {
            Some(scope) => record
                .entries
                .iter()
                .filter(|(_, e)| scope.holds(e))
                .map(|(uid, e)| (*uid, e.clone()))
                .collect(),
            None => HashMap::new(),
        };
        let mut next: Vec<Uid> = found
            .values()
            .filter_map(|e| e.cause.as_deref().map(Uid::parse))
            .chain(asked.uids.iter().map(|u| Uid::parse(u)))
            .collect();
        while let Some(uid) = next.pop() {
            if found.contains_key(&uid) {
                continue;
            }
            if let Some(entry) = record.entries.get(&uid) {
                next.extend(entry.cause.as_deref().map(Uid::parse));
                found.insert(uid, entry.clone());
            }
        }
        found.into_values().collect()
    }

    /// What the collector's requests for a cascade through `owner` say of it: the root of the
    /// cascade (kind, namespace, name, uid) and the user who deleted it, where the record knows
    /// them; else `owner` as the graph knows it.
    pub fn header(
        &self,
        graph: &Graph,
        kind: impl Fn(Uid) -> Option<String>,
        owner: Uid,
    ) -> String {
        if let Some(root) = self.chain_confirmed(owner, Some(graph)).pop() {
            return format!(
                "cause: root={} uid={} user={}",
                path(&root.kind, root.namespace.as_deref(), &root.name),
                root.uid,
                root.by
            );
        }
        let node = graph.node(owner);
        format!(
            "cause: root={} uid={owner}",
            path(
                &kind(owner).unwrap_or_default(),
                node.and_then(|n| n.namespace()),
                node.map_or("", |n| &n.name),
            )
        )
    }
}

/// The chain of causes from `uid` up, each entry found by `entry`: to the root of its cascade,
/// or where `entry` knows no more (and at most 64 links, never round a cycle).
fn walk(uid: Uid, mut entry: impl FnMut(Uid) -> Option<Entry>) -> Vec<Entry> {
    let mut chain: Vec<Entry> = Vec::new();
    let mut next = Some(uid);
    while let Some(uid) = next {
        let Some(found) = entry(uid) else {
            break;
        };
        if chain.len() > 64 || chain.iter().any(|e| e.uid == found.uid) {
            break;
        }
        next = found.cause.as_deref().map(Uid::parse);
        chain.push(found);
    }
    chain
}

/// Which causes a replica is asked for ([`Causes::gather`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Asked {
    /// Every entry of a namespace, or of every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    /// The entries of these objects (the causes another replica's chains end at).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uids: Vec<String>,
}

/// The entries of one namespace, or of every namespace (and cluster-scoped objects).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Scope {
    Namespace(String),
    Every,
}

impl Scope {
    pub fn of(namespace: Option<&str>) -> Self {
        namespace.map_or(Self::Every, |ns| Self::Namespace(ns.to_owned()))
    }

    fn holds(&self, entry: &Entry) -> bool {
        match self {
            Self::Every => true,
            Self::Namespace(ns) => entry.namespace.as_deref() == Some(ns),
        }
    }
}

/// The causes several records gave, joined: the latest entry of each object.
#[derive(Debug, Clone, Default)]
pub struct Gathered(HashMap<Uid, Entry>);

impl Gathered {
    /// Adds `entries`; how many objects were not known before.
    pub fn add(&mut self, entries: impl IntoIterator<Item = Entry>) -> usize {
        let mut added = 0;
        for entry in entries {
            let uid = Uid::parse(&entry.uid);
            match self.0.get(&uid) {
                Some(known) if known.at >= entry.at => {}
                known => {
                    added += usize::from(known.is_none());
                    self.0.insert(uid, entry.bounded());
                }
            }
        }
        added
    }

    /// The causes some chain goes up to that no record gave yet: what to ask for next.
    pub fn missing(&self) -> Vec<String> {
        let mut missing: Vec<String> = self
            .0
            .values()
            .filter_map(|e| e.cause.as_ref())
            .filter(|cause| !self.0.contains_key(&Uid::parse(cause)))
            .cloned()
            .collect();
        missing.sort();
        missing.dedup();
        missing
    }

    /// The entries of `scope`: the latest first.
    pub fn in_scope(&self, scope: &Scope) -> Vec<&Entry> {
        let mut found: Vec<&Entry> = self.0.values().filter(|e| scope.holds(e)).collect();
        found.sort_by(|a, b| (b.at, &a.uid).cmp(&(a.at, &b.uid)));
        found
    }

    /// The chain of causes from `uid` up — its entry, its cause's, … to the root of its cascade —
    /// as far as what was gathered holds them.
    pub fn chain(&self, uid: Uid) -> Vec<Entry> {
        walk(uid, |uid| self.0.get(&uid).cloned())
    }
}

/// `text`, cut to `max` bytes (on a character boundary, marked `…`).
pub fn cut(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max.saturating_sub('…'.len_utf8());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
}

/// `Kind/namespace/name`, or `Kind/name` for a cluster-scoped object.
fn path(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// `syncgc.io/v1alpha1` `DeletionCause`: why an object of a namespace went, as the record
/// holds it, served by syncgc's API ([`crate::aggregated`]). Its name is
/// [`DeletionCause::name_of`] its object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeletionCause {
    pub api_version: String,
    pub kind: String,
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    /// What was done to the object, by whom, when.
    pub object: Entry,
    /// Its causes, from the owner (or namespace) whose going caused it up to the root of
    /// the cascade, as far as the record holds them and the reader may read them.
    #[serde(default)]
    pub causes: Vec<Entry>,
    /// Causes of kinds or namespaces the reader may not read: counted, not named.
    #[serde(default)]
    pub withheld: usize,
    /// The record ends before the root (its older entries are gone, or another replica's).
    #[serde(default)]
    pub incomplete: bool,
}

/// A list of [`DeletionCause`]s.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeletionCauseList {
    pub api_version: String,
    pub kind: String,
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta,
    pub items: Vec<DeletionCause>,
    /// Causes of kinds the reader may not read: counted, not named.
    #[serde(default)]
    pub withheld: usize,
    /// The replicas that did not answer, and why: the causes their webhooks saw are missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unanswered: Vec<String>,
}

impl DeletionCause {
    /// The name of the causes of the object `name` of `kind`: `kind.name`, the kind in lower
    /// case (`deployment.web`).
    pub fn name_of(kind: &str, name: &str) -> String {
        format!("{}.{name}", kind.to_ascii_lowercase())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u128, cause: Option<u128>, by: &str, at: i64) -> Entry {
        Entry {
            uid: Uid::from_u128(n).to_string(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: format!("o{n}"),
            action: Done::Deleted,
            by: by.into(),
            at,
            cause: cause.map(|c| Uid::from_u128(c).to_string()),
        }
    }

    #[test]
    fn the_chain_leads_to_the_root_and_its_user() {
        let causes = Causes::default();
        causes.record(entry(1, None, "alice", 100));
        causes.record(entry(2, Some(1), "gc", 101));
        causes.record(entry(3, Some(2), "gc", 102));
        causes.record(entry(4, Some(2), "gc", 102));
        let chain = |causes: &Causes, uid: u128| {
            let asked = Asked {
                scope: None,
                uids: vec![Uid::from_u128(uid).to_string()],
            };
            let found = causes.gather(&asked);
            let mut gathered = Gathered::default();
            assert_eq!(gathered.add(found.clone()), found.len(), "each entry once");
            gathered.chain(Uid::from_u128(uid))
        };
        let names: Vec<String> = chain(&causes, 3).into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["o3", "o2", "o1"]);
        // A namespace's entries come with their causes, each once.
        let scope = Asked {
            scope: Some(Scope::of(Some("ns"))),
            uids: vec![],
        };
        assert_eq!(causes.gather(&scope).len(), 4);
        let header = causes.header(&Graph::default(), |_| None, Uid::from_u128(2));
        assert_eq!(
            header,
            format!(
                "cause: root=ConfigMap/ns/o1 uid={} user=alice",
                Uid::from_u128(1)
            )
        );
        assert_eq!(causes.find("configmaps", Some("ns"), "o2").len(), 1);
        assert_eq!(causes.find("ConfigMap", Some("other"), "o2").len(), 0);
        // A cycle ends.
        causes.record(entry(1, Some(3), "alice", 103));
        assert_eq!(chain(&causes, 3).len(), 3);
    }

    #[test]
    fn a_cascade_ends_when_its_tree_is_gone_or_kept_and_says_what_went() {
        use crate::graph::{Mode, Observed, ResourceId};
        const CM: ResourceId = ResourceId::new(0);
        let mut graph = Graph::new(Mode::Cooperative);
        for object in [
            Observed::config_map(2, &[1], Flags::empty()),
            Observed::config_map(3, &[1], Flags::empty()),
            Observed::config_map(4, &[2], Flags::empty()),
        ] {
            graph.apply(CM, object);
        }
        let causes = Causes::default();
        let root = Target {
            resource: kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespace: Some("ns".into()),
            name: "o1".into(),
            uid: Uid::from_u128(1).to_string(),
        };
        let members = graph
            .walk(Uid::from_u128(1))
            .map(|s| Member {
                uid: s.uid,
                kind: "ConfigMap".to_owned(),
                namespace: Some("ns".to_owned()),
                name: format!("o{}", s.uid.as_u128()),
                owner: s.owner,
            })
            .collect();
        let now = Instant::now();
        causes.admitted(Pending {
            entry: entry(1, None, "alice", 100),
            seen: true,
            cascade: Some((root, members)),
            admitted: now,
        });
        causes.confirm(&graph, now);
        assert!(causes.has(Uid::from_u128(1)), "its root is gone: confirmed");
        assert!(causes.ended(&graph, now).is_empty(), "nothing went yet");
        graph.delete(Uid::from_u128(2));
        graph.delete(Uid::from_u128(4));
        assert!(
            causes.ended(&graph, now).is_empty(),
            "3 still names its owner"
        );
        // 3 loses its reference: kept.
        graph.apply(CM, Observed::config_map(3, &[], Flags::empty()));
        let ended = causes.ended(&graph, now);
        assert_eq!(ended.len(), 1);
        assert!(
            ended[0]
                .1
                .contains("2 object(s) deleted (2 ConfigMap), 1 kept"),
            "{}",
            ended[0].1
        );
        assert!(causes.ended(&graph, now).is_empty(), "one summary");
    }

    #[test]
    fn an_admitted_delete_is_recorded_only_once_the_graph_confirms_it() {
        use crate::graph::{Mode, Observed, ResourceId};
        const CM: ResourceId = ResourceId::new(0);
        let mut graph = Graph::new(Mode::Cooperative);
        graph.apply(CM, Observed::config_map(1, &[], Flags::empty()));
        let causes = Causes::default();
        let now = Instant::now();
        let admit = |n: u128, seen: bool, by: &str| {
            causes.admitted(Pending {
                entry: entry(n, None, by, 100),
                seen,
                cascade: None,
                admitted: now,
            });
        };
        // A review of a live object that nobody deletes: never recorded, dropped in time.
        admit(1, true, "mallory");
        // A review of an object the graph never held: its absence proves nothing.
        admit(2, false, "mallory");
        causes.confirm(&graph, now);
        assert!(!causes.has(Uid::from_u128(1)) && !causes.has(Uid::from_u128(2)));
        causes.confirm(&graph, now + CONFIRM_WITHIN + Duration::from_secs(1));
        assert!(
            causes.0.lock().pending.is_empty(),
            "unconfirmed claims expire"
        );
        // Deleted for real: confirmed by its deletionTimestamp, then by its absence.
        admit(1, true, "alice");
        graph.apply(CM, Observed::config_map(1, &[], Flags::DELETING));
        causes.confirm(&graph, now);
        assert_eq!(causes.get(Uid::from_u128(1)).unwrap().by, "alice");
        admit(3, true, "bob");
        causes.confirm(&graph, now);
        assert_eq!(
            causes.get(Uid::from_u128(3)).unwrap().by,
            "bob",
            "seen, and gone"
        );
    }

    #[test]
    fn claims_and_fields_are_bounded() {
        let causes = Causes::default();
        let now = Instant::now();
        for n in 0..(MAX_PENDING as u128 + 10) {
            causes.admitted(Pending {
                entry: entry(n, None, &"u".repeat(5_000_000), 1),
                seen: false,
                cascade: None,
                admitted: now + Duration::from_nanos(n as u64),
            });
        }
        let record = causes.0.lock();
        assert_eq!(record.pending.len(), MAX_PENDING);
        assert!(
            !record.pending.contains_key(&Uid::from_u128(0)),
            "the oldest went"
        );
        let by = &record.pending[&Uid::from_u128(20)].entry.by;
        assert!(by.len() <= MAX_FIELD && by.ends_with('…'), "{}", by.len());
    }

    #[test]
    fn the_record_is_bounded_by_count_and_age() {
        let causes = Causes::default();
        for n in 0..(CAPACITY as u128 + 10) {
            causes.record(entry(n, None, "u", 1_000));
        }
        assert_eq!(causes.0.lock().entries.len(), CAPACITY);
        assert!(causes.get(Uid::from_u128(0)).is_none());
        causes.record(entry(u128::MAX, None, "u", 1_000 + KEEP + 1));
        assert_eq!(
            causes.0.lock().entries.len(),
            1,
            "all the others are too old"
        );
        // An object recorded again keeps its latest entry.
        let causes = Causes::default();
        causes.record(entry(1, None, "a", 10));
        causes.record(entry(1, None, "b", 20));
        assert_eq!(causes.get(Uid::from_u128(1)).unwrap().by, "b");
    }
}
