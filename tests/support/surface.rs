//! Objects and checks for the tests of the collector on a real cluster's API surface:
//! resources of any group and version, CRDs and APIServices made and removed with kubectl,
//! and an owner that must wait for a held dependent of any kind.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use syncgc::names::{SYNCHRONOUS_ANNOTATION, TIMEOUT_ANNOTATION};

use super::process::Syncgc;
use super::{
    HOLD, TestNamespace, being_deleted, clear_finalizers, create, eventually, exists, gone, held,
    kubectl, opted_in, owner_ref,
};

/// How long a scenario step may take.
pub const WAIT: Duration = Duration::from_secs(60);

pub fn dynamic(ns: &TestNamespace, resource: &ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(ns.client.clone(), &ns.name, resource)
}

pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// A suspended `batch/v1beta1` CronJob named `name` with `annotations`.
pub fn cronjob(name: &str, annotations: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": { "name": name, "annotations": annotations },
        "spec": { "schedule": "0 0 1 1 *", "suspend": true,
            "jobTemplate": { "spec": { "template": pod_template() } } }
    })
}

/// The template of a Pod that never runs (no kubelet here).
pub fn pod_template() -> serde_json::Value {
    json!({ "spec": { "restartPolicy": "Never",
        "containers": [{ "name": "c", "image": "fake.invalid/none" }] } })
}

/// An Ingress named `name` with `annotations`.
pub fn ingress(name: &str, annotations: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": { "name": name, "annotations": annotations },
        "spec": { "defaultBackend": { "service": { "name": name, "port": { "number": 80 } } } }
    })
}

/// Gives `owner` (of `resource`, in `api`) a ConfigMap dependent `held` kept by a finalizer,
/// deletes the owner in the background, and waits until the dependent is being deleted.
/// Returns the ConfigMaps' API.
pub async fn delete_holding(
    ns: &TestNamespace,
    api: &Api<DynamicObject>,
    resource: &ApiResource,
    owner: &DynamicObject,
) -> Api<ConfigMap> {
    let configmaps = ns.api::<ConfigMap>();
    create(
        &configmaps,
        &held("held", vec![reference_to(owner, resource)]),
    )
    .await;
    api.delete(&owner.name_any(), &DeleteParams::background())
        .await
        .unwrap();
    eventually("the dependent is being deleted", WAIT, || {
        being_deleted(&configmaps, "held")
    })
    .await;
    configmaps
}

/// Creates `object` (JSON, without apiVersion and kind) as a `resource`.
pub async fn create_as(
    api: &Api<DynamicObject>,
    resource: &ApiResource,
    object: serde_json::Value,
) -> DynamicObject {
    let mut object: DynamicObject = serde_json::from_value(object).unwrap();
    object.types = Some(kube::api::TypeMeta {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
    });
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|err| panic!("creating a {}: {err}", resource.kind))
}

pub fn reference_to(object: &DynamicObject, resource: &ApiResource) -> OwnerReference {
    OwnerReference {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
        name: object.name_any(),
        uid: object.uid().unwrap(),
        block_owner_deletion: Some(true),
        controller: None,
    }
}

/// The annotations of an owner that opts in and waits up to `timeout`.
pub fn waiting_for(timeout: &str) -> serde_json::Value {
    json!({ SYNCHRONOUS_ANNOTATION: "true", TIMEOUT_ANNOTATION: timeout })
}

