//! Which resources the garbage collector watches: every resource the apiserver serves with
//! list, watch and delete (built-ins, aggregated APIs, custom resources), but for an ignore list,
//! kept in a table whose ids never change while the process runs.
//!
//! As the upstream collector's `GetDeletableResources`: discovery is asked group version by
//! group version, and a group that fails (an aggregated API whose service is down) does not
//! stop the others; it keeps the resources (and so the watches) it had. Each GroupResource is
//! watched at one version: the group's preferred version when it serves the resource there,
//! otherwise the first version of the group's priority list that does. A resource served
//! under two groups from one storage (on 1.20, Ingress under `extensions` and
//! `networking.k8s.io`, with the same `storageVersionHash`) is watched once, under one group,
//! and references through the other group reach the same objects.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
use kube::Client;
use kube::api::{ApiResource, GroupVersionKind};
use parking_lot::{RwLock, RwLockReadGuard};
use tokio::sync::watch as signal;

use crate::graph::{Coordinates, ResourceId};

/// The resources whose objects say what is served.
pub const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";
pub const API_SERVICES: &str = "apiservices.apiregistration.k8s.io";
pub const SOURCES: [&str; 2] = [CRDS, API_SERVICES];

/// Asks for a discovery sooner than the rediscovery interval: a CRD or APIService changed,
/// or the release barrier found one that serves objects discovery has not found.
#[derive(Debug, Default)]
pub struct Rediscovery {
    notify: tokio::sync::Notify,
}

impl Rediscovery {
    pub fn ask(&self) {
        self.notify.notify_one();
    }

    /// Resolves once a discovery has been asked for since the last time it resolved.
    pub async fn asked(&self) {
        self.notify.notified().await;
    }
}

/// A watched (or once watched) resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub api: ApiResource,
    pub namespaced: bool,
    /// Still served, as of the last discovery.
    pub served: bool,
    /// Watched (not ignored). Ignored resources stay in the table so that owners of their
    /// kinds can still be read.
    pub watched: bool,
    /// Its short names (`cm` for configmaps), for `syncgc explain`.
    pub short_names: Vec<String>,
}

/// What one discovery found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Found {
    pub resources: Vec<Resource>,
    /// Kinds served under a second group from the same storage: (that group, kind) → the
    /// group they are watched under.
    pub aliases: Vec<Alias>,
    /// Groups whose discovery failed, wholly or for one of their versions.
    pub failed: BTreeSet<String>,
    /// Every group version listed, named as its APIService is (`v1.apps`, `v1.` for the core
    /// group), whether or not it serves a resource that is watched.
    pub group_versions: BTreeSet<String>,
    /// Every (apiVersion, kind) served, at every version: what an ownerReference may name for
    /// Kubernetes' collector to map it.
    pub kinds: BTreeSet<(String, String)>,
}

/// A kind served under `group` that is the same objects as under `canonical`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Alias {
    pub group: String,
    pub kind: String,
    pub canonical: String,
}

/// The table of resources, indexed by [`ResourceId`].
#[derive(Debug, Default)]
pub struct Resources {
    list: Vec<Resource>,
    by_group_resource: HashMap<(String, String), ResourceId>,
    /// Served resources by (group, kind), aliases included.
    by_group_kind: HashMap<(String, String), ResourceId>,
    aliases: Aliases,
    failed: BTreeSet<String>,
    group_versions: BTreeSet<String>,
    kinds: BTreeSet<(String, String)>,
}

/// The table of resources as the last discovery left it, written by the graph builder alone:
/// the writer of a [`ResourcesWriter`]/[`ResourcesReader`] pair, as the graph's.
#[derive(Debug)]
pub struct ResourcesWriter {
    table: Arc<RwLock<Resources>>,
    discoveries: signal::Sender<u64>,
}

/// A read-only handle on the table of resources, and on how many discoveries changed it.
#[derive(Debug, Clone)]
pub struct ResourcesReader {
    table: Arc<RwLock<Resources>>,
    discoveries: signal::Receiver<u64>,
}

impl Default for ResourcesWriter {
    fn default() -> Self {
        Self {
            table: Arc::default(),
            discoveries: signal::Sender::new(0),
        }
    }
}

