//! The words the commands print in (`syncgc plan`, `explain`, `check`, `disarm` and the
//! dry-run warning): an object's identity, a finalizer with who removes it, and how a report
//! is printed ([`Output`]). Each report is a typed struct whose `-o json` (and `-o yaml`) form
//! is a stable format (docs/commands.md): the serde names here are a contract. The tests of
//! each report compare the docs' console samples with what it prints (`samples`, a test module).

use serde::{Deserialize, Serialize};

#[cfg(test)]
pub(crate) mod samples;

use crate::names::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER, SYNCHRONOUS_FINALIZER};

/// One object, as a report names it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Object {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

/// Objects sort by kind, namespace and name.
impl PartialOrd for Object {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Object {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.kind, &self.namespace, &self.name).cmp(&(&other.kind, &other.namespace, &other.name))
    }
}

/// A finalizer, who removes it, and (a collector's, a handler's) what it waits for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Finalizer {
    pub name: String,
    pub removed_by: Remover,
    /// The dependents it waits for (a collector's finalizer), which stay, or the workload
    /// that handles it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits_for: Vec<Object>,
}

impl Finalizer {
    /// `name`, removed by whom [`Remover::of`] says, waiting for nothing named.
    pub fn of(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            removed_by: Remover::of(name),
            waits_for: Vec::new(),
        }
    }
}

/// Who removes a finalizer: syncgc, the garbage collector, the namespace controller, the
/// well-known finalizers of Kubernetes' own controllers, a workload that says it handles it,
/// or another controller. Printed (and serialized) as a phrase for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remover {
    Syncgc,
    ForegroundCollector,
    OrphanCollector,
    NamespaceController,
    PvcProtection,
    PvProtection,
    JobController,
    ServiceController,
    ApiExtensions,
    /// A workload annotated `syncgc.io/handles-finalizers`, which syncgc holds until then.
    Handler,
    /// In a namespace being deleted: nothing in the cluster says it removes it.
    Nothing,
    /// Another controller, not Kubernetes' garbage collector or syncgc.
    Other,
}

impl Remover {
    const ALL: [Self; 12] = [
        Self::Syncgc,
        Self::ForegroundCollector,
        Self::OrphanCollector,
        Self::NamespaceController,
        Self::PvcProtection,
        Self::PvProtection,
        Self::JobController,
        Self::ServiceController,
        Self::ApiExtensions,
        Self::Handler,
        Self::Nothing,
        Self::Other,
    ];

    /// Who removes `finalizer`, from its name alone.
    pub fn of(finalizer: &str) -> Self {
        match finalizer {
            SYNCHRONOUS_FINALIZER => Self::Syncgc,
            FOREGROUND_FINALIZER => Self::ForegroundCollector,
            ORPHAN_FINALIZER => Self::OrphanCollector,
            "kubernetes" => Self::NamespaceController,
            "kubernetes.io/pvc-protection" => Self::PvcProtection,
            "kubernetes.io/pv-protection" => Self::PvProtection,
            "batch.kubernetes.io/job-tracking" => Self::JobController,
            "service.kubernetes.io/load-balancer-cleanup" => Self::ServiceController,
            "customresourcecleanup.apiextensions.k8s.io" => Self::ApiExtensions,
            _ => Self::Other,
        }
    }

    /// Who removes `finalizer` of an object in a namespace being deleted, where a workload
    /// may say it `handled` it: Kubernetes' own controllers (or syncgc), the workload, or
    /// nothing.
    pub fn in_namespace(finalizer: &str, handled: bool) -> Self {
        match (handled, Self::of(finalizer)) {
            (true, _) => Self::Handler,
            (false, Self::Other) => Self::Nothing,
            (false, known) => known,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Syncgc => "syncgc, once every dependent is gone or the deadline passes",
            Self::ForegroundCollector => {
                "the garbage collector, once no dependent with blockOwnerDeletion is left"
            }
            Self::OrphanCollector => "the garbage collector, once the dependents are orphaned",
            Self::NamespaceController => "the namespace controller, once the namespace is empty",
            Self::PvcProtection => "the PVC protection controller, once no pod uses the claim",
            Self::PvProtection => {
                "the PV protection controller, once no claim is bound to the volume"
            }
            Self::JobController => "the Job controller, once it has counted the pod",
            Self::ServiceController => {
                "the service controller, once the cloud load balancer is deleted"
            }
            Self::ApiExtensions => {
                "the apiextensions controller, once every custom resource of the CRD is deleted"
            }
            Self::Handler => {
                "a workload that handles it (syncgc.io/handles-finalizers), held until then"
            }
            Self::Nothing => "nothing in the cluster says it removes it",
            Self::Other => "another controller (not Kubernetes' garbage collector or syncgc)",
        }
    }
}

