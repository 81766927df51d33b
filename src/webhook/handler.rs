//! `POST /mutate` and `POST /guard`: reads the body within limits, parses it, asks
//! [`decision`] (under one read of the graph; on `/guard` off the runtime's threads when a
//! guard can apply), makes the effects through the API before the apiserver's deadline (a
//! finalizer added, a protected object's references dropped, a handler's Event, the record of
//! causes) and answers. It decides nothing itself.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::api::ApiResource;

use super::admit::{self, Case, Decision, Policy, admit};
use super::decision::{self, Grounds, target_of};
use super::review::{self, Answer, Review};
use super::tls::ClientCertified;
use crate::api::{ApiError, Claims, Cluster, Target};
use crate::gc::causes::{Causes, Pending};
use crate::gc::discovery;
use crate::gc::guard;
use crate::gc::needs::Needs;
use crate::graph::{Graph, Reader, ResourceId, Uid};
use crate::metrics::{Metrics, Readiness};
use crate::names::{MAX_CASCADE_ANNOTATION, PROTECTED_ANNOTATION, Reason};
use kube::runtime::events::EventType;

/// The largest review accepted: the apiserver's objects are up to ~3 MiB, and a review of an
/// UPDATE carries two of them.
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;
/// The most bytes of review bodies held at once, across every connection: nine of the
/// largest reviews, a small share of the chart's memory limit. A body waits for room up to
/// half its body timeout, then is refused (429).
pub const MAX_IN_FLIGHT_BYTES: usize = 9 * MAX_BODY_BYTES;
/// The apiserver's default webhook timeout, used when a request names none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The apiserver never waits longer than this for a webhook.
const MAX_TIMEOUT: Duration = Duration::from_secs(30);
/// Kept free of the apiserver's timeout, for the answer to travel back.
const ANSWER_MARGIN: Duration = Duration::from_millis(250);

/// What the `/mutate` handler needs.
#[derive(Clone)]
pub struct Webhook {
    pub policy: Policy,
    pub metrics: Metrics,
    /// The seam for side effects on DELETE.
    pub cluster: Cluster,
    /// The ownership graph, read for the dependents of an object being deleted.
    pub graph: Reader,
    /// The collector's table of resources, to name the kinds of the graph's objects.
    pub resources: discovery::ResourcesReader,
    /// How long a client may take to send its body.
    pub body_timeout: Duration,
    /// Where the DELETEs let through are recorded, with who sent them and why (`None`: not
    /// recorded).
    pub causes: Option<Causes>,
    /// The collector's readiness: until every watch has listed, the graph may miss objects,
    /// and the guards do not judge on it.
    pub readiness: Readiness,
    /// Answer only clients that presented a certificate of the client CA (the apiserver, when
    /// its admission configuration names one): `--webhook-client-ca`.
    pub authenticate: bool,
    /// What each finalizer handler needs to act, held with it.
    pub needs: Needs,
}

impl Webhook {
    /// What a decision relies on besides the request and the graph.
    fn grounds(&self) -> Grounds<'_> {
        Grounds {
            policy: &self.policy,
            needs: &self.needs,
            causes: self.causes.as_ref(),
            // Until every watch has listed, the graph may miss objects and owners.
            synced: self.readiness.get(),
            now: crate::api::clock::now().as_second(),
        }
    }

    /// Runs `f` on the graph, with the kind of each of its resources (the graph's lock taken
    /// first, as everywhere).
    fn on_graph<T>(&self, f: impl FnOnce(&Graph, &dyn Fn(ResourceId) -> String) -> T) -> T {
        let graph = self.graph.read();
        let resources = self.resources.read();
        f(&graph, &|id| resources.kind(id))
    }
}

/// The webhook and what it remembers between reviews.
struct Shared {
    webhook: Webhook,
    /// Room for [`MAX_IN_FLIGHT_BYTES`] of bodies, a permit per KiB.
    in_flight: Arc<tokio::sync::Semaphore>,
    /// The finalizer handlers whose hold's end was reported, and when: once per
    /// [`REPORT_AGAIN`], however many DELETEs (or reviews posted by anyone) pass.
    reported: parking_lot::Mutex<HashMap<Uid, Instant>>,
}

/// How often the end of one handler's hold is reported at most.
const REPORT_AGAIN: Duration = Duration::from_secs(600);
/// The most handlers remembered as reported.
const MAX_REPORTED: usize = 1024;

/// Which webhook a review came through: each has a path of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hook {
    /// `/mutate`: arming on CREATE and UPDATE, and the DELETEs of armed objects.
    Mutate,
    /// `/guard`: the guards on DELETE and on evictions; nothing else.
    Guard,
}