impl ResourcesWriter {
    /// Takes in what a discovery found; the first, and each that changed what is served
    /// (the resources or the groups that fail), is counted for the readers.
    pub fn update(&self, found: Found) -> Changes {
        let changes = self.table.write().update(found);
        if *self.discoveries.borrow() == 0
            || !changes.added.is_empty()
            || !changes.removed.is_empty()
            || changes.failed_changed
        {
            self.discoveries.send_modify(|n| *n += 1);
        }
        changes
    }

    pub fn read(&self) -> RwLockReadGuard<'_, Resources> {
        self.table.read()
    }

    pub fn reader(&self) -> ResourcesReader {
        ResourcesReader {
            table: self.table.clone(),
            discoveries: self.discoveries.subscribe(),
        }
    }
}

/// An empty table that nothing writes (for a webhook without a collector).
impl Default for ResourcesReader {
    fn default() -> Self {
        ResourcesWriter::default().reader()
    }
}

impl ResourcesReader {
    pub fn read(&self) -> RwLockReadGuard<'_, Resources> {
        self.table.read()
    }

    /// Follows how many discoveries changed what is served; 0 until the first.
    pub fn discoveries(&self) -> signal::Receiver<u64> {
        self.discoveries.clone()
    }
}

/// What a discovery changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Newly served: start watching.
    pub added: Vec<ResourceId>,
    /// No longer served: stop watching.
    pub removed: Vec<ResourceId>,
    /// Served at another version now: watch that one instead.
    pub moved: Vec<ResourceId>,
    /// The set of failing groups changed (for the log).
    pub failed_changed: bool,
}

impl Resources {
    pub fn get(&self, id: ResourceId) -> Option<&Resource> {
        self.list.get(id.index())
    }

    /// The kind of resource `id`, as the guards' messages name it (empty when unknown).
    pub fn kind(&self, id: ResourceId) -> String {
        self.get(id).map(|r| r.api.kind.clone()).unwrap_or_default()
    }

    /// Where to reach the observed object `uid` (`node`) through the API; `None` for a virtual
    /// node or a resource no longer served.
    pub fn target_of(
        &self,
        uid: crate::graph::Uid,
        node: &crate::graph::Node,
    ) -> Option<crate::api::Target> {
        if node.is(crate::graph::Flags::VIRTUAL) {
            return None;
        }
        Some(crate::api::Target {
            resource: self.get(node.resource?)?.api.clone(),
            namespace: node.namespace().map(str::to_owned),
            name: node.name.to_string(),
            uid: uid.to_string(),
        })
    }

