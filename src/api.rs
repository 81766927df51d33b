//! The seam every Kubernetes call goes through: how syncgc connects to the apiserver.

use std::path::Path;

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

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
    #[error("reading {0}: {1}")]
    Get(String, #[source] kube::Error),
    #[error("patching {0}: {1}")]
    Patch(String, #[source] kube::Error),
    #[error("{0} is gone or was replaced (uid {1} no longer exists)")]
    Replaced(String, String),
    #[error("{0} is being deleted: no finalizer can be added")]
    Terminating(String),
    #[error("{0} kept changing under every attempt to patch it")]
    Conflict(String),
}

impl ApiError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Version(_) | Self::Conflict(_) => true,
            Self::Get(_, err) | Self::Patch(_, err) => retryable(err),
            Self::ReadKubeconfig { .. }
            | Self::InferConfig(_)
            | Self::Client(_)
            | Self::Replaced(..)
            | Self::Terminating(_) => false,
        }
    }
}

fn retryable(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => matches!(status.code, 409 | 429 | 500..=599),
        _ => true,
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

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.resource.kind, self.name),
            None => write!(f, "{} {}", self.resource.kind, self.name),
        }
    }
}

/// Whether [`add_finalizer`] changed the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    Added,
    AlreadyThere,
}

/// Adds `finalizer` to `target`, leaving its other finalizers alone: reads the object, checks
/// its uid, and patches the finalizer list with the read `resourceVersion` as a precondition,
/// retrying when someone else changed the object in between.
pub async fn add_finalizer(
    client: &Client,
    target: &Target,
    finalizer: &str,
) -> Result<Added, ApiError> {
    const ATTEMPTS: usize = 5;
    let api: Api<DynamicObject> = match &target.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &target.resource),
        None => Api::all_with(client.clone(), &target.resource),
    };
    for _ in 0..ATTEMPTS {
        let meta = match api.get_metadata_opt(&target.name).await {
            Ok(Some(object)) => object.metadata,
            Ok(None) => return Err(ApiError::Replaced(target.to_string(), target.uid.clone())),
            Err(err) => return Err(ApiError::Get(target.to_string(), err)),
        };
        if meta.uid.as_deref() != Some(target.uid.as_str()) {
            return Err(ApiError::Replaced(target.to_string(), target.uid.clone()));
        }
        if meta.deletion_timestamp.is_some() {
            return Err(ApiError::Terminating(target.to_string()));
        }
        let mut finalizers = meta.finalizers.unwrap_or_default();
        if finalizers.iter().any(|f| f == finalizer) {
            return Ok(Added::AlreadyThere);
        }
        finalizers.push(finalizer.to_owned());
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": meta.resource_version, "finalizers": finalizers }
        });
        match api
            .patch_metadata(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(Added::Added),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(err) => return Err(ApiError::Patch(target.to_string(), err)),
        }
    }
    Err(ApiError::Conflict(target.to_string()))
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
    install_crypto_provider();
    match kubeconfig {
        Some(path) => {
            let read_err = |source| ApiError::ReadKubeconfig {
                path: path.display().to_string(),
                source,
            };
            let file = Kubeconfig::read_from(path).map_err(read_err)?;
            Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(read_err)
        }
        None => Ok(Config::infer().await?),
    }
}

/// A client for `config`.
pub fn client(config: Config) -> Result<Client, ApiError> {
    Client::try_from(config).map_err(ApiError::Client)
}

/// Asks the apiserver for its version: the cheapest proof that it answers and trusts us.
pub async fn server_version(client: &Client) -> Result<String, ApiError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(ApiError::Version)?;
    Ok(info.git_version)
}
