//! The MutatingWebhookConfiguration that points the apiserver at syncgc's webhook.

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::ObjectMeta;

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
}

impl Registration {
    /// The configuration: every resource on CREATE, UPDATE and DELETE, failing open, side
    /// effects only on real (not dry-run) requests.
    pub fn configuration(&self) -> MutatingWebhookConfiguration {
        let namespace_selector = (!self.excluded_namespaces.is_empty()).then(|| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: NAMESPACE_NAME_LABEL.to_owned(),
                operator: "NotIn".to_owned(),
                values: Some(self.excluded_namespaces.clone()),
            }]),
            match_labels: None,
        });
        MutatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..Default::default()
            },
            webhooks: Some(vec![MutatingWebhook {
                name: "synchronous.syncgc.io".to_owned(),
                admission_review_versions: vec!["v1".to_owned(), "v1beta1".to_owned()],
                client_config: WebhookClientConfig {
                    url: Some(self.url.clone()),
                    ca_bundle: Some(ByteString(self.ca_bundle.clone())),
                    service: None,
                },
                rules: Some(vec![RuleWithOperations {
                    api_groups: Some(vec!["*".to_owned()]),
                    api_versions: Some(vec!["*".to_owned()]),
                    operations: Some(["CREATE", "UPDATE", "DELETE"].map(str::to_owned).to_vec()),
                    resources: Some(vec!["*".to_owned()]),
                    scope: Some("*".to_owned()),
                }]),
                failure_policy: Some("Ignore".to_owned()),
                side_effects: "NoneOnDryRun".to_owned(),
                timeout_seconds: Some(self.timeout_seconds),
                match_policy: Some("Equivalent".to_owned()),
                reinvocation_policy: Some("IfNeeded".to_owned()),
                namespace_selector,
                object_selector: None,
                match_conditions: None,
            }]),
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

    #[test]
    fn the_configuration_is_what_the_apiserver_expects() {
        let registration = Registration {
            name: "syncgc".into(),
            url: "https://127.0.0.1:8443/mutate".into(),
            ca_bundle: b"-----BEGIN CERTIFICATE-----".to_vec(),
            timeout_seconds: 5,
            excluded_namespaces: vec!["kube-system".into(), "syncgc-system".into()],
        };
        let value = serde_json::to_value(registration.configuration()).unwrap();
        let webhook = &value["webhooks"][0];
        assert_eq!(webhook["failurePolicy"], "Ignore");
        assert_eq!(webhook["sideEffects"], "NoneOnDryRun");
        assert_eq!(webhook["timeoutSeconds"], 5);
        assert_eq!(
            webhook["clientConfig"]["url"],
            "https://127.0.0.1:8443/mutate"
        );
        assert_eq!(
            webhook["clientConfig"]["caBundle"],
            ca_bundle_base64(b"-----BEGIN CERTIFICATE-----")
        );
        assert_eq!(
            webhook["rules"][0]["operations"],
            serde_json::json!(["CREATE", "UPDATE", "DELETE"])
        );
        assert_eq!(
            webhook["namespaceSelector"]["matchExpressions"][0]["values"],
            serde_json::json!(["kube-system", "syncgc-system"])
        );
    }
}
