//! The seam every Kubernetes call goes through: connecting, and [`Cluster`], which reads,
//! patches and deletes single objects with preconditions, a client-side rate limit, a timeout
//! per call and a count of errors by verb.

pub mod clock;
pub mod meta;
pub mod proto;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use json_patch::{
    Patch as JsonPatch, PatchOperation, RemoveOperation, ReplaceOperation, TestOperation,
};
use jsonptr::PointerBuf;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta, OwnerReference};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions,
    PropagationPolicy,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Config, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Mutex;
use tokio::time::Instant;

use self::meta::{Item, Meta};
use self::proto::ListDecoder;
use crate::metrics::Metrics;
use crate::names::{ARMED_LABEL, Reason, SYNCHRONOUS_FINALIZER};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("reading kubeconfig {path}: {source}")]
    ReadKubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("no cluster configuration (no kubeconfig and not in a cluster): {0}")]
    InferConfig(#[from] kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("asking the apiserver for its version: {0}")]
    Version(#[source] kube::Error),
    #[error("{verb} {target}: {source}")]
    Call {
        verb: Verb,
        target: String,
        source: kube::Error,
    },
    #[error("{verb} {target}: no answer within {timeout:?}")]
    Timeout {
        verb: Verb,
        target: String,
        timeout: Duration,
    },
    #[error("{0} is gone or was replaced (uid {1} no longer exists)")]
    Replaced(String, String),
    #[error("{0} is being deleted: no finalizer can be added")]
    Terminating(String),
    #[error("{0} kept changing under every attempt to patch it")]
    Conflict(String),
    #[error(
        "an ownerReference names kind {kind} of {api_version}, which the apiserver does not serve"
    )]
    UnknownKind { api_version: String, kind: String },
}

impl ApiError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Version(_)
            | Self::Conflict(_)
            | Self::Timeout { .. }
            | Self::UnknownKind { .. } => true,
            Self::Call { source, .. } => match source {
                kube::Error::Api(status) => matches!(status.code, 409 | 422 | 429 | 500..=599),
                _ => true,
            },
            Self::ReadKubeconfig { .. }
            | Self::InferConfig(_)
            | Self::Client(_)
            | Self::Replaced(..)
            | Self::Terminating(_) => false,
        }
    }

    /// Why a call failed, for metrics: a closed set of names.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Timeout { .. } => "timeout",
            Self::Conflict(_) => "conflict",
            Self::UnknownKind { .. } => "unknown_kind",
            Self::Replaced(..) => "replaced",
            Self::Terminating(_) => "terminating",
            Self::ReadKubeconfig { .. } | Self::InferConfig(_) | Self::Client(_) => "config",
            Self::Version(_) | Self::Call { .. } => match self.status() {
                Some(404) => "not_found",
                Some(403 | 401) => "forbidden",
                Some(409) => "conflict",
                Some(400 | 413 | 422) => "invalid",
                Some(429) => "throttled",
                Some(500..=599) => "server_error",
                Some(_) => "other",
                None => "unreachable",
            },
        }
    }

    /// The HTTP status the apiserver answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Call {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }
}

/// The kind of call, for errors and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Patch,
    Delete,
    Create,
    Update,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::Create => "create",
            Self::Update => "update",
        }
    }
}

