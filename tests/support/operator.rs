//! A real operator for the local cluster's node: `examples/finalizer-operator.rs` in a Pod that
//! removes its finalizer with its own ServiceAccount and RBAC. Its manifests, for the
//! operator-teardown tests and the bench's teardown phase.

use serde_json::{Value, json};
use syncgc::names::{HANDLES_FINALIZERS_ANNOTATION, HANDLES_FINALIZERS_SCOPE_ANNOTATION};

/// The finalizer the operator removes.
pub const HANDLED: &str = "example.com/cleanup";

/// Where the operator's image is built and under which name it is imported into the node.
pub const IMAGE: &str = "syncgc.local/finalizer-operator:test";

/// How the operator is installed.
#[derive(Debug, Clone, Copy)]
pub struct Operator {
    /// Annotated `syncgc.io/handles-finalizers` (its handler, for syncgc).
    pub handles: bool,
    /// Handling its finalizer in every namespace, with a ClusterRole and a ClusterRoleBinding
    /// named `operator-NAMESPACE`; else a Role and a RoleBinding `operator`.
    pub cluster: bool,
}

impl Operator {
    /// The RBAC kinds it is bound by, and their name.
    pub fn rbac(self, namespace: &str) -> (&'static str, &'static str, String) {
        if self.cluster {
            (
                "ClusterRole",
                "ClusterRoleBinding",
                format!("operator-{namespace}"),
            )
        } else {
            ("Role", "RoleBinding", "operator".to_owned())
        }
    }

    /// Its objects in `namespace`, in the order to apply them: a ServiceAccount, a Role that
    /// may read and finalize ConfigMaps, its binding, and a Deployment of one Pod running
    /// `image` as that account.
    pub fn manifests(self, namespace: &str, image: &str) -> Vec<Value> {
        let annotations = match (self.handles, self.cluster) {
            (false, _) => json!({}),
            (true, false) => json!({ HANDLES_FINALIZERS_ANNOTATION: HANDLED }),
            (true, true) => json!({
                HANDLES_FINALIZERS_ANNOTATION: HANDLED,
                HANDLES_FINALIZERS_SCOPE_ANNOTATION: "cluster",
            }),
        };
        let (role, binding, name) = self.rbac(namespace);
        // A ClusterRole and its binding have no namespace.
        let rbac_meta = match self.cluster {
            true => json!({ "name": name }),
            false => json!({ "name": name, "namespace": namespace }),
        };
        let mut spec = super::workload::slow_pod_spec("Always");
        spec["serviceAccountName"] = json!("operator");
        spec["terminationGracePeriodSeconds"] = json!(1);
        spec["containers"] = json!([{
            "name": "operator",
            "image": image,
            "imagePullPolicy": "Never",
            "env": [
                { "name": "FINALIZER", "value": HANDLED },
                { "name": "SCOPE", "value": if self.cluster { "cluster" } else { "namespace" } },
            ],
        }]);
        vec![
            json!({ "apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": { "name": "operator", "namespace": namespace } }),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": role,
                "metadata": rbac_meta.clone(),
                "rules": [{ "apiGroups": [""], "resources": ["configmaps"],
                            "verbs": ["get", "list", "watch", "patch", "update"] }],
            }),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding,
                "metadata": rbac_meta,
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": role, "name": name },
                "subjects": [{ "kind": "ServiceAccount", "name": "operator", "namespace": namespace }],
            }),
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": { "name": "operator", "namespace": namespace, "annotations": annotations },
                "spec": {
                    "replicas": 1,
                    "selector": { "matchLabels": { "app": "operator" } },
                    "template": { "metadata": { "labels": { "app": "operator" } }, "spec": spec },
                },
            }),
        ]
    }
}
