//! The MutatingWebhookConfiguration that points the apiserver at syncgc's webhook.

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use k8s_openapi::ByteString;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::ObjectMeta;

use super::admit::UnarmedDelete;
pub use crate::api::ServerVersion;
use crate::names::{ARMED_LABEL, GUARDED_LABEL};

/// The namespaces the webhook never sees by default: the control plane's, the node heartbeats'
/// (every node renews its Lease in `kube-node-lease` every 10 seconds), and syncgc's own.
pub const DEFAULT_EXCLUDED_NAMESPACES: [&str; 3] =
    ["kube-system", "kube-node-lease", "syncgc-system"];

/// The label that names a namespace (set by the apiserver from Kubernetes 1.21 on).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Where and how the apiserver should call the webhook.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The configuration's name.
    pub name: String,
    /// How the apiserver reaches the webhook.
    pub client: WebhookClient,
    /// The PEM of the CA that signed the serving certificate.
    pub ca_bundle: Vec<u8>,
    /// The seconds the apiserver waits for an answer (1 to 30).
    pub timeout_seconds: i32,
    /// Namespaces whose objects the webhook never sees.
    pub excluded_namespaces: Vec<String>,
    /// What the webhook does with a DELETE of an opted-in object that is not armed yet: to
    /// deny it, it must see every DELETE, not only those of armed objects.
    pub unarmed_delete: UnarmedDelete,
    /// Which DELETEs the guards on DELETE (protected objects, cascade limits, finalizer
    /// handlers) see.
    pub guards: GuardScope,
    /// The apiserver's version: from 1.28 on, `matchConditions` filter what reaches syncgc.
    pub server: ServerVersion,
    /// Before 1.28, the resources whose CREATE and UPDATE reach syncgc.
    pub scope: Coverage,
    /// syncgc's own user as the apiserver knows it: from 1.28 on, its DELETEs do not reach
    /// the guards' webhook (the collector judges them in the process, see
    /// [`crate::gc::guard::judge_own`]).
    pub own_user: Option<String>,
}

/// The path the webhook serves admission reviews on.
pub const WEBHOOK_PATH: &str = "/mutate";
/// The path the guards on DELETE are served on: their webhooks judge and do nothing else.
pub const GUARD_PATH: &str = "/guard";

/// Which DELETEs reach the guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardScope {
    /// None: no guard acts (`--guards=false`).
    Off,
    /// Those of objects labelled [`GUARDED_LABEL`], which syncgc keeps on every object a
    /// guard may concern (see [`crate::gc::selection`]).
    Selected,
    /// Every DELETE: a cluster-wide `--max-cascade` concerns every object.
    Every,
}

impl GuardScope {
    /// The scope of `--guards` with the cluster-wide limit `max_cascade`.
    pub fn of(guards: bool, max_cascade: Option<usize>) -> Self {
        match (guards, max_cascade) {
            (false, _) => Self::Off,
            (true, Some(_)) => Self::Every,
            (true, None) => Self::Selected,
        }
    }
}

/// How the apiserver reaches the webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookClient {
    /// `https://…/mutate`, for a webhook outside the cluster (a local control plane).
    Url(String),
    /// A Service in the cluster, port 443, path `/mutate`.
    Service { namespace: String, name: String },
}

impl WebhookClient {
    /// The names the serving certificate must carry for the apiserver to accept it: the
    /// Service's DNS names, or the URL's host.
    pub fn subject_alt_names(&self) -> crate::certs::SubjectAltNames {
        let mut sans = crate::certs::SubjectAltNames::default();
        match self {
            Self::Url(url) => {
                let host = url
                    .parse::<http::Uri>()
                    .ok()
                    .and_then(|uri| uri.host().map(str::to_owned))
                    .unwrap_or_default();
                let host = host.trim_start_matches('[').trim_end_matches(']');
                match host.parse() {
                    Ok(ip) => sans.ips.push(ip),
                    Err(_) => sans.dns.push(host.to_owned()),
                }
            }
            Self::Service { namespace, name } => {
                sans.dns = vec![
                    format!("{name}.{namespace}.svc"),
                    format!("{name}.{namespace}.svc.cluster.local"),
                    format!("{name}.{namespace}"),
                    name.clone(),
                ];
            }
        }
        sans
    }

