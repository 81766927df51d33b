//! The guards' selection: which objects carry `syncgc.io/guarded`, the label by which the
//! guards' DELETE webhook selects what it sees, so that a DELETE no guard can concern never
//! reaches syncgc. Decided from the graph alone ([`changes`]); kept by the leader ([`run`]).
//!
//! Selected: every object whose own metadata names a guard (protected, a cascade limit, a
//! finalizer handler); the owners above a protected object (their cascade reaches it) and the
//! Namespace that holds it; every object below a finalizer handler (its ReplicaSets and Pods,
//! held with it) and what it needs to act ([`super::needs`]). The webhook labels what names a guard itself as it is written (CREATE and
//! UPDATE), so the object a guard is for is judged from its first DELETE; the label on its
//! owners and namespace follows within a round of [`run`] (until then, a DELETE of an owner
//! goes ahead and the protected object's own DELETE, by the collector, is refused instead).
//! The label comes off an object only once it has been unwanted for [`UNSELECT_AFTER`].
//!
//! The same rounds carry out what [`super::terminating`] decides for a protected object in a
//! namespace being deleted: an Event on the namespace, and its siblings deleted.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use kube::runtime::events::EventType;

use super::{Collector, terminating};
use crate::api::{ApiError, Cluster, Propagation, Target};
use crate::graph::{Flags, Graph, Uid, UidHash};
use crate::names::{GUARDED_LABEL, Reason};

/// How often the selection is compared with the graph.
pub const ROUND: Duration = Duration::from_millis(250);
/// How long a label written is given to come back through the watch before it is written
/// again (and how long a failed write waits).
const SETTLE: Duration = Duration::from_secs(10);
/// Labels written at once.
const CONCURRENCY: usize = 8;
/// How long an object must stay unwanted before its label comes off: a new leader whose
/// handlers' needs are not read yet, or a read that failed, must not open a gap.
pub const UNSELECT_AFTER: Duration = Duration::from_secs(15);
/// How far up the owners of a protected object are followed.
const MAX_DEPTH: usize = 64;

/// What the label should become: objects to label, objects to unlabel.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Relabel {
    pub select: Vec<Uid>,
    pub unselect: Vec<Uid>,
}

/// The objects that should carry the label: observed, not being deleted (a DELETE of an
/// object being deleted is not judged again), and concerned by a guard.
pub fn wanted(graph: &Graph, needed: &[Uid]) -> HashSet<Uid, UidHash> {
    let mut wanted: HashSet<Uid, UidHash> = needed.iter().copied().collect();
    for (uid, guards) in graph.guarded() {
        if !guards.guards_itself() {
            continue;
        }
        wanted.insert(uid);
        if guards.protected {
            owners_above(graph, uid, &mut wanted);
            if let Some(namespace) = graph
                .node(uid)
                .and_then(|n| n.namespace())
                .and_then(|ns| graph.namespace_uid(ns))
            {
                wanted.insert(namespace);
            }
        }
        if guards.handles.is_some() {
            wanted.extend(graph.tree(uid));
        }
    }
    wanted.retain(|uid| labellable(graph, *uid));
    wanted
}

/// What to change for the label to be on [`wanted`] and nowhere else.
pub fn changes(graph: &Graph, needed: &[Uid]) -> Relabel {
    let wanted = wanted(graph, needed);
    let selected: HashSet<Uid, UidHash> = graph
        .guarded()
        .filter(|(uid, g)| g.selected && labellable(graph, *uid))
        .map(|(uid, _)| uid)
        .collect();
    let mut changes = Relabel {
        select: wanted.difference(&selected).copied().collect(),
        unselect: selected.difference(&wanted).copied().collect(),
    };
    changes.select.sort();
    changes.unselect.sort();
    changes
}

/// How many objects carry the label.
pub fn selected(graph: &Graph) -> usize {
    graph.guarded().filter(|(_, g)| g.selected).count()
}

fn labellable(graph: &Graph, uid: Uid) -> bool {
    graph
        .node(uid)
        .is_some_and(|n| !n.is(Flags::VIRTUAL) && !n.is(Flags::DELETING))
}

/// Adds to `into` every owner above `uid`, through their owners.
fn owners_above(graph: &Graph, uid: Uid, into: &mut HashSet<Uid, UidHash>) {
    let mut frontier = vec![(uid, 0)];
    let mut seen = HashSet::from([uid]);
    while let Some((next, depth)) = frontier.pop() {
        if depth >= MAX_DEPTH {
            continue;
        }
        for link in graph.node(next).into_iter().flat_map(|n| n.owners.iter()) {
            if seen.insert(link.uid) {
                into.insert(link.uid);
                frontier.push((link.uid, depth + 1));
            }
        }
    }
}

