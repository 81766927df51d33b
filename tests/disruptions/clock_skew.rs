//! Clock skew: deadlines are the apiserver's time (deletionTimestamp plus the timeout), and
//! syncgc compares them with the apiserver's clock as the Date header of its answers shows,
//! not with its own. A replica two minutes ahead releases no owner early; one two minutes
//! behind releases it by its timeout, not two minutes late.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DeleteParams;
use syncgc::names::{DEADLINE_ANNOTATION, TIMEOUT_ANNOTATION};

use support::process::{Syncgc, TEST_TIMEOUTS, WEBHOOK_LABEL};
use support::{
    TestNamespace, clear_finalizers, delete, eventually, exists, gone, opted_in, owner_and_held,
};

async fn skewed(skew: &'static str) -> (Syncgc, TestNamespace) {
    let name = format!(
        "syncgc-skew-{}-{}",
        &skew[..1].replace('+', "a").replace('-', "b"),
        std::process::id()
    );
    let syncgc = {
        let name = name.clone();
        tokio::task::spawn_blocking(move || Syncgc::start_skewed(&name, skew, &TEST_TIMEOUTS))
            .await
            .unwrap()
    };
    let client = support::client().await;
    let ns = TestNamespace::with_labels(&client, "clock-skew", &[(WEBHOOK_LABEL, &name)]).await;
    // It reads the apiserver's clock off its answers.
    let expected = if skew.starts_with('+') { -120.0 } else { 120.0 };
    eventually(
        "syncgc sees the clocks disagree",
        Duration::from_secs(30),
        || {
            let offset = syncgc.metric("syncgc_apiserver_clock_offset_seconds");
            async move { ((offset - expected).abs() <= 1.0).then_some(()) }
        },
    )
    .await;
    (syncgc, ns)
}

#[tokio::test]
async fn a_replica_two_minutes_ahead_releases_no_owner_early() {
    let _alone = support::process::alone().await;
    let (_syncgc, ns) = skewed("+120s").await;
    let api = ns.api::<ConfigMap>();
    owner_and_held(
        &api,
        &opted_in("owner", vec![], &[(TIMEOUT_ANNOTATION, "60s")]),
    )
    .await;
    delete(&api, "owner", &DeleteParams::background()).await;
    eventually("the deadline is fixed", Duration::from_secs(30), || async {
        let owner = api.get("owner").await.unwrap();
        owner
            .metadata
            .annotations?
            .get(DEADLINE_ANNOTATION)
            .cloned()
    })
    .await;
    // By its own clock the deadline passed a minute ago; by the apiserver's it is a minute off.
    for _ in 0..10 {
        assert!(exists(&api, "owner").await, "released early");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    clear_finalizers(&api, "held").await;
    eventually(
        "released once its dependent is gone",
        Duration::from_secs(30),
        || gone(&api, "owner"),
    )
    .await;
}

#[tokio::test]
async fn a_replica_two_minutes_behind_releases_by_the_timeout_in_time() {
    let _alone = support::process::alone().await;
    let (_syncgc, ns) = skewed("-120s").await;
    let api = ns.api::<ConfigMap>();
    owner_and_held(
        &api,
        &opted_in("owner", vec![], &[(TIMEOUT_ANNOTATION, "4s")]),
    )
    .await;
    let deleted = Instant::now();
    delete(&api, "owner", &DeleteParams::background()).await;
    eventually("released by its timeout", Duration::from_secs(60), || {
        gone(&api, "owner")
    })
    .await;
    let waited = deleted.elapsed();
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_secs(30),
        "released after {waited:?}, for a timeout of 4s"
    );
}
