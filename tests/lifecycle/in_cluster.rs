//! syncgc as users run it: its image (built from this checkout by `hack/image.sh`, with no
//! registry) on the local cluster's real node, installed by its chart and by its manifests.
//! The apiserver reaches the webhook through the Service (at the Pods' endpoints), `syncgc
//! check` passes every line from outside and, as `helm test`, from inside the cluster; the
//! aggregation layer reaches syncgc's API at the Pods (the manifests'); a
//! rolling upgrade with an owner waiting neither releases it early nor strands it; and each
//! uninstall runs its Job's Pod, which leaves no object armed and nothing of syncgc behind.
//!
//! The tests run one at a time ([`support::process::alone`]): they install the same
//! cluster-wide names.

use crate::support;

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use syncgc::names::SYNCHRONOUS_FINALIZER;

use support::chart::{CHART, hack, helm};
use support::{
    TestNamespace, being_deleted, clear_finalizers, create, delete, eventually, exists, gone,
    kubeconfig_path, kubectl, opted_in, owner_and_held, syncgc_json,
};

const NAMESPACE: &str = "syncgc-system";
const VALUES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/local-node/values.yaml");
/// The kustomization of the local node's image: `manifests/kubernetes-1.20`, or on 1.21 and
/// later `manifests/`.
fn overlay() -> &'static str {
    if support::server().minor >= 21 {
        concat!(env!("CARGO_MANIFEST_DIR"), "/hack/local-node/current")
    } else {
        concat!(env!("CARGO_MANIFEST_DIR"), "/hack/local-node")
    }
}
const UNINSTALL_JOB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/uninstall/job.yaml");
/// How the tests install the chart. Earlier tests leave syncgc's RBAC in its namespace (as a
/// user's earlier install would): the release takes it over.
const INSTALL: [&str; 6] = [
    "--namespace",
    NAMESPACE,
    "-f",
    VALUES,
    "--take-ownership",
    "--force-conflicts",
];
/// Pods start, and stop, on a real node: image already there, a few seconds each.
const ROLLOUT: Duration = Duration::from_secs(180);

/// syncgc's image with this test binary's syncgc, imported into the node (once per binary).
fn image() -> &'static str {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| {
        hack(
            "image.sh",
            &[],
            &[("SYNCGC_BINARY", env!("CARGO_BIN_EXE_syncgc"))],
        )
    })
}

/// `syncgc ARGS` from this machine, with the admin kubeconfig: whether it succeeded, and what
/// it printed.
fn syncgc(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .expect("running syncgc");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// syncgc's namespace, labelled with its name as the apiserver labels it from 1.21 on (the
/// webhook's namespace exclusions select on that label); once an earlier test's is gone.
async fn labelled_namespace(client: &Client) {
    let namespaces = Api::<Namespace>::all(client.clone());
    eventually("an earlier syncgc namespace is gone", ROLLOUT, || async {
        let found = namespaces.get_opt(NAMESPACE).await.ok()?;
        let terminating = found.is_some_and(|n| n.metadata.deletion_timestamp.is_some());
        (!terminating).then_some(())
    })
    .await;
    let _ = Command::new("kubectl")
        .args(["create", "namespace", NAMESPACE])
        .env("KUBECONFIG", kubeconfig_path())
        .output();
    kubectl(
        &[
            "label",
            "namespace",
            NAMESPACE,
            &format!("kubernetes.io/metadata.name={NAMESPACE}"),
            "--overwrite",
        ],
        None,
    );
}

/// Whether `name` carries syncgc's finalizer.
async fn armed(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get(name)
        .await
        .unwrap()
        .finalizers()
        .iter()
        .any(|f| f == SYNCHRONOUS_FINALIZER)
}

/// Waits until syncgc's Deployment has `replicas` Pods ready, all of its current template.
async fn rolled_out(client: &Client, replicas: i32) {
    let deployments = Api::<Deployment>::namespaced(client.clone(), NAMESPACE);
    eventually("syncgc's Deployment is rolled out", ROLLOUT, || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get("syncgc").await.ok()?;
            let status = d.status?;
            let current = status.observed_generation? >= d.metadata.generation?
                && status.updated_replicas? == replicas
                && status.ready_replicas? == replicas
                && status.replicas? == replicas;
            current.then_some(())
        }
    })
    .await;
}