    /// How the apiserver reaches `path` ([`WEBHOOK_PATH`] or [`GUARD_PATH`]): a URL's path
    /// ending in [`WEBHOOK_PATH`] has that end replaced.
    fn config(&self, ca_bundle: &[u8], path: &str) -> WebhookClientConfig {
        let (url, service) = match self {
            Self::Url(url) => {
                let base = url.strip_suffix(WEBHOOK_PATH).unwrap_or(url);
                (Some(format!("{}{path}", base.trim_end_matches('/'))), None)
            }
            Self::Service { namespace, name } => (
                None,
                Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.to_owned()),
                    port: Some(443),
                }),
            ),
        };
        WebhookClientConfig {
            url,
            service,
            ca_bundle: Some(ByteString(ca_bundle.to_vec())),
        }
    }
}

impl std::str::FromStr for WebhookClient {
    type Err = String;

    /// `https://HOST[:PORT]/PATH`, or `NAMESPACE/NAME` of a Service.
    fn from_str(s: &str) -> Result<Self, String> {
        if s.starts_with("https://") {
            return match s.parse::<http::Uri>() {
                Ok(uri) if uri.host().is_some_and(|h| !h.is_empty()) => Ok(Self::Url(s.to_owned())),
                _ => Err(format!(
                    "{s:?} is not a URL such as https://127.0.0.1:8443/mutate"
                )),
            };
        }
        match crate::names::namespaced_name(s) {
            Some((namespace, name)) => Ok(Self::Service { namespace, name }),
            None => Err(format!(
                "{s:?} is neither an https:// URL nor a Service as NAMESPACE/NAME"
            )),
        }
    }
}

/// Resources that can be opted in no more than they can be collected meaningfully, yet are
/// written all the time: Events, and Leases (every node renews one every 10 seconds; every
/// controller's leader election writes one every few seconds). Before 1.28 their CREATEs and
/// UPDATEs are left out of the rules. TokenReviews, SubjectAccessReviews and the like cannot be
/// deleted, so discovery never lists them: they are left out too.
pub const NOT_OPTING_IN: [(&str, &str); 3] = [
    ("", "events"),
    ("events.k8s.io", "events"),
    ("coordination.k8s.io", "leases"),
];

/// Which resources' CREATE and UPDATE reach syncgc on a server without `matchConditions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coverage {
    /// Every resource (`*`): what a configuration applied by hand must say, since it does
    /// not follow the resources the cluster comes to serve.
    Every,
    /// The groups discovery found, each whole (`None`) or, for a group holding a resource
    /// of [`NOT_OPTING_IN`], as a list of its other resources.
    Discovered(BTreeMap<String, Option<BTreeSet<String>>>),
}

impl Coverage {
    /// The scope of `served` resources, as (group, plural): every group whole but those
    /// holding a resource of [`NOT_OPTING_IN`]; and every group of `failed` (whose discovery
    /// failed: its resources may be unknown) whole.
    pub fn discovered<'a>(
        served: impl IntoIterator<Item = (&'a str, &'a str)>,
        failed: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let listed = |group: &str| NOT_OPTING_IN.iter().any(|(g, _)| *g == group);
        let mut groups: BTreeMap<String, Option<BTreeSet<String>>> = BTreeMap::new();
        for (group, plural) in served {
            if !listed(group) {
                groups.insert(group.to_owned(), None);
            } else if !NOT_OPTING_IN.contains(&(group, plural)) {
                groups
                    .entry(group.to_owned())
                    .or_insert_with(|| Some(BTreeSet::new()))
                    .get_or_insert_default()
                    .insert(plural.to_owned());
            }
        }
        for group in failed.into_iter().filter(|g| !listed(g)) {
            groups.insert(group.to_owned(), None);
        }
        Self::Discovered(groups)
    }

    /// The scope of what discovery found: its served `resources` and its `failed` groups.
    pub fn of_discovery<'a>(
        resources: impl IntoIterator<Item = &'a crate::gc::discovery::Resource>,
        failed: &'a BTreeSet<String>,
    ) -> Self {
        Self::discovered(
            resources
                .into_iter()
                .map(|r| (r.api.group.as_str(), r.api.plural.as_str())),
            failed.iter().map(String::as_str),
        )
    }

    /// This scope and every resource `rules` name (rules written from another scope).
    pub fn widened(self, rules: &[RuleWithOperations]) -> Self {
        let Self::Discovered(mut groups) = self else {
            return self;
        };
        for rule in rules {
            let rule_groups = rule.api_groups.as_deref().unwrap_or_default();
            let resources = rule.resources.as_deref().unwrap_or_default();
            if rule_groups.iter().any(|g| g == "*") {
                return Self::Every;
            }
            let whole = resources.iter().any(|r| r == "*");
            for group in rule_groups {
                if whole {
                    groups.insert(group.clone(), None);
                } else if let Some(listed) = groups
                    .entry(group.clone())
                    .or_insert_with(|| Some(BTreeSet::new()))
                {
                    listed.extend(resources.iter().cloned());
                }
            }
        }
        Self::Discovered(groups)
    }

    fn rules(&self, operations: &[&str]) -> Vec<RuleWithOperations> {
        let rule = |groups: Vec<String>, resources: Vec<String>| RuleWithOperations {
            api_groups: Some(groups),
            api_versions: Some(vec!["*".to_owned()]),
            operations: Some(operations.iter().map(|o| (*o).to_owned()).collect()),
            resources: Some(resources),
            scope: Some("*".to_owned()),
        };
        let every = || vec!["*".to_owned()];
        match self {
            Self::Every => vec![rule(every(), every())],
            Self::Discovered(groups) => {
                let whole: Vec<String> = groups
                    .iter()
                    .filter(|(_, resources)| resources.is_none())
                    .map(|(group, _)| group.clone())
                    .collect();
                let listed = groups.iter().filter_map(|(group, resources)| {
                    let resources = resources.as_ref()?;
                    (!resources.is_empty())
                        .then(|| rule(vec![group.clone()], resources.iter().cloned().collect()))
                });
                (!whole.is_empty())
                    .then(|| rule(whole, every()))
                    .into_iter()
                    .chain(listed)
                    .collect()
            }
        }
    }
}

