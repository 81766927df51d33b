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
use crate::leader::LeaseRecord;
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

/// syncgc's replicas as the leader check sees them: the Pods of its Deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Replicas {
    /// The names of the Deployment's Pods, terminating or not.
    pub pods: Vec<String>,
    /// What the names of the Deployment's Pods start with (`DEPLOYMENT-`): a Lease holder
    /// named so but not among [`Replicas::pods`] is gone. `None`: no Deployment.
    pub prefix: Option<String>,
    /// When each replica that runs (its Pod not being deleted, its container running)
    /// started.
    pub started: Vec<Timestamp>,
    /// How often a replica tries for the Lease (`--leader-election-retry-period`).
    pub retry_period: Duration,
}

/// `syncgc run`'s default `--leader-election-retry-period`.
const RETRY_PERIOD: Duration = Duration::from_secs(2);

impl Replicas {
    /// None known: syncgc runs outside a Deployment, or its Pods could not be listed.
    pub fn unknown() -> Self {
        Self {
            pods: Vec::new(),
            prefix: None,
            started: Vec::new(),
            retry_period: RETRY_PERIOD,
        }
    }

    /// The replicas of `deployment` among `pods` (those its selector lists), with the retry
    /// period its containers are given (`SYNCGC_LEADER_ELECTION_RETRY_PERIOD` or the flag).
    pub fn of(deployment: &Deployment, pods: &[Pod]) -> Self {
        const FLAG: &str = "--leader-election-retry-period";
        let args = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .into_iter()
            .flat_map(|p| &p.containers)
            .flat_map(|c| c.args.iter().flatten().chain(c.command.iter().flatten()));
        let mut flag = None;
        let mut after_flag = false;
        for arg in args {
            if after_flag {
                flag = Some(arg.clone());
            }
            after_flag = arg == FLAG;
            if let Some(value) = arg.strip_prefix(FLAG).and_then(|a| a.strip_prefix('=')) {
                flag = Some(value.to_owned());
            }
        }
        let retry_period = flag
            .or_else(|| super::env(deployment, "SYNCGC_LEADER_ELECTION_RETRY_PERIOD"))
            .and_then(|text| crate::duration::parse(&text).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(RETRY_PERIOD);
        let started = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| {
                let status = p.status.as_ref()?;
                status
                    .container_statuses
                    .iter()
                    .flatten()
                    .filter_map(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref())
                    .map(|t| t.0)
                    .max()
            })
            .collect();
        Self {
            pods: pods
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect(),
            prefix: deployment.metadata.name.as_ref().map(|n| format!("{n}-")),
            started,
            retry_period,
        }
    }

    /// Whether `holder` was one of these replicas' Pods and is no more.
    fn gone(&self, holder: &str) -> bool {
        self.prefix
            .as_deref()
            .is_some_and(|prefix| holder.starts_with(prefix))
            && !self.pods.iter().any(|p| p == holder)
    }
}

/// The replica that leads at `now`: the Lease's holder, renewed within its duration, unless it
/// was one of the Deployment's Pods and is gone.
pub fn leading(
    record: Option<&LeaseRecord>,
    replicas: &Replicas,
    now: Timestamp,
) -> Option<String> {
    let holder = record?.holder.as_deref()?;
    let fresh = !crate::disarm::running(record, None, now).is_empty();
    (fresh && !replicas.gone(holder)).then(|| holder.to_owned())
}

