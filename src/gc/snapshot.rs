//! The metadata of a scope — a namespace, or the whole cluster — read once through the
//! project's Kubernetes seam (paged lists with its timeouts) into a graph the collector's own
//! rules can run on, with each object's metadata and the facts a cascade needs: `syncgc plan`
//! and `syncgc explain` read what they say from it.

use std::collections::{HashMap, HashSet};

use anyhow::Context as _;
use serde::Serialize;

use super::cascade::Facts;
use super::discovery::{self, Resource, Resources, resolve};
use super::watch;
use crate::api::meta::Meta;
use crate::api::{Cluster, Target};
use crate::graph::{
    Coordinates, FinalizerPlaces, Flags, Graph, Guards, Mode, Observed, ResourceId, Uid,
};

/// What was read: the graph of the scope, the facts a cascade needs, each object's resource
/// and metadata, and what could not be listed.
pub struct Snapshot {
    pub graph: Graph,
    pub facts: Facts,
    pub objects: HashMap<Uid, (ResourceId, Meta)>,
    pub unlisted: Vec<Unlisted>,
    /// Objects with an owner of a kind that could not be listed, or of an API group whose
    /// discovery failed: whether that owner lives is not known.
    pub unjudged: HashSet<Uid>,
}

/// A resource (or an API group) that could not be listed, with why.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Unlisted {
    pub resource: String,
    pub error: String,
}

/// The object a command names as `KIND/NAME` (KIND a kind, plural or short name, optionally
/// `.group`), in a namespace or the kubeconfig's: its resource, found by a discovery, and the
/// table of every resource served.
pub struct Named {
    pub resource: Resource,
    pub name: String,
    /// Where a namespaced object is looked for.
    pub namespace: String,
    pub table: Resources,
}

impl Named {
    pub async fn find(
        cluster: &Cluster,
        kind_name: &str,
        namespace: Option<&str>,
    ) -> anyhow::Result<Self> {
        let (kind, name) = kind_name
            .split_once('/')
            .context("name the object as KIND/NAME, e.g. deployment/web")?;
        let namespace = namespace
            .map(str::to_owned)
            .unwrap_or_else(|| cluster.streams().default_namespace().to_owned());
        let found = discovery::discover(cluster.streams(), &[]).await?;
        let resource = resolve(&found.resources, kind)
            .with_context(|| {
                format!("the apiserver serves no kind {kind:?} (with list and delete)")
            })?
            .clone();
        let mut table = Resources::default();
        table.update(found);
        Ok(Self {
            resource,
            name: name.to_owned(),
            namespace,
            table,
        })
    }

    /// The namespace its scope is: none for a cluster-scoped object, whose dependents may be
    /// anywhere.
    pub fn scope(&self) -> Option<&str> {
        self.resource.namespaced.then_some(self.namespace.as_str())
    }
}

impl Snapshot {
    /// The uid of the object `named`, or why it is not there: its kind could not be listed,
    /// or it does not exist.
    pub fn uid_of(&self, named: &Named) -> anyhow::Result<Uid> {
        let resource = discovery::resource_name(&named.resource.api);
        let id = named.table.by_name(&resource);
        let found = self
            .objects
            .iter()
            .find(|(_, (r, meta))| Some(*r) == id && meta.name == named.name);
        if let Some((uid, _)) = found {
            return Ok(*uid);
        }
        if let Some(unlisted) = self.unlisted.iter().find(|u| u.resource == resource) {
            anyhow::bail!("{resource} could not be listed: {}", unlisted.error);
        }
        let kind = named.resource.api.kind.to_ascii_lowercase();
        match named.scope() {
            Some(ns) => anyhow::bail!("{kind}/{} not found in namespace {ns}", named.name),
            None => anyhow::bail!("{kind}/{} not found", named.name),
        }
    }

