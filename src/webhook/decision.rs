//! What syncgc decides of one admission review, from the request and one read of the graph,
//! in which the tree below a DELETE's object is walked at most once ([`Below`]): on `/guard`
//! the guards' verdict ([`guard::judge`]), on `/mutate` [`admit`]'s decision with a dry run's
//! preview; on both, what the record of causes keeps of a DELETE let through ([`Pending`]).
//! Nothing here writes: the handler parses, asks here, makes the effects and answers.

use kube::api::ApiResource;

use super::admit::{self, Decision, Policy, admit};
use super::review::{Operation, Request};
use crate::api::{Propagation, Target};
use crate::gc::causes::{Causes, Done, Entry, Pending};
use crate::gc::needs::Needs;
use crate::gc::{cascade, guard};
use crate::graph::{Below, Graph, ResourceId, Uid};
use crate::names::{MAX_CASCADE_ANNOTATION, PROTECTED_ANNOTATION};

/// What a decision relies on besides the request and the graph.
pub struct Grounds<'a> {
    pub policy: &'a Policy,
    /// What each finalizer handler needs to act.
    pub needs: &'a Needs,
    /// The record of causes (`None`: not recorded).
    pub causes: Option<&'a Causes>,
    /// Whether every watch has listed once.
    pub synced: bool,
    /// Now, in seconds since the epoch (the apiserver's clock, [`crate::api::clock`]).
    pub now: i64,
}

/// The kind of each of the graph's resources.
type Kinds<'k> = &'k dyn Fn(ResourceId) -> String;

/// The guards' verdict on the DELETE `request` (a DELETE, or an eviction as its Pod's), given
/// `budget` objects the cascade model may run on (`None`: no guard can apply, and none is
/// asked), and what the record keeps of it when it passes.
pub fn guarded(
    graph: &Graph,
    kind: Kinds,
    grounds: &Grounds,
    request: &Request,
    budget: Option<usize>,
) -> (guard::Judgement, Option<Pending>) {
    let below = object_uid(request).map(|uid| Below::new(graph, uid));
    let verdict = match (&below, budget, Judged::of(request)) {
        (Some(below), Some(budget), Some(judged)) => {
            let delete = judged.delete(request, below.root());
            let judging = guard::Judging {
                now: grounds.now,
                synced: grounds.synced,
                budget,
            };
            let bounds = grounds.policy.bounds();
            guard::judge(below, kind, grounds.needs, &delete, &bounds, judging)
        }
        _ => guard::Judgement::pass(),
    };
    let pending = match verdict {
        guard::Judgement::Pass { .. } => below.and_then(|b| pending(&b, kind, grounds, request)),
        guard::Judgement::Refuse { .. } => None,
    };
    (verdict, pending)
}

/// [`admit`]'s decision on `request` through `/mutate`, with a dry run's preview of an armed
/// object's DELETE in its warnings, and what the record keeps of a DELETE let through (once
/// the answer allows it).
pub fn mutated(
    graph: &Graph,
    kind: Kinds,
    grounds: &Grounds,
    request: &Request,
) -> (Decision, Option<Pending>) {
    let below = object_uid(request).map(|uid| Below::new(graph, uid));
    // Counted for an opted-in object's DELETE only: its warnings are the only ones to say it.
    let counted = request.old_meta().is_some_and(|m| {
        admit::opted_in(m)
            || m.finalizers()
                .iter()
                .any(|f| f == crate::names::SYNCHRONOUS_FINALIZER)
    });
    let dependents = match &below {
        Some(below) if counted => below.count(),
        _ => 0,
    };
    let mut decision = admit(request, grounds.policy, dependents);
    if let Some(below) = below.as_ref().filter(|_| decision.deletes_armed())
        && admit::dry_run(request)
    {
        let preview = cascade::preview(below, admit::propagation(request), kind);
        decision.warnings.extend(admit::dry_run_warnings(
            request,
            grounds.policy,
            dependents,
            &preview,
        ));
    }
    let pending = below.and_then(|b| pending(&b, kind, grounds, request));
    (decision, pending)
}

