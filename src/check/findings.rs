//! The findings of `syncgc check`, each a pure function of what was read: the apiserver's
//! version, discovery, the APIs syncgc needs, the Deployment and the leader, the webhook
//! configuration and its certificate, the dry-run proof, the permissions, the metrics.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::ResourceAttributes;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};

use crate::api::ApiError;
use crate::certs::Certificate;
use crate::leader::Record;
use crate::names::SYNCHRONOUS_FINALIZER;
use crate::webhook::registration::{ServerVersion, WebhookClient};

use super::Finding;

/// The apiserver's version and what of syncgc it serves.
pub fn apiserver(version: &str) -> Finding {
    let Ok(server) = version.parse::<ServerVersion>() else {
        return Finding::fail(
            "apiserver",
            format!("answers version {version:?}, which is not a Kubernetes version"),
            "point your kubeconfig at a Kubernetes apiserver",
        );
    };
    if server
        < (ServerVersion {
            major: 1,
            minor: 20,
        })
    {
        return Finding::fail(
            "apiserver",
            format!("Kubernetes {version}: syncgc needs 1.20 or later"),
            "upgrade the cluster",
        );
    }
    let conditions = if server.match_conditions() {
        "matchConditions (only opted-in objects reach the webhook)"
    } else {
        "no matchConditions before 1.28 (every CREATE and UPDATE outside the excluded \
         namespaces reaches the webhook)"
    };
    let disruption = if server
        >= (ServerVersion {
            major: 1,
            minor: 21,
        }) {
        "policy/v1 PodDisruptionBudget (install.yaml)"
    } else {
        "policy/v1beta1 PodDisruptionBudget (install-1.20.yaml)"
    };
    Finding::pass(
        "apiserver",
        format!("Kubernetes {version}: arming, synchronous deletion; {conditions}; {disruption}"),
    )
}

/// API groups whose discovery failed.
pub fn discovery(failed: &BTreeSet<String>) -> Finding {
    if failed.is_empty() {
        return Finding::pass("discovery", "every API group answers");
    }
    let groups = failed.iter().cloned().collect::<Vec<_>>().join(", ");
    Finding::fail(
        "discovery",
        format!(
            "API groups that do not answer: {groups}; syncgc cannot see their objects, and a \
             namespace that holds one cannot be deleted"
        ),
        "kubectl get apiservices | grep False: repair the service behind each, or delete the \
         APIService of what was uninstalled",
    )
}

/// The APIs syncgc needs, among the group versions discovery listed (named as APIServices:
/// `v1.coordination.k8s.io`).
pub fn apis(group_versions: &BTreeSet<String>) -> Finding {
    let needed = [
        "v1.admissionregistration.k8s.io",
        "v1.coordination.k8s.io",
        "v1.events.k8s.io",
    ];
    let missing: Vec<&str> = needed
        .into_iter()
        .filter(|gv| !group_versions.contains(*gv))
        .collect();
    if missing.is_empty() {
        Finding::pass(
            "apis",
            "admissionregistration, coordination and events v1 are served",
        )
    } else {
        Finding::fail(
            "apis",
            format!("not served: {}", missing.join(", ")),
            "syncgc needs Kubernetes 1.20 or later with these API groups enabled",
        )
    }
}

/// Why a Pod is not ready, in a few words: `pod NAME: REASON (MESSAGE)` for a container waiting
/// (an image that cannot be pulled, a crash loop) or a Pod not scheduled; `None` when it is
/// ready or says nothing.
pub fn not_ready(pod: &Pod) -> Option<String> {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let status = pod.status.as_ref()?;
    let containers = status.container_statuses.iter().flatten();
    if let Some(waiting) = containers
        .filter(|c| !c.ready)
        .find_map(|c| c.state.as_ref()?.waiting.as_ref())
    {
        let reason = waiting.reason.as_deref().unwrap_or("waiting");
        return Some(match waiting.message.as_deref() {
            Some(message) if !message.is_empty() => format!("pod {name}: {reason} ({message})"),
            _ => format!("pod {name}: {reason}"),
        });
    }
    let unscheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    Some(format!(
        "pod {name}: not scheduled ({})",
        unscheduled.message.as_deref().unwrap_or("no reason given")
    ))
}

