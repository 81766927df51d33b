//! One metadata-only watch per resource, turned into graph events for the graph's one writer.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::mpsc;

use super::discovery::{Aliases, Resource};
use crate::graph::{Coordinates, Flags, Observed, OwnerLink, ResourceId, Uid};
use crate::metrics::Metrics;
use crate::names::{
    FOREGROUND_FINALIZER, ORPHAN_FINALIZER, SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER,
};

/// What a watch tells the graph's writer.
#[derive(Debug)]
pub enum GraphEvent {
    Apply(ResourceId, Observed),
    Delete(ResourceId, Uid),
    /// A (re)list is complete: these are all the objects of the resource.
    Listed(ResourceId, HashSet<Uid>),
    /// The first list failed; the watch keeps retrying.
    ListFailed(ResourceId),
    /// The resource is no longer served (its watch has stopped).
    Unserved(ResourceId),
}

/// What the graph keeps of an object's metadata; `None` for an object without a uid. The
/// coordinates its references name are taken through `aliases`.
pub fn observe(resource: &ApiResource, meta: &ObjectMeta, aliases: &Aliases) -> Option<Observed> {
    let uid = Uid::parse(meta.uid.as_deref()?);
    let name = meta.name.clone().unwrap_or_default();
    Some(Observed {
        uid,
        coordinates: Coordinates::in_group(&resource.group, &resource.kind, &name),
        namespace: meta.namespace.clone(),
        resource_version: meta
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        name,
        owners: meta
            .owner_references
            .iter()
            .flatten()
            .map(|r| OwnerLink {
                uid: Uid::parse(&r.uid),
                coordinates: aliases.coordinates(&r.api_version, &r.kind, &r.name),
                block_owner_deletion: r.block_owner_deletion == Some(true),
            })
            .collect(),
        flags: flags_of(meta),
        deleted_at: meta.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
    })
}

/// The state the graph keeps of an object, read from its metadata.
pub fn flags_of(meta: &ObjectMeta) -> Flags {
    let finalizers = meta.finalizers.as_deref().unwrap_or_default();
    let has = |f: &str| finalizers.iter().any(|x| x == f);
    let opted_in = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(SYNCHRONOUS_ANNOTATION))
        .is_some_and(|v| v == "true");
    Flags::empty()
        .with(Flags::DELETING, meta.deletion_timestamp.is_some())
        .with(Flags::ARMED, has(SYNCHRONOUS_FINALIZER))
        .with(Flags::OPTED_IN, opted_in)
        .with(Flags::FOREGROUND, has(FOREGROUND_FINALIZER))
        .with(Flags::ORPHAN, has(ORPHAN_FINALIZER))
}

/// Watches `resource` (metadata only) until the returned future is dropped, sending what it sees
/// to `events`. Errors are logged and counted; the watch retries with backoff.
pub async fn watch(
    client: Client,
    id: ResourceId,
    resource: Resource,
    aliases: Arc<RwLock<Aliases>>,
    events: mpsc::Sender<GraphEvent>,
    metrics: Metrics,
) {
    let observe = |meta: &ObjectMeta| {
        let aliases = aliases.read().unwrap_or_else(|e| e.into_inner());
        observe(&resource.api, meta, &aliases)
    };
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &resource.api);
    let name = super::discovery::resource_name(&resource.api);
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listing: Option<HashSet<Uid>> = None;
    let mut listed_once = false;
    let mut failures = 0u32;
    while let Some(event) = stream.next().await {
        let send = match event {
            Ok(Event::Init) => {
                listing = Some(HashSet::new());
                None
            }
            Ok(Event::InitApply(object)) => {
                let observed = observe(&object.metadata);
                if let (Some(listing), Some(o)) = (listing.as_mut(), &observed) {
                    listing.insert(o.uid);
                }
                observed.map(|o| GraphEvent::Apply(id, o))
            }
            Ok(Event::InitDone) => {
                if !listed_once {
                    tracing::debug!(resource = %name, "listed");
                }
                listed_once = true;
                Some(GraphEvent::Listed(id, listing.take().unwrap_or_default()))
            }
            Ok(Event::Apply(object)) => observe(&object.metadata).map(|o| GraphEvent::Apply(id, o)),
            Ok(Event::Delete(object)) => object
                .metadata
                .uid
                .as_deref()
                .map(|uid| GraphEvent::Delete(id, Uid::parse(uid))),
            Err(err) => {
                metrics.watch_errors.inc();
                failures += 1;
                tracing::warn!(resource = %name, %err, "watch failed; retrying with backoff");
                (!listed_once && failures == 3).then_some(GraphEvent::ListFailed(id))
            }
        };
        if let Some(send) = send
            && events.send(send).await.is_err()
        {
            return;
        }
    }
}
