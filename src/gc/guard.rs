//! The guards a DELETE passes: a protected object is never deleted, a finalizer handler's Pods
//! outlive the objects whose finalizers they remove, and a cascade has a limit. Decided here
//! from the graph and the request alone; the handler makes the one side effect (dropping a
//! protected object's references to the owners that are going) and answers.
//!
//! A DELETE that is part of a cascade already admitted (its namespace is being deleted, or an
//! owner of it is gone or waits for its dependents) is not counted against a limit: the limit
//! was checked at the cascade's root, and refusing a step of it would strand the rest.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::needs::Needs;
use super::{cascade, terminating};
use crate::annotations::Timeouts;
use crate::api::Propagation;
use crate::graph::{Below, Flags, Graph, Node, ResourceId, Uid};

/// The DELETE being judged, as the review says it.
#[derive(Debug, Clone)]
pub struct Delete<'a> {
    pub uid: Uid,
    /// `Kind namespace/name`, for messages.
    pub described: String,
    pub kind: &'a str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    /// The DELETE of a Namespace: everything in it goes.
    pub namespace_object: bool,
    /// Annotated `syncgc.io/protected: "true"`.
    pub protected: bool,
    /// Its `syncgc.io/max-cascade`, when that is a number.
    pub max_cascade: Option<usize>,
    pub propagation: Propagation,
}

/// What the guards say of a DELETE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// It goes ahead, with these warnings. `released`: a handler whose hold just ended by its
    /// timeout, and what still held it (for a Warning Event on it).
    Pass {
        warnings: Vec<String>,
        released: Option<(Uid, String)>,
    },
    /// It is refused with `message`. `drop_owners`: the owners of a protected object that are
    /// going, whose references to drop so that no collector retries its DELETE forever.
    Refuse {
        message: String,
        drop_owners: Vec<Uid>,
        /// Which guard refused.
        guard: Guard,
    },
}

impl Judgement {
    /// It goes ahead, with nothing to say.
    pub fn pass() -> Self {
        Self::Pass {
            warnings: Vec::new(),
            released: None,
        }
    }

    fn refuse(guard: Guard, message: String) -> Self {
        Self::Refuse {
            message,
            drop_owners: Vec::new(),
            guard,
        }
    }
}

/// The guard that refused a DELETE: a closed set, whose names are the metric labels of the
/// DELETEs refused ([`crate::webhook::admit::Case::Refused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// The object, or one its cascade would delete, is protected.
    Protected,
    /// Its cascade would delete more than its limit.
    CascadeLimit,
    /// A finalizer handler's hold keeps it.
    HeldForHandler,
    /// A guard applies but it could not be judged: the graph is still being listed, or its
    /// cascade is larger than can be judged within the time left ([`Judging::budget`]).
    Unjudged,
}

impl Guard {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Protected => "refused_protected",
            Self::CascadeLimit => "refused_cascade_limit",
            Self::HeldForHandler => "held_for_handler",
            Self::Unjudged => "refused_unjudged",
        }
    }
}

/// The bounds the guards keep, from syncgc's flags.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bounds {
    /// The cascade limit of objects without `syncgc.io/max-cascade` (`None`: no limit).
    pub max_cascade: Option<usize>,
    /// The collector's timeouts, which bound every hold.
    pub timeouts: Option<Timeouts>,
}

/// What a judgement may rely on, besides the graph and the DELETE.
#[derive(Debug, Clone, Copy)]
pub struct Judging {
    /// Now, in seconds since the epoch.
    pub now: i64,
    /// Whether every watch has listed once: before, the graph may miss objects and owners.
    pub synced: bool,
    /// The most objects the cascade model may be run on within the time left to answer.
    pub budget: usize,
}

/// What the cascade model costs per object of the tree it copies and runs, with room to spare
/// (the guards bench measures about 4.5 µs): what turns the time left into [`Judging::budget`].
pub const MODEL_COST: std::time::Duration = std::time::Duration::from_micros(6);

