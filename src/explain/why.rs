//! `syncgc explain --why-deleted KIND/NAME`: why an object that is gone went. Asks the
//! running syncgc's record of causes ([`crate::gc::causes`], `GET /debug/deleted`) — every
//! replica, through the apiserver's proxy to its pod, or the replica at `--syncgc-url` — and
//! follows the causes up to the root of the cascade: the DELETE someone sent.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use serde::Serialize;

use crate::api::Cluster;
use crate::gc::causes::{Chain, Done, Entry};

/// The label every syncgc pod carries.
const POD_SELECTOR: &str = "app.kubernetes.io/name=syncgc";

/// Where the record is read.
#[derive(Debug, Clone)]
pub enum Sources {
    /// A replica's metrics address, such as `http://127.0.0.1:8080`.
    Url(String),
    /// Every syncgc pod of this namespace, through the apiserver's proxy to its webhook port.
    Pods(String),
}

/// Why an object went: its entry first, then each cause up to the root.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Why {
    pub chain: Vec<Entry>,
    /// The record ends before the root (its older entries are gone, or another replica's).
    pub incomplete: bool,
}

/// Reads the record for the object `kind_name` (`KIND/NAME`, as `syncgc explain` takes it) in
/// `namespace` (or the kubeconfig's) and follows its causes.
pub async fn why_deleted(
    cluster: &Cluster,
    sources: &Sources,
    kind_name: &str,
    namespace: Option<&str>,
) -> anyhow::Result<Why> {
    let named = crate::gc::snapshot::Named::find(cluster, kind_name, namespace).await?;
    let (kind, namespace, name) = (
        named.resource.api.kind.as_str(),
        named.scope(),
        named.name.as_str(),
    );
    let urls = urls(cluster, sources).await?;
    let mut query = format!("kind={kind}&name={name}");
    if let Some(ns) = namespace {
        let _ = write!(query, "&namespace={ns}");
    }
    let mut chain: Vec<Entry> = latest(cluster, &urls, &query).await?.unwrap_or_default();
    if chain.is_empty() {
        let what = crate::api::described(kind, namespace, name);
        anyhow::bail!(
            "no syncgc replica recorded the deletion of {what}: the record keeps the last {} \
             deletions for {} minutes, each replica those its webhook saw, and a restart loses \
             it",
            crate::gc::causes::CAPACITY,
            crate::gc::causes::KEEP / 60
        );
    }
    // Another replica may hold the rest of the chain.
    while let Some(cause) = chain.last().and_then(|e| e.cause.clone()) {
        if chain.len() > 64 {
            break;
        }
        match latest(cluster, &urls, &format!("uid={cause}")).await? {
            Some(rest) if !rest.is_empty() && !chain.iter().any(|e| e.uid == rest[0].uid) => {
                chain.extend(rest);
            }
            _ => break,
        }
    }
    let incomplete = chain.last().is_some_and(|e| e.cause.is_some());
    Ok(Why { chain, incomplete })
}

/// The URLs of `/debug/deleted` to ask.
async fn urls(cluster: &Cluster, sources: &Sources) -> anyhow::Result<Vec<String>> {
    Ok(match sources {
        Sources::Url(url) => vec![format!("{}/debug/deleted", url.trim_end_matches('/'))],
        Sources::Pods(namespace) => {
            let pods = cluster
                .namespaced::<Pod>(namespace)
                .list_metadata(&ListParams::default().labels(POD_SELECTOR))
                .await?;
            anyhow::ensure!(
                !pods.items.is_empty(),
                "no syncgc pod in the namespace {namespace} (give --syncgc-namespace, or \
                 --syncgc-url for a syncgc outside the cluster)"
            );
            pods.items
                .iter()
                .filter_map(|p| p.metadata.name.as_deref())
                .map(|pod| {
                    format!(
                        "/api/v1/namespaces/{namespace}/pods/https:{pod}:8443/proxy/debug/deleted"
                    )
                })
                .collect()
        }
    })
}

/// The latest chain any source answers for `query`.
async fn latest(
    cluster: &Cluster,
    urls: &[String],
    query: &str,
) -> anyhow::Result<Option<Vec<Entry>>> {
    let mut best: Option<Vec<Entry>> = None;
    let mut errors = Vec::new();
    for url in urls {
        let url = format!("{url}?{query}");
        let text = if url.starts_with("http") {
            crate::api::get_text(&url).await
        } else {
            cluster.get_text_at(&url).await
        };
        let answers: Vec<Chain> = match text.and_then(|t| Ok(serde_json::from_str(&t)?)) {
            Ok(answers) => answers,
            Err(err) => {
                errors.push(format!("{url}: {err:#}"));
                continue;
            }
        };
        for answer in answers {
            let newer = match (&best, answer.chain.first()) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(best), Some(first)) => best.first().is_none_or(|b| first.at > b.at),
            };
            if newer {
                best = Some(answer.chain);
            }
        }
    }
    if best.is_none() && errors.len() == urls.len() {
        anyhow::bail!("no syncgc replica answered: {}", errors.join("; "));
    }
    Ok(best)
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