impl ServerVersion {
    /// The first version that serves `matchConditions` on by default (beta; GA in 1.30).
    pub const MATCH_CONDITIONS: Self = Self {
        major: 1,
        minor: 28,
    };

    /// Whether webhooks may carry `matchConditions`.
    pub fn match_conditions(self) -> bool {
        self >= Self::MATCH_CONDITIONS
    }
}

/// The CEL condition under which CREATE and UPDATE reach syncgc (from 1.28): the new object
/// has a `syncgc.io/` annotation (it opts in, or it is to be warned about a mistake in one),
/// or the old one opted in or is armed (it may be disarmed).
pub const ARM_CONDITION: &str = "(has(object.metadata.annotations) \
&& object.metadata.annotations.exists(k, k.startsWith('syncgc.io/'))) \
|| (oldObject != null && ((has(oldObject.metadata.annotations) \
&& 'syncgc.io/synchronous' in oldObject.metadata.annotations) \
|| (has(oldObject.metadata.finalizers) \
&& 'syncgc.io/synchronous' in oldObject.metadata.finalizers)))";

/// The CEL condition under which DELETE reaches syncgc with `--unarmed-delete deny` (from
/// 1.28): the object opted in.
pub const DELETE_CONDITION: &str = "has(oldObject.metadata.annotations) \
&& 'syncgc.io/synchronous' in oldObject.metadata.annotations \
&& oldObject.metadata.annotations['syncgc.io/synchronous'] == 'true'";

/// The CEL condition under which a DELETE reaches the guards (from 1.28, when syncgc knows
/// its own user): it is not one of syncgc's own, which it judges in the process.
pub fn not_from(user: &str) -> String {
    let mut quoted = String::with_capacity(user.len() + 2);
    quoted.push('"');
    for c in user.chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            c if c.is_control() => quoted.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    format!("request.userInfo.username != {quoted}")
}

/// The webhook that arms and disarms on CREATE and UPDATE.
pub const ARM_WEBHOOK: &str = "synchronous.syncgc.io";
/// The webhook that sees the DELETEs of armed objects (of every object with `--unarmed-delete
/// deny`).
pub const DELETE_WEBHOOK: &str = "delete.syncgc.io";
/// The webhook of the guards on DELETE: the DELETEs of objects labelled [`GUARDED_LABEL`] (of
/// every object with a cluster-wide `--max-cascade`).
pub const GUARD_WEBHOOK: &str = "guard.syncgc.io";
/// The webhook of the guards on evictions: an eviction deletes its Pod with no DELETE review,
/// and carries no label of the Pod to select it by.
pub const EVICTION_WEBHOOK: &str = "eviction.syncgc.io";

