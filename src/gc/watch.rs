//! One metadata-only watch per resource (a reflector: list, then watch from the list's
//! version), turned into graph events for the graph's one writer.

use parking_lot::RwLock;
use std::collections::HashSet;
use std::sync::Arc;

use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::{ApiResource, ListParams, WatchEvent, WatchParams};
use tokio::sync::mpsc;

use super::discovery::{Aliases, Resource};
use crate::api::MetaList;
use crate::api::meta::{Item, Meta};
use crate::duration::Backoff;
use crate::graph::{
    Coordinates, FinalizerPlaces, Flags, Observed, OwnerLink, ResourceId, Uid, UidHash,
};
use crate::metrics::Metrics;
use crate::names::DELETION_ORDER_ANNOTATION;

/// What a watch tells the graph's writer.
#[derive(Debug)]
pub enum GraphEvent {
    Apply(ResourceId, Observed),
    /// Objects of a list, applied together.
    Page(ResourceId, Vec<Observed>),
    Delete(ResourceId, Uid),
    /// A (re)list is complete: these are all the objects of the resource (`None`: the
    /// graph held none of them before, so the list's own are all there are).
    Listed(ResourceId, Option<HashSet<Uid, UidHash>>),
    /// The first list failed; the watch keeps retrying.
    ListFailed(ResourceId),
    /// The resource is no longer served (its watch has stopped).
    Unserved(ResourceId),
    /// The watch of a resource changed state.
    State(ResourceId, WatchState),
}

/// What the graph keeps of an object's metadata; `None` for an object without a uid. The
/// coordinates its references name are taken through `aliases`.
pub fn observe(resource: &ApiResource, meta: &Meta, aliases: &Aliases) -> Option<Observed> {
    let uid = Uid::parse(meta.uid.as_deref()?);
    Some(Observed {
        uid,
        coordinates: Coordinates::in_group(&resource.group, &resource.kind, &meta.name),
        namespace: meta.namespace.clone(),
        resource_version: meta
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        name: meta.name.clone(),
        owners: meta
            .owner_references
            .iter()
            .map(|r| OwnerLink {
                uid: Uid::parse(&r.uid),
                coordinates: aliases.coordinates(&r.api_version, &r.kind, &r.name),
                block_owner_deletion: r.block_owner_deletion == Some(true),
            })
            .collect(),
        flags: Flags::of(meta),
        places: FinalizerPlaces::of(meta),
        order: crate::graph::Order::of(meta.annotations.get(DELETION_ORDER_ANNOTATION)),
        deleted_at: meta.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
    })
}

/// Where a watch's first list is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum InitialList {
    /// The apiserver's watch cache (`resourceVersion=0`), every object in one answer.
    #[default]
    WatchCache,
    /// etcd, consistently, a page at a time.
    Etcd,
}

/// How a watch stands, as the release barrier needs to know (see [`super::barrier`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchState {
    /// Listing: at start, or again after its resourceVersion expired (410 Gone).
    Listing,
    /// Listed, and its watch request is open.
    Watching,
    /// Its last request failed; it retries with backoff.
    Failing,
}

/// The first and the longest wait before a failed request is tried again.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(30));
/// How long a watch request may wait for the apiserver's answer, which comes as soon as the
/// watch is registered: a watch that waits longer (its connection's streams all taken, say)
/// fails, is said and counted, and is tried again.
const WATCH_STARTS_WITHIN: Duration = Duration::from_secs(60);

/// How many listed objects the graph takes in at a time.
const BATCH: usize = 1000;

/// The receiving end is gone: the watch ends.
struct Closed;

/// Where a watch sends what it sees, with the state it last reported.
struct Feed {
    id: ResourceId,
    events: mpsc::Sender<GraphEvent>,
    state: Option<WatchState>,
}

impl Feed {
    async fn send(&self, event: GraphEvent) -> Result<(), Closed> {
        self.events.send(event).await.map_err(|_| Closed)
    }

    async fn state(&mut self, state: WatchState) -> Result<(), Closed> {
        if self.state != Some(state) {
            self.state = Some(state);
            self.send(GraphEvent::State(self.id, state)).await?;
        }
        Ok(())
    }
}

