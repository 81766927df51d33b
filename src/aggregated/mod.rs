//! What syncgc knows, served as a Kubernetes API through the aggregation layer: the group
//! `syncgc.io/v1alpha1`, registered by an `APIService`, on the webhook's port.
//!
//! - `deletionplans` (namespaced) and `clusterdeletionplans`: create-only reviews, as
//!   `SubjectAccessReview` is, whose status is what a DELETE of the object named would do —
//!   the plan `syncgc plan` prints ([`crate::plan::Plan`]), made on the collector's graph by
//!   the one cascade model ([`crate::gc::cascade`]).
//! - `deletioncauses` (namespaced; `get`, `list`): why each object went, from the record of
//!   causes ([`crate::gc::causes`]), with the chain up to the root and the user.
//!
//! The apiserver decides who sees what. A request is served only when its connection presented
//! the front proxy's client certificate ([`front_proxy`]): the apiserver authenticated the user
//! it names and authorized the request on these resources. What the answer names is then asked
//! of the apiserver's authorizer ([`access`]): a plan or a cause is answered only to a user who
//! may get its object, and objects of kinds or namespaces the user may not read are counted,
//! not named. Refusals are Kubernetes `Status`es ([`status`]).
//!
//! - [`bearer`]: the debug endpoints, answered to the callers the apiserver authenticates by
//!   their tokens, as it authorizes them.
//! - [`discovery`]: the group's discovery documents and its OpenAPI.
//! - [`plans`]: the deletion plans; [`causes`]: the deletion causes, joined across the
//!   replicas by [`peers`].

pub mod access;
pub mod bearer;
mod causes;
mod discovery;
pub mod front_proxy;
pub mod peers;
mod plans;
pub mod status;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, get, post};
use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;

use crate::api::Cluster;
use crate::gc::causes::Causes;
use crate::gc::config::CollectorArgs;
use crate::gc::discovery::ResourcesReader;
use crate::graph::Reader;
use crate::metrics::Readiness;
use crate::webhook::tls::{FrontProxy, ReloadingCert};
use access::Access;
use front_proxy::{RequestHeader, User};
use status::Refusal;

/// How often the front proxy's settings are read again (the apiserver rewrites them when its
/// CA rotates).
pub const REFRESH: Duration = Duration::from_secs(60);

/// What the API answers from, shared by its handlers.
pub struct Aggregated {
    /// How the front proxy vouches for users; `None` until read (or on a cluster without an
    /// aggregation layer).
    pub front_proxy: Arc<RwLock<Option<RequestHeader>>>,
    pub access: Access,
    pub graph: Reader,
    pub resources: ResourcesReader,
    /// The record of causes; `None` with `--record-causes=false`.
    pub causes: Option<Causes>,
    /// syncgc's own client: the live object a plan is of.
    pub cluster: Cluster,
    /// The timeouts and rate the collector runs with.
    pub collector: CollectorArgs,
    pub readiness: Readiness,
    /// The other replicas, whose records of causes a causes list joins.
    pub peers: peers::Peers,
}

/// The group's routes, on the webhook's port.
pub fn router(api: Arc<Aggregated>) -> Router {
    let base = "/apis/syncgc.io/v1alpha1";
    Router::new()
        .route("/apis", only(get(discovery::groups)))
        .route("/apis/syncgc.io", only(get(discovery::group)))
        .route(base, only(get(discovery::resources)))
        .route("/openapi/v2", only(get(discovery::openapi)))
        .route(
            &format!("{base}/namespaces/{{namespace}}/deletionplans"),
            only(post(plans::create_namespaced)),
        )
        .route(
            &format!("{base}/clusterdeletionplans"),
            only(post(plans::create_cluster)),
        )
        .route(
            &format!("{base}/namespaces/{{namespace}}/deletioncauses"),
            only(get(causes::list_namespaced)),
        )
        .route(
            &format!("{base}/deletioncauses"),
            only(get(causes::list_all)),
        )
        .route(
            &format!("{base}/namespaces/{{namespace}}/deletioncauses/{{name}}"),
            only(get(causes::get_one)),
        )
        .route(&format!("{base}/{{*rest}}"), axum::routing::any(unknown))
        .route(peers::PATH, only(post(peers::answer_peer)))
        .with_state(api)
}

