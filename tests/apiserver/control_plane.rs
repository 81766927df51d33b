//! The local control plane is real, reachable, and serves what syncgc's garbage collector needs.

use crate::support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;

use support::{TestNamespace, config_map, create};

#[tokio::test]
async fn the_apiserver_answers_as_kubernetes_1_20() {
    let client = support::client().await;
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "20"),
        "{version:?}"
    );
}

#[tokio::test]
async fn the_apiserver_serves_the_resources_the_gc_needs() {
    let client = support::client().await;
    // What syncgc's garbage collector would watch (list, watch and delete), nothing ignored.
    let deletable: Vec<_> = syncgc::gc::discovery::discover(&client, &[])
        .await
        .expect("discovery")
        .resources
        .into_iter()
        .map(|resource| (resource.api.group, resource.api.plural))
        .collect();
    for (group, plural) in [
        ("", "configmaps"),
        ("", "pods"),
        ("", "replicationcontrollers"),
        ("", "namespaces"),
        ("", "secrets"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("batch", "jobs"),
        // Served only as batch/v1beta1 on 1.20: not the group's preferred version.
        ("batch", "cronjobs"),
        // Served under extensions too, from the same storage: watched once.
        ("networking.k8s.io", "ingresses"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
        ),
        ("coordination.k8s.io", "leases"),
        ("rbac.authorization.k8s.io", "clusterroles"),
    ] {
        assert!(
            deletable.iter().any(|(g, p)| g == group && p == plural),
            "{group}/{plural} is not served with list, watch and delete: {deletable:?}"
        );
    }
    assert!(
        !deletable
            .iter()
            .any(|(g, p)| g == "extensions" && p == "ingresses"),
        "Ingress is watched twice: {deletable:?}"
    );
    assert!(
        deletable.len() >= 40,
        "only {} deletable resources",
        deletable.len()
    );
}

#[tokio::test]
async fn metadata_only_lists_return_owner_references() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "metadata_only_lists").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &config_map("owner", vec![])).await;
    create(
        &api,
        &config_map("dependent", vec![support::owner_ref(&owner, true)]),
    )
    .await;

    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    let dependent = list
        .items
        .iter()
        .find(|item| item.metadata.name.as_deref() == Some("dependent"))
        .expect("the dependent is listed");
    let refs = dependent
        .metadata
        .owner_references
        .as_ref()
        .expect("owner references");
    assert_eq!(refs.len(), 1);
    assert_eq!(Some(&refs[0].uid), owner.metadata.uid.as_ref());
    assert_eq!(refs[0].block_owner_deletion, Some(true));
}
