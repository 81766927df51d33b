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
use crate::api::meta::{Item, Meta};
use crate::api::{MetaList, ServerVersion};
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
                served: aliases.serves(&r.api_version, &r.kind),
            })
            .collect(),
        flags: Flags::of(meta),
        places: FinalizerPlaces::of(meta),
        order: crate::graph::Order::of(meta.annotations.get(DELETION_ORDER_ANNOTATION)),
        deleted_at: meta.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
        guards: crate::graph::Guards::of(meta),
    })
}

/// Where a watch's first list is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum InitialList {
    /// `stream` where the apiserver streams lists by default, else `watch-cache`.
    #[default]
    Auto,
    /// The apiserver's watch cache (`resourceVersion=0`), every object in one answer.
    WatchCache,
    /// etcd, consistently, a page at a time.
    Etcd,
    /// A streaming list: the watch's first events are the objects, from the watch cache,
    /// and a bookmark marks their end (`sendInitialEvents`, the WatchList feature). Neither
    /// side builds the whole list, and the first objects arrive at once.
    Stream,
}

impl InitialList {
    /// What this is on an apiserver of `version` (`None`: not known): `Auto` is `Stream` on
    /// the versions whose WatchList feature is on by default — 1.32, and 1.34 on (1.33 turned
    /// it off) — and `WatchCache` on the others.
    pub fn on(self, version: Option<ServerVersion>) -> Self {
        let streams = |v: ServerVersion| v.major > 1 || (v.minor >= 32 && v.minor != 33);
        match self {
            Self::Auto if version.is_some_and(streams) => Self::Stream,
            Self::Auto => Self::WatchCache,
            chosen => chosen,
        }
    }
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

/// The annotation of the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A watch's events, as they arrive.
type Events = futures::stream::BoxStream<'static, kube::Result<WatchEvent<Item>>>;

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
        // As informers do: a list is streamed where the apiserver streams lists; otherwise the
        // first is served from its watch cache (unless asked otherwise), and a list after the
        // watch's resourceVersion expired is read from etcd.
        let mut how = self.initial_list;
        loop {
            feed.state(WatchState::Listing).await?;
            let listed = if how == InitialList::Stream {
                self.stream_list(feed, fresh).await?
            } else {
                let from_cache = how != InitialList::Etcd;
                (self.list(feed, from_cache, fresh).await?).map(|version| (version, None))
            };
            // A list that failed part way may have sent objects: the next says what it found.
            fresh = false;
            let (mut version, mut open) = match listed {
                Ok(listed) => listed,
                Err(err) if how == InitialList::Stream && refused(&err) => {
                    tracing::debug!(resource = %self.name, %err, "the apiserver does not stream lists; listing instead");
                    // A relist after a 410 reads etcd, as below.
                    how = if listed_once {
                        InitialList::Etcd
                    } else {
                        InitialList::WatchCache
                    };
                    continue;
                }
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
            if how == InitialList::WatchCache {
                how = InitialList::Etcd;
            }
            loop {
                // A streamed list's watch goes on from its end; otherwise a watch is opened.
                let events = match open.take() {
                    Some(events) => events,
                    None => match self.open(&WatchParams::default(), &version).await {
                        Ok(events) => events,
                        Err(err) if is_expired(&err) => break,
                        Err(err) => {
                            self.failed(feed, "watching", &err, &mut backoff).await?;
                            continue;
                        }
                    },
                };
                feed.state(WatchState::Watching).await?;
                backoff.reset();
                match self.follow(feed, events, &mut version).await? {
                    Ok(Ended::Resume) => {}
                    Ok(Ended::Expired) => break,
                    Err(err) => self.failed(feed, "watching", &err, &mut backoff).await?,
                }
            }
            // Only an expired resourceVersion ends the watching: list again.
            self.metrics.watch_relists.inc();
        }
    }