    /// The served resource an ownerReference's `apiVersion` and `kind` name: the same group
    /// (or a group serving the same objects) and kind, in whatever version is served.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<(ResourceId, &Resource)> {
        let group = group_of(api_version);
        let id = *self
            .by_group_kind
            .get(&(group.to_owned(), kind.to_owned()))?;
        Some((id, self.get(id)?))
    }

    /// The resource named `plural` (core) or `plural.group`.
    pub fn by_name(&self, name: &str) -> Option<ResourceId> {
        let (plural, group) = name.split_once('.').unwrap_or((name, ""));
        self.by_group_resource
            .get(&(group.to_owned(), plural.to_owned()))
            .copied()
    }

    pub fn served(&self) -> impl Iterator<Item = (ResourceId, &Resource)> {
        self.list
            .iter()
            .enumerate()
            .filter(|(_, r)| r.served)
            .map(|(i, r)| (ResourceId::new(i as u16), r))
    }

    /// The groups whose last discovery failed.
    pub fn failed_groups(&self) -> &BTreeSet<String> {
        &self.failed
    }

    /// The group versions the last discovery listed, named as their APIServices are.
    pub fn group_versions(&self) -> &BTreeSet<String> {
        &self.group_versions
    }

    /// Whether the apiserver serves `kind` at `api_version` (or cannot tell: its group's
    /// discovery failed). A reference naming a version that is not served cannot be mapped
    /// by Kubernetes' collector.
    pub fn serves_version(&self, api_version: &str, kind: &str) -> bool {
        self.kinds.is_empty()
            || self.failed.contains(group_of(api_version))
            || self
                .kinds
                .contains(&(api_version.to_owned(), kind.to_owned()))
    }

    /// The kinds served under two groups, for the watches' coordinates.
    pub fn aliases(&self) -> &Aliases {
        &self.aliases
    }

    /// Takes in what discovery found: new resources get ids, resources served at another
    /// version move, ones no longer served are marked. A group whose discovery failed loses
    /// nothing and moves nothing; it may only gain resources.
    pub fn update(&mut self, found: Found) -> Changes {
        let Found {
            resources,
            aliases,
            failed,
            group_versions,
            kinds,
        } = found;
        let mut changes = Changes {
            failed_changed: failed != self.failed,
            ..Changes::default()
        };
        let mut still = vec![false; self.list.len()];
        for resource in resources {
            let key = (resource.api.group.clone(), resource.api.plural.clone());
            let Some(&id) = self.by_group_resource.get(&key) else {
                let Some(index) = u16::try_from(self.list.len())
                    .ok()
                    .filter(|i| *i < u16::MAX)
                else {
                    tracing::error!("more than 65535 resources; not watching {key:?}");
                    continue;
                };
                let id = ResourceId::new(index);
                self.by_group_resource.insert(key, id);
                self.list.push(resource);
                still.push(true);
                changes.added.push(id);
                continue;
            };
            let index = id.index();
            still[index] = true;
            let old = &mut self.list[index];
            if !old.served {
                *old = resource;
                changes.added.push(id);
            } else if old.api.version != resource.api.version && !failed.contains(&key.0) {
                *old = resource;
                changes.moved.push(id);
            } else {
                // Ignoring and scope can change only with the version, or not at all.
                old.watched = resource.watched;
            }
        }
        for (index, found) in still.into_iter().enumerate() {
            let resource = &mut self.list[index];
            if !found && resource.served && !failed.contains(&resource.api.group) {
                resource.served = false;
                changes.removed.push(ResourceId::new(index as u16));
            }
        }
        self.aliases = Aliases::new(
            &aliases,
            self.list
                .iter()
                .filter(|r| r.served)
                .map(|r| (r.api.group.as_str(), r.api.kind.as_str())),
        );
        self.by_group_kind = self
            .served()
            .map(|(id, r)| ((r.api.group.clone(), r.api.kind.clone()), id))
            .collect();
        for alias in &aliases {
            if let Some(&id) = self
                .by_group_kind
                .get(&(alias.canonical.clone(), alias.kind.clone()))
            {
                self.by_group_kind
                    .insert((alias.group.clone(), alias.kind.clone()), id);
            }
        }
        self.failed = failed;
        self.group_versions = group_versions;
        self.kinds = kinds;
        changes
    }
}

/// Kinds served under a second group: their references are taken as references to the group
/// they are watched under, so that one object has one identity whichever group names it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Aliases {
    canonical: HashMap<(String, String), String>,
    /// The (group, kind) pairs served, aliases included, by hash; empty when not known.
    served: HashSet<u64>,
}

impl Aliases {
    /// The aliases, and the (group, kind) pairs that are served.
    pub fn new<'a>(
        aliases: &[Alias],
        served: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        let canonical: HashMap<(String, String), String> = aliases
            .iter()
            .map(|a| ((a.group.clone(), a.kind.clone()), a.canonical.clone()))
            .collect();
        let mut served: HashSet<u64> = served.into_iter().map(|(g, k)| group_kind(g, k)).collect();
        for ((group, kind), canonical) in &canonical {
            if served.contains(&group_kind(canonical, kind)) {
                served.insert(group_kind(group, kind));
            }
        }
        Self { canonical, served }
    }

    /// Whether the apiserver serves `kind` in `api_version`'s group, with list and delete
    /// (true when that is not known).
    pub fn serves(&self, api_version: &str, kind: &str) -> bool {
        self.served.is_empty()
            || self
                .served
                .contains(&group_kind(group_of(api_version), kind))
    }

    /// The coordinates of the object `api_version`, `kind`, `name` names.
    pub fn coordinates(&self, api_version: &str, kind: &str, name: &str) -> Coordinates {
        let group = group_of(api_version);
        let group = if self.canonical.is_empty() {
            group
        } else {
            self.canonical
                .get(&(group.to_owned(), kind.to_owned()))
                .map_or(group, String::as_str)
        };
        Coordinates::in_group(group, kind, name)
    }
}

/// A (group, kind) pair as a number, for cheap look-ups on every watch event.
fn group_kind(group: &str, kind: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    (group, kind).hash(&mut hasher);
    hasher.finish()
}

/// The API group of `api_version` ("" for the core group).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// `plural` for the core group, `plural.group` otherwise: how resources are named in the ignore
/// list.
pub fn resource_name(api: &ApiResource) -> String {
    if api.group.is_empty() {
        api.plural.clone()
    } else {
        format!("{}.{}", api.plural, api.group)
    }
}

