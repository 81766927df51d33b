//! Prometheus metrics and the plain-HTTP endpoints `/metrics`, `/healthz` and `/readyz`.

use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Latency buckets fine enough for sub-millisecond admission answers, up to the apiserver's
/// longest webhook timeout.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Buckets for synchronous deletions: a second to an hour.
const DELETION_BUCKETS: &[f64] = &[
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Every collector syncgc exports, registered on one registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// 1 while the apiserver answers syncgc.
    pub apiserver_connected: IntGauge,
    /// The apiserver's clock minus syncgc's, as the Date header of its answers shows.
    pub apiserver_clock_offset: IntGauge,
    /// Admission reviews answered, by operation and decision.
    pub webhook_requests: IntCounterVec,
    /// Time to answer an admission review, by operation.
    pub webhook_duration: HistogramVec,
    /// Admission reviews being answered now.
    pub webhook_in_flight: IntGauge,
    /// Connections to the webhook whose TLS handshake completed: with keep-alive, far fewer
    /// than reviews.
    pub webhook_connections: IntCounter,
    /// Changes made through the API while answering a DELETE review, by result.
    pub webhook_side_effects: IntCounterVec,
    /// Checks of the serving certificate files, by result.
    pub certificate_reloads: IntCounterVec,
    /// With --tls-secret: when the serving certificate expires (Unix seconds).
    pub certificate_expiry: IntGauge,
    /// With --manage-webhook: writes of the webhook configuration and the certificate Secret,
    /// by object and what was written.
    pub managed_writes: IntCounterVec,
    /// With --manage-webhook: rounds that checked the configuration and the Secret, by result.
    pub managed_rounds: IntCounterVec,
    /// Failed calls to the apiserver, by verb.
    pub api_errors: IntCounterVec,
    /// Nodes in the ownership graph, by kind (observed, virtual).
    pub graph_nodes: IntGaugeVec,
    /// Resources watched.
    pub watched_resources: IntGauge,
    /// Watch errors (each followed by a retry with backoff).
    pub watch_errors: IntCounter,
    pub watch_relists: IntCounter,
    /// Items waiting in the work queue.
    pub queue_depth: IntGauge,
    /// Items added to the work queue, by item.
    pub queue_adds: IntCounterVec,
    /// Items queued again after a failure, by item and reason.
    pub queue_retries: IntCounterVec,
    pub worker_panics: IntCounterVec,
    /// Objects labelled `syncgc.io/guarded` (their DELETEs reach the guards), and the writes
    /// that keep the selection, by change and result.
    pub guard_selected: IntGauge,
    /// Objects the finalizer handlers need to act, as this replica last read them.
    pub guard_needed: IntGauge,
    pub guard_selection_changes: IntCounterVec,
    /// Owners the graph did not hold, read from the apiserver, by what was found (present,
    /// absent).
    pub owner_reads: IntCounterVec,
    /// Garbage-collector actions, by action and result.
    pub gc_actions: IntCounterVec,
    /// Objects the garbage collector deleted, by the propagation policy it used.
    pub gc_deletions: IntCounterVec,
    /// Finalizers the garbage collector removed once their work was done, by finalizer
    /// (`foregroundDeletion`, `orphan`, `syncgc.io/synchronous`).
    pub gc_finalizers_removed: IntCounterVec,
    /// Owners waiting for their dependents.
    pub owners_waiting: IntGauge,
    /// Seconds the longest-waiting owner has waited.
    pub oldest_waiting_owner_seconds: IntGauge,
    /// From an owner's deletionTimestamp to its release, by outcome (released, timed_out).
    pub synchronous_deletion_duration: HistogramVec,
    /// Owners released by their timeout.
    pub timeouts: IntCounter,
    /// 1 while this replica holds the leader lease (its workers act).
    pub leader: IntGauge,
    /// API groups whose last discovery failed (their resources keep the watches they had).
    pub discovery_failed_groups: IntGauge,
    /// Discoveries that failed as a whole (the list of groups did not answer).
    pub discovery_errors: IntCounter,
    /// Resources rediscovered (started, moved to another version, stopped), by change.
    pub resource_changes: IntCounterVec,
    /// Rounds of consistent reads made by the release barrier.
    pub barrier_rounds: IntCounter,
    /// Requests the release barrier made (a list, each page counted once, or a read).
    pub barrier_reads: IntCounter,
    /// How long the release barrier's rounds took, by scope (namespace, cluster).
    pub barrier_round_duration: HistogramVec,
    /// Times the release barrier held an owner, by reason.
    pub barrier_holds: IntCounterVec,
    /// Waves of deletion-ordered dependents started.
    pub waves_started: IntCounter,
    /// Failed calls of leader election, by reason (`namespace_missing`, `forbidden`,
    /// `conflict`, `other`).
    pub leader_election_errors: IntCounterVec,
    /// 1 while a readiness condition is ok, 0 while it fails, by condition; set on each scrape.
    pub ready: IntGaugeVec,
}