/// What one round writes.
enum RoundWrite {
    /// The label on (`true`) or off.
    Label(Target, bool),
    /// A sibling of a protected object, in a namespace being deleted.
    Delete(Target),
}

/// Keeps the label where [`changes`] says, and carries out [`terminating::held`], while this
/// replica leads and its graph holds the cluster; a write the watch has not shown yet is not
/// sent again for [`SETTLE`].
pub async fn run(
    collector: std::sync::Arc<Collector>,
    leading: tokio::sync::watch::Receiver<bool>,
    shutdown: CancellationToken,
) {
    let cx = &collector.cx;
    let mut written: HashMap<Uid, Instant> = HashMap::new();
    // Since when each labelled object has been unwanted.
    let mut unwanted: HashMap<Uid, Instant> = HashMap::new();
    // The protected objects whose hold on their namespace was reported.
    let mut reported: HashSet<Uid> = HashSet::new();
    let mut round = tokio::time::interval(ROUND);
    round.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = round.tick() => {}
        }
        let now = Instant::now();
        written.retain(|_, at| now.duration_since(*at) < SETTLE);
        let (work, events) = {
            let graph = cx.graph();
            cx.metrics
                .guard_selected
                .set(i64::try_from(selected(&graph)).unwrap_or(i64::MAX));
            if !*leading.borrow() {
                continue;
            }
            let target = |uid: Uid| cx.target_of(uid, graph.node(uid)?);
            let changes = changes(&graph, &cx.config.needs.all());
            unwanted.retain(|uid, _| changes.unselect.contains(uid));
            let on = changes.select.into_iter().map(|uid| (uid, true));
            let off = changes
                .unselect
                .into_iter()
                .filter(|uid| {
                    now.duration_since(*unwanted.entry(*uid).or_insert(now)) >= UNSELECT_AFTER
                })
                .map(|uid| (uid, false));
            let mut work: Vec<(Uid, RoundWrite)> = on
                .chain(off)
                .filter_map(|(uid, select)| Some((uid, RoundWrite::Label(target(uid)?, select))))
                .collect();
            let held = terminating::held(
                &graph,
                cx.config.timeouts,
                crate::api::clock::now().as_second(),
            );
            reported.retain(|uid| held.iter().any(|h| h.object == *uid));
            let mut events = Vec::new();
            for hold in held {
                work.extend(
                    hold.siblings
                        .iter()
                        .filter_map(|uid| Some((*uid, RoundWrite::Delete(target(*uid)?)))),
                );
                if reported.insert(hold.object)
                    && let Some(object) = target(hold.object)
                {
                    let namespace = hold.namespace.and_then(target);
                    events.push((object, namespace, hold));
                }
            }
            work.retain(|(uid, _)| !written.contains_key(uid));
            (work, events)
        };
        for (uid, _) in &work {
            written.insert(*uid, now);
        }
        for (object, namespace, hold) in events {
            let note = format!(
                "{object} is protected and its namespace {} is being deleted: its DELETE is \
                 refused until {} (the apiserver's clock), then it goes with the namespace; \
                 its {} sibling(s) of its kind are deleted meanwhile. Remove \
                 syncgc.io/protected to let it go now",
                hold.namespace_name,
                jiff::Timestamp::from_second(hold.until).unwrap_or_default(),
                hold.siblings.len(),
            );
            tracing::warn!(%object, namespace = %hold.namespace_name, until = hold.until, "a protected object holds its namespace, being deleted");
            // On the namespace: one being deleted takes no new Events about its objects.
            let regarding = namespace.as_ref().unwrap_or(&object);
            cx.new_event(
                regarding,
                EventType::Warning,
                Reason::ProtectedHoldsNamespace,
                note,
            )
            .await;
        }
        futures::stream::iter(work)
            .for_each_concurrent(CONCURRENCY, |(uid, write)| async move {
                let (change, target, result) = match write {
                    RoundWrite::Label(target, select) => {
                        let result = label(&cx.cluster, &target, select).await;
                        let change = if select { "selected" } else { "unselected" };
                        (change, target, result)
                    }
                    RoundWrite::Delete(target) => {
                        let result = match cx.judge_delete(uid, &target, Propagation::Background) {
                            Ok(()) => cx
                                .cluster
                                .delete(&target, Propagation::Background, None)
                                .await
                                .map(drop),
                            Err(held) => Err(held),
                        };
                        ("sibling_deleted", target, result)
                    }
                };
                // Gone, or replaced (the uid no longer matches): nothing to write.
                let gone = |err: &ApiError| matches!(err.status(), Some(404 | 409 | 422));
                let outcome = match &result {
                    Ok(()) => "ok",
                    Err(err) if gone(err) => "gone",
                    Err(ApiError::Held { .. }) => "held",
                    Err(_) => "error",
                };
                cx.metrics
                    .guard_selection_changes
                    .with_label_values(&[change, outcome])
                    .inc();
                match result {
                    Ok(()) => tracing::debug!(object = %target, change, "written"),
                    Err(err) if gone(&err) => {}
                    Err(err @ ApiError::Held { .. }) => {
                        tracing::debug!(object = %target, change, %err, "held; trying again")
                    }
                    Err(err) => {
                        tracing::warn!(object = %target, change, %err, "could not write; trying again")
                    }
                }
            })
            .await;
    }
}

