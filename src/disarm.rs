//! `syncgc disarm`: for uninstalling. Takes syncgc's finalizer and its armed label off every
//! object that carries them, found through discovery and a metadata list of every resource, so
//! that nothing is left waiting for a collector that is gone: an armed object that is being
//! deleted is released by it (whatever else holds it is the cluster's business). The opt-in
//! annotation stays, so that installing syncgc again arms the same objects.
//!
//! A running syncgc would arm the objects again (its webhook on their next update, its
//! collector at once), so `disarm` refuses while a replica holds the leader Lease or syncgc's
//! webhook configuration has webhooks, unless forced. With `--stop-deployment` (the uninstall
//! Job's way, run before the install's objects are deleted) it stops syncgc first: scales its
//! Deployment to zero, waits until its pods are gone and the Lease is free, and deletes the
//! webhook configuration, which no replica is left to write again.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;

use crate::api::meta::Meta;
use crate::api::{ApiError, Changed, Cluster, Target};
use crate::gc::discovery::{self, Resource};
use crate::leader::LeaseRecord;
use crate::names::{ARMED_LABEL, SYNCHRONOUS_FINALIZER};

/// How many objects are disarmed at once.
const CONCURRENCY: usize = 8;

#[derive(Debug, Args)]
pub struct DisarmArgs {
    /// Print what would be disarmed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Disarm even while syncgc runs (a replica holds the leader Lease, or its webhook
    /// configuration has webhooks); it arms again what it finds opted in.
    #[arg(long)]
    pub force: bool,
    /// Stop syncgc first (for an uninstall Job): scale its Deployment NAMESPACE/NAME to zero,
    /// wait until its pods are gone and no replica holds the leader Lease, and delete its
    /// webhook configuration; then disarm.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = deployment_name)]
    pub stop_deployment: Option<(String, String)>,
    /// How long --stop-deployment waits for syncgc's pods to go and its Lease to be free.
    #[arg(long, default_value = "3m", value_parser = crate::duration::parse)]
    pub stop_timeout: Duration,
    /// Only objects in this namespace (cluster-scoped ones are left alone); every namespace
    /// without it.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// The namespace of syncgc's leader Lease.
    #[arg(long, default_value = crate::leader::DEFAULT_NAMESPACE)]
    pub leader_election_namespace: String,
    /// The name of syncgc's leader Lease.
    #[arg(long, default_value = "syncgc")]
    pub leader_election_lease: String,
    /// The name of syncgc's MutatingWebhookConfiguration.
    #[arg(long, default_value = "syncgc")]
    pub webhook_config_name: String,
    #[command(flatten)]
    pub access: crate::api::Access,
}

fn deployment_name(text: &str) -> Result<(String, String), String> {
    crate::names::namespaced_name(text)
        .ok_or_else(|| format!("{text:?} is not a Deployment as NAMESPACE/NAME"))
}

/// How often `--stop-deployment` looks whether syncgc has stopped.
const STOP_POLL: Duration = Duration::from_secs(1);

/// An armed object found.
struct Armed {
    target: Target,
    deleting: bool,
}

impl Armed {
    fn of(resource: &Resource, meta: Meta) -> Option<Self> {
        let armed = meta.finalizers.iter().any(|f| f == SYNCHRONOUS_FINALIZER)
            || meta.labels.get(ARMED_LABEL).is_some();
        armed.then(|| Self {
            deleting: meta.deletion_timestamp.is_some(),
            target: Target {
                resource: resource.api.clone(),
                namespace: meta.namespace,
                name: meta.name,
                uid: meta.uid.unwrap_or_default(),
            },
        })
    }

    /// `configmaps ns/name` (`deployments.apps ns/name` for other groups), and whether it is
    /// being deleted.
    fn describe(&self) -> String {
        let at = match &self.target.namespace {
            Some(ns) => format!("{ns}/{}", self.target.name),
            None => self.target.name.clone(),
        };
        let deleting = if self.deleting {
            " (being deleted: released)"
        } else {
            ""
        };
        let resource = discovery::resource_name(&self.target.resource);
        format!("{resource} {at}{deleting}")
    }
}

