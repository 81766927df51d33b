//! `syncgc explain KIND/NAME [-n NAMESPACE]`: what keeps an object from going. Reads the
//! cluster directly (not a running syncgc): the object, its finalizers and who removes each,
//! syncgc's deadline, and the tree of dependents still present, marking those that block and
//! why. The scope is read once into the collector's graph ([`Snapshot`]), whose walk is the
//! report's tree; [`report`] (its file) is pure; [`explain`] gathers what it needs. A namespace
//! gets its own report ([`namespace`]): why it stays Terminating. [`why`]: `--why-deleted`,
//! why an object that is gone went.

pub mod namespace;
mod report;
pub mod why;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::{DynamicObject, ListParams, PartialObjectMeta};
use kube::runtime::watcher;

use k8s_openapi::api::core::v1::Event;

use crate::api::Cluster;
use crate::api::meta::Meta;
use crate::gc::decide::{self, ActedBy, OwnerState};
use crate::gc::discovery::{Aliases, discover};
use crate::gc::snapshot::{Named, Snapshot};
use crate::gc::watch;
use crate::graph::{Flags, Graph, OwnerLink, ResourceId, Uid, UidHash};
use crate::names::{DEADLINE_ANNOTATION, Reason};
use crate::report::{Finalizer, Output};

pub use self::report::*;

/// How `syncgc explain` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Nothing keeps the object (exit 0).
    Free,
    /// Being deleted and held by finalizers (exit 1).
    Blocked,
    /// With --watch: gone, released by syncgc's timeout (exit 3).
    TimedOut,
}

/// What `explain` reads of the cluster about one object, besides its scope ([`Known`]).
struct Gathered {
    /// `None` once it is gone.
    object: Option<Explained>,
    /// What the object depends on.
    owners: Vec<Owner>,
    barrier: Option<String>,
    /// The resources whose objects could not be listed, with why.
    unlisted: Vec<String>,
}

/// An owner of the object, and whether it is there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Owner {
    pub owner: String,
    pub uid: String,
    pub state: Presence,
}

/// Whether an owner is there, in words: how the garbage collector sees it
/// ([`decide::owner_in_graph`]), and whether it is being deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Presence {
    #[serde(rename = "present")]
    Present,
    #[serde(rename = "being deleted")]
    BeingDeleted,
    #[serde(rename = "absent")]
    Absent,
    /// Its kind is not served or could not be listed.
    #[serde(rename = "cannot be looked up")]
    Unresolvable,
}

impl Presence {
    /// The owner `link` of the object `uid` names, in `snapshot`.
    fn of(snapshot: &Snapshot, uid: Uid, link: &OwnerLink) -> Self {
        if snapshot.facts.unresolvable.contains(&(uid, link.uid)) {
            return Self::Unresolvable;
        }
        let graph = &snapshot.graph;
        let from = graph.node(uid).and_then(|node| node.namespace());
        match decide::owner_in_graph(graph, link.uid, link.coordinates, from, ActedBy::Syncgc) {
            None | Some(OwnerState::Absent) => Self::Absent,
            Some(OwnerState::Unresolvable) => Self::Unresolvable,
            Some(_) if graph.node(link.uid).is_some_and(|o| o.is(Flags::DELETING)) => {
                Self::BeingDeleted
            }
            Some(_) => Self::Present,
        }
    }
}

impl std::fmt::Display for Presence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Present => "present",
            Self::BeingDeleted => "being deleted",
            Self::Absent => "absent",
            Self::Unresolvable => "cannot be looked up",
        })
    }
}

/// What is known of the scope: its graph, and its objects by uid with the resource each is
/// of; kept up to date by `--watch` one event at a time.
struct Known {
    graph: Graph,
    objects: HashMap<Uid, (ResourceId, Explained)>,
}

impl Known {
    fn scope(&self) -> InScope<'_> {
        InScope {
            graph: &self.graph,
            objects: &self.objects,
        }
    }
}

/// Where `explain` looks: the object named, through the seam.
struct Lookup {
    cluster: Cluster,
    named: Named,
}

