//! `syncgc explain namespace/NAME`: why a namespace stays Terminating. The namespace
//! controller deletes what the namespace holds and removes its `kubernetes` finalizer once
//! nothing is left; it says what stops it in the namespace's conditions. The report puts
//! beside them what remains, by kind, with each object's finalizers and who is expected to
//! remove them; the API groups discovery could not list, with the APIService behind each (an
//! unavailable APIService keeps every namespace Terminating for good: the controller cannot
//! know that nothing of that group is left); and what syncgc itself holds there. [`report`] is
//! pure; [`gather`] reads the namespace's contents as `syncgc plan` reads a scope
//! ([`Snapshot`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::{Deserialize, Serialize};

use super::Ending;
use crate::api::Cluster;
use crate::api::meta::Meta;
use crate::gc::discovery::{self, Resources};
use crate::gc::snapshot::Snapshot;
use crate::names::{DEADLINE_ANNOTATION, PROTECTED_ANNOTATION, SYNCHRONOUS_FINALIZER};
use crate::report::Finalizer;
use crate::report::Output;

/// Objects shown of each kind that remains; the rest are counted.
const SHOWN: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// An object left in the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Left {
    pub name: String,
    pub deleting: bool,
    pub finalizers: Vec<Finalizer>,
}

/// The objects of one kind left in the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remaining {
    pub api_version: String,
    pub kind: String,
    pub count: usize,
    /// The first [`SHOWN`] of them, those with finalizers first.
    pub objects: Vec<Left>,
}

/// An APIService and whether it is available.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Service {
    pub name: String,
    pub available: bool,
    pub message: String,
}

/// What could not be listed: an API group whose discovery failed, or a resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListFailure {
    pub what: String,
    pub error: String,
    /// The APIServices of its group.
    pub api_services: Vec<Service>,
}

/// An armed object syncgc holds in the namespace, being deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldBySyncgc {
    pub kind: String,
    pub name: String,
    pub deadline: Option<String>,
}

/// A protected object in the namespace, not being deleted: while the namespace is being
/// deleted, syncgc refuses its DELETE for a bounded time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protected {
    pub kind: String,
    pub name: String,
}

/// The report on a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceReport {
    pub namespace: String,
    pub phase: String,
    pub deletion_timestamp: Option<String>,
    pub conditions: Vec<NamespaceCondition>,
    pub finalizers: Vec<Finalizer>,
    pub remaining: Vec<Remaining>,
    pub unlisted: Vec<ListFailure>,
    pub syncgc: Vec<HeldBySyncgc>,
    pub protected: Vec<Protected>,
    /// Being deleted and still there.
    pub blocked: bool,
}

/// What [`gather`] reads.
pub struct NamespaceGathered {
    pub namespace: Namespace,
    /// Each kind's objects left, by (apiVersion, kind).
    pub objects: BTreeMap<(String, String), Vec<Meta>>,
    /// Resources that could not be listed, with why.
    pub unlisted: Vec<(String, String)>,
    /// Groups whose discovery failed.
    pub failed: Vec<String>,
    pub api_services: Vec<APIService>,
}

