//! The deployment manifests (`manifests/`, a kustomize base) against the real apiserver: every
//! built-in kind is accepted (server-side dry run), the webhook configuration is the one
//! `syncgc webhook-config` makes, and syncgc runs with the manifests' ServiceAccount and RBAC,
//! not the admin's credentials.

mod support;

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::api::DeleteParams;
use kube::config::Kubeconfig;
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_json::{Value, json};

use support::process::{Syncgc, WEBHOOK_LABEL};
use support::{
    TestNamespace, config_map, create, eventually, gone, held, kubeconfig_path, kubectl, opted_in,
    owner_ref,
};

const MANIFESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests");
/// The overlay for clusters that do not serve `matchConditions`.
const BEFORE_1_28: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/manifests/overlays/before-1.28"
);
/// Kinds whose CRDs (cert-manager, Prometheus Operator) the local control plane does not have.
const NOT_BUILT_IN: [&str; 2] = ["cert-manager.io/", "monitoring.coreos.com/"];

/// The kustomize build of `dir`, as JSON objects.
fn built(dir: &str) -> Vec<Value> {
    let yaml = kubectl(&["kustomize", dir], None);
    serde_yaml::Deserializer::from_str(&yaml)
        .map(|document| Value::deserialize(document).expect("kustomize writes YAML"))
        .collect()
}

#[test]
fn the_apiserver_accepts_every_built_in_object() {
    support::syncgc_namespace();
    let objects = if support::server().match_conditions() {
        built(MANIFESTS)
    } else {
        built(BEFORE_1_28)
    };
    let kinds: Vec<String> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect();
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "MutatingWebhookConfiguration",
        "Issuer",
        "Certificate",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} in {kinds:?}");
    }
    let built_in: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            !NOT_BUILT_IN
                .iter()
                .any(|g| o["apiVersion"].as_str().unwrap().starts_with(g))
        })
        .collect();
    // PodDisruptionBudgets are policy/v1 from Kubernetes 1.21 on (and only that from 1.25);
    // an older apiserver checks the same object as policy/v1beta1.
    let served = kubectl(&["api-versions"], None);
    let built_in: Vec<Value> = built_in
        .into_iter()
        .map(|o| {
            let mut o = o.clone();
            if o["apiVersion"] == "policy/v1" && !served.lines().any(|v| v == "policy/v1") {
                o["apiVersion"] = json!("policy/v1beta1");
            }
            o
        })
        .collect();
    let list = json!({ "apiVersion": "v1", "kind": "List", "items": built_in });
    let out = kubectl(
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&list.to_string()),
    );
    assert_eq!(out.lines().count(), built_in.len(), "{out}");
}