impl Metrics {
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let r = Register(&registry);
        r.gauge_vec(
            "syncgc_build_info",
            "syncgc's version and the commit it was built from; always 1",
            &["version", "commit"],
        )?
        .with_label_values(&[env!("CARGO_PKG_VERSION"), env!("SYNCGC_COMMIT")])
        .set(1);
        // process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, ...
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(Self {
            apiserver_connected: r.gauge(
                "syncgc_apiserver_connected",
                "1 while the Kubernetes apiserver answers syncgc",
            )?,
            apiserver_clock_offset: r.gauge(
                "syncgc_apiserver_clock_offset_seconds",
                "The apiserver's clock minus syncgc's, from the Date header of its answers (0 while within 2 s); deadlines follow the apiserver's",
            )?,
            webhook_requests: r.counter_vec(
                "syncgc_webhook_requests_total",
                "Admission reviews answered, by operation and result",
                &["operation", "result"],
            )?,
            webhook_duration: r.histogram_vec(
                "syncgc_webhook_duration_seconds",
                "Time to answer an admission review, by operation",
                LATENCY_BUCKETS,
                &["operation"],
            )?,
            webhook_connections: r.counter(
                "syncgc_webhook_connections_total",
                "Connections to the webhook whose TLS handshake completed (each serves many reviews while kept alive)",
            )?,
            webhook_in_flight: r.gauge(
                "syncgc_webhook_in_flight",
                "Admission reviews being answered now",
            )?,
            webhook_side_effects: r.counter_vec(
                "syncgc_webhook_side_effects_total",
                "Finalizers added through the API while answering a DELETE review, by result (ok; unconfirmed: the live object did not bear out the review, nothing written; error)",
                &["result"],
            )?,
            certificate_reloads: r.counter_vec(
                "syncgc_certificate_reloads_total",
                "Serving certificate changes seen on disk, by result",
                &["result"],
            )?,
            certificate_expiry: r.gauge(
                "syncgc_serving_certificate_expiry_timestamp_seconds",
                "When the serving certificate kept in --tls-secret expires, in Unix seconds",
            )?,
            managed_writes: r.counter_vec(
                "syncgc_managed_writes_total",
                "Writes of the webhook configuration and the certificate Secret syncgc keeps, by object and what was written",
                &["object", "change"],
            )?,
            managed_rounds: r.counter_vec(
                "syncgc_managed_rounds_total",
                "Rounds that checked the webhook configuration and the certificate Secret syncgc keeps, by result (ok, error)",
                &["result"],
            )?,
            api_errors: r.counter_vec(
                "syncgc_api_errors_total",
                "Failed calls to the Kubernetes apiserver, by verb",
                &["verb"],
            )?,
            graph_nodes: r.gauge_vec(
                "syncgc_graph_nodes",
                "Nodes in the ownership graph, by kind (observed, virtual)",
                &["kind"],
            )?,
            watched_resources: r.gauge("syncgc_watched_resources", "Resources watched")?,
            watch_errors: r.counter(
                "syncgc_watch_errors_total",
                "Watch errors, each followed by a retry with backoff",
            )?,
            watch_relists: r.counter(
                "syncgc_watch_relists_total",
                "Lists again because a watch's resourceVersion had expired (410 Gone)",
            )?,
            queue_depth: r.gauge("syncgc_queue_depth", "Items waiting in the work queue")?,
            queue_adds: r.counter_vec(
                "syncgc_queue_adds_total",
                "Items added to the work queue, by item",
                &["item"],
            )?,
            queue_retries: r.counter_vec(
                "syncgc_queue_retries_total",
                "Items queued again after a failure (with backoff; none is dropped), by item and reason",
                &["item", "reason"],
            )?,
            worker_panics: r.counter_vec(
                "syncgc_worker_panics_total",
                "Items on which a worker panicked (the item is queued again with backoff; the worker goes on), by item",
                &["item"],
            )?,
            guard_selected: r.gauge(
                "syncgc_guard_selected_objects",
                "Objects labelled syncgc.io/guarded, whose DELETEs reach the guards' webhook",
            )?,
            guard_needed: r.gauge(
                "syncgc_guard_needed_objects",
                "Objects the finalizer handlers need to act (their accounts, bindings, roles, configuration, Services), held with them, as this replica last read them",
            )?,
            guard_selection_changes: r.counter_vec(
                "syncgc_guard_selection_changes_total",
                "Writes that keep the guards' selection, by change (selected, unselected: the syncgc.io/guarded label; sibling_deleted: an object beside a protected one in a namespace being deleted) and result",
                &["change", "result"],
            )?,
            owner_reads: r.counter_vec(
                "syncgc_owner_reads_total",
                "Owners the ownership graph did not hold, read from the apiserver, by what was found (present, absent)",
                &["result"],
            )?,
            gc_actions: r.counter_vec(
                "syncgc_gc_actions_total",
                "Garbage-collector actions on objects, by action and result",
                &["action", "result"],
            )?,
            gc_deletions: r.counter_vec(
                "syncgc_gc_deletions_total",
                "Objects the garbage collector deleted, by the propagation policy it used",
                &["propagation"],
            )?,
            gc_finalizers_removed: r.counter_vec(
                "syncgc_gc_finalizers_removed_total",
                "Finalizers the garbage collector removed once their work was done, by finalizer",
                &["finalizer"],
            )?,
            owners_waiting: r.gauge(
                "syncgc_owners_waiting",
                "Owners waiting for their dependents to go",
            )?,
            oldest_waiting_owner_seconds: r.gauge(
                "syncgc_oldest_waiting_owner_seconds",
                "Seconds the longest-waiting owner has waited since its deletionTimestamp",
            )?,
            synchronous_deletion_duration: r.histogram_vec(
                "syncgc_synchronous_deletion_duration_seconds",
                "From an owner's deletionTimestamp to its release, by outcome",
                DELETION_BUCKETS,
                &["outcome"],
            )?,
            timeouts: r.counter(
                "syncgc_timeouts_total",
                "Owners released by their timeout before their dependents were gone",
            )?,
            leader: r.gauge(
                "syncgc_leader",
                "1 while this replica holds the leader lease and its workers act",
            )?,
            discovery_failed_groups: r.gauge(
                "syncgc_discovery_failed_groups",
                "API groups whose last discovery failed; their resources keep their watches",
            )?,
            discovery_errors: r.counter(
                "syncgc_discovery_errors_total",
                "Discoveries that failed as a whole (the list of API groups did not answer)",
            )?,
            resource_changes: r.counter_vec(
                "syncgc_resource_changes_total",
                "Watched resources changed by discovery, by change (added, moved, removed)",
                &["change"],
            )?,
            barrier_rounds: r.counter(
                "syncgc_barrier_rounds_total",
                "Rounds of consistent reads the release barrier made (one serves every owner that reached it before the round began)",
            )?,
            barrier_reads: r.counter(
                "syncgc_barrier_reads_total",
                "Lists and reads of the release barrier's rounds",
            )?,
            barrier_round_duration: r.histogram_vec(
                "syncgc_barrier_round_duration_seconds",
                "How long the release barrier's rounds of reads took, by scope (namespace, cluster)",
                LATENCY_BUCKETS,
                &["scope"],
            )?,
            barrier_holds: r.counter_vec(
                "syncgc_barrier_holds_total",
                "Times the release barrier held an owner whose dependents the graph saw gone, by reason (discovery, unreadable, dependent, orphan)",
                &["reason"],
            )?,
            waves_started: r.counter(
                "syncgc_waves_started_total",
                "Waves of dependents started for owners whose dependents carry syncgc.io/deletion-order",
            )?,
            leader_election_errors: r.counter_vec(
                "syncgc_leader_election_errors_total",
                "Failed reads and writes of the leader Lease, by reason",
                &["reason"],
            )?,
            ready: r.gauge_vec(
                "syncgc_ready",
                "1 while a readiness condition of /readyz is ok, 0 while it fails, by condition",
                &["condition"],
            )?,
            registry,
        })
    }

    /// The Prometheus text exposition of every registered collector.
    pub fn encode(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec only fails for malformed collectors, which `new` rules out.
        if let Err(err) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::error!(%err, "encoding metrics");
        }
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// Creates collectors and registers them in one step.
struct Register<'a>(&'a Registry);