    /// Opens a watch of the resource with `params` from `version`; one that the apiserver does
    /// not answer within [`WATCH_STARTS_WITHIN`] fails.
    async fn open(&self, params: &WatchParams, version: &str) -> Result<Events, kube::Error> {
        let request = self
            .request
            .watch_metadata(params, version)
            .map_err(kube::Error::BuildRequest)?;
        let started = self.client.request_events::<Item>(request);
        match tokio::time::timeout(WATCH_STARTS_WITHIN, started).await {
            Ok(events) => Ok(events?.boxed()),
            Err(_) => Err(kube::Error::ReadEvents(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the watch request had no answer within {WATCH_STARTS_WITHIN:?}"),
            ))),
        }
    }

    /// Lists by streaming: opens a watch whose first events are every object (at least as new
    /// as a consistent read) and takes them in as [`Reflector::list`] takes a list's; returns
    /// the resourceVersion of the bookmark that ends them, and the watch, which goes on from
    /// there.
    async fn stream_list(
        &self,
        feed: &Feed,
        fresh: bool,
    ) -> Result<Result<(String, Option<Events>), kube::Error>, Closed> {
        let params = WatchParams {
            send_initial_events: true,
            ..WatchParams::default()
        };
        match self.open(&params, "").await {
            Ok(events) => self.initial_events(feed, events, fresh).await,
            Err(err) => Ok(Err(err)),
        }
    }

    /// Takes in a streaming list's initial `events`, in batches, up to the bookmark that ends
    /// them, then the listed set (unless `fresh`).
    async fn initial_events(
        &self,
        feed: &Feed,
        mut events: Events,
        fresh: bool,
    ) -> Result<Result<(String, Option<Events>), kube::Error>, Closed> {
        let mut listed = (!fresh).then(HashSet::default);
        let mut batch = Vec::with_capacity(BATCH);
        while let Some(event) = events.next().await {
            match event {
                Ok(WatchEvent::Added(object) | WatchEvent::Modified(object)) => {
                    batch.push(object.metadata);
                    if batch.len() == BATCH {
                        self.take_in(feed, &batch, &mut listed).await?;
                        batch.clear();
                    }
                }
                Ok(WatchEvent::Deleted(object)) => {
                    self.take_in(feed, &batch, &mut listed).await?;
                    batch.clear();
                    if let Some(uid) = object.metadata.uid.as_deref().map(Uid::parse) {
                        if let Some(listed) = listed.as_mut() {
                            listed.remove(&uid);
                        }
                        feed.send(GraphEvent::Delete(feed.id, uid)).await?;
                    }
                }
                Ok(WatchEvent::Bookmark(bookmark))
                    if bookmark
                        .metadata
                        .annotations
                        .get(INITIAL_EVENTS_END)
                        .is_some_and(|end| end == "true") =>
                {
                    self.take_in(feed, &batch, &mut listed).await?;
                    feed.send(GraphEvent::Listed(feed.id, listed)).await?;
                    return Ok(Ok((bookmark.metadata.resource_version, Some(events))));
                }
                Ok(WatchEvent::Bookmark(_)) => {}
                Ok(WatchEvent::Error(status)) => return Ok(Err(kube::Error::Api(status))),
                Err(err) => return Ok(Err(err)),
            }
        }
        Ok(Err(kube::Error::ReadEvents(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the watch ended before the end of its initial events",
        ))))
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
        mut events: Events,
        version: &mut String,
    ) -> Result<Result<Ended, kube::Error>, Closed> {
        while let Some(event) = events.next().await {
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

/// Whether the apiserver refused a streaming list as a request it does not take (the WatchList
/// feature off: `sendInitialEvents` is invalid).
fn refused(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if matches!(status.code, 400 | 422))
}

/// Whether a request failed because the resourceVersion it named has expired.
fn is_expired(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 410)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn auto_streams_lists_where_the_apiserver_does_by_default() {
        let v = |minor| Some(ServerVersion { major: 1, minor });
        let auto = |minor| InitialList::Auto.on(v(minor));
        assert_eq!(auto(20), InitialList::WatchCache);
        assert_eq!(auto(31), InitialList::WatchCache);
        assert_eq!(auto(32), InitialList::Stream);
        assert_eq!(
            auto(33),
            InitialList::WatchCache,
            "1.33 turned WatchList off"
        );
        assert_eq!(auto(34), InitialList::Stream);
        assert_eq!(InitialList::Auto.on(None), InitialList::WatchCache);
        assert_eq!(InitialList::Etcd.on(v(34)), InitialList::Etcd, "as asked");
        assert_eq!(
            InitialList::Stream.on(v(20)),
            InitialList::Stream,
            "as asked"
        );
    }

    fn event(kind: &str, object: serde_json::Value) -> kube::Result<WatchEvent<Item>> {
        Ok(serde_json::from_value(json!({ "type": kind, "object": object })).unwrap())
    }

    fn object(uid: &str, version: &str) -> serde_json::Value {
        json!({ "metadata": { "name": uid, "namespace": "a", "uid": uid, "resourceVersion": version } })
    }

    fn bookmark(version: &str, end: bool) -> kube::Result<WatchEvent<Item>> {
        let annotations = if end {
            json!({ INITIAL_EVENTS_END: "true" })
        } else {
            json!({})
        };
        event(
            "BOOKMARK",
            json!({ "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": { "resourceVersion": version, "annotations": annotations } }),
        )
    }

    /// Takes `events` in as a streaming list's, and returns what it said and what the graph
    /// was sent.
    async fn stream(
        events: Vec<kube::Result<WatchEvent<Item>>>,
        fresh: bool,
    ) -> (
        Result<(String, Option<Events>), kube::Error>,
        Vec<GraphEvent>,
    ) {
        let client = Client::new(
            tower::service_fn(|_: http::Request<kube::client::Body>| async {
                Err::<http::Response<kube::client::Body>, _>(std::io::Error::other(
                    "no apiserver in a unit test",
                ))
            }),
            "default",
        );
        let resource = Resource {
            api: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
            served: true,
            watched: true,
            short_names: Vec::new(),
        };
        let reflector = Reflector {
            request: kube::core::Request::new("/api/v1/configmaps"),
            client,
            name: "configmaps".to_owned(),
            resource: &resource,
            initial_list: InitialList::Stream,
            aliases: Arc::default(),
            metrics: Metrics::new().unwrap(),
        };
        let (sender, mut receiver) = mpsc::channel(64);
        let feed = Feed {
            id: ResourceId::new(0),
            events: sender,
            state: None,
        };
        let events = futures::stream::iter(events)
            .chain(futures::stream::pending())
            .boxed();
        let taken = reflector.initial_events(&feed, events, fresh);
        let Ok(taken) = tokio::time::timeout(Duration::from_secs(1), taken).await else {
            drop(feed);
            return (
                Err(kube::Error::LinesCodecMaxLineLengthExceeded),
                Vec::new(),
            );
        };
        let taken = taken.ok().expect("the graph's end is open");
        drop(feed);
        let mut sent = Vec::new();
        while let Some(event) = receiver.recv().await {
            sent.push(event);
        }
        (taken, sent)
    }

    const A: &str = "00000000-0000-0000-0000-00000000000a";
    const B: &str = "00000000-0000-0000-0000-00000000000b";
    const C: &str = "00000000-0000-0000-0000-00000000000c";

    #[tokio::test]
    async fn a_streaming_list_takes_in_the_objects_up_to_the_bookmark_that_ends_them() {
        let (taken, sent) = stream(
            vec![
                event("ADDED", object(A, "5")),
                bookmark("6", false),
                event("ADDED", object(B, "7")),
                event("ADDED", object(C, "8")),
                bookmark("9", true),
                event("MODIFIED", object(A, "10")),
            ],
            false,
        )
        .await;
        let (version, events) = taken.expect("the list ends at its bookmark");
        assert_eq!(
            version, "9",
            "the watch goes on from the bookmark's version"
        );
        match sent.as_slice() {
            [
                GraphEvent::Page(_, page),
                GraphEvent::Listed(_, Some(listed)),
            ] => {
                let uids: Vec<Uid> = page.iter().map(|o| o.uid).collect();
                assert_eq!(uids, [A, B, C].map(Uid::parse));
                assert_eq!(listed.len(), 3);
            }
            other => panic!("one page, then the listed set: {other:?}"),
        }
        let mut events = events.expect("the watch to follow");
        match events.next().await {
            Some(Ok(WatchEvent::Modified(item))) => {
                assert_eq!(item.metadata.resource_version.as_deref(), Some("10"));
            }
            _ => panic!("the watch goes on with the event after the bookmark"),
        }
    }

    #[tokio::test]
    async fn a_fresh_streaming_list_sends_no_set_and_one_cut_short_is_an_error() {
        let (taken, sent) = stream(vec![bookmark("3", true)], true).await;
        assert_eq!(taken.map(|(v, _)| v).ok().as_deref(), Some("3"));
        assert!(
            matches!(sent.as_slice(), [GraphEvent::Listed(_, None)]),
            "{sent:?}"
        );
        let (taken, _) = stream(
            vec![
                event("ADDED", object(A, "5")),
                Err(kube::Error::LinesCodecMaxLineLengthExceeded),
            ],
            false,
        )
        .await;
        assert!(
            taken.is_err(),
            "a watch that fails before the bookmark is a failed list"
        );
        // As 1.20 answers (and a server whose WatchList gate is off): list instead.
        let status = kube::core::Status::failure("resourceVersionMatch is forbidden", "Invalid");
        assert!(refused(&kube::Error::Api(status.with_code(422).boxed())));
        let status = kube::core::Status::failure("forbidden", "Forbidden");
        assert!(!refused(&kube::Error::Api(status.with_code(403).boxed())));
    }
}
