//! The deployment manifests (`manifests/` and its cert-manager overlay) against the real
//! apiserver: every built-in kind is accepted (server-side dry run), and syncgc runs as the
//! manifests deploy it — managing its webhook configuration and its certificate Secret — with
//! the manifests' ServiceAccount and RBAC, not the admin's credentials, and nothing more.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_json::{Value, json};

use support::process::{Syncgc, WEBHOOK_LABEL};
use support::{
    TestNamespace, config_map, create, delete, eventually, gone, held, kubectl, opted_in,
    owner_ref, tree,
};

const MANIFESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests");
/// The install with cert-manager issuing the certificate.
const CERT_MANAGER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/manifests/overlays/cert-manager"
);
/// Kinds whose CRDs (cert-manager, Prometheus Operator) the local control plane does not have.
const NOT_BUILT_IN: [&str; 2] = ["cert-manager.io/", "monitoring.coreos.com/"];

/// The install for Kubernetes 1.20, built by kubectl 1.20.
const KUBERNETES_1_20: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/kubernetes-1.20");

/// A current kubectl (kustomize v5), as users of Kubernetes 1.21 and later run: `SYNCGC_KUBECTL`,
/// else the one `hack/tools.sh` installs (the control plane's own is 1.20's).
fn current_kubectl() -> String {
    std::env::var("SYNCGC_KUBECTL").unwrap_or_else(|_| support::chart::tool("kubectl"))
}

/// The kustomize build of `dir` by the kubectl its users run (1.20's for
/// `manifests/kubernetes-1.20`, a current one otherwise), as JSON objects; the build may not
/// warn.
fn built(dir: &str) -> Vec<Value> {
    let kubectl = if dir == KUBERNETES_1_20 {
        "kubectl".to_owned()
    } else {
        current_kubectl()
    };
    let out = std::process::Command::new(&kubectl)
        .args(["kustomize", dir])
        .output()
        .unwrap_or_else(|err| panic!("{kubectl}: {err}"));
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{kubectl} kustomize {dir}: {warnings}"
    );
    assert!(
        warnings.is_empty(),
        "{kubectl} kustomize {dir} warns: {warnings}"
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    parsed(&yaml)
}

/// The objects of a multi-document YAML stream, as JSON.
fn parsed(yaml: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|document| Value::deserialize(document).expect("kustomize writes YAML"))
        .filter(|object| !object.is_null())
        .collect()
}

/// The kinds of `objects`.
fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect()
}

/// Applies the built-in objects of `objects` with a server-side dry run.
fn dry_run(objects: &[Value]) {
    let built_in: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            !NOT_BUILT_IN
                .iter()
                .any(|g| o["apiVersion"].as_str().unwrap().starts_with(g))
        })
        .collect();
    // PodDisruptionBudgets are policy/v1 from Kubernetes 1.21 on (and only that from 1.25);
    // an older apiserver checks the same object as policy/v1beta1 (what
    // `manifests/kubernetes-1.20` ships).
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

const COMMON: [&str; 11] = [
    "Namespace",
    "ResourceQuota",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Deployment",
    "Service",
    "PodDisruptionBudget",
    "NetworkPolicy",
];

#[test]
fn the_apiserver_accepts_every_built_in_object() {
    let _alone = support::process::alone_blocking();
    support::syncgc_namespace();
    let objects = built(MANIFESTS);
    let found = kinds(&objects);
    for kind in COMMON
        .iter()
        .chain(&["MutatingWebhookConfiguration", "Secret"])
    {
        assert!(found.iter().any(|k| k == kind), "no {kind} in {found:?}");
    }
    for kind in ["Issuer", "Certificate"] {
        assert!(!found.iter().any(|k| k == kind), "{kind} in {found:?}");
    }
    dry_run(&objects);
}

/// The install for Kubernetes 1.20 is the same but for a PodDisruptionBudget 1.20 serves, and
/// the apiserver accepts it as it is; the rendered single files are what the kustomizations
/// build.
#[test]
fn the_install_for_1_20_is_accepted_as_it_is_and_the_rendered_files_are_current() {
    let _alone = support::process::alone_blocking();
    support::syncgc_namespace();
    let objects = built(KUBERNETES_1_20);
    let mut kinds_1_20 = kinds(&objects);
    let mut kinds_current = kinds(&built(MANIFESTS));
    kinds_1_20.sort();
    kinds_current.sort();
    assert_eq!(kinds_1_20, kinds_current);
    let budget = objects
        .iter()
        .find(|o| o["kind"] == "PodDisruptionBudget")
        .unwrap();
    assert_eq!(budget["apiVersion"], "policy/v1beta1");
    let out = kubectl(&["apply", "--dry-run=server", "-k", KUBERNETES_1_20], None);
    assert_eq!(out.lines().count(), objects.len(), "{out}");

    let check = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/install.sh"))
        .arg("--check")
        .env("SYNCGC_KUBECTL", current_kubectl())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let rendered = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/install-1.20.yaml"
    ))
    .unwrap();
    let out = kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&rendered));
    assert_eq!(out.lines().count(), parsed(&rendered).len(), "{out}");
}

