//! Workloads that take time to stop, on the local cluster's real node: each opted in, its Pods
//! trapping SIGTERM and exiting seconds later. `kubectl delete` of the workload returns only
//! once every Pod is gone (not merely Terminating); the same workload without the annotation
//! returns while its Pods still stop (so each test can fail). A namespace deleted around a
//! running opted-in Deployment keeps the Deployment until its Pods are gone. Beside
//! Kubernetes' own collector
//! (cooperative mode), syncgc running as the tests' process, or, with `SYNCGC_IN_CLUSTER=1`,
//! the syncgc installed in the cluster (where the apiserver cannot reach this machine's
//! loopback, as on kind). They run side by side, sharing the node ([`crate::NODE`]).

use crate::support;

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};
use syncgc::names::{SYNCHRONOUS_ANNOTATION, TIMEOUT_ANNOTATION};

use support::workload::{KINDS, slow_pod_spec, workload};
use support::{TestNamespace, eventually, kubectl};

/// The opted-in workloads' timeout: the 1.20 kubelet, busy on two cores, now and then takes
/// more than the tests' usual minute to confirm a stopped Pod gone (its status sync retries
/// every 10 s); these tests are about waiting for Pods, not about the timeout.
const KUBELET_BOUND: &str = "5m";
/// Pods start on a real node in seconds; a few at a time on two cores.
const RUNNING: Duration = Duration::from_secs(120);

/// The syncgc that collects: the tests' process, unless one is installed in the cluster.
fn collector() {
    if std::env::var_os("SYNCGC_IN_CLUSTER").is_none() {
        support::process::shared();
    }
}

/// The Pods labelled `app: NAME`, Terminating ones included.
async fn pods(client: &Client, ns: &str, name: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .unwrap()
        .items
}

/// Waits until `count` Pods labelled `app: NAME` run, each ready.
async fn running(client: &Client, ns: &str, name: &str, count: usize) {
    eventually(
        &format!("{count} Pod(s) of {name} run"),
        RUNNING,
        || async {
            let pods = pods(client, ns, name).await;
            let ready = pods.iter().filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|c| c.iter().all(|c| c.ready))
            });
            (ready.count() == count).then_some(())
        },
    )
    .await;
}

/// `kubectl delete -n NS WHAT` (waiting, as kubectl does by default); how long it took.
async fn kubectl_delete(ns: &str, what: &str) -> Duration {
    let (ns, what) = (ns.to_owned(), what.to_owned());
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        kubectl(&["delete", "-n", &ns, &what], None);
        started.elapsed()
    })
    .await
    .unwrap()
}

fn apply(ns: &str, object: &Value) {
    kubectl(&["apply", "-n", ns, "-f", "-"], Some(&object.to_string()));
}

/// Creates the opted-in workload `kind` and an unannotated copy, waits until the Pods of each
/// run, and deletes each with `kubectl delete`: the opted-in one returns with its Pods gone,
/// the other with its Pods still stopping.
async fn deleted_with_its_pods(test: &str, kind: &str) {
    let pods_each = KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, n)| *n)
        .unwrap();
    collector();
    let client = support::client().await;
    let ns = TestNamespace::new(&client, test).await;
    let resource = kind.to_lowercase();
    for (name, opted_in) in [("synchronous", true), ("plain", false)] {
        let mut object = workload(kind, name, opted_in, support::server().minor);
        if opted_in {
            object["metadata"]["annotations"][TIMEOUT_ANNOTATION] = json!(KUBELET_BOUND);
        }
        apply(&ns.name, &object);
        if kind == "CronJob" {
            // A run of the CronJob now rather than at its schedule: a Job it owns.
            let (run, from) = (format!("{name}-run"), format!("--from=cronjob/{name}"));
            kubectl(&["create", "job", "-n", &ns.name, &run, &from], None);
        }
        running(&client, &ns.name, name, pods_each).await;
    }

    let took = kubectl_delete(&ns.name, &format!("{resource}/synchronous")).await;
    let left = pods(&client, &ns.name, "synchronous").await;
    assert!(
        left.is_empty(),
        "kubectl delete {resource}/synchronous returned after {took:?} with {} Pod(s) left",
        left.len()
    );
    let took = kubectl_delete(&ns.name, &format!("{resource}/plain")).await;
    assert!(
        !pods(&client, &ns.name, "plain").await.is_empty(),
        "without the annotation, kubectl delete {resource}/plain returned after {took:?} with \
         its Pods already gone: the test could not tell synchronous deletion from plain"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_goes_with_its_pods() {
    let _node = crate::NODE.read().await;
    deleted_with_its_pods("wl-deployment", "Deployment").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_statefulset_goes_with_its_pods() {
    let _node = crate::NODE.read().await;
    deleted_with_its_pods("wl-statefulset", "StatefulSet").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemonset_goes_with_its_pods() {
    let _node = crate::NODE.read().await;
    deleted_with_its_pods("wl-daemonset", "DaemonSet").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_goes_with_its_pods() {
    let _node = crate::NODE.read().await;
    deleted_with_its_pods("wl-job", "Job").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cronjob_goes_with_its_jobs_and_their_pods() {
    let _node = crate::NODE.read().await;
    deleted_with_its_pods("wl-cronjob", "CronJob").await;
}

/// An opted-in owner of a Pod and of the PersistentVolumeClaim it mounts: the claim is kept by
/// `kubernetes.io/pvc-protection` until the Pod is gone, and the owner until both are.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_in_use_goes_after_its_pod() {
    let _node = crate::NODE.read().await;
    collector();
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "wl-claim").await;
    let volume = format!("{}-data", ns.name);
    let dir = format!("/tmp/syncgc-cluster/volumes/{volume}");
    kubectl(
        &["apply", "-f", "-"],
        Some(
            &json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": { "name": volume, "labels": { "syncgc.io/test": "true" } },
                "spec": {
                    "capacity": { "storage": "1Mi" }, "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                    "hostPath": { "path": dir, "type": "DirectoryOrCreate" },
                    "claimRef": { "namespace": ns.name, "name": "data" },
                },
            })
            .to_string(),
        ),
    );
    let _volume = Volume(volume.clone());
    for (name, opted_in) in [("synchronous", true), ("plain", false)] {
        let annotations = if opted_in {
            json!({ SYNCHRONOUS_ANNOTATION: "true", TIMEOUT_ANNOTATION: KUBELET_BOUND })
        } else {
            json!({})
        };
        apply(
            &ns.name,
            &json!({ "apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": { "name": name, "annotations": annotations } }),
        );
        let uid = kubectl(
            &[
                "get",
                "configmap",
                name,
                "-n",
                &ns.name,
                "-o",
                "jsonpath={.metadata.uid}",
            ],
            None,
        );
        let owner = json!([{ "apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid }]);
        let claim = if opted_in { "data" } else { "scratch" };
        let mut spec = slow_pod_spec("Always");
        spec["volumes"] = if opted_in {
            json!([{ "name": "data", "persistentVolumeClaim": { "claimName": claim } }])
        } else {
            json!([{ "name": "data", "emptyDir": {} }])
        };
        spec["containers"][0]["volumeMounts"] = json!([{ "name": "data", "mountPath": "/data" }]);
        if opted_in {
            apply(
                &ns.name,
                &json!({
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": { "name": claim, "ownerReferences": owner },
                    "spec": { "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                              "volumeName": volume,
                              "resources": { "requests": { "storage": "1Mi" } } },
                }),
            );
        }
        apply(
            &ns.name,
            &json!({ "apiVersion": "v1", "kind": "Pod",
                     "metadata": { "name": name, "labels": { "app": name },
                                   "ownerReferences": owner },
                     "spec": spec }),
        );
        running(&client, &ns.name, name, 1).await;
    }

    let took = kubectl_delete(&ns.name, "configmap/synchronous").await;
    assert!(
        pods(&client, &ns.name, "synchronous").await.is_empty(),
        "kubectl delete returned after {took:?} with the Pod left"
    );
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns.name);
    assert!(
        claims.get_opt("data").await.unwrap().is_none(),
        "kubectl delete returned after {took:?} with the claim left"
    );
    let took = kubectl_delete(&ns.name, "configmap/plain").await;
    assert!(
        !pods(&client, &ns.name, "plain").await.is_empty(),
        "without the annotation, kubectl delete returned after {took:?} with the Pod gone"
    );
}

/// The test's PersistentVolume, deleted when the test ends.
struct Volume(String);

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "pv",
                &self.0,
                "--wait=false",
                "--ignore-not-found",
            ])
            .env("KUBECONFIG", support::kubeconfig_path())
            .output();
    }
}