impl Lookup {
    fn aliases(&self) -> &Aliases {
        self.named.table.aliases()
    }

    /// The object as `id`'s kind, with `meta`.
    fn object(&self, id: ResourceId, meta: ObjectMeta) -> Option<Explained> {
        let resource = self.named.table.get(id)?;
        Some(Explained {
            group: resource.api.group.clone(),
            kind: resource.api.kind.clone(),
            meta,
        })
    }

    /// Reads the scope — the object's namespace, or the whole cluster for a cluster-scoped
    /// object — once through the seam ([`Snapshot`]), with the cluster-scoped owners of its
    /// tree: the object's uid (an error when it is not there), every object read, and what
    /// could not be.
    async fn read(&self) -> anyhow::Result<(Uid, Known, Vec<Owner>, Vec<String>)> {
        let mut snapshot =
            Snapshot::read(&self.cluster, &self.named.table, self.named.scope()).await;
        let uid = snapshot.uid_of(&self.named)?;
        snapshot
            .read_owners(&self.cluster, &self.named.table, uid)
            .await;
        let owners = owners_of(&snapshot, uid);
        let unlisted = snapshot
            .unlisted
            .iter()
            .map(|u| format!("{} ({})", u.resource, u.error))
            .collect();
        let objects = snapshot
            .objects
            .into_iter()
            .filter_map(|(uid, (id, meta))| Some((uid, (id, self.object(id, object_meta(meta))?))))
            .collect();
        let known = Known {
            graph: snapshot.graph,
            objects,
        };
        Ok((uid, known, owners, unlisted))
    }

    /// What the report needs besides the scope.
    fn gathered(&self, uid: Uid, known: &Known, owners: &[Owner], unlisted: &[String]) -> Gathered {
        Gathered {
            object: known.objects.get(&uid).map(|(_, o)| o.clone()),
            owners: owners.to_vec(),
            barrier: None,
            unlisted: unlisted.to_vec(),
        }
    }

    /// Whether syncgc released the object `uid` by its timeout (a `SyncGCTimedOut` Event).
    async fn timed_out(&self, uid: &str) -> bool {
        let events: Api<Event> = if self.named.resource.namespaced {
            self.cluster.namespaced(&self.named.namespace)
        } else {
            Api::all(self.cluster.streams().clone())
        };
        let params = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
        events.list(&params).await.is_ok_and(|list| {
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some(Reason::TimedOut.as_str()))
        })
    }

    /// A metadata watch of `id`'s objects in the scope, until `events` is closed: each event
    /// goes to `events` with `id`.
    async fn watch(
        client: kube::Client,
        api: kube::api::ApiResource,
        namespace: Option<String>,
        id: ResourceId,
        events: tokio::sync::mpsc::Sender<(
            ResourceId,
            watcher::Event<PartialObjectMeta<DynamicObject>>,
        )>,
    ) {
        use futures::StreamExt as _;
        use kube::runtime::WatchStreamExt as _;
        let api: Api<PartialObjectMeta<DynamicObject>> = match &namespace {
            Some(ns) => Api::namespaced_with(client, ns, &api),
            None => Api::all_with(client, &api),
        };
        let mut stream =
            std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    if events.send((id, event)).await.is_err() {
                        return;
                    }
                }
                Err(err) => tracing::debug!(%err, "watch of a kind in the tree failed; retrying"),
            }
        }
    }
}

/// The owners of `uid` in `snapshot`, each with whether it is there.
fn owners_of(snapshot: &Snapshot, uid: Uid) -> Vec<Owner> {
    let Some((_, meta)) = snapshot.objects.get(&uid) else {
        return Vec::new();
    };
    let links = snapshot.graph.node(uid).map(|node| &node.owners[..]);
    meta.owner_references
        .iter()
        .zip(links.unwrap_or_default())
        .map(|(reference, link)| Owner {
            owner: format!("{} {}", reference.kind, reference.name),
            uid: reference.uid.clone(),
            state: Presence::of(snapshot, uid, link),
        })
        .collect()
}