/// The webhook's router: `POST /mutate` and `POST /guard`. The state is shared, not cloned,
/// per request.
pub fn router(webhook: Webhook) -> Router {
    Router::new()
        .route(
            super::registration::WEBHOOK_PATH,
            post(|state, query, certified, request| {
                review(Hook::Mutate, state, query, certified, request)
            }),
        )
        .route(
            super::registration::GUARD_PATH,
            post(|state, query, certified, request| {
                review(Hook::Guard, state, query, certified, request)
            }),
        )
        .with_state(Arc::new(Shared {
            webhook,
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT_BYTES / 1024)),
            reported: parking_lot::Mutex::default(),
        }))
}

/// The `timeout` query parameter the apiserver adds (`?timeout=10s`).
fn timeout_param(query: Option<&str>) -> Option<Duration> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("timeout="))
        .and_then(|value| crate::duration::parse(value).ok())
}

async fn review(
    hook: Hook,
    State(served): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    certified: Option<Extension<ClientCertified>>,
    request: Request,
) -> Response {
    let webhook = &served.webhook;
    let started = Instant::now();
    let metrics = &webhook.metrics;
    metrics.webhook_in_flight.inc();
    let _in_flight = scopeguard(|| metrics.webhook_in_flight.dec());
    if webhook.authenticate && !certified.is_some_and(|Extension(c)| c.0) {
        count(
            metrics,
            "unknown",
            Rejection::Unauthenticated.result(),
            started,
        );
        return Rejection::Unauthenticated.into_response();
    }

    let timeout = timeout_param(query.as_deref())
        .unwrap_or(DEFAULT_TIMEOUT)
        .min(MAX_TIMEOUT);
    let deadline = started + timeout.saturating_sub(ANSWER_MARGIN).max(timeout / 2);

    let (parts, body) = request.into_parts();
    let read = read_body(
        &parts.headers,
        body,
        webhook.body_timeout.min(timeout),
        &served.in_flight,
    );
    // The room taken is held until the answer is written: the body lives as long.
    let (body, _room) = match read.await {
        Ok(body) => body,
        Err(rejection) => {
            count(metrics, "unknown", rejection.result(), started);
            return rejection.into_response();
        }
    };
    let review = match Review::parse(&body) {
        Ok(review) => review,
        Err(err) => {
            tracing::debug!(%err, "invalid admission review");
            count(metrics, "unknown", "invalid", started);
            return json(review::respond_invalid(&err));
        }
    };
    let (operation, case, answer) = match hook {
        Hook::Guard => guarded(&served, &review.request, deadline, started).await,
        Hook::Mutate => mutated(&served, &review.request, deadline).await,
    };
    count(metrics, operation, case.as_str(), started);
    json(review::respond(
        review.api_version,
        &review.request.uid,
        answer,
    ))
}

/// A review through the guards' webhooks: a DELETE, or an eviction judged as the DELETE of its
/// Pod (read live: an eviction carries no object of the Pod). A refusal drops a protected
/// object's references to the owners that are going; a DELETE let through is recorded.
async fn guarded(
    served: &Arc<Shared>,
    review: &review::Request,
    deadline: Instant,
    started: Instant,
) -> (&'static str, Case, Answer) {
    let webhook = &served.webhook;
    let eviction = match review.evicts() {
        true => evicted(webhook, review, deadline).await,
        false => None,
    };
    let request = eviction.as_ref().unwrap_or(review);
    let (verdict, pending) = guard(served, request, deadline).await;
    match verdict {
        guard::Judgement::Refuse {
            message,
            drop_owners,
            guard,
        } => {
            if !drop_owners.is_empty() && !admit::dry_run(request) {
                drop_references(webhook, request, &drop_owners, deadline).await;
            }
            tracing::info!(
                uid = %request.uid,
                kind = %request.kind.kind,
                namespace = request.namespace.as_deref().unwrap_or(""),
                name = %request.name,
                user = %request.user_info.username,
                guard = guard.as_str(),
                %message,
                "DELETE refused"
            );
            (
                review.operation.as_str(),
                Case::Refused(guard),
                Answer::Deny { message },
            )
        }
        guard::Judgement::Pass { warnings, released } => {
            if let Some((handler, note)) = released.filter(|_| !admit::dry_run(request))
                && first_report(&served.reported, handler, started)
            {
                handler_released(webhook, handler, note);
            }
            admitted(webhook, pending);
            let case = match eviction {
                Some(_) => Case::Eviction,
                None => Case::PassedGuards,
            };
            let answer = Answer::Allow {
                patch: None,
                warnings,
            };
            (review.operation.as_str(), case, answer)
        }
    }
}