/// syncgc's Deployment: its replicas ready, and why the others are not (`waiting`, from
/// [`not_ready`]); a replica may lead without one (syncgc run outside the cluster).
pub fn deployment(
    found: Option<&Deployment>,
    holder: Option<&str>,
    at: &str,
    waiting: &[String],
) -> Finding {
    let Some(deployment) = found else {
        return match holder {
            Some(holder) => Finding::skip(
                "deployment",
                format!("no Deployment {at}; syncgc runs as {holder}, outside it"),
            ),
            None => Finding::fail(
                "deployment",
                format!("no Deployment {at}"),
                "install syncgc (docs/install.md), or give --syncgc-namespace and --deployment",
            ),
        };
    };
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let ready = deployment
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let why: String = waiting.iter().take(3).map(|w| format!("; {w}")).collect();
    if ready > 0 {
        Finding::pass(
            "deployment",
            format!("{at}: {ready} of {wanted} replicas ready{why}"),
        )
    } else {
        let (ns, name) = at.split_once('/').unwrap_or((at, ""));
        let pull = waiting
            .iter()
            .any(|w| w.contains("ImagePull") || w.contains("ErrImage"));
        let remedy = if pull {
            "the nodes cannot pull syncgc's image: build one and load it or push it to a \
             registry the nodes reach (docs/install.md#images), and set the chart's image values \
             or the kustomization's images entry"
                .to_owned()
        } else {
            format!(
                "kubectl -n {ns} get pods -l app.kubernetes.io/name=syncgc; kubectl -n {ns} \
                 describe deployment {name}"
            )
        };
        Finding::fail(
            "deployment",
            format!("{at}: none of {wanted} replicas ready{why}"),
            remedy,
        )
    }
}

/// Whether a replica holds the leader Lease, renewed within its duration at `now`.
pub fn leader(record: Option<&Record>, now: Timestamp, at: &str) -> Finding {
    let fresh = crate::disarm::running(record, None, now);
    match fresh.into_iter().next() {
        Some(holds) => Finding::pass("leader", holds),
        None => Finding::fail(
            "leader",
            format!("no replica holds the leader Lease {at}: nothing is being collected"),
            "look at syncgc's logs (kubectl logs deploy/syncgc -n NAMESPACE): a replica that \
             cannot write the Lease says why",
        ),
    }
}

/// Which guards on DELETE are active: all of them when the DELETE webhook sees every DELETE
/// (no object selector, no condition), none when it sees only armed objects'; and the
/// cascade limit of objects without their own (`SYNCGC_MAX_CASCADE` of the Deployment).
pub fn guards(found: &MutatingWebhookConfiguration, default_limit: Option<&str>) -> Finding {
    use crate::webhook::registration::DELETE_WEBHOOK;
    let delete = found
        .webhooks
        .iter()
        .flatten()
        .find(|hook| hook.name == DELETE_WEBHOOK);
    let every = delete.is_some_and(|hook| {
        let selects = hook.object_selector.as_ref().is_some_and(|s| {
            s.match_labels.as_ref().is_some_and(|l| !l.is_empty())
                || s.match_expressions.as_ref().is_some_and(|e| !e.is_empty())
        });
        !selects && hook.match_conditions.as_ref().is_none_or(Vec::is_empty)
    });
    let message = if every {
        format!(
            "active: syncgc.io/protected, syncgc.io/max-cascade and \
             syncgc.io/handles-finalizers (every DELETE reaches the webhook; they fail open); \
             {}",
            match default_limit {
                Some(limit) => format!("objects without syncgc.io/max-cascade may delete {limit}"),
                None => "no cascade limit for objects without syncgc.io/max-cascade".to_owned(),
            }
        )
    } else {
        "off: only armed objects' DELETEs reach the webhook (--guards=false), so \
         syncgc.io/protected, syncgc.io/max-cascade and syncgc.io/handles-finalizers do nothing"
            .to_owned()
    };
    Finding::pass("guards", message)
}

/// The webhook configuration and where it sends the apiserver.
/// syncgc's webhook configuration: its webhooks and where they call, and for a Service, its
/// `ready` endpoints (`None`: not read).
pub fn webhook(
    found: Option<&MutatingWebhookConfiguration>,
    name: &str,
    ready: Option<usize>,
) -> Finding {
    let hooks = found
        .and_then(|c| c.webhooks.as_deref())
        .unwrap_or_default();
    let Some(first) = hooks.first() else {
        let what = if found.is_some() {
            format!("the MutatingWebhookConfiguration {name} has no webhooks yet")
        } else {
            format!("no MutatingWebhookConfiguration {name}")
        };
        return Finding::fail(
            "webhook",
            what,
            "syncgc writes it once a replica starts (--manage-webhook): check the deployment \
             line; or apply `syncgc webhook-config` yourself",
        );
    };
    let to = match (&first.client_config.url, &first.client_config.service) {
        (Some(url), _) => url.clone(),
        (None, Some(service)) => format!(
            "service {}/{}:{}",
            service.namespace,
            service.name,
            service.port.unwrap_or(443)
        ),
        (None, None) => "nowhere".to_owned(),
    };
    let policy = first.failure_policy.as_deref().unwrap_or("Fail");
    let calling = format!(
        "{name}: {} webhook(s) calling {to}, failurePolicy {policy}, timeout {}s",
        hooks.len(),
        first.timeout_seconds.unwrap_or(10)
    );
    match (&first.client_config.service, ready) {
        (Some(service), Some(0)) => Finding::fail(
            "webhook",
            format!(
                "{calling}; the Service has no ready endpoints, so the apiserver cannot call it \
                 ({})",
                if policy == "Ignore" {
                    "every write goes through unarmed"
                } else {
                    "every write it covers is refused"
                }
            ),
            format!(
                "syncgc's pods are not ready (the deployment line), or the Service does not \
                 select them: kubectl -n {ns} get endpoints {name}",
                ns = service.namespace,
                name = service.name
            ),
        ),
        (Some(_), Some(ready)) => {
            Finding::pass("webhook", format!("{calling}, {ready} ready endpoint(s)"))
        }
        _ => Finding::pass("webhook", calling),
    }
}