/// Whether `request` is a DELETE through `/mutate` that needs the graph: one of an object.
pub fn reads_graph(request: &Request) -> bool {
    object_uid(request).is_some()
}

/// The uid of the object of a DELETE; `None` for anything else.
fn object_uid(request: &Request) -> Option<Uid> {
    if request.operation != Operation::Delete {
        return None;
    }
    request
        .old_meta()
        .and_then(|m| m.uid.as_deref())
        .map(Uid::parse)
}

/// Whether the guards judge `request` ([`Judged`]).
pub fn judged(request: &Request) -> bool {
    Judged::of(request).is_some()
}

/// The DELETE of an object the guards judge: one not being deleted yet (a Pod's last DELETE,
/// from its kubelet, was judged when its deletion was admitted), unless it names a
/// propagation that deletes what its `orphan` finalizer would have kept.
struct Judged {
    /// The DELETE of a Namespace: everything in it goes.
    namespace_object: bool,
}

impl Judged {
    fn of(request: &Request) -> Option<Self> {
        let meta = request.old_meta()?;
        let judged = meta.deletion_timestamp.is_none()
            || (meta.has_finalizer(crate::names::ORPHAN_FINALIZER)
                && admit::names_propagation(request)
                && admit::propagation(request) != Propagation::Orphan);
        (request.operation == Operation::Delete && judged).then(|| Self {
            namespace_object: namespace_object(request),
        })
    }

    /// The DELETE as the guards read it: the object, where it is, what it says of itself.
    fn delete<'r>(&self, request: &'r Request, uid: Uid) -> guard::Delete<'r> {
        let meta = request.old_meta();
        let annotation = |key| meta.and_then(|m| m.annotation(key));
        // A DELETE of a collection names no object: its items' names are in the objects.
        let name = meta
            .and_then(|m| m.name.as_deref())
            .unwrap_or(&request.name);
        // The review of a Namespace names it as its own namespace.
        let namespace = (!self.namespace_object)
            .then_some(request.namespace.as_deref())
            .flatten()
            .filter(|ns| !ns.is_empty());
        guard::Delete {
            uid,
            described: crate::api::described(&request.kind.kind, namespace, name),
            kind: &request.kind.kind,
            namespace,
            name,
            namespace_object: self.namespace_object,
            protected: crate::graph::protects(annotation(PROTECTED_ANNOTATION)),
            max_cascade: crate::annotations::max_cascade(annotation(MAX_CASCADE_ANNOTATION)),
            propagation: admit::propagation(request),
        }
    }
}

/// Whether `request` is about a Namespace.
fn namespace_object(request: &Request) -> bool {
    request.kind.group.is_empty() && request.kind.kind == "Namespace"
}

/// What the record keeps of the DELETE of `below`'s root let through (not a dry run): who
/// sent it, and the owner or namespace whose going made it a step of a cascade — held until
/// the graph confirms the deletion, since a review alone proves nothing (see
/// [`crate::gc::causes`]). `None`: nothing to record.
fn pending(below: &Below, kind: Kinds, grounds: &Grounds, request: &Request) -> Option<Pending> {
    let causes = grounds.causes?;
    if admit::dry_run(request) {
        return None;
    }
    let meta = request.old_meta()?;
    let uid = meta.uid.clone()?;
    // A DELETE of an object being deleted already (a Pod's last, from its kubelet) keeps the
    // cause of the first.
    if meta.deletion_timestamp.is_some() && causes.has(below.root()) {
        return None;
    }
    let namespace_object = namespace_object(request);
    let name = meta.name.clone().unwrap_or_else(|| request.name.clone());
    // The root of a cascade, unless it orphans: followed to its end, for its summary Event.
    let root = (admit::propagation(request) != Propagation::Orphan)
        .then(|| target_of(request, uid.clone()))
        .flatten()
        .map(|root| Target {
            namespace: root.namespace.filter(|_| !namespace_object),
            ..root
        });
    let entry = Entry {
        uid,
        kind: request.kind.kind.clone(),
        namespace: request
            .namespace
            .clone()
            .filter(|ns| !ns.is_empty() && !namespace_object),
        name: name.clone(),
        action: Done::Deleted,
        by: request.user_info.username.clone(),
        at: grounds.now,
        cause: None,
    };
    let namespace = namespace_object.then_some(name.as_str());
    Some(Pending::of(below, kind, entry, root, namespace))
}

