//! The MutatingWebhookConfiguration that points the apiserver at syncgc's webhook.

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::ObjectMeta;

use super::admit::UnarmedDelete;
use crate::names::ARMED_LABEL;

/// The label that names a namespace (set by the apiserver from Kubernetes 1.21 on).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Where and how the apiserver should call the webhook.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The configuration's name.
    pub name: String,
    /// `https://…/mutate`, for a webhook outside the cluster (a local control plane).
    pub url: String,
    /// The PEM of the CA that signed the serving certificate.
    pub ca_bundle: Vec<u8>,
    /// The seconds the apiserver waits for an answer (1 to 30).
    pub timeout_seconds: i32,
    /// Namespaces whose objects the webhook never sees.
    pub excluded_namespaces: Vec<String>,
    /// What the webhook does with a DELETE of an opted-in object that is not armed yet: to
    /// deny it, it must see every DELETE, not only those of armed objects.
    pub unarmed_delete: UnarmedDelete,
}

/// The webhook that arms and disarms on CREATE and UPDATE.
pub const ARM_WEBHOOK: &str = "synchronous.syncgc.io";
/// The webhook that sees DELETEs: of armed objects only, unless unarmed DELETEs are denied.
pub const DELETE_WEBHOOK: &str = "delete.syncgc.io";

impl Registration {
    /// The configuration: one webhook for CREATE and UPDATE of every resource, one for DELETE
    /// of objects labelled [`ARMED_LABEL`] (of every object with `--unarmed-delete deny`);
    /// both fail open, with side effects only on real (not dry-run) requests.
    pub fn configuration(&self) -> MutatingWebhookConfiguration {
        let armed = LabelSelector {
            match_labels: Some([(ARMED_LABEL.to_owned(), "true".to_owned())].into()),
            match_expressions: None,
        };
        let object_selector = match self.unarmed_delete {
            UnarmedDelete::Allow => Some(armed),
            UnarmedDelete::Deny => None,
        };
        MutatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..Default::default()
            },
            webhooks: Some(vec![
                self.webhook(ARM_WEBHOOK, &["CREATE", "UPDATE"], "IfNeeded", None),
                self.webhook(DELETE_WEBHOOK, &["DELETE"], "Never", object_selector),
            ]),
        }
    }

    fn webhook(
        &self,
        name: &str,
        operations: &[&str],
        reinvocation: &str,
        object_selector: Option<LabelSelector>,
    ) -> MutatingWebhook {
        let namespace_selector = (!self.excluded_namespaces.is_empty()).then(|| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: NAMESPACE_NAME_LABEL.to_owned(),
                operator: "NotIn".to_owned(),
                values: Some(self.excluded_namespaces.clone()),
            }]),
            match_labels: None,
        });
        MutatingWebhook {
            name: name.to_owned(),
            admission_review_versions: vec!["v1".to_owned(), "v1beta1".to_owned()],
            client_config: WebhookClientConfig {
                url: Some(self.url.clone()),
                ca_bundle: Some(ByteString(self.ca_bundle.clone())),
                service: None,
            },
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec!["*".to_owned()]),
                api_versions: Some(vec!["*".to_owned()]),
                operations: Some(operations.iter().map(|o| (*o).to_owned()).collect()),
                resources: Some(vec!["*".to_owned()]),
                scope: Some("*".to_owned()),
            }]),
            failure_policy: Some("Ignore".to_owned()),
            side_effects: "NoneOnDryRun".to_owned(),
            timeout_seconds: Some(self.timeout_seconds),
            match_policy: Some("Equivalent".to_owned()),
            reinvocation_policy: Some(reinvocation.to_owned()),
            namespace_selector,
            object_selector,
            match_conditions: None,
        }
    }
}

/// The base64 of `pem`, as `caBundle` is written in YAML.
pub fn ca_bundle_base64(pem: &[u8]) -> String {
    BASE64_STANDARD.encode(pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(unarmed_delete: UnarmedDelete) -> Registration {
        Registration {
            name: "syncgc".into(),
            url: "https://127.0.0.1:8443/mutate".into(),
            ca_bundle: b"-----BEGIN CERTIFICATE-----".to_vec(),
            timeout_seconds: 3,
            excluded_namespaces: vec!["kube-system".into(), "syncgc-system".into()],
            unarmed_delete,
        }
    }

    #[test]
    fn the_configuration_is_what_the_apiserver_expects() {
        let value =
            serde_json::to_value(registration(UnarmedDelete::Allow).configuration()).unwrap();
        let [arm, delete] = [&value["webhooks"][0], &value["webhooks"][1]];
        for webhook in [arm, delete] {
            assert_eq!(webhook["failurePolicy"], "Ignore");
            assert_eq!(webhook["sideEffects"], "NoneOnDryRun");
            assert_eq!(webhook["timeoutSeconds"], 3);
            assert_eq!(
                webhook["clientConfig"]["url"],
                "https://127.0.0.1:8443/mutate"
            );
            assert_eq!(
                webhook["clientConfig"]["caBundle"],
                ca_bundle_base64(b"-----BEGIN CERTIFICATE-----")
            );
            assert_eq!(
                webhook["namespaceSelector"]["matchExpressions"][0]["values"],
                serde_json::json!(["kube-system", "syncgc-system"])
            );
        }
        assert_eq!(arm["name"], ARM_WEBHOOK);
        assert_eq!(
            arm["rules"][0]["operations"],
            serde_json::json!(["CREATE", "UPDATE"])
        );
        assert!(arm.get("objectSelector").is_none());
        assert_eq!(delete["name"], DELETE_WEBHOOK);
        assert_eq!(
            delete["rules"][0]["operations"],
            serde_json::json!(["DELETE"])
        );
        assert_eq!(
            delete["objectSelector"],
            serde_json::json!({ "matchLabels": { ARMED_LABEL: "true" } })
        );
    }

    #[test]
    fn denying_unarmed_deletes_sees_every_delete() {
        let value =
            serde_json::to_value(registration(UnarmedDelete::Deny).configuration()).unwrap();
        assert_eq!(value["webhooks"][1]["name"], DELETE_WEBHOOK);
        assert!(value["webhooks"][1].get("objectSelector").is_none());
    }
}
