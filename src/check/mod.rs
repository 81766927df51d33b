//! `syncgc check`: is syncgc working on this cluster? From a user's kubeconfig, one finding per
//! question, each with what to do when it fails:
//!
//! - the apiserver's version, and which of syncgc's features it serves;
//! - API groups that do not answer (syncgc cannot see their objects, and a namespace that
//!   holds one cannot be deleted);
//! - syncgc's Deployment with ready replicas (and why the others are not: an image that cannot
//!   be pulled, a crash loop, no node to run on), and a replica holding the leader Lease (a
//!   warning, not a failure, while a replica that runs is taking it over: from a replica
//!   killed, or before the first has it);
//! - the MutatingWebhookConfiguration with its webhooks (for a Service, whether it has ready
//!   endpoints for the apiserver to call), and its CA bundle verifying the
//!   certificate syncgc serves (a TLS handshake for a URL, the certificate's Secret for a
//!   Service: a laptop cannot reach a Service);
//! - the proof that matters most: a server-side dry-run CREATE of an opted-in ConfigMap comes
//!   back armed, so the apiserver reaches the webhook (which fails open: otherwise objects
//!   silently stay unarmed);
//! - syncgc's ServiceAccount allowed what the collector does (SubjectAccessReviews);
//! - the leader's metrics answering, ready (read on its webhook port, which the apiserver
//!   reaches wherever it runs).
//!
//! With `--pre`, before installing: the version, the groups, the APIs syncgc needs, and
//! whether the user may install it. The findings are pure functions of what was read
//! ([`Finding`], in [`findings`]); the reading is thin. With `--wait`, it reads again until
//! nothing fails and no warning is left (a leader taken over), or the time is up.

mod findings;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Pod, Secret};
use kube::api::ObjectMeta;
use serde::Serialize;

use crate::api::{ApiError, Cluster};
use crate::certs::Certificate;
use crate::leader::LeaseRecord;
use crate::names::SYNCHRONOUS_ANNOTATION;
use crate::report::Output;
use crate::webhook::registration::WebhookClient;

pub use self::findings::*;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Check a cluster before installing syncgc: its version, its API groups, and whether you
    /// may install it.
    #[arg(long)]
    pub pre: bool,
    /// The namespace syncgc is installed in (its Deployment, Lease, ServiceAccount).
    #[arg(long, default_value = crate::leader::DEFAULT_NAMESPACE)]
    pub syncgc_namespace: String,
    /// The name of syncgc's Deployment.
    #[arg(long, default_value = "syncgc")]
    pub deployment: String,
    /// The name of syncgc's ServiceAccount.
    #[arg(long, default_value = "syncgc")]
    pub service_account: String,
    /// The name of syncgc's leader Lease.
    #[arg(long, default_value = "syncgc")]
    pub leader_election_lease: String,
    /// The name of syncgc's MutatingWebhookConfiguration.
    #[arg(long, default_value = "syncgc")]
    pub webhook_config_name: String,
    /// Where the dry-run ConfigMap is created: a namespace the webhook is not excluded from.
    #[arg(long, default_value = "default")]
    pub test_namespace: String,
    /// Read the metrics here (such as http://127.0.0.1:8080/metrics) instead of through the
    /// apiserver's proxy to the leader's pod.
    #[arg(long, value_name = "URL")]
    pub metrics_url: Option<String>,
    /// Output format: a line per check, or the report as JSON or YAML.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Check again every 2 seconds until no check fails and none warns (such as a leader
    /// Lease being taken over after an install or a restart), for at most this long (such as
    /// 60s); then print the last result.
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse)]
    pub wait: Option<Duration>,
    #[command(flatten)]
    pub access: crate::api::Access,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    /// Could not be asked here, or does not apply; not a failure.
    Skip,
    /// Not a failure, and passes on its own shortly (a replica taking the leader Lease over);
    /// `--wait` waits it out.
    Warn,
}

impl Status {
    fn mark(self) -> &'static str {
        match self {
            Self::Pass => "✓",
            Self::Fail => "✗",
            Self::Skip => "·",
            Self::Warn => "!",
        }
    }
}

