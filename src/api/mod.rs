//! The seam every Kubernetes call goes through: [`Cluster`], which reads, patches and deletes
//! single objects with preconditions, a client-side rate limit, a timeout per call and a count
//! of errors by verb. Each concept in its file:
//!
//! - [`client`]: connecting (kubeconfig, context, in-cluster) and the apiserver's version;
//! - [`error`]: what a call fails with; [`limiter`]: the rate limit; [`target`]: what a call
//!   is about;
//! - [`list`]: paged metadata lists, decoded as they arrive ([`proto`] reads protobuf,
//!   [`meta`] is the metadata the collector keeps); [`streams`]: the connections of the
//!   graph's lists and watches;
//! - [`patch`]: guarded writes of finalizers and ownerReferences, with one retry on conflict;
//! - [`fence`]: no write that depends on leading once the lease may have passed;
//! - [`event`]: Events; [`whole`]: objects read and written whole (the Lease, the webhook
//!   configuration, the certificate's Secret); [`clock`]: the apiserver's time.

pub mod client;
pub mod clock;
pub mod error;
pub mod event;
pub mod fence;
pub mod limiter;
pub mod list;
pub mod meta;
pub mod patch;
pub mod proto;
pub mod streams;
pub mod target;
pub mod whole;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, DynamicObject, Preconditions, PropagationPolicy};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};

pub use self::client::{
    Access, ServerVersion, caused_by, client, config, config_in, get_text, install_crypto_provider,
    server_version, streams,
};
pub use self::error::{ApiError, Verb, names_missing_object};
pub use self::event::EVENT_REPORTER;
pub use self::fence::Fence;
pub use self::limiter::RateLimiter;
pub use self::list::{LIST_PAGE, MetaList, null_is_empty};
pub use self::patch::{Changed, Claims, Marks};
pub use self::target::{Propagation, Target, described};
pub use self::whole::Whole;
use crate::metrics::Metrics;

/// Single-object calls with preconditions, rate limit, timeouts and error counts, and Events.
#[derive(Clone)]
pub struct Cluster {
    client: Client,
    /// The graph's lists and watches, and discovery (see [`streams`]).
    streams: Client,
    limiter: Option<Arc<RateLimiter>>,
    timeout: Duration,
    metrics: Metrics,
    recorder: Recorder,
    /// When set, a write is refused once the fence has passed.
    fence: Option<Fence>,
}

impl Cluster {
    pub fn new(
        client: Client,
        limiter: Option<Arc<RateLimiter>>,
        timeout: Duration,
        metrics: Metrics,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: EVENT_REPORTER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Self {
            streams: client.clone(),
            client,
            limiter,
            timeout,
            metrics,
            recorder,
            fence: None,
        }
    }

    /// The same client whose writes leave only while `fence` holds: for what only the leader
    /// may write (see [`fence`]).
    pub fn with_fence(&self, fence: Fence) -> Self {
        Self {
            fence: Some(fence),
            ..self.clone()
        }
    }

    /// The same calls, with `streams` for the lists and watches (see [`streams`]).
    pub fn with_streams(self, streams: Client) -> Self {
        Self { streams, ..self }
    }

    /// The client for the requests this seam does not wrap: the watches, their lists and
    /// discovery, which read without a rate limit (on their own connections once given
    /// [`Cluster::with_streams`]).
    pub fn streams(&self) -> &Client {
        &self.streams
    }

    /// The apiserver's version (see [`server_version`]).
    pub async fn server_version(&self) -> Result<String, ApiError> {
        server_version(&self.client).await
    }

