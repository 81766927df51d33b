//! The cascades the record follows to their end: from a root's DELETE admitted, each member
//! of its tree (or of its namespace) judged gone or kept as the graph changes, and, once none
//! is left, a summary Event on the root ([`summarize`], every second). It observes what the
//! cluster does; it predicts nothing (the cascade model, [`crate::gc::cascade`], does).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::events::EventType;
use tokio::time::Instant;

use super::{Causes, Done, Entry, KEEP, MAX_MEMBERS, Record};
use crate::api::{Cluster, Target};
use crate::graph::{Below, Flags, Graph, Reader, ResourceId, Uid};
use crate::names::Reason;

/// An object of a cascade's tree when its root's DELETE was admitted: what its entry says
/// once it is gone, when its own DELETE did not reach syncgc.
#[derive(Debug, Clone)]
pub struct Member {
    pub uid: Uid,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    /// The owner (or namespace) it was reached from: its cause.
    pub owner: Uid,
}

/// The members of a cascade from `below`'s root: the objects of the namespace `namespace`
/// (a Namespace's DELETE), else its tree, each with the owner it was reached from; at most
/// one more than [`MAX_MEMBERS`], which says it is too large to follow.
pub(super) fn members(
    below: &Below,
    kind: &dyn Fn(ResourceId) -> String,
    namespace: Option<&str>,
) -> Vec<Member> {
    let graph = below.graph();
    let member = |uid: Uid, owner: Uid| {
        let node = graph.node(uid)?;
        let kind = Some(kind(node.resource?)).filter(|k| !k.is_empty())?;
        Some(Member {
            uid,
            kind,
            namespace: node.namespace().map(str::to_owned),
            name: node.name.to_string(),
            owner,
        })
    };
    match namespace {
        Some(namespace) => graph
            .in_namespace(namespace)
            .filter_map(|uid| member(uid, below.root()))
            .take(MAX_MEMBERS + 1)
            .collect(),
        None => below
            .steps()
            .iter()
            .filter_map(|step| member(step.uid, step.owner))
            .take(MAX_MEMBERS + 1)
            .collect(),
    }
}

/// The entry of a member gone: deleted by a garbage collector (or the namespace controller)
/// whose DELETE syncgc did not see.
const COLLECTED_BY: &str = "a collector (its DELETE did not reach syncgc)";

#[derive(Debug)]
pub(super) struct Followed {
    kind: Arc<str>,
    namespace: Option<Arc<str>>,
    name: Box<str>,
    owner: Uid,
}

/// A cascade followed to its end, for the summary Event on its root.
#[derive(Debug)]
pub(super) struct Tracked {
    root: Target,
    started: Instant,
    /// The objects of its tree still to be judged.
    members: HashMap<Uid, Followed>,
    deleted: BTreeMap<Arc<str>, usize>,
    kept: usize,
}

/// The longest a cascade is followed; then its summary says what is left.
const FOLLOWED: Duration = Duration::from_secs(KEEP as u64);

impl Record {
    /// Follows the cascade the DELETE of `root` starts over `members` (its tree, or the
    /// objects of a namespace), with their kinds: [`Causes::ended`] says when it ends.
    pub(super) fn start_cascade(
        &mut self,
        root: Target,
        members: impl Iterator<Item = Member>,
        started: Instant,
    ) {
        let mut shared: HashMap<String, Arc<str>> = HashMap::new();
        let mut share = |text: String| {
            shared
                .entry(text)
                .or_insert_with_key(|k| Arc::from(k.as_str()))
                .clone()
        };
        let members: HashMap<Uid, Followed> = members
            .map(|m| {
                let followed = Followed {
                    kind: share(m.kind),
                    namespace: m.namespace.map(&mut share),
                    name: m.name.into(),
                    owner: m.owner,
                };
                (m.uid, followed)
            })
            .collect();
        if members.is_empty() {
            return;
        }
        let uid = root.uid.clone();
        self.cascades.retain(|c| c.root.uid != uid);
        let followed: usize = self.cascades.iter().map(|c| c.members.len()).sum();
        if followed + members.len() > MAX_MEMBERS {
            tracing::warn!(%root, members = members.len(), followed, "a cascade too large to follow beside the others: no summary Event for it");
            return;
        }
        self.cascades.push(Tracked {
            root,
            started,
            members,
            deleted: BTreeMap::new(),
            kept: 0,
        });
    }
}