/// One check's answer: what was found, and what to do when it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub status: Status,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    fn pass(check: &'static str, message: impl Into<String>) -> Self {
        Self {
            check,
            status: Status::Pass,
            message: message.into(),
            fix: None,
        }
    }

    fn fail(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            check,
            status: Status::Fail,
            message: message.into(),
            fix: Some(fix.into()),
        }
    }

    fn warn(check: &'static str, message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            check,
            status: Status::Warn,
            message: message.into(),
            fix: Some(hint.into()),
        }
    }

    fn skip(check: &'static str, message: impl Into<String>) -> Self {
        Self {
            check,
            status: Status::Skip,
            message: message.into(),
            fix: None,
        }
    }

    /// A check that could not be made because a read failed.
    fn unread(check: &'static str, err: &dyn std::fmt::Display) -> Self {
        Self::fail(
            check,
            format!("could not be read: {err}"),
            "make sure your kubeconfig's user may read it, then run syncgc check again",
        )
    }

    fn line(&self) -> String {
        let mut line = format!("{} {:<12} {}", self.status.mark(), self.check, self.message);
        if let Some(fix) = &self.fix {
            line.push_str("\n    → ");
            line.push_str(fix);
        }
        line
    }
}

/// The report `-o json` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    pub ok: bool,
    pub checks: Vec<Finding>,
}
/// What could be checked, in order; [`Report::ok`] when none failed.
pub async fn check(args: &CheckArgs) -> anyhow::Result<Report> {
    let cluster = args
        .access
        .cluster(Some(20.0), Duration::from_secs(15))
        .await?;
    let mut checks = Vec::new();
    let version = cluster.server_version().await?;
    checks.push(apiserver(&version));
    match crate::gc::discovery::discover(cluster.streams(), &[]).await {
        Ok(found) => {
            checks.push(discovery(&found.failed));
            if args.pre {
                checks.push(apis(&found.group_versions));
            }
        }
        Err(err) => checks.push(Finding::unread("discovery", &err)),
    }
    if args.pre {
        checks.push(self_review(&cluster, &args.syncgc_namespace).await);
        return Ok(Report::of(checks));
    }

    let at = format!("{}/{}", args.syncgc_namespace, args.deployment);
    let lease_at = format!("{}/{}", args.syncgc_namespace, args.leader_election_lease);
    let lease = cluster
        .get_whole(
            &cluster.namespaced::<Lease>(&args.syncgc_namespace),
            &args.leader_election_lease,
        )
        .await;
    let record = match &lease {
        Ok(lease) => lease
            .as_ref()
            .map(|l| LeaseRecord::of(l, Duration::from_secs(15))),
        Err(_) => None,
    };
    let deployments = cluster.namespaced::<Deployment>(&args.syncgc_namespace);
    let found = cluster.get_whole(&deployments, &args.deployment).await;
    let pods = match &found {
        Ok(Some(found)) => pods(&cluster, found).await,
        _ => None,
    };
    let replicas = match (&found, &pods) {
        (Ok(Some(found)), Some(pods)) => Replicas::of(found, pods),
        _ => Replicas::unknown(),
    };
    let now = crate::api::clock::now();
    let holder = leading(record.as_ref(), &replicas, now);
    checks.push(match &found {
        Ok(found) => {
            let waiting: Vec<String> = pods.iter().flatten().filter_map(not_ready).collect();
            deployment(found.as_ref(), holder.as_deref(), &at, &waiting)
        }
        Err(err) => Finding::unread("deployment", err),
    });
    checks.push(match &lease {
        Ok(_) => leader(record.as_ref(), &replicas, now, &lease_at),
        Err(err) => Finding::unread("leader", err),
    });

    let configuration = cluster
        .get_whole(
            &cluster.all::<MutatingWebhookConfiguration>(),
            &args.webhook_config_name,
        )
        .await;
    match &configuration {
        Ok(configuration) => {
            let first = configuration
                .as_ref()
                .and_then(|c| c.webhooks.as_ref())
                .and_then(|hooks| hooks.first());
            let ready = match first.and_then(|h| h.client_config.service.as_ref()) {
                Some(service) => ready_endpoints(&cluster, &service.namespace, &service.name).await,
                None => None,
            };
            checks.push(webhook(
                configuration.as_ref(),
                &args.webhook_config_name,
                ready,
            ));
            if let Some(configuration) = configuration.as_ref().filter(|c| c.webhooks.is_some()) {
                let deployment = found.as_ref().ok().and_then(Option::as_ref);
                let limit = deployment.and_then(|d| env(d, "SYNCGC_MAX_CASCADE"));
                checks.push(guards(configuration, limit.as_deref()));
            }
            if let Some(hook) = first {
                let deployment = found.as_ref().ok().and_then(Option::as_ref);
                checks.push(served_certificate(&cluster, &hook.client_config, deployment).await);
            }
        }
        Err(err) => checks.push(Finding::unread("webhook", err)),
    }

    checks.push(dry_run(&cluster, &args.test_namespace).await);

    let who = format!(
        "system:serviceaccount:{}:{}",
        args.syncgc_namespace, args.service_account
    );
    // syncgc writes its configuration itself when its Deployment says so (or, run outside
    // one, when the configuration is labelled as syncgc's).
    let managed = match found.as_ref().ok().and_then(Option::as_ref) {
        Some(deployment) => env(deployment, "SYNCGC_MANAGE_WEBHOOK").as_deref() == Some("true"),
        None => configuration
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .is_some_and(|c| {
                c.metadata.labels.as_ref().is_some_and(|l| {
                    l.get("app.kubernetes.io/managed-by").map(String::as_str) == Some("syncgc")
                })
            }),
    };
    let needs = needs(&args.syncgc_namespace, &args.webhook_config_name, managed);
    checks.push(match reviews(&cluster, Some(&who), &needs).await {
        Ok(denied) => permissions(&who, &denied),
        Err(err) => Finding::unread("permissions", &err),
    });

    checks.push(read_metrics(&cluster, args, holder.as_deref()).await);
    Ok(Report::of(checks))
}