/// Watches `resource` (metadata only) until the returned future is dropped, sending what it sees
/// to `events`: a list (from the watch cache, all at once, or with `--initial-list etcd` and
/// after a 410 consistent and paged), then a watch from the list's resourceVersion, resumed
/// from the last version seen (events and bookmarks) when it ends, listed again when that
/// version has expired. Every failure is logged, counted and retried with backoff; each change
/// of state is reported. `fresh`: the graph holds no object of the resource yet, so a first
/// list that succeeds at once need not say which objects it found.
#[expect(clippy::too_many_arguments, reason = "what one watch is given")]
pub async fn watch(
    client: Client,
    id: ResourceId,
    resource: Resource,
    initial_list: InitialList,
    fresh: bool,
    aliases: Arc<RwLock<Aliases>>,
    events: mpsc::Sender<GraphEvent>,
    metrics: Metrics,
) {
    let mut feed = Feed {
        id,
        events,
        state: None,
    };
    let reflector = Reflector {
        request: kube::core::Request::new(
            crate::api::Target::collection(&resource.api, None).resource_url(),
        ),
        client,
        name: super::discovery::resource_name(&resource.api),
        resource: &resource,
        initial_list,
        aliases,
        metrics,
    };
    let _ = reflector.run(&mut feed, fresh).await;
}

struct Reflector<'a> {
    client: Client,
    /// Requests for the resource in every namespace.
    request: kube::core::Request,
    name: String,
    resource: &'a Resource,
    initial_list: InitialList,
    aliases: Arc<RwLock<Aliases>>,
    metrics: Metrics,
}

/// How a watch request ended.
enum Ended {
    /// Normally (its timeout), or by an error: resume from the last version seen.
    Resume,
    /// Its resourceVersion has expired: list again.
    Expired,
}