/// `syncgc check` from outside the cluster: every line ✓, the metrics read through the
/// apiserver's proxy to the leader's Pod. It waits for a leader: the Lease may still name a
/// Pod of an earlier install or of the last rollout, which the new replicas take over only
/// once it has not changed for its duration.
fn checks_pass() {
    let (ok, out) = syncgc(&["check", "--wait", "60s"]);
    assert!(ok, "syncgc check failed:\n{out}");
    assert!(!out.contains('✗'), "{out}");
    for line in [
        "✓ deployment",
        "✓ leader",
        "✓ webhook",
        "✓ certificate",
        "✓ admission",
        "✓ metrics",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
}

/// The apiserver reaches the webhook through the Service: `object`, opted in, comes back armed
/// from its CREATE.
fn came_back_armed(object: &ConfigMap) {
    assert!(
        object
            .finalizers()
            .iter()
            .any(|f| f == SYNCHRONOUS_FINALIZER),
        "{} came back unarmed from its CREATE: the apiserver did not reach the webhook",
        object.name_any()
    );
}

/// syncgc's API, through the aggregation layer to the Pods (once syncgc has published its CA
/// bundle in the APIService): `syncgc plan` of the ConfigMap `name` of `namespace` is made by
/// the running syncgc.
async fn served_by_the_pods(namespace: &str, name: &str) {
    let object = format!("configmap/{name}");
    let plan = eventually("syncgc's API answers", ROLLOUT, || {
        let (namespace, object) = (namespace.to_owned(), object.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                syncgc_json(&["plan", &object, "-n", &namespace, "-o", "json"]).ok()
            })
            .await
            .unwrap()
            .filter(|plan| plan["modeFrom"] == "server")
        }
    })
    .await;
    assert_eq!(plan["object"]["name"], name, "{plan}");
    assert_eq!(plan["synchronous"], true, "{plan}");
}

/// What the installs leave of syncgc once uninstalled: nothing.
async fn nothing_left(client: &Client) {
    let api_services = Api::<APIService>::all(client.clone());
    assert!(
        api_services
            .get_opt("v1alpha1.syncgc.io")
            .await
            .unwrap()
            .is_none(),
        "syncgc's APIService is left"
    );
    let configurations = Api::<MutatingWebhookConfiguration>::all(client.clone());
    assert!(
        configurations.get_opt("syncgc").await.unwrap().is_none(),
        "syncgc's MutatingWebhookConfiguration is left"
    );
    assert!(
        Api::<ClusterRole>::all(client.clone())
            .get_opt("syncgc")
            .await
            .unwrap()
            .is_none(),
        "syncgc's ClusterRole is left"
    );
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE);
    eventually("syncgc's Pods are gone", ROLLOUT, || {
        let pods = pods.clone();
        async move {
            let left = pods.list(&ListParams::default()).await.ok()?;
            left.items.is_empty().then_some(())
        }
    })
    .await;
}

/// Whatever a failed test leaves running is stopped: no syncgc of this test may act on the
/// next tests' objects.
struct Teardown;

