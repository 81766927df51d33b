//! The release barrier while watches fail: a watch that keeps failing (a conversion webhook
//! that does not answer), and kube-apiserver restarting while owners wait; in both modes, one
//! after the other (they need kube-controller-manager with and without its GC). It runs beside
//! no other test: a failing watch holds every release in its scope, and no other test can run
//! while the apiserver is down.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::DeleteParams;
use serde_json::json;

use support::barrier::{Wait, held_secret, held_then_let_go, unconvertible_kind};
use support::process::{Syncgc, WEBHOOK_LABEL};
use support::surface::{WAIT, create_as, dynamic, stays};
use support::{
    HOLD, TestNamespace, being_deleted, clear_finalizers, cluster_sh, create, delete, eventually,
    exists, gone, held, kubeconfig_path, owner_ref,
};

#[tokio::test]
async fn owners_wait_while_watches_fail_and_recover() {
    let _alone = support::process::alone().await;
    let cooperative = tokio::task::spawn_blocking(|| {
        Syncgc::start(
            &format!("syncgc-barrier-restart-{}", std::process::id()),
            &["--timeout-base", "120s"],
        )
    })
    .await
    .unwrap();
    let client = support::client().await;
    for test in ["barrier-failing", "barrier-restart"] {
        let ns =
            TestNamespace::with_labels(&client, test, &[(WEBHOOK_LABEL, &cooperative.name)]).await;
        match test {
            "barrier-failing" => a_failing_watch_holds_the_owner(&ns, Wait::Synchronous).await,
            _ => an_apiserver_restart_does_not_release_the_owner(&ns, Wait::Synchronous).await,
        }
    }
    drop(cooperative);
    let standalone = tokio::task::spawn_blocking(|| {
        Syncgc::start(
            &format!("syncgc-barrier-restart-standalone-{}", std::process::id()),
            &["--mode", "standalone"],
        )
    })
    .await
    .unwrap();
    let client = support::client().await;
    for test in ["barrier-failing-standalone", "barrier-restart-standalone"] {
        let ns = TestNamespace::new(&client, test).await;
        support::gc::service_account_ready(&ns).await;
        match test {
            "barrier-failing-standalone" => {
                a_failing_watch_holds_the_owner(&ns, Wait::Foreground).await
            }
            _ => an_apiserver_restart_does_not_release_the_owner(&ns, Wait::Foreground).await,
        }
    }
    drop(standalone);
}

/// The owner waits while the watches fail and relist: the apiserver restarts while the owner
/// waits for a held ConfigMap; right after it answers again, a held Secret is created and
/// the ConfigMap let go. The owner stays while the Secret exists, and goes once it is let go.
async fn an_apiserver_restart_does_not_release_the_owner(ns: &TestNamespace, wait: Wait) {
    let owner = wait.owner(ns, "owner").await;
    let configmaps = ns.api::<ConfigMap>();
    create(&configmaps, &held("first", vec![owner_ref(&owner, true)])).await;
    wait.delete(ns, "owner").await;
    eventually("the first dependent is being deleted", WAIT, || {
        being_deleted(&configmaps, "first")
    })
    .await;
    restart_apiserver();
    let secrets = ns.api::<Secret>();
    create(&secrets, &held_secret("second", owner_ref(&owner, true))).await;
    clear_finalizers(&configmaps, "first").await;
    held_then_let_go(
        ns,
        &secrets,
        "second",
        "the Secret created as the watches recover",
    )
    .await;
}

/// Restarts kube-apiserver (`hack/cluster.sh restart-apiserver`): every watch ends and is
/// established again. The tests of this binary run one at a time, so no other test sees it.
fn restart_apiserver() {
    cluster_sh(&["restart-apiserver"], &[]);
}

/// The owner stays while a held dependent of that kind exists (created and deleted at
/// v1, which needs no conversion), and goes once it is let go and the watch recovers.
async fn a_failing_watch_holds_the_owner(ns: &TestNamespace, wait: Wait) {
    let (_crd, things) = unconvertible_kind(ns).await;
    let _held = Unhold(format!("things.v1.{}", things.group), ns.name.clone());
    let owner = wait.owner(ns, "owner").await;
    let api = dynamic(ns, &things);
    create_as(
        &api,
        &things,
        json!({ "metadata": { "name": "t", "finalizers": [HOLD],
            "ownerReferences": [owner_ref(&owner, true)] } }),
    )
    .await;
    wait.delete(ns, "owner").await;
    let configmaps = ns.api::<ConfigMap>();
    stays(
        "the owner waits while the watch of its dependent's kind fails",
        Duration::from_secs(4),
        || exists(&configmaps, "owner"),
    )
    .await;
    // `syncgc explain` cannot read that kind either; it says the barrier holds the owner.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args(["explain", "configmap/owner", "-n", &ns.name])
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("held only by syncgc's release barrier")
            && text.contains("before releasing, waiting for"),
        "{text}"
    );
    delete(&api, "t", &DeleteParams::background()).await;
    clear_finalizers(&api, "t").await;
    eventually("the owner goes", WAIT, || gone(&configmaps, "owner")).await;
}

/// Lets the held object `t` of resource `.0` in namespace `.1` go when dropped (also when the
/// test fails), so that neither its namespace nor its CRD stays behind.
struct Unhold(String, String);

impl Drop for Unhold {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args(["patch", &self.0, "t", "-n", &self.1, "--type", "merge"])
            .args(["-p", r#"{"metadata":{"finalizers":null}}"#])
            .env("KUBECONFIG", kubeconfig_path())
            .output();
    }
}