impl Judging {
    /// The budget of a judgement that has `left` to answer.
    pub fn budget_for(left: std::time::Duration) -> usize {
        usize::try_from(left.as_nanos() / MODEL_COST.as_nanos().max(1)).unwrap_or(usize::MAX)
    }
}

/// Judges `delete`, whose tree in the graph is `below` (walked once, only if a guard needs
/// it); `kind` names the graph's resources; `needs` is what each finalizer handler needs to
/// act.
pub fn judge(
    below: &Below,
    kind: impl Fn(ResourceId) -> String,
    needs: &Needs,
    delete: &Delete,
    bounds: &Bounds,
    judging: Judging,
) -> Judgement {
    let now = judging.now;
    let graph = below.graph();
    let node = graph.node(delete.uid);
    if delete.protected {
        return protected(graph, delete, node, bounds, judging);
    }
    let mut warnings = Vec::new();
    let mut released = None;
    if graph.handlers().len() > 0 {
        match hold(graph, &kind, needs, delete, bounds, now) {
            Some(HoldSays::Refuse(message)) => {
                return Judgement::refuse(Guard::HeldForHandler, message);
            }
            Some(HoldSays::TimedOut { handler, note }) => {
                warnings.push(note.clone());
                released = Some((handler, note));
            }
            None => {}
        }
    }
    let limit = delete.max_cascade.or(bounds.max_cascade);
    let guarded = limit.is_some() || graph.protected().len() > 0;
    let admitted = delete
        .namespace
        .is_some_and(|ns| graph.namespace_deleted_at(ns).is_some())
        || node.is_some_and(|n| n.owners.iter().any(|l| graph.going(l.uid)));
    if !guarded || admitted {
        return Judgement::Pass { warnings, released };
    }
    let orphaning = !delete.namespace_object && delete.propagation == Propagation::Orphan;
    if !judging.synced && !orphaning {
        return Judgement::refuse(
            Guard::Unjudged,
            format!(
                "syncgc cannot judge the DELETE of {} yet: it is still listing the cluster, and \
                 a guard applies (a cascade limit, or protected objects). Retry in a few seconds",
                delete.described
            ),
        );
    }
    // Within its limit whatever the model says (a cascade deletes at most the tree), and
    // nothing protected below it: no need to run it.
    let tree = below.count();
    let reaches_protected = !delete.namespace_object && protected_below(below);
    if !delete.namespace_object && !reaches_protected {
        match limit {
            None => return Judgement::Pass { warnings, released },
            Some(limit) if tree <= limit => {
                warnings.push(format!(
                    "syncgc: this DELETE deletes at most {tree} objects, within the cascade \
                     limit of {limit}"
                ));
                return Judgement::Pass { warnings, released };
            }
            Some(_) => {}
        }
    }
    let modelled =
        !delete.namespace_object && !orphaning && !graph.dependents(delete.uid).is_empty();
    if modelled && tree > judging.budget {
        return Judgement::refuse(
            Guard::Unjudged,
            format!(
                "syncgc cannot judge the DELETE of {} within the webhook's timeout: {tree} \
                 objects depend on it, more than the {} it can judge in the time left, and a \
                 guard applies ({}). Delete its dependents in parts first, or remove the guard",
                delete.described,
                judging.budget,
                if reaches_protected {
                    "a protected object is below it"
                } else {
                    "a cascade limit"
                },
            ),
        );
    }
    let deleted = if delete.namespace_object {
        graph.in_namespace(delete.name).collect()
    } else if !modelled {
        Vec::new()
    } else {
        let (outcome, _) = cascade::on_copy(below, delete.propagation);
        outcome.sent().collect::<Vec<_>>()
    };
    if let Some(reached) = deleted
        .iter()
        .find(|uid| graph.guards(**uid).is_some_and(|g| g.protected))
    {
        return Judgement::refuse(
            Guard::Protected,
            format!(
                "the DELETE of {} would delete {}, which is protected (syncgc.io/protected: \
             \"true\"): {}. Delete it with propagationPolicy=Orphan, or remove the \
             annotation from the protected object first",
                delete.described,
                describe(graph, &kind, *reached),
                path(below, &kind, delete, *reached),
            ),
        );
    }
    if let Some(limit) = limit {
        let by_kind = by_kind(graph, &kind, &deleted);
        let counted = by_kind
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ");
        if deleted.len() > limit {
            return Judgement::refuse(
                Guard::CascadeLimit,
                format!(
                    "the DELETE of {} would delete {} objects ({counted}), more than its cascade \
                 limit of {limit} ({}). See them with `{}`; raise or remove the limit to delete it",
                    delete.described,
                    deleted.len(),
                    if delete.max_cascade.is_some() {
                        "syncgc.io/max-cascade"
                    } else {
                        "syncgc's --max-cascade"
                    },
                    plan_command(delete),
                ),
            );
        }
        warnings.push(format!(
            "syncgc: this DELETE deletes {} objects{}, within the cascade limit of {limit}",
            deleted.len(),
            if counted.is_empty() {
                String::new()
            } else {
                format!(" ({counted})")
            }
        ));
    }
    Judgement::Pass { warnings, released }
}

