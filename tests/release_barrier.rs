//! The release barrier in cooperative mode (kube-controller-manager's GC beside syncgc): an armed
//! owner is never released while a dependent exists that the watches have not delivered yet.
//! Discovery runs again only on CRD and APIService changes here (every 10 minutes otherwise),
//! so a new kind is watched in time only because a change made it look.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::json;

use support::barrier::{self, Wait};
use support::process::{Syncgc, WEBHOOK_LABEL};
use support::{TestNamespace, eventually, gone};

fn syncgc() -> &'static Syncgc {
    static SHARED: OnceLock<Syncgc> = OnceLock::new();
    SHARED.get_or_init(|| {
        Syncgc::start(
            &format!("syncgc-barrier-{}", std::process::id()),
            &["--rediscovery-interval", "10m", "--timeout-base", "120s"],
        )
    })
}

async fn namespace(test: &str) -> TestNamespace {
    let syncgc = tokio::task::spawn_blocking(syncgc).await.unwrap();
    let client = support::client().await;
    TestNamespace::with_labels(&client, test, &[(WEBHOOK_LABEL, &syncgc.name)]).await
}

#[tokio::test]
async fn a_held_custom_resource_of_a_kind_created_a_second_before_holds_its_owner() {
    let ns = namespace("barrier-new-kind").await;
    barrier::a_new_kind_holds_its_owner(&ns, Wait::Synchronous).await;
}

#[tokio::test]
async fn an_unreadable_kind_holds_the_owner_until_its_deadline() {
    let ns = namespace("barrier-unreadable").await;
    barrier::an_unreadable_kind_holds_the_owner_until_its_bound(
        &ns,
        Wait::Synchronous,
        std::time::Duration::from_secs(10),
        "SyncGCTimedOut",
    )
    .await;
}

#[tokio::test]
async fn a_crd_without_a_served_version_holds_no_release() {
    let ns = namespace("barrier-unserved-crd").await;
    a_crd_without_a_served_version_holds_nothing(&ns, Wait::Synchronous).await;
}

#[tokio::test]
async fn a_crd_rewritten_faster_than_discovery_holds_no_release() {
    let ns = namespace("barrier-crd-churn").await;
    a_crd_rewritten_in_a_loop_holds_nothing(&ns, Wait::Synchronous).await;
}

#[tokio::test]
async fn no_owner_goes_before_a_dependent_created_an_instant_before_its_delete() {
    let ns = namespace("barrier-trials").await;
    let load = support::TestNamespace::new(&ns.client, "barrier-load").await;
    barrier::trials(&ns, &load, Wait::Synchronous, 200).await;
}

#[tokio::test]
async fn no_owner_goes_before_a_dependent_below_its_middle_created_an_instant_before_its_delete() {
    let ns = namespace("barrier-trees").await;
    barrier::a_dependent_below_an_intermediate_owner_holds_the_top(&ns, Wait::Synchronous, 40)
        .await;
}

/// A CRD whose every version is unserved is Established and never discovered: it serves no
/// objects, so an armed owner without dependents elsewhere goes at once.
async fn a_crd_without_a_served_version_holds_nothing(ns: &TestNamespace, wait: Wait) {
    let group = format!("{}.test.syncgc.io", ns.name);
    let _crd = support::surface::ClusterObject::apply(
        &format!("crd/dormant.{group}"),
        support::surface::crd(&group, "Dormant", "dormant", &[("v1", false, true)]),
    );
    support::kubectl(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/dormant.{group}"),
        ],
        None,
    );
    releases_go_at_once(ns, wait, "owner", 1).await;
}

/// `n` owners named `prefix-i`, without dependents, deleted one after another: each goes
/// within a few seconds.
async fn releases_go_at_once(ns: &TestNamespace, wait: Wait, prefix: &str, n: usize) {
    let configmaps = ns.api::<ConfigMap>();
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        wait.owner(ns, &name).await;
        wait.delete(ns, &name).await;
        eventually(
            &format!("{name} goes at once"),
            Duration::from_secs(10),
            || gone(&configmaps, &name),
        )
        .await;
    }
}

/// A CRD rewritten without pause (an annotation, as two injectors fighting over a conversion
/// `caBundle` would) changes its resourceVersion faster than discovery runs: releases keep
/// flowing meanwhile.
async fn a_crd_rewritten_in_a_loop_holds_nothing(ns: &TestNamespace, wait: Wait) {
    let group = format!("{}.test.syncgc.io", ns.name);
    let name = format!("churns.{group}");
    let _crd = support::surface::ClusterObject::apply(
        &format!("crd/{name}"),
        support::surface::crd(&group, "Churn", "churns", &[("v1", true, true)]),
    );
    let churn = support::surface::resource(&group, "v1", "Churn", "churns");
    support::surface::served(&ns.client, &churn).await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(ns.client.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let (wrote, mut written) = tokio::sync::watch::channel(0u64);
    let writer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut writes = 0u64;
            while !stop.is_cancelled() && writes < 20_000 {
                let patch = json!({ "metadata": { "annotations": { "test.syncgc.io/churn": writes.to_string() } } });
                crds.patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .unwrap();
                writes += 1;
                wrote.send_replace(writes);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            writes
        })
    };
    // The CRD is being rewritten before the owners are deleted.
    written.wait_for(|writes| *writes >= 10).await.unwrap();
    releases_go_at_once(ns, wait, "owner", 5).await;
    stop.cancel();
    assert!(
        writer.await.unwrap() > 20,
        "the CRD was rewritten throughout"
    );
}