impl std::fmt::Display for Verb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Installs the process-wide rustls crypto provider; the kube client and the webhook's TLS
/// server both need one. Idempotent.
pub fn install_crypto_provider() {
    // Err only means a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The client configuration: from `kubeconfig` when given, otherwise inferred (KUBECONFIG,
/// `~/.kube/config`, or the in-cluster service account).
pub async fn config(kubeconfig: Option<&Path>) -> Result<Config, ApiError> {
    config_in(kubeconfig, None).await
}

/// [`config`] with the kubeconfig's context `context` instead of its current one.
pub async fn config_in(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<Config, ApiError> {
    install_crypto_provider();
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    match kubeconfig {
        Some(path) => {
            let read_err = |source| ApiError::ReadKubeconfig {
                path: path.display().to_string(),
                source,
            };
            let file = Kubeconfig::read_from(path).map_err(read_err)?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(read_err)
        }
        None if context.is_some() => {
            Config::from_kubeconfig(&options)
                .await
                .map_err(|source| ApiError::ReadKubeconfig {
                    path: "KUBECONFIG or ~/.kube/config".to_owned(),
                    source,
                })
        }
        None => Ok(Config::infer().await?),
    }
}

/// Where a command run from a laptop finds its cluster: `--kubeconfig` and `--context`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Access {
    /// Kubeconfig file; without it, KUBECONFIG, ~/.kube/config or the in-cluster configuration.
    #[arg(long, env = "SYNCGC_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig's context to use instead of its current one.
    #[arg(long)]
    pub context: Option<String>,
}

impl Access {
    pub async fn config(&self) -> Result<Config, ApiError> {
        config_in(self.kubeconfig.as_deref(), self.context.as_deref()).await
    }

    pub async fn client(&self) -> Result<Client, ApiError> {
        client(self.config().await?)
    }

    /// The seam for a command: its requests at `qps` (twice that in a burst), or unlimited
    /// for a command that sends one at a time, each bounded by `timeout`.
    pub async fn cluster(&self, qps: Option<f64>, timeout: Duration) -> anyhow::Result<Cluster> {
        Ok(Cluster::new(
            self.client().await?,
            qps.map(|qps| Arc::new(RateLimiter::new(qps, (qps * 2.0) as u32))),
            timeout,
            Metrics::new()?,
        ))
    }
}

/// A client for `config`. Without the client's own retries of 429, 503 and 504 (up to 15,
/// for minutes): every caller here has its own bound and backoff (the work queue, the
/// watches, discovery, the webhook's deadline), and an aggregated API that answers 503 must
/// fail fast, not hold discovery up.
pub fn client(config: Config) -> Result<Client, ApiError> {
    use kube::client::ConfigExt;
    let mut connector = hyper_timeout::TimeoutConnector::new(
        config.rustls_https_connector().map_err(ApiError::Client)?,
    );
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let http = hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
        .http1_max_buf_size(READ_BUFFER)
        .build(connector);
    let http = tower::ServiceExt::map_err(http, tower::BoxError::from);
    // Every answer's Date header keeps the estimate of the apiserver's clock current.
    let http = tower::ServiceExt::map_response(http, |response: http::Response<_>| {
        if let Some(date) = response.headers().get(http::header::DATE) {
            clock::observe(date);
        }
        response
    });
    // As kube's own client, but for the read buffer, and without retries: every caller
    // retries with its own backoff.
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(ApiError::Client)?)
        .layer(config.extra_headers_layer().map_err(ApiError::Client)?)
        .service(http);
    Ok(Client::new(service, config.default_namespace))
}

/// The most a connection's read buffer grows to. Each watch holds a connection of its own
/// (HTTP/1.1), and hyper's default (about 400 KiB) stays allocated on every connection that
/// once read a large answer: with hundreds of kinds, each listed once in full, hundreds of
/// MiB for buffers that are idle.
const READ_BUFFER: usize = 16 * 1024;

/// Asks the apiserver for its version: the cheapest proof that it answers and trusts us.
pub async fn server_version(client: &Client) -> Result<String, ApiError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(ApiError::Version)?;
    Ok(info.git_version)
}

/// A token bucket: `qps` calls a second on average, bursts of up to `burst`.
#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    bucket: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: qps.max(0.001),
            burst,
            bucket: Mutex::new((burst, Instant::now())),
        }
    }

    /// Waits for a token. Callers are served in the order they ask.
    pub async fn acquire(&self) {
        let wait = {
            let mut bucket = self.bucket.lock().await;
            let now = Instant::now();
            let (tokens, last) = *bucket;
            let tokens =
                (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst) - 1.0;
            *bucket = (tokens, now);
            (tokens < 0.0).then(|| Duration::from_secs_f64(-tokens / self.qps))
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }
}

/// A DELETE's propagation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

impl Propagation {
    /// The policy an object's own finalizers ask for (`orphan` wins, as in the apiserver).
    pub fn from_finalizers(orphan: bool, foreground: bool) -> Self {
        if orphan {
            Self::Orphan
        } else if foreground {
            Self::Foreground
        } else {
            Self::Background
        }
    }