/// The report on what [`gather`] read.
pub fn report(gathered: &NamespaceGathered) -> NamespaceReport {
    let namespace = &gathered.namespace;
    let status = namespace.status.as_ref();
    let conditions = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.status != "False")
        .map(|c| NamespaceCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        })
        .collect();
    let finalizers = namespace
        .spec
        .as_ref()
        .and_then(|s| s.finalizers.as_ref())
        .into_iter()
        .flatten()
        .map(|f| Finalizer::of(f))
        .collect();
    let mut remaining = Vec::new();
    let mut syncgc = Vec::new();
    let mut protected = Vec::new();
    for ((api_version, kind), objects) in &gathered.objects {
        if objects.is_empty() {
            continue;
        }
        let mut left: Vec<Left> = objects
            .iter()
            .map(|meta| Left {
                name: meta.name.clone(),
                deleting: meta.deletion_timestamp.is_some(),
                finalizers: meta.finalizers.iter().map(|f| Finalizer::of(f)).collect(),
            })
            .collect();
        left.sort_by(|a, b| {
            (a.finalizers.is_empty(), &a.name).cmp(&(b.finalizers.is_empty(), &b.name))
        });
        left.truncate(SHOWN);
        remaining.push(Remaining {
            api_version: api_version.clone(),
            kind: kind.clone(),
            count: objects.len(),
            objects: left,
        });
        for meta in objects.iter().filter(|m| {
            m.deletion_timestamp.is_some()
                && m.finalizers.iter().any(|f| f == SYNCHRONOUS_FINALIZER)
        }) {
            syncgc.push(HeldBySyncgc {
                kind: kind.clone(),
                name: meta.name.clone(),
                deadline: meta.annotations.get(DEADLINE_ANNOTATION).map(str::to_owned),
            });
        }
        for meta in objects.iter().filter(|m| {
            m.deletion_timestamp.is_none()
                && crate::graph::protects(m.annotations.get(PROTECTED_ANNOTATION))
        }) {
            protected.push(Protected {
                kind: kind.clone(),
                name: meta.name.clone(),
            });
        }
    }
    let services = |group: &str| -> Vec<Service> {
        gathered
            .api_services
            .iter()
            .filter(|s| s.spec.as_ref().and_then(|s| s.group.as_deref()) == Some(group))
            .map(|s| {
                let available = s
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .find(|c| c.type_ == "Available");
                Service {
                    name: s.metadata.name.clone().unwrap_or_default(),
                    available: available.is_some_and(|c| c.status == "True"),
                    message: available
                        .and_then(|c| c.message.clone().or_else(|| c.reason.clone()))
                        .unwrap_or_default(),
                }
            })
            .collect()
    };
    let mut unlisted: Vec<ListFailure> = gathered
        .failed
        .iter()
        .map(|group| ListFailure {
            what: format!("the API group {group}"),
            error: "its discovery failed".to_owned(),
            api_services: services(group),
        })
        .collect();
    unlisted.extend(gathered.unlisted.iter().map(|(what, error)| ListFailure {
        what: what.clone(),
        error: error.clone(),
        api_services: Vec::new(),
    }));
    let deleting = namespace.metadata.deletion_timestamp.as_ref();
    NamespaceReport {
        namespace: namespace.metadata.name.clone().unwrap_or_default(),
        phase: status.and_then(|s| s.phase.clone()).unwrap_or_default(),
        deletion_timestamp: deleting.map(|t| t.0.to_string()),
        conditions,
        finalizers,
        remaining,
        unlisted,
        syncgc,
        protected,
        blocked: deleting.is_some(),
    }
}

