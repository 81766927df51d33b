//! What a finalizer handler needs to act (`syncgc.io/handles-finalizers`): its Pods alone do
//! not remove a finalizer. The namespace controller, a cascade or an uninstall deletes its
//! ServiceAccount, its token, its RoleBindings and the ConfigMaps it reads within seconds, and
//! the operator, alive, can no longer act. So, while its hold is on, the guards hold with it:
//!
//! - the ServiceAccount its Pods run as, and that account's token Secrets;
//! - the RoleBindings (in its namespace) and ClusterRoleBindings that name the account, and the
//!   Roles and ClusterRoles they grant;
//! - the ConfigMaps and Secrets its Pods mount or read (volumes, projected volumes, `env`,
//!   `envFrom`, image pull Secrets);
//! - the Services whose selector picks its Pods, and the webhook configurations that call them.
//!
//! [`pod_needs`] and the matchers are pure; [`resolve`] reads what they need (the workload's
//! Pod template, the account, the bindings, the Services, the webhook configurations) and
//! names each object by its uid; [`run`] keeps [`Needs`] for every handler in the graph, on
//! every replica (each replica's webhook judges), every [`REFRESH`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};
use parking_lot::RwLock;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::{ApiError, Cluster, Target};
use crate::graph::{Reader, Uid};

/// How often what each handler needs is read again.
pub const REFRESH: Duration = Duration::from_secs(5);

/// An object a finalizer handler needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needed {
    pub uid: Uid,
    /// `Kind namespace/name`, for messages.
    pub described: String,
}

/// What each finalizer handler (by uid) needs, as last read.
#[derive(Debug, Clone, Default)]
pub struct Needs(Arc<RwLock<HashMap<Uid, Vec<Needed>>>>);

impl Needs {
    /// The handler that needs `uid`, and how the object is described.
    pub fn handler_of(&self, uid: Uid) -> Option<(Uid, Needed)> {
        self.0.read().iter().find_map(|(handler, needed)| {
            needed
                .iter()
                .find(|n| n.uid == uid)
                .map(|n| (*handler, n.clone()))
        })
    }

    /// Every object some handler needs.
    pub fn all(&self) -> Vec<Uid> {
        self.0.read().values().flatten().map(|n| n.uid).collect()
    }

    /// What `handler` needs.
    pub fn of(&self, handler: Uid) -> Vec<Needed> {
        self.0.read().get(&handler).cloned().unwrap_or_default()
    }

    fn set(&self, needs: HashMap<Uid, Vec<Needed>>) {
        *self.0.write() = needs;
    }
}

/// What a Pod spec names: its ServiceAccount, and the ConfigMaps and Secrets it mounts or
/// reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodNeeds {
    pub account: String,
    pub config_maps: BTreeSet<String>,
    pub secrets: BTreeSet<String>,
}

/// What the Pod spec `spec` needs.
pub fn pod_needs(spec: &Value) -> PodNeeds {
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let items = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let mut needs = PodNeeds {
        account: text(&spec["serviceAccountName"])
            .or_else(|| text(&spec["serviceAccount"]))
            .unwrap_or_else(|| "default".to_owned()),
        ..PodNeeds::default()
    };
    for secret in items(&spec["imagePullSecrets"]) {
        needs.secrets.extend(text(&secret["name"]));
    }
    let mut volume = |v: &Value| {
        needs.config_maps.extend(text(&v["configMap"]["name"]));
        needs.secrets.extend(text(&v["secret"]["secretName"]));
        needs.secrets.extend(text(&v["secret"]["name"]));
    };
    for v in items(&spec["volumes"]) {
        volume(&v);
        for source in items(&v["projected"]["sources"]) {
            volume(&source);
        }
    }
    let containers = ["initContainers", "containers"]
        .into_iter()
        .flat_map(|field| items(&spec[field]));
    for container in containers {
        for from in items(&container["envFrom"]) {
            needs
                .config_maps
                .extend(text(&from["configMapRef"]["name"]));
            needs.secrets.extend(text(&from["secretRef"]["name"]));
        }
        for env in items(&container["env"]) {
            let from = &env["valueFrom"];
            needs
                .config_maps
                .extend(text(&from["configMapKeyRef"]["name"]));
            needs.secrets.extend(text(&from["secretKeyRef"]["name"]));
        }
    }
    needs
}

/// The Pod spec and labels of a workload object (a Pod's own; a Deployment's, StatefulSet's,
/// DaemonSet's, ReplicaSet's or Job's template).
pub fn template(object: &Value) -> (Value, BTreeMap<String, String>) {
    let (spec, labels) = if object["spec"]["template"].is_object() {
        (
            &object["spec"]["template"]["spec"],
            &object["spec"]["template"]["metadata"]["labels"],
        )
    } else {
        (&object["spec"], &object["metadata"]["labels"])
    };
    let labels = serde_json::from_value(labels.clone()).unwrap_or_default();
    (spec.clone(), labels)
}

