//! Workloads whose Pods take time to stop, on the local cluster's real node (which they
//! tolerate): for the workload tests and the bench's workloads phase.

use serde_json::{Value, json};
use syncgc::names::SYNCHRONOUS_ANNOTATION;

/// The workload kinds, and how many Pods each runs.
pub const KINDS: [(&str, usize); 5] = [
    ("Deployment", 2),
    ("StatefulSet", 2),
    ("DaemonSet", 1),
    ("Job", 2),
    ("CronJob", 2),
];

/// A container that stops three seconds after SIGTERM, and is ready once it traps it.
pub fn slow_pod_spec(restart: &str) -> Value {
    json!({
        "tolerations": [{ "key": "syncgc.io/node", "operator": "Exists" }],
        "terminationGracePeriodSeconds": 30,
        "restartPolicy": restart,
        "containers": [{
            "name": "app",
            "image": "syncgc.local/busybox:1.35",
            "imagePullPolicy": "Never",
            "command": ["sh", "-c",
                        "trap 'sleep 3; exit 0' TERM; touch /tmp/ready; sleep 3600 & wait"],
            "readinessProbe": {
                "exec": { "command": ["cat", "/tmp/ready"] },
                "periodSeconds": 1,
            },
        }],
    })
}

/// A Pod template labelled `app: NAME`.
fn template(name: &str, restart: &str) -> Value {
    json!({ "metadata": { "labels": { "app": name } }, "spec": slow_pod_spec(restart) })
}

/// The workload `kind` named `name`, opted in when `opted_in`, as a server of Kubernetes minor
/// version `minor` serves it (CronJobs are batch/v1 from 1.21, batch/v1beta1 before).
pub fn workload(kind: &str, name: &str, opted_in: bool, minor: u32) -> Value {
    let selector = json!({ "matchLabels": { "app": name } });
    let (api_version, spec) = match kind {
        "Deployment" => (
            "apps/v1",
            json!({ "replicas": 2, "selector": selector, "template": template(name, "Always") }),
        ),
        "StatefulSet" => (
            "apps/v1",
            json!({ "replicas": 2, "serviceName": name, "podManagementPolicy": "Parallel",
                    "selector": selector, "template": template(name, "Always") }),
        ),
        "DaemonSet" => (
            "apps/v1",
            json!({ "selector": selector, "template": template(name, "Always") }),
        ),
        "Job" => (
            "batch/v1",
            json!({ "parallelism": 2, "completions": 2, "template": template(name, "Never") }),
        ),
        "CronJob" => (
            if minor >= 21 {
                "batch/v1"
            } else {
                "batch/v1beta1"
            },
            json!({ "schedule": "0 0 1 1 *", "jobTemplate": { "spec": {
                "parallelism": 2, "completions": 2, "template": template(name, "Never") } } }),
        ),
        other => panic!("no workload {other}"),
    };
    let annotations = if opted_in {
        json!({ SYNCHRONOUS_ANNOTATION: "true" })
    } else {
        json!({})
    };
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": { "name": name, "annotations": annotations },
        "spec": spec,
    })
}