impl Register<'_> {
    fn add<C: prometheus::core::Collector + Clone + 'static>(&self, c: C) -> prometheus::Result<C> {
        self.0.register(Box::new(c.clone()))?;
        Ok(c)
    }

    fn gauge(&self, name: &str, help: &str) -> prometheus::Result<IntGauge> {
        self.add(IntGauge::new(name, help)?)
    }

    fn counter(&self, name: &str, help: &str) -> prometheus::Result<IntCounter> {
        self.add(IntCounter::new(name, help)?)
    }

    fn gauge_vec(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> prometheus::Result<IntGaugeVec> {
        self.add(IntGaugeVec::new(Opts::new(name, help), labels)?)
    }

    fn counter_vec(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> prometheus::Result<IntCounterVec> {
        self.add(IntCounterVec::new(Opts::new(name, help), labels)?)
    }

    fn histogram_vec(
        &self,
        name: &str,
        help: &str,
        buckets: &[f64],
        labels: &[&str],
    ) -> prometheus::Result<HistogramVec> {
        self.add(HistogramVec::new(
            HistogramOpts::new(name, help).buckets(buckets.to_vec()),
            labels,
        )?)
    }
}

/// One thing `/readyz` waits for. Its name is a label value of `syncgc_ready` and starts the
/// line `/readyz` writes when it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    /// The garbage collector: every watch has listed once (`Readiness::set`).
    Collector,
    /// Leader election: the Lease can be read and written.
    LeaderElection,
    /// The webhook has a certificate to serve (with --tls-secret: once the Secret is read).
    /// Admission needs nothing else, so the pod's readiness probe asks `/readyz/webhook`.
    Webhook,
    /// With --manage-webhook: the webhook configuration says what it should (the last round
    /// could read and write it).
    Registration,
}

