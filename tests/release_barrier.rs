//! The release barrier in cooperative mode (kube-controller-manager's GC beside syncgc): an armed
//! owner is never released while a dependent exists that the watches have not delivered yet.
//! Discovery runs again only on CRD and APIService changes here (every 10 minutes otherwise),
//! so a new kind is watched in time only because a change made it look.

mod support;

use std::sync::OnceLock;

use support::TestNamespace;
use support::barrier::{self, Wait};
use support::process::{Syncgc, WEBHOOK_LABEL};

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
    barrier::a_crd_without_a_served_version_holds_nothing(&ns, Wait::Synchronous).await;
}

#[tokio::test]
async fn a_crd_rewritten_faster_than_discovery_holds_no_release() {
    let ns = namespace("barrier-crd-churn").await;
    barrier::a_crd_rewritten_in_a_loop_holds_nothing(&ns, Wait::Synchronous).await;
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