/// What discovery answered for one group.
#[derive(Debug, Clone)]
pub struct Group {
    /// "" for the core group.
    pub name: String,
    /// Its versions by priority, each with its resources or `None` when asking failed.
    pub versions: Vec<(String, Option<Vec<APIResource>>)>,
    pub preferred: Option<String>,
}

/// How mature a version is, for choosing among groups serving one storage: GA, then beta,
/// then alpha.
fn maturity(version: &str) -> u8 {
    if version.contains("alpha") {
        0
    } else if version.contains("beta") {
        1
    } else {
        2
    }
}

/// Chooses, from what each group answered, the resources to watch: per GroupResource, the
/// preferred version if it serves it with list, watch and delete, otherwise the first version
/// (by priority) that does; and, among resources sharing a storage, one to watch.
pub fn choose(groups: &[Group], ignored: &[String]) -> Found {
    let mut found = Found::default();
    // (group, plural) → index in found.resources, and the storage hash of each.
    let mut chosen: HashMap<(String, String), usize> = HashMap::new();
    let mut storage: Vec<Option<String>> = Vec::new();
    for group in groups {
        if group.versions.iter().any(|(_, r)| r.is_none()) {
            found.failed.insert(group.name.clone());
        }
        for (version, _) in &group.versions {
            found
                .group_versions
                .insert(format!("{version}.{}", group.name));
        }
        let preferred = group.preferred.as_deref();
        let ordered = group
            .versions
            .iter()
            .filter(|(v, _)| Some(v.as_str()) == preferred)
            .chain(
                group
                    .versions
                    .iter()
                    .filter(|(v, _)| Some(v.as_str()) != preferred),
            );
        for (version, resources) in &group.versions {
            let api_version = match group.name.as_str() {
                "" => version.clone(),
                name => format!("{name}/{version}"),
            };
            for resource in resources.iter().flatten() {
                if !resource.name.contains('/') {
                    found
                        .kinds
                        .insert((api_version.clone(), resource.kind.clone()));
                }
            }
        }
        for (version, resources) in ordered {
            for resource in resources.iter().flatten() {
                let deletable = ["list", "watch", "delete"]
                    .iter()
                    .all(|verb| resource.verbs.iter().any(|v| v == verb));
                if resource.name.contains('/') || !deletable {
                    continue;
                }
                let key = (group.name.clone(), resource.name.clone());
                if chosen.contains_key(&key) {
                    continue;
                }
                let api = ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk(&group.name, version, &resource.kind),
                    &resource.name,
                );
                chosen.insert(key, found.resources.len());
                storage.push(
                    resource
                        .storage_version_hash
                        .clone()
                        .filter(|h| !h.is_empty()),
                );
                found.resources.push(Resource {
                    watched: !ignored.contains(&resource_name(&api)),
                    api,
                    namespaced: resource.namespaced,
                    served: true,
                    short_names: resource.short_names.clone().unwrap_or_default(),
                });
            }
        }
    }
    // One storage, several groups: keep the most mature version, then a group other than
    // the legacy `extensions`, then the first name.
    let mut by_storage: HashMap<&str, Vec<usize>> = HashMap::new();
    for (index, hash) in storage.iter().enumerate() {
        if let Some(hash) = hash {
            by_storage.entry(hash).or_default().push(index);
        }
    }
    let mut aliased = vec![false; found.resources.len()];
    for indices in by_storage.values().filter(|i| i.len() > 1) {
        let rank = |i: &usize| {
            let api = &found.resources[*i].api;
            (
                std::cmp::Reverse(maturity(&api.version)),
                api.group == "extensions",
                api.group.clone(),
            )
        };
        let Some(&canonical) = indices.iter().min_by_key(|i| rank(i)) else {
            continue;
        };
        let canonical_api = found.resources[canonical].api.clone();
        for &index in indices {
            let api = &found.resources[index].api;
            if index == canonical || api.group == canonical_api.group {
                continue;
            }
            aliased[index] = true;
            found.aliases.push(Alias {
                group: api.group.clone(),
                kind: api.kind.clone(),
                canonical: canonical_api.group.clone(),
            });
        }
    }
    let mut index = 0;
    found.resources.retain(|_| {
        index += 1;
        !aliased[index - 1]
    });
    found
        .aliases
        .sort_by(|a, b| (&a.group, &a.kind).cmp(&(&b.group, &b.kind)));
    found
}