/// `manifests/` is what `syncgc webhook-config` makes for Kubernetes 1.28 and later, its
/// overlay `before-1.28` what it makes for older servers.
#[test]
fn the_webhook_manifest_is_what_syncgc_webhook_config_makes() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args(["certs", "--out"])
        .arg(dir.path())
        .args(["--dns", "syncgc-webhook.syncgc-system.svc"])
        .status()
        .unwrap();
    assert!(status.success());
    for (manifests, version) in [
        (MANIFESTS, "1.28"),
        (MANIFESTS, "1.34"),
        (BEFORE_1_28, "1.20"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
            .args(["webhook-config", "--url", "https://unused/mutate"])
            .args(["--server-version", version, "--ca-file"])
            .arg(dir.path().join("ca.crt"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut made: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut manifest = built(manifests)
            .into_iter()
            .find(|o| o["kind"] == "MutatingWebhookConfiguration")
            .unwrap();
        for hooks in [&mut made["webhooks"], &mut manifest["webhooks"]] {
            for hook in hooks.as_array_mut().unwrap() {
                hook.as_object_mut().unwrap().remove("clientConfig");
            }
        }
        assert_eq!(
            manifest["webhooks"], made["webhooks"],
            "{manifests} for {version}"
        );
        assert_eq!(manifest["metadata"]["name"], made["metadata"]["name"]);
    }
}

/// A kubeconfig for the manifests' ServiceAccount `syncgc-system/syncgc`.
async fn service_account_kubeconfig(client: &kube::Client, dir: &std::path::Path) -> String {
    let objects = built(MANIFESTS);
    let wanted = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ];
    let items: Vec<&Value> = objects
        .iter()
        .filter(|o| wanted.contains(&o["kind"].as_str().unwrap()))
        .collect();
    kubectl(
        &["apply", "-f", "-"],
        Some(&json!({ "apiVersion": "v1", "kind": "List", "items": items }).to_string()),
    );

    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), "syncgc-system");
    let secret = eventually(
        "the ServiceAccount has a token",
        Duration::from_secs(60),
        || async {
            let account = accounts.get("syncgc").await.ok()?;
            account.secrets?.first()?.name.clone()
        },
    )
    .await;
    let token = Api::<Secret>::namespaced(client.clone(), "syncgc-system")
        .get(&secret)
        .await
        .unwrap()
        .data
        .unwrap()["token"]
        .clone();
    let admin = Kubeconfig::read_from(kubeconfig_path()).unwrap();
    let cluster = admin.clusters[0].cluster.clone().unwrap();
    let config = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "syncgc",
        "clusters": [{ "name": "local", "cluster": {
            "server": cluster.server,
            "certificate-authority-data": cluster.certificate_authority_data,
        }}],
        "users": [{ "name": "syncgc", "user": { "token": String::from_utf8(token.0).unwrap() } }],
        "contexts": [{ "name": "syncgc", "context": { "cluster": "local", "user": "syncgc" } }],
    });
    let path = dir.join("syncgc.kubeconfig");
    std::fs::write(&path, config.to_string()).unwrap();
    path.display().to_string()
}

/// Synchronous deletion end to end with only the permissions the manifests grant; and a
/// permission syncgc does not need (creating objects) is not granted.
#[tokio::test]
async fn syncgc_runs_with_the_manifests_service_account() {
    support::syncgc_namespace();
    let client = support::client().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = service_account_kubeconfig(&client, dir.path()).await;
    let name = format!("syncgc-rbac-{}", std::process::id());
    let syncgc = {
        let (name, kubeconfig) = (name.clone(), kubeconfig.clone());
        tokio::task::spawn_blocking(move || Syncgc::start_as(&name, &kubeconfig, &[]))
            .await
            .unwrap()
    };
    let ns = TestNamespace::with_labels(&client, "rbac", &[(WEBHOOK_LABEL, &syncgc.name)]).await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    assert_eq!(owner.finalizers(), [syncgc::names::SYNCHRONOUS_FINALIZER]);
    create(&api, &held("held", vec![owner_ref(&owner, true)])).await;
    for i in 0..3 {
        create(
            &api,
            &config_map(&format!("d{i}"), vec![owner_ref(&owner, true)]),
        )
        .await;
    }
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    for i in 0..3 {
        let name = format!("d{i}");
        eventually(
            "syncgc deletes the dependents",
            Duration::from_secs(60),
            || gone(&api, &name),
        )
        .await;
    }
    assert!(
        gone(&api, "owner").await.is_none(),
        "the owner waits for the held dependent"
    );
    support::clear_finalizers(&api, "held").await;
    eventually("the owner is released", Duration::from_secs(60), || {
        gone(&api, "owner")
    })
    .await;
    let log = std::fs::read_to_string(std::env::temp_dir().join(format!("{name}.log"))).unwrap();
    // RBAC denials name the account ("… system:serviceaccount:… cannot list resource …").
    let denied: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("system:serviceaccount:syncgc-system:syncgc") && l.contains("cannot")
        })
        .collect();
    assert!(denied.is_empty(), "calls were refused: {denied:#?}");

    let config = syncgc::api::config(Some(kubeconfig.as_ref()))
        .await
        .unwrap();
    let as_syncgc = Api::<ConfigMap>::namespaced(syncgc::api::client(config).unwrap(), &ns.name);
    match as_syncgc
        .create(&Default::default(), &config_map("not-allowed", vec![]))
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("syncgc's account may create objects: {other:?}"),
    }
}
