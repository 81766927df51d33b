//! The release barrier in standalone mode: an owner in foreground deletion keeps
//! `foregroundDeletion` while a blocking dependent exists that the watches have not delivered
//! yet. Discovery runs again only on CRD and APIService changes here.

mod support;

use std::sync::OnceLock;

use support::TestNamespace;
use support::barrier::{self, Wait};
use support::gc::service_account_ready;
use support::process::Syncgc;

fn syncgc() -> &'static Syncgc {
    static SHARED: OnceLock<Syncgc> = OnceLock::new();
    SHARED.get_or_init(|| {
        Syncgc::start(
            &format!("syncgc-barrier-standalone-{}", std::process::id()),
            &[
                "--mode",
                "standalone",
                "--rediscovery-interval",
                "10m",
                "--qps",
                "500",
                "--burst",
                "1000",
                "--timeout-base",
                "20s",
            ],
        )
    })
}

async fn namespace(test: &str) -> TestNamespace {
    tokio::task::spawn_blocking(syncgc).await.unwrap();
    let client = support::client().await;
    let ns = TestNamespace::new(&client, test).await;
    service_account_ready(&ns).await;
    ns
}

#[tokio::test]
async fn a_blocking_custom_resource_of_a_kind_created_a_second_before_holds_foreground_deletion() {
    let ns = namespace("barrier-new-kind").await;
    barrier::a_new_kind_holds_its_owner(&ns, Wait::Foreground).await;
}

#[tokio::test]
async fn no_foreground_owner_goes_before_a_dependent_created_an_instant_before_its_delete() {
    let ns = namespace("barrier-trials").await;
    let load = TestNamespace::new(&ns.client, "barrier-load").await;
    barrier::trials(&ns, &load, Wait::Foreground, 200).await;
}

#[tokio::test]
async fn no_owner_goes_before_a_dependent_below_its_middle_created_an_instant_before_its_delete() {
    let ns = namespace("barrier-trees").await;
    barrier::a_dependent_below_an_intermediate_owner_holds_the_top(&ns, Wait::Foreground, 40).await;
}

#[tokio::test]
async fn an_unreadable_kind_holds_a_foreground_owner_until_the_timeout_base() {
    let ns = namespace("barrier-standalone-unreadable").await;
    barrier::an_unreadable_kind_holds_the_owner_until_its_bound(
        &ns,
        Wait::Foreground,
        std::time::Duration::from_secs(20),
        syncgc::names::Reason::BarrierTimedOut.as_str(),
    )
    .await;
}
