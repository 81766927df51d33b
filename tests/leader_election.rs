//! Two replicas, one Lease: exactly one leads; when it dies, the other takes over and finishes
//! the synchronous deletion the first had started.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DeleteParams;

use support::process::{Syncgc, WEBHOOK_LABEL};
use support::{
    TestNamespace, being_deleted, clear_finalizers, create, eventually, gone, held, opted_in,
    owner_ref,
};

fn leads(syncgc: &Syncgc) -> bool {
    syncgc.metric("syncgc_leader") == 1.0
}

#[tokio::test]
async fn one_replica_leads_and_another_takes_over_when_it_dies() {
    let lease = format!("syncgc-le-{}", std::process::id());
    let (first, second) = tokio::task::spawn_blocking({
        let lease = lease.clone();
        move || {
            // Same lease and webhook registration name: two replicas of one deployment.
            let first = Syncgc::start(&lease, &[]);
            let second = Syncgc::start(&lease, &[]);
            (first, second)
        }
    })
    .await
    .unwrap();

    let one_leader = eventually(
        "exactly one replica leads",
        Duration::from_secs(30),
        || async { (leads(&first) != leads(&second)).then_some(()) },
    );
    one_leader.await;
    let (leader, follower) = if leads(&first) {
        (first, second)
    } else {
        (second, first)
    };
    let mut leader = leader;

    let client = support::client().await;
    let ns =
        TestNamespace::with_labels(&client, "leader_election", &[(WEBHOOK_LABEL, &lease)]).await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    create(&api, &held("held", vec![owner_ref(&owner, true)])).await;
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually(
        "the leader deletes the dependent",
        Duration::from_secs(30),
        || being_deleted(&api, "held"),
    )
    .await;

    tokio::task::spawn_blocking(move || leader.kill())
        .await
        .unwrap();
    eventually(
        "the follower takes over",
        Duration::from_secs(30),
        || async { leads(&follower).then_some(()) },
    )
    .await;
    clear_finalizers(&api, "held").await;
    eventually(
        "the new leader releases the owner",
        Duration::from_secs(30),
        || gone(&api, "owner"),
    )
    .await;
}