/// Whether `subjects` name the ServiceAccount `namespace/account`.
pub fn names_account(subjects: Option<&Vec<Subject>>, namespace: &str, account: &str) -> bool {
    subjects.into_iter().flatten().any(|s| {
        s.kind == "ServiceAccount"
            && s.name == account
            && s.namespace.as_deref().unwrap_or(namespace) == namespace
    })
}

/// Whether a Service whose selector is `selector` picks Pods labelled `labels`.
pub fn selects(
    selector: Option<&BTreeMap<String, String>>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// Whether a webhook configuration (as JSON) calls the Service `namespace/name`.
pub fn calls(configuration: &Value, namespace: &str, name: &str) -> bool {
    configuration["webhooks"].as_array().is_some_and(|hooks| {
        hooks.iter().any(|hook| {
            let service = &hook["clientConfig"]["service"];
            service["namespace"] == namespace && service["name"] == name
        })
    })
}

fn needed<K: Resource<DynamicType = ()>>(object: &K) -> Option<Needed> {
    let uid = Uid::parse(object.meta().uid.as_deref()?);
    let kind = K::kind(&());
    let described = crate::api::described(
        &kind,
        object.meta().namespace.as_deref(),
        &object.name_any(),
    );
    Some(Needed { uid, described })
}

/// Reads what the finalizer handler `workload` needs.
pub async fn resolve(cluster: &Cluster, workload: &Target) -> Result<Vec<Needed>, ApiError> {
    let Some(object) = cluster.get(workload).await? else {
        return Ok(Vec::new());
    };
    let object = serde_json::to_value(&object).unwrap_or_default();
    let (spec, labels) = template(&object);
    let pod = pod_needs(&spec);
    let Some(namespace) = workload.namespace.clone() else {
        return Ok(Vec::new());
    };
    let read = |err: kube::Error| ApiError::Call {
        verb: crate::api::Verb::Get,
        target: workload.to_string(),
        source: err,
    };
    let mut needs: Vec<Needed> = Vec::new();
    let accounts: Api<ServiceAccount> = cluster.namespaced(&namespace);
    if let Some(account) = accounts.get_opt(&pod.account).await.map_err(read)? {
        needs.extend(needed(&account));
        let tokens = account
            .secrets
            .iter()
            .flatten()
            .filter_map(|s| s.name.clone());
        let secrets: Api<Secret> = cluster.namespaced(&namespace);
        for name in tokens.chain(pod.secrets.iter().cloned()) {
            if let Some(secret) = secrets.get_metadata_opt(&name).await.map_err(read)? {
                needs.extend(needed(&secret));
            }
        }
    }
    let config_maps: Api<ConfigMap> = cluster.namespaced(&namespace);
    for name in &pod.config_maps {
        if let Some(config_map) = config_maps.get_metadata_opt(name).await.map_err(read)? {
            needs.extend(needed(&config_map));
        }
    }
    let all = ListParams::default();
    let role_bindings: Api<RoleBinding> = cluster.namespaced(&namespace);
    let roles: Api<Role> = cluster.namespaced(&namespace);
    let cluster_roles: Api<ClusterRole> = cluster.all();
    for binding in role_bindings.list(&all).await.map_err(read)? {
        if names_account(binding.subjects.as_ref(), &namespace, &pod.account) {
            needs.extend(needed(&binding));
            let role = &binding.role_ref.name;
            let granted = match binding.role_ref.kind.as_str() {
                "Role" => roles
                    .get_metadata_opt(role)
                    .await
                    .map_err(read)?
                    .and_then(|r| needed(&r)),
                _ => cluster_roles
                    .get_metadata_opt(role)
                    .await
                    .map_err(read)?
                    .and_then(|r| needed(&r)),
            };
            needs.extend(granted);
        }
    }
    let cluster_bindings: Api<ClusterRoleBinding> = cluster.all();
    for binding in cluster_bindings.list(&all).await.map_err(read)? {
        if names_account(binding.subjects.as_ref(), &namespace, &pod.account) {
            needs.extend(needed(&binding));
            if let Some(role) = cluster_roles
                .get_metadata_opt(&binding.role_ref.name)
                .await
                .map_err(read)?
            {
                needs.extend(needed(&role));
            }
        }
    }
    let services: Api<Service> = cluster.namespaced(&namespace);
    let mut fronting = Vec::new();
    for service in services.list(&all).await.map_err(read)? {
        if selects(
            service.spec.as_ref().and_then(|s| s.selector.as_ref()),
            &labels,
        ) {
            fronting.push(service.name_any());
            needs.extend(needed(&service));
        }
    }
    if !fronting.is_empty() {
        let mutating: Api<MutatingWebhookConfiguration> = cluster.all();
        for configuration in mutating.list(&all).await.map_err(read)? {
            let value = serde_json::to_value(&configuration).unwrap_or_default();
            if fronting.iter().any(|name| calls(&value, &namespace, name)) {
                needs.extend(needed(&configuration));
            }
        }
        let validating: Api<ValidatingWebhookConfiguration> = cluster.all();
        for configuration in validating.list(&all).await.map_err(read)? {
            let value = serde_json::to_value(&configuration).unwrap_or_default();
            if fronting.iter().any(|name| calls(&value, &namespace, name)) {
                needs.extend(needed(&configuration));
            }
        }
    }
    needs.sort_by_key(|n| n.uid);
    needs.dedup_by_key(|n| n.uid);
    Ok(needs)
}

/// Keeps `needs` for every finalizer handler of the graph, every [`REFRESH`]; a handler whose
/// needs cannot be read keeps what was read last.
pub async fn run(
    needs: Needs,
    graph: Reader,
    resources: super::discovery::ResourcesReader,
    cluster: Cluster,
    metrics: crate::metrics::Metrics,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let handlers: Vec<(Uid, Target)> = {
            let graph = graph.read();
            let resources = resources.read();
            graph
                .handlers()
                .filter_map(|uid| Some((uid, resources.target_of(uid, graph.node(uid)?)?)))
                .collect()
        };
        let mut read = HashMap::new();
        for (uid, workload) in handlers {
            match resolve(&cluster, &workload).await {
                Ok(found) => {
                    read.insert(uid, found);
                }
                Err(err) => {
                    tracing::warn!(handler = %workload, %err, "could not read what a finalizer handler needs; keeping what was read before");
                    read.insert(uid, needs.of(uid));
                }
            }
        }
        let total: usize = read.values().map(Vec::len).sum();
        metrics
            .guard_needed
            .set(i64::try_from(total).unwrap_or(i64::MAX));
        needs.set(read);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_spec_names_its_account_and_what_it_mounts_or_reads() {
        let spec = json!({
            "serviceAccountName": "operator",
            "imagePullSecrets": [{ "name": "pull" }],
            "volumes": [
                { "name": "a", "configMap": { "name": "settings" } },
                { "name": "b", "secret": { "secretName": "tls" } },
                { "name": "c", "projected": { "sources": [
                    { "configMap": { "name": "bundle" } },
                    { "secret": { "name": "keys" } },
                    { "serviceAccountToken": { "path": "token" } },
                ] } },
                { "name": "d", "emptyDir": {} },
            ],
            "initContainers": [{ "envFrom": [{ "secretRef": { "name": "init" } }] }],
            "containers": [{
                "envFrom": [{ "configMapRef": { "name": "env" } }],
                "env": [
                    { "name": "X", "valueFrom": { "configMapKeyRef": { "name": "x", "key": "k" } } },
                    { "name": "Y", "valueFrom": { "secretKeyRef": { "name": "y", "key": "k" } } },
                    { "name": "Z", "value": "plain" },
                ],
            }],
        });
        let needs = pod_needs(&spec);
        assert_eq!(needs.account, "operator");
        let set = |names: &[&str]| {
            names
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<BTreeSet<_>>()
        };
        assert_eq!(needs.config_maps, set(&["bundle", "env", "settings", "x"]));
        assert_eq!(needs.secrets, set(&["init", "keys", "pull", "tls", "y"]));
        assert_eq!(pod_needs(&json!({})).account, "default");
    }

    #[test]
    fn a_workload_s_template_or_a_pod_s_own_spec() {
        let deployment = json!({ "spec": { "template": {
            "metadata": { "labels": { "app": "op" } },
            "spec": { "serviceAccountName": "op" },
        } } });
        let (spec, labels) = template(&deployment);
        assert_eq!(spec["serviceAccountName"], "op");
        assert_eq!(labels.get("app").map(String::as_str), Some("op"));
        let pod = json!({ "metadata": { "labels": { "app": "p" } }, "spec": { "serviceAccountName": "p" } });
        let (spec, labels) = template(&pod);
        assert_eq!(spec["serviceAccountName"], "p");
        assert_eq!(labels.get("app").map(String::as_str), Some("p"));
    }

    #[test]
    fn bindings_services_and_webhooks_are_matched_as_the_apiserver_does() {
        let subject = |kind: &str, name: &str, namespace: Option<&str>| Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: namespace.map(str::to_owned),
            api_group: None,
        };
        let subjects = vec![subject("ServiceAccount", "op", Some("ops"))];
        assert!(names_account(Some(&subjects), "ops", "op"));
        assert!(!names_account(Some(&subjects), "other", "op"));
        let user = vec![subject("User", "op", None)];
        assert!(!names_account(Some(&user), "ops", "op"));
        let labels: BTreeMap<String, String> = [
            ("app".to_owned(), "op".to_owned()),
            ("tier".to_owned(), "x".to_owned()),
        ]
        .into();
        let selector: BTreeMap<String, String> = [("app".to_owned(), "op".to_owned())].into();
        assert!(selects(Some(&selector), &labels));
        assert!(
            !selects(Some(&BTreeMap::new()), &labels),
            "an empty selector picks no Pod"
        );
        assert!(!selects(None, &labels));
        let configuration = json!({ "webhooks": [
            { "clientConfig": { "url": "https://x" } },
            { "clientConfig": { "service": { "namespace": "ops", "name": "op-webhook" } } },
        ] });
        assert!(calls(&configuration, "ops", "op-webhook"));
        assert!(!calls(&configuration, "ops", "other"));
    }
}