impl Report {
    fn of(checks: Vec<Finding>) -> Self {
        Self {
            ok: checks.iter().all(|c| c.status != Status::Fail),
            checks,
        }
    }

    /// The checks that failed or warn: what `--wait` waits for.
    fn unsettled(&self) -> Vec<&'static str> {
        self.checks
            .iter()
            .filter(|c| matches!(c.status, Status::Fail | Status::Warn))
            .map(|c| c.check)
            .collect()
    }

    pub fn text(&self) -> String {
        let mut text: String = self.checks.iter().map(|c| c.line() + "\n").collect();
        let count = |status| self.checks.iter().filter(|c| c.status == status).count();
        let warnings = match count(Status::Warn) {
            0 => String::new(),
            n => format!(", {n} warning(s)"),
        };
        text.push_str(&match count(Status::Fail) {
            0 if warnings.is_empty() => "syncgc works here\n".to_owned(),
            0 => format!("no check failed{warnings}\n"),
            n => format!("{n} check(s) failed{warnings}\n"),
        });
        text
    }
}

/// The installing user's own rights (SelfSubjectAccessReviews).
async fn self_review(cluster: &Cluster, namespace: &str) -> Finding {
    let needs = install_needs(namespace);
    match reviews(cluster, None, &needs).await {
        Ok(denied) => install_permissions(&denied),
        Err(err) => Finding::unread("install", &err),
    }
}

/// Which of `needs` the apiserver denies `user` (the kubeconfig's own user when `None`).
async fn reviews<'a>(
    cluster: &Cluster,
    user: Option<&str>,
    needs: &'a [Need],
) -> Result<Vec<&'a Need>, ApiError> {
    let mut denied = Vec::new();
    for need in needs {
        let allowed = match user {
            Some(user) => {
                let review = SubjectAccessReview {
                    metadata: ObjectMeta::default(),
                    spec: SubjectAccessReviewSpec {
                        user: Some(user.to_owned()),
                        resource_attributes: Some(need.attributes()),
                        ..SubjectAccessReviewSpec::default()
                    },
                    status: None,
                };
                let api = cluster.all::<SubjectAccessReview>();
                let answer = cluster.create_whole(&api, &review).await?;
                answer.status.is_some_and(|s| s.allowed)
            }
            None => {
                let review = SelfSubjectAccessReview {
                    metadata: ObjectMeta::default(),
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(need.attributes()),
                        ..SelfSubjectAccessReviewSpec::default()
                    },
                    status: None,
                };
                let api = cluster.all::<SelfSubjectAccessReview>();
                let answer = cluster.create_whole(&api, &review).await?;
                answer.status.is_some_and(|s| s.allowed)
            }
        };
        if !allowed {
            denied.push(need);
        }
    }
    Ok(denied)
}