impl Causes {
    /// The cascades that have ended by `graph` at `now`, each with the note of its summary:
    /// every object of its tree gone (counted by kind) or kept (it lost its references to the
    /// tree, or was never to be deleted), and the root gone or no longer waiting.
    pub fn ended(&self, graph: &Graph, now: Instant) -> Vec<(Target, String)> {
        let mut record = self.0.lock();
        let record = &mut *record;
        let mut ended = Vec::new();
        let at = crate::api::clock::now().as_second();
        let mut gone = Vec::new();
        record.cascades.retain_mut(|cascade| {
            let root = crate::graph::Uid::parse(&cascade.root.uid);
            let members = &cascade.members;
            let judged: Vec<(Uid, bool)> = members
                .keys()
                .filter_map(|uid| match graph.node(*uid) {
                    None => Some((*uid, true)),
                    Some(n) if n.is(Flags::VIRTUAL) => Some((*uid, true)),
                    Some(n) => {
                        let linked = n
                            .owners
                            .iter()
                            .any(|l| l.uid == root || members.contains_key(&l.uid));
                        let going = n.is(Flags::DELETING) || graph.cause_of(*uid).is_some();
                        (!linked && !going).then_some((*uid, false))
                    }
                })
                .collect();
            for (uid, deleted) in judged {
                let Some(member) = cascade.members.remove(&uid) else {
                    continue;
                };
                if deleted {
                    *cascade.deleted.entry(member.kind.clone()).or_default() += 1;
                    gone.push((uid, member));
                } else {
                    cascade.kept += 1;
                }
            }
            let root_waits = graph
                .node(root)
                .is_some_and(|n| !n.is(Flags::VIRTUAL) && n.waits_for_dependents());
            let over = now.duration_since(cascade.started) > FOLLOWED;
            if (cascade.members.is_empty() && !root_waits) || over {
                ended.push((cascade.root.clone(), cascade.summary(now)));
                return false;
            }
            true
        });
        // The members gone whose DELETE syncgc recorded neither at its webhook nor as its
        // collector's: recorded as a step of the cascade.
        for (uid, member) in gone {
            if !record.entries.contains_key(&uid) {
                record.record(Entry {
                    uid: uid.to_string(),
                    kind: member.kind.to_string(),
                    namespace: member.namespace.map(|ns| ns.to_string()),
                    name: member.name.into(),
                    action: Done::Deleted,
                    by: COLLECTED_BY.to_owned(),
                    at,
                    cause: Some(member.owner.to_string()),
                });
            }
        }
        ended
    }
}

impl Tracked {
    fn summary(&self, now: Instant) -> String {
        let deleted: usize = self.deleted.values().sum();
        let kinds: Vec<String> = self
            .deleted
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        let mut note = format!(
            "its cascade ended after {}: {deleted} object(s) deleted",
            crate::duration::format(now.duration_since(self.started))
        );
        if !kinds.is_empty() {
            note.push_str(&format!(" ({})", kinds.join(", ")));
        }
        if self.kept > 0 {
            note.push_str(&format!(", {} kept", self.kept));
        }
        if !self.members.is_empty() {
            note.push_str(&format!(", {} left after {FOLLOWED:?}", self.members.len()));
        }
        note
    }
}

/// Records, every second, the summary Event of each cascade that has ended (see
/// [`Causes::ended`]) on its root.
pub async fn summarize(causes: Causes, graph: Reader, cluster: Cluster) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let ended = {
            let graph = graph.read();
            causes.confirm(&graph, Instant::now());
            causes.ended(&graph, Instant::now())
        };
        for (root, note) in ended {
            tracing::info!(%root, %note, "cascade ended");
            cluster
                .new_event(&root, EventType::Normal, Reason::CascadeEnded, note)
                .await;
        }
    }
}