/// The guards' verdict on a DELETE that syncgc's collector sends itself (a step of a cascade
/// already admitted, a sibling of a protected object in a namespace being deleted), judged in
/// the process, by the same rules, as the webhook would judge it: from 1.28 on such DELETEs do
/// not reach the webhook (see [`crate::webhook::registration`]). `None`: `uid` is not in the
/// graph.
pub fn judge_own(
    graph: &Graph,
    kind: impl Fn(ResourceId) -> String,
    needs: &Needs,
    uid: Uid,
    propagation: Propagation,
    bounds: &Bounds,
    now: i64,
) -> Option<Judgement> {
    let node = graph.node(uid)?;
    let kind_name = node.resource.map(&kind).unwrap_or_default();
    let delete = Delete {
        uid,
        described: describe(graph, &kind, uid),
        kind: &kind_name,
        namespace: node.namespace(),
        name: &node.name,
        namespace_object: false,
        protected: graph.guards(uid).is_some_and(|g| g.protected),
        max_cascade: None,
        propagation,
    };
    let judging = Judging {
        now,
        synced: true,
        budget: usize::MAX,
    };
    let below = Below::new(graph, uid);
    Some(judge(&below, kind, needs, &delete, bounds, judging))
}

/// The `syncgc plan` command that lists what the DELETE of `delete` would delete.
fn plan_command(delete: &Delete) -> String {
    let mut command = format!("syncgc plan {}/{}", delete.kind.to_lowercase(), delete.name);
    if let Some(ns) = delete.namespace.filter(|ns| !ns.is_empty()) {
        let _ = write!(command, " -n {ns}");
    }
    command
}

/// Whether a protected object is among the objects `below` the DELETE's: looked for up from
/// each protected object where they are fewer than the tree, else down the tree.
fn protected_below(below: &Below) -> bool {
    let (graph, uid) = (below.graph(), below.root());
    if graph.protected().len() == 0 {
        return false;
    }
    if graph.protected().len() > below.count() {
        return below
            .steps()
            .iter()
            .any(|d| graph.guards(d.uid).is_some_and(|g| g.protected));
    }
    let mut seen = std::collections::HashSet::new();
    let mut up: Vec<Uid> = graph.protected().filter(|p| *p != uid).collect();
    while let Some(next) = up.pop() {
        let Some(node) = graph.node(next) else {
            continue;
        };
        for owner in node.owners.iter() {
            if owner.uid == uid {
                return true;
            }
            if seen.insert(owner.uid) {
                up.push(owner.uid);
            }
        }
    }
    false
}