/// The metadata the graph reads, from what a watch gave.
fn meta_of(meta: &ObjectMeta) -> Meta {
    let own = |map: &Option<std::collections::BTreeMap<String, String>>| {
        let mut own = crate::api::meta::Own::default();
        for (key, value) in map.iter().flatten() {
            own.keep(key, value);
        }
        own
    };
    Meta {
        name: meta.name.clone().unwrap_or_default(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        deletion_timestamp: meta.deletion_timestamp.clone(),
        labels: own(&meta.labels),
        annotations: own(&meta.annotations),
        owner_references: meta
            .owner_references
            .iter()
            .flatten()
            .map(|r| crate::api::meta::Reference {
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
                name: r.name.clone(),
                uid: r.uid.clone(),
                block_owner_deletion: r.block_owner_deletion,
            })
            .collect(),
        finalizers: meta.finalizers.clone().unwrap_or_default(),
    }
}

/// The metadata the report reads, from what a list gave.
fn object_meta(meta: Meta) -> ObjectMeta {
    ObjectMeta {
        name: Some(meta.name),
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        deletion_timestamp: meta.deletion_timestamp,
        annotations: Some(
            meta.annotations
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        ),
        finalizers: Some(meta.finalizers),
        owner_references: Some(
            meta.owner_references
                .into_iter()
                .map(|r| OwnerReference {
                    api_version: r.api_version,
                    kind: r.kind,
                    name: r.name,
                    uid: r.uid,
                    block_owner_deletion: r.block_owner_deletion,
                    controller: None,
                })
                .collect(),
        ),
        ..ObjectMeta::default()
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
) -> anyhow::Result<Ending> {
    let cluster = access
        .cluster(None, std::time::Duration::from_secs(30))
        .await?;
    let mut scope = Lookup {
        named: Named::find(&cluster, kind_name, namespace).await?,
        cluster,
    };
    let api = &scope.named.resource.api;
    if api.group.is_empty() && api.kind == "Namespace" {
        let named = &scope.named;
        return namespace::explain(&scope.cluster, &named.name, &named.table, output, watch).await;
    }
    let (uid, known, owners, unlisted) = scope.read().await?;
    if watch {
        return follow(&mut scope, uid, known, &owners, &unlisted, output).await;
    }
    let mut gathered = scope.gathered(uid, &known, &owners, &unlisted);
    let object = gathered.object.clone().expect("read");
    gathered.barrier = barrier_note(&scope.cluster, &object).await;
    let view = known.scope();
    let tree = tree(&object, &view);
    let text = || {
        let (mut text, _) = report(&object, &view, gathered.barrier.as_deref());
        text.push_str(&owners_text(&gathered.owners));
        for unlisted in &gathered.unlisted {
            text.push_str(&format!(
                "could not list {unlisted}: its objects are not in the tree\n"
            ));
        }
        text
    };
    let whole = || ObjectReport::of(&object, &gathered, &tree);
    print!("{}", output.whole(whole, text)?);
    Ok(if object.blocked() {
        Ending::Blocked
    } else {
        Ending::Free
    })
}

/// The object's owners, for people.
fn owners_text(owners: &[Owner]) -> String {
    if owners.is_empty() {
        return "  owners: none\n".to_owned();
    }
    let mut out = "  owners (what it depends on):\n".to_owned();
    for owner in owners {
        let _ = writeln!(out, "    {}: {}", owner.owner, owner.state);
    }
    out
}

/// How often `--watch` looks again besides the watches' events (the release barrier's note,
/// which an Event carries).
const WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// How often `--watch` discovers again, for kinds served after it started.
const REDISCOVER: std::time::Duration = std::time::Duration::from_secs(10);

/// `explain --watch`: a line per change of [`progress`], until the object is gone. After the
/// one read of the scope, it follows a metadata watch of every kind of the scope (and of each
/// kind served later: it discovers again every [`REDISCOVER`]), each event applied to the
/// scope's graph, so the work an event costs does not grow with the scope: the report walks
/// the object's tree alone.
async fn follow(
    scope: &mut Lookup,
    uid: Uid,
    mut known: Known,
    owners: &[Owner],
    unlisted: &[String],
    output: Output,
) -> anyhow::Result<Ending> {
    let (sender, mut events) = tokio::sync::mpsc::channel(1024);
    let namespace = scope
        .named
        .resource
        .namespaced
        .then(|| scope.named.namespace.clone());
    let mut watches = tokio::task::JoinSet::new();
    let mut watching = BTreeSet::new();
    let mut start = |scope: &Lookup, watching: &mut BTreeSet<ResourceId>| {
        for (id, resource) in scope.named.table.served() {
            // Only the namespace's kinds for a namespaced object: a cluster-scoped object
            // cannot depend on it.
            if (namespace.is_some() && !resource.namespaced) || !watching.insert(id) {
                continue;
            }
            watches.spawn(Lookup::watch(
                scope.cluster.streams().clone(),
                resource.api.clone(),
                namespace.clone(),
                id,
                sender.clone(),
            ));
        }
    };
    start(scope, &mut watching);
    let mut rediscover = tokio::time::interval(REDISCOVER);
    rediscover.tick().await;
    let mut listing: HashMap<ResourceId, HashSet<Uid, UidHash>> = HashMap::new();
    let mut last = String::new();
    let mut waited = false;
    let mut barrier_read = tokio::time::Instant::now() - WATCH_INTERVAL;
    let mut barrier = None;
    loop {
        let mut gathered = scope.gathered(uid, &known, owners, unlisted);
        let Some(object) = gathered.object.clone() else {
            return gone(scope, &uid.to_string(), waited, output).await;
        };
        let view = known.scope();
        let tree = tree(&object, &view);
        let deleting = object.meta.deletion_timestamp.is_some();
        waited = deleting && tree.iter().any(|e| e.dependency);
        let left = tree.iter().filter(|e| e.dependency).count();
        if deleting && left == 0 && barrier_read.elapsed() >= WATCH_INTERVAL {
            barrier = barrier_note(&scope.cluster, &object).await;
            barrier_read = tokio::time::Instant::now();
        }
        gathered.barrier.clone_from(&barrier);
        let line = progress(&object, &gathered, &tree, &view);
        if line != last {
            let now = Timestamp::now();
            let report = || ObjectReport {
                time: Some(now.to_string()),
                ..ObjectReport::of(&object, &gathered, &tree)
            };
            print!("{}", output.step(report, || format!("{now} {line}"))?);
            last = line;
        }
        // The next event, or a look again for the barrier's note or new kinds; then all that
        // came meanwhile.
        let mut batch = Vec::new();
        tokio::select! {
            event = events.recv() => match event {
                Some(event) => batch.push(event),
                None => anyhow::bail!("the watches of the scope ended"),
            },
            _ = rediscover.tick() => {
                if let Ok(found) = discover(scope.cluster.streams(), &[]).await {
                    scope.named.table.update(found);
                    start(scope, &mut watching);
                }
            }
            () = tokio::time::sleep(WATCH_INTERVAL) => {}
        }
        while let Ok(event) = events.try_recv() {
            batch.push(event);
        }
        for (id, event) in batch {
            take(scope, &mut known, &mut listing, id, event);
        }
    }
}

/// One watch event of `id`'s objects into `known`, its graph and its objects: a (re)list
/// replaces what it holds of that kind once it is done.
fn take(
    scope: &Lookup,
    known: &mut Known,
    listing: &mut HashMap<ResourceId, HashSet<Uid, UidHash>>,
    id: ResourceId,
    event: watcher::Event<PartialObjectMeta<DynamicObject>>,
) {
    let put = |known: &mut Known, meta: ObjectMeta| -> Option<Uid> {
        let resource = scope.named.table.get(id)?;
        let observed = watch::observe(&resource.api, &meta_of(&meta), scope.aliases())?;
        let uid = observed.uid;
        known.graph.apply(id, observed);
        known.objects.insert(uid, (id, scope.object(id, meta)?));
        Some(uid)
    };
    match event {
        watcher::Event::Apply(object) => {
            put(known, object.metadata);
        }
        watcher::Event::Delete(object) => {
            let uid = Uid::parse(object.metadata.uid.as_deref().unwrap_or_default());
            known.graph.delete(uid);
            known.objects.remove(&uid);
        }
        watcher::Event::Init => {
            listing.insert(id, HashSet::default());
        }
        watcher::Event::InitApply(object) => {
            if let Some(uid) = put(known, object.metadata) {
                listing.entry(id).or_default().insert(uid);
            }
        }
        watcher::Event::InitDone => {
            let listed = listing.remove(&id).unwrap_or_default();
            known.graph.reset(id, &listed);
            known
                .objects
                .retain(|uid, (kind, _)| *kind != id || listed.contains(uid));
        }
    }
}

/// Says how the object `uid` went: gone, or released by syncgc's timeout with dependents
/// left (which a `SyncGCTimedOut` Event says, written right after the release).
async fn gone(scope: &Lookup, uid: &str, waited: bool, output: Output) -> anyhow::Result<Ending> {
    let mut timed_out = false;
    if waited {
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
    let now = Timestamp::now();
    let gone =
        || serde_json::json!({ "time": now.to_string(), "gone": true, "timedOut": timed_out });
    let named = &scope.named;
    let what = crate::api::described(&named.resource.api.kind, named.scope(), &named.name);
    print!("{}", output.step(gone, || format!("{now} {what}: {how}"))?);
    Ok(if timed_out {
        Ending::TimedOut
    } else {
        Ending::Free
    })
}

/// One line on where `object`'s deletion stands: whether it is being deleted, the dependents
/// left and how many block it, the wave in progress, and what the release barrier waits for.
fn progress(
    object: &Explained,
    gathered: &Gathered,
    tree: &[TreeEntry],
    scope: &InScope,
) -> String {
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
    if let Some(counts) = wave_counts(object, scope) {
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
/// `syncgc explain KIND/NAME -o json`: a stable format (docs/commands.md). The fields are in
/// the order it has always printed them in.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReport<'a> {
    blocked: bool,
    blocking: usize,
    deadline: Option<&'a str>,
    deletion_timestamp: Option<String>,
    dependents: &'a [TreeEntry],
    finalizers: Vec<Finalizer>,
    group: &'a str,
    kind: &'a str,
    name: Option<&'a str>,
    namespace: Option<&'a str>,
    object: String,
    owners: &'a [Owner],
    release_barrier: Option<&'a str>,
    /// With `--watch`: when the line was printed.
    #[serde(skip_serializing_if = "Option::is_none")]
    time: Option<String>,
    uid: Option<&'a str>,
    unlisted: &'a [String],
}

impl<'a> ObjectReport<'a> {
    fn of(object: &'a Explained, gathered: &'a Gathered, tree: &'a [TreeEntry]) -> Self {
        let meta = &object.meta;
        Self {
            blocked: object.blocked(),
            blocking: blocking(tree),
            deadline: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEADLINE_ANNOTATION))
                .map(String::as_str),
            deletion_timestamp: meta.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
            dependents: tree,
            finalizers: object
                .finalizers()
                .iter()
                .map(|f| Finalizer::of(f))
                .collect(),
            group: &object.group,
            kind: &object.kind,
            name: meta.name.as_deref(),
            namespace: meta.namespace.as_deref(),
            object: object.title(),
            owners: &gathered.owners,
            release_barrier: gathered.barrier.as_deref(),
            time: None,
            uid: meta.uid.as_deref(),
            unlisted: &gathered.unlisted,
        }
    }
}

/// The note of the latest `SyncGCBarrier` Event about `object`, if any.
async fn barrier_note(cluster: &Cluster, object: &Explained) -> Option<String> {
    let uid = object.meta.uid.as_deref()?;
    let events: Api<Event> = match &object.meta.namespace {
        Some(ns) => cluster.namespaced(ns),
        None => Api::all(cluster.streams().clone()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::discovery::Alias;
    use crate::names::{DELETION_ORDER_ANNOTATION, FOREGROUND_FINALIZER, SYNCHRONOUS_FINALIZER};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn object(
        name: &str,
        uid: &str,
        owner: Option<(&str, &str, bool)>,
        finalizers: &[&str],
    ) -> Explained {
        Explained {
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

    /// The report on `owner` in the scope of it and `dependents` (by owner uid).
    fn report_of(
        owner: &Explained,
        dependents: &HashMap<String, Vec<Explained>>,
        barrier: Option<&str>,
        aliases: &Aliases,
    ) -> (String, bool) {
        let mut known = Known {
            graph: Graph::default(),
            objects: HashMap::new(),
        };
        let id = ResourceId::new(0);
        for object in std::iter::once(owner).chain(dependents.values().flatten()) {
            let gvk = kube::api::GroupVersionKind::gvk(&object.group, "v1", &object.kind);
            let api = kube::api::ApiResource::from_gvk(&gvk);
            let observed = watch::observe(&api, &meta_of(&object.meta), aliases).unwrap();
            known.objects.insert(observed.uid, (id, object.clone()));
            known.graph.apply(id, observed);
        }
        report(owner, &known.scope(), barrier)
    }

    #[test]
    fn a_deleting_owner_names_what_blocks_it_and_why() {
        let mut owner = object("owner", "1", None, &[FOREGROUND_FINALIZER, "x/y"]);
        owner.meta.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let held = object("held", "2", Some(("1", "owner", true)), &["x/y"]);
        let free = object("free", "3", Some(("1", "owner", false)), &[]);
        let below = object("below", "4", Some(("2", "held", true)), &[]);
        let mut dependents: HashMap<String, Vec<Explained>> = HashMap::new();
        dependents
            .entry("1".into())
            .or_default()
            .extend([held, free]);
        dependents.entry("2".into()).or_default().push(below);
        let (text, blocked) = report_of(&owner, &dependents, Some("earlier"), &Aliases::default());
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
        let (text, blocked) = report_of(&owner, &HashMap::new(), Some(note), &Aliases::default());
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
        let mut dependents: HashMap<String, Vec<Explained>> = HashMap::new();
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
        let (text, _) = report_of(&owner, &dependents, None, &Aliases::default());
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
        let (plain, _) = report_of(&owner, &HashMap::new(), None, &Aliases::default());
        assert!(!plain.contains("deletion order"), "{plain}");
    }

    #[test]
    fn a_reference_with_the_owner_s_uid_naming_another_object_blocks_nothing() {
        // The collector does not wait for it (see `Node::is_named_by`); neither does the report.
        let mut owner = object("owner", "1", None, &[SYNCHRONOUS_FINALIZER]);
        owner.meta.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let renamed = object("renamed", "2", Some(("1", "another", true)), &[]);
        let mut elsewhere = object("elsewhere", "3", Some(("1", "owner", true)), &[]);
        elsewhere.meta.namespace = Some("other".into());
        let real = object("real", "4", Some(("1", "owner", true)), &[]);
        let dependents = HashMap::from([("1".to_owned(), vec![renamed, elsewhere, real])]);
        let (text, blocked) = report_of(&owner, &dependents, None, &Aliases::default());
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
        let aliases = Aliases::new(
            &[Alias {
                group: "extensions".into(),
                kind: "Deployment".into(),
                canonical: "apps".into(),
            }],
            [],
        );
        let (text, _) = report_of(&owner, &dependents, None, &aliases);
        assert!(text.contains("dependents (1 blocking):"), "{text}");
        let (text, _) = report_of(&owner, &dependents, None, &Aliases::default());
        assert!(
            text.contains("dependents (0 blocking):"),
            "without the alias: {text}"
        );
    }

    #[test]
    fn an_object_not_being_deleted_is_not_blocked() {
        let (text, blocked) = report_of(
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
}
