//! What a call is about: one object by resource, name and uid ([`Target`]), and a DELETE's
//! propagation policy.

use kube::Resource;
use kube::api::{ApiResource, DynamicObject};

/// A DELETE's propagation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
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

    /// As a DELETE's `propagationPolicy` (and `syncgc.io/propagation`) spells it.
    pub fn policy(self) -> &'static str {
        match self {
            Self::Foreground => "Foreground",
            Self::Background => "Background",
            Self::Orphan => "Orphan",
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

/// How syncgc names an object to people, in logs, messages, Events and reports alike: `Kind
/// namespace/name`, or `Kind name` without a namespace (a cluster-scoped object).
pub fn described(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace.filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.namespace, self.name.is_empty()) {
            (Some(ns), true) => write!(f, "{} in {ns}", self.resource.plural),
            (None, true) => write!(f, "{}", self.resource.plural),
            (namespace, false) => f.write_str(&described(
                &self.resource.kind,
                namespace.as_deref(),
                &self.name,
            )),
        }
    }
}