/// A namespace deleted while an opted-in Deployment's Pods run: the namespace controller deletes
/// everything in it at once, and syncgc keeps the Deployment until its Pods are gone, so its
/// deletion comes after the last of theirs; not opted in, it comes while they still stop.
/// Ordered by the deletions' resource versions (one etcd revision sequence), not by polling.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_namespace_keeps_an_opted_in_workload_until_its_pods_are_gone() {
    let _node = crate::NODE.read().await;
    collector();
    let client = support::client().await;
    for opted_in in [true, false] {
        let ns = TestNamespace::new(&client, "wl-namespace").await;
        let mut object = workload("Deployment", "app", opted_in, support::server().minor);
        if opted_in {
            object["metadata"]["annotations"][TIMEOUT_ANNOTATION] = json!(KUBELET_BOUND);
        }
        apply(&ns.name, &object);
        running(&client, &ns.name, "app", 2).await;
        let pods = Api::<Pod>::namespaced(client.clone(), &ns.name);
        let from = pods.list(&ListParams::default()).await.unwrap().metadata;
        let from = from.resource_version.unwrap();
        let deployment = tokio::spawn(deleted_at(
            Api::<Deployment>::namespaced(client.clone(), &ns.name),
            from.clone(),
            1,
        ));
        let last_pod = tokio::spawn(deleted_at(pods, from, 2));
        let took = kubectl_delete(&ns.name, &format!("namespace/{}", ns.name)).await;
        let (deployment, last_pod) = (deployment.await.unwrap(), last_pod.await.unwrap());
        if opted_in {
            assert!(
                deployment > last_pod,
                "the opted-in Deployment was deleted at resourceVersion {deployment}, before its \
                 last Pod at {last_pod} (the namespace went in {took:?})"
            );
        } else {
            assert!(
                deployment < last_pod,
                "without the annotation the Deployment was deleted at {deployment}, after its \
                 last Pod at {last_pod}: the test could not tell synchronous deletion from plain"
            );
        }
    }
}

/// The resourceVersion at which the last of `count` objects of `api` was deleted, watching from
/// resourceVersion `from`.
async fn deleted_at<K>(api: Api<K>, from: String, count: usize) -> u64
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let params = WatchParams::default().timeout(290);
    let events = api.watch(&params, &from).await.unwrap().boxed();
    let deletions = events.try_filter_map(|event| async move {
        Ok(match event {
            WatchEvent::Deleted(object) => object.meta().resource_version.clone(),
            _ => None,
        })
    });
    let versions: Vec<String> = deletions.take(count).try_collect().await.unwrap();
    assert_eq!(
        versions.len(),
        count,
        "the watch ended before {count} deletions"
    );
    versions.iter().map(|v| v.parse().unwrap()).max().unwrap()
}