impl std::fmt::Display for Remover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Remover {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A phrase of [`Remover::as_str`]; one it does not know (from another version) is another
/// controller's.
impl<'de> Deserialize<'de> for Remover {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let phrase = String::deserialize(deserializer)?;
        Ok(Self::ALL
            .into_iter()
            .find(|r| r.as_str() == phrase)
            .unwrap_or(Self::Other))
    }
}

/// How a command prints its report (`-o`): text for people, JSON or YAML for programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
    Yaml,
}

impl Output {
    /// A report whole: `text` of it for people, or the `report` made for programs as indented
    /// JSON or a YAML document. Only the form printed is made.
    pub fn whole<T: Serialize>(
        self,
        report: impl FnOnce() -> T,
        text: impl FnOnce() -> String,
    ) -> anyhow::Result<String> {
        Ok(match self {
            Self::Text => text(),
            Self::Json => serde_json::to_string_pretty(&report())? + "\n",
            Self::Yaml => serde_norway::to_string(&report())?,
        })
    }

    /// One step of a report that goes on (`--watch`): a line of `text`, a JSON object on one
    /// line, or a YAML document of its own (`---` first).
    pub fn step<T: Serialize>(
        self,
        report: impl FnOnce() -> T,
        text: impl FnOnce() -> String,
    ) -> anyhow::Result<String> {
        Ok(match self {
            Self::Text => text() + "\n",
            Self::Json => serde_json::to_string(&report())? + "\n",
            Self::Yaml => format!("---\n{}", serde_norway::to_string(&report())?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_prints_as_text_json_or_yaml_whole_or_a_step_at_a_time() {
        let report = serde_json::json!({"gone": true, "left": 2});
        let text = || "2 left".to_owned();
        assert_eq!(Output::Text.whole(|| &report, text).unwrap(), "2 left");
        assert_eq!(
            Output::Json.whole(|| &report, text).unwrap(),
            "{\n  \"gone\": true,\n  \"left\": 2\n}\n"
        );
        assert_eq!(
            Output::Yaml.whole(|| &report, text).unwrap(),
            "gone: true\nleft: 2\n"
        );
        assert_eq!(Output::Text.step(|| &report, text).unwrap(), "2 left\n");
        assert_eq!(
            Output::Json.step(|| &report, text).unwrap(),
            "{\"gone\":true,\"left\":2}\n"
        );
        assert_eq!(
            Output::Yaml.step(|| &report, text).unwrap(),
            "---\ngone: true\nleft: 2\n"
        );
    }

    #[test]
    fn a_finalizer_nobody_names_is_another_controller_s_and_in_a_namespace_nobody_s() {
        assert_eq!(Remover::of("example.com/x"), Remover::Other);
        assert_eq!(
            Remover::in_namespace("example.com/x", false),
            Remover::Nothing
        );
        assert_eq!(
            Remover::in_namespace("example.com/x", true),
            Remover::Handler
        );
        assert_eq!(
            Remover::in_namespace("kubernetes", false),
            Remover::NamespaceController
        );
        assert_eq!(
            serde_json::to_value(Finalizer::of(ORPHAN_FINALIZER)).unwrap(),
            serde_json::json!({
                "name": "orphan",
                "removedBy": "the garbage collector, once the dependents are orphaned",
            })
        );
    }
}