/// A review through `/mutate`: [`decision::mutated`], its side effect, the answer.
async fn mutated(
    served: &Arc<Shared>,
    request: &review::Request,
    deadline: Instant,
) -> (&'static str, Case, Answer) {
    let webhook = &served.webhook;
    let (decision, pending) = match decision::reads_graph(request) {
        true => webhook
            .on_graph(|graph, kind| decision::mutated(graph, kind, &webhook.grounds(), request)),
        false => (admit(request, &webhook.policy, 0), None),
    };
    let answer = settle(webhook, request, &decision, deadline).await;
    if matches!(answer, Answer::Allow { .. }) {
        admitted(webhook, pending);
    }
    tracing::debug!(
        uid = %request.uid,
        operation = request.operation.as_str(),
        kind = %request.kind.kind,
        namespace = request.namespace.as_deref().unwrap_or(""),
        name = %request.name,
        decision = decision.reason.as_str(),
        allowed = matches!(answer, Answer::Allow { .. }),
        "admission review answered"
    );
    (request.operation.as_str(), decision.reason, answer)
}

/// What the guards say of `request` ([`decision::guarded`]), with what the record keeps of
/// it: when no guard can apply, under the read of the graph that tells; else judged off the
/// runtime's threads with the time left to `deadline`.
async fn guard(
    served: &Arc<Shared>,
    request: &review::Request,
    deadline: Instant,
) -> (guard::Judgement, Option<Pending>) {
    let webhook = &served.webhook;
    let judged = decision::judged(request);
    if !judged || !names_a_guard(webhook, request) {
        let unguarded = webhook.on_graph(|graph, kind| {
            // No protected object and no finalizer handler anywhere: nothing to judge.
            let none = graph.protected().len() == 0 && graph.handlers().len() == 0;
            (!judged || none)
                .then(|| decision::guarded(graph, kind, &webhook.grounds(), request, None))
        });
        if let Some(decided) = unguarded {
            return decided;
        }
    }
    let served = served.clone();
    let request = request.clone();
    let judging = tokio::task::spawn_blocking(move || {
        let left = deadline.saturating_duration_since(Instant::now());
        // Three quarters of the time left: the rest is for the answer and the effects.
        let budget = guard::Judging::budget_for(left * 3 / 4);
        let webhook = &served.webhook;
        webhook.on_graph(|graph, kind| {
            decision::guarded(graph, kind, &webhook.grounds(), &request, Some(budget))
        })
    });
    judging.await.unwrap_or_else(|err| {
        tracing::error!(%err, "judging a DELETE failed");
        (guard::Judgement::pass(), None)
    })
}

/// Whether the DELETE of `request` names a guard itself: its object is protected, or a
/// cascade limit applies to it. Without one, a guard applies only when the graph holds a
/// protected object or a finalizer handler.
fn names_a_guard(webhook: &Webhook, request: &review::Request) -> bool {
    let Some(meta) = request.old_meta() else {
        return false;
    };
    webhook.policy.max_cascade.is_some()
        || crate::annotations::max_cascade(meta.annotation(MAX_CASCADE_ANNOTATION)).is_some()
        || crate::graph::protects(meta.annotation(PROTECTED_ANNOTATION))
}

/// The eviction `request` as the DELETE of its Pod, read live (an eviction carries no object
/// of the Pod); `None` when the Pod cannot be read before `deadline` (it is let through, as
/// every review is when syncgc cannot judge it in time).
async fn evicted(
    webhook: &Webhook,
    request: &review::Request,
    deadline: Instant,
) -> Option<review::Request> {
    let target = Target {
        resource: ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        namespace: request.namespace.clone().filter(|ns| !ns.is_empty()),
        name: request.name.clone(),
        uid: String::new(),
    };
    let read = tokio::time::timeout_at(deadline.into(), webhook.cluster.get_metadata(&target));
    match read.await {
        Ok(Ok(Some(pod))) => Some(request.eviction_as_delete(pod.into())),
        Ok(Ok(None)) => None,
        Ok(Err(err)) => {
            tracing::warn!(%target, %err, "could not read the Pod of an eviction");
            None
        }
        Err(_) => {
            tracing::warn!(%target, "could not read the Pod of an eviction before the deadline");
            None
        }
    }
}

