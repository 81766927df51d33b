//! The seam every Kubernetes call goes through: how syncgc connects to the apiserver.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

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
}

impl ApiError {
    /// Whether trying again later may succeed (the apiserver may just not be up yet).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Version(_))
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