    /// Lists every resource of the scope (`namespace`, or the whole cluster), metadata only,
    /// into a graph. A namespace's scope takes in the cluster-scoped objects that name one of
    /// its objects as an owner: Kubernetes' collector links them by uid.
    pub async fn read(cluster: &Cluster, resources: &Resources, namespace: Option<&str>) -> Self {
        let mut read = Self {
            graph: Graph::new(Mode::Standalone),
            facts: Facts::default(),
            objects: HashMap::new(),
            unlisted: Vec::new(),
            unjudged: HashSet::new(),
        };
        let mut cluster_scoped = Vec::new();
        for (id, resource) in resources.served() {
            let elsewhere = namespace.is_some() && !resource.namespaced;
            let collection = Target::collection(&resource.api, namespace.filter(|_| !elsewhere));
            let mut listed = Vec::new();
            let result = cluster
                .list_metadata(&collection, |page: Vec<Meta>| listed.extend(page))
                .await;
            if let Err(err) = result {
                read.unlisted.push(Unlisted {
                    resource: discovery::resource_name(&resource.api),
                    error: err.to_string(),
                });
                continue;
            }
            for meta in listed {
                let Some(observed) = watch::observe(&resource.api, &meta, resources.aliases())
                else {
                    continue;
                };
                if elsewhere {
                    if !observed.owners.is_empty() {
                        cluster_scoped.push((id, observed, meta));
                    }
                } else {
                    Self::take(&mut read, id, observed, meta);
                }
            }
        }
        for (id, observed, meta) in cluster_scoped {
            if observed
                .owners
                .iter()
                .any(|o| read.objects.contains_key(&o.uid))
            {
                Self::take(&mut read, id, observed, meta);
            }
        }
        // References whose owners cannot be looked up: of a kind not served or not listed, or a
        // namespaced owner of a cluster-scoped object; and those whose version is not served.
        let unlisted: HashSet<&str> = read.unlisted.iter().map(|u| u.resource.as_str()).collect();
        for (uid, (_, meta)) in &read.objects {
            for reference in &meta.owner_references {
                let key = (*uid, Uid::parse(&reference.uid));
                let resource = resources.by_kind(&reference.api_version, &reference.kind);
                let listed = resource.is_some_and(|(_, r)| {
                    !unlisted.contains(discovery::resource_name(&r.api).as_str())
                });
                let group = discovery::group_of(&reference.api_version);
                if (resource.is_some() && !listed) || resources.failed_groups().contains(group) {
                    read.unjudged.insert(*uid);
                }
                let resolvable = listed
                    && resource.is_some_and(|(_, r)| !r.namespaced || meta.namespace.is_some());
                if !resolvable {
                    read.facts.unresolvable.insert(key);
                } else if !resources.serves_version(&reference.api_version, &reference.kind) {
                    read.facts.unserved_version.insert(key);
                }
            }
        }
        read
    }

    /// Puts one object read into the graph, with its finalizers of others.
    fn take(read: &mut Self, id: ResourceId, observed: Observed, meta: Meta) {
        let uid = observed.uid;
        read.facts.note_foreign(&observed);
        read.graph.apply(id, observed);
        read.objects.insert(uid, (id, meta));
    }

    /// Reads the owners of the tree of `target` that the lists did not cover (a cluster-scoped
    /// owner of a namespaced object), so that an owner that lives keeps its dependents.
    pub async fn read_owners(&mut self, cluster: &Cluster, resources: &Resources, target: Uid) {
        let read = self;
        let tree: Vec<Uid> = read.graph.tree(target).collect();
        let mut missing = Vec::new();
        for uid in &tree {
            let Some((_, meta)) = read.objects.get(uid) else {
                continue;
            };
            for reference in &meta.owner_references {
                let owner = Uid::parse(&reference.uid);
                let seen = read
                    .graph
                    .node(owner)
                    .is_some_and(|n| !n.is(Flags::VIRTUAL));
                if !seen && !read.facts.unresolvable.contains(&(*uid, owner)) {
                    missing.push(reference.clone());
                }
            }
        }
        for reference in missing {
            let Some((id, resource)) = resources.by_kind(&reference.api_version, &reference.kind)
            else {
                continue;
            };
            if resource.namespaced {
                // A namespaced owner is in its dependent's namespace, which was listed.
                continue;
            }
            let target = Target {
                resource: resource.api.clone(),
                namespace: None,
                name: reference.name.clone(),
                uid: reference.uid.clone(),
            };
            match cluster.get_metadata(&target).await {
                Ok(Some(object)) => {
                    let flags = Flags::of_object(&object);
                    let meta = Meta {
                        name: reference.name.clone(),
                        uid: Some(reference.uid.clone()),
                        finalizers: object.finalizers.unwrap_or_default(),
                        ..Meta::default()
                    };
                    let observed = Observed {
                        uid: Uid::parse(&reference.uid),
                        coordinates: Coordinates::in_group(
                            &resource.api.group,
                            &resource.api.kind,
                            &reference.name,
                        ),
                        name: reference.name.clone(),
                        flags,
                        places: FinalizerPlaces::of(&meta),
                        guards: Guards::of(&meta),
                        ..Observed::default()
                    };
                    Self::take(read, id, observed, meta);
                }
                Ok(None) => {}
                Err(err) => read.unlisted.push(Unlisted {
                    resource: format!(
                        "{} {}",
                        discovery::resource_name(&resource.api),
                        reference.name
                    ),
                    error: err.to_string(),
                }),
            }
        }
    }
}
