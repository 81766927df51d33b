//! Which resources the garbage collector watches: every resource the apiserver serves with
//! list, watch and delete (built-ins, aggregated APIs, custom resources), but for an ignore list,
//! kept in a table whose ids never change while the process runs.

use std::collections::HashMap;
use std::time::Duration;

use kube::Client;
use kube::api::ApiResource;
use kube::discovery::{Discovery, Scope, verbs};

use crate::graph::ResourceId;

/// A watched (or once watched) resource.
#[derive(Debug, Clone)]
pub struct Resource {
    pub api: ApiResource,
    pub namespaced: bool,
    /// Still served, as of the last discovery.
    pub served: bool,
    /// Watched (not ignored). Ignored resources stay in the table so that owners of their
    /// kinds can still be read.
    pub watched: bool,
}

/// The table of resources, indexed by [`ResourceId`].
#[derive(Debug, Default)]
pub struct Resources {
    list: Vec<Resource>,
    by_group_resource: HashMap<(String, String), ResourceId>,
    by_group_kind: HashMap<(String, String), ResourceId>,
}

/// What a discovery changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<ResourceId>,
    pub removed: Vec<ResourceId>,
}

impl Resources {
    pub fn get(&self, id: ResourceId) -> Option<&Resource> {
        self.list.get(id.index())
    }

    /// The resource an ownerReference's `apiVersion` and `kind` name: the same group and kind
    /// (in whatever version is served).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<(ResourceId, &Resource)> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let id = *self
            .by_group_kind
            .get(&(group.to_owned(), kind.to_owned()))?;
        Some((id, self.get(id)?))
    }

    pub fn served(&self) -> impl Iterator<Item = (ResourceId, &Resource)> {
        self.list
            .iter()
            .enumerate()
            .filter(|(_, r)| r.served)
            .map(|(i, r)| (ResourceId::new(i as u16), r))
    }

    /// Takes in what discovery found: new resources get ids, ones no longer served are marked.
    pub fn update(&mut self, found: Vec<Resource>) -> Changes {
        let mut changes = Changes::default();
        let mut still = vec![false; self.list.len()];
        for resource in found {
            let key = (resource.api.group.clone(), resource.api.plural.clone());
            match self.by_group_resource.get(&key) {
                Some(id) => {
                    let index = id.index();
                    still[index] = true;
                    if !self.list[index].served {
                        changes.added.push(*id);
                    }
                    self.list[index] = Resource {
                        served: true,
                        ..resource
                    };
                }
                None => {
                    let Some(index) = u16::try_from(self.list.len())
                        .ok()
                        .filter(|i| *i < u16::MAX)
                    else {
                        tracing::error!("more than 65535 resources; not watching {key:?}");
                        continue;
                    };
                    let id = ResourceId::new(index);
                    self.by_group_kind
                        .insert((resource.api.group.clone(), resource.api.kind.clone()), id);
                    self.by_group_resource.insert(key, id);
                    self.list.push(Resource {
                        served: true,
                        ..resource
                    });
                    still.push(true);
                    changes.added.push(id);
                }
            }
        }
        for (index, served) in still.into_iter().enumerate() {
            if !served && self.list[index].served {
                self.list[index].served = false;
                changes.removed.push(ResourceId::new(index as u16));
            }
        }
        changes
    }
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

/// How long one discovery may take.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("discovering the served resources: {0}")]
    Api(#[from] kube::Error),
    #[error("discovering the served resources took longer than {DISCOVERY_TIMEOUT:?}")]
    Timeout,
}

/// Asks the apiserver (group by group) for the resources it serves with list, watch and delete,
/// marking `ignored` ones as not watched.
pub async fn discover(
    client: &Client,
    ignored: &[String],
) -> Result<Vec<Resource>, DiscoveryError> {
    let discovery = tokio::time::timeout(DISCOVERY_TIMEOUT, Discovery::new(client.clone()).run())
        .await
        .map_err(|_| DiscoveryError::Timeout)??;
    Ok(discovery
        .groups()
        .flat_map(|group| group.recommended_resources())
        .filter(|(_, caps)| {
            [verbs::LIST, verbs::WATCH, verbs::DELETE]
                .iter()
                .all(|verb| caps.supports_operation(verb))
        })
        .map(|(api, caps)| Resource {
            watched: !ignored.contains(&resource_name(&api)),
            api,
            namespaced: caps.scope == Scope::Namespaced,
            served: true,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(group: &str, version: &str, kind: &str, plural: &str) -> Resource {
        Resource {
            api: ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: if group.is_empty() {
                    version.into()
                } else {
                    format!("{group}/{version}")
                },
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced: true,
            served: true,
            watched: true,
        }
    }

    #[test]
    fn ids_are_stable_across_discoveries() {
        let mut table = Resources::default();
        let first = table.update(vec![
            resource("", "v1", "ConfigMap", "configmaps"),
            resource("apps", "v1", "Deployment", "deployments"),
        ]);
        assert_eq!(first.added, [ResourceId::new(0), ResourceId::new(1)]);

        let second = table.update(vec![resource("apps", "v1", "Deployment", "deployments")]);
        assert_eq!(
            second,
            Changes {
                added: vec![],
                removed: vec![ResourceId::new(0)]
            }
        );
        assert_eq!(table.served().count(), 1);

        let third = table.update(vec![
            resource("", "v1", "ConfigMap", "configmaps"),
            resource("apps", "v1", "Deployment", "deployments"),
            resource("x.io", "v1", "Widget", "widgets"),
        ]);
        assert_eq!(third.added, [ResourceId::new(0), ResourceId::new(2)]);
    }

    #[test]
    fn owner_kinds_resolve_in_any_version_of_their_group() {
        let mut table = Resources::default();
        table.update(vec![
            resource("", "v1", "ConfigMap", "configmaps"),
            resource("apps", "v1", "ReplicaSet", "replicasets"),
        ]);
        assert_eq!(
            table.by_kind("v1", "ConfigMap").unwrap().0,
            ResourceId::new(0)
        );
        assert_eq!(
            table.by_kind("apps/v1beta2", "ReplicaSet").unwrap().0,
            ResourceId::new(1)
        );
        assert!(table.by_kind("v1", "Pod").is_none());
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
}