    /// The policy `syncgc.io/propagation` names (`Foreground`, `Background`, `Orphan`), in the
    /// words of a DELETE's `propagationPolicy`.
    pub fn from_annotation(value: &str) -> Option<Self> {
        match value {
            "Foreground" => Some(Self::Foreground),
            "Background" => Some(Self::Background),
            "Orphan" => Some(Self::Orphan),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Background => "background",
            Self::Foreground => "foreground",
            Self::Orphan => "orphan",
        }
    }
}

/// One object, by resource and name, with the uid it must still have.
#[derive(Debug, Clone)]
pub struct Target {
    pub resource: ApiResource,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

impl Target {
    /// The collection of `resource` in `namespace` (every namespace when `None`), for lists.
    pub fn collection(resource: &ApiResource, namespace: Option<&str>) -> Self {
        Self {
            resource: resource.clone(),
            namespace: namespace.map(str::to_owned),
            name: String::new(),
            uid: String::new(),
        }
    }

    /// The URL path of the collection `self` is in.
    pub fn resource_url(&self) -> String {
        DynamicObject::url_path(&self.resource, self.namespace.as_deref())
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.namespace, self.name.is_empty()) {
            (Some(ns), true) => write!(f, "{} in {ns}", self.resource.plural),
            (None, true) => write!(f, "{}", self.resource.plural),
            (Some(ns), false) => write!(f, "{} {ns}/{}", self.resource.kind, self.name),
            (None, false) => write!(f, "{} {}", self.resource.kind, self.name),
        }
    }
}

/// What a finalizer-adding write sets besides the finalizer: a label (key, value) and an
/// annotation (key, value).
#[derive(Debug, Default, Clone, Copy)]
pub struct Marks<'a> {
    pub label: Option<(&'a str, &'a str)>,
    pub annotation: Option<(&'a str, &'a str)>,
}

/// Whether a finalizer change changed the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    Yes,
    AlreadySo,
}

/// How many objects a page of a list holds.
pub const LIST_PAGE: u32 = 500;

/// A metadata list in JSON, as far as the collector reads it.
#[derive(Debug, Deserialize)]
struct JsonList {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default, deserialize_with = "null_is_empty")]
    items: Vec<Item>,
}

/// A metadata list being read: in protobuf, decoded a chunk at a time as it arrives; in JSON
/// (servers that cannot encode it in protobuf), at once when it has all arrived.
pub struct MetaList {
    body: kube::client::Body,
    decoder: Option<ListDecoder>,
    /// A JSON answer so far.
    json: Option<Vec<u8>>,
    /// A JSON answer's list metadata, once read.
    json_list: Option<proto::ListMeta>,
}

impl MetaList {
    /// Sends the metadata list `request`, asking for protobuf.
    pub async fn send(
        client: &Client,
        mut request: http::Request<Vec<u8>>,
    ) -> Result<Self, kube::Error> {
        request.headers_mut().insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static(proto::ACCEPT),
        );
        let response = client.send(request.map(kube::client::Body::from)).await?;
        let status = response.status();
        let protobuf = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(proto::CONTENT_TYPE));
        let body = response.into_body();
        if status.is_client_error() || status.is_server_error() {
            let bytes = http_body_util::BodyExt::collect(body).await?.to_bytes();
            let status =
                serde_json::from_slice::<kube::core::Status>(&bytes).unwrap_or_else(|_| {
                    let text = String::from_utf8_lossy(&bytes);
                    kube::core::Status::failure(text.trim(), "Failed to parse error data")
                        .with_code(status.as_u16())
                });
            return Err(kube::Error::Api(status.boxed()));
        }
        Ok(Self {
            body,
            decoder: protobuf.then(ListDecoder::default),
            json: (!protobuf).then(Vec::new),
            json_list: None,
        })
    }

    /// The next objects, `None` once the list is read.
    pub async fn next(&mut self) -> Result<Option<Vec<Meta>>, kube::Error> {
        loop {
            let Some(frame) = http_body_util::BodyExt::frame(&mut self.body).await else {
                let Some(json) = self.json.take() else {
                    return Ok(None);
                };
                let (list, objects) = json_list(&json).map_err(kube::Error::SerdeError)?;
                self.json_list = Some(list);
                return Ok(Some(objects));
            };
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            if let Some(json) = &mut self.json {
                json.extend_from_slice(&data);
            } else if let Some(decoder) = &mut self.decoder {
                let objects = decoder
                    .feed(&data)
                    .map_err(|e| kube::Error::ReadEvents(std::io::Error::other(e)))?;
                if !objects.is_empty() {
                    return Ok(Some(objects));
                }
            }
        }
    }

    /// Once [`MetaList::next`] has said the list is read: its resourceVersion and continue
    /// token.
    pub fn finish(self) -> Result<proto::ListMeta, kube::Error> {
        let malformed = |e| kube::Error::ReadEvents(std::io::Error::other(e));
        match (self.decoder, self.json_list) {
            (Some(decoder), _) => decoder.finish().map_err(malformed),
            (None, Some(list)) => Ok(list),
            (None, None) => Err(malformed(proto::Malformed(
                "the list was not read to its end",
            ))),
        }
    }
}