/// The uninstall Job (`manifests/uninstall/`, not part of the install) is accepted as it is, in
/// syncgc's namespace with syncgc's ServiceAccount.
#[test]
fn the_apiserver_accepts_the_uninstall_job() {
    let _alone = support::process::alone_blocking();
    support::syncgc_namespace();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/uninstall/job.yaml");
    let objects = parsed(&std::fs::read_to_string(path).unwrap());
    assert_eq!(kinds(&objects), ["Job"]);
    assert_eq!(objects[0]["metadata"]["namespace"], "syncgc-system");
    let pod = &objects[0]["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "syncgc");
    let out = kubectl(&["apply", "--dry-run=server", "-f", path], None);
    assert_eq!(out.lines().count(), 1, "{out}");
}

/// The cert-manager overlay: a Certificate instead of the Secret syncgc keeps, mounted, its
/// CA published by syncgc.
#[test]
fn the_cert_manager_overlay_builds_and_is_accepted() {
    let _alone = support::process::alone_blocking();
    support::syncgc_namespace();
    let objects = built(CERT_MANAGER);
    let found = kinds(&objects);
    for kind in COMMON
        .iter()
        .chain(&["MutatingWebhookConfiguration", "Issuer", "Certificate"])
    {
        assert!(found.iter().any(|k| k == kind), "no {kind} in {found:?}");
    }
    assert!(!found.iter().any(|k| k == "Secret"), "{found:?}");
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
    assert!(env.contains("SYNCGC_WEBHOOK_CA_FILE"), "{env}");
    assert!(!env.contains("SYNCGC_TLS_SECRET"), "{env}");
    dry_run(&objects);
}

/// The value of the environment variable `name` of the Deployment in `objects`.
fn deployment_env(objects: &[Value], name: &str) -> Option<String> {
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment")?;
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
        .map(str::to_owned)
}

/// A kubeconfig for the manifests' ServiceAccount `syncgc-system/syncgc`.
async fn service_account_kubeconfig(dir: &std::path::Path) -> String {
    let objects = built(MANIFESTS);
    let wanted = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "MutatingWebhookConfiguration",
        "Secret",
    ];
    // The webhook configuration and the certificate Secret start empty, as on a fresh install.
    for (kind, name) in [
        ("mutatingwebhookconfiguration", "syncgc"),
        ("secret", "syncgc-webhook-tls"),
    ] {
        kubectl(
            &[
                "delete",
                kind,
                name,
                "-n",
                "syncgc-system",
                "--ignore-not-found",
            ],
            None,
        );
    }
    let items: Vec<&Value> = objects
        .iter()
        .filter(|o| wanted.contains(&o["kind"].as_str().unwrap()))
        .collect();
    kubectl(
        &["apply", "-f", "-"],
        Some(&json!({ "apiVersion": "v1", "kind": "List", "items": items }).to_string()),
    );

    support::service_account_kubeconfig("syncgc-system", "syncgc", dir).await
}

