//! SG-16: syncgc killed (SIGKILL) in the middle of a synchronous deletion finishes it after a
//! restart, with the deadline it fixed before; an owner it inherits waits for what its tree may
//! have left; and stopped (SIGTERM), it goes on answering admission reviews for its shutdown
//! delay. The tests run one at a time ([`alone`]): two leave an owner waiting while their
//! syncgc is stopped, which another test's syncgc would collect.

use crate::support;

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::DeleteParams;
use syncgc::names::{DEADLINE_ANNOTATION, SYNCHRONOUS_FINALIZER, TIMEOUT_ANNOTATION};

use support::process::{Syncgc, TEST_TIMEOUTS, WEBHOOK_LABEL, alone};
use support::{
    TestNamespace, clear_finalizers, create, delete, eventually, exists, gone, held, opted_in,
    owner_and_held, with_finalizer,
};

#[tokio::test]
async fn sg16_a_restart_keeps_the_deadline_and_finishes() {
    let _alone = alone().await;
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
    // Counted once the release's write has returned, which may be after the owner is gone.
    eventually("the release is counted as a timeout", WAIT_COUNTED, || {
        let counted = second.metric("syncgc_timeouts_total") >= 1.0;
        async move { counted.then_some(()) }
    })
    .await;
}

/// How long a metric may lag what the cluster shows.
const WAIT_COUNTED: Duration = Duration::from_secs(10);

/// SIGTERM: the webhook goes on answering for `--shutdown-delay` while `/readyz/webhook` says
/// it is shutting down (so the endpoint is removed first), then syncgc exits.
#[tokio::test]
async fn sigterm_keeps_the_webhook_answering_through_the_shutdown_delay() {
    let _alone = alone().await;
    let name = format!("syncgc-shutdown-{}", std::process::id());
    let mut syncgc = Syncgc::start_async(&name, &["--shutdown-delay", "3s"]).await;
    let webhook = syncgc.webhook;
    assert_eq!(syncgc.get("/readyz/webhook").unwrap().0, 200);
    let asked = std::time::Instant::now();
    syncgc.terminate();
    eventually(
        "/readyz/webhook says it shuts down",
        Duration::from_secs(2),
        || {
            let answer = syncgc.get("/readyz/webhook");
            async move {
                answer.filter(|(status, body)| {
                    *status == 503 && body.contains("webhook: shutting down")
                })
            }
        },
    )
    .await;
    assert_eq!(syncgc.get("/readyz").unwrap().0, 503);
    // /mutate still answers (a body that is no review gets a review that says so).
    let answer = std::process::Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "2",
            "-H",
            "Content-Type: application/json",
        ])
        .args(["-d", "{}", &format!("https://{webhook}/mutate")])
        .output()
        .expect("curl");
    let answer = String::from_utf8_lossy(&answer.stdout);
    assert!(answer.contains("\"response\""), "{answer}");
    let exited = tokio::task::spawn_blocking(move || {
        syncgc.wait();
        asked.elapsed()
    })
    .await
    .unwrap();
    assert!(
        exited >= Duration::from_millis(2500),
        "exited after {exited:?}"
    );
    assert!(std::net::TcpStream::connect(webhook).is_err(), "stopped");
}

/// An owner deleted before syncgc started, whose dependents a process gone since deleted on
/// its behalf (its record of them went with it): an object in its namespace that refers to an
/// owner that is gone may be a grandchild of its tree, and holds it until it goes.
#[tokio::test]
async fn an_inherited_owner_waits_for_an_object_whose_owner_is_gone() {
    let _alone = alone().await;
    let name = format!("syncgc-inherited-{}", std::process::id());
    let client = support::client().await;
    let ns = TestNamespace::with_labels(&client, "inherited", &[(WEBHOOK_LABEL, &name)]).await;
    let api = ns.api::<ConfigMap>();
    // Armed and deleted while no syncgc runs.
    create(
        &api,
        &with_finalizer(opted_in("owner", vec![], &[]), SYNCHRONOUS_FINALIZER),
    )
    .await;
    delete(&api, "owner", &DeleteParams::background()).await;
    // What a dependent deleted on its behalf left: an object that refers to it.
    let deleted_dependent = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "deleted-dependent".into(),
        uid: "0b0e6f2c-5d1a-4c3e-9a7b-2f6d8e4c1a90".into(),
        block_owner_deletion: Some(false),
        controller: None,
    };
    create(&api, &held("grandchild", vec![deleted_dependent])).await;

    let syncgc = Syncgc::start_async(&name, &TEST_TIMEOUTS).await;
    eventually(
        "the release barrier holds the owner for it",
        Duration::from_secs(30),
        || {
            let holds = syncgc.metric_where("syncgc_barrier_holds_total", "reason=\"orphan\"");
            async move { (holds >= 1.0).then_some(()) }
        },
    )
    .await;
    assert!(exists(&api, "owner").await, "released while it exists");
    clear_finalizers(&api, "grandchild").await;
    eventually(
        "the owner is released once it is gone",
        Duration::from_secs(30),
        || gone(&api, "owner"),
    )
    .await;
}