impl Registration {
    /// The configuration: one webhook for CREATE and UPDATE of every resource (from 1.28, only
    /// where [`ARM_CONDITION`] holds); with the guards, one for the DELETEs of objects labelled
    /// [`GUARDED_LABEL`] (of every object with a cluster-wide limit) and one for every Pod's
    /// eviction, both before the next so that a refusal comes before any side effect; one for
    /// DELETE of objects labelled [`ARMED_LABEL`] (of every object with `--unarmed-delete
    /// deny`; from 1.28, where [`DELETE_CONDITION`] holds). All fail open, with side effects
    /// only on real (not dry-run) requests.
    pub fn configuration(&self) -> MutatingWebhookConfiguration {
        let labelled = |label: &str| LabelSelector {
            match_labels: Some([(label.to_owned(), "true".to_owned())].into()),
            match_expressions: None,
        };
        let (object_selector, delete_condition) = match self.unarmed_delete {
            UnarmedDelete::Allow => (labelled(ARMED_LABEL), None),
            UnarmedDelete::Deny => (
                LabelSelector::default(),
                Some(("opted-in", DELETE_CONDITION)),
            ),
        };
        let not_own = self.own_user.as_deref().map(not_from);
        // Before 1.28 nothing filters CREATE and UPDATE but the rules.
        let arm_scope = if self.server.match_conditions() {
            &Coverage::Every
        } else {
            &self.scope
        };
        MutatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..Default::default()
            },
            webhooks: Some(
                [
                    Some(self.webhook(
                        ARM_WEBHOOK,
                        arm_scope.rules(&["CREATE", "UPDATE"]),
                        "IfNeeded",
                        LabelSelector::default(),
                        Some(("opted-in-or-armed", ARM_CONDITION)),
                    )),
                    self.guard_selector().map(|selector| {
                        self.webhook(
                            GUARD_WEBHOOK,
                            Coverage::Every.rules(&["DELETE"]),
                            "Never",
                            selector,
                            not_own.as_deref().map(|c| ("not-syncgc", c)),
                        )
                    }),
                    self.guard_selector().map(|_| {
                        self.webhook(
                            EVICTION_WEBHOOK,
                            vec![RuleWithOperations {
                                api_groups: Some(vec![String::new()]),
                                api_versions: Some(vec!["v1".to_owned()]),
                                operations: Some(vec!["CREATE".to_owned()]),
                                resources: Some(vec!["pods/eviction".to_owned()]),
                                scope: Some("Namespaced".to_owned()),
                            }],
                            "Never",
                            LabelSelector::default(),
                            None,
                        )
                    }),
                    Some(self.webhook(
                        DELETE_WEBHOOK,
                        Coverage::Every.rules(&["DELETE"]),
                        "Never",
                        object_selector,
                        delete_condition,
                    )),
                ]
                .into_iter()
                .flatten()
                .collect(),
            ),
        }
    }

    /// The objects whose DELETEs reach the guards, if any do.
    fn guard_selector(&self) -> Option<LabelSelector> {
        match self.guards {
            GuardScope::Off => None,
            GuardScope::Every => Some(LabelSelector::default()),
            GuardScope::Selected => Some(LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: GUARDED_LABEL.to_owned(),
                    operator: "Exists".to_owned(),
                    values: None,
                }]),
            }),
        }
    }

    fn webhook(
        &self,
        name: &str,
        rules: Vec<RuleWithOperations>,
        reinvocation: &str,
        object_selector: LabelSelector,
        condition: Option<(&str, &str)>,
    ) -> MutatingWebhook {
        let path = if matches!(name, GUARD_WEBHOOK | EVICTION_WEBHOOK) {
            GUARD_PATH
        } else {
            WEBHOOK_PATH
        };
        let match_conditions =
            condition
                .filter(|_| self.server.match_conditions())
                .map(|(name, expression)| {
                    vec![MatchCondition {
                        name: name.to_owned(),
                        expression: expression.to_owned(),
                    }]
                });
        let namespace_selector = LabelSelector {
            match_expressions: (!self.excluded_namespaces.is_empty()).then(|| {
                vec![LabelSelectorRequirement {
                    key: NAMESPACE_NAME_LABEL.to_owned(),
                    operator: "NotIn".to_owned(),
                    values: Some(self.excluded_namespaces.clone()),
                }]
            }),
            match_labels: None,
        };
        MutatingWebhook {
            name: name.to_owned(),
            admission_review_versions: vec!["v1".to_owned(), "v1beta1".to_owned()],
            client_config: self.client.config(&self.ca_bundle, path),
            rules: Some(rules),
            failure_policy: Some("Ignore".to_owned()),
            side_effects: "NoneOnDryRun".to_owned(),
            timeout_seconds: Some(self.timeout_seconds),
            match_policy: Some("Equivalent".to_owned()),
            reinvocation_policy: Some(reinvocation.to_owned()),
            // Both selectors are written even when empty, as the apiserver stores them: what is
            // read back is then what was written.
            namespace_selector: Some(namespace_selector),
            object_selector: Some(object_selector),
            match_conditions,
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
    use crate::names::{SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER};
    use serde_json::{Value, json};

    const V1_20: ServerVersion = ServerVersion {
        major: 1,
        minor: 20,
    };
    const V1_30: ServerVersion = ServerVersion {
        major: 1,
        minor: 30,
    };

    fn registration(unarmed_delete: UnarmedDelete) -> Registration {
        registration_for(unarmed_delete, V1_20)
    }

    fn registration_for(unarmed_delete: UnarmedDelete, server: ServerVersion) -> Registration {
        Registration {
            name: "syncgc".into(),
            client: WebhookClient::Url("https://127.0.0.1:8443/mutate".into()),
            ca_bundle: b"-----BEGIN CERTIFICATE-----".to_vec(),
            timeout_seconds: 3,
            excluded_namespaces: DEFAULT_EXCLUDED_NAMESPACES.map(str::to_owned).to_vec(),
            unarmed_delete,
            guards: GuardScope::Off,
            server,
            scope: Coverage::Every,
            own_user: None,
        }
    }

    /// The webhook `name` of `configuration`, and where it stands in the list.
    fn named<'a>(
        configuration: &'a MutatingWebhookConfiguration,
        name: &str,
    ) -> Option<(usize, &'a MutatingWebhook)> {
        configuration
            .webhooks
            .iter()
            .flatten()
            .enumerate()
            .find(|(_, w)| w.name == name)
    }

    #[test]
    fn versions_are_read_as_servers_and_users_write_them() {
        for (text, minor) in [
            ("v1.20.2", 20),
            ("1.30", 30),
            ("v1.28.3-eks-4f4795d", 28),
            ("1.29+", 29),
        ] {
            let version: ServerVersion = text.parse().unwrap();
            assert_eq!((version.major, version.minor), (1, minor), "{text}");
        }
        for bad in ["", "1", "one.two", "v1.x"] {
            assert!(bad.parse::<ServerVersion>().is_err(), "{bad:?}");
        }
        assert!(
            !"v1.27.9"
                .parse::<ServerVersion>()
                .unwrap()
                .match_conditions()
        );
        assert!(
            "v1.28.0"
                .parse::<ServerVersion>()
                .unwrap()
                .match_conditions()
        );
    }

    /// Two replicas whose discoveries differ (each reaches an apiserver of another version)
    /// agree on the union of their scopes: each widens its own by the rules written.
    #[test]
    fn a_scope_widened_by_another_scope_s_rules_is_their_union() {
        let one = Coverage::discovered(
            [
                ("", "configmaps"),
                ("", "events"),
                ("", "secrets"),
                ("apps", "deployments"),
            ],
            [],
        );
        let other = Coverage::discovered(
            [("", "configmaps"), ("", "pods"), ("batch", "jobs")],
            ["metrics.k8s.io"],
        );
        let union = Coverage::discovered(
            [
                ("", "configmaps"),
                ("", "pods"),
                ("", "secrets"),
                ("apps", "deployments"),
                ("batch", "jobs"),
            ],
            ["metrics.k8s.io"],
        );
        let widened = one.clone().widened(&other.rules(&["CREATE"]));
        assert_eq!(widened, union);
        assert_eq!(
            other.widened(&widened.rules(&["CREATE"])),
            union,
            "the other replica writes nothing new"
        );
        assert_eq!(one.clone().widened(&one.rules(&["CREATE"])), one);
        assert_eq!(
            one.widened(&Coverage::Every.rules(&["CREATE"])),
            Coverage::Every
        );
    }

    /// With the guards, their webhook sees the DELETEs of the objects labelled
    /// `syncgc.io/guarded` (of every object with a cluster-wide limit), on every version, and
    /// every eviction, both before the webhook with side effects; without, neither exists.
    #[test]
    fn the_guards_see_the_deletes_they_may_concern() {
        for server in [V1_20, V1_30] {
            for unarmed_delete in [UnarmedDelete::Allow, UnarmedDelete::Deny] {
                for (scope, selector) in [
                    (
                        GuardScope::Selected,
                        json!({"matchExpressions": [{"key": GUARDED_LABEL, "operator": "Exists"}]}),
                    ),
                    (GuardScope::Every, json!({})),
                ] {
                    let configuration = Registration {
                        guards: scope,
                        ..registration_for(unarmed_delete, server)
                    }
                    .configuration();
                    let (at, guard) = named(&configuration, GUARD_WEBHOOK).unwrap();
                    assert_eq!(
                        serde_json::to_value(&guard.object_selector).unwrap(),
                        selector
                    );
                    assert!(guard.match_conditions.is_none(), "{server}");
                    assert_eq!(
                        guard.rules.as_ref().unwrap()[0].operations,
                        Some(vec!["DELETE".to_owned()])
                    );
                    assert_eq!(
                        guard.client_config.url.as_deref(),
                        Some("https://127.0.0.1:8443/guard")
                    );
                    let (eviction_at, eviction) = named(&configuration, EVICTION_WEBHOOK).unwrap();
                    let rule = &eviction.rules.as_ref().unwrap()[0];
                    assert_eq!(
                        (&rule.operations, &rule.resources),
                        (
                            &Some(vec!["CREATE".to_owned()]),
                            &Some(vec!["pods/eviction".to_owned()])
                        ),
                        "an eviction deletes its Pod without a DELETE review"
                    );
                    assert_eq!(eviction.object_selector, Some(LabelSelector::default()));
                    let (delete_at, delete) = named(&configuration, DELETE_WEBHOOK).unwrap();
                    assert!(at < delete_at && eviction_at < delete_at);
                    assert_eq!(
                        delete.client_config.url.as_deref(),
                        Some("https://127.0.0.1:8443/mutate")
                    );
                    assert_eq!(delete.rules.as_ref().unwrap().len(), 1);
                }
            }
            let off = registration_for(UnarmedDelete::Allow, server).configuration();
            assert!(named(&off, GUARD_WEBHOOK).is_none());
            assert!(named(&off, EVICTION_WEBHOOK).is_none());
        }
        assert_eq!(GuardScope::of(true, None), GuardScope::Selected);
        assert_eq!(GuardScope::of(true, Some(100)), GuardScope::Every);
        assert_eq!(GuardScope::of(false, Some(100)), GuardScope::Off);
    }

    /// From 1.28 on, syncgc's own DELETEs (judged in the process) do not reach the guards;
    /// everyone else's do, whatever their name holds. Before, nothing can tell them apart.
    #[test]
    fn syncgc_s_own_deletes_skip_the_guards_from_1_28() {
        let user = "system:serviceaccount:syncgc-system:syncgc";
        for server in [V1_20, V1_30] {
            let configuration = Registration {
                guards: GuardScope::Selected,
                own_user: Some(user.to_owned()),
                ..registration_for(UnarmedDelete::Allow, server)
            }
            .configuration();
            let (_, guard) = named(&configuration, GUARD_WEBHOOK).unwrap();
            let conditions = guard.match_conditions.as_deref().unwrap_or_default();
            if server.match_conditions() {
                assert_eq!(conditions.len(), 1);
                assert_eq!(conditions[0].expression, not_from(user));
            } else {
                assert!(conditions.is_empty(), "{server}");
            }
            let (_, eviction) = named(&configuration, EVICTION_WEBHOOK).unwrap();
            assert!(eviction.match_conditions.is_none());
        }
        let reaches = |own: &str, sender: &str| {
            let program = cel_interpreter::Program::compile(&not_from(own)).expect("it parses");
            let mut context = cel_interpreter::Context::default();
            context
                .add_variable("request", json!({"userInfo": {"username": sender}}))
                .unwrap();
            match program.execute(&context) {
                Ok(cel_interpreter::Value::Bool(matched)) => matched,
                other => panic!("{own:?} gave {other:?}"),
            }
        };
        assert!(!reaches(user, user));
        assert!(reaches(
            user,
            "system:serviceaccount:kube-system:generic-garbage-collector"
        ));
        assert!(reaches(user, "admin"));
        for odd in [r#"a"b"#, r"a\b", "a\u{7}b", "' || true || '"] {
            assert!(!reaches(odd, odd), "{odd:?}");
            assert!(reaches(odd, "admin"), "{odd:?}");
        }
    }

    #[test]
    fn a_service_is_called_on_each_webhook_s_path() {
        let client = WebhookClient::Service {
            namespace: "syncgc-system".into(),
            name: "syncgc".into(),
        };
        let path = |p| client.config(b"", p).service.unwrap().path.unwrap();
        assert_eq!(path(WEBHOOK_PATH), "/mutate");
        assert_eq!(path(GUARD_PATH), "/guard");
        let url = WebhookClient::Url("https://example.com:8443/prefix/mutate".into());
        assert_eq!(
            url.config(b"", GUARD_PATH).url.unwrap(),
            "https://example.com:8443/prefix/guard"
        );
    }

    #[test]
    fn match_conditions_only_where_the_server_has_them() {
        for unarmed_delete in [UnarmedDelete::Allow, UnarmedDelete::Deny] {
            let old = serde_json::to_value(registration(unarmed_delete).configuration()).unwrap();
            for webhook in old["webhooks"].as_array().unwrap() {
                assert!(webhook.get("matchConditions").is_none(), "{webhook}");
            }
            let new = serde_json::to_value(registration_for(unarmed_delete, V1_30).configuration())
                .unwrap();
            assert_eq!(
                new["webhooks"][0]["matchConditions"][0]["expression"],
                ARM_CONDITION
            );
            let delete = new["webhooks"][1].get("matchConditions");
            match unarmed_delete {
                // The label selects what matters: nothing to evaluate.
                UnarmedDelete::Allow => assert!(delete.is_none()),
                UnarmedDelete::Deny => {
                    assert_eq!(delete.unwrap()[0]["expression"], DELETE_CONDITION);
                }
            }
        }
    }

    /// Evaluates a condition as the apiserver does, over an AdmissionRequest's `object` and
    /// `oldObject` (JSON null when absent); an evaluation error fails the test, since the
    /// apiserver would then skip (failurePolicy Ignore) or refuse the request.
    fn evaluate(expression: &str, object: Value, old_object: Value) -> bool {
        let program = cel_interpreter::Program::compile(expression).expect("the condition parses");
        let mut context = cel_interpreter::Context::default();
        context.add_variable("object", object).unwrap();
        context.add_variable("oldObject", old_object).unwrap();
        match program.execute(&context) {
            Ok(cel_interpreter::Value::Bool(matched)) => matched,
            other => panic!("{expression} gave {other:?}"),
        }
    }

    fn config_map(metadata: Value) -> Value {
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": { "k": "v" } })
    }

    #[test]
    fn the_arm_condition_lets_through_only_what_the_webhook_acts_on() {
        let opted_in = config_map(json!({ "name": "a",
            "annotations": { SYNCHRONOUS_ANNOTATION: "true", "other": "x" } }));
        let armed = config_map(json!({ "name": "a",
            "annotations": { SYNCHRONOUS_ANNOTATION: "true" },
            "finalizers": ["x.io/hold", SYNCHRONOUS_FINALIZER],
            "labels": { ARMED_LABEL: "true" } }));
        let opted_out = config_map(json!({ "name": "a",
            "annotations": { SYNCHRONOUS_ANNOTATION: "false" } }));
        let plain = config_map(json!({ "name": "a", "labels": { "app": "a" } }));
        let bare = config_map(json!({ "name": "a" }));
        let finalized = config_map(json!({ "name": "a", "finalizers": ["x.io/hold"] }));
        let annotated = config_map(json!({ "name": "a", "annotations": { "other": "x" } }));
        let typo =
            config_map(json!({ "name": "a", "annotations": { "syncgc.io/synchronus": "true" } }));
        // A TokenReview: created, never stored, with an empty metadata.
        let review = json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "metadata": {}, "spec": { "token": "t" } });
        let cases = [
            ("create, opted in", &opted_in, &Value::Null, true),
            // To be warned about.
            (
                "create, annotated other than true",
                &opted_out,
                &Value::Null,
                true,
            ),
            ("create, a typo", &typo, &Value::Null, true),
            ("create, labels only", &plain, &Value::Null, false),
            ("create, no annotations", &bare, &Value::Null, false),
            ("create, other annotations", &annotated, &Value::Null, false),
            ("create, a TokenReview", &review, &Value::Null, false),
            ("update adding the annotation", &opted_in, &bare, true),
            ("update of an armed object", &armed, &armed, true),
            ("update removing the annotation", &finalized, &armed, true),
            ("update setting it to false", &opted_out, &opted_in, true),
            ("update of a plain object", &plain, &bare, false),
            (
                "update of an object with another finalizer",
                &finalized,
                &finalized,
                false,
            ),
            (
                "update of an object with other annotations",
                &annotated,
                &plain,
                false,
            ),
        ];
        for (what, object, old, expected) in cases {
            assert_eq!(
                evaluate(ARM_CONDITION, object.clone(), old.clone()),
                expected,
                "{what}"
            );
        }
    }

    #[test]
    fn the_delete_condition_lets_through_opted_in_objects_only() {
        let opted_in = config_map(json!({ "name": "a",
            "annotations": { SYNCHRONOUS_ANNOTATION: "true" } }));
        let opted_out = config_map(json!({ "name": "a",
            "annotations": { SYNCHRONOUS_ANNOTATION: "no" } }));
        let bare = config_map(json!({ "name": "a" }));
        let annotated = config_map(json!({ "name": "a", "annotations": { "other": "x" } }));
        for (what, old, expected) in [
            ("opted in", opted_in, true),
            ("annotated other than true", opted_out, false),
            ("no annotations", bare, false),
            ("other annotations", annotated, false),
        ] {
            assert_eq!(
                evaluate(DELETE_CONDITION, Value::Null, old),
                expected,
                "{what}"
            );
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
                serde_json::json!(["kube-system", "kube-node-lease", "syncgc-system"])
            );
        }
        assert_eq!(arm["name"], ARM_WEBHOOK);
        assert_eq!(
            arm["rules"][0]["operations"],
            serde_json::json!(["CREATE", "UPDATE"])
        );
        assert_eq!(arm["objectSelector"], json!({}));
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
        assert_eq!(value["webhooks"][1]["objectSelector"], json!({}));
    }

    #[test]
    fn before_1_28_creates_and_updates_of_what_cannot_opt_in_are_left_out() {
        let served = [
            ("", "configmaps"),
            ("", "events"),
            ("", "pods"),
            ("apps", "deployments"),
            ("coordination.k8s.io", "leases"),
            ("events.k8s.io", "events"),
            ("x.io", "widgets"),
        ];
        let mut old = registration(UnarmedDelete::Allow);
        old.scope = Coverage::discovered(served, ["metrics.k8s.io"]);
        let value = serde_json::to_value(old.configuration()).unwrap();
        assert_eq!(
            value["webhooks"][0]["rules"],
            json!([
                { "apiGroups": ["apps", "metrics.k8s.io", "x.io"], "apiVersions": ["*"],
                  "operations": ["CREATE", "UPDATE"], "resources": ["*"], "scope": "*" },
                { "apiGroups": [""], "apiVersions": ["*"],
                  "operations": ["CREATE", "UPDATE"], "resources": ["configmaps", "pods"], "scope": "*" },
            ])
        );
        // DELETEs are selected by the label, whatever the resource.
        assert_eq!(value["webhooks"][1]["rules"][0]["resources"], json!(["*"]));
        // From 1.28 the condition filters: the rules stay whole and never change.
        old.server = V1_30;
        let value = serde_json::to_value(old.configuration()).unwrap();
        assert_eq!(value["webhooks"][0]["rules"][0]["apiGroups"], json!(["*"]));
    }

    #[test]
    fn the_webhook_is_reached_by_url_or_service_with_matching_names() {
        let url: WebhookClient = "https://127.0.0.1:9443/mutate".parse().unwrap();
        assert_eq!(
            url.subject_alt_names().ips,
            ["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
        let host: WebhookClient = "https://syncgc.example.com/mutate".parse().unwrap();
        assert_eq!(host.subject_alt_names().dns, ["syncgc.example.com"]);
        let service: WebhookClient = "syncgc-system/syncgc-webhook".parse().unwrap();
        assert_eq!(
            service.subject_alt_names().dns[0],
            "syncgc-webhook.syncgc-system.svc"
        );
        let config = service.config(b"ca", WEBHOOK_PATH);
        let reference = config.service.unwrap();
        assert_eq!(
            (reference.path.as_deref(), reference.port),
            (Some(WEBHOOK_PATH), Some(443))
        );
        for bad in ["http://x/mutate", "nope", "a/b/c", "/b", "https:///mutate"] {
            assert!(bad.parse::<WebhookClient>().is_err(), "{bad}");
        }
    }
}
