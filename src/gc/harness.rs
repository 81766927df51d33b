//! A step-driven harness for the workers, without an apiserver, in the style of the upstream
//! garbage collector's tests: a fake client answers scripted requests, graph events are fed
//! in, one work item is processed, then the requests sent, the Events said and the queue are
//! asserted. The same behaviours are tested against the real apiserver in `tests/`; these
//! pin the workers' decisions down one step at a time.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ApiResource;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::GcConfig;
use super::collector::Collector;
use super::discovery::{self, Found, Resource};
use super::watch::GraphEvent;
use crate::annotations::Timeouts;
use crate::api::Cluster;
use crate::graph::{
    FinalizerPlaces, Flags, Graph, Mode, Observed, Order, ResourceId, Uid, Work, Writer,
};
use crate::metrics::Metrics;
use crate::names::{
    DEADLINE_ANNOTATION, ORPHAN_FINALIZER, Reason, SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER,
};

/// A request the fake apiserver received.
#[derive(Debug, Clone)]
struct Sent {
    method: String,
    path: String,
    body: Value,
}

/// Answers by method and path: status and body.
type Script = HashMap<(String, String), VecDeque<(u16, Value)>>;

/// The fake apiserver: scripted answers by method and path (each answer used once, the last
/// one for good), Events created as they come, anything else a 500 the test then sees.
#[derive(Default)]
struct Fake {
    answers: Mutex<Script>,
    sent: Mutex<Vec<Sent>>,
}

impl Fake {
    fn answer(&self, method: &str, path: &str) -> (u16, Option<Value>) {
        let mut answers = self.answers.lock();
        let Some(queue) = answers.get_mut(&(method.to_owned(), path.to_owned())) else {
            return (500, None);
        };
        let answer = if queue.len() > 1 {
            queue.pop_front()
        } else {
            queue.front().cloned()
        };
        answer.map_or((500, None), |(status, body)| (status, Some(body)))
    }

    async fn serve(
        &self,
        request: http::Request<kube::client::Body>,
    ) -> http::Response<Full<Bytes>> {
        let (parts, body) = request.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let (method, path) = (parts.method.to_string(), parts.uri.path().to_owned());
        let (status, answer) = if method == "POST" && path.ends_with("/events") {
            (201, Some(body.clone()))
        } else {
            self.answer(&method, &path)
        };
        self.sent.lock().push(Sent { method, path, body });
        let answer = answer.unwrap_or_else(|| {
            json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "not scripted", "reason": "InternalError", "code": 500 })
        });
        let answer = if status >= 400 && answer.get("kind").is_none() {
            json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "scripted", "code": status })
        } else {
            answer
        };
        http::Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(answer.to_string())))
            .expect("a response")
    }
}

const NS: &str = "ns";

fn uid(n: u128) -> Uid {
    Uid::from_u128(n)
}

fn name(n: u128) -> String {
    format!("o{n}")
}

fn path(n: u128) -> String {
    format!("/api/v1/namespaces/{NS}/configmaps/{}", name(n))
}

/// A ConfigMap `n` in namespace `ns`, as the graph sees it, its `finalizers` where they are.
fn observed(n: u128, owners: &[u128], flags: Flags, finalizers: &[Flags]) -> Observed {
    Observed {
        places: FinalizerPlaces::of_list(finalizers.iter().copied()),
        ..Observed::config_map(n, owners, flags)
    }
}

/// The ConfigMap `n` as the apiserver answers a read of it.
fn object(n: u128, owners: &[u128], metadata: Value) -> Value {
    let mut meta = json!({
        "name": name(n), "namespace": NS, "uid": uid(n).to_string(), "resourceVersion": "7",
        "ownerReferences": owners.iter().map(|o| json!({
            "apiVersion": "v1", "kind": "ConfigMap", "name": name(*o),
            "uid": uid(*o).to_string(), "blockOwnerDeletion": true })).collect::<Vec<_>>(),
    });
    if let (Some(meta), Value::Object(more)) = (meta.as_object_mut(), metadata) {
        meta.extend(more);
    }
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta })
}

/// The armed owner 1 as the apiserver answers a read of it: deleted at `deleted`, with its
/// deadline stored when `deadline` says one.
fn waiting_owner(deleted: Timestamp, deadline: Option<Timestamp>) -> Value {
    let mut annotations = json!({ SYNCHRONOUS_ANNOTATION: "true" });
    if let Some(deadline) = deadline {
        annotations[DEADLINE_ANNOTATION] = json!(deadline.to_string());
    }
    object(
        1,
        &[],
        json!({ "deletionTimestamp": deleted.to_string(), "finalizers": [SYNCHRONOUS_FINALIZER],
                "annotations": annotations }),
    )
}