impl Condition {
    pub const ALL: [Self; 4] = [
        Self::Collector,
        Self::LeaderElection,
        Self::Webhook,
        Self::Registration,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Collector => "collector",
            Self::LeaderElection => "leader-election",
            Self::Webhook => "webhook",
            Self::Registration => "registration",
        }
    }

    fn of(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the collector is not ready while its watches have not all listed.
const COLLECTOR_NOT_LISTED: &str = "not every watch has listed yet";

/// Whether syncgc is ready to do its job: a set of [`Condition`]s, each ok or failing with a
/// reason for people. `/readyz` answers 200 only when all are ok, and otherwise names each
/// failing one with its reason. At first the collector fails (its watches have not listed) and
/// every other condition is ok.
#[derive(Clone)]
pub struct Readiness(Arc<Mutex<BTreeMap<Condition, String>>>);

impl Default for Readiness {
    fn default() -> Self {
        let failing = BTreeMap::from([(Condition::Collector, COLLECTOR_NOT_LISTED.to_owned())]);
        Self(Arc::new(Mutex::new(failing)))
    }
}

impl Readiness {
    /// The collector's condition: `true` once every watch has listed.
    pub fn set(&self, ready: bool) {
        if ready {
            self.clear(Condition::Collector);
        } else {
            self.fail(Condition::Collector, COLLECTOR_NOT_LISTED);
        }
    }

    /// Whether the collector's condition is ok (see [`Readiness::set`]).
    pub fn get(&self) -> bool {
        self.is_ok(Condition::Collector)
    }

    /// Marks `condition` failing, for `reason` (a sentence for people, without a final period).
    pub fn fail(&self, condition: Condition, reason: impl Into<String>) {
        self.failing_mut().insert(condition, reason.into());
    }

    /// Marks `condition` ok.
    pub fn clear(&self, condition: Condition) {
        self.failing_mut().remove(&condition);
    }

    pub fn is_ok(&self, condition: Condition) -> bool {
        !self.failing_mut().contains_key(&condition)
    }

    /// Whether every condition is ok.
    pub fn is_ready(&self) -> bool {
        self.failing_mut().is_empty()
    }

    /// The failing conditions with their reasons, in the order of [`Condition::ALL`].
    pub fn failing(&self) -> Vec<(Condition, String)> {
        self.failing_mut()
            .iter()
            .map(|(c, reason)| (*c, reason.clone()))
            .collect()
    }

    fn failing_mut(&self) -> MutexGuard<'_, BTreeMap<Condition, String>> {
        self.0.lock()
    }
}

