//! The reviews the webhook benchmarks send: a CREATE of a ~10 KB Deployment, opted in to
//! synchronous deletion, and the DELETE of the same Deployment, not opted in.

use serde_json::{Value, json};

/// A CREATE review of a Deployment with enough containers, env and managed fields to weigh
/// about 10 KB, opted in to synchronous deletion.
pub fn deployment_review() -> Vec<u8> {
    serde_json::to_vec(&review(true)).unwrap()
}

/// The DELETE review of the same Deployment without syncgc's annotation: an unarmed DELETE,
/// which needs no side effect (and so no read of the object) whatever guards are on.
#[allow(dead_code)]
pub fn unarmed_delete_review() -> Vec<u8> {
    let mut review = review(false);
    let request = &mut review["request"];
    request["operation"] = json!("DELETE");
    request["oldObject"] = request["object"].take();
    request["options"] = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
    serde_json::to_vec(&review).unwrap()
}

fn review(opted_in: bool) -> Value {
    let containers: Vec<Value> = (0..12)
        .map(|i| {
            json!({
                "name": format!("container-{i}"),
                "image": format!("registry.example/team/service-{i}:1.2.{i}"),
                "ports": [{"containerPort": 8080 + i, "protocol": "TCP", "name": "http"}],
                "env": (0..8).map(|e| json!({"name": format!("ENV_{e}"), "value": format!("value-{i}-{e}")})).collect::<Vec<_>>(),
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080 + i}, "periodSeconds": 10},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}]
            })
        })
        .collect();
    let object = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": "shop",
            "labels": {"app": "web", "tier": "frontend", "team": "checkout"},
            "annotations": if opted_in {
                json!({"syncgc.io/synchronous": "true", "deployment.kubernetes.io/revision": "3"})
            } else {
                json!({"deployment.kubernetes.io/revision": "3"})
            },
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "apps/v1",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": containers, "volumes": [{"name": "config", "configMap": {"name": "web"}}]}
            }
        }
    });
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": "web", "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
}
