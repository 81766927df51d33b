//! `syncgc explain KIND/NAME [-n NAMESPACE]`: what keeps an object from going. Reads the
//! cluster directly (not a running syncgc): the object, its finalizers and who removes each,
//! syncgc's deadline, and the tree of dependents still present, marking those that block and
//! why. [`report`] is pure; [`explain`] gathers what it needs.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DynamicObject, ListParams};

use k8s_openapi::api::core::v1::Event;

use crate::gc::discovery::{self, Aliases, Resource};
use crate::graph::{Coordinates, Flags, Order, OwnerLink, Uid, Wave};
use crate::names::{
    DEADLINE_ANNOTATION, DELETION_ORDER_ANNOTATION, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Reason,
    SYNCHRONOUS_FINALIZER,
};

/// An object as the report shows it.
#[derive(Debug, Clone)]
pub struct Object {
    /// Its API group ("" for the core group).
    pub group: String,
    pub kind: String,
    pub meta: ObjectMeta,
}

impl Object {
    fn title(&self) -> String {
        let name = self.meta.name.as_deref().unwrap_or_default();
        match &self.meta.namespace {
            Some(ns) => format!("{} {ns}/{name}", self.kind),
            None => format!("{} {name}", self.kind),
        }
    }

    fn finalizers(&self) -> &[String] {
        self.meta.finalizers.as_deref().unwrap_or_default()
    }

    /// As the graph knows it: under the group it is watched as.
    fn coordinates(&self, aliases: &Aliases) -> Coordinates {
        let api_version = if self.group.is_empty() {
            "v1".to_owned()
        } else {
            format!("{}/v1", self.group)
        };
        aliases.coordinates(
            &api_version,
            &self.kind,
            self.meta.name.as_deref().unwrap_or_default(),
        )
    }

    fn has(&self, finalizer: &str) -> bool {
        self.finalizers().iter().any(|f| f == finalizer)
    }
}

/// Who removes a finalizer.
pub fn remover(finalizer: &str) -> &'static str {
    match finalizer {
        SYNCHRONOUS_FINALIZER => "syncgc, once every dependent is gone or the deadline passes",
        FOREGROUND_FINALIZER => {
            "the garbage collector, once no dependent with blockOwnerDeletion is left"
        }
        ORPHAN_FINALIZER => "the garbage collector, once the dependents are orphaned",
        "kubernetes" => "the namespace controller, once the namespace is empty",
        _ => "another controller (not Kubernetes' garbage collector or syncgc)",
    }
}