/// Whether `ca_bundle` verifies the serving certificate `served` (PEM, leaf first) for the
/// names the apiserver asks for, at `now`.
pub fn certificate(
    ca_bundle: &[u8],
    served: &[u8],
    client: &WebhookClient,
    now: time::OffsetDateTime,
    source: &str,
) -> Finding {
    const FIX: &str = "the configuration's caBundle must be the CA that signed the serving \
                       certificate: with --manage-webhook syncgc publishes it itself (see its \
                       logs); with cert-manager, check the Certificate and that \
                       SYNCGC_WEBHOOK_CA_FILE names its ca.crt";
    let cas = match Certificate::parse_all(ca_bundle) {
        Ok(cas) if !cas.is_empty() => cas,
        _ => return Finding::fail("certificate", "the caBundle holds no certificate", FIX),
    };
    let leaf = match Certificate::parse_all(served) {
        Ok(chain) if !chain.is_empty() => chain.into_iter().next(),
        _ => None,
    };
    let Some(leaf) = leaf else {
        return Finding::fail(
            "certificate",
            format!("{source} holds no serving certificate"),
            "syncgc fills it in once it runs (--tls-secret), or cert-manager issues it",
        );
    };
    if !cas.iter().any(|ca| leaf.signed_by(ca)) {
        return Finding::fail(
            "certificate",
            format!("the caBundle does not verify the certificate of {source}"),
            FIX,
        );
    }
    if leaf.not_after <= now {
        return Finding::fail(
            "certificate",
            format!("the certificate of {source} expired at {}", leaf.not_after),
            "syncgc renews its own before expiry: look at its logs; with cert-manager, at the \
             Certificate's status",
        );
    }
    // The name the apiserver verifies: NAME.NAMESPACE.svc for a Service, the URL's host.
    let wanted = match client {
        WebhookClient::Service { namespace, name } => crate::certs::SubjectAltNames {
            dns: vec![format!("{name}.{namespace}.svc")],
            ips: vec![],
        },
        WebhookClient::Url(_) => client.subject_alt_names(),
    };
    if !leaf.sans.covers(&wanted) {
        return Finding::fail(
            "certificate",
            format!(
                "the certificate of {source} names {:?} {:?}, not {:?} {:?}",
                leaf.sans.dns, leaf.sans.ips, wanted.dns, wanted.ips
            ),
            "issue it for the Service's names (NAME.NAMESPACE.svc)",
        );
    }
    Finding::pass(
        "certificate",
        format!(
            "the caBundle verifies the certificate of {source} (valid until {})",
            leaf.not_after.date()
        ),
    )
}

/// What a dry-run CREATE of an opted-in ConfigMap came back as.
pub fn admission(
    created: Result<&ConfigMap, &ApiError>,
    namespace: &str,
    took: Duration,
) -> Finding {
    let fix = "the apiserver did not reach the webhook, and fails open: check the certificate \
               line, a NetworkPolicy or firewall between the control plane and port 8443 of \
               syncgc's pods (GKE private clusters: a firewall rule from the control plane's \
               range to 8443), and the apiserver's log for \"failed calling webhook\"";
    match created {
        Ok(object) => {
            let armed = object
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == SYNCHRONOUS_FINALIZER);
            if armed {
                Finding::pass(
                    "admission",
                    format!(
                        "a dry-run ConfigMap in {namespace} came back armed in {} ms: the \
                         apiserver calls the webhook",
                        took.as_millis()
                    ),
                )
            } else {
                Finding::fail(
                    "admission",
                    format!("a dry-run opted-in ConfigMap in {namespace} came back unarmed"),
                    fix,
                )
            }
        }
        Err(err) => Finding::fail(
            "admission",
            format!("a dry-run CREATE of a ConfigMap in {namespace} failed: {err}"),
            "check that you may create ConfigMaps there (--test-namespace), and the webhook's \
             failurePolicy",
        ),
    }
}