/// syncgc as the manifests deploy it, with only the permissions they grant: it fills in its
/// webhook configuration and its certificate Secret, arms, and collects synchronously end to
/// end, and puts both back when they are deleted; permissions it does not need (creating
/// objects, writing another Secret or webhook configuration) are not granted.
#[tokio::test]
async fn syncgc_runs_with_the_manifests_service_account() {
    let _alone = support::process::alone().await;
    support::syncgc_namespace();
    let client = support::client().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = service_account_kubeconfig(dir.path()).await;
    let name = format!("syncgc-rbac-{}", std::process::id());
    let objects = built(MANIFESTS);
    assert_eq!(
        deployment_env(&objects, "SYNCGC_MANAGE_WEBHOOK").as_deref(),
        Some("true")
    );
    let secret = deployment_env(&objects, "SYNCGC_TLS_SECRET").expect("SYNCGC_TLS_SECRET");
    // The Service cannot route to a process outside the cluster: a URL stands in for it.
    let webhook = support::process::free_port();
    let syncgc = {
        let (name, kubeconfig, secret) = (name.clone(), kubeconfig.clone(), secret.clone());
        tokio::task::spawn_blocking(move || {
            let url = format!("https://{webhook}/mutate");
            let addr = webhook.to_string();
            let args = [
                "--manage-webhook",
                "--webhook-config-name",
                "syncgc",
                "--webhook-url",
                &url,
                "--webhook-addr",
                &addr,
                "--tls-secret",
                &secret,
            ];
            Syncgc::start_as(&name, &kubeconfig, &args)
        })
        .await
        .unwrap()
    };
    let ns = TestNamespace::with_labels(&client, "rbac", &[(WEBHOOK_LABEL, &syncgc.name)]).await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    assert_eq!(owner.finalizers(), [syncgc::names::SYNCHRONOUS_FINALIZER]);
    create(&api, &held("held", vec![owner_ref(&owner, true)])).await;
    tree(&api, &owner, &[("d", 3)], true).await;
    delete(&api, "owner", &DeleteParams::background()).await;
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
    forbidden(
        "create objects",
        as_syncgc
            .create(&Default::default(), &config_map("not-allowed", vec![]))
            .await
            .map(drop),
    );
    let as_syncgc_client = as_syncgc.into_client();
    let other_secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "syncgc-other" }, "data": { "k": "dg==" } }))
    .unwrap();
    forbidden(
        "create a Secret outside its namespace",
        Api::<Secret>::namespaced(as_syncgc_client.clone(), &ns.name)
            .create(&Default::default(), &other_secret)
            .await
            .map(drop),
    );
    let secrets = Api::<Secret>::namespaced(as_syncgc_client.clone(), "syncgc-system");
    not_replaced(&secrets, &other_secret, "Secret").await;
    let configurations = Api::<MutatingWebhookConfiguration>::all(as_syncgc_client);
    let other: MutatingWebhookConfiguration =
        serde_json::from_value(json!({ "metadata": { "name": "syncgc-other" } })).unwrap();
    not_replaced(&configurations, &other, "webhook configuration").await;
    // Its own: filled in, and the Secret's CA is what the configuration publishes.
    let (namespace, secret_name) = secret.split_once('/').unwrap();
    let stored = Api::<Secret>::namespaced(client.clone(), namespace);
    let published_ca = || async {
        let ca = stored
            .get_opt(secret_name)
            .await
            .unwrap()?
            .data?
            .remove("ca.crt")?;
        let own = configurations.get_opt("syncgc").await.unwrap()?;
        let webhooks = own.webhooks.filter(|w| !w.is_empty())?;
        webhooks
            .iter()
            .all(|w| w.client_config.ca_bundle.as_ref() == Some(&ca))
            .then_some(ca)
    };
    let ca = published_ca().await.expect("the Secret's CA is published");

    // Deleted by hand, both come back, and the webhook arms with the new certificate.
    kubectl(&["delete", "secret", secret_name, "-n", namespace], None);
    kubectl(&["delete", "mutatingwebhookconfiguration", "syncgc"], None);
    let new_ca = eventually(
        "the Secret and the configuration are put back",
        Duration::from_secs(30),
        published_ca,
    )
    .await;
    assert_ne!(new_ca, ca, "a new CA");
    let mut attempt = 0;
    eventually("the webhook arms again", Duration::from_secs(30), || {
        attempt += 1;
        let name = format!("again-{attempt}");
        let api = &api;
        async move {
            let made = api
                .create(&Default::default(), &opted_in(&name, vec![], &[]))
                .await
                .ok()?;
            (made.finalizers() == [syncgc::names::SYNCHRONOUS_FINALIZER]).then_some(())
        }
    })
    .await;
    drop(syncgc);
}

/// `result` is the apiserver's 403: syncgc's account may not `what`.
fn forbidden(what: &str, result: Result<(), kube::Error>) {
    match result {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{what}: {status:?}"),
        other => panic!("syncgc's account may {what}: {other:?}"),
    }
}

/// syncgc's account may not replace `object` (a `what`), its name being another than the one
/// it manages.
async fn not_replaced<K>(api: &Api<K>, object: &K, what: &str)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    forbidden(
        &format!("update another {what}"),
        api.replace(&object.name_any(), &Default::default(), object)
            .await
            .map(drop),
    );
}
