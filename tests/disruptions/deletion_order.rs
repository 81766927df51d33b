//! A deletion order whose owner's deadline passed while syncgc was down: the restarted syncgc
//! abandons it. It runs beside no other test: a second syncgc collecting beside it would
//! abandon the order itself.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::DeleteParams;
use syncgc::names::TIMEOUT_ANNOTATION;

use support::process::{Syncgc, TEST_TIMEOUTS, WEBHOOK_LABEL};
use support::{
    HOLD, TestNamespace, being_deleted, clear_finalizers, config_map, create, delete, eventually,
    exists, gone, held, in_wave, opted_in, owner_ref, with_finalizer,
};

/// The deadline of an owner whose dependents go in waves passes while syncgc is down: the
/// restarted syncgc abandons the order (an Event says so) and deletes the later waves at once,
/// while the owner, which a finalizer of its own keeps, still waits.
#[tokio::test]
async fn an_order_whose_deadline_passed_while_syncgc_was_down_is_abandoned_at_once() {
    let _alone = support::process::alone().await;
    let name = format!("syncgc-restart-order-{}", std::process::id());
    let mut first = Syncgc::start_async(&name, &TEST_TIMEOUTS).await;
    let client = support::client().await;
    let ns = TestNamespace::with_labels(&client, "restart_order", &[(WEBHOOK_LABEL, &name)]).await;
    let api = ns.api::<ConfigMap>();
    let owner = create(
        &api,
        &with_finalizer(
            opted_in("owner", vec![], &[(TIMEOUT_ANNOTATION, "3s")]),
            HOLD,
        ),
    )
    .await;
    let reference = || vec![owner_ref(&owner, true)];
    create(&api, &in_wave(held("first", reference()), "2")).await;
    create(&api, &in_wave(config_map("second", reference()), "1")).await;
    create(&api, &config_map("last", reference())).await;

    delete(&api, "owner", &DeleteParams::background()).await;
    eventually(
        "the first wave is being deleted",
        Duration::from_secs(30),
        || being_deleted(&api, "first"),
    )
    .await;
    tokio::task::spawn_blocking(move || first.kill())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(exists(&api, "second").await && exists(&api, "last").await);
    let _second = Syncgc::start_async(&name, &TEST_TIMEOUTS).await;

    eventually(
        "the later waves go at once",
        Duration::from_secs(30),
        || async { (!exists(&api, "second").await && !exists(&api, "last").await).then_some(()) },
    )
    .await;
    eventually(
        "an Event says the order was abandoned",
        Duration::from_secs(30),
        || async {
            ns.events("SyncGCOrderAbandoned")
                .await
                .iter()
                .any(|e| e.note.as_deref().is_some_and(|n| n.contains("wave 2")))
                .then_some(())
        },
    )
    .await;
    eventually("the owner is released", Duration::from_secs(30), || async {
        let owner = api.get("owner").await.unwrap();
        (owner.finalizers() == [HOLD]).then_some(())
    })
    .await;
    clear_finalizers(&api, "first").await;
    clear_finalizers(&api, "owner").await;
    eventually("the owner goes", Duration::from_secs(30), || {
        gone(&api, "owner")
    })
    .await;
}