/// How long asking for the list of groups may take, and then each group version.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Group versions asked for at once.
const DISCOVERY_CONCURRENCY: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("listing the served API groups: {0}")]
    Api(#[from] kube::Error),
    #[error("listing the served API groups took longer than {DISCOVERY_TIMEOUT:?}")]
    Timeout,
}

/// Asks the apiserver for its groups, then for each group version's resources (concurrently).
/// Only the lists of groups must answer; a group version that fails marks its group failed.
pub async fn discover(client: &Client, ignored: &[String]) -> Result<Found, DiscoveryError> {
    let core = in_time(client.list_core_api_versions()).await?;
    let listed = in_time(client.list_api_groups()).await?;
    let mut groups = vec![Group {
        name: String::new(),
        preferred: core.versions.first().cloned(),
        versions: core.versions.into_iter().map(|v| (v, None)).collect(),
    }];
    groups.extend(listed.groups.into_iter().map(|g| Group {
        name: g.name,
        preferred: g.preferred_version.map(|p| p.version),
        versions: g.versions.into_iter().map(|v| (v.version, None)).collect(),
    }));
    let asks: Vec<(usize, usize)> = groups
        .iter()
        .enumerate()
        .flat_map(|(g, group)| (0..group.versions.len()).map(move |v| (g, v)))
        .collect();
    let answers: Vec<(usize, usize, Option<Vec<APIResource>>)> = futures::stream::iter(asks)
        .map(|(g, v)| {
            let (group, version) = (&groups[g].name, &groups[g].versions[v].0);
            async move {
                let answer = if group.is_empty() {
                    in_time(client.list_core_api_resources(version)).await
                } else {
                    in_time(client.list_api_group_resources(&format!("{group}/{version}"))).await
                };
                let answer = answer
                    .inspect_err(|err| {
                        tracing::debug!(%err, group, version, "discovering a group version");
                    })
                    .ok()
                    .map(|list| list.resources);
                (g, v, answer)
            }
        })
        .buffer_unordered(DISCOVERY_CONCURRENCY)
        .collect()
        .await;
    for (g, v, answer) in answers {
        groups[g].versions[v].1 = answer;
    }
    Ok(choose(&groups, ignored))
}

