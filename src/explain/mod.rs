//! `syncgc explain KIND/NAME [-n NAMESPACE]`: what keeps an object from going. Reads the
//! cluster directly (not a running syncgc): the object, its finalizers and who removes each,
//! syncgc's deadline, and the tree of dependents still present, marking those that block and
//! why. [`report`] is pure; [`explain`] gathers what it needs. A namespace gets its own
//! report ([`namespace`]): why it stays Terminating.

pub mod namespace;

use std::collections::HashMap;
use std::fmt::Write as _;

use anyhow::Context as _;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DynamicObject, ListParams};

use k8s_openapi::api::core::v1::Event;

use crate::gc::discovery::{self, Aliases, Resource, resolve};
use crate::graph::{Coordinates, Flags, Order, OwnerLink, Uid, Wave};
use crate::names::{
    DEADLINE_ANNOTATION, DELETION_ORDER_ANNOTATION, FOREGROUND_FINALIZER, Reason,
    SYNCHRONOUS_FINALIZER, remover,
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

    /// Being deleted, and kept by finalizers.
    fn blocked(&self) -> bool {
        self.meta.deletion_timestamp.is_some() && !self.finalizers().is_empty()
    }

    fn has(&self, finalizer: &str) -> bool {
        self.finalizers().iter().any(|f| f == finalizer)
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
    let tree = tree(object, dependents, aliases);
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
    let direct = direct(object, dependents, aliases);
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

/// The dependents below `object`, depth first.
pub fn tree(
    object: &Object,
    dependents: &HashMap<String, Vec<Object>>,
    aliases: &Aliases,
) -> Vec<Entry> {
    let mut seen = vec![object.meta.uid.clone().unwrap_or_default()];
    let mut entries = Vec::new();
    tree_of(object, dependents, aliases, 1, &mut seen, &mut entries);
    entries
}

/// How many of the direct dependents in `tree` block their owner.
fn blocking(tree: &[Entry]) -> usize {
    tree.iter()
        .filter(|e| e.level == 1 && !e.blocks.is_empty())
        .count()
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

/// A dependent in the tree below an object.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Entry {
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

impl Entry {
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

/// The dependents below `owner`, depth first, down to `MAX_LEVEL`.
fn tree_of(
    owner: &Object,
    dependents: &HashMap<String, Vec<Object>>,
    aliases: &Aliases,
    level: usize,
    seen: &mut Vec<String>,
    out: &mut Vec<Entry>,
) {
    let uid = owner.meta.uid.clone().unwrap_or_default();
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
        out.push(Entry {
            level,
            object: dependent.title(),
            uid: dependent_uid.clone(),
            deleting: dependent.meta.deletion_timestamp.is_some(),
            dependency: link.is_some(),
            blocks: why,
        });
        if link.is_none() || seen.contains(&dependent_uid) || level >= MAX_LEVEL {
            continue;
        }
        seen.push(dependent_uid);
        tree_of(dependent, dependents, aliases, level + 1, seen, out);
    }
}

/// How deep the tree goes.
const MAX_LEVEL: usize = 16;

/// The direct dependents of `object` that really refer to it (see [`link`]).
fn direct(
    object: &Object,
    dependents: &HashMap<String, Vec<Object>>,
    aliases: &Aliases,
) -> Vec<Object> {
    let uid = object.meta.uid.clone().unwrap_or_default();
    dependents
        .get(&uid)
        .into_iter()
        .flatten()
        .filter(|d| link(object, d, aliases).is_some())
        .cloned()
        .collect()
}

/// The deletion-order wave `o` is in.
fn wave_of(o: &Object) -> Order {
    Order::of(
        o.meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(DELETION_ORDER_ANNOTATION))
            .map(String::as_str),
    )
}

/// The waves of `direct` with how many objects each holds, the one in progress (the highest)
/// first; `None` when none carries an order.
fn wave_counts(direct: &[Object]) -> Option<Vec<(Wave, usize)>> {
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
    Some(counts)
}

/// The deletion order of a waiting owner's `direct` dependents, when they carry one: the
/// waves left, the one in progress (the highest), and what holds each of its objects.
fn waves(direct: &[Object], dependents: &HashMap<String, Vec<Object>>) -> Option<String> {
    let counts = wave_counts(direct)?;
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

/// How `syncgc explain` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
}

/// How `syncgc explain` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing keeps the object (exit 0).
    Free,
    /// Being deleted and held by finalizers (exit 1).
    Blocked,
    /// With --watch: gone, released by syncgc's timeout (exit 3).
    TimedOut,
}

/// What `explain` reads of the cluster about one object.
struct Gathered {
    /// `None` once it is gone.
    object: Option<Object>,
    dependents: HashMap<String, Vec<Object>>,
    barrier: Option<String>,
    /// The resources whose objects could not be listed, with why.
    unlisted: Vec<String>,
}

/// Where `explain` looks.
struct Scope {
    client: kube::Client,
    resources: Vec<Resource>,
    aliases: Aliases,
    resource: Resource,
    namespace: String,
    name: String,
}

impl Scope {
    async fn new(
        cluster: &crate::api::Cluster,
        kind_name: &str,
        namespace: Option<&str>,
    ) -> anyhow::Result<Self> {
        let (kind, name) = kind_name
            .split_once('/')
            .context("name the object as KIND/NAME, e.g. configmap/owner")?;
        let client = cluster.streams().clone();
        let namespace = namespace
            .map(str::to_owned)
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let found = discovery::discover(&client, &[]).await?;
        let resource = resolve(&found.resources, kind)
            .with_context(|| {
                format!("the apiserver serves no kind {kind:?} (with list and delete)")
            })?
            .clone();
        Ok(Self {
            client,
            aliases: Aliases::new(&found.aliases),
            resources: found.resources,
            resource,
            namespace,
            name: name.to_owned(),
        })
    }

    async fn gather(&self) -> anyhow::Result<Gathered> {
        let api = scoped(&self.client, &self.resource, &self.namespace);
        let Some(meta) = api.get_metadata_opt(&self.name).await?.map(|o| o.metadata) else {
            return Ok(Gathered {
                object: None,
                dependents: HashMap::new(),
                barrier: None,
                unlisted: Vec::new(),
            });
        };
        let object = Object {
            group: self.resource.api.group.clone(),
            kind: self.resource.api.kind.clone(),
            meta,
        };
        // Dependents share the owner's namespace, unless the owner is cluster-scoped.
        let mut dependents: HashMap<String, Vec<Object>> = HashMap::new();
        let mut unlisted = Vec::new();
        for candidate in &self.resources {
            let api = if self.resource.namespaced && candidate.namespaced {
                scoped(&self.client, candidate, &self.namespace)
            } else if self.resource.namespaced {
                continue;
            } else {
                Api::all_with(self.client.clone(), &candidate.api)
            };
            let list = match api.list_metadata(&ListParams::default()).await {
                Ok(list) => list,
                Err(err) => {
                    let name = discovery::resource_name(&candidate.api);
                    unlisted.push(format!("{name} ({err})"));
                    continue;
                }
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
        let barrier = barrier_note(&self.client, &object).await;
        Ok(Gathered {
            object: Some(object),
            dependents,
            barrier,
            unlisted,
        })
    }

    /// Whether syncgc released the object `uid` by its timeout (a `SyncGCTimedOut` Event).
    async fn timed_out(&self, uid: &str) -> bool {
        let events: Api<Event> = if self.resource.namespaced {
            Api::namespaced(self.client.clone(), &self.namespace)
        } else {
            Api::all(self.client.clone())
        };
        let params = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
        events.list(&params).await.is_ok_and(|list| {
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some(Reason::TimedOut.as_str()))
        })
    }
}

/// Finds `kind_name` (`KIND/NAME`, KIND as kind, plural or short name, optionally `.group`) in
/// `namespace` (or the kubeconfig's) and prints the report. With `watch`, prints a line (or a
/// JSON object) each time where its deletion stands changes, until it is gone.
pub async fn explain(
    access: &crate::api::Access,
    kind_name: &str,
    namespace: Option<&str>,
    output: Output,
    watch: bool,
) -> anyhow::Result<Outcome> {
    let cluster = access
        .cluster(50.0, std::time::Duration::from_secs(30))
        .await?;
    let scope = Scope::new(&cluster, kind_name, namespace).await?;
    let api = &scope.resource.api;
    if api.group.is_empty() && api.kind == "Namespace" {
        return namespace::explain(&cluster, &scope.name, output, watch).await;
    }
    let gathered = scope.gather().await?;
    let Some(object) = &gathered.object else {
        if scope.resource.namespaced {
            anyhow::bail!("{kind_name} not found in namespace {}", scope.namespace);
        }
        anyhow::bail!("{kind_name} not found");
    };
    if watch {
        return follow(&scope, output).await;
    }
    match output {
        Output::Text => {
            let (text, _) = report(
                object,
                &gathered.dependents,
                gathered.barrier.as_deref(),
                &scope.aliases,
            );
            print!("{text}");
            for unlisted in &gathered.unlisted {
                println!("could not list {unlisted}: its objects are not in the tree");
            }
        }
        Output::Json => {
            let tree = tree(object, &gathered.dependents, &scope.aliases);
            let report = json_report(object, &gathered, &tree);
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
    }
    Ok(if object.blocked() {
        Outcome::Blocked
    } else {
        Outcome::Free
    })
}

/// How often `--watch` reads the cluster.
const WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// `explain --watch`: a line per change of [`progress`], until the object is gone.
async fn follow(scope: &Scope, output: Output) -> anyhow::Result<Outcome> {
    let mut last = String::new();
    let mut uid: Option<String> = None;
    let mut waited = false;
    loop {
        let gathered = scope.gather().await?;
        let Some(object) = &gathered.object else {
            // Released with dependents left: by the timeout, which a SyncGCTimedOut Event
            // says, written right after the release.
            let mut timed_out = false;
            if let Some(uid) = uid.as_deref().filter(|_| waited) {
                for _ in 0..10 {
                    timed_out = scope.timed_out(uid).await;
                    if timed_out {
                        break;
                    }
                    tokio::time::sleep(WATCH_INTERVAL / 4).await;
                }
            }
            let how = if timed_out {
                "released by its timeout"
            } else {
                "gone"
            };
            match output {
                Output::Text => println!(
                    "{} {}/{}: {how}",
                    Timestamp::now(),
                    scope.resource.api.kind,
                    scope.name
                ),
                Output::Json => println!(
                    "{}",
                    serde_json::json!({ "time": Timestamp::now().to_string(), "gone": true, "timedOut": timed_out })
                ),
            }
            return Ok(if timed_out {
                Outcome::TimedOut
            } else {
                Outcome::Free
            });
        };
        uid.clone_from(&object.meta.uid);
        let tree = tree(object, &gathered.dependents, &scope.aliases);
        waited = object.meta.deletion_timestamp.is_some() && tree.iter().any(|e| e.dependency);
        let line = progress(object, &gathered, &tree, &scope.aliases);
        if line != last {
            match output {
                Output::Text => println!("{} {line}", Timestamp::now()),
                Output::Json => {
                    let mut report = json_report(object, &gathered, &tree);
                    report["time"] = serde_json::json!(Timestamp::now().to_string());
                    println!("{}", serde_json::to_string(&report)?);
                }
            }
            last = line;
        }
        tokio::time::sleep(WATCH_INTERVAL).await;
    }
}

/// One line on where `object`'s deletion stands: whether it is being deleted, the dependents
/// left and how many block it, the wave in progress, and what the release barrier waits for.
fn progress(object: &Object, gathered: &Gathered, tree: &[Entry], aliases: &Aliases) -> String {
    let left = tree.iter().filter(|e| e.dependency).count();
    let mut line = format!(
        "{}: {}; {left} dependent(s) left, {} blocking",
        object.title(),
        if object.meta.deletion_timestamp.is_some() {
            "being deleted"
        } else {
            "not being deleted"
        },
        blocking(tree)
    );
    let direct = direct(object, &gathered.dependents, aliases);
    if let Some(counts) = wave_counts(&direct) {
        let _ = write!(line, "; wave {} in progress", counts[0].0.0);
    }
    if let Some(note) = gathered
        .barrier
        .as_deref()
        .filter(|_| left == 0 && object.meta.deletion_timestamp.is_some())
    {
        let _ = write!(line, "; release barrier: {note}");
    }
    if !gathered.unlisted.is_empty() {
        let _ = write!(line, "; could not list {}", gathered.unlisted.join(", "));
    }
    line
}

/// The report as JSON.
fn json_report(object: &Object, gathered: &Gathered, tree: &[Entry]) -> serde_json::Value {
    let meta = &object.meta;
    serde_json::json!({
        "object": object.title(),
        "kind": object.kind,
        "group": object.group,
        "namespace": meta.namespace,
        "name": meta.name,
        "uid": meta.uid,
        "deletionTimestamp": meta.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
        "deadline": meta.annotations.as_ref().and_then(|a| a.get(DEADLINE_ANNOTATION)),
        "finalizers": object.finalizers().iter().map(|f| serde_json::json!({ "name": f, "removedBy": remover(f) })).collect::<Vec<_>>(),
        "dependents": tree,
        "blocking": blocking(tree),
        "blocked": object.blocked(),
        "releaseBarrier": gathered.barrier,
        "unlisted": gathered.unlisted,
    })
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
            short_names: if kind == "ConfigMap" {
                vec!["cm".into()]
            } else {
                Vec::new()
            },
        };
        let all = [
            resource("example.io", "Event", "events"),
            resource("", "Event", "events"),
            resource("", "ConfigMap", "configmaps"),
        ];
        assert_eq!(resolve(&all, "cm").unwrap().api.kind, "ConfigMap");
        assert_eq!(resolve(&all, "CM").unwrap().api.kind, "ConfigMap");
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