/// The report on `object`, whose dependents (by owner uid) are in `dependents` and for which
/// syncgc's release barrier last said `barrier` (the note of its latest `SyncGCBarrier` Event);
/// and whether something keeps it from going (it is being deleted and still has finalizers).
pub fn report(
    object: &Object,
    dependents: &HashMap<String, Vec<Object>>,
    barrier: Option<&str>,
    aliases: &Aliases,
) -> (String, bool) {
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
            let _ = writeln!(out, "    {finalizer}: removed by {}", remover(finalizer));
        }
    }
    let mut seen = vec![uid.clone()];
    let mut tree = String::new();
    let blocking = tree_of(object, dependents, aliases, 4, &mut seen, &mut tree);
    if tree.is_empty() {
        let _ = writeln!(out, "  no dependents");
    } else {
        let _ = writeln!(out, "  dependents ({} blocking):", blocking);
        out.push_str(&tree);
    }
    let blocked = deleting.is_some() && !object.finalizers().is_empty();
    let waits = object.has(SYNCHRONOUS_FINALIZER) || object.has(FOREGROUND_FINALIZER);
    let direct: Vec<Object> = dependents
        .get(&uid)
        .into_iter()
        .flatten()
        .filter(|d| link(object, d, aliases).is_some())
        .cloned()
        .collect();
    if waits && let Some(order) = waves(&direct, dependents) {
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

/// The reference of `dependent` to `owner`, when it really refers to it as the collector sees
/// it ([`OwnerLink::reaches`], group aliases resolved): one with the owner's uid that names
/// another object, or a namespaced owner from elsewhere, is no dependency.
fn link(owner: &Object, dependent: &Object, aliases: &Aliases) -> Option<OwnerLink> {
    let uid = owner.meta.uid.as_deref().unwrap_or_default();
    let owner_at = owner.coordinates(aliases);
    dependent
        .meta
        .owner_references
        .iter()
        .flatten()
        .filter(|r| r.uid == uid)
        .map(|r| OwnerLink {
            uid: Uid::parse(&r.uid),
            coordinates: aliases.coordinates(&r.api_version, &r.kind, &r.name),
            block_owner_deletion: r.block_owner_deletion == Some(true),
        })
        .find(|link| {
            link.reaches(
                owner_at,
                owner.meta.namespace.as_deref(),
                dependent.meta.namespace.as_deref(),
            )
        })
}

/// Writes the dependents of `owner`, indented, and returns how many of its direct ones block
/// it.
fn tree_of(
    owner: &Object,
    dependents: &HashMap<String, Vec<Object>>,
    aliases: &Aliases,
    depth: usize,
    seen: &mut Vec<String>,
    out: &mut String,
) -> usize {
    let uid = owner.meta.uid.clone().unwrap_or_default();
    let mut blocking = 0;
    for dependent in dependents.get(&uid).into_iter().flatten() {
        let dependent_uid = dependent.meta.uid.clone().unwrap_or_default();
        let link = link(owner, dependent, aliases);
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
            blocking += 1;
            if dependent.has(SYNCHRONOUS_FINALIZER) {
                why.push("armed: it waits for its own dependents".to_owned());
            }
            let others: Vec<&String> = dependent
                .finalizers()
                .iter()
                .filter(|f| *f != SYNCHRONOUS_FINALIZER)
                .collect();
            if !others.is_empty() {
                why.push(format!(
                    "its finalizers: {}",
                    others
                        .iter()
                        .map(|f| f.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        let state = if dependent.meta.deletion_timestamp.is_some() {
            " (being deleted)"
        } else {
            ""
        };
        let marks = if link.is_none() {
            "  (refers to the owner's uid, but not to it: another name, kind or group, or \
             another namespace; not a dependent)"
                .to_owned()
        } else if why.is_empty() {
            String::new()
        } else {
            format!("  BLOCKS: {}", why.join("; "))
        };
        let _ = writeln!(out, "{:depth$}{}{state}{marks}", "", dependent.title());
        if link.is_none() || seen.contains(&dependent_uid) {
            continue;
        }
        seen.push(dependent_uid);
        tree_of(dependent, dependents, aliases, depth + 2, seen, out);
    }
    blocking
}

/// The deletion order of a waiting owner's `direct` dependents, when they carry one: the
/// waves left, the one in progress (the highest), and what holds each of its objects.
fn waves(direct: &[Object], dependents: &HashMap<String, Vec<Object>>) -> Option<String> {
    let wave_of = |o: &Object| {
        Order::of(
            o.meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(DELETION_ORDER_ANNOTATION))
                .map(String::as_str),
        )
    };
    if direct.iter().all(|o| wave_of(o) == Order::default()) {
        return None;
    }
    let mut counts: Vec<(Wave, usize)> = Vec::new();
    for dependent in direct {
        let wave = wave_of(dependent).wave();
        match counts.iter_mut().find(|(w, _)| *w == wave) {
            Some((_, n)) => *n += 1,
            None => counts.push((wave, 1)),
        }
    }
    counts.sort_by_key(|(wave, _)| std::cmp::Reverse(*wave));
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
    for dependent in direct.iter().filter(|o| wave_of(o).wave() == current) {
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
            .as_ref()
            .and_then(|uid| dependents.get(uid))
            .map_or(0, Vec::len);
        if own > 0 {
            why.push(format!("{own} dependent(s) of its own"));
        }
        if let Order::Invalid(value) = wave_of(dependent) {
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

/// Finds `kind_name` (`KIND/NAME`, KIND as kind, plural or singular, optionally `.group`) in
/// `namespace` (or the kubeconfig's), prints the report, and says whether the object is blocked.
pub async fn explain(
    kubeconfig: Option<&Path>,
    kind_name: &str,
    namespace: Option<&str>,
) -> anyhow::Result<bool> {
    let (kind, name) = kind_name
        .split_once('/')
        .context("name the object as KIND/NAME, e.g. configmap/owner")?;
    let client = crate::api::client(crate::api::config(kubeconfig).await?)?;
    let namespace = namespace
        .map(str::to_owned)
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let found = discovery::discover(&client, &[]).await?;
    let aliases = Aliases::new(&found.aliases);
    let resources = found.resources;
    let resource = resolve(&resources, kind)
        .with_context(|| format!("the apiserver serves no kind {kind:?} (with list and delete)"))?;
    let api = scoped(&client, resource, &namespace);
    let Some(meta) = api.get_metadata_opt(name).await?.map(|o| o.metadata) else {
        println!("{kind_name} is gone (or never was) in namespace {namespace}");
        return Ok(false);
    };
    let object = Object {
        group: resource.api.group.clone(),
        kind: resource.api.kind.clone(),
        meta,
    };
    // Dependents share the owner's namespace, unless the owner is cluster-scoped.
    let mut dependents: HashMap<String, Vec<Object>> = HashMap::new();
    for candidate in &resources {
        let api = if resource.namespaced && candidate.namespaced {
            scoped(&client, candidate, &namespace)
        } else if resource.namespaced {
            continue;
        } else {
            Api::all_with(client.clone(), &candidate.api)
        };
        let Ok(list) = api.list_metadata(&ListParams::default()).await else {
            continue;
        };
        for item in list.items {
            for reference in item.metadata.owner_references.iter().flatten() {
                dependents
                    .entry(reference.uid.clone())
                    .or_default()
                    .push(Object {
                        group: candidate.api.group.clone(),
                        kind: candidate.api.kind.clone(),
                        meta: item.metadata.clone(),
                    });
            }
        }
    }
    let barrier = barrier_note(&client, &object).await;
    let (text, blocked) = report(&object, &dependents, barrier.as_deref(), &aliases);
    print!("{text}");
    Ok(blocked)
}

/// The note of the latest `SyncGCBarrier` Event about `object`, if any.
async fn barrier_note(client: &kube::Client, object: &Object) -> Option<String> {
    let uid = object.meta.uid.as_deref()?;
    let events: Api<Event> = match &object.meta.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let params = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    let list = events.list(&params).await.ok()?;
    list.items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(Reason::Barrier.as_str()))
        // The latest written: resourceVersions grow with every write.
        .max_by_key(|e| {
            e.metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        })?
        .message
}

fn scoped(client: &kube::Client, resource: &Resource, namespace: &str) -> Api<DynamicObject> {
    if resource.namespaced {
        Api::namespaced_with(client.clone(), namespace, &resource.api)
    } else {
        Api::all_with(client.clone(), &resource.api)
    }
}

/// The resource `kind` names: its kind, plural or singular, case-insensitively, optionally
/// followed by `.group`; the core group and then the first match win.
pub fn resolve<'a>(resources: &'a [Resource], kind: &str) -> Option<&'a Resource> {
    let kind = kind.to_ascii_lowercase();
    let (name, group) = match kind.split_once('.') {
        Some((name, group)) => (name.to_owned(), Some(group.to_owned())),
        None => (kind.clone(), None),
    };
    let matches = |r: &&Resource| {
        let api = &r.api;
        let names = [
            api.kind.to_ascii_lowercase(),
            api.plural.to_ascii_lowercase(),
        ];
        names.contains(&name) && group.as_ref().is_none_or(|g| *g == api.group)
    };
    resources
        .iter()
        .filter(matches)
        .min_by_key(|r| !r.api.group.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::discovery::Alias;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn object(
        name: &str,
        uid: &str,
        owner: Option<(&str, &str, bool)>,
        finalizers: &[&str],
    ) -> Object {
        Object {
            group: String::new(),
            kind: "ConfigMap".into(),
            meta: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
                owner_references: owner.map(|(o, name, block)| {
                    vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        name: name.into(),
                        uid: o.into(),
                        block_owner_deletion: Some(block),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_deleting_owner_names_what_blocks_it_and_why() {
        let mut owner = object("owner", "1", None, &[FOREGROUND_FINALIZER, "x/y"]);
        owner.meta.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let held = object("held", "2", Some(("1", "owner", true)), &["x/y"]);
        let free = object("free", "3", Some(("1", "owner", false)), &[]);
        let below = object("below", "4", Some(("2", "held", true)), &[]);
        let mut dependents: HashMap<String, Vec<Object>> = HashMap::new();
        dependents
            .entry("1".into())
            .or_default()
            .extend([held, free]);
        dependents.entry("2".into()).or_default().push(below);
        let (text, blocked) = report(&owner, &dependents, Some("earlier"), &Aliases::default());
        assert!(blocked);
        assert!(!text.contains("release barrier"), "{text}");
        assert!(text.contains("being deleted since"), "{text}");
        assert!(
            text.contains("foregroundDeletion: removed by the garbage collector"),
            "{text}"
        );
        assert!(
            text.contains("x/y: removed by another controller"),
            "{text}"
        );
        assert!(text.contains("dependents (1 blocking)"), "{text}");
        assert!(
            text.contains("ConfigMap ns/held  BLOCKS: blockOwnerDeletion; its finalizers: x/y"),
            "{text}"
        );
        assert!(text.contains("\n    ConfigMap ns/free\n"), "{text}");
        assert!(text.contains("\n      ConfigMap ns/below\n"), "{text}");
    }

    #[test]
    fn an_owner_held_only_by_the_release_barrier_says_what_it_waits_for() {
        let mut owner = object("owner", "1", None, &[SYNCHRONOUS_FINALIZER]);
        owner.meta.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let note = "before releasing, waiting for a read of widgets.example.com to succeed";
        let (text, blocked) = report(&owner, &HashMap::new(), Some(note), &Aliases::default());
        assert!(blocked);
        assert!(
            text.contains("held only by syncgc's release barrier") && text.contains(note),
            "{text}"
        );
    }

    #[test]
    fn a_waiting_owner_with_ordered_dependents_shows_its_waves_and_what_holds_the_current_one() {
        let mut owner = object("owner", "1", None, &[SYNCHRONOUS_FINALIZER]);
        owner.meta.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let ordered = |name: &str, uid: &str, order: Option<&str>, finalizers: &[&str]| {
            let mut o = object(name, uid, Some(("1", "owner", true)), finalizers);
            o.meta.annotations = order.map(|v| {
                [(DELETION_ORDER_ANNOTATION.to_owned(), v.to_owned())]
                    .into_iter()
                    .collect()
            });
            o
        };
        let mut app = ordered("app", "2", Some("2"), &["x/y"]);
        app.meta.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let mut dependents: HashMap<String, Vec<Object>> = HashMap::new();
        dependents.entry("1".into()).or_default().extend([
            app,
            ordered("config", "3", Some("1"), &[]),
            ordered("secret", "4", None, &[]),
            ordered("odd", "5", Some("last"), &[]),
        ]);
        dependents.entry("2".into()).or_default().push(object(
            "pod",
            "6",
            Some(("2", "app", true)),
            &[],
        ));
        let (text, _) = report(&owner, &dependents, None, &Aliases::default());
        assert!(
            text.contains(
                "deletion order: wave 2 in progress (1 object(s) left), then wave(s) 1 (1), 0 (2)"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "wave 2 holds ConfigMap ns/app: its finalizers: x/y; 1 dependent(s) of its own"
            ),
            "{text}"
        );
        let (plain, _) = report(&owner, &HashMap::new(), None, &Aliases::default());
        assert!(!plain.contains("deletion order"), "{plain}");
    }

    #[test]
    fn a_reference_with_the_owner_s_uid_naming_another_object_blocks_nothing() {
        // The collector does not wait for it (see `OwnerLink::reaches`); neither does the report.
        let mut owner = object("owner", "1", None, &[SYNCHRONOUS_FINALIZER]);
        owner.meta.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let renamed = object("renamed", "2", Some(("1", "another", true)), &[]);
        let mut elsewhere = object("elsewhere", "3", Some(("1", "owner", true)), &[]);
        elsewhere.meta.namespace = Some("other".into());
        let real = object("real", "4", Some(("1", "owner", true)), &[]);
        let dependents = HashMap::from([("1".to_owned(), vec![renamed, elsewhere, real])]);
        let (text, blocked) = report(&owner, &dependents, None, &Aliases::default());
        assert!(blocked);
        assert!(text.contains("dependents (1 blocking):"), "{text}");
        assert!(
            text.contains("ConfigMap ns/renamed  (refers to the owner's uid, but not to it"),
            "{text}"
        );
        assert!(
            text.contains("ConfigMap other/elsewhere  (refers to the owner's uid, but not to it"),
            "{text}"
        );
        assert!(
            text.contains("ConfigMap ns/real  BLOCKS: the owner waits for every dependent"),
            "{text}"
        );
    }

    #[test]
    fn a_reference_through_a_group_alias_is_a_dependency_as_the_collector_sees_it() {
        let mut owner = object("owner", "1", None, &[SYNCHRONOUS_FINALIZER]);
        (owner.group, owner.kind) = ("apps".into(), "Deployment".into());
        owner.meta.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let mut old = object("old", "2", Some(("1", "owner", true)), &[]);
        let reference = &mut old.meta.owner_references.as_mut().unwrap()[0];
        (reference.api_version, reference.kind) =
            ("extensions/v1beta1".into(), "Deployment".into());
        let dependents = HashMap::from([("1".to_owned(), vec![old])]);
        let aliases = Aliases::new(&[Alias {
            group: "extensions".into(),
            kind: "Deployment".into(),
            canonical: "apps".into(),
        }]);
        let (text, _) = report(&owner, &dependents, None, &aliases);
        assert!(text.contains("dependents (1 blocking):"), "{text}");
        let (text, _) = report(&owner, &dependents, None, &Aliases::default());
        assert!(
            text.contains("dependents (0 blocking):"),
            "without the alias: {text}"
        );
    }

    #[test]
    fn an_object_not_being_deleted_is_not_blocked() {
        let (text, blocked) = report(
            &object("o", "1", None, &[]),
            &HashMap::new(),
            None,
            &Aliases::default(),
        );
        assert!(!blocked);
        assert!(
            text.contains("not being deleted") && text.contains("no dependents"),
            "{text}"
        );
    }

    #[test]
    fn kinds_resolve_by_kind_plural_and_group() {
        let resource = |group: &str, kind: &str, plural: &str| Resource {
            api: kube::api::ApiResource {
                group: group.into(),
                version: "v1".into(),
                api_version: "v1".into(),
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced: true,
            served: true,
            watched: true,
        };
        let all = [
            resource("example.io", "Event", "events"),
            resource("", "Event", "events"),
            resource("", "ConfigMap", "configmaps"),
        ];
        assert_eq!(resolve(&all, "configmap").unwrap().api.kind, "ConfigMap");
        assert_eq!(resolve(&all, "ConfigMaps").unwrap().api.kind, "ConfigMap");
        assert_eq!(resolve(&all, "events").unwrap().api.group, "");
        assert_eq!(
            resolve(&all, "event.example.io").unwrap().api.group,
            "example.io"
        );
        assert!(resolve(&all, "secret").is_none());
    }
}