impl Reflector<'_> {
    fn observe(&self, meta: &Meta) -> Option<Observed> {
        let aliases = self.aliases.read();
        observe(&self.resource.api, meta, &aliases)
    }

    async fn run(&self, feed: &mut Feed, mut fresh: bool) -> Result<(), Closed> {
        let mut backoff = Backoff::new(BACKOFF.0, BACKOFF.1);
        let mut listed_once = false;
        let mut failures = 0u32;
        // As informers do: the first list is served from the apiserver's watch cache (unless
        // asked otherwise); a list after the watch's resourceVersion expired is read from etcd.
        let mut from_cache = self.initial_list == InitialList::WatchCache;
        loop {
            feed.state(WatchState::Listing).await?;
            let listed = self.list(feed, from_cache, fresh).await?;
            // A list that failed part way may have sent objects: the next says what it found.
            fresh = false;
            let mut version = match listed {
                Ok(version) => version,
                Err(err) => {
                    failures += 1;
                    if !listed_once && failures == 3 {
                        feed.send(GraphEvent::ListFailed(feed.id)).await?;
                    }
                    self.failed(feed, "listing", &err, &mut backoff).await?;
                    continue;
                }
            };
            if !listed_once {
                tracing::debug!(resource = %self.name, "listed");
            }
            listed_once = true;
            from_cache = false;
            loop {
                let request = self
                    .request
                    .watch_metadata(&WatchParams::default(), &version)
                    .map_err(kube::Error::BuildRequest);
                let started = tokio::time::timeout(WATCH_STARTS_WITHIN, async {
                    self.client.request_events::<Item>(request?).await
                });
                let stream = match started.await.unwrap_or_else(|_| Err(not_started())) {
                    Ok(stream) => stream,
                    Err(err) if is_expired(&err) => break,
                    Err(err) => {
                        self.failed(feed, "watching", &err, &mut backoff).await?;
                        continue;
                    }
                };
                feed.state(WatchState::Watching).await?;
                backoff.reset();
                match self.follow(feed, stream, &mut version).await? {
                    Ok(Ended::Resume) => {}
                    Ok(Ended::Expired) => break,
                    Err(err) => self.failed(feed, "watching", &err, &mut backoff).await?,
                }
            }
            // Only an expired resourceVersion ends the watching: list again.
            self.metrics.watch_relists.inc();
        }
    }

    /// Lists every object — `from_cache`, all at once from the apiserver's watch cache
    /// (`resourceVersion=0`), else consistently from etcd a page at a time — sending them in
    /// batches, then the listed set (unless `fresh`); returns the list's resourceVersion.
    async fn list(
        &self,
        feed: &Feed,
        from_cache: bool,
        fresh: bool,
    ) -> Result<Result<String, kube::Error>, Closed> {
        let mut listed = (!fresh).then(HashSet::default);
        let mut params = if from_cache {
            ListParams {
                resource_version: Some("0".to_owned()),
                ..ListParams::default()
            }
        } else {
            ListParams::default().limit(crate::api::LIST_PAGE)
        };
        loop {
            let request = match self.request.list_metadata(&params) {
                Ok(request) => request,
                Err(err) => return Ok(Err(kube::Error::BuildRequest(err))),
            };
            let mut list = match MetaList::send(&self.client, request).await {
                Ok(list) => list,
                Err(err) => return Ok(Err(err)),
            };
            loop {
                match list.next().await {
                    Ok(Some(objects)) => self.take_in(feed, &objects, &mut listed).await?,
                    Ok(None) => break,
                    Err(err) => return Ok(Err(err)),
                }
            }
            let list = match list.finish() {
                Ok(list) => list,
                Err(err) => return Ok(Err(err)),
            };
            match list.continue_ {
                Some(token) => params = params.continue_token(&token),
                None => {
                    let version = list.resource_version.unwrap_or_default();
                    feed.send(GraphEvent::Listed(feed.id, listed)).await?;
                    return Ok(Ok(version));
                }
            }
        }
    }

    /// Sends listed objects to the graph, in batches, noting their uids in `listed`.
    async fn take_in(
        &self,
        feed: &Feed,
        objects: &[Meta],
        listed: &mut Option<HashSet<Uid, UidHash>>,
    ) -> Result<(), Closed> {
        for batch in objects.chunks(BATCH) {
            let observed: Vec<Observed> = {
                let aliases = self.aliases.read();
                batch
                    .iter()
                    .filter_map(|meta| observe(&self.resource.api, meta, &aliases))
                    .inspect(|o| {
                        if let Some(listed) = listed.as_mut() {
                            listed.insert(o.uid);
                        }
                    })
                    .collect()
            };
            feed.send(GraphEvent::Page(feed.id, observed)).await?;
        }
        Ok(())
    }

    /// Sends a watch's events until it ends, keeping `version` at the last one seen.
    async fn follow(
        &self,
        feed: &Feed,
        stream: impl futures::Stream<Item = kube::Result<WatchEvent<Item>>>,
        version: &mut String,
    ) -> Result<Result<Ended, kube::Error>, Closed> {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let object = match event {
                Ok(WatchEvent::Added(object) | WatchEvent::Modified(object)) => object,
                Ok(WatchEvent::Deleted(object)) => {
                    remember(version, &object.metadata);
                    if let Some(uid) = object.metadata.uid.as_deref() {
                        feed.send(GraphEvent::Delete(feed.id, Uid::parse(uid)))
                            .await?;
                    }
                    continue;
                }
                Ok(WatchEvent::Bookmark(bookmark)) => {
                    *version = bookmark.metadata.resource_version;
                    continue;
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => {
                    return Ok(Ok(Ended::Expired));
                }
                Ok(WatchEvent::Error(status)) => return Ok(Err(kube::Error::Api(status))),
                Err(err) => return Ok(Err(err)),
            };
            remember(version, &object.metadata);
            if let Some(observed) = self.observe(&object.metadata) {
                feed.send(GraphEvent::Apply(feed.id, observed)).await?;
            }
        }
        Ok(Ok(Ended::Resume))
    }

    /// A request failed: says so, counts it, and waits before the next.
    async fn failed(
        &self,
        feed: &mut Feed,
        what: &str,
        err: &kube::Error,
        backoff: &mut Backoff,
    ) -> Result<(), Closed> {
        self.metrics.watch_errors.inc();
        let wait = backoff.failed();
        tracing::warn!(resource = %self.name, %err, retry_in = ?wait, "{what} failed; retrying with backoff");
        feed.state(WatchState::Failing).await?;
        tokio::time::sleep(wait).await;
        Ok(())
    }
}

fn remember(version: &mut String, meta: &Meta) {
    if let Some(v) = &meta.resource_version {
        version.clone_from(v);
    }
}

/// A watch request with no answer within [`WATCH_STARTS_WITHIN`].
fn not_started() -> kube::Error {
    kube::Error::ReadEvents(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("the watch request had no answer within {WATCH_STARTS_WITHIN:?}"),
    ))
}

/// Whether a request failed because the resourceVersion it named has expired.
fn is_expired(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 410)
}