/// Hands a DELETE let through to the record of causes.
fn admitted(webhook: &Webhook, pending: Option<Pending>) {
    if let (Some(causes), Some(pending)) = (&webhook.causes, pending) {
        causes.admitted(pending);
    }
}

/// Removes the references of `request`'s (protected) object to `owners`, which are going:
/// its DELETE was refused, and no collector should try it again. A failure is logged: the
/// refusal stands, and the next attempt tries again.
async fn drop_references(
    webhook: &Webhook,
    request: &review::Request,
    owners: &[Uid],
    deadline: Instant,
) {
    let Some(meta) = request.old_meta() else {
        return;
    };
    let Some(target) = target_of(request, meta.uid.clone().unwrap_or_default()) else {
        return;
    };
    let references = meta.owner_references.clone().unwrap_or_default();
    let owners: Vec<String> = owners.iter().map(ToString::to_string).collect();
    // Only while the live object is protected as the review says.
    let claims = Claims {
        annotations: meta
            .annotation(PROTECTED_ANNOTATION)
            .map(|value| (PROTECTED_ANNOTATION, value.to_owned()))
            .into_iter()
            .collect(),
        finalizers: Vec::new(),
    };
    if claims.annotations.is_empty() {
        return;
    }
    let outcome = tokio::time::timeout_at(
        deadline.into(),
        webhook
            .cluster
            .remove_owner_references(&target, &references, &owners, &claims),
    )
    .await;
    match outcome {
        Ok(Ok(())) => {
            tracing::info!(%target, ?owners, "references of a protected object to owners being deleted removed")
        }
        Ok(Err(err)) => {
            tracing::warn!(%target, %err, "could not remove a protected object's references")
        }
        Err(_) => {
            tracing::warn!(%target, "could not remove a protected object's references before the deadline")
        }
    }
}

/// Whether the end of `handler`'s hold is to be reported at `now`: not within
/// [`REPORT_AGAIN`] of the last report.
fn first_report(
    reported: &parking_lot::Mutex<HashMap<Uid, Instant>>,
    handler: Uid,
    now: Instant,
) -> bool {
    let mut reported = reported.lock();
    if reported
        .get(&handler)
        .is_some_and(|at| now.duration_since(*at) < REPORT_AGAIN)
    {
        return false;
    }
    if reported.len() >= MAX_REPORTED {
        reported.retain(|_, at| now.duration_since(*at) < REPORT_AGAIN);
        if reported.len() >= MAX_REPORTED {
            reported.clear();
        }
    }
    reported.insert(handler, now);
    true
}

/// Records, in the background, that the hold of the finalizer handler `handler` ended by its
/// timeout.
fn handler_released(webhook: &Webhook, handler: Uid, note: String) {
    let target = {
        let graph = webhook.graph.read();
        let resources = webhook.resources.read();
        let Some(target) = graph
            .node(handler)
            .and_then(|node| resources.target_of(handler, node))
        else {
            return;
        };
        target
    };
    let cluster = webhook.cluster.clone();
    tokio::spawn(async move {
        cluster
            .event(&target, EventType::Warning, Reason::HandlerTimedOut, note)
            .await;
    });
}

/// Makes the decision's side effect, if any, and turns the decision into the answer. A side
/// effect that fails or misses the deadline never blocks the request: it is allowed, with a
/// warning, so that no object is left stuck.
async fn settle(
    webhook: &Webhook,
    request: &review::Request,
    decision: &Decision,
    deadline: Instant,
) -> Answer {
    let mut warnings = decision.warnings.clone();
    if let Some(effect) = &decision.side_effect {
        let Some(target) = target_of(request, effect.uid.clone()) else {
            return Answer::Allow {
                patch: None,
                warnings,
            };
        };
        let outcome = tokio::time::timeout_at(
            deadline.into(),
            webhook.cluster.add_finalizer_with(
                &target,
                effect.finalizer,
                effect.marks(),
                &effect.claims,
            ),
        )
        .await;
        let (result, failure) = match outcome {
            Ok(Ok(_)) => ("ok", None),
            // The live object does not say what the review says: a review nobody's request
            // is behind (or an object changed since): answered, and nothing else.
            Ok(Err(err @ ApiError::Unconfirmed(..))) => ("unconfirmed", Some(err.to_string())),
            Ok(Err(err)) => ("error", Some(err.to_string())),
            Err(_) => (
                "error",
                Some("the apiserver's webhook deadline passed".to_owned()),
            ),
        };
        webhook
            .metrics
            .webhook_side_effects
            .with_label_values(&[result])
            .inc();
        if let Some(failure) = failure {
            tracing::warn!(%target, finalizer = effect.finalizer, %failure, "could not add finalizer");
            warnings.push(format!(
                "syncgc could not add {} to {target}: {failure}",
                effect.finalizer
            ));
            // An object that could not be armed must still be deletable.
            return Answer::Allow {
                patch: None,
                warnings,
            };
        }
    }
    match &decision.denial {
        Some(message) => Answer::Deny {
            message: message.clone(),
        },
        None => Answer::Allow {
            patch: decision.patch.clone(),
            warnings,
        },
    }
}

