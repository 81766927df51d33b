//! The waiting gauges (`syncgc_owners_waiting`, `syncgc_oldest_waiting_owner_seconds`) come
//! from each replica's graph: they count an owner that waits on every replica, and come back
//! when it stops waiting, whoever released it. It runs beside no other test, since the gauges
//! count the whole cluster.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::DeleteParams;

use support::process::{Syncgc, WEBHOOK_LABEL};
use support::{
    TestNamespace, clear_finalizers, create, delete, eventually, gone, held, opted_in, owner_ref,
};

const WAITING: &str = "syncgc_owners_waiting";
/// The gauges are refreshed every 5 s.
const REFRESH: Duration = Duration::from_secs(20);
/// How long the namespaces earlier tests left may take to go.
const SETTLE: Duration = Duration::from_secs(180);

async fn waiting_becomes(replicas: &[&Syncgc], expected: f64, what: &str) {
    eventually(what, REFRESH, || async {
        replicas
            .iter()
            .all(|r| r.metric(WAITING) == expected)
            .then_some(())
    })
    .await;
}

/// Deletes an armed owner `name` held by a dependent `name-held`, and waits until every one of
/// `replicas` counts `expected` waiting owners.
async fn start_waiting(api: &Api<ConfigMap>, name: &str, replicas: &[&Syncgc], expected: f64) {
    let owner = create(api, &opted_in(name, vec![], &[])).await;
    create(
        api,
        &held(&format!("{name}-held"), vec![owner_ref(&owner, true)]),
    )
    .await;
    delete(api, name, &DeleteParams::background()).await;
    waiting_becomes(replicas, expected, "both replicas count the owner").await;
}

#[tokio::test]
async fn the_waiting_gauges_follow_the_graph() {
    let _alone = support::process::alone().await;
    let lease = format!("syncgc-gauges-{}", std::process::id());
    let (first, second) = tokio::task::spawn_blocking({
        let lease = lease.clone();
        move || (Syncgc::start(&lease, &[]), Syncgc::start(&lease, &[]))
    })
    .await
    .unwrap();
    let client = support::client().await;
    let ns = TestNamespace::with_labels(&client, "gauges", &[(WEBHOOK_LABEL, &lease)]).await;
    let api = ns.api::<ConfigMap>();
    // Owners of earlier tests' namespaces may still be waiting while those are deleted.
    eventually("no owner of an earlier test waits", SETTLE, || async {
        (first.metric(WAITING) == 0.0 && second.metric(WAITING) == 0.0).then_some(())
    })
    .await;

    // Waiting on both replicas; its finalizer removed by hand: waiting on neither.
    start_waiting(&api, "by-hand", &[&first, &second], 1.0).await;
    assert!(first.metric("syncgc_oldest_waiting_owner_seconds") >= 0.0);
    clear_finalizers(&api, "by-hand").await;
    eventually("the owner is gone", REFRESH, || gone(&api, "by-hand")).await;
    waiting_becomes(
        &[&first, &second],
        0.0,
        "the gauges come back after a manual removal",
    )
    .await;
    clear_finalizers(&api, "by-hand-held").await;

    // Released by the other replica after a handover: the gauge comes back there too.
    start_waiting(&api, "handover", &[&first, &second], 1.0).await;
    let (mut leader, follower) = if first.metric("syncgc_leader") == 1.0 {
        (first, second)
    } else {
        (second, first)
    };
    tokio::task::spawn_blocking(move || leader.kill())
        .await
        .unwrap();
    eventually("the follower takes over", REFRESH, || async {
        (follower.metric("syncgc_leader") == 1.0).then_some(())
    })
    .await;
    clear_finalizers(&api, "handover-held").await;
    eventually("the new leader releases the owner", REFRESH, || {
        gone(&api, "handover")
    })
    .await;
    waiting_becomes(&[&follower], 0.0, "the gauge comes back on the new leader").await;
}