struct Harness {
    collector: Arc<Collector>,
    graph: Writer,
    fake: Arc<Fake>,
    configmaps: ResourceId,
}

impl Harness {
    fn new(mode: Mode) -> Self {
        Self::with_barrier(mode, false)
    }

    /// With the release barrier, whose rounds its own task reads, as in [`super::run`].
    fn with_barrier(mode: Mode, barrier: bool) -> Self {
        let fake = Arc::new(Fake::default());
        let service = {
            let fake = fake.clone();
            tower::service_fn(move |request| {
                let fake = fake.clone();
                async move { Ok::<_, Infallible>(fake.serve(request).await) }
            })
        };
        let metrics = Metrics::new().expect("metrics");
        let cluster = Cluster::new(
            kube::Client::new(service, NS),
            None,
            Duration::from_secs(5),
            metrics.clone(),
        );
        let config = GcConfig {
            timeouts: Timeouts {
                base: Duration::from_secs(60),
                per_dependent: Duration::from_millis(500),
                max: Duration::from_secs(3600),
            },
            workers: 1,
            ignored: Vec::new(),
            rediscovery: Duration::from_secs(20),
            initial_list: Default::default(),
            barrier,
        };
        let graph = Writer::new(Graph::new(mode));
        let resources = discovery::Writer::default();
        let collector = Arc::new(Collector::new(
            graph.reader(),
            resources.reader(),
            cluster,
            metrics,
            config,
        ));
        resources.update(Found {
            resources: vec![Resource {
                api: ApiResource::erase::<ConfigMap>(&()),
                namespaced: true,
                served: true,
                watched: true,
                short_names: vec!["cm".into()],
            }],
            ..Found::default()
        });
        if barrier {
            let collector = collector.clone();
            tokio::spawn(async move {
                let served = |uid| collector.cx.enqueue_first(Work::SyncOwner(uid));
                let idle = || collector.cx.queue.idle();
                let never = tokio_util::sync::CancellationToken::new();
                collector.barrier.run(served, idle, never).await;
            });
        }
        Self {
            collector,
            graph,
            fake,
            configmaps: ResourceId::new(0),
        }
    }

    /// Feeds watch events to the graph, and forgets the work they queued.
    fn watched(&self, objects: impl IntoIterator<Item = Observed>) {
        for object in objects {
            super::builder::apply(
                &self.graph,
                &self.collector,
                GraphEvent::Apply(self.configmaps, object),
            );
        }
        self.queued();
    }

    fn script(&self, method: &str, path: &str, answers: impl IntoIterator<Item = (u16, Value)>) {
        self.fake.answers.lock().insert(
            (method.to_owned(), path.to_owned()),
            answers.into_iter().collect(),
        );
    }

    /// Processes one work item, as a worker does.
    async fn step(&self, work: Work) -> Result<(), crate::api::ApiError> {
        self.collector.process(work).await
    }

    /// The requests sent since the last look (Events aside), as `METHOD path`.
    fn sent(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|s| !s.path.ends_with("/events"))
            .map(|s| format!("{} {}", s.method, s.path))
            .collect()
    }

    fn requests(&self) -> Vec<Sent> {
        self.fake.sent.lock().clone()
    }

    /// The reasons of the Events said, in order.
    fn events(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|s| s.path.ends_with("/events"))
            .map(|s| s.body["reason"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// The bodies sent to `path` with `method`.
    fn bodies(&self, method: &str, path: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|s| s.method == method && s.path == path)
            .map(|s| s.body)
            .collect()
    }

    /// The next work item ready within `wait`, taken off the queue.
    async fn next(&self, wait: Duration) -> Option<Work> {
        let queue = &self.collector.cx.queue;
        let work = tokio::time::timeout(wait, queue.next()).await.ok()??;
        queue.done(&work);
        queue.forget(&work);
        Some(work)
    }

    /// The work queued and ready now, taken off the queue.
    fn queued(&self) -> BTreeSet<Work> {
        let queue = &self.collector.cx.queue;
        let mut ready = BTreeSet::new();
        while let Some(Some(work)) = queue.next().now_or_never() {
            queue.done(&work);
            queue.forget(&work);
            ready.insert(work);
        }
        ready
    }
}

fn at(text: &str) -> Timestamp {
    text.parse().expect("a timestamp")
}