/// The object of `request`, with `uid`, named as its object names it (a DELETE of a
/// collection names its items there only); `None` when a part of it is not a path segment the
/// apiserver gives (a review posted by someone else), so that no request goes elsewhere.
pub fn target_of(request: &Request, uid: String) -> Option<Target> {
    let name = request
        .old_meta()
        .and_then(|m| m.name.clone())
        .unwrap_or_else(|| request.name.clone());
    let namespace = request.namespace.clone().filter(|ns| !ns.is_empty());
    let resource = &request.resource;
    let segments = [
        Some(name.as_str()),
        namespace.as_deref(),
        Some(resource.resource.as_str()),
        Some(resource.version.as_str()),
        (!resource.group.is_empty()).then_some(resource.group.as_str()),
    ];
    if !segments.into_iter().flatten().all(path_segment) {
        tracing::warn!(
            name,
            namespace = namespace.as_deref().unwrap_or(""),
            resource = %resource.resource,
            "a review names an object that is no path segment: nothing done for it"
        );
        return None;
    }
    Some(Target {
        resource: ApiResource {
            group: resource.group.clone(),
            version: resource.version.clone(),
            api_version: if resource.group.is_empty() {
                resource.version.clone()
            } else {
                format!("{}/{}", resource.group, resource.version)
            },
            kind: request.kind.kind.clone(),
            plural: resource.resource.clone(),
        },
        namespace,
        name,
        uid,
    })
}

/// Whether `part` can stand in a request path as one segment: not empty, `.` or `..`, no
/// `/`, `%`, `?`, `#` or control character, and at most 1 KiB.
fn path_segment(part: &str) -> bool {
    !matches!(part, "" | "." | "..")
        && part.len() <= 1024
        && !part
            .chars()
            .any(|c| matches!(c, '/' | '%' | '?' | '#') || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::ORPHAN_FINALIZER;
    use crate::webhook::review;

    /// A DELETE of an object whose old object is `meta`, naming `policy` (if any).
    fn delete(meta: review::Metadata, policy: Option<&str>) -> review::Request {
        review::Request {
            operation: Operation::Delete,
            old_object: Some(review::ReviewedObject {
                metadata: Some(meta),
            }),
            options: policy.map(|p| review::Options {
                propagation_policy: Some(p.to_owned()),
                ..review::Options::default()
            }),
            ..review::Request::default()
        }
    }

    #[test]
    fn a_second_delete_is_judged_when_it_frees_what_orphan_kept() {
        let live = review::Metadata {
            uid: Some("u".into()),
            ..review::Metadata::default()
        };
        let terminating = |finalizers: &[&str]| review::Metadata {
            deletion_timestamp: Some("2026-01-01T00:00:00Z".into()),
            finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
            ..live.clone()
        };
        assert!(judged(&delete(live.clone(), None)));
        // A kubelet's last DELETE, or one that changes nothing: judged before.
        assert!(!judged(&delete(terminating(&[]), Some("Background"))));
        assert!(!judged(&delete(terminating(&[ORPHAN_FINALIZER]), None)));
        assert!(!judged(&delete(
            terminating(&[ORPHAN_FINALIZER]),
            Some("Orphan")
        )));
        // Orphaning, then a DELETE that deletes what orphan was keeping.
        for policy in ["Background", "Foreground"] {
            assert!(judged(&delete(
                terminating(&[ORPHAN_FINALIZER]),
                Some(policy)
            )));
        }
    }

    #[test]
    fn only_path_segments_name_an_object_to_write() {
        for good in ["web", "system:controller:x", "a.b-c_d", "ns-1"] {
            assert!(path_segment(good), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../secrets",
            "a%2Fb",
            "a?b",
            "a#b",
            "a\nb",
        ] {
            assert!(!path_segment(bad), "{bad:?}");
        }
        assert!(!path_segment(&"a".repeat(1025)));
    }
}
