//! Upgrading never disarms: the chart installed by the real helm on the real apiserver, syncgc
//! running beside it as its replica (registering itself into the chart's webhook configuration
//! and keeping its certificate in the chart's Secret, as its pods do), a tree armed and an owner
//! caught waiting; then `helm upgrade` to another version of the chart with other values.
//! What syncgc wrote (the webhooks and their CA bundle, the Secret's data) is as it was, every
//! armed object is still armed, the waiting owner still waits and goes once its dependent does,
//! and a new object is armed.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use syncgc::names::SYNCHRONOUS_FINALIZER;

use support::chart::{CHART, helm, tool};
use support::process::{Syncgc, TEST_TIMEOUTS, free_port};
use support::{
    TestNamespace, being_deleted, clear_finalizers, create, delete, eventually, exists, gone,
    kubeconfig_path, opted_in, owner_and_held, owner_ref,
};

const WAIT: Duration = Duration::from_secs(60);

/// A copy of the chart in `dir` at `version` (the chart's and the app's).
fn chart_at(dir: &Path, version: &str) -> String {
    let copy = dir.join(version);
    let copied = Command::new("cp")
        .args(["-r", CHART])
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success());
    let manifest = copy.join("Chart.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let text: String = text
        .lines()
        .map(|line| match line.split_once(':') {
            Some(("version", _)) => format!("version: {version}"),
            Some(("appVersion", _)) => format!("appVersion: \"{version}\""),
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&manifest, text).unwrap();
    copy.display().to_string()
}

/// The webhooks' names and CA bundles in the configuration `name`.
async fn webhooks(client: &kube::Client, name: &str) -> Vec<(String, Vec<u8>)> {
    let configuration = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await
        .unwrap();
    configuration
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| (w.name, w.client_config.ca_bundle.unwrap_or_default().0))
        .collect()
}

async fn secret_data(api: &Api<Secret>, name: &str) -> Value {
    json!(api.get(name).await.unwrap().data)
}

fn armed(object: &ConfigMap) -> bool {
    object
        .finalizers()
        .iter()
        .any(|f| f == SYNCHRONOUS_FINALIZER)
}

#[tokio::test]
async fn an_upgrade_keeps_every_armed_object_armed() {
    let _alone = support::process::alone().await;
    let client = support::client().await;
    let release_ns = TestNamespace::new(&client, "upgrade-release").await;
    let release = format!("up{}", std::process::id());
    let fullname = format!("{release}-syncgc");
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (chart_at(dir.path(), "0.1.0"), chart_at(dir.path(), "0.2.0"));
    let ns_flag = ["--namespace", &release_ns.name];

    helm(&[&["install", &release, &first][..], &ns_flag].concat());
    let uninstall = Uninstall {
        release: release.clone(),
        namespace: release_ns.name.clone(),
    };
    // Its pods cannot run here (no kubelets): a replica runs beside them, registering itself
    // into the chart's configuration by URL (a Service cannot route to this machine's
    // loopback) and keeping its certificate in the chart's Secret.
    let port = free_port();
    let url = format!("https://127.0.0.1:{}/mutate", port.port());
    let secret = format!("{}/{fullname}-webhook-tls", release_ns.name);
    let port = port.to_string();
    let mut args = vec![
        "--manage-webhook",
        "--webhook-url",
        &url,
        "--webhook-config-name",
        &fullname,
        "--tls-secret",
        &secret,
        "--webhook-addr",
        &port,
    ];
    args.extend(TEST_TIMEOUTS);
    let mut syncgc = Syncgc::start_async(&fullname, &args).await;
    let secrets = release_ns.api::<Secret>();
    let tls = format!("{fullname}-webhook-tls");
    let registered = eventually("syncgc registers its webhooks", WAIT, || async {
        let webhooks = webhooks(&client, &fullname).await;
        webhooks
            .iter()
            .all(|(_, bundle)| !bundle.is_empty())
            .then_some(webhooks)
            .filter(|w| !w.is_empty())
    })
    .await;
    let certificate = secret_data(&secrets, &tls).await;

    let ns = TestNamespace::new(&client, "upgrade").await;
    let api = ns.api::<ConfigMap>();
    let waiting = owner_and_held(&api, &opted_in("waiting", vec![], &[])).await;
    let idle = create(&api, &opted_in("idle", vec![], &[])).await;
    let middle = create(&api, &opted_in("middle", vec![owner_ref(&idle, true)], &[])).await;
    for object in [&waiting, &idle, &middle] {
        assert!(armed(object), "{} armed", object.name_any());
    }
    delete(&api, "waiting", &Default::default()).await;
    eventually("the owner is being deleted", WAIT, || {
        being_deleted(&api, "waiting")
    })
    .await;

    // Another version of the chart, with other values.
    helm(
        &[
            &["upgrade", &release, &second][..],
            &ns_flag,
            &["--set", "replicas=3", "--set", "webhook.timeoutSeconds=5"],
        ]
        .concat(),
    );
    let deployment = Api::<Deployment>::namespaced(client.clone(), &release_ns.name)
        .get(&fullname)
        .await
        .unwrap();
    assert_eq!(
        deployment.labels().get("helm.sh/chart").map(String::as_str),
        Some("syncgc-0.2.0"),
        "upgraded"
    );
    assert_eq!(deployment.spec.unwrap().replicas, Some(3));

    // What syncgc wrote is as it was: helm owns only what the chart says.
    assert_eq!(webhooks(&client, &fullname).await, registered);
    assert_eq!(secret_data(&secrets, &tls).await, certificate);
    for name in ["idle", "middle"] {
        assert!(armed(&api.get(name).await.unwrap()), "{name} still armed");
    }
    assert!(exists(&api, "waiting").await, "the owner still waits");
    let after = create(&api, &opted_in("after", vec![], &[])).await;
    assert!(
        armed(&after),
        "an object created after the upgrade is armed"
    );
    clear_finalizers(&api, "held").await;
    eventually(
        "the waiting owner goes once its dependent does",
        WAIT,
        || gone(&api, "waiting"),
    )
    .await;

    tokio::task::spawn_blocking(move || syncgc.stop())
        .await
        .unwrap();
    drop(uninstall);
}

/// `helm uninstall` without its hook (its Job cannot run here), when the test ends.
struct Uninstall {
    release: String,
    namespace: String,
}

impl Drop for Uninstall {
    fn drop(&mut self) {
        let _ = Command::new(tool("helm"))
            .args(["uninstall", &self.release, "--no-hooks"])
            .args(["--namespace", &self.namespace])
            .env("KUBECONFIG", kubeconfig_path())
            .output();
    }
}