/// Whether a replica holds the leader Lease, renewed within its duration at `now`. When none
/// does but replicas run, one of them takes the Lease over (creates it, takes it when free, or
/// once its record has stayed unchanged for its duration on the replica's own clock): a
/// warning until that should have happened (the later of the last renewal and the first
/// replica's start, plus the lease duration and two retry periods: one to see the last
/// renewal, one to act), a failure after.
pub fn leader(
    record: Option<&LeaseRecord>,
    replicas: &Replicas,
    now: Timestamp,
    at: &str,
) -> Finding {
    if leading(record, replicas, now).is_some() {
        let holds = crate::disarm::running(record, None, now);
        return Finding::pass("leader", holds.into_iter().next().unwrap_or_default());
    }
    let seconds = |d: jiff::SignedDuration| format!("{:.0}s", d.as_secs_f64().max(0.0));
    let renewed = record.and_then(|r| r.renew_time);
    // What the Lease says, and how long after its last change (or a replica's start) a
    // replica running takes it over at the latest.
    let (state, unchanged_for, takes) = match record {
        None => ("does not exist".to_owned(), Duration::ZERO, "creates it"),
        Some(LeaseRecord { holder: None, .. }) => {
            ("is free".to_owned(), Duration::ZERO, "takes it")
        }
        Some(LeaseRecord {
            holder: Some(holder),
            lease_duration,
            ..
        }) => {
            let ago = renewed.map(|t| now.duration_since(t));
            let state = match ago {
                None => format!("names {holder}, never renewed"),
                Some(ago) if replicas.gone(holder) => {
                    format!(
                        "names {holder}, whose Pod is gone, renewed {} ago",
                        seconds(ago)
                    )
                }
                Some(ago) => format!("names {holder}, not renewed for {}", seconds(ago)),
            };
            (state, *lease_duration, "takes it over")
        }
    };
    let fix = "look at syncgc's logs (kubectl logs deploy/syncgc -n NAMESPACE): a replica that \
               cannot write the Lease says why";
    let Some(first) = replicas.started.iter().min() else {
        return Finding::fail(
            "leader",
            format!(
                "no replica holds the leader Lease {at}, which {state}: nothing is being collected"
            ),
            fix,
        );
    };
    let within = unchanged_for + 2 * replicas.retry_period;
    let since = renewed.map_or(*first, |renewed| renewed.max(*first));
    let deadline = since
        .checked_add(jiff::SignedDuration::try_from(within).unwrap_or(jiff::SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX);
    let left = deadline.duration_since(now);
    if left.is_positive() {
        Finding::warn(
            "leader",
            format!(
                "the leader Lease {at} {state}; a replica {takes} within {}s",
                left.as_secs() + i64::from(left.subsec_nanos() > 0)
            ),
            "nothing to do: wait a moment, or run syncgc check --wait 1m",
        )
    } else {
        Finding::fail(
            "leader",
            format!(
                "no replica holds the leader Lease {at}, which {state}, and none of the {} \
                 running took it over within {}",
                replicas.started.len(),
                seconds(jiff::SignedDuration::try_from(within).unwrap_or_default())
            ),
            fix,
        )
    }
}

/// Which guards on DELETE are active, and which DELETEs they cost: all of them when the
/// guards' webhook is registered — selecting the objects labelled `syncgc.io/guarded`, or every
/// DELETE with a cluster-wide limit — none without it; and the cascade limit of objects
/// without their own (`SYNCGC_MAX_CASCADE` of the Deployment).
pub fn guards(found: &MutatingWebhookConfiguration, default_limit: Option<&str>) -> Finding {
    use crate::webhook::registration::GUARD_WEBHOOK;
    let guard = found
        .webhooks
        .iter()
        .flatten()
        .find(|hook| hook.name == GUARD_WEBHOOK);
    let Some(guard) = guard else {
        return Finding::pass(
            "guards",
            "off: no DELETE reaches them (--guards=false), so syncgc.io/protected, \
             syncgc.io/max-cascade and syncgc.io/handles-finalizers do nothing",
        );
    };
    let selects = guard.object_selector.as_ref().is_some_and(|s| {
        s.match_labels.as_ref().is_some_and(|l| !l.is_empty())
            || s.match_expressions.as_ref().is_some_and(|e| !e.is_empty())
    });
    let seen = if selects {
        "the DELETEs of objects labelled syncgc.io/guarded and every eviction reach them"
    } else {
        "every DELETE in the cluster reaches them, for the cluster-wide cascade limit: each \
         costs a webhook call"
    };
    let limit = match default_limit {
        Some(limit) => format!("objects without syncgc.io/max-cascade may delete {limit}"),
        None => "no cascade limit for objects without syncgc.io/max-cascade".to_owned(),
    };
    Finding::pass(
        "guards",
        format!(
            "active: syncgc.io/protected, syncgc.io/max-cascade and \
             syncgc.io/handles-finalizers ({seen}; they fail open); {limit}"
        ),
    )
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
    // How many objects' DELETEs reach the guards (absent with the guards off).
    let selected = text
        .lines()
        .find_map(|l| l.strip_prefix("syncgc_guard_selected_objects "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|_| text.contains("syncgc_guard_selection_changes_total"))
        .map(|n| format!("; the guards select {n} object(s)"))
        .unwrap_or_default();
    if failing.is_empty() {
        Finding::pass(
            "metrics",
            format!("{from}: syncgc {version}, ready{selected}"),
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;

    const AT: &str = "syncgc-system/syncgc";

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    /// A Lease held by `holder`, renewed at `renewed` (seconds), lasting 15 s.
    fn lease(holder: Option<&str>, renewed: i64) -> LeaseRecord {
        LeaseRecord {
            holder: holder.map(str::to_owned),
            lease_duration: Duration::from_secs(15),
            acquire_time: Some(at(renewed)),
            renew_time: Some(at(renewed)),
            transitions: 0,
            resource_version: Some("1".to_owned()),
        }
    }

    /// The Deployment syncgc's Pods `pods`, started at `started` (seconds), retrying every 2 s.
    fn replicas(pods: &[&str], started: &[i64]) -> Replicas {
        Replicas {
            pods: pods.iter().map(|p| (*p).to_owned()).collect(),
            prefix: Some("syncgc-".to_owned()),
            started: started.iter().map(|s| at(*s)).collect(),
            retry_period: Duration::from_secs(2),
        }
    }

    #[test]
    fn a_lease_renewed_within_its_duration_by_a_replica_passes() {
        let record = lease(Some("syncgc-abc-1"), 97);
        let found = leader(
            Some(&record),
            &replicas(&["syncgc-abc-1"], &[0]),
            at(100),
            AT,
        );
        assert_eq!(found.status, Status::Pass, "{found:?}");
        assert_eq!(
            found.message,
            "syncgc-abc-1 holds the leader Lease, renewed 3s ago"
        );
        // syncgc run outside a Deployment leads too.
        let record = lease(Some("laptop-4242"), 97);
        let found = leader(Some(&record), &Replicas::unknown(), at(100), AT);
        assert_eq!(found.status, Status::Pass, "{found:?}");
        assert_eq!(
            leading(Some(&record), &Replicas::unknown(), at(100)).as_deref(),
            Some("laptop-4242")
        );
    }

    #[test]
    fn an_expired_lease_is_a_warning_while_a_running_replica_takes_it_over() {
        // Renewed at 88 by a replica killed then; the replicas ran since before: they take it
        // over by 88 + 15 + 2 × 2 = 107.
        let record = lease(Some("syncgc-abc-1"), 88);
        let running = replicas(&["syncgc-abc-1", "syncgc-abc-2"], &[0, 0]);
        let found = leader(Some(&record), &running, at(104), AT);
        assert_eq!(found.status, Status::Warn, "{found:?}");
        assert_eq!(
            found.message,
            "the leader Lease syncgc-system/syncgc names syncgc-abc-1, not renewed for 16s; a \
             replica takes it over within 3s"
        );
        assert!(found.fix.unwrap().contains("--wait"));
        assert_eq!(leading(Some(&record), &running, at(104)), None);

        // Expired long ago (an earlier install's), new replicas started at 95: each waits the
        // whole duration from its own start, by 95 + 19 = 114.
        let record = lease(Some("syncgc-old-1"), 10);
        let new = replicas(&["syncgc-new-1", "syncgc-new-2"], &[95, 96]);
        let found = leader(Some(&record), &new, at(100), AT);
        assert_eq!(found.status, Status::Warn, "{found:?}");
        assert_eq!(
            found.message,
            "the leader Lease syncgc-system/syncgc names syncgc-old-1, whose Pod is gone, \
             renewed 90s ago; a replica takes it over within 14s"
        );
    }

    #[test]
    fn a_fresh_lease_of_a_pod_that_is_gone_is_a_warning_too() {
        let record = lease(Some("syncgc-old-1"), 97);
        let new = replicas(&["syncgc-new-1"], &[90]);
        assert_eq!(leading(Some(&record), &new, at(100)), None);
        let found = leader(Some(&record), &new, at(100), AT);
        assert_eq!(found.status, Status::Warn, "{found:?}");
        assert!(
            found.message.ends_with("takes it over within 16s"),
            "{}",
            found.message
        );
        // A holder not named as the Deployment's Pods (syncgc run elsewhere) is not gone.
        let record = lease(Some("laptop-4242"), 97);
        assert_eq!(
            leader(Some(&record), &new, at(100), AT).status,
            Status::Pass
        );
    }

    #[test]
    fn a_lease_nobody_took_over_in_time_fails() {
        // Replicas running since 0, the holder's last renewal at 10: taken over by 29.
        let record = lease(Some("syncgc-abc-1"), 10);
        let running = replicas(&["syncgc-abc-1", "syncgc-abc-2"], &[0, 0]);
        let found = leader(Some(&record), &running, at(29), AT);
        assert_eq!(found.status, Status::Fail, "{found:?}");
        assert_eq!(
            found.message,
            "no replica holds the leader Lease syncgc-system/syncgc, which names syncgc-abc-1, \
             not renewed for 19s, and none of the 2 running took it over within 19s"
        );
        assert!(found.fix.unwrap().contains("kubectl logs"));
        assert_eq!(
            leader(Some(&record), &running, at(28), AT).status,
            Status::Warn
        );
    }

    #[test]
    fn without_a_replica_running_nothing_takes_the_lease_over() {
        let expired = lease(Some("syncgc-abc-1"), 10);
        for record in [None, Some(&expired), Some(&lease(None, 10))] {
            for none in [Replicas::unknown(), replicas(&["syncgc-abc-1"], &[])] {
                let found = leader(record, &none, at(100), AT);
                assert_eq!(found.status, Status::Fail, "{found:?}");
                assert!(
                    found.message.ends_with("nothing is being collected"),
                    "{}",
                    found.message
                );
            }
        }
        assert_eq!(
            leader(None, &Replicas::unknown(), at(100), AT).message,
            "no replica holds the leader Lease syncgc-system/syncgc, which does not exist: \
             nothing is being collected"
        );
    }

    #[test]
    fn a_missing_or_free_lease_is_taken_within_two_retry_periods_of_a_start() {
        let started = replicas(&["syncgc-abc-1"], &[99]);
        let missing = leader(None, &started, at(100), AT);
        assert_eq!(missing.status, Status::Warn, "{missing:?}");
        assert_eq!(
            missing.message,
            "the leader Lease syncgc-system/syncgc does not exist; a replica creates it within 3s"
        );
        let free = leader(Some(&lease(None, 50)), &started, at(100), AT);
        assert_eq!(free.status, Status::Warn, "{free:?}");
        assert!(
            free.message
                .contains("is free; a replica takes it within 3s")
        );
        assert_eq!(leader(None, &started, at(103), AT).status, Status::Fail);
    }

    #[test]
    fn the_replicas_are_the_deployments_running_pods_with_its_retry_period() {
        let deployment: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "syncgc", "namespace": "syncgc-system" },
            "spec": {
                "selector": { "matchLabels": { "app": "syncgc" } },
                "template": { "spec": { "containers": [{
                    "name": "syncgc", "args": ["run"],
                    "env": [{ "name": "SYNCGC_LEADER_ELECTION_RETRY_PERIOD", "value": "500ms" }],
                }] } },
            },
        }))
        .unwrap();
        let pod = |name: &str, running: Option<&str>, deleted: bool| -> Pod {
            let state = match running {
                Some(at) => serde_json::json!({ "running": { "startedAt": at } }),
                None => serde_json::json!({ "waiting": { "reason": "ContainerCreating" } }),
            };
            let mut pod = serde_json::json!({
                "metadata": { "name": name },
                "status": { "containerStatuses": [{
                    "name": "syncgc", "image": "syncgc", "imageID": "", "ready": false,
                    "restartCount": 0, "state": state,
                }] },
            });
            if deleted {
                pod["metadata"]["deletionTimestamp"] = "2023-11-14T22:13:30Z".into();
            }
            serde_json::from_value(pod).unwrap()
        };
        let pods = [
            pod("syncgc-a-1", Some("2023-11-14T22:13:20Z"), false),
            pod("syncgc-a-2", Some("2023-11-14T22:13:21Z"), true),
            pod("syncgc-b-1", None, false),
        ];
        let found = Replicas::of(&deployment, &pods);
        assert_eq!(found.pods, ["syncgc-a-1", "syncgc-a-2", "syncgc-b-1"]);
        assert_eq!(found.prefix.as_deref(), Some("syncgc-"));
        assert_eq!(found.started, [at(0)]);
        assert_eq!(found.retry_period, Duration::from_millis(500));

        // The flag wins over the environment, in either form; without either, the default.
        let retry = |args: &[&str], env: bool| {
            let mut changed = deployment.clone();
            let pod = changed
                .spec
                .as_mut()
                .unwrap()
                .template
                .spec
                .as_mut()
                .unwrap();
            let container = &mut pod.containers[0];
            container.args = Some(args.iter().map(|a| (*a).to_owned()).collect());
            if !env {
                container.env = None;
            }
            Replicas::of(&changed, &pods).retry_period
        };
        assert_eq!(
            retry(&["run", "--leader-election-retry-period", "3s"], true),
            Duration::from_secs(3)
        );
        assert_eq!(
            retry(&["run", "--leader-election-retry-period=1s"], true),
            Duration::from_secs(1)
        );
        assert_eq!(retry(&["run"], false), Duration::from_secs(2));
    }

    /// `text` with the date after each "valid until " left out: a certificate made now is
    /// valid until a day that moves.
    fn undated(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("valid until ") {
            let end = at + "valid until ".len();
            out.push_str(&rest[..end]);
            out.push_str("DATE");
            rest = rest[end..].get(10..).unwrap_or_default();
        }
        out.push_str(rest);
        out
    }

    /// What `check` prints for a fixed set of findings, each made by its function from what
    /// it would read: an install on 1.30, whose apiserver reaches the webhook or not.
    fn sample_report(reached: bool) -> String {
        use crate::webhook::admit::UnarmedDelete;
        use crate::webhook::registration::{Coverage, GuardScope, Registration};

        let installed: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "syncgc", "namespace": "syncgc-system"},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": {"readyReplicas": 2},
        }))
        .unwrap();
        let pod = "syncgc-5d8f7c9b6-x2x7k";
        let certs = crate::certs::DevCerts::generate(&crate::certs::SubjectAltNames {
            dns: vec!["syncgc-webhook.syncgc-system.svc".to_owned()],
            ips: vec![],
        })
        .unwrap();
        let client = WebhookClient::Service {
            namespace: "syncgc-system".to_owned(),
            name: "syncgc-webhook".to_owned(),
        };
        let configuration = Registration {
            name: "syncgc".to_owned(),
            client: client.clone(),
            ca_bundle: certs.ca_cert.clone().into_bytes(),
            timeout_seconds: 3,
            excluded_namespaces: vec!["kube-system".to_owned()],
            unarmed_delete: UnarmedDelete::Allow,
            guards: GuardScope::of(true, None),
            server: "v1.30.4".parse().unwrap(),
            scope: Coverage::Every,
            own_user: None,
        }
        .configuration();
        let mut dry_run = ConfigMap::default();
        if reached {
            dry_run.metadata.finalizers = Some(vec![SYNCHRONOUS_FINALIZER.to_owned()]);
        }
        let metrics_text = format!(
            "syncgc_build_info{{commit=\"abc\",version=\"{}\"}} 1\n\
             syncgc_ready{{condition=\"webhook\"}} 1\n\
             syncgc_guard_selected_objects 3\n\
             syncgc_guard_selection_changes_total 5\n",
            env!("CARGO_PKG_VERSION")
        );
        let report = crate::check::Report::of(vec![
            apiserver("v1.30.4"),
            discovery(&BTreeSet::new()),
            deployment(Some(&installed), None, AT, &[]),
            leader(
                Some(&lease(Some(pod), 99)),
                &replicas(&[pod], &[0]),
                at(100),
                AT,
            ),
            webhook(Some(&configuration), "syncgc", Some(2)),
            guards(&configuration, None),
            certificate(
                certs.ca_cert.as_bytes(),
                certs.tls_cert.as_bytes(),
                &client,
                time::OffsetDateTime::now_utc(),
                "Secret syncgc-system/syncgc-webhook-tls",
            ),
            admission(Ok(&dry_run), "default", Duration::from_millis(9)),
            permissions("system:serviceaccount:syncgc-system:syncgc", &[]),
            metrics(&metrics_text, &format!("pod {pod}")),
        ]);
        undated(&format!("$ syncgc check\n{}", report.text()))
    }

    /// The `syncgc check` samples are what `check` prints: the README's, whose apiserver does
    /// not reach the webhook, and docs/install.md's, whose does.
    #[test]
    fn the_check_samples_are_what_check_prints() {
        use crate::report::samples;
        for (page, reached) in [("README.md", false), ("docs/install.md", true)] {
            let sample = samples::block(page, "$ syncgc check\n");
            samples::assert_printed(page, &undated(&sample), &sample_report(reached));
        }
    }
}
