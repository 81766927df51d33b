//! Uninstalling never strands an object: the chart's objects installed on the real apiserver,
//! syncgc running as their replica, a tree armed and an owner caught waiting; then what
//! `helm uninstall` does — the pre-delete hook Job's command with the Job's ServiceAccount,
//! then the release's objects deleted. Nothing keeps `syncgc.io/synchronous` and the namespace
//! deletes. The Job of `manifests/uninstall/` is the same command.

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use syncgc::names::SYNCHRONOUS_FINALIZER;

use support::chart::{is_hook, template};
use support::process::{Syncgc, TEST_TIMEOUTS, WEBHOOK_LABEL};
use support::{
    TestNamespace, being_deleted, clear_finalizers, config_map, create, delete, eventually, gone,
    kubectl, opted_in, owner_and_held, owner_ref,
};

const WAIT: Duration = Duration::from_secs(60);

fn list(items: &[&Value]) -> String {
    json!({ "apiVersion": "v1", "kind": "List", "items": items }).to_string()
}

#[tokio::test]
async fn uninstalling_the_chart_leaves_no_object_armed() {
    let _alone = support::process::alone().await;
    let client = support::client().await;
    // Rendered for this apiserver, as `helm install` renders for the cluster it talks to.
    let server = support::server();
    let version = format!("{}.{}.0", server.major, server.minor);
    let objects = template(&["--kube-version", &version]);
    let (hooks, installed): (Vec<&Value>, Vec<&Value>) = objects.iter().partition(|o| is_hook(o));
    let job = hooks
        .iter()
        .find(|o| o["kind"] == "Job")
        .expect("the chart has a hook Job");
    assert_eq!(
        job["metadata"]["annotations"]["helm.sh/hook"], "pre-delete",
        "{job:#}"
    );
    let pod = &job["spec"]["template"]["spec"];
    let account = pod["serviceAccountName"]
        .as_str()
        .expect("a ServiceAccount");
    let args: Vec<String> = pod["containers"][0]["args"]
        .as_array()
        .expect("the Job's args")
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(args[0], "disarm", "{args:?}");
    // kubectl users get the same Job.
    let manifest = support::chart::parse(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/manifests/uninstall/job.yaml"
        ))
        .unwrap(),
    );
    assert_eq!(
        manifest[0]["spec"]["template"]["spec"]["containers"][0]["args"],
        pod["containers"][0]["args"]
    );

    // `helm install`: the namespace (--create-namespace), then the chart's objects.
    support::syncgc_namespace();
    kubectl(
        &[
            "delete",
            "mutatingwebhookconfiguration",
            "syncgc",
            "--ignore-not-found",
        ],
        None,
    );
    kubectl(&["apply", "-f", "-"], Some(&list(&installed)));
    // Its pods cannot run here (no kubelets): syncgc runs beside them as their replica would,
    // with the chart's Lease and webhook configuration (registered by URL: a Service cannot
    // route to this machine's loopback).
    let mut syncgc = Syncgc::start_async("syncgc", &TEST_TIMEOUTS).await;
    let ns = TestNamespace::with_labels(&client, "uninstall", &[(WEBHOOK_LABEL, "syncgc")]).await;
    let api = ns.api::<ConfigMap>();
    let waiting = owner_and_held(&api, &opted_in("waiting", vec![], &[])).await;
    let idle = create(&api, &opted_in("idle", vec![], &[])).await;
    let middle = create(&api, &opted_in("middle", vec![owner_ref(&idle, true)], &[])).await;
    create(&api, &config_map("leaf", vec![owner_ref(&middle, true)])).await;
    for object in [&waiting, &idle, &middle] {
        assert_eq!(object.finalizers(), [SYNCHRONOUS_FINALIZER], "armed");
    }
    delete(&api, "waiting", &Default::default()).await;
    eventually("the owner is being deleted", WAIT, || {
        being_deleted(&api, "waiting")
    })
    .await;

    // `helm uninstall`: the pre-delete hook's command, with the Job's ServiceAccount.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig =
        support::service_account_kubeconfig("syncgc-system", account, dir.path()).await;
    let hook = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args(&args)
        .args(["--kubeconfig", &kubeconfig])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // As the kubelet would: once the Deployment is scaled to zero, its replica stops.
    let deployments = Api::<Deployment>::namespaced(client.clone(), "syncgc-system");
    eventually("the hook scales syncgc to zero", WAIT, || async {
        let deployment = deployments.get("syncgc").await.ok()?;
        (deployment.spec?.replicas == Some(0)).then_some(())
    })
    .await;
    syncgc.stop();
    let out = tokio::task::spawn_blocking(move || hook.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains("scaled the Deployment syncgc-system/syncgc to 0"),
        "{printed}"
    );
    assert!(printed.contains("disarmed"), "{printed}");
    // Then helm deletes the release's objects.
    kubectl(
        &["delete", "-f", "-", "--ignore-not-found", "--wait=false"],
        Some(&list(&installed)),
    );

    // Nothing keeps syncgc's finalizer: the waiting owner is released.
    eventually("the waiting owner is released", WAIT, || {
        gone(&api, "waiting")
    })
    .await;
    for name in ["idle", "middle", "leaf"] {
        let object = api.get(name).await.unwrap();
        assert!(
            !object
                .finalizers()
                .iter()
                .any(|f| f == SYNCHRONOUS_FINALIZER),
            "{name} still armed"
        );
    }
    // And the namespace deletes (the test's own hold let go).
    clear_finalizers(&api, "held").await;
    let namespaces = Api::<Namespace>::all(client.clone());
    delete(&namespaces, &ns.name, &Default::default()).await;
    eventually("the namespace is deleted", WAIT, || {
        gone(&namespaces, &ns.name)
    })
    .await;
}