const WAITING: Flags = Flags::ARMED.with(Flags::DELETING, true);

#[tokio::test]
async fn a_dependent_with_dependents_is_armed_under_the_deadline_of_the_owner_that_waits() {
    let h = Harness::new(Mode::Cooperative);
    h.watched([
        observed(1, &[], WAITING, &[Flags::ARMED]),
        observed(2, &[1], Flags::empty(), &[]),
        observed(3, &[2], Flags::empty(), &[]),
    ]);
    let deadline = at("2026-11-24T12:00:00Z");
    h.collector.deadlines.fix(uid(1), deadline);
    h.script("GET", &path(2), [(200, object(2, &[1], json!({})))]);
    h.script("PATCH", &path(2), [(200, object(2, &[1], json!({})))]);

    h.step(Work::AttemptToDelete(uid(2))).await.unwrap();

    assert_eq!(
        h.sent(),
        [
            format!("GET {}", path(2)),
            format!("GET {}", path(2)),
            format!("PATCH {}", path(2))
        ],
        "read, read again to add the finalizer under a precondition, patch"
    );
    let patch = &h.bodies("PATCH", &path(2))[0]["metadata"];
    assert_eq!(patch["finalizers"], json!([SYNCHRONOUS_FINALIZER]));
    assert_eq!(patch["resourceVersion"], "7");
    assert_eq!(
        patch["annotations"][DEADLINE_ANNOTATION],
        deadline.to_string(),
        "the owner's deadline"
    );
    assert_eq!(
        h.collector.deadlines.within_bounds(
            uid(2),
            at("2026-11-24T11:00:00Z"),
            Duration::from_secs(3600)
        ),
        Some(deadline),
        "kept in memory too"
    );
    assert_eq!(
        h.queued(),
        BTreeSet::from([Work::AttemptToDelete(uid(2))]),
        "looked at again: it waits for its own dependent now"
    );
}

#[tokio::test]
async fn at_the_deadline_an_ordered_owner_abandons_its_order_and_every_wave_is_queued() {
    let h = Harness::new(Mode::Cooperative);
    let ordered = |n, order: Option<&str>| Observed {
        order: Order::of(order),
        ..Observed::config_map(n, &[1], Flags::empty())
    };
    h.watched([
        observed(1, &[], WAITING, &[Flags::ARMED]),
        ordered(2, Some("2")),
        ordered(3, Some("1")),
        ordered(4, None),
    ]);
    h.script(
        "GET",
        &path(1),
        [(
            200,
            waiting_owner(at("2026-01-01T00:00:00Z"), Some(at("2026-01-01T00:00:10Z"))),
        )],
    );

    h.step(Work::SyncOwner(uid(1))).await.unwrap();

    assert_eq!(
        h.sent(),
        [format!("GET {}", path(1))],
        "the stored deadline is kept"
    );
    assert_eq!(h.events(), [Reason::OrderAbandoned.as_str()]);
    assert_eq!(
        h.queued(),
        BTreeSet::from([
            Work::SyncOwner(uid(1)),
            Work::AttemptToDelete(uid(2)),
            Work::AttemptToDelete(uid(3)),
            Work::AttemptToDelete(uid(4)),
        ]),
        "every wave at once, and the owner behind them"
    );
}

#[tokio::test]
async fn orphaning_a_fan_out_drops_each_reference_then_the_finalizer() {
    let h = Harness::new(Mode::Standalone);
    let orphaning = Flags::ORPHAN.with(Flags::DELETING, true);
    h.watched(
        [observed(1, &[], orphaning, &[Flags::ORPHAN])]
            .into_iter()
            .chain((2..=4).map(|n| observed(n, &[1], Flags::empty(), &[]))),
    );
    for n in 2..=4 {
        h.script("GET", &path(n), [(200, object(n, &[1], json!({})))]);
        h.script("PATCH", &path(n), [(200, object(n, &[], json!({})))]);
    }
    h.script("PATCH", &path(1), [(200, object(1, &[], json!({})))]);

    h.step(Work::Orphan(uid(1))).await.unwrap();

    let sent = h.sent();
    for n in 2..=4 {
        assert!(sent.contains(&format!("GET {}", path(n))), "{sent:?}");
        let patch = &h.bodies("PATCH", &path(n))[0];
        assert_eq!(
            patch,
            &json!([
                { "op": "test", "path": "/metadata/uid", "value": uid(n).to_string() },
                { "op": "test", "path": "/metadata/ownerReferences/0/uid", "value": uid(1).to_string() },
                { "op": "remove", "path": "/metadata/ownerReferences/0" }
            ]),
            "{patch}"
        );
    }
    assert_eq!(
        sent.last().map(String::as_str),
        Some(format!("PATCH {}", path(1)).as_str()),
        "the finalizer last"
    );
    let patch = &h.bodies("PATCH", &path(1))[0];
    assert_eq!(
        patch[1],
        json!({ "op": "test", "path": "/metadata/finalizers/0", "value": ORPHAN_FINALIZER })
    );
    assert_eq!(
        patch[2],
        json!({ "op": "remove", "path": "/metadata/finalizers/0" })
    );
}

