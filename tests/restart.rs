//! SG-16: syncgc killed (SIGKILL) in the middle of a synchronous deletion finishes it after a
//! restart, with the deadline it fixed before.

mod support;

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::DeleteParams;
use syncgc::names::{DEADLINE_ANNOTATION, TIMEOUT_ANNOTATION};

use support::process::{Syncgc, TEST_TIMEOUTS, WEBHOOK_LABEL};
use support::{TestNamespace, delete, eventually, gone, opted_in, owner_and_held};

#[tokio::test]
async fn sg16_a_restart_keeps_the_deadline_and_finishes() {
    let name = format!("syncgc-restart-{}", std::process::id());
    let mut first = Syncgc::start_async(&name, &TEST_TIMEOUTS).await;
    let client = support::client().await;
    let ns = TestNamespace::with_labels(&client, "sg16_restart", &[(WEBHOOK_LABEL, &name)]).await;
    let api = ns.api::<ConfigMap>();

    owner_and_held(
        &api,
        &opted_in("owner", vec![], &[(TIMEOUT_ANNOTATION, "6s")]),
    )
    .await;

    delete(&api, "owner", &DeleteParams::background()).await;
    let deadline: String = eventually("the deadline is fixed", Duration::from_secs(30), || async {
        api.get("owner")
            .await
            .unwrap()
            .annotations()
            .get(DEADLINE_ANNOTATION)
            .cloned()
    })
    .await;
    let deadline: Timestamp = deadline.parse().unwrap();

    tokio::task::spawn_blocking(move || first.kill())
        .await
        .unwrap();
    let second = Syncgc::start_async(&name, &TEST_TIMEOUTS).await;

    eventually(
        "the owner is released by its deadline",
        Duration::from_secs(30),
        || gone(&api, "owner"),
    )
    .await;
    let released = Timestamp::now();
    assert!(
        released >= deadline,
        "released at {released}, before the deadline {deadline}"
    );
    assert!(
        released.duration_since(deadline) < jiff::SignedDuration::from_secs(10),
        "released at {released}, long after the deadline {deadline}"
    );
    assert!(second.metric("syncgc_timeouts_total") >= 1.0);
}