/// Stays true of `still` for `how_long`; panics naming `what` when it stops.
pub async fn stays<F, Fut>(what: &str, how_long: Duration, mut still: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + how_long;
    while Instant::now() < until {
        assert!(still().await, "{what} stopped being true");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until an Event with `reason` about `name` is recorded (Events are written just after
/// what they report, so an owner can be gone a moment before its Event exists).
pub async fn recorded(ns: &TestNamespace, name: &str, reason: &str) {
    eventually(
        &format!("a {reason} Event about {name} is recorded"),
        Duration::from_secs(15),
        || async {
            reasons(ns, name)
                .await
                .iter()
                .any(|r| r == reason)
                .then_some(())
        },
    )
    .await;
}

pub async fn reasons(ns: &TestNamespace, name: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(ns.client.clone(), &ns.name);
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter_map(|e| e.reason)
        .collect()
}

/// Waits until syncgc's graph holds `uid` (so a watch has seen it).
pub async fn seen(syncgc: &Syncgc, uid: &str) {
    eventually(
        &format!("syncgc sees {uid}"),
        Duration::from_secs(30),
        || {
            let seen = syncgc
                .get(&format!("/debug/graph?uid={uid}"))
                .is_some_and(|(status, body)| status == 200 && !body.contains("\"virtual\""));
            async move { seen.then_some(()) }
        },
    )
    .await;
}

/// A cluster-scoped object made with kubectl, deleted again when dropped.
pub struct ClusterObject(String);

impl ClusterObject {
    pub fn apply(kind_name: &str, manifest: serde_json::Value) -> Self {
        kubectl(&["apply", "-f", "-"], Some(&manifest.to_string()));
        Self(kind_name.to_owned())
    }
}

impl Drop for ClusterObject {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args(["delete", &self.0, "--ignore-not-found", "--wait=false"])
            .env("KUBECONFIG", super::kubeconfig_path())
            .output();
    }
}

/// An APIService whose service does not exist: discovery of its group answers 503, as when
/// metrics-server is down.
pub fn broken_api_service(group: &str) -> ClusterObject {
    ClusterObject::apply(
        &format!("apiservice/v1.{group}"),
        json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": { "name": format!("v1.{group}") },
            "spec": {
                "group": group, "version": "v1",
                "service": { "namespace": "default", "name": "syncgc-test-missing" },
                "insecureSkipTLSVerify": true,
                "groupPriorityMinimum": 1000, "versionPriority": 15
            }
        }),
    )
}

/// A CRD `plural.group` with `versions` as (name, served, storage).
pub fn crd(
    group: &str,
    kind: &str,
    plural: &str,
    versions: &[(&str, bool, bool)],
) -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{group}") },
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": { "plural": plural, "singular": kind.to_lowercase(), "kind": kind },
            "versions": versions.iter().map(|(name, served, storage)| json!({
                "name": name, "served": served, "storage": storage,
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } }
            })).collect::<Vec<_>>()
        }
    })
}

/// Waits until `resource` is served (its CRD established and discovery updated).
pub async fn served(client: &Client, resource: &ApiResource) {
    eventually(
        &format!("{} is served", resource.api_version),
        WAIT,
        || async {
            client
                .list_api_group_resources(&resource.api_version)
                .await
                .ok()?
                .resources
                .iter()
                .any(|r| r.name == resource.plural)
                .then_some(())
        },
    )
    .await;
}

/// An owner ConfigMap that opts in with `timeout`, and a dependent of kind `resource` held by
/// a finalizer: the owner must wait for the dependent, and go once it is let go.
pub async fn waits_for_a_held(
    syncgc: &Syncgc,
    ns: &TestNamespace,
    resource: &ApiResource,
    name: &str,
) {
    let configmaps = ns.api::<ConfigMap>();
    let owner = create(
        &configmaps,
        &opted_in(
            &format!("{name}-owner"),
            vec![],
            &[(TIMEOUT_ANNOTATION, "60s")],
        ),
    )
    .await;
    let owner_name = owner.name_any();
    let dependents = dynamic(ns, resource);
    let dependent = create_as(
        &dependents,
        resource,
        json!({ "metadata": { "name": name, "finalizers": [HOLD],
            "ownerReferences": [owner_ref(&owner, true)] } }),
    )
    .await;
    // A kind syncgc has not been told about yet is the release barrier's matter; here the
    // point is that every kind gets watched.
    seen(syncgc, &dependent.uid().unwrap()).await;
    configmaps
        .delete(&owner.name_any(), &DeleteParams::background())
        .await
        .unwrap();
    eventually(&format!("{name} is being deleted"), WAIT, || async {
        dependents
            .get(name)
            .await
            .ok()?
            .metadata
            .deletion_timestamp
            .map(drop)
    })
    .await;
    stays(
        &format!("the owner of {name} waits"),
        Duration::from_secs(2),
        || exists(&configmaps, &owner_name),
    )
    .await;
    clear_finalizers(&dependents, name).await;
    eventually(&format!("the owner of {name} is released"), WAIT, || {
        gone(&configmaps, &owner_name)
    })
    .await;
    recorded(ns, &owner_name, "SyncGCReleased").await;
}