/// The refusal of a protected object's DELETE, with the references to drop when a collector
/// is deleting it because its owners are going. An owner of a served kind the graph has not
/// seen is gone only once every watch has listed (`synced`): before, it may be listed yet.
/// In a namespace being deleted (its DELETE let through while syncgc was away, or before the
/// object was protected) the refusal is bounded: see [`terminating::hold`].
fn protected(
    graph: &Graph,
    delete: &Delete,
    node: Option<&Node>,
    bounds: &Bounds,
    judging: Judging,
) -> Judgement {
    let synced = judging.synced;
    let hold = delete
        .namespace
        .and_then(|ns| Some((ns, terminating::hold(graph, ns, bounds.timeouts)?)));
    if let Some((namespace, (_, until))) = hold
        && judging.now >= until
    {
        return Judgement::Pass {
            warnings: vec![format!(
                "syncgc: {} is protected, but its namespace {namespace} is being deleted and \
                 the time a protected object holds it has passed: it goes with the namespace",
                delete.described
            )],
            released: None,
        };
    }
    let drop_owners: Vec<Uid> = node
        .into_iter()
        .flat_map(|n| n.owners.iter())
        .filter(|l| {
            graph.going(l.uid) || (synced && l.served && !graph.node(l.uid).is_some_and(Node::seen))
        })
        .map(|l| l.uid)
        .collect();
    let mut message = match hold {
        Some((namespace, (since, until))) => format!(
            "{} is protected (syncgc.io/protected: \"true\") and its namespace {namespace} is \
             being deleted: it holds the namespace for at most {}s more ({}s after its \
             deletion), then goes with it; remove the annotation to let it go now",
            delete.described,
            until - judging.now,
            until - since,
        ),
        None => format!(
            "{} is protected (syncgc.io/protected: \"true\"): remove the annotation to delete it",
            delete.described
        ),
    };
    if !drop_owners.is_empty() {
        message.push_str(
            "; its references to the owners being deleted are removed instead, so that no \
             garbage collector deletes it",
        );
    }
    Judgement::Refuse {
        message,
        drop_owners,
        guard: Guard::Protected,
    }
}

/// What a finalizer handler's hold says of a DELETE: refused while it lasts, or let through
/// with a note once it has timed out.
enum HoldSays {
    Refuse(String),
    TimedOut { handler: Uid, note: String },
}

/// Whether `delete` is a step of the teardown of a finalizer handler while objects carrying
/// its finalizers are being deleted: the DELETE of the handler itself, or of an object below
/// it while the handler is going or their namespace is being deleted, or of an object the
/// handler needs to act (its account, bindings, configuration, Services: see
/// [`crate::gc::needs`]). A DELETE of a Pod the handler's controllers scale away or replace
/// (the handler is not going) is never held.
fn hold(
    graph: &Graph,
    kind: &impl Fn(ResourceId) -> String,
    needs: &Needs,
    delete: &Delete,
    bounds: &Bounds,
    now: i64,
) -> Option<HoldSays> {
    let (handler, needed) = match handler_above(graph, delete.uid) {
        Some(handler) => (handler, None),
        None => {
            let (handler, needed) = needs.handler_of(delete.uid)?;
            (handler, Some(needed))
        }
    };
    let handler_node = graph.node(handler);
    let terminating = |ns: Option<&str>| ns.and_then(|ns| graph.namespace_deleted_at(ns));
    let teardown = handler == delete.uid
        || needed.is_some()
        || terminating(delete.namespace).is_some()
        || handler_node.is_none_or(|n| n.is(Flags::VIRTUAL) || n.is(Flags::DELETING));
    if !teardown {
        return None;
    }
    let handles = graph.guards(handler)?.handles.as_ref()?;
    let scope = handler_node.and_then(Node::namespace);
    let mut pending: Vec<(Uid, i64)> = graph
        .guarded()
        .filter(|(uid, g)| *uid != handler && g.carries_any(&handles.finalizers))
        .filter_map(|(uid, _)| {
            let node = graph.node(uid)?;
            if !handles.cluster_wide && node.namespace() != scope {
                return None;
            }
            let since = graph.deleted_at(uid).or(terminating(node.namespace()))?;
            Some((uid, since))
        })
        .collect();
    if pending.is_empty() {
        return None;
    }
    pending.sort_by_key(|(_, since)| *since);
    let since = pending[0].1;
    let timeout = terminating::hold_timeout(bounds.timeouts, pending.len());
    let finalizers = handles.finalizers.join(", ");
    let examples = pending
        .iter()
        .take(3)
        .map(|(uid, _)| describe(graph, kind, *uid))
        .collect::<Vec<_>>()
        .join(", ");
    let held = format!(
        "{} object(s) carrying {finalizers} are being deleted ({examples}{})",
        pending.len(),
        if pending.len() > 3 { ", …" } else { "" }
    );
    let handler_described = describe(graph, kind, handler);
    if now < since + timeout {
        let stays = match &needed {
            Some(needed) => format!("it needs {} to act, which stays", needed.described),
            None => "its Pods stay".to_owned(),
        };
        return Some(HoldSays::Refuse(format!(
            "held by syncgc: {handler_described} handles {finalizers} \
             (syncgc.io/handles-finalizers) and {held}; {stays} until those are gone, or for \
             at most {timeout}s after the first was deleted. Retry then",
        )));
    }
    Some(HoldSays::TimedOut {
        handler,
        note: format!(
            "the hold of {handler_described} ended after {timeout}s though {held}: they may \
             stay Terminating without a handler"
        ),
    })
}