/// A server-side dry-run CREATE of an opted-in ConfigMap in `namespace`.
async fn dry_run(cluster: &Cluster, namespace: &str) -> Finding {
    let object = ConfigMap {
        metadata: ObjectMeta {
            name: Some("syncgc-check".to_owned()),
            annotations: Some([(SYNCHRONOUS_ANNOTATION.to_owned(), "true".to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let started = Instant::now();
    let created = cluster
        .create_whole_dry_run(&cluster.namespaced::<ConfigMap>(namespace), &object)
        .await;
    admission(created.as_ref(), namespace, started.elapsed())
}

/// The certificate the webhook serves, against the configuration's CA bundle: by a TLS
/// handshake for a URL, from the Secret the Deployment names for a Service.
async fn served_certificate(
    cluster: &Cluster,
    config: &k8s_openapi::api::admissionregistration::v1::WebhookClientConfig,
    deployment: Option<&Deployment>,
) -> Finding {
    let ca_bundle = config
        .ca_bundle
        .as_ref()
        .map(|b| b.0.clone())
        .unwrap_or_default();
    let now = time::OffsetDateTime::now_utc();
    if let Some(url) = &config.url {
        let client = WebhookClient::Url(url.clone());
        return match handshake(url, &ca_bundle).await {
            Ok(chain) => certificate(&ca_bundle, &chain, &client, now, url),
            Err(err) => Finding::fail(
                "certificate",
                format!("a TLS handshake with {url} verified by the caBundle failed: {err}"),
                "the caBundle must be the CA that signed the certificate served there, which \
                 must name the URL's host",
            ),
        };
    }
    let Some(service) = &config.service else {
        return Finding::skip(
            "certificate",
            "the webhook names neither a URL nor a Service",
        );
    };
    let client = WebhookClient::Service {
        namespace: service.namespace.clone(),
        name: service.name.clone(),
    };
    let Some((namespace, name)) = deployment.and_then(tls_secret) else {
        return Finding::skip(
            "certificate",
            "no Secret of the serving certificate named in syncgc's Deployment (the admission \
             line proves the TLS connection)",
        );
    };
    let source = format!("Secret {namespace}/{name}");
    match cluster
        .get_whole(&cluster.namespaced::<Secret>(&namespace), &name)
        .await
    {
        Ok(Some(secret)) => {
            let served = secret
                .data
                .as_ref()
                .and_then(|d| d.get("tls.crt"))
                .map(|b| b.0.clone())
                .unwrap_or_default();
            certificate(&ca_bundle, &served, &client, now, &source)
        }
        Ok(None) => Finding::fail(
            "certificate",
            format!("no {source}"),
            "syncgc makes it again when it runs with --tls-secret; cert-manager when its \
             Certificate is ready",
        ),
        Err(err) => Finding::unread("certificate", &err),
    }
}

/// The Secret syncgc's Deployment takes its serving certificate from: `SYNCGC_TLS_SECRET`, or
/// a mounted Secret volume.
fn tls_secret(deployment: &Deployment) -> Option<(String, String)> {
    let namespace = deployment.metadata.namespace.clone().unwrap_or_default();
    let pod = deployment.spec.as_ref()?.template.spec.as_ref()?;
    let from_env = env(deployment, "SYNCGC_TLS_SECRET")
        .as_deref()
        .and_then(crate::names::namespaced_name);
    from_env.or_else(|| {
        let secret = pod
            .volumes
            .iter()
            .flatten()
            .find_map(|v| v.secret.as_ref()?.secret_name.clone())?;
        Some((namespace, secret))
    })
}

/// The value of the environment variable `name` of the Deployment's containers.
fn env(deployment: &Deployment, name: &str) -> Option<String> {
    let pod = deployment.spec.as_ref()?.template.spec.as_ref()?;
    pod.containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == name)?
        .value
        .clone()
}

/// The certificate chain (PEM) served at `url`, in a handshake verified by `ca_bundle` for the
/// URL's host, as the apiserver makes it.
async fn handshake(url: &str, ca_bundle: &[u8]) -> anyhow::Result<Vec<u8>> {
    use rustls::pki_types::{CertificateDer, ServerName};
    let uri: http::Uri = url.parse()?;
    let host = uri
        .host()
        .ok_or_else(|| anyhow::anyhow!("no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let mut roots = rustls::RootCertStore::empty();
    for ca in Certificate::parse_all(ca_bundle)? {
        roots.add(CertificateDer::from(ca.der.clone()))?;
    }
    crate::api::install_crypto_provider();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from(host.clone())?;
    let tcp = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await??;
    let tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp)).await??;
    let chain = tls.get_ref().1.peer_certificates().unwrap_or_default();
    Ok(chain
        .iter()
        .map(|c| crate::certs::pem_of(c.as_ref()))
        .collect::<String>()
        .into_bytes())
}

/// How many ready addresses the Service `namespace/name` has; `None` when its Endpoints cannot
/// be read.
async fn ready_endpoints(cluster: &Cluster, namespace: &str, name: &str) -> Option<usize> {
    let endpoints = cluster
        .get_whole(&cluster.namespaced::<Endpoints>(namespace), name)
        .await
        .ok()?;
    Some(
        endpoints
            .iter()
            .flat_map(|e| e.subsets.iter().flatten())
            .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
            .sum(),
    )
}

/// The Pods of syncgc's Deployment: why those not ready are not ([`not_ready`]), and which
/// run ([`Replicas`]); `None` when they cannot be listed (the Deployment's line says what it
/// can without them, and no replica is known to run).
async fn pods(cluster: &Cluster, deployment: &Deployment) -> Option<Vec<Pod>> {
    let namespace = deployment.metadata.namespace.as_deref().unwrap_or_default();
    let selector = crate::disarm::pod_selector(deployment).filter(|s| !s.is_empty())?;
    cluster
        .list_whole(&cluster.namespaced::<Pod>(namespace), &selector)
        .await
        .ok()
}

/// The leader's `/metrics`: at `--metrics-url`, or through the apiserver's proxy to the pod
/// that holds the Lease, on its webhook port (HTTPS), which the install's NetworkPolicy opens
/// to the apiserver wherever it runs (the metrics port takes Prometheus's namespaces only).
async fn read_metrics(cluster: &Cluster, args: &CheckArgs, holder: Option<&str>) -> Finding {
    let (from, text) = if let Some(url) = &args.metrics_url {
        (url.clone(), crate::api::get_text(url).await)
    } else if let Some(pod) = holder {
        let path = format!(
            "/api/v1/namespaces/{}/pods/https:{pod}:8443/proxy/metrics",
            args.syncgc_namespace
        );
        (format!("pod {pod}"), cluster.get_text_at(&path).await)
    } else {
        return Finding::skip(
            "metrics",
            "no leader to ask (give --metrics-url to read a replica's metrics)",
        );
    };
    match text {
        Ok(text) => metrics(&text, &from),
        Err(err) => Finding::fail(
            "metrics",
            format!("{from} does not answer: {err:#}"),
            "the apiserver reads them through its proxy to the pod's webhook port (8443), \
             the port it calls for admission: check the webhook line, and a firewall between \
             the control plane and the pods; give --metrics-url to read them another way",
        ),
    }
}

/// How long `--wait` waits between two checks.
const AGAIN: Duration = Duration::from_secs(2);

impl CheckArgs {
    /// Runs the checks and prints them; whether every check passed.
    pub async fn run(self) -> anyhow::Result<bool> {
        let report = self.settled().await?;
        print!("{}", self.output.whole(|| &report, || report.text())?);
        Ok(report.ok)
    }

    /// The checks, again every [`AGAIN`] until none fails or warns or `--wait` has passed
    /// (once without it): the last report.
    async fn settled(&self) -> anyhow::Result<Report> {
        let until = self.wait.map(|wait| Instant::now() + wait);
        loop {
            let report = check(self).await?;
            let unsettled = report.unsettled();
            let left = until.map_or(Duration::ZERO, |until| {
                until.saturating_duration_since(Instant::now())
            });
            if unsettled.is_empty() || left.is_zero() {
                return Ok(report);
            }
            eprintln!(
                "waiting for {} ({:.0}s left)",
                unsettled.join(", "),
                left.as_secs_f64().ceil()
            );
            tokio::time::sleep(AGAIN.min(left)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::{DevCerts, SubjectAltNames};
    use crate::names::SYNCHRONOUS_FINALIZER;
    use std::collections::BTreeSet;

    #[test]
    fn the_version_says_which_features_apply() {
        let old = apiserver("v1.20.2");
        assert_eq!(old.status, Status::Pass);
        assert!(
            old.message.contains("no matchConditions"),
            "{}",
            old.message
        );
        assert!(old.message.contains("install-1.20.yaml"));
        let new = apiserver("v1.30.1-eks-abc");
        assert!(
            new.message.contains("matchConditions (only opted-in"),
            "{}",
            new.message
        );
        assert_eq!(apiserver("v1.19.0").status, Status::Fail);
        assert_eq!(apiserver("banana").status, Status::Fail);
    }

    #[test]
    fn failing_groups_fail_with_what_to_do() {
        assert_eq!(discovery(&BTreeSet::new()).status, Status::Pass);
        let failed = discovery(&["metrics.k8s.io/v1beta1".to_owned()].into());
        assert_eq!(failed.status, Status::Fail);
        assert!(failed.message.contains("metrics.k8s.io/v1beta1"));
        assert!(failed.fix.unwrap().contains("apiservices"));
    }

    #[test]
    fn a_leader_without_a_deployment_is_not_a_failure() {
        assert_eq!(
            deployment(None, Some("laptop"), "syncgc-system/syncgc", &[]).status,
            Status::Skip
        );
        assert_eq!(
            deployment(None, None, "syncgc-system/syncgc", &[]).status,
            Status::Fail
        );
        let mut d = Deployment {
            spec: Some(Default::default()),
            ..Default::default()
        };
        d.spec.as_mut().unwrap().replicas = Some(2);
        assert_eq!(
            deployment(Some(&d), None, "ns/syncgc", &[]).status,
            Status::Fail
        );
        d.status = Some(Default::default());
        d.status.as_mut().unwrap().ready_replicas = Some(1);
        let ready = deployment(Some(&d), None, "ns/syncgc", &[]);
        assert_eq!(ready.status, Status::Pass);
        assert_eq!(ready.message, "ns/syncgc: 1 of 2 replicas ready");
    }

    #[test]
    fn the_guards_are_active_when_their_webhook_is_registered() {
        use crate::webhook::admit::UnarmedDelete;
        use crate::webhook::registration::{Coverage, GuardScope, Registration, WebhookClient};
        let registration = |guards| {
            Registration {
                name: "syncgc".into(),
                client: WebhookClient::Url("https://127.0.0.1:8443/mutate".into()),
                ca_bundle: Vec::new(),
                timeout_seconds: 3,
                excluded_namespaces: Vec::new(),
                unarmed_delete: UnarmedDelete::Allow,
                guards,
                server: crate::api::ServerVersion {
                    major: 1,
                    minor: 20,
                },
                scope: Coverage::Every,
                own_user: None,
            }
            .configuration()
        };
        let on = guards(&registration(GuardScope::Every), Some("500"));
        assert!(on.message.starts_with("active"), "{}", on.message);
        assert!(on.message.contains("may delete 500"), "{}", on.message);
        assert!(on.message.contains("every DELETE"), "{}", on.message);
        let unlimited = guards(&registration(GuardScope::Selected), None);
        assert!(
            unlimited.message.contains("no cascade limit"),
            "{}",
            unlimited.message
        );
        assert!(
            unlimited.message.contains("labelled syncgc.io/guarded"),
            "{}",
            unlimited.message
        );
        let off = guards(&registration(GuardScope::Off), Some("500"));
        assert!(off.message.starts_with("off"), "{}", off.message);
    }

    #[test]
    fn a_webhook_service_without_endpoints_fails() {
        let configuration: MutatingWebhookConfiguration =
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": "syncgc" },
                "webhooks": [{
                    "name": "arm.syncgc.io", "admissionReviewVersions": ["v1"],
                    "sideEffects": "NoneOnDryRun", "failurePolicy": "Ignore",
                    "clientConfig": { "service": { "namespace": "syncgc-system",
                                                   "name": "syncgc-webhook" } },
                }],
            }))
            .unwrap();
        let none = webhook(Some(&configuration), "syncgc", Some(0));
        assert_eq!(none.status, Status::Fail);
        assert!(
            none.message.contains("no ready endpoints"),
            "{}",
            none.message
        );
        assert!(none.message.contains("unarmed"), "{}", none.message);
        assert!(none.fix.unwrap().contains("get endpoints syncgc-webhook"));
        let two = webhook(Some(&configuration), "syncgc", Some(2));
        assert_eq!(two.status, Status::Pass);
        assert!(
            two.message.ends_with("2 ready endpoint(s)"),
            "{}",
            two.message
        );
        assert_eq!(
            webhook(Some(&configuration), "syncgc", None).status,
            Status::Pass
        );
    }

    /// A Pod of the release's image that the nodes cannot pull, as the kubelet reports it.
    fn pulling(name: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name },
            "status": { "containerStatuses": [{
                "name": "syncgc", "image": "ghcr.io/syncgc/syncgc:v0.1.0", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": { "waiting": {
                    "reason": "ImagePullBackOff",
                    "message": "Back-off pulling image \"ghcr.io/syncgc/syncgc:v0.1.0\"" } },
            }] },
        }))
        .unwrap()
    }

    #[test]
    fn replicas_not_ready_say_why() {
        let waiting: Vec<String> = [pulling("a"), pulling("b")]
            .iter()
            .filter_map(not_ready)
            .collect();
        assert_eq!(
            waiting[0],
            "pod a: ImagePullBackOff (Back-off pulling image \"ghcr.io/syncgc/syncgc:v0.1.0\")"
        );
        let mut d = Deployment {
            spec: Some(Default::default()),
            ..Default::default()
        };
        d.spec.as_mut().unwrap().replicas = Some(2);
        let none = deployment(Some(&d), None, "ns/syncgc", &waiting);
        assert_eq!(none.status, Status::Fail);
        assert!(
            none.message.contains("pod b: ImagePullBackOff"),
            "{}",
            none.message
        );
        assert!(none.fix.unwrap().contains("cannot pull syncgc's image"));

        let unscheduled: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "c" },
            "status": { "conditions": [{ "type": "PodScheduled", "status": "False",
                "message": "0/3 nodes are available: 3 Insufficient memory." }] },
        }))
        .unwrap();
        assert_eq!(
            not_ready(&unscheduled).unwrap(),
            "pod c: not scheduled (0/3 nodes are available: 3 Insufficient memory.)"
        );
        let mut ready = pulling("d");
        ready.status = Some(Default::default());
        assert_eq!(not_ready(&ready), None);
    }

    fn certs(dns: &str) -> DevCerts {
        DevCerts::generate(&SubjectAltNames {
            dns: vec![dns.to_owned()],
            ips: vec![],
        })
        .unwrap()
    }

    #[test]
    fn the_ca_bundle_must_verify_the_served_certificate_for_the_services_name() {
        let client = WebhookClient::Service {
            namespace: "syncgc-system".into(),
            name: "syncgc-webhook".into(),
        };
        let now = time::OffsetDateTime::now_utc();
        let right = certs("syncgc-webhook.syncgc-system.svc");
        let found = certificate(
            right.ca_cert.as_bytes(),
            right.tls_cert.as_bytes(),
            &client,
            now,
            "Secret s",
        );
        assert_eq!(found.status, Status::Pass, "{found:?}");
        let other = certs("syncgc-webhook.syncgc-system.svc");
        let wrong_ca = certificate(
            other.ca_cert.as_bytes(),
            right.tls_cert.as_bytes(),
            &client,
            now,
            "Secret s",
        );
        assert_eq!(wrong_ca.status, Status::Fail);
        assert!(wrong_ca.message.contains("does not verify"));
        let misnamed = certs("elsewhere.svc");
        let found = certificate(
            misnamed.ca_cert.as_bytes(),
            misnamed.tls_cert.as_bytes(),
            &client,
            now,
            "Secret s",
        );
        assert_eq!(found.status, Status::Fail);
        assert!(found.message.contains("names"), "{found:?}");
        let later = now + time::Duration::days(3650);
        let expired = certificate(
            right.ca_cert.as_bytes(),
            right.tls_cert.as_bytes(),
            &client,
            later,
            "Secret s",
        );
        assert!(expired.message.contains("expired"), "{expired:?}");
        assert_eq!(
            certificate(b"", right.tls_cert.as_bytes(), &client, now, "s").status,
            Status::Fail
        );
        assert!(
            certificate(right.ca_cert.as_bytes(), b"", &client, now, "Secret s")
                .message
                .contains("no serving certificate")
        );
    }

    #[test]
    fn only_an_armed_dry_run_proves_the_webhook_is_reached() {
        let mut object = ConfigMap::default();
        let unarmed = admission(Ok(&object), "default", Duration::from_millis(3));
        assert_eq!(unarmed.status, Status::Fail);
        assert!(unarmed.fix.unwrap().contains("8443"));
        object.metadata.finalizers = Some(vec![SYNCHRONOUS_FINALIZER.to_owned()]);
        let armed = admission(Ok(&object), "default", Duration::from_millis(3));
        assert_eq!(armed.status, Status::Pass);
        assert!(armed.message.contains("armed in 3 ms"));
    }

    #[test]
    fn the_collectors_needs_and_what_was_denied() {
        let needs = needs("syncgc-system", "syncgc", true);
        assert_eq!(needs.len(), 11);
        assert_eq!(super::needs("syncgc-system", "syncgc", false).len(), 9);
        assert!(
            needs
                .iter()
                .any(|n| n.verb == "delete" && n.resource == "*")
        );
        assert_eq!(
            permissions("sa", &[]).status,
            Status::Pass,
            "nothing denied"
        );
        let denied = permissions("sa", &[&needs[4], &needs[8]]);
        assert_eq!(
            denied.message,
            "sa may not: delete *.*, update leases.coordination.k8s.io in syncgc-system"
        );
    }

    #[test]
    fn metrics_name_the_version_and_failing_conditions() {
        let text = "# HELP x\nsyncgc_build_info{commit=\"abc\",version=\"0.1.0\"} 1\n\
                    syncgc_ready{condition=\"watches\"} 1\nsyncgc_ready{condition=\"webhook\"} 0\n";
        let found = metrics(text, "pod a");
        assert_eq!(found.status, Status::Fail);
        assert_eq!(found.message, "pod a: syncgc 0.1.0, not ready: webhook");
        let ready = metrics(&text.replace("} 0", "} 1"), "pod a");
        assert_eq!(ready.status, Status::Pass);
        assert_eq!(ready.message, "pod a: syncgc 0.1.0, ready");
        let guarded = format!(
            "{}syncgc_guard_selected_objects 12\nsyncgc_guard_selection_changes_total{{change=\"selected\",result=\"ok\"}} 12\n",
            text.replace("} 0", "} 1")
        );
        assert_eq!(
            metrics(&guarded, "pod a").message,
            "pod a: syncgc 0.1.0, ready; the guards select 12 object(s)"
        );
        assert_eq!(metrics("up 1\n", "x").status, Status::Fail);
    }

    #[test]
    fn the_report_fails_only_on_failures_and_says_what_to_do() {
        let report = Report::of(vec![
            Finding::pass("a", "fine"),
            Finding::skip("b", "not here"),
        ]);
        assert!(report.ok);
        assert!(report.text().ends_with("syncgc works here\n"));
        let report = Report::of(vec![Finding::fail("c", "broken", "mend it")]);
        assert!(!report.ok);
        assert_eq!(
            report.text(),
            "✗ c            broken\n    → mend it\n1 check(s) failed\n"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["checks"][0]["status"], "fail");
        assert_eq!(json["checks"][0]["fix"], "mend it");
        assert_eq!(report.unsettled(), ["c"]);
    }

    #[test]
    fn a_warning_is_not_a_failure_but_is_waited_for() {
        let report = Report::of(vec![
            Finding::pass("a", "fine"),
            Finding::warn("leader", "being taken over", "wait"),
        ]);
        assert!(report.ok);
        assert_eq!(report.unsettled(), ["leader"]);
        assert!(
            report.text().ends_with(
                "! leader       being taken over\n    → wait\nno check failed, 1 warning(s)\n"
            ),
            "{}",
            report.text()
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["ok"], true);
        assert_eq!(json["checks"][1]["status"], "warn");
        let report = Report::of(vec![
            Finding::warn("leader", "being taken over", "wait"),
            Finding::fail("c", "broken", "mend it"),
        ]);
        assert!(!report.ok);
        assert!(
            report.text().ends_with("1 check(s) failed, 1 warning(s)\n"),
            "{}",
            report.text()
        );
        assert!(
            Report::of(vec![Finding::skip("b", "not here")])
                .unsettled()
                .is_empty()
        );
    }
}
