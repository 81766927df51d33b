//! A step-driven harness for the workers, without an apiserver, in the shape of the upstream
//! garbage collector's tests: a fake client answers scripted requests, graph events are fed
//! in, one work item is processed, then the requests sent, the Events said, the queue and the
//! caches are asserted. Time is tokio's: the scenarios ([`scenarios`]) run with it paused, so
//! a deadline, a backoff or a barrier's recheck costs no real second. The same behaviours are
//! tested against the real apiserver in `tests/`; these pin the workers' decisions down one
//! step at a time, and are the first place for a worker's behaviour.

mod scenarios;

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

use super::collector::Collector;
use super::config::GcConfig;
use super::context::Context;
use super::discovery::{self, Found, Resource};
use super::watch::GraphEvent;
use crate::annotations::Timeouts;
use crate::api::Cluster;
use crate::graph::{FinalizerPlaces, Flags, Graph, Mode, Observed, ResourceId, Uid, Work, Writer};
use crate::metrics::Metrics;
use crate::names::{DEADLINE_ANNOTATION, SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER};

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
        Self::configured(mode, barrier, false)
    }

    /// With the guards on: the collector judges its own DELETEs.
    fn with_guards(mode: Mode) -> Self {
        Self::configured(mode, false, true)
    }

    fn configured(mode: Mode, barrier: bool, guards: bool) -> Self {
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
            causes: Some(crate::gc::causes::Causes::default()),
            guards,
            needs: Default::default(),
        };
        let graph = Writer::new(Graph::new(mode));
        let resources = discovery::ResourcesWriter::default();
        let collector = Arc::new(Collector::new(Context::new(
            graph.reader(),
            resources.reader(),
            cluster,
            metrics,
            config,
        )));
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
                &*self.collector,
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

/// A metadata list answer holding the ConfigMaps `objects`.
fn list(objects: &[Value]) -> Value {
    json!({ "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": { "resourceVersion": "10" },
            "items": objects.iter().map(|o| json!({ "metadata": o["metadata"] })).collect::<Vec<_>>() })
}

/// One step of a scenario, as the upstream garbage collector's tests write them: events fed
/// in, answers scripted, an item processed, the state asserted.
enum Act {
    /// The watches deliver these objects (the work they bring up is forgotten).
    Watch(Vec<Observed>),
    /// The apiserver answers `METHOD path` with these, in turn (the last one for good).
    Answer(&'static str, String, Vec<(u16, Value)>),
    /// A worker processes this item, which succeeds.
    Process(Work),
    /// What the workers did since the last [`Act::Expect`] (or the start).
    Expect(Expected),
}

/// What the workers did: the requests sent (`METHOD path`, Events aside), the reasons of the
/// Events said, the work queued and ready.
#[derive(Debug, Default, PartialEq, Eq)]
struct Expected {
    sent: Vec<String>,
    events: Vec<String>,
    queued: BTreeSet<Work>,
}

impl Harness {
    /// Runs `steps` in order, as a worker would meet them; the harness, for what a scenario
    /// asserts beyond them.
    async fn run(mode: Mode, steps: Vec<Act>) -> Self {
        let h = Self::new(mode);
        let (mut sent, mut events) = (0, 0);
        for (n, step) in steps.into_iter().enumerate() {
            match step {
                Act::Watch(objects) => h.watched(objects),
                Act::Answer(method, path, answers) => h.script(method, &path, answers),
                Act::Process(work) => h
                    .step(work)
                    .await
                    .unwrap_or_else(|err| panic!("step {n}: processing {work:?} failed: {err}")),
                Act::Expect(expected) => {
                    let (all_sent, all_events) = (h.sent(), h.events());
                    let actual = Expected {
                        sent: all_sent[sent..].to_vec(),
                        events: all_events[events..].to_vec(),
                        queued: h.queued(),
                    };
                    assert_eq!(actual, expected, "step {n}");
                    (sent, events) = (all_sent.len(), all_events.len());
                }
            }
        }
        h
    }
}