/// Why syncgc is taken to be running at `now`, if it is: its leader Lease renewed within its
/// duration, or its webhook configuration with webhooks in it.
pub fn running(
    lease: Option<&LeaseRecord>,
    webhooks: Option<usize>,
    now: Timestamp,
) -> Vec<String> {
    let mut why = Vec::new();
    if let Some(record) = lease
        && let (Some(holder), Some(renewed)) = (&record.holder, record.renew_time)
    {
        let ago = now.duration_since(renewed);
        let lasts = jiff::SignedDuration::try_from(record.lease_duration).unwrap_or_default();
        if ago < lasts {
            why.push(format!(
                "{holder} holds the leader Lease, renewed {:.0}s ago",
                ago.as_secs_f64().max(0.0)
            ));
        }
    }
    if let Some(n) = webhooks.filter(|n| *n > 0) {
        why.push(format!("its webhook configuration has {n} webhook(s)"));
    }
    why
}

impl DisarmArgs {
    pub async fn run(self) -> anyhow::Result<()> {
        let cluster = self
            .access
            .cluster(Some(50.0), Duration::from_secs(30))
            .await?;
        if let Some((namespace, name)) = &self.stop_deployment {
            if self.dry_run {
                eprintln!("would stop syncgc's Deployment {namespace}/{name} first (--dry-run)");
            } else {
                self.stop(&cluster, namespace, name).await?;
            }
        }
        let why = self.syncgc_running(&cluster).await?;
        if !why.is_empty() {
            let why = why.join("; ");
            if self.dry_run {
                eprintln!("warning: syncgc is running ({why}); it would arm objects again");
            } else if self.force {
                eprintln!("warning: syncgc is running ({why}); disarming all the same (--force)");
            } else {
                anyhow::bail!(
                    "syncgc is running ({why}) and would arm the objects again: uninstall it \
                     first (`kubectl delete -k manifests/`, or scale its Deployment to 0 and \
                     delete the MutatingWebhookConfiguration {}), then run this again; or \
                     pass --force",
                    self.webhook_config_name
                );
            }
        }

        let found = discovery::discover(cluster.streams(), &[]).await?;
        let mut unlisted = Vec::new();
        let mut armed = Vec::new();
        for resource in &found.resources {
            if self.namespace.is_some() && !resource.namespaced {
                continue;
            }
            let collection = Target::collection(&resource.api, self.namespace.as_deref());
            let listed = cluster
                .list_metadata(&collection, |page| {
                    armed.extend(page.into_iter().filter_map(|m| Armed::of(resource, m)));
                })
                .await;
            if let Err(err) = listed {
                let name = discovery::resource_name(&resource.api);
                eprintln!("cannot list {name}: {err}");
                unlisted.push(name);
            }
        }

        let verb = if self.dry_run {
            "would disarm"
        } else {
            "disarmed"
        };
        let results: Vec<(&Armed, Result<Changed, ApiError>)> = futures::stream::iter(&armed)
            .map(|object| {
                let cluster = &cluster;
                let dry_run = self.dry_run;
                async move {
                    let result = if dry_run {
                        Ok(Changed::Yes)
                    } else {
                        cluster.disarm(&object.target).await
                    };
                    (object, result)
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut failed = 0;
        let mut changed = 0;
        for (object, result) in results {
            match result {
                Ok(Changed::Yes) => {
                    changed += 1;
                    println!("{verb} {}", object.describe());
                }
                Ok(Changed::AlreadySo) => {}
                Err(err) => {
                    failed += 1;
                    eprintln!("cannot disarm {}: {err}", object.describe());
                }
            }
        }
        println!(
            "{verb} {changed} object(s) of {} resource(s){}",
            found.resources.len() - unlisted.len(),
            match &self.namespace {
                Some(ns) => format!(" in namespace {ns}"),
                None => String::new(),
            }
        );
        if failed > 0 || !unlisted.is_empty() {
            anyhow::bail!(
                "{failed} object(s) could not be disarmed and {} resource(s) could not be listed \
                 ({}); run it again once they can",
                unlisted.len(),
                unlisted.join(", ")
            );
        }
        Ok(())
    }

    /// Stops syncgc: its Deployment scaled to zero, then, once its pods are gone and no replica
    /// holds the Lease, its webhook configuration deleted (a replica with `--manage-webhook`
    /// would have written it again).
    async fn stop(&self, cluster: &Cluster, namespace: &str, name: &str) -> anyhow::Result<()> {
        let deployments = cluster.namespaced::<Deployment>(namespace);
        // A merge patch of the replicas alone: the install's RBAC allows `patch` on every
        // resource, not `update`.
        let scaled = cluster
            .merge_whole(
                &deployments,
                name,
                &serde_json::json!({ "spec": { "replicas": 0 } }),
            )
            .await;
        let selector = match scaled {
            Ok(deployment) => {
                println!("scaled the Deployment {namespace}/{name} to 0 replicas");
                pod_selector(&deployment)
            }
            Err(err) if err.status() == Some(404) => {
                eprintln!("no Deployment {namespace}/{name}: nothing to scale down");
                None
            }
            Err(err) => return Err(err.into()),
        };

        let pods = cluster.namespaced::<Pod>(namespace);
        let deadline = tokio::time::Instant::now() + self.stop_timeout;
        loop {
            let mut left = Vec::new();
            if let Some(selector) = selector.as_deref().filter(|s| !s.is_empty()) {
                let pods_left = cluster.list_whole(&pods, selector).await?.len();
                if pods_left > 0 {
                    left.push(format!("{pods_left} pod(s) of the Deployment still run"));
                }
            }
            left.extend(running(
                self.lease(cluster).await?.as_ref(),
                None,
                crate::api::clock::now(),
            ));
            if left.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "syncgc did not stop within {:?}: {}",
                    self.stop_timeout,
                    left.join("; ")
                );
            }
            tokio::time::sleep(STOP_POLL).await;
        }
        let configurations = cluster.all::<MutatingWebhookConfiguration>();
        if cluster
            .delete_whole(&configurations, &self.webhook_config_name)
            .await?
            == Changed::Yes
        {
            println!(
                "deleted the MutatingWebhookConfiguration {}",
                self.webhook_config_name
            );
        }
        Ok(())
    }

    /// syncgc's leader Lease, as a record, if there is one.
    async fn lease(&self, cluster: &Cluster) -> anyhow::Result<Option<LeaseRecord>> {
        let lease = cluster
            .namespaced::<Lease>(&self.leader_election_namespace)
            .get_opt(&self.leader_election_lease)
            .await
            .with_context(|| {
                format!(
                    "reading the leader Lease {}/{}",
                    self.leader_election_namespace, self.leader_election_lease
                )
            })?;
        Ok(lease.map(|l| LeaseRecord::of(&l, Duration::from_secs(15))))
    }

    /// Why syncgc is taken to be running (see [`running`]).
    async fn syncgc_running(&self, cluster: &Cluster) -> anyhow::Result<Vec<String>> {
        let record = self.lease(cluster).await?;
        let configuration = cluster
            .all::<MutatingWebhookConfiguration>()
            .get_opt(&self.webhook_config_name)
            .await
            .with_context(|| {
                format!(
                    "reading the MutatingWebhookConfiguration {}",
                    self.webhook_config_name
                )
            })?;
        let webhooks = configuration.map(|c| c.webhooks.map_or(0, |w| w.len()));
        Ok(running(record.as_ref(), webhooks, crate::api::clock::now()))
    }
}

/// The label selector of a Deployment's Pods (its `matchLabels`), as a list's `labelSelector`.
pub fn pod_selector(deployment: &Deployment) -> Option<String> {
    let labels = deployment.spec.as_ref()?.selector.match_labels.as_ref()?;
    Some(
        labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: Option<&str>, renewed: Timestamp) -> LeaseRecord {
        LeaseRecord {
            holder: holder.map(str::to_owned),
            lease_duration: Duration::from_secs(15),
            acquire_time: Some(renewed),
            renew_time: Some(renewed),
            transitions: 0,
            resource_version: None,
        }
    }

    #[test]
    fn a_lease_renewed_within_its_duration_or_webhooks_mean_running() {
        let now: Timestamp = "2026-11-24T12:00:00Z".parse().unwrap();
        let ago = |s: i64| now - jiff::SignedDuration::from_secs(s);
        assert!(running(None, None, now).is_empty());
        let fresh = running(Some(&record(Some("pod-a"), ago(3))), None, now);
        assert_eq!(fresh, ["pod-a holds the leader Lease, renewed 3s ago"]);
        assert!(running(Some(&record(Some("pod-a"), ago(16))), None, now).is_empty());
        // Released on a clean shutdown: nobody holds it.
        assert!(running(Some(&record(None, ago(1))), None, now).is_empty());
        // The configuration as the manifests ship it, before syncgc fills it in, is harmless.
        assert!(running(None, Some(0), now).is_empty());
        assert_eq!(
            running(None, Some(2), now),
            ["its webhook configuration has 2 webhook(s)"]
        );
    }
}
