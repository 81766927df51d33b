//! Objects and checks for garbage-collector scenarios: ReplicationControllers that never run
//! anything, unscheduled Pods (deleted at once, no kubelet needed), ConfigMaps, and a raw
//! DELETE for the options typed clients do not offer.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, ReplicationController, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::{TestNamespace, eventually};

/// A ReplicationController with no replicas whose selector matches none of the test pods, so
/// that kube-controller-manager's replication manager leaves them alone.
pub fn rc(name: &str, finalizers: &[&str]) -> ReplicationController {
    serde_json::from_value(json!({
        "metadata": { "name": name, "finalizers": finalizers },
        "spec": {
            "replicas": 0,
            "selector": { "rc": name },
            "template": {
                "metadata": { "labels": { "rc": name } },
                "spec": { "containers": [{ "name": "c", "image": "fake.invalid/none" }] }
            }
        }
    }))
    .expect("a ReplicationController")
}

/// An unscheduled Pod with `owners` and `finalizers`.
pub fn pod(name: &str, owners: Vec<OwnerReference>, finalizers: &[&str]) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "ownerReferences": owners, "finalizers": finalizers },
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [{ "name": "c", "image": "fake.invalid/none" }]
        }
    }))
    .expect("a Pod")
}

/// An ownerReference with every field given.
pub fn reference(
    api_version: &str,
    kind: &str,
    name: &str,
    uid: &str,
    block: Option<bool>,
) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        block_owner_deletion: block,
        controller: None,
    }
}

/// Waits until the namespace's `default` ServiceAccount exists (Pods need it to be admitted).
pub async fn service_account_ready(ns: &TestNamespace) {
    let accounts: Api<ServiceAccount> = ns.api();
    eventually(
        "the default ServiceAccount exists",
        Duration::from_secs(60),
        || async { accounts.get_opt("default").await.ok().flatten().map(drop) },
    )
    .await;
}

/// DELETE with raw DeleteOptions, e.g. `{"orphanDependents": true}`.
pub async fn delete_with<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    options: serde_json::Value,
) where
    K: Resource<DynamicType = ()>,
{
    let url = format!("{}/{name}", K::url_path(&(), Some(namespace)));
    let request = http::Request::delete(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&options).unwrap())
        .unwrap();
    client
        .request_text(request)
        .await
        .unwrap_or_else(|err| panic!("DELETE {name} with {options}: {err}"));
}

/// The owners' names of `object`, in order.
pub fn owner_names<K: Resource>(object: &K) -> Vec<String> {
    object
        .owner_references()
        .iter()
        .map(|r| r.name.clone())
        .collect()
}