/// The finalizer handler that `uid` is or belongs to: itself, or the first owner above it
/// (through its owners' owners) that handles finalizers.
fn handler_above(graph: &Graph, uid: Uid) -> Option<Uid> {
    let mut frontier = vec![uid];
    let mut seen = vec![uid];
    while let Some(next) = frontier.pop() {
        if graph.guards(next).is_some_and(|g| g.handles.is_some()) {
            return Some(next);
        }
        for link in graph.node(next).into_iter().flat_map(|n| n.owners.iter()) {
            if !seen.contains(&link.uid) && seen.len() < 64 {
                seen.push(link.uid);
                frontier.push(link.uid);
            }
        }
    }
    None
}

/// `Kind namespace/name` of a node.
pub fn describe(graph: &Graph, kind: &impl Fn(ResourceId) -> String, uid: Uid) -> String {
    let Some(node) = graph.node(uid) else {
        return uid.to_string();
    };
    let kind = node
        .resource
        .map(kind)
        .unwrap_or_else(|| "object".to_owned());
    crate::api::described(&kind, node.namespace(), &node.name)
}

/// How the DELETE of `delete` reaches `reached`: the chain of owners between them.
fn path(
    below: &Below,
    kind: &impl Fn(ResourceId) -> String,
    delete: &Delete,
    reached: Uid,
) -> String {
    if delete.namespace_object {
        return format!("it is in the namespace {}", delete.name);
    }
    let chain = below.path_to(reached);
    let names: Vec<String> = chain
        .iter()
        .map(|u| describe(below.graph(), kind, *u))
        .collect();
    format!("the path is {}", names.join(" → "))
}