/// One thing syncgc's ServiceAccount must be allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl Need {
    fn describe(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            self.group
        };
        let mut text = format!("{} {}.{}", self.verb, self.resource, group);
        if let Some(name) = &self.name {
            text.push_str(&format!(" {name}"));
        }
        if let Some(ns) = &self.namespace {
            text.push_str(&format!(" in {ns}"));
        }
        text
    }

    pub(super) fn attributes(&self) -> ResourceAttributes {
        ResourceAttributes {
            verb: Some(self.verb.to_owned()),
            group: Some(self.group.to_owned()),
            resource: Some(self.resource.to_owned()),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            ..ResourceAttributes::default()
        }
    }
}

/// What the collector needs, for syncgc in `namespace`; and when it manages its webhook
/// configuration (`managed`), writing that.
pub fn needs(namespace: &str, webhook_config: &str, managed: bool) -> Vec<Need> {
    let every = |verb| Need {
        verb,
        group: "*",
        resource: "*",
        namespace: None,
        name: None,
    };
    let mut needs: Vec<Need> = ["list", "watch", "get", "patch", "delete"]
        .into_iter()
        .map(every)
        .collect();
    needs.push(Need {
        verb: "create",
        group: "events.k8s.io",
        resource: "events",
        namespace: None,
        name: None,
    });
    for verb in ["get", "create", "update"] {
        needs.push(Need {
            verb,
            group: "coordination.k8s.io",
            resource: "leases",
            namespace: Some(namespace.to_owned()),
            name: None,
        });
    }
    for verb in ["get", "update"].into_iter().filter(|_| managed) {
        needs.push(Need {
            verb,
            group: "admissionregistration.k8s.io",
            resource: "mutatingwebhookconfigurations",
            namespace: None,
            name: Some(webhook_config.to_owned()),
        });
    }
    needs
}

/// What `who` was denied of what it needs.
pub fn permissions(who: &str, denied: &[&Need]) -> Finding {
    if denied.is_empty() {
        return Finding::pass(
            "permissions",
            format!("{who} may do what the collector does"),
        );
    }
    let list: Vec<String> = denied.iter().map(|n| n.describe()).collect();
    Finding::fail(
        "permissions",
        format!("{who} may not: {}", list.join(", ")),
        "apply the install's RBAC again (the ClusterRole syncgc and its binding)",
    )
}

/// What the user installing syncgc must be allowed.
pub fn install_needs(namespace: &str) -> Vec<Need> {
    let cluster = |verb, group, resource| Need {
        verb,
        group,
        resource,
        namespace: None,
        name: None,
    };
    vec![
        cluster("create", "rbac.authorization.k8s.io", "clusterroles"),
        cluster("create", "rbac.authorization.k8s.io", "clusterrolebindings"),
        cluster(
            "create",
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
        ),
        cluster("create", "", "namespaces"),
        Need {
            verb: "create",
            group: "apps",
            resource: "deployments",
            namespace: Some(namespace.to_owned()),
            name: None,
        },
    ]
}

/// What the installing user was denied.
pub fn install_permissions(denied: &[&Need]) -> Finding {
    if denied.is_empty() {
        return Finding::pass(
            "install",
            "you may install syncgc (RBAC, webhook, Deployment)",
        );
    }
    let list: Vec<String> = denied.iter().map(|n| n.describe()).collect();
    Finding::fail(
        "install",
        format!("you may not: {}", list.join(", ")),
        "install as a cluster administrator",
    )
}

/// The leader's metrics: its version, and any readiness condition that fails.
pub fn metrics(text: &str, from: &str) -> Finding {
    let version = text
        .lines()
        .find(|l| l.starts_with("syncgc_build_info{"))
        .and_then(|l| l.split("version=\"").nth(1))
        .and_then(|v| v.split('"').next());
    let Some(version) = version else {
        return Finding::fail(
            "metrics",
            format!("{from} answers without syncgc_build_info"),
            "is --metrics-url syncgc's metrics address?",
        );
    };
    let failing: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("syncgc_ready{") && l.trim_end().ends_with(" 0"))
        .filter_map(|l| l.split("condition=\"").nth(1)?.split('"').next())
        .collect();
    if failing.is_empty() {
        Finding::pass("metrics", format!("{from}: syncgc {version}, ready"))
    } else {
        Finding::fail(
            "metrics",
            format!(
                "{from}: syncgc {version}, not ready: {}",
                failing.join(", ")
            ),
            "syncgc's logs say why each condition fails (docs/troubleshooting.md)",
        )
    }
}