impl NamespaceReport {
    /// The report for people.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = write!(out, "namespace {}: {}", self.namespace, self.phase);
        match &self.deletion_timestamp {
            Some(at) => {
                let _ = writeln!(out, ", being deleted since {at}");
            }
            None => {
                let _ = writeln!(out, ", not being deleted");
            }
        }
        if !self.conditions.is_empty() {
            let _ = writeln!(out, "  conditions:");
            for c in &self.conditions {
                let _ = writeln!(out, "    {} ({}): {}", c.type_, c.reason, c.message);
            }
        }
        for f in &self.finalizers {
            let _ = writeln!(out, "  finalizer {}: removed by {}", f.name, f.removed_by);
        }
        let left: usize = self.remaining.iter().map(|r| r.count).sum();
        if left == 0 {
            let _ = writeln!(out, "  nothing left in it");
        } else {
            let _ = writeln!(out, "  left in it: {left} object(s)");
        }
        for kind in &self.remaining {
            let _ = writeln!(
                out,
                "    {} ({}): {}",
                kind.kind, kind.api_version, kind.count
            );
            for object in &kind.objects {
                let state = if object.deleting {
                    " (being deleted)"
                } else {
                    ""
                };
                let _ = write!(out, "      {}{state}", object.name);
                let finalizers: Vec<String> = object
                    .finalizers
                    .iter()
                    .map(|f| format!("{}, removed by {}", f.name, f.removed_by))
                    .collect();
                if !finalizers.is_empty() {
                    let _ = write!(out, ": finalizers {}", finalizers.join("; "));
                }
                out.push('\n');
            }
            if kind.count > kind.objects.len() {
                let _ = writeln!(out, "      … and {} more", kind.count - kind.objects.len());
            }
        }
        for unlisted in &self.unlisted {
            let _ = writeln!(
                out,
                "  could not list {} ({}): the namespace controller cannot finish while it cannot",
                unlisted.what, unlisted.error
            );
            for service in &unlisted.api_services {
                let _ = writeln!(
                    out,
                    "    APIService {}: {}{}",
                    service.name,
                    if service.available {
                        "available"
                    } else {
                        "NOT available"
                    },
                    if service.message.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", service.message)
                    }
                );
            }
            if unlisted.api_services.iter().any(|s| !s.available) {
                let _ = writeln!(
                    out,
                    "    bring its service back, or delete the APIService if nothing serves it any more"
                );
            }
        }
        for held in &self.syncgc {
            let _ = writeln!(
                out,
                "  syncgc holds {} {} until its dependents are gone{}",
                held.kind,
                held.name,
                held.deadline
                    .as_ref()
                    .map(|d| format!(", at the latest until {d}"))
                    .unwrap_or_default()
            );
        }
        if self.deletion_timestamp.is_some() {
            for object in &self.protected {
                let _ = writeln!(
                    out,
                    "  syncgc refuses the DELETE of {} {} (syncgc.io/protected) for a bounded time \
                     (the SyncGCProtectedHoldsNamespace Event in kube-system says until when), \
                     then it goes with the namespace; remove the annotation to let it go now",
                    object.kind, object.name
                );
            }
        }
        if self.blocked {
            let _ = writeln!(out, "blocked: it stays until all of the above is gone");
        }
        out
    }

    /// One line on where the deletion stands, for `--watch`.
    pub fn progress(&self) -> String {
        let left: usize = self.remaining.iter().map(|r| r.count).sum();
        let with_finalizers: usize = self
            .remaining
            .iter()
            .flat_map(|r| &r.objects)
            .filter(|o| !o.finalizers.is_empty())
            .count();
        let mut line = format!(
            "namespace {}: {}; {left} object(s) left in {} kind(s), {with_finalizers} with finalizers",
            self.namespace,
            self.phase,
            self.remaining.len()
        );
        if !self.unlisted.is_empty() {
            let what: Vec<&str> = self.unlisted.iter().map(|u| u.what.as_str()).collect();
            let _ = write!(line, "; could not list {}", what.join(", "));
        }
        line
    }
}

/// Reads the namespace `name`, what is left in it (every resource of `table`), and the
/// APIServices; `None` once it is gone.
pub async fn gather(
    cluster: &Cluster,
    name: &str,
    table: &Resources,
) -> anyhow::Result<Option<NamespaceGathered>> {
    let Some(namespace) = cluster.get_whole(&cluster.all::<Namespace>(), name).await? else {
        return Ok(None);
    };
    let snapshot = Snapshot::read(cluster, table, Some(name)).await;
    let mut objects: BTreeMap<(String, String), Vec<Meta>> = BTreeMap::new();
    for (id, meta) in snapshot.objects.into_values() {
        if let Some(resource) = table.get(id) {
            let key = (resource.api.api_version.clone(), resource.api.kind.clone());
            objects.entry(key).or_default().push(meta);
        }
    }
    let unlisted = snapshot
        .unlisted
        .into_iter()
        .map(|u| (u.resource, u.error))
        .collect();
    let failed: Vec<String> = table.failed_groups().iter().cloned().collect();
    let api_services = if failed.is_empty() {
        Vec::new()
    } else {
        cluster
            .list_whole(&cluster.all::<APIService>(), "")
            .await
            .unwrap_or_default()
    };
    Ok(Some(NamespaceGathered {
        namespace,
        objects,
        unlisted,
        failed,
        api_services,
    }))
}

/// How often `--watch` reads the namespace, and at most how long it keeps the same contents.
const WATCH_INTERVAL: Duration = Duration::from_secs(2);
const RELIST_INTERVAL: Duration = Duration::from_secs(15);

