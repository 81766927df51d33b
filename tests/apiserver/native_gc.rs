//! The harness exercises a real garbage collector: kube-controller-manager's own GC runs beside
//! the local apiserver (`hack/cluster.sh up --kcm gc`, which is what `hack/test.sh` starts).

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::DeleteParams;

use support::{
    TestNamespace, being_deleted, clear_finalizers, config_map, create, delete, eventually, gone,
    owner_and_held, owner_ref,
};

const GC_TIMEOUT: Duration = Duration::from_secs(60);

/// Foreground deletion: the owner waits, with `foregroundDeletion`, until its blocking
/// dependents are gone; a dependent held by a foreign finalizer keeps it waiting.
#[tokio::test]
async fn foreground_deletion_by_the_cluster_gc() {
    support::kcm(support::Kcm::Gc);
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "foreground_deletion_by_the_cluster_gc").await;
    let api = ns.api::<ConfigMap>();

    let owner = owner_and_held(&api, &config_map("owner", vec![])).await;
    for name in ["free-1", "free-2"] {
        create(&api, &config_map(name, vec![owner_ref(&owner, true)])).await;
    }

    delete(&api, "owner", &DeleteParams::foreground()).await;

    for name in ["free-1", "free-2"] {
        eventually(
            &format!("the GC deleted dependent {name}"),
            GC_TIMEOUT,
            || gone(&api, name),
        )
        .await;
    }
    eventually(
        "the GC asked to delete the held dependent",
        GC_TIMEOUT,
        || being_deleted(&api, "held"),
    )
    .await;
    let waiting = api
        .get("owner")
        .await
        .expect("the owner waits for its held dependent");
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert!(
        waiting
            .finalizers()
            .iter()
            .any(|f| f == "foregroundDeletion"),
        "{:?}",
        waiting.finalizers()
    );

    clear_finalizers(&api, "held").await;
    eventually("the held dependent is gone", GC_TIMEOUT, || {
        gone(&api, "held")
    })
    .await;
    eventually("the owner is gone", GC_TIMEOUT, || gone(&api, "owner")).await;
}

/// Background deletion: the owner goes at once, and its dependents follow.
#[tokio::test]
async fn background_deletion_by_the_cluster_gc() {
    support::kcm(support::Kcm::Gc);
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "background_deletion_by_the_cluster_gc").await;
    let api = ns.api::<ConfigMap>();

    let owner = create(&api, &config_map("owner", vec![])).await;
    create(
        &api,
        &config_map("dependent", vec![owner_ref(&owner, false)]),
    )
    .await;

    delete(&api, "owner", &DeleteParams::background()).await;
    eventually("the owner is gone", GC_TIMEOUT, || gone(&api, "owner")).await;
    eventually("the GC deleted the dependent", GC_TIMEOUT, || {
        gone(&api, "dependent")
    })
    .await;
}