    /// Who this client is to the apiserver, from a SelfSubjectReview (served from 1.28 on;
    /// every authenticated user may create one). `None`: the answer names no user.
    pub async fn username(&self) -> Result<Option<String>, ApiError> {
        const PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "SelfSubjectReview",
        });
        let failed = |source| ApiError::Call {
            verb: Verb::Create,
            target: PATH.to_owned(),
            source,
        };
        let request = http::Request::post(PATH)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.to_string().into_bytes())
            .map_err(|err| failed(kube::Error::HttpError(err)))?;
        let answer: serde_json::Value = self.client.request(request).await.map_err(failed)?;
        Ok(answer
            .pointer("/status/userInfo/username")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned))
    }

    /// The objects of the cluster-scoped kind `K`, whole, for [`Cluster::get_whole`] and its
    /// kin.
    pub fn all<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>,
        K::DynamicType: Default,
    {
        Api::all(self.client.clone())
    }

    /// The objects of the namespaced kind `K` in `namespace`, whole, for
    /// [`Cluster::get_whole`] and its kin.
    pub fn namespaced<K>(&self, namespace: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The same client and timeout under a budget of its own: calls made through it neither
    /// wait for the calls of this one nor hold them up.
    pub fn with_limiter(&self, limiter: Arc<RateLimiter>) -> Self {
        Self {
            limiter: Some(limiter),
            ..self.clone()
        }
    }

    fn api(&self, target: &Target) -> Api<DynamicObject> {
        match &target.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &target.resource),
            None => Api::all_with(self.client.clone(), &target.resource),
        }
    }

    /// Runs one call under the rate limit and the timeout, counting failures by verb.
    async fn call<T>(
        &self,
        verb: Verb,
        target: &Target,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ApiError> {
        if let Some(limiter) = &self.limiter {
            limiter.acquire().await;
        }
        // Checked after the wait for the rate limit, right before the request.
        if verb.writes() && self.fence.as_ref().is_some_and(|fence| !fence.holds()) {
            return Err(ApiError::NotLeading {
                verb,
                target: target.to_string(),
            });
        }
        let result = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(source)) => ApiError::Call {
                verb,
                target: target.to_string(),
                source,
            },
            Err(_) => ApiError::Timeout {
                verb,
                target: target.to_string(),
                timeout: self.timeout,
            },
        };
        if result.status() != Some(404) {
            self.metrics
                .api_errors
                .with_label_values(&[verb.as_str()])
                .inc();
        }
        Err(result)
    }
    /// The text the apiserver answers a GET of `path` with: a proxy to a pod's port, say.
    pub async fn get_text_at(&self, path: &str) -> anyhow::Result<String> {
        let request = http::Request::get(path).body(Vec::new())?;
        Ok(self.streams().request_text(request).await?)
    }

    /// The object named by `target`, if it exists with `target`'s uid (an empty uid matches
    /// any).
    pub async fn get(&self, target: &Target) -> Result<Option<DynamicObject>, ApiError> {
        let api = self.api(target);
        let object = self
            .call(Verb::Get, target, api.get_opt(&target.name))
            .await?;
        Ok(object
            .filter(|o| target.uid.is_empty() || o.metadata.uid.as_deref() == Some(&target.uid)))
    }

    /// The metadata of `target`, if it exists with `target`'s uid.
    pub async fn get_metadata(&self, target: &Target) -> Result<Option<ObjectMeta>, ApiError> {
        let api = self.api(target);
        let object = self
            .call(Verb::Get, target, api.get_metadata_opt(&target.name))
            .await?;
        Ok(object
            .map(|o| o.metadata)
            .filter(|m| target.uid.is_empty() || m.uid.as_deref() == Some(&target.uid)))
    }

    /// Deletes `target` with `propagation`, only if it still has its uid (and, when given, the
    /// `resource_version` the decision was made on). `Ok(false)`: it was gone already.
    pub async fn delete(
        &self,
        target: &Target,
        propagation: Propagation,
        resource_version: Option<String>,
    ) -> Result<bool, ApiError> {
        let params = DeleteParams {
            propagation_policy: Some(match propagation {
                Propagation::Background => PropagationPolicy::Background,
                Propagation::Foreground => PropagationPolicy::Foreground,
                Propagation::Orphan => PropagationPolicy::Orphan,
            }),
            preconditions: Some(Preconditions {
                uid: Some(target.uid.clone()),
                resource_version,
            }),
            ..Default::default()
        };
        // The answer (the object, or a Status) is read but not decoded: nothing in it is
        // needed, and a cascade makes thousands of these calls.
        let mut request = kube::core::Request::new(target.resource_url())
            .delete(&target.name, &params)
            .map_err(|err| ApiError::Call {
                verb: Verb::Delete,
                target: target.to_string(),
                source: kube::Error::BuildRequest(err),
            })?;
        client::name_cause(&mut request);
        match self
            .call(Verb::Delete, target, self.client.request_text(request))
            .await
        {
            Ok(_) => Ok(true),
            Err(err) if err.status() == Some(404) => Ok(false),
            Err(err) => Err(err),
        }
    }
}