impl Drop for Teardown {
    fn drop(&mut self) {
        let run = |program: &str, args: &[&str]| {
            let _ = Command::new(program)
                .args(args)
                .env("KUBECONFIG", kubeconfig_path())
                .output();
        };
        run(
            &support::chart::tool("helm"),
            &["uninstall", "syncgc", "-n", NAMESPACE, "--no-hooks"],
        );
        run(
            "kubectl",
            &[
                "delete",
                "deployment",
                "syncgc",
                "-n",
                NAMESPACE,
                "--ignore-not-found",
            ],
        );
        run(
            "kubectl",
            &[
                "delete",
                "mutatingwebhookconfiguration",
                "syncgc",
                "--ignore-not-found",
            ],
        );
        run(
            "kubectl",
            &[
                "delete",
                "job",
                "syncgc-uninstall",
                "-n",
                NAMESPACE,
                "--ignore-not-found",
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chart_installs_upgrades_tests_and_uninstalls_on_a_real_node() {
    let _alone = support::process::alone().await;
    let image = image();
    let client = support::client().await;
    labelled_namespace(&client).await;
    let _teardown = Teardown;
    let ns = TestNamespace::new(&client, "in-cluster-chart").await;
    let install = [&INSTALL[..], &["--wait", "--timeout", "180s"]].concat();
    let (repository, tag) = image.rsplit_once(':').unwrap();
    let image_values = [
        "--set",
        &format!("image.repository={repository}"),
        "--set",
        &format!("image.tag={tag}"),
    ];
    helm(&[&["install", "syncgc", CHART][..], &install, &image_values].concat());
    rolled_out(&client, 2).await;
    checks_pass();

    // An owner waits for a held dependent, through a rolling upgrade.
    let api = ns.api::<ConfigMap>();
    let owner = owner_and_held(&api, &opted_in("owner", vec![], &[])).await;
    came_back_armed(&owner);
    delete(&api, "owner", &DeleteParams::background()).await;
    eventually("the owner waits", Duration::from_secs(30), || {
        being_deleted(&api, "owner")
    })
    .await;
    helm(
        &[
            &["upgrade", "syncgc", CHART][..],
            &install,
            &image_values,
            &["--set", "logFormat=text"],
        ]
        .concat(),
    );
    rolled_out(&client, 2).await;
    assert!(
        exists(&api, "owner").await,
        "the owner was released by the rollout while its dependent is held"
    );
    clear_finalizers(&api, "held").await;
    eventually(
        "the owner goes after its dependent, under the new replicas",
        Duration::from_secs(60),
        || gone(&api, "owner"),
    )
    .await;
    checks_pass();

    // `helm test`: the same checks from a Pod in the cluster (which fails the command unless
    // it succeeds, and is deleted once it has).
    let tested = helm(&[
        "test",
        "syncgc",
        "--namespace",
        NAMESPACE,
        "--timeout",
        "180s",
    ]);
    assert!(tested.contains("Succeeded"), "{tested}");
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE);
    eventually("helm test's Pod is deleted", ROLLOUT, || {
        gone(&pods, "syncgc-check")
    })
    .await;

    // The uninstall's Job Pod stops syncgc and disarms what is armed.
    came_back_armed(&create(&api, &opted_in("stays", vec![], &[])).await);
    helm(&[
        "uninstall",
        "syncgc",
        "--namespace",
        NAMESPACE,
        "--wait",
        "--timeout",
        "300s",
    ]);
    assert!(
        !armed(&api, "stays").await,
        "the uninstall left an object armed"
    );
    nothing_left(&client).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_manifests_install_and_their_uninstall_job_disarms_on_a_real_node() {
    let _alone = support::process::alone().await;
    let image = image();
    let client = support::client().await;
    let _teardown = Teardown;
    let ns = TestNamespace::new(&client, "in-cluster-manifests").await;
    labelled_namespace(&client).await;
    kubectl(&["apply", "-k", overlay()], None);
    rolled_out(&client, 2).await;
    checks_pass();
    let api = ns.api::<ConfigMap>();
    came_back_armed(&create(&api, &opted_in("stays", vec![], &[])).await);
    served_by_the_pods(&ns.name, "stays").await;

    // The uninstall Job of manifests/uninstall, with this image, on the node.
    let mut job: Value = serde_norway::from_str(&std::fs::read_to_string(UNINSTALL_JOB).unwrap())
        .expect("manifests/uninstall/job.yaml");
    let pod = &mut job["spec"]["template"]["spec"];
    pod["containers"][0]["image"] = json!(image);
    pod["containers"][0]["imagePullPolicy"] = json!("Never");
    pod["tolerations"] = json!([{ "key": "syncgc.io/node", "operator": "Exists" }]);
    kubectl(&["apply", "-f", "-"], Some(&job.to_string()));
    kubectl(
        &[
            "wait",
            "--for=condition=complete",
            "job/syncgc-uninstall",
            "-n",
            NAMESPACE,
            "--timeout=300s",
        ],
        None,
    );
    assert!(
        !armed(&api, "stays").await,
        "the uninstall Job left an object armed"
    );
    // The Job deleted the webhook configuration already.
    kubectl(
        &[
            "delete",
            "-k",
            overlay(),
            "--wait=false",
            "--ignore-not-found",
        ],
        None,
    );
    nothing_left(&client).await;
    // The namespace goes too (the manifests own it); the next tests may create it again.
    let namespaces = Api::<Namespace>::all(client.clone());
    eventually("syncgc's namespace is gone", ROLLOUT, || {
        gone(&namespaces, NAMESPACE)
    })
    .await;
}

/// An install whose image cannot be pulled: `syncgc check` says why no replica is ready, no
/// object gets armed (no replica registered a webhook), and `helm uninstall --no-hooks` (the
/// hook's Job cannot run that image either) leaves nothing behind.
#[tokio::test(flavor = "multi_thread")]
async fn an_image_that_cannot_be_pulled_is_named_by_check() {
    let _alone = support::process::alone().await;
    let client = support::client().await;
    labelled_namespace(&client).await;
    let _teardown = Teardown;
    let ns = TestNamespace::new(&client, "in-cluster-no-image").await;
    helm(
        &[
            &["install", "syncgc", CHART][..],
            &INSTALL,
            &["--set", "image.tag=not-built"],
        ]
        .concat(),
    );
    let said = eventually("syncgc check names the image", ROLLOUT, || async {
        let (ok, out) = syncgc(&["check"]);
        (!ok && out.contains("ErrImageNeverPull")).then_some(out)
    })
    .await;
    assert!(said.contains("✗ deployment"), "{said}");
    assert!(said.contains("cannot pull syncgc's image"), "{said}");
    let api = ns.api::<ConfigMap>();
    let object = create(&api, &opted_in("unarmed", vec![], &[])).await;
    assert!(
        !object
            .finalizers()
            .iter()
            .any(|f| f == SYNCHRONOUS_FINALIZER),
        "armed without a running syncgc"
    );
    helm(&[
        "uninstall",
        "syncgc",
        "--namespace",
        NAMESPACE,
        "--no-hooks",
        "--wait",
    ]);
    nothing_left(&client).await;
}