/// A metadata list in JSON: its resourceVersion and continue token, and its objects.
fn json_list(json: &[u8]) -> Result<(proto::ListMeta, Vec<Meta>), serde_json::Error> {
    let page: JsonList = serde_json::from_slice(json)?;
    let list = proto::ListMeta {
        resource_version: page.metadata.resource_version,
        continue_: page.metadata.continue_.filter(|c| !c.is_empty()),
    };
    Ok((list, page.items.into_iter().map(|i| i.metadata).collect()))
}

/// A list that is `null` (as an empty list's `items` is) or absent is empty.
pub fn null_is_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// Attempts at a read-modify-write before giving up on a busy object.
const ATTEMPTS: usize = 5;

/// The longest note an Event may carry.
const MAX_NOTE: usize = 1024;

/// The controller named in syncgc's Events.
pub const EVENT_REPORTER: &str = "syncgc";

/// Single-object calls with preconditions, rate limit, timeouts and error counts, and Events.
#[derive(Clone)]
pub struct Cluster {
    client: Client,
    limiter: Option<Arc<RateLimiter>>,
    timeout: Duration,
    metrics: Metrics,
    recorder: Recorder,
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
            client,
            limiter,
            timeout,
            metrics,
            recorder,
        }
    }

    /// The client, for the streams this seam does not wrap (the watches and discovery, which
    /// hold their connections and read without a rate limit).
    pub fn streams(&self) -> &Client {
        &self.client
    }

    /// The apiserver's version (see [`server_version`]).
    pub async fn server_version(&self) -> Result<String, ApiError> {
        server_version(&self.client).await
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

    /// Every object of `collection` (see [`Target::collection`]), read consistently (from
    /// etcd, not the apiserver's watch cache), metadata only, a page at a time; each page's
    /// objects go to `each`.
    pub async fn list_metadata(
        &self,
        collection: &Target,
        mut each: impl FnMut(Vec<Meta>),
    ) -> Result<(), ApiError> {
        let request = kube::core::Request::new(collection.resource_url());
        let mut params = ListParams::default().limit(LIST_PAGE);
        loop {
            let request = request
                .list_metadata(&params)
                .map_err(kube::Error::BuildRequest);
            let list = self
                .call(Verb::List, collection, async {
                    let mut list = MetaList::send(&self.client, request?).await?;
                    while let Some(objects) = list.next().await? {
                        each(objects);
                    }
                    list.finish()
                })
                .await?;
            match list.continue_ {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
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
        let request = kube::core::Request::new(target.resource_url())
            .delete(&target.name, &params)
            .map_err(|err| ApiError::Call {
                verb: Verb::Delete,
                target: target.to_string(),
                source: kube::Error::BuildRequest(err),
            })?;
        match self
            .call(Verb::Delete, target, self.client.request_text(request))
            .await
        {
            Ok(_) => Ok(true),
            Err(err) if err.status() == Some(404) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Merges `patch` into `target`'s metadata.
    pub async fn merge_metadata(&self, target: &Target, patch: &Value) -> Result<(), ApiError> {
        let api = self.api(target);
        self.call(
            Verb::Patch,
            target,
            api.patch_metadata(&target.name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
        .map(drop)
    }

    /// Applies a JSON patch (RFC 6902) to `target`.
    pub async fn json_patch(&self, target: &Target, patch: &JsonPatch) -> Result<(), ApiError> {
        let url = format!("{}/{}", target.resource_url(), target.name);
        let body = serde_json::to_vec(patch).unwrap_or_default();
        let request = http::Request::patch(url)
            .header(http::header::CONTENT_TYPE, "application/json-patch+json")
            .body(body)
            .map_err(|err| ApiError::Call {
                verb: Verb::Patch,
                target: target.to_string(),
                source: kube::Error::HttpError(err),
            })?;
        self.call(Verb::Patch, target, self.client.request_text(request))
            .await
            .map(drop)
    }

    /// Adds `finalizer` to `target`, leaving its other finalizers alone: reads the object,
    /// checks its uid, and patches the finalizer list with the read `resourceVersion` as a
    /// precondition, retrying when someone else changed the object in between.
    pub async fn add_finalizer(
        &self,
        target: &Target,
        finalizer: &str,
    ) -> Result<Changed, ApiError> {
        self.add_finalizer_with(target, finalizer, Marks::default())
            .await
    }

    /// [`Self::add_finalizer`], setting `marks` in the same write; `AlreadySo` only when the
    /// finalizer and the label are both there.
    pub async fn add_finalizer_with(
        &self,
        target: &Target,
        finalizer: &str,
        marks: Marks<'_>,
    ) -> Result<Changed, ApiError> {
        for _ in 0..ATTEMPTS {
            let Some(meta) = self.get_metadata(target).await? else {
                return Err(ApiError::Replaced(target.to_string(), target.uid.clone()));
            };
            if meta.deletion_timestamp.is_some() {
                return Err(ApiError::Terminating(target.to_string()));
            }
            let mut finalizers = meta.finalizers.unwrap_or_default();
            let has_finalizer = finalizers.iter().any(|f| f == finalizer);
            let has_label = marks.label.is_none_or(|(key, value)| {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(key))
                    .map(String::as_str)
                    == Some(value)
            });
            if has_finalizer && has_label {
                return Ok(Changed::AlreadySo);
            }
            if !has_finalizer {
                finalizers.push(finalizer.to_owned());
            }
            let mut patch = serde_json::json!({
                "metadata": { "resourceVersion": meta.resource_version, "finalizers": finalizers }
            });
            if let Some((key, value)) = marks.label {
                patch["metadata"]["labels"] = serde_json::json!({ key: value });
            }
            if let Some((key, value)) = marks.annotation {
                patch["metadata"]["annotations"] = serde_json::json!({ key: value });
            }
            match self.merge_metadata(target, &patch).await {
                Ok(()) => return Ok(Changed::Yes),
                Err(err) if err.status() == Some(409) => continue,
                Err(err) => return Err(err),
            }
        }
        Err(ApiError::Conflict(target.to_string()))
    }

    /// Arms the opted-in object `target`: the synchronous finalizer and the armed label.
    pub async fn arm(&self, target: &Target) -> Result<Changed, ApiError> {
        let marks = Marks {
            label: Some((ARMED_LABEL, "true")),
            annotation: None,
        };
        self.add_finalizer_with(target, SYNCHRONOUS_FINALIZER, marks)
            .await
    }

    /// Disarms `target`, the inverse of [`Self::arm`]: removes the synchronous finalizer and
    /// the armed label with a JSON patch whose `test` ops check the uid and each value where
    /// it was read, so nothing else is ever removed; retries when the object changed in
    /// between. Leaves the opt-in annotation alone.
    pub async fn disarm(&self, target: &Target) -> Result<Changed, ApiError> {
        for _ in 0..ATTEMPTS {
            let Some(meta) = self.get_metadata(target).await? else {
                return Ok(Changed::AlreadySo);
            };
            let mut patch = vec![test(
                PointerBuf::from_tokens(["metadata", "uid"]),
                &target.uid,
            )];
            let finalizers = meta.finalizers.unwrap_or_default();
            if let Some(index) = finalizers.iter().position(|f| f == SYNCHRONOUS_FINALIZER) {
                let path = PointerBuf::from_tokens(["metadata", "finalizers", &index.to_string()]);
                patch.push(test(path.clone(), SYNCHRONOUS_FINALIZER));
                patch.push(PatchOperation::Remove(RemoveOperation { path }));
            }
            if let Some(value) = meta.labels.as_ref().and_then(|l| l.get(ARMED_LABEL)) {
                let path = PointerBuf::from_tokens(["metadata", "labels", ARMED_LABEL]);
                patch.push(test(path.clone(), value));
                patch.push(PatchOperation::Remove(RemoveOperation { path }));
            }
            if patch.len() == 1 {
                return Ok(Changed::AlreadySo);
            }
            match self.json_patch(target, &JsonPatch(patch)).await {
                Ok(()) => return Ok(Changed::Yes),
                Err(err) if matches!(err.status(), Some(409 | 422)) => continue,
                Err(err) if err.status() == Some(404) => return Ok(Changed::AlreadySo),
                Err(err) => return Err(err),
            }
        }
        Err(ApiError::Conflict(target.to_string()))
    }

    /// Removes `finalizer` from `target` with a JSON patch whose `test` ops check the uid and
    /// that the finalizer is still where it was read, so no other finalizer is ever removed;
    /// retries when the list changed in between. The first try is at index `at`, where a
    /// watch last saw it, without a read; later ones read where it is.
    pub async fn remove_finalizer(
        &self,
        target: &Target,
        finalizer: &str,
        mut at: Option<usize>,
    ) -> Result<Changed, ApiError> {
        for _ in 0..ATTEMPTS {
            let index = match at.take() {
                Some(index) => index,
                None => {
                    let Some(meta) = self.get_metadata(target).await? else {
                        return Ok(Changed::AlreadySo);
                    };
                    let finalizers = meta.finalizers.unwrap_or_default();
                    let Some(index) = finalizers.iter().position(|f| f == finalizer) else {
                        return Ok(Changed::AlreadySo);
                    };
                    index
                }
            };
            let path = PointerBuf::from_tokens(["metadata", "finalizers", &index.to_string()]);
            let patch = JsonPatch(vec![
                test(PointerBuf::from_tokens(["metadata", "uid"]), &target.uid),
                test(path.clone(), finalizer),
                PatchOperation::Remove(RemoveOperation { path }),
            ]);
            match self.json_patch(target, &patch).await {
                Ok(()) => return Ok(Changed::Yes),
                Err(err) if matches!(err.status(), Some(409 | 422)) => continue,
                Err(err) if err.status() == Some(404) => return Ok(Changed::AlreadySo),
                Err(err) => return Err(err),
            }
        }
        Err(ApiError::Conflict(target.to_string()))
    }

    /// Removes from `target` the ownerReferences to the owners in `owners` (by uid).
    pub async fn remove_owner_references(
        &self,
        target: &Target,
        references: &[OwnerReference],
        owners: &[String],
    ) -> Result<(), ApiError> {
        self.patch_owner_references(
            target,
            references,
            |r| owners.contains(&r.uid),
            |path| PatchOperation::Remove(RemoveOperation { path }),
        )
        .await
    }

    /// Makes `target`'s blocking ownerReferences to the owners in `owners` (by uid)
    /// non-blocking.
    pub async fn unblock_owner_references(
        &self,
        target: &Target,
        references: &[OwnerReference],
        owners: &[String],
    ) -> Result<(), ApiError> {
        self.patch_owner_references(
            target,
            references,
            |r| owners.contains(&r.uid) && r.block_owner_deletion == Some(true),
            |path| {
                PatchOperation::Replace(ReplaceOperation {
                    path: path.with_trailing_token("blockOwnerDeletion"),
                    value: Value::Bool(false),
                })
            },
        )
        .await
    }

    /// Applies `change` to each of `target`'s ownerReferences (as read in `references`) that
    /// `pick` selects, in one JSON patch whose `test` ops check the object's uid and that each
    /// reference is still at the index it was read at; last index first, so removals do not
    /// shift the ones still to come. Nothing selected: no call.
    async fn patch_owner_references(
        &self,
        target: &Target,
        references: &[OwnerReference],
        pick: impl Fn(&OwnerReference) -> bool,
        change: impl Fn(PointerBuf) -> PatchOperation,
    ) -> Result<(), ApiError> {
        let mut ops = vec![test(
            PointerBuf::from_tokens(["metadata", "uid"]),
            &target.uid,
        )];
        for (index, reference) in references.iter().enumerate().rev() {
            if pick(reference) {
                let path =
                    PointerBuf::from_tokens(["metadata", "ownerReferences", &index.to_string()]);
                ops.push(test(path.with_trailing_token("uid"), &reference.uid));
                ops.push(change(path));
            }
        }
        if ops.len() == 1 {
            return Ok(());
        }
        self.json_patch(target, &JsonPatch(ops)).await
    }
}

impl Cluster {
    /// Records an Event about `regarding` (through the rate limit, with the timeout, counted
    /// like every call). Events are advisory: a failure is logged, never returned. Events of
    /// one object with the same reason make one series, which keeps the first note; a note
    /// that says something new goes through [`Cluster::new_event`].
    pub async fn event(&self, regarding: &Target, type_: EventType, reason: Reason, note: String) {
        self.record(regarding, type_, reason, note, true).await;
    }

    /// [`Cluster::event`] as an Event of its own, whatever came before: for a note that tells
    /// the next step of the same thing (a wave that starts, what the release barrier waits for).
    pub async fn new_event(
        &self,
        regarding: &Target,
        type_: EventType,
        reason: Reason,
        note: String,
    ) {
        self.record(regarding, type_, reason, note, false).await;
    }

    async fn record(
        &self,
        regarding: &Target,
        type_: EventType,
        reason: Reason,
        mut note: String,
        series: bool,
    ) {
        // The apiserver refuses notes over 1 kB.
        if note.len() > MAX_NOTE {
            let mut end = MAX_NOTE - 3;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
            note.push_str("...");
        }
        let reference = ObjectReference {
            api_version: Some(regarding.resource.api_version.clone()),
            kind: Some(regarding.resource.kind.clone()),
            name: Some(regarding.name.clone()),
            namespace: regarding.namespace.clone(),
            uid: Some(regarding.uid.clone()),
            resource_version: None,
            field_path: None,
        };
        let event = Event {
            type_,
            reason: reason.as_str().to_owned(),
            note: Some(note),
            action: reason.action().to_owned(),
            secondary: None,
        };
        let published = if series && reference.namespace.is_some() {
            self.call(
                Verb::Create,
                regarding,
                self.recorder.publish(&event, &reference),
            )
            .await
        } else {
            self.call(Verb::Create, regarding, self.create_event(event, reference))
                .await
        };
        if let Err(err) = published {
            tracing::debug!(%err, %reason, "could not record an event");
        }
    }

    /// An Event of its own, in the namespace of the object it is about; for a cluster-scoped
    /// object in `kube-system`: the events.k8s.io API of Kubernetes before 1.22 only takes
    /// those there, where the recorder does not put them.
    async fn create_event(
        &self,
        event: Event,
        regarding: ObjectReference,
    ) -> Result<(), kube::Error> {
        use k8s_openapi::api::events::v1::Event as K8sEvent;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let now = jiff::Timestamp::now();
        let namespace = (regarding.namespace.clone()).unwrap_or_else(|| "kube-system".into());
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(EVENT_REPORTER),
            now.as_nanosecond()
        );
        let event = K8sEvent {
            action: Some(event.action),
            reason: Some(event.reason),
            note: event.note,
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            metadata: ObjectMeta {
                name: Some(name),
                ..Default::default()
            },
            reporting_controller: Some(EVENT_REPORTER.to_owned()),
            reporting_instance: Some(
                std::env::var("POD_NAME").unwrap_or_else(|_| EVENT_REPORTER.to_owned()),
            ),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            ..Default::default()
        };
        Api::<K8sEvent>::namespaced(self.client.clone(), &namespace)
            .create(&Default::default(), &event)
            .await
            .map(drop)
    }
}

fn test(path: PointerBuf, value: &str) -> PatchOperation {
    PatchOperation::Test(TestOperation {
        path,
        value: Value::from(value),
    })
}

// The leader Lease's calls, kept together at the end of the file.
use kube::api::PostParams;

/// A typed object [`Cluster`] reads and writes whole.
pub trait Whole:
    kube::Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug
{
}

impl<K> Whole for K where
    K: kube::Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug
{
}

/// Objects syncgc reads and writes whole, each by name: its leader Lease (`get`, `create`,
/// `update`), and with `--manage-webhook` its MutatingWebhookConfiguration and the Secret of its
/// serving certificate. A replacement carries the resourceVersion the object was read with, so
/// it is a compare-and-swap (409 when someone wrote it in between).
impl Cluster {
    fn whole<K>(api: &Api<K>, name: &str) -> Target
    where
        K: kube::Resource<DynamicType = ()>,
    {
        Target {
            resource: ApiResource::erase::<K>(&()),
            namespace: api.namespace().map(str::to_owned),
            name: name.to_owned(),
            uid: String::new(),
        }
    }

    /// The object `name` of `api`, if it exists.
    pub async fn get_whole<K: Whole>(
        &self,
        api: &Api<K>,
        name: &str,
    ) -> Result<Option<K>, ApiError> {
        let target = Self::whole(api, name);
        self.call(Verb::Get, &target, api.get_opt(name)).await
    }

    /// Creates `object` (named by its metadata) with `api`.
    pub async fn create_whole<K: Whole>(&self, api: &Api<K>, object: &K) -> Result<K, ApiError> {
        let name = object.meta().name.as_deref().unwrap_or_default();
        let target = Self::whole(api, name);
        self.call(
            Verb::Create,
            &target,
            api.create(&PostParams::default(), object),
        )
        .await
    }

    /// What the apiserver would make of creating `object` with `api`, admission included
    /// (`dryRun=All`): nothing is stored.
    pub async fn create_whole_dry_run<K: Whole>(
        &self,
        api: &Api<K>,
        object: &K,
    ) -> Result<K, ApiError> {
        let name = object.meta().name.as_deref().unwrap_or_default();
        let target = Self::whole(api, name);
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        self.call(Verb::Create, &target, api.create(&params, object))
            .await
    }

    /// Merges `patch` (a JSON merge patch) into the object `name` of `api`.
    pub async fn merge_whole<K: Whole>(
        &self,
        api: &Api<K>,
        name: &str,
        patch: &Value,
    ) -> Result<K, ApiError> {
        let target = Self::whole(api, name);
        self.call(
            Verb::Patch,
            &target,
            api.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
    }

    /// The objects of `api` that `labels` (a label selector) selects.
    pub async fn list_whole<K: Whole>(
        &self,
        api: &Api<K>,
        labels: &str,
    ) -> Result<Vec<K>, ApiError> {
        let target = Self::whole(api, "");
        let params = ListParams::default().labels(labels);
        let list = self.call(Verb::List, &target, api.list(&params)).await?;
        Ok(list.items)
    }

    /// Deletes the object `name` of `api`; [`Changed::AlreadySo`] when there was none.
    pub async fn delete_whole<K: Whole>(
        &self,
        api: &Api<K>,
        name: &str,
    ) -> Result<Changed, ApiError> {
        let target = Self::whole(api, name);
        match self
            .call(
                Verb::Delete,
                &target,
                api.delete(name, &DeleteParams::default()),
            )
            .await
        {
            Ok(_) => Ok(Changed::Yes),
            Err(err) if err.status() == Some(404) => Ok(Changed::AlreadySo),
            Err(err) => Err(err),
        }
    }

    /// Replaces the object named by `object`'s metadata with `object`.
    pub async fn replace_whole<K: Whole>(&self, api: &Api<K>, object: &K) -> Result<K, ApiError> {
        let name = object.meta().name.as_deref().unwrap_or_default();
        let target = Self::whole(api, name);
        self.call(
            Verb::Update,
            &target,
            api.replace(name, &PostParams::default(), object),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_metadata_list_reads_as_the_protobuf_one() {
        let (list, objects) = json_list(
            br#"{"kind":"PartialObjectMetadataList","metadata":{"resourceVersion":"7","continue":""},
                "items":[{"metadata":{"name":"a","uid":"u"}},{"metadata":{}}]}"#,
        )
        .unwrap();
        assert_eq!(list.resource_version.as_deref(), Some("7"));
        assert_eq!(
            list.continue_, None,
            "an empty continue token ends the list"
        );
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].name, "a");
        let (list, objects) =
            json_list(br#"{"metadata":{"continue":"next"},"items":null}"#).unwrap();
        assert!(objects.is_empty(), "an empty list's items are null");
        assert_eq!(list.continue_.as_deref(), Some("next"));
    }
}
