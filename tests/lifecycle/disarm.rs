//! `syncgc disarm`, as an uninstall runs it: refused while syncgc runs; once it is stopped, a
//! dry run lists the armed objects and changes nothing, and the real run takes syncgc's
//! finalizer and label off each of them (a tree among them), releasing an owner caught
//! waiting for a dependent, and leaves everything else alone; the namespace can then go.

use crate::support;

use std::process::Output;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::DeleteParams;
use syncgc::names::{ARMED_LABEL, SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER};

use support::process::{Syncgc, TEST_TIMEOUTS, WEBHOOK_LABEL};
use support::{
    HOLD, TestNamespace, being_deleted, clear_finalizers, config_map, create, delete, eventually,
    gone, opted_in, owner_and_held, owner_ref, with_finalizer,
};

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `syncgc disarm` for the syncgc process `name`, with `args` besides.
fn disarm(name: &str, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args(["disarm", "--kubeconfig", &support::kubeconfig_path()])
        .args(["--leader-election-namespace", "syncgc-system"])
        .args([
            "--leader-election-lease",
            name,
            "--webhook-config-name",
            name,
        ])
        .args(args)
        .output()
        .expect("running syncgc disarm")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn disarm_refuses_while_syncgc_runs_then_releases_every_armed_object() {
    let _alone = support::process::alone().await;
    let name = format!("syncgc-disarm-{}", std::process::id());
    let mut syncgc = Syncgc::start_async(&name, &TEST_TIMEOUTS).await;
    let client = support::client().await;
    let ns = TestNamespace::with_labels(&client, "disarm", &[(WEBHOOK_LABEL, &name)]).await;
    let api = ns.api::<ConfigMap>();
    let owner = owner_and_held(&api, &opted_in("owner", vec![], &[])).await;
    assert_eq!(owner.finalizers(), [SYNCHRONOUS_FINALIZER]);
    let idle = create(&api, &opted_in("idle", vec![], &[])).await;
    assert_eq!(
        idle.labels().get(ARMED_LABEL).map(String::as_str),
        Some("true")
    );
    // A tree below it: an armed dependent, and a plain one below that.
    let middle = create(&api, &opted_in("middle", vec![owner_ref(&idle, true)], &[])).await;
    create(&api, &config_map("leaf", vec![owner_ref(&middle, true)])).await;
    create(&api, &with_finalizer(config_map("plain", vec![]), HOLD)).await;
    delete(&api, "owner", &DeleteParams::background()).await;
    eventually("syncgc deletes the dependent", WAIT, || {
        being_deleted(&api, "held")
    })
    .await;

    let refused = disarm(&name, &["-n", &ns.name]);
    assert!(!refused.status.success(), "{}", text(&refused.stdout));
    assert!(
        text(&refused.stderr).contains("holds the leader Lease"),
        "{}",
        text(&refused.stderr)
    );
    assert!(api.get("owner").await.is_ok(), "nothing changed");

    tokio::task::spawn_blocking(move || {
        syncgc.stop();
        syncgc
    })
    .await
    .unwrap();
    let listed = disarm(&name, &["-n", &ns.name, "--dry-run"]);
    let out = text(&listed.stdout);
    assert!(listed.status.success(), "{out}{}", text(&listed.stderr));
    let at = |object: &str| format!("configmaps {}/{object}", ns.name);
    assert!(
        out.contains(&format!(
            "would disarm {} (being deleted: released)",
            at("owner")
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("would disarm {}\n", at("idle"))),
        "{out}"
    );
    assert!(
        out.contains(&format!("would disarm {}\n", at("middle"))),
        "{out}"
    );
    assert!(
        !out.contains("plain") && !out.contains("held") && !out.contains("leaf"),
        "{out}"
    );
    assert!(out.contains("would disarm 3 object(s)"), "{out}");
    assert_eq!(
        api.get("owner").await.unwrap().finalizers(),
        [SYNCHRONOUS_FINALIZER],
        "a dry run changes nothing"
    );

    let done = disarm(&name, &["-n", &ns.name]);
    let out = text(&done.stdout);
    assert!(done.status.success(), "{out}{}", text(&done.stderr));
    assert!(out.contains("disarmed 3 object(s)"), "{out}");
    eventually("the waiting owner is released", WAIT, || {
        gone(&api, "owner")
    })
    .await;
    let idle = api.get("idle").await.unwrap();
    assert!(idle.finalizers().is_empty(), "{:?}", idle.finalizers());
    assert!(!idle.labels().contains_key(ARMED_LABEL));
    assert!(
        idle.annotations().contains_key(SYNCHRONOUS_ANNOTATION),
        "the opt-in stays for a later install"
    );
    assert_eq!(api.get("plain").await.unwrap().finalizers(), [HOLD]);
    assert_eq!(api.get("held").await.unwrap().finalizers(), [HOLD]);

    let again = disarm(&name, &["-n", &ns.name]);
    assert!(again.status.success());
    assert!(text(&again.stdout).contains("disarmed 0 object(s)"));
    // Nothing of syncgc's is left anywhere in the namespace.
    for object in api.list(&Default::default()).await.unwrap() {
        assert!(
            !object
                .finalizers()
                .iter()
                .any(|f| f == SYNCHRONOUS_FINALIZER)
                && !object.labels().contains_key(ARMED_LABEL),
            "{:?}",
            object.metadata
        );
    }

    // With the test's own finalizers let go, deleting the namespace completes.
    clear_finalizers(&api, "held").await;
    clear_finalizers(&api, "plain").await;
    let namespaces = kube::Api::<Namespace>::all(client.clone());
    delete(&namespaces, &ns.name, &DeleteParams::background()).await;
    eventually(
        "the namespace is gone",
        std::time::Duration::from_secs(60),
        || gone(&namespaces, &ns.name),
    )
    .await;
}