#[derive(Clone)]
struct Endpoints {
    metrics: Metrics,
    readiness: Readiness,
}

/// The router of the plain-HTTP metrics and health server.
pub fn router(metrics: Metrics, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(serve_readyz))
        .route("/readyz/{condition}", get(serve_readyz_of))
        .with_state(Endpoints { metrics, readiness })
}

async fn serve_metrics(State(state): State<Endpoints>) -> impl IntoResponse {
    let failing = state.readiness.failing();
    for condition in Condition::ALL {
        let ok = !failing.iter().any(|(c, _)| *c == condition);
        state
            .metrics
            .ready
            .with_label_values(&[condition.as_str()])
            .set(i64::from(ok));
    }
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        state.metrics.encode(),
    )
}

/// 200 `ok` when every condition is ok; otherwise 503 with a line `condition: reason` for each
/// failing one.
async fn serve_readyz(State(state): State<Endpoints>) -> impl IntoResponse {
    let failing = state.readiness.failing();
    if failing.is_empty() {
        return (StatusCode::OK, "ok\n".to_owned());
    }
    let body = failing
        .iter()
        .map(|(condition, reason)| format!("{condition}: {reason}\n"))
        .collect();
    (StatusCode::SERVICE_UNAVAILABLE, body)
}

/// `/readyz/CONDITION`: 200 `ok` while that one condition is ok; otherwise 503 with its line;
/// 404 for a condition that does not exist.
async fn serve_readyz_of(
    State(state): State<Endpoints>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> impl IntoResponse {
    let Some(condition) = Condition::of(&name) else {
        let known: Vec<&str> = Condition::ALL.iter().map(|c| c.as_str()).collect();
        return (
            StatusCode::NOT_FOUND,
            format!("no condition {name:?}; there are {}\n", known.join(", ")),
        );
    };
    match state
        .readiness
        .failing()
        .into_iter()
        .find(|(c, _)| *c == condition)
    {
        None => (StatusCode::OK, "ok\n".to_owned()),
        Some((_, reason)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{condition}: {reason}\n"),
        ),
    }
}

/// A garbage-collector action on an object: the `action` label of
/// `syncgc_gc_actions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Arm,
    Delete,
    RemoveFinalizer,
    RemoveOwnerReferences,
    StoreDeadline,
    UnblockOwnerReferences,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Arm => "arm",
            Self::Delete => "delete",
            Self::RemoveFinalizer => "remove_finalizer",
            Self::RemoveOwnerReferences => "remove_owner_references",
            Self::StoreDeadline => "store_deadline",
            Self::UnblockOwnerReferences => "unblock_owner_references",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{Body, to_bytes};
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(router: &Router, path: &str) -> (StatusCode, String) {
        let response = router
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readyz_follows_the_collector_and_healthz_is_always_ok() {
        let readiness = Readiness::default();
        let router = router(Metrics::new().unwrap(), readiness.clone());
        assert_eq!(get(&router, "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(&router, "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "collector: not every watch has listed yet\n".to_owned()
            )
        );
        assert!(!readiness.get());
        readiness.set(true);
        assert!(readiness.get());
        assert_eq!(
            get(&router, "/readyz").await,
            (StatusCode::OK, "ok\n".to_owned())
        );
        readiness.set(false);
        assert_eq!(
            get(&router, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[tokio::test]
    async fn readyz_names_each_failing_condition_with_its_reason() {
        let readiness = Readiness::default();
        let router = router(Metrics::new().unwrap(), readiness.clone());
        readiness.fail(
            Condition::LeaderElection,
            "the Lease namespace \"x\" does not exist",
        );
        assert_eq!(
            get(&router, "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "collector: not every watch has listed yet\n\
                 leader-election: the Lease namespace \"x\" does not exist\n"
                    .to_owned()
            )
        );
        // The collector's own switch leaves the other conditions alone.
        readiness.set(true);
        assert!(readiness.get());
        assert!(!readiness.is_ready());
        assert_eq!(
            get(&router, "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "leader-election: the Lease namespace \"x\" does not exist\n".to_owned()
            )
        );
        // A new reason replaces the old one.
        readiness.fail(Condition::LeaderElection, "forbidden");
        assert_eq!(
            get(&router, "/readyz").await.1,
            "leader-election: forbidden\n"
        );
        readiness.clear(Condition::LeaderElection);
        assert!(readiness.is_ready());
        assert_eq!(
            get(&router, "/readyz").await,
            (StatusCode::OK, "ok\n".to_owned())
        );
    }

    #[tokio::test]
    async fn readyz_of_one_condition_ignores_the_others() {
        let readiness = Readiness::default();
        let router = router(Metrics::new().unwrap(), readiness.clone());
        // The collector has not listed: the webhook can serve all the same.
        assert_eq!(
            get(&router, "/readyz/webhook").await,
            (StatusCode::OK, "ok\n".to_owned())
        );
        assert_eq!(
            get(&router, "/readyz/collector").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "collector: not every watch has listed yet\n".to_owned()
            )
        );
        readiness.fail(Condition::Webhook, "no certificate to serve yet");
        assert_eq!(
            get(&router, "/readyz/webhook").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "webhook: no certificate to serve yet\n".to_owned()
            )
        );
        let (status, body) = get(&router, "/readyz/webhok").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(
            body.contains("collector, leader-election, webhook, registration"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn each_condition_is_a_series_of_syncgc_ready() {
        let readiness = Readiness::default();
        let router = router(Metrics::new().unwrap(), readiness.clone());
        let body = get(&router, "/metrics").await.1;
        assert!(
            body.contains("syncgc_ready{condition=\"collector\"} 0"),
            "{body}"
        );
        assert!(
            body.contains("syncgc_ready{condition=\"leader-election\"} 1"),
            "{body}"
        );
        readiness.set(true);
        readiness.fail(Condition::LeaderElection, "forbidden");
        let body = get(&router, "/metrics").await.1;
        assert!(
            body.contains("syncgc_ready{condition=\"collector\"} 1"),
            "{body}"
        );
        assert!(
            body.contains("syncgc_ready{condition=\"leader-election\"} 0"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn metrics_are_prometheus_text_with_the_prefix() {
        let metrics = Metrics::new().unwrap();
        metrics.apiserver_connected.set(1);
        let (status, body) = get(&router(metrics, Readiness::default()), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        let info = format!(
            "syncgc_build_info{{commit=\"{}\",version=\"{}\"}} 1",
            env!("SYNCGC_COMMIT"),
            env!("CARGO_PKG_VERSION")
        );
        assert!(body.contains(&info), "{body}");
        assert!(body.contains("syncgc_apiserver_connected 1"), "{body}");
    }
}