async fn in_time<T>(
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, DiscoveryError> {
    tokio::time::timeout(DISCOVERY_TIMEOUT, call)
        .await
        .map_err(|_| DiscoveryError::Timeout)?
        .map_err(DiscoveryError::Api)
}

/// The resource `kind` names: its kind, plural or short name, case-insensitively, optionally
/// followed by `.group`; the core group and then the first match win.
pub fn resolve<'a>(resources: &'a [Resource], kind: &str) -> Option<&'a Resource> {
    let kind = kind.to_ascii_lowercase();
    let (name, group) = match kind.split_once('.') {
        Some((name, group)) => (name.to_owned(), Some(group.to_owned())),
        None => (kind.clone(), None),
    };
    let matches = |r: &&Resource| {
        let api = &r.api;
        let named = api.kind.eq_ignore_ascii_case(&name)
            || api.plural.eq_ignore_ascii_case(&name)
            || r.short_names.iter().any(|s| s.eq_ignore_ascii_case(&name));
        named && group.as_ref().is_none_or(|g| *g == api.group)
    };
    resources
        .iter()
        .filter(matches)
        .min_by_key(|r| !r.api.group.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(group: &str, version: &str, kind: &str, plural: &str) -> Resource {
        Resource {
            api: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, kind),
                plural,
            ),
            namespaced: true,
            served: true,
            watched: true,
            short_names: Vec::new(),
        }
    }

    fn found(resources: Vec<Resource>) -> Found {
        Found {
            resources,
            ..Found::default()
        }
    }

    fn served(kind: &str, plural: &str, hash: &str) -> APIResource {
        APIResource {
            kind: kind.into(),
            name: plural.into(),
            namespaced: true,
            storage_version_hash: Some(hash.into()),
            verbs: ["create", "delete", "get", "list", "watch"]
                .map(String::from)
                .into(),
            ..Default::default()
        }
    }

    fn group(
        name: &str,
        preferred: &str,
        versions: Vec<(&str, Option<Vec<APIResource>>)>,
    ) -> Group {
        Group {
            name: name.into(),
            preferred: Some(preferred.into()),
            versions: versions
                .into_iter()
                .map(|(v, r)| (v.to_owned(), r))
                .collect(),
        }
    }

    fn chosen(found: &Found) -> Vec<String> {
        found
            .resources
            .iter()
            .map(|r| format!("{}.{}", resource_name(&r.api), r.api.version))
            .collect()
    }

    #[test]
    fn ids_are_stable_across_discoveries() {
        let mut table = Resources::default();
        let first = table.update(found(vec![
            resource("", "v1", "ConfigMap", "configmaps"),
            resource("apps", "v1", "Deployment", "deployments"),
        ]));
        assert_eq!(first.added, [ResourceId::new(0), ResourceId::new(1)]);

        let second = table.update(found(vec![resource(
            "apps",
            "v1",
            "Deployment",
            "deployments",
        )]));
        assert_eq!(second.removed, [ResourceId::new(0)]);
        assert!(second.added.is_empty());
        assert_eq!(table.served().count(), 1);

        let third = table.update(found(vec![
            resource("", "v1", "ConfigMap", "configmaps"),
            resource("apps", "v1", "Deployment", "deployments"),
            resource("x.io", "v1", "Widget", "widgets"),
        ]));
        assert_eq!(third.added, [ResourceId::new(0), ResourceId::new(2)]);
        assert_eq!(table.by_name("widgets.x.io"), Some(ResourceId::new(2)));
        assert_eq!(table.by_name("configmaps"), Some(ResourceId::new(0)));
    }

    #[test]
    fn owner_kinds_resolve_in_any_version_of_their_group_while_served() {
        let mut table = Resources::default();
        table.update(found(vec![
            resource("", "v1", "ConfigMap", "configmaps"),
            resource("apps", "v1", "ReplicaSet", "replicasets"),
        ]));
        assert_eq!(
            table.by_kind("v1", "ConfigMap").unwrap().0,
            ResourceId::new(0)
        );
        assert_eq!(
            table.by_kind("apps/v1beta2", "ReplicaSet").unwrap().0,
            ResourceId::new(1)
        );
        assert!(table.by_kind("v1", "Pod").is_none());
        // A kind no longer served resolves to nothing, so it is never read (and taken for
        // absent) at a path that does not serve it.
        table.update(found(vec![resource("", "v1", "ConfigMap", "configmaps")]));
        assert!(table.by_kind("apps/v1", "ReplicaSet").is_none());
    }

    #[test]
    fn a_failed_group_keeps_its_resources_and_versions_and_may_gain() {
        let mut table = Resources::default();
        table.update(found(vec![
            resource("", "v1", "ConfigMap", "configmaps"),
            resource("metrics.x.io", "v1", "Sample", "samples"),
        ]));
        let mut broken = found(vec![
            resource("", "v1", "ConfigMap", "configmaps"),
            resource("metrics.x.io", "v2", "Sample", "samples"),
            resource("metrics.x.io", "v2", "Other", "others"),
        ]);
        broken.failed.insert("metrics.x.io".into());
        let changes = table.update(broken);
        assert!(changes.removed.is_empty() && changes.moved.is_empty());
        assert_eq!(changes.added, [ResourceId::new(2)]);
        assert!(changes.failed_changed);
        assert_eq!(table.get(ResourceId::new(1)).unwrap().api.version, "v1");
        assert!(table.by_kind("metrics.x.io/v1", "Sample").is_some());
        // Entirely absent from an answer, a failed group still keeps what it had.
        let mut gone = found(vec![resource("", "v1", "ConfigMap", "configmaps")]);
        gone.failed.insert("metrics.x.io".into());
        let changes = table.update(gone);
        assert!(changes.removed.is_empty() && !changes.failed_changed);
        // Recovered without the resource: now it is removed.
        let changes = table.update(found(vec![resource("", "v1", "ConfigMap", "configmaps")]));
        assert_eq!(changes.removed, [ResourceId::new(1), ResourceId::new(2)]);
        assert!(changes.failed_changed);
    }

    #[test]
    fn a_resource_served_at_another_version_moves() {
        let mut table = Resources::default();
        table.update(found(vec![resource(
            "x.io", "v1beta1", "Widget", "widgets",
        )]));
        let changes = table.update(found(vec![resource("x.io", "v1", "Widget", "widgets")]));
        assert_eq!(changes.moved, [ResourceId::new(0)]);
        assert_eq!(
            table.get(ResourceId::new(0)).unwrap().api.api_version,
            "x.io/v1"
        );
        let changes = table.update(found(vec![resource("x.io", "v1", "Widget", "widgets")]));
        assert_eq!(changes, Changes::default());
    }

    #[test]
    fn each_group_resource_is_watched_at_the_preferred_version_that_serves_it() {
        // batch on 1.20: Jobs in v1 (preferred), CronJobs only in v1beta1.
        let groups = [
            group(
                "batch",
                "v1",
                vec![
                    ("v1", Some(vec![served("Job", "jobs", "j")])),
                    (
                        "v1beta1",
                        Some(vec![
                            served("CronJob", "cronjobs", "c"),
                            served("Job", "jobs", "j"),
                        ]),
                    ),
                ],
            ),
            // A CRD group whose kinds are at different versions.
            group(
                "monitoring.x.io",
                "v1",
                vec![
                    ("v1", Some(vec![served("Prometheus", "prometheuses", "p")])),
                    ("v1alpha1", Some(vec![served("Config", "configs", "a")])),
                ],
            ),
        ];
        assert_eq!(
            chosen(&choose(&groups, &[])),
            [
                "jobs.batch.v1",
                "cronjobs.batch.v1beta1",
                "prometheuses.monitoring.x.io.v1",
                "configs.monitoring.x.io.v1alpha1"
            ]
        );
    }

    #[test]
    fn subresources_and_resources_that_cannot_be_deleted_are_left_out() {
        let mut status = served("Pod", "pods/status", "");
        status.verbs = vec!["get".into(), "patch".into()];
        let mut reviews = served("TokenReview", "tokenreviews", "");
        reviews.verbs = vec!["create".into()];
        let groups = [group(
            "",
            "v1",
            vec![(
                "v1",
                Some(vec![served("Pod", "pods", "p"), status, reviews]),
            )],
        )];
        let found = choose(&groups, &["pods".to_owned()]);
        assert_eq!(chosen(&found), ["pods.v1"]);
        assert!(!found.resources[0].watched);
    }

    #[test]
    fn a_failing_group_version_marks_its_group_and_spares_the_others() {
        let groups = [
            group(
                "",
                "v1",
                vec![("v1", Some(vec![served("Pod", "pods", "p")]))],
            ),
            group("metrics.k8s.io", "v1beta1", vec![("v1beta1", None)]),
        ];
        let found = choose(&groups, &[]);
        assert_eq!(chosen(&found), ["pods.v1"]);
        assert_eq!(found.failed, BTreeSet::from(["metrics.k8s.io".to_owned()]));
    }

    #[test]
    fn one_storage_under_two_groups_is_watched_once_and_referenced_through_both() {
        let groups = [
            group(
                "extensions",
                "v1beta1",
                vec![("v1beta1", Some(vec![served("Ingress", "ingresses", "i")]))],
            ),
            group(
                "networking.k8s.io",
                "v1",
                vec![
                    ("v1", Some(vec![served("Ingress", "ingresses", "i")])),
                    ("v1beta1", Some(vec![served("Ingress", "ingresses", "i")])),
                ],
            ),
        ];
        let found = choose(&groups, &[]);
        assert_eq!(chosen(&found), ["ingresses.networking.k8s.io.v1"]);
        let mut table = Resources::default();
        table.update(found);
        let (id, _) = table.by_kind("networking.k8s.io/v1", "Ingress").unwrap();
        assert_eq!(
            table.by_kind("extensions/v1beta1", "Ingress").unwrap().0,
            id
        );
        let aliases = table.aliases();
        assert_eq!(
            aliases.coordinates("extensions/v1beta1", "Ingress", "web"),
            aliases.coordinates("networking.k8s.io/v1", "Ingress", "web"),
        );
        assert_ne!(
            aliases.coordinates("extensions/v1beta1", "Deployment", "web"),
            aliases.coordinates("apps/v1", "Deployment", "web"),
        );
    }

    #[test]
    fn names_in_the_ignore_list_form() {
        assert_eq!(
            resource_name(&resource("", "v1", "Event", "events").api),
            "events"
        );
        assert_eq!(
            resource_name(&resource("events.k8s.io", "v1", "Event", "events").api),
            "events.events.k8s.io"
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
