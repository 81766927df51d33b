//! What a call through the seam can fail with ([`ApiError`]), and the kind of call ([`Verb`]).

use std::time::Duration;

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
    #[error("{0} does not bear out what the request said of it ({1}): nothing was written")]
    Unconfirmed(String, String),
    #[error("DELETE {target}: not sent, a guard holds it: {message}")]
    Held { target: String, message: String },
    #[error("{0} kept changing under every attempt to patch it")]
    Conflict(String),
    #[error("{verb} {target}: not sent, this replica's leader lease may have passed")]
    NotLeading { verb: Verb, target: String },
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
            | Self::NotLeading { .. }
            | Self::Held { .. }
            | Self::UnknownKind { .. } => true,
            Self::Call { source, .. } => match source {
                kube::Error::Api(status) => matches!(status.code, 409 | 422 | 429 | 500..=599),
                _ => true,
            },
            Self::ReadKubeconfig { .. }
            | Self::InferConfig(_)
            | Self::Client(_)
            | Self::Replaced(..)
            | Self::Unconfirmed(..)
            | Self::Terminating(_) => false,
        }
    }

    /// Why a call failed, for metrics: a closed set of names.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Timeout { .. } => "timeout",
            Self::Conflict(_) => "conflict",
            Self::NotLeading { .. } => "not_leading",
            Self::Held { .. } => "held",
            Self::UnknownKind { .. } => "unknown_kind",
            Self::Replaced(..) => "replaced",
            Self::Terminating(_) => "terminating",
            Self::Unconfirmed(..) => "unconfirmed",
            Self::ReadKubeconfig { .. } | Self::InferConfig(_) | Self::Client(_) => "config",
            Self::Version(_) | Self::Call { .. } => match self.status() {
                Some(404) => "not_found",
                Some(403 | 401) => "forbidden",
                Some(409) => "conflict",
                _ if self.is_invalid() => "invalid",
                Some(429) => "throttled",
                Some(500..=599) => "server_error",
                Some(_) => "other",
                None => "unreachable",
            },
        }
    }

    /// Whether the apiserver refused the request as it is (400, 413, 422): sent again
    /// unchanged, it fails again.
    pub fn is_invalid(&self) -> bool {
        matches!(self.status(), Some(400 | 413 | 422))
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
    /// Whether a call of this kind changes something.
    pub fn writes(self) -> bool {
        matches!(
            self,
            Self::Patch | Self::Delete | Self::Create | Self::Update
        )
    }

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

/// Whether the apiserver's answer says a named object is missing, rather than the path (an API
/// not served, not registered, or with no such resource).
pub fn names_missing_object(status: &kube::core::Status) -> bool {
    status.code == 404 && status.details.as_ref().is_some_and(|d| !d.name.is_empty())
}