/// `route`, refusing the methods it does not serve with a `Status` (405).
fn only(route: MethodRouter<Arc<Aggregated>>) -> MethodRouter<Arc<Aggregated>> {
    route.fallback(|method: http::Method| async move {
        Refusal::not_allowed(format!("{method} is not served at this path"))
    })
}

async fn unknown(_: Vouched) -> Refusal {
    Refusal::not_found(
        "syncgc.io/v1alpha1 serves deletionplans, clusterdeletionplans and deletioncauses",
    )
}

/// A request the front proxy vouched for: its certificate is the front proxy's, whoever the
/// user (discovery is answered to the front proxy itself).
pub struct Vouched;

/// The user the front proxy vouched for.
pub struct Caller(pub User);

impl FromRequestParts<Arc<Aggregated>> for Vouched {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<Aggregated>) -> Result<Self, Refusal> {
        let settings = settings(api)?;
        match common_name(parts) {
            Some(name) if settings.allows(&name) => Ok(Self),
            _ => Err(Refusal::unauthorized(
                "no client certificate of the aggregation layer's front proxy: syncgc.io is \
                 served only through the Kubernetes apiserver",
            )),
        }
    }
}

impl FromRequestParts<Arc<Aggregated>> for Caller {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<Aggregated>) -> Result<Self, Refusal> {
        let settings = settings(api)?;
        settings
            .user(common_name(parts).as_deref(), &parts.headers)
            .map(Self)
    }
}

fn settings(api: &Aggregated) -> Result<RequestHeader, Refusal> {
    api.front_proxy.read().clone().ok_or_else(|| {
        Refusal::unauthorized(format!(
            "syncgc has not read the front proxy's settings ({}/{}): it cannot tell whom a \
             request comes from",
            front_proxy::CONFIG_MAP_NAMESPACE,
            front_proxy::CONFIG_MAP_NAME
        ))
    })
}

fn common_name(parts: &Parts) -> Option<String> {
    parts
        .extensions
        .get::<FrontProxy>()
        .and_then(|f| f.0.clone())
}

/// Reads the front proxy's settings now and every [`REFRESH`] until `shutdown`, and gives its
/// CA to `cert`'s client checks. Until it is read, every request is refused (401).
pub async fn follow_front_proxy(
    settings: Arc<RwLock<Option<RequestHeader>>>,
    cert: Arc<ReloadingCert>,
    cluster: Cluster,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(REFRESH);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut said: Option<String> = None;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let config_maps = cluster.namespaced::<ConfigMap>(front_proxy::CONFIG_MAP_NAMESPACE);
        let read = cluster
            .get_whole(&config_maps, front_proxy::CONFIG_MAP_NAME)
            .await;
        let found = match read {
            Ok(found) => found
                .and_then(|cm| RequestHeader::from_data(&cm.data.unwrap_or_else(BTreeMap::new))),
            Err(err) => {
                let message = err.to_string();
                if said.as_ref() != Some(&message) {
                    tracing::warn!(%err, "reading the front proxy's settings; syncgc.io is not served until they are read");
                    said = Some(message);
                }
                continue;
            }
        };
        if *settings.read() == found {
            continue;
        }
        let ca = found.as_ref().map(|f| f.client_ca.as_bytes());
        if let Err(err) = cert.set_front_proxy_ca(ca, front_proxy::CONFIG_MAP_NAME) {
            tracing::warn!(%err, "the front proxy's CA does not load; keeping the one before");
            continue;
        }
        match &found {
            Some(found) => tracing::info!(
                allowed_names = ?found.allowed_names,
                "serving syncgc.io/v1alpha1 to the aggregation layer's front proxy"
            ),
            None => tracing::warn!(
                "the apiserver publishes no front proxy CA (--requestheader-client-ca-file): \
                 syncgc.io/v1alpha1 is not served"
            ),
        }
        said = None;
        *settings.write() = found;
    }
}

/// Whether the request asks for a `meta.k8s.io` Table (`kubectl get`).
fn wants_table(parts: &axum::http::HeaderMap) -> bool {
    parts
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// A JSON answer with `code`.
fn answer(code: axum::http::StatusCode, body: &impl serde::Serialize) -> axum::response::Response {
    (code, axum::Json(body)).into_response()
}