/// `syncgc explain namespace/NAME`: the report, or with `watch` a line each time where its
/// deletion stands changes, until it is gone. Reading what is left takes a list per kind:
/// `--watch` reads it again when the namespace changes (the namespace controller writes its
/// conditions on each pass) and at least every 15 s, and the namespace every 2 s.
pub async fn explain(
    cluster: &Cluster,
    name: &str,
    table: &Resources,
    output: Output,
    watch: bool,
) -> anyhow::Result<Ending> {
    let Some(mut gathered) = gather(cluster, name, table).await? else {
        anyhow::bail!("namespace {name} not found");
    };
    if !watch {
        let report = report(&gathered);
        print!("{}", output.whole(|| &report, || report.text())?);
        return Ok(if report.blocked {
            Ending::Blocked
        } else {
            Ending::Free
        });
    }
    let mut last = String::new();
    let mut listed = tokio::time::Instant::now();
    loop {
        let report = report(&gathered);
        let line = report.progress();
        if line != last {
            print!(
                "{}",
                output.step(|| &report, || format!("{} {line}", Timestamp::now()))?
            );
            last = line;
        }
        let version = gathered.namespace.metadata.resource_version.clone();
        loop {
            tokio::time::sleep(WATCH_INTERVAL).await;
            let namespace = cluster.get_whole(&cluster.all::<Namespace>(), name).await?;
            let Some(namespace) = namespace else {
                let now = Timestamp::now();
                let gone = || serde_json::json!({ "time": now.to_string(), "gone": true });
                print!(
                    "{}",
                    output.step(gone, || format!("{now} namespace {name}: gone"))?
                );
                return Ok(Ending::Free);
            };
            if namespace.metadata.resource_version != version || listed.elapsed() >= RELIST_INTERVAL
            {
                break;
            }
        }
        // Discovered again: a group that failed may answer now, or another fail.
        let mut table = Resources::default();
        table.update(discovery::discover(cluster.streams(), &[]).await?);
        match gather(cluster, name, &table).await? {
            Some(again) => gathered = again,
            None => continue,
        }
        listed = tokio::time::Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gathered(objects: serde_json::Value) -> NamespaceGathered {
        let namespace: Namespace = serde_json::from_value(json!({
            "metadata": { "name": "team-a", "deletionTimestamp": "2026-11-26T10:00:00Z" },
            "spec": { "finalizers": ["kubernetes"] },
            "status": { "phase": "Terminating", "conditions": [
                { "type": "NamespaceDeletionDiscoveryFailure", "status": "True",
                  "reason": "DiscoveryFailed", "message": "metrics.k8s.io/v1beta1: unavailable" },
                { "type": "NamespaceDeletionContentFailure", "status": "False",
                  "reason": "ContentDeleted", "message": "All content successfully deleted" },
                { "type": "NamespaceFinalizersRemaining", "status": "True",
                  "reason": "SomeFinalizersRemain", "message": "example.com/hold in 1 resource instances" }
            ] }
        }))
        .unwrap();
        let objects: Vec<Meta> = serde_json::from_value(objects).unwrap();
        let service: APIService = serde_json::from_value(json!({
            "metadata": { "name": "v1beta1.metrics.k8s.io" },
            "spec": { "group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100 },
            "status": { "conditions": [{ "type": "Available", "status": "False",
                "reason": "MissingEndpoints", "message": "endpoints for service/metrics-server have no addresses" }] }
        }))
        .unwrap();
        NamespaceGathered {
            namespace,
            objects: [(("v1".to_owned(), "ConfigMap".to_owned()), objects)].into(),
            unlisted: Vec::new(),
            failed: vec!["metrics.k8s.io".to_owned()],
            api_services: vec![service],
        }
    }

    #[test]
    fn a_terminating_namespace_says_what_is_left_who_holds_it_and_which_group_is_down() {
        let report = report(&gathered(json!([
            { "name": "plain" },
            { "name": "precious", "annotations": { PROTECTED_ANNOTATION: "true" } },
            { "name": "held", "deletionTimestamp": "2026-11-26T10:00:01Z",
              "finalizers": ["example.com/hold"] },
            { "name": "owner", "deletionTimestamp": "2026-11-26T10:00:01Z",
              "finalizers": [SYNCHRONOUS_FINALIZER],
              "annotations": { DEADLINE_ANNOTATION: "2026-11-26T10:01:01Z" } }
        ])));
        assert!(report.blocked);
        assert_eq!(report.phase, "Terminating");
        let types: Vec<&str> = report.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [
                "NamespaceDeletionDiscoveryFailure",
                "NamespaceFinalizersRemaining"
            ]
        );
        assert_eq!(
            report.finalizers[0].removed_by,
            crate::report::Remover::NamespaceController
        );
        let kind = &report.remaining[0];
        assert_eq!((kind.kind.as_str(), kind.count), ("ConfigMap", 4));
        let names: Vec<&str> = kind.objects.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            names,
            ["held", "owner", "plain", "precious"],
            "those with finalizers first"
        );
        assert_eq!(
            report.syncgc,
            [HeldBySyncgc {
                kind: "ConfigMap".into(),
                name: "owner".into(),
                deadline: Some("2026-11-26T10:01:01Z".into())
            }]
        );
        assert_eq!(
            report.unlisted[0].api_services[0].name,
            "v1beta1.metrics.k8s.io"
        );
        assert!(!report.unlisted[0].api_services[0].available);
        let text = report.text();
        for want in [
            "namespace team-a: Terminating, being deleted since",
            "NamespaceDeletionDiscoveryFailure (DiscoveryFailed): metrics.k8s.io/v1beta1",
            "finalizer kubernetes: removed by the namespace controller",
            "left in it: 4 object(s)",
            "syncgc refuses the DELETE of ConfigMap precious (syncgc.io/protected) for a bounded time",
            "held (being deleted): finalizers example.com/hold, removed by another controller",
            "could not list the API group metrics.k8s.io",
            "APIService v1beta1.metrics.k8s.io: NOT available (endpoints for service/metrics-server",
            "syncgc holds ConfigMap owner until its dependents are gone, at the latest until 2026-11-26T10:01:01Z",
            "blocked:",
        ] {
            assert!(text.contains(want), "{want:?} in:\n{text}");
        }
        assert_eq!(
            report.progress(),
            "namespace team-a: Terminating; 4 object(s) left in 1 kind(s), 2 with finalizers; \
             could not list the API group metrics.k8s.io"
        );
    }

    /// docs/troubleshooting.md's samples are what `explain namespace/…` prints: the whole
    /// report for one recorded with `-o json` on a cluster (a namespace deleted while a Secret
    /// in it kept another controller's finalizer), and the lines on a group whose discovery
    /// fails for a report with an unavailable APIService.
    #[test]
    fn the_docs_samples_are_what_explain_namespace_prints() {
        use crate::report::samples;
        let page = "docs/troubleshooting.md";
        let recorded: NamespaceReport = serde_json::from_str(include_str!(
            "../../tests/fixtures/explain/namespace-team-a.json"
        ))
        .unwrap();
        let printed = format!("$ syncgc explain namespace/team-a\n{}", recorded.text());
        let sample = samples::block(page, "$ syncgc explain namespace/team-a\n");
        samples::assert_printed(page, &sample, &printed);

        let printed = report(&gathered(json!([]))).text();
        let mut lines = printed
            .lines()
            .skip_while(|l| !l.starts_with("  could not list the API group"));
        let lines: Vec<&str> = lines
            .next()
            .into_iter()
            .chain(lines.take_while(|l| l.starts_with("    ")))
            .collect();
        let sample = samples::block(page, "  could not list the API group metrics.k8s.io");
        samples::assert_printed(page, &sample, &format!("{}\n", lines.join("\n")));
    }

    #[test]
    fn many_objects_of_a_kind_are_counted_past_the_first_twenty() {
        let many: Vec<serde_json::Value> = (0..50)
            .map(|n| json!({ "name": format!("cm-{n:02}") }))
            .collect();
        let report = report(&gathered(json!(many)));
        assert_eq!(report.remaining[0].count, 50);
        assert_eq!(report.remaining[0].objects.len(), SHOWN);
        assert!(report.text().contains("… and 30 more"));
    }
}