/// Why a request was refused before it could be read as a review.
#[derive(Debug)]
enum Rejection {
    UnsupportedMediaType(String),
    TooLarge,
    /// No room for the body among the bodies being read and answered.
    Busy,
    /// A client without the client CA's certificate, with `--webhook-client-ca`.
    Unauthenticated,
    Unreadable(String),
    BodyTimeout(Duration),
}

impl Rejection {
    fn result(&self) -> &'static str {
        match self {
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
            Self::TooLarge => "too_large",
            Self::Busy => "busy",
            Self::Unauthenticated => "unauthenticated",
            Self::Unreadable(_) => "unreadable",
            Self::BodyTimeout(_) => "body_timeout",
        }
    }
}

/// A refusal is a Kubernetes `Status`, with the reason a client reads.
impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let (status, reason, message) = match self {
            Self::UnsupportedMediaType(got) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                format!("expected Content-Type application/json, got {got:?}"),
            ),
            Self::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                format!("the review exceeds {MAX_BODY_BYTES} bytes"),
            ),
            Self::Busy => (
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                format!("the webhook holds {MAX_IN_FLIGHT_BYTES} bytes of reviews already; retry"),
            ),
            Self::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "the webhook answers the apiserver only: present the client certificate of the \
                 CA given to --webhook-client-ca"
                    .to_owned(),
            ),
            Self::Unreadable(err) => (
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("reading the body: {err}"),
            ),
            Self::BodyTimeout(timeout) => (
                StatusCode::REQUEST_TIMEOUT,
                "Timeout",
                format!("the body did not arrive within {timeout:?}"),
            ),
        };
        let body = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": status.as_u16(),
        });
        (status, axum::Json(body)).into_response()
    }
}

/// Reads a JSON body of at most [`MAX_BODY_BYTES`] within `timeout`, once `room` has room for
/// it (its declared length, else the largest); the room is returned with the body.
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    timeout: Duration,
    room: &Arc<tokio::sync::Semaphore>,
) -> Result<(Bytes, tokio::sync::OwnedSemaphorePermit), Rejection> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(Rejection::UnsupportedMediaType(content_type.to_owned()));
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return Err(Rejection::TooLarge);
    }
    let kib = declared
        .map_or(MAX_BODY_BYTES as u64, |len| len)
        .div_ceil(1024)
        .max(1);
    let kib = u32::try_from(kib).unwrap_or(u32::MAX);
    let room = match room.clone().try_acquire_many_owned(kib) {
        Ok(room) => room,
        // Half the body's time at most: the rest is for reading it.
        Err(_) => tokio::time::timeout(timeout / 2, room.clone().acquire_many_owned(kib))
            .await
            .map_err(|_| Rejection::Busy)?
            .map_err(|_| Rejection::Busy)?,
    };
    // A review's body nearly always arrives with its headers: read at once, it needs no timer.
    let mut read = std::pin::pin!(axum::body::to_bytes(body, MAX_BODY_BYTES));
    let read = match futures::poll!(read.as_mut()) {
        std::task::Poll::Ready(read) => Ok(read),
        std::task::Poll::Pending => tokio::time::timeout(timeout, read).await,
    };
    match read {
        Ok(Ok(bytes)) => Ok((bytes, room)),
        Ok(Err(err)) => {
            let too_large = std::error::Error::source(&err)
                .is_some_and(|e| e.is::<http_body_util::LengthLimitError>());
            Err(if too_large {
                Rejection::TooLarge
            } else {
                Rejection::Unreadable(err.to_string())
            })
        }
        Err(_) => Err(Rejection::BodyTimeout(timeout)),
    }
}

fn json(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn count(metrics: &Metrics, operation: &str, result: &str, started: Instant) {
    metrics
        .webhook_requests
        .with_label_values(&[operation, result])
        .inc();
    metrics
        .webhook_duration
        .with_label_values(&[operation])
        .observe(started.elapsed().as_secs_f64());
}

/// Runs `f` when dropped, on every path out of a scope.
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct OnDrop<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for OnDrop<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    OnDrop(Some(f))
}