/// The objects of `uids`, counted by kind.
fn by_kind(
    graph: &Graph,
    kind: &impl Fn(ResourceId) -> String,
    uids: &[Uid],
) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for uid in uids {
        let name = graph
            .node(*uid)
            .and_then(|n| n.resource)
            .map_or_else(|| "object".to_owned(), kind);
        *counts.entry(name).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Coordinates, Guards, Handles, Mode, Observed};
    use std::time::Duration;

    const CM: ResourceId = ResourceId::new(0);
    const NOW: i64 = 10_000;

    /// A judgement at `now` on a listed graph, with room for any tree.
    fn at(now: i64) -> Judging {
        Judging {
            now,
            synced: true,
            budget: usize::MAX,
        }
    }

    fn uid(n: u128) -> Uid {
        Uid::from_u128(n)
    }

    fn bounds(max_cascade: Option<usize>) -> Bounds {
        Bounds {
            max_cascade,
            timeouts: Some(Timeouts {
                base: Duration::from_secs(60),
                per_dependent: Duration::from_secs(1),
                max: Duration::from_secs(600),
            }),
        }
    }

    fn with(n: u128, owners: &[u128], flags: Flags, guards: Guards) -> Observed {
        Observed {
            guards,
            deleted_at: flags.contains(Flags::DELETING).then_some(NOW - 5),
            ..Observed::config_map(n, owners, flags)
        }
    }

    fn protected() -> Guards {
        Guards {
            protected: true,
            ..Guards::default()
        }
    }

    fn graph(objects: impl IntoIterator<Item = Observed>) -> Graph {
        let mut graph = Graph::new(Mode::Standalone);
        for object in objects {
            graph.apply(CM, object);
        }
        graph
    }

    fn delete(n: u128) -> Delete<'static> {
        Delete {
            uid: uid(n),
            described: "ConfigMap ns/target".to_owned(),
            kind: "ConfigMap",
            namespace: Some("ns"),
            name: "target",
            namespace_object: false,
            protected: false,
            max_cascade: None,
            propagation: Propagation::Background,
        }
    }

    fn judged(graph: &Graph, delete: &Delete, bounds: &Bounds) -> Judgement {
        judge(
            &Below::new(graph, delete.uid),
            |_| "ConfigMap".to_owned(),
            &Needs::default(),
            delete,
            bounds,
            at(NOW),
        )
    }

    fn refused(verdict: &Judgement, guard: Guard, says: &[&str]) {
        let Judgement::Refuse {
            message, guard: by, ..
        } = verdict
        else {
            panic!("not refused: {verdict:?}");
        };
        assert_eq!(*by, guard, "{message}");
        for part in says {
            assert!(message.contains(part), "{part:?} not in {message:?}");
        }
    }

    fn passed(verdict: &Judgement) -> &[String] {
        match verdict {
            Judgement::Pass { warnings, .. } => warnings,
            Judgement::Refuse { message, .. } => panic!("refused: {message}"),
        }
    }

    #[test]
    fn a_protected_object_is_never_deleted_and_loses_its_references_to_owners_going() {
        let none = Guards::default();
        let g = graph([
            with(1, &[], Flags::DELETING | Flags::FOREGROUND, none.clone()),
            with(2, &[], Flags::empty(), none),
            with(3, &[1, 2], Flags::empty(), protected()),
        ]);
        let verdict = judged(
            &g,
            &Delete {
                protected: true,
                ..delete(3)
            },
            &bounds(None),
        );
        refused(
            &verdict,
            Guard::Protected,
            &["is protected", "remove the annotation"],
        );
        let Judgement::Refuse { drop_owners, .. } = verdict else {
            unreachable!()
        };
        assert_eq!(drop_owners, vec![uid(1)], "only the owner that is going");
    }

    #[test]
    fn a_cascade_that_reaches_a_protected_object_is_refused_with_its_path() {
        let none = Guards::default();
        let g = graph([
            with(1, &[], Flags::empty(), none.clone()),
            with(2, &[1], Flags::empty(), none.clone()),
            with(3, &[2], Flags::empty(), protected()),
            with(4, &[], Flags::empty(), none.clone()),
            // Kept by another owner: never reached.
            with(5, &[4, 9], Flags::empty(), protected()),
            with(9, &[], Flags::empty(), none),
        ]);
        refused(
            &judged(&g, &delete(1), &bounds(None)),
            Guard::Protected,
            &[
                "ConfigMap ns/o3",
                "the path is ConfigMap ns/o1 → ConfigMap ns/o2 → ConfigMap ns/o3",
            ],
        );
        let orphaning = Delete {
            propagation: Propagation::Orphan,
            ..delete(1)
        };
        assert!(passed(&judged(&g, &orphaning, &bounds(None))).is_empty());
        assert!(passed(&judged(&g, &delete(4), &bounds(None))).is_empty());
    }

    #[test]
    fn what_cannot_be_judged_is_refused_not_skipped() {
        let none = Guards::default();
        let g = graph(
            std::iter::once(with(1, &[], Flags::empty(), none.clone()))
                .chain((2..=6).map(|n| with(n, &[1], Flags::empty(), none.clone()))),
        );
        let limited = Delete {
            max_cascade: Some(4),
            ..delete(1)
        };
        let judge_with = |delete: &Delete, judging| {
            judge(
                &Below::new(&g, delete.uid),
                |_| "ConfigMap".to_owned(),
                &Needs::default(),
                delete,
                &bounds(None),
                judging,
            )
        };
        // Still listing: the graph may miss dependents.
        let listing = Judging {
            synced: false,
            ..at(NOW)
        };
        refused(
            &judge_with(&limited, listing),
            Guard::Unjudged,
            &["still listing", "Retry"],
        );
        // An orphaning DELETE deletes nothing: nothing to judge.
        let orphaning = Delete {
            propagation: Propagation::Orphan,
            ..limited.clone()
        };
        passed(&judge_with(&orphaning, listing));
        // A tree larger than the time left allows.
        let short = Judging {
            budget: 4,
            ..at(NOW)
        };
        refused(
            &judge_with(&limited, short),
            Guard::Unjudged,
            &[
                "5 objects depend on it",
                "more than the 4",
                "a cascade limit",
            ],
        );
        // Within its limit, or unguarded: the model is not needed, whatever the budget.
        let within = Delete {
            max_cascade: Some(5),
            ..delete(1)
        };
        let none_left = Judging {
            budget: 0,
            ..at(NOW)
        };
        passed(&judge_with(&within, none_left));
        passed(&judge_with(&delete(1), none_left));
    }

    #[test]
    fn a_protected_object_below_is_found_from_either_side() {
        let none = Guards::default();
        // One protected object under a tree of five: walked up from it.
        let g = graph([
            with(1, &[], Flags::empty(), none.clone()),
            with(2, &[1], Flags::empty(), none.clone()),
            with(3, &[2], Flags::empty(), none.clone()),
            with(4, &[3], Flags::empty(), protected()),
            with(5, &[1], Flags::empty(), none.clone()),
            with(6, &[], Flags::empty(), none.clone()),
        ]);
        assert!(protected_below(&Below::new(&g, uid(1))));
        assert!(protected_below(&Below::new(&g, uid(3))));
        assert!(!protected_below(&Below::new(&g, uid(5))));
        assert!(!protected_below(&Below::new(&g, uid(6))));
        assert!(
            !protected_below(&Below::new(&g, uid(4))),
            "not below itself"
        );
        // More protected objects than the tree: walked down the tree.
        let g = graph([
            with(1, &[], Flags::empty(), none.clone()),
            with(2, &[1], Flags::empty(), protected()),
            with(7, &[], Flags::empty(), protected()),
            with(8, &[], Flags::empty(), protected()),
        ]);
        assert!(protected_below(&Below::new(&g, uid(1))));
        assert!(!protected_below(&Below::new(&g, uid(7))));
    }

    #[test]
    fn a_cascade_over_its_limit_is_refused_with_its_counts_and_the_plan_command() {
        let none = Guards::default();
        let g = graph(
            std::iter::once(with(1, &[], Flags::empty(), none.clone()))
                .chain((2..=6).map(|n| with(n, &[1], Flags::empty(), none.clone()))),
        );
        let limited = |limit| Delete {
            max_cascade: Some(limit),
            ..delete(1)
        };
        refused(
            &judged(&g, &limited(4), &bounds(None)),
            Guard::CascadeLimit,
            &[
                "5 objects (5 ConfigMap)",
                "limit of 4 (syncgc.io/max-cascade)",
                "syncgc plan configmap/target -n ns",
            ],
        );
        let warnings = passed(&judged(&g, &limited(5), &bounds(None))).to_vec();
        assert!(
            warnings[0].contains("within the cascade limit of 5"),
            "{warnings:?}"
        );
        // The flag's default, and the annotation over it.
        refused(
            &judged(&g, &delete(1), &bounds(Some(2))),
            Guard::CascadeLimit,
            &["--max-cascade"],
        );
        passed(&judged(&g, &limited(10), &bounds(Some(2))));
        // A step of a cascade admitted at its root is not counted again.
        let g = graph([
            with(1, &[], Flags::DELETING | Flags::FOREGROUND, none.clone()),
            with(2, &[1], Flags::empty(), none.clone()),
            with(3, &[2], Flags::empty(), none.clone()),
            with(4, &[2], Flags::empty(), none),
        ]);
        passed(&judged(&g, &delete(2), &bounds(Some(1))));
    }

    fn handler(finalizers: &str) -> Guards {
        Guards {
            handles: Some(Handles::parse(finalizers, None).unwrap()),
            ..Guards::default()
        }
    }

    fn carrying(finalizer: &str) -> Guards {
        Guards {
            foreign: vec![finalizer.into()],
            ..Guards::default()
        }
    }

    fn namespace(flags: Flags) -> Observed {
        Observed {
            namespace: None,
            coordinates: Coordinates::in_group("", "Namespace", "ns"),
            name: "ns".into(),
            ..with(100, &[], flags, Guards::default())
        }
    }

    #[test]
    fn a_handlers_pods_outlive_the_objects_it_finalizes_in_a_teardown_only() {
        let none = Guards::default();
        // 1 handles example.com/a; 2 (its ReplicaSet) owns the Pod 3; 9 carries the finalizer.
        let objects = |handler_flags, carried_flags, namespace_flags| {
            graph([
                namespace(namespace_flags),
                with(1, &[], handler_flags, handler("example.com/a")),
                with(2, &[1], Flags::empty(), none.clone()),
                with(3, &[2], Flags::empty(), none.clone()),
                with(9, &[], carried_flags, carrying("example.com/a")),
            ])
        };
        let p = bounds(None);
        // Scaled or replaced: never held.
        let g = objects(Flags::empty(), Flags::DELETING, Flags::empty());
        passed(&judged(&g, &delete(3), &p));
        // The handler itself, or its Pods while it goes.
        refused(
            &judged(&g, &delete(1), &p),
            Guard::HeldForHandler,
            &["handles example.com/a", "1 object(s)", "ConfigMap ns/o9"],
        );
        let g = objects(Flags::DELETING, Flags::DELETING, Flags::empty());
        refused(
            &judged(&g, &delete(3), &p),
            Guard::HeldForHandler,
            &["Retry"],
        );
        // Its namespace going: everything in it is being deleted.
        let g = objects(Flags::empty(), Flags::empty(), Flags::DELETING);
        refused(&judged(&g, &delete(3), &p), Guard::HeldForHandler, &[]);
        refused(&judged(&g, &delete(2), &p), Guard::HeldForHandler, &[]);
        // Nothing to finalize: no hold.
        let g = objects(Flags::DELETING, Flags::empty(), Flags::empty());
        passed(&judged(&g, &delete(3), &p));
        // Another finalizer: no hold.
        let g = graph([
            with(1, &[], Flags::DELETING, handler("example.com/b")),
            with(3, &[1], Flags::empty(), none),
            with(9, &[], Flags::DELETING, carrying("example.com/a")),
        ]);
        passed(&judged(&g, &delete(3), &p));
    }

    #[test]
    fn a_hold_ends_by_its_timeout_with_a_warning() {
        let g = graph([
            with(1, &[], Flags::DELETING, handler("example.com/a")),
            with(3, &[1], Flags::empty(), Guards::default()),
            with(9, &[], Flags::DELETING, carrying("example.com/a")),
        ]);
        let p = bounds(None);
        // 60 s + 1 s for one object, from its deletion 5 s before NOW.
        let needs = Needs::default();
        let at = |now| {
            judge(
                &Below::new(&g, uid(3)),
                |_| "ConfigMap".to_owned(),
                &needs,
                &delete(3),
                &p,
                at(now),
            )
        };
        refused(&at(NOW + 55), Guard::HeldForHandler, &["at most 61s"]);
        let Judgement::Pass { warnings, released } = at(NOW + 57) else {
            panic!("held past its timeout");
        };
        assert_eq!(released.as_ref().map(|r| r.0), Some(uid(1)));
        assert!(warnings[0].contains("ended after 61s"), "{warnings:?}");
    }
}