#[tokio::test]
async fn a_release_meeting_a_conflict_reads_again_and_an_owner_gone_meanwhile_is_released() {
    let h = Harness::new(Mode::Cooperative);
    h.watched([observed(1, &[], WAITING, &[Flags::ARMED])]);
    h.script(
        "GET",
        &path(1),
        [(200, waiting_owner(Timestamp::now(), None))],
    );
    h.script(
        "PATCH",
        &path(1),
        [(200, json!({})), (409, json!({})), (404, json!({}))],
    );

    h.step(Work::SyncOwner(uid(1))).await.unwrap();

    assert_eq!(
        h.sent(),
        [
            format!("GET {}", path(1)),
            format!("PATCH {}", path(1)),
            format!("PATCH {}", path(1)),
            format!("GET {}", path(1)),
            format!("PATCH {}", path(1)),
        ],
        "the deadline stored; the finalizer removed where the watch saw it: 409; read where it is now: 404"
    );
    let removals = h.bodies("PATCH", &path(1));
    assert!(removals[0]["metadata"]["annotations"][DEADLINE_ANNOTATION].is_string());
    assert_eq!(
        removals[1][2],
        json!({ "op": "remove", "path": "/metadata/finalizers/0" })
    );
    assert_eq!(h.events(), ["SyncGCWaiting", "SyncGCReleased"]);
    assert!(h.queued().is_empty(), "done with it");
}

/// A metadata list answer holding the ConfigMaps `objects`.
fn list(objects: &[Value]) -> Value {
    json!({ "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": { "resourceVersion": "10" },
            "items": objects.iter().map(|o| json!({ "metadata": o["metadata"] })).collect::<Vec<_>>() })
}

#[tokio::test]
async fn the_release_barrier_holds_an_owner_while_a_read_finds_a_dependent_and_then_lets_it_go() {
    let h = Harness::with_barrier(Mode::Cooperative, true);
    h.watched([observed(1, &[], WAITING, &[Flags::ARMED])]);
    let deleted = Timestamp::now();
    let deadline = deleted + jiff::SignedDuration::from_secs(50);
    h.script(
        "GET",
        &path(1),
        [(200, waiting_owner(deleted, Some(deadline)))],
    );
    // A dependent the watches have not delivered: the first read finds it, the next does not.
    let unseen = object(9, &[1], json!({}));
    let collection = format!("/api/v1/namespaces/{NS}/configmaps");
    h.script(
        "GET",
        &collection,
        [(200, list(&[unseen])), (200, list(&[]))],
    );
    h.script("PATCH", &path(1), [(200, json!({}))]);

    let mut steps = 0;
    while h.bodies("PATCH", &path(1)).is_empty() {
        steps += 1;
        assert!(steps < 10, "released within ten steps: {:?}", h.sent());
        if steps > 1 {
            let work = h.next(Duration::from_secs(5)).await;
            assert_eq!(work, Some(Work::SyncOwner(uid(1))), "{:?}", h.sent());
        }
        h.step(Work::SyncOwner(uid(1))).await.unwrap();
    }

    let reads = h
        .sent()
        .iter()
        .filter(|s| **s == format!("GET {collection}"))
        .count();
    assert_eq!(reads, 2, "a round that holds it, a round that lets it go");
    assert_eq!(h.events(), [Reason::Barrier.as_str(), "SyncGCReleased"]);
    let held = h
        .requests()
        .into_iter()
        .find(|s| s.body["reason"] == Reason::Barrier.as_str())
        .unwrap();
    let note = held.body["note"].as_str().unwrap_or_default();
    assert!(note.contains("o9"), "names what holds it: {note}");
    assert_eq!(
        h.bodies("PATCH", &path(1))[0][2],
        json!({ "op": "remove", "path": "/metadata/finalizers/0" })
    );
}
