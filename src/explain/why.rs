//! `syncgc explain --why-deleted KIND/NAME`: why an object that is gone went. Asks syncgc's
//! API for the object's `DeletionCause` ([`crate::aggregated`], through the apiserver, which
//! checks who may read it), whose causes go up to the root of the cascade: the DELETE someone
//! sent.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::api::{Cluster, names_missing_object};
use crate::gc::causes::{DeletionCause, DeletionCauseList, Done, Entry};
use crate::names::API_GROUP_VERSION;

/// Why an object went: its entry first, then each cause up to the root.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Why {
    pub chain: Vec<Entry>,
    /// The record ends before the root (its older entries are gone, or another replica's).
    pub incomplete: bool,
    /// Causes of kinds or namespaces the user may not read: counted, not named.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub withheld: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Reads the causes of the object `kind_name` (`KIND/NAME`, as `syncgc explain` takes it) in
/// `namespace` (or the kubeconfig's) from syncgc's API.
pub async fn why_deleted(
    cluster: &Cluster,
    kind_name: &str,
    namespace: Option<&str>,
) -> anyhow::Result<Why> {
    let named = crate::gc::snapshot::Named::find(cluster, kind_name, namespace).await?;
    let (kind, namespace, name) = (
        named.resource.api.kind.as_str(),
        named.scope(),
        named.name.as_str(),
    );
    let what = crate::api::described(kind, namespace, name);
    let cause_name = DeletionCause::name_of(kind, name);
    let base = format!("/apis/{API_GROUP_VERSION}");
    let found = match namespace {
        Some(ns) => {
            let path = format!("{base}/namespaces/{ns}/deletioncauses/{cause_name}");
            read::<DeletionCause>(cluster, &path, &what).await?
        }
        // Cluster-scoped objects' causes are in the list of every namespace.
        None => read::<DeletionCauseList>(cluster, &format!("{base}/deletioncauses"), &what)
            .await?
            .and_then(|list| {
                list.items.into_iter().find(|c| {
                    c.metadata.namespace.is_none()
                        && c.metadata.name.as_deref() == Some(&cause_name)
                })
            }),
    };
    let Some(cause) = found else {
        anyhow::bail!(
            "syncgc recorded no deletion of {what}: the record keeps the last {} deletions for \
             {} minutes, and a restart loses it",
            crate::gc::causes::CAPACITY,
            crate::gc::causes::KEEP / 60
        );
    };
    let mut chain = vec![cause.object];
    chain.extend(cause.causes);
    Ok(Why {
        chain,
        incomplete: cause.incomplete,
        withheld: cause.withheld,
    })
}

/// What syncgc's API answers a GET of `path` with; `None` when it has no such cause.
async fn read<T: serde::de::DeserializeOwned>(
    cluster: &Cluster,
    path: &str,
    what: &str,
) -> anyhow::Result<Option<T>> {
    let request = http::Request::get(path).body(Vec::new())?;
    match cluster.streams().request::<T>(request).await {
        Ok(answer) => Ok(Some(answer)),
        // syncgc's own 404 says what it keeps; the apiserver's means the API is not served.
        Err(kube::Error::Api(status)) if names_missing_object(&status) => Ok(None),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 503 => anyhow::bail!(
            "syncgc's API ({API_GROUP_VERSION}) does not answer ({}): is its APIService \
             registered and available? (kubectl get apiservice v1alpha1.syncgc.io)",
            status.message
        ),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            anyhow::bail!("you may not read why {what} went: {}", status.message)
        }
        Err(err) => Err(anyhow::Error::new(err).context(format!("asking syncgc's API for {what}"))),
    }
}

impl Why {
    /// For people: a line for the object, and one per cause.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let at = |e: &Entry| {
            jiff::Timestamp::from_second(e.at).map_or_else(|_| e.at.to_string(), |t| t.to_string())
        };
        for (i, entry) in self.chain.iter().enumerate() {
            let what = match entry.action {
                Done::Orphaned => "lost its references to owners being deleted",
                Done::Deleted => "was deleted",
            };
            let line = format!(
                "{} {what} at {} by {}",
                entry.described(),
                at(entry),
                entry.by
            );
            if i == 0 {
                let _ = writeln!(out, "{line}");
            } else {
                let _ = writeln!(out, "  because {line}");
            }
        }
        if let Some(root) = self.chain.last() {
            if self.incomplete {
                let _ = writeln!(
                    out,
                    "  because of the object with uid {}, which the record no longer holds",
                    root.cause.as_deref().unwrap_or_default()
                );
            } else {
                let _ = writeln!(out, "the root: {} deleted by {}", root.described(), root.by);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/commands.md's sample is what `--why-deleted` prints for a chain as syncgc's API
    /// answers it: a leaf deleted by Kubernetes' collector (whose DELETE did not reach syncgc)
    /// because its owner went, which syncgc deleted because the armed root went, which a user
    /// deleted.
    #[test]
    fn the_docs_sample_is_what_why_deleted_prints() {
        use crate::report::samples;
        let why: Why = serde_json::from_str(include_str!(
            "../../tests/fixtures/explain/why-deleted-leaf.json"
        ))
        .unwrap();
        let command = "$ syncgc explain --why-deleted configmap/leaf -n team-a\n";
        let page = "docs/commands.md";
        let printed = format!("{command}{}", why.text());
        samples::assert_printed(page, &samples::block(page, command), &printed);
    }
}