/// Puts the label on `target` or takes it off, with its uid as a precondition.
async fn label(cluster: &Cluster, target: &Target, select: bool) -> Result<(), ApiError> {
    let value = if select {
        serde_json::Value::from("true")
    } else {
        serde_json::Value::Null
    };
    let patch = serde_json::json!({
        "metadata": { "uid": target.uid, "labels": { GUARDED_LABEL: value } }
    });
    cluster.merge_metadata(target, &patch).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Coordinates, Guards, Handles, Mode, Observed, ResourceId};

    const CM: ResourceId = ResourceId::new(0);

    fn uid(n: u128) -> Uid {
        Uid::from_u128(n)
    }

    fn object(n: u128, owners: &[u128], guards: Guards) -> Observed {
        Observed {
            guards,
            ..Observed::config_map(n, owners, Flags::empty())
        }
    }

    fn namespace(n: u128, name: &str, guards: Guards) -> Observed {
        Observed {
            coordinates: Coordinates::in_group("", "Namespace", name),
            namespace: None,
            name: name.to_owned(),
            ..object(n, &[], guards)
        }
    }

    fn graph(objects: impl IntoIterator<Item = Observed>) -> Graph {
        let mut graph = Graph::new(Mode::Cooperative);
        for object in objects {
            graph.apply(CM, object);
        }
        graph
    }

    fn uids(ns: &[u128]) -> Vec<Uid> {
        let mut uids: Vec<Uid> = ns.iter().map(|n| uid(*n)).collect();
        uids.sort();
        uids
    }

    const PROTECTED: Guards = Guards {
        protected: true,
        handles: None,
        foreign: Vec::new(),
        limited: false,
        selected: false,
    };

    /// A protected object selects itself, its owners up to the top (through every owner of
    /// each) and its Namespace; nothing else.
    #[test]
    fn a_protected_object_selects_itself_its_owners_and_its_namespace() {
        let graph = graph([
            namespace(100, "ns", Guards::default()),
            object(1, &[], Guards::default()),
            object(2, &[1], Guards::default()),
            object(3, &[], Guards::default()),
            object(4, &[2, 3], PROTECTED),
            object(5, &[4], Guards::default()),
            object(6, &[], Guards::default()),
        ]);
        assert_eq!(
            changes(&graph, &[]),
            Relabel {
                select: uids(&[1, 2, 3, 4, 100]),
                unselect: Vec::new(),
            }
        );
    }

    /// A limited object selects itself alone; a handler its tree (its ReplicaSets and Pods).
    #[test]
    fn a_limit_selects_its_object_and_a_handler_its_tree() {
        let limited = Guards {
            limited: true,
            ..Guards::default()
        };
        let handler = Guards {
            handles: Some(Handles::parse("example.com/f", None).unwrap()),
            ..Guards::default()
        };
        let graph = graph([
            object(1, &[], Guards::default()),
            object(2, &[1], limited),
            object(3, &[], handler),
            object(4, &[3], Guards::default()),
            object(5, &[4], Guards::default()),
        ]);
        assert_eq!(changes(&graph, &[]).select, uids(&[2, 3, 4, 5]));
        // What a handler needs (its account, bindings: read by `needs`) is selected with it;
        // an object the graph has not seen cannot be.
        assert_eq!(
            changes(&graph, &[uid(1), uid(42)]).select,
            uids(&[1, 2, 3, 4, 5])
        );
    }

    /// The label comes off what no guard concerns any more, and stays where it is wanted; a
    /// virtual owner or an object being deleted is never written to.
    #[test]
    fn the_label_follows_the_guards_as_they_go() {
        let labelled = Guards {
            selected: true,
            ..Guards::default()
        };
        let protected_and_selected = Guards {
            selected: true,
            ..PROTECTED
        };
        let graph = graph([
            object(1, &[], labelled),
            object(2, &[9], protected_and_selected),
            Observed {
                flags: Flags::DELETING,
                deleted_at: Some(1_000),
                ..object(3, &[], PROTECTED)
            },
        ]);
        assert_eq!(
            changes(&graph, &[]),
            Relabel {
                select: Vec::new(),
                unselect: uids(&[1]),
            },
            "9 is virtual, 3 is being deleted, 2 is labelled already"
        );
        assert_eq!(selected(&graph), 2);
    }
}
