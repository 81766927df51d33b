//! `--manage-webhook`: syncgc keeps its own MutatingWebhookConfiguration, and with
//! `--tls-secret` its own CA and serving certificate.
//!
//! Every replica runs the same pass, every few seconds and whenever discovery changes what is
//! served: it reads the server's version and the configuration; with `--tls-secret` it brings
//! the Secret up to date (see [`super::certificate`]) and serves the certificate it holds;
//! then it writes the configuration if what it should say (the rules and fields for the
//! oldest version the apiservers answered lately, see [`super::served`], the CA bundle)
//! differs from what it says. Replicas that agree write nothing; a
//! configuration edited by hand is put back at the next pass. The `APIService` of syncgc's API,
//! where it is installed, gets the same CA bundle.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, RuleWithOperations,
};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::certificate::{self, Keeper, SecretError};
use super::registration::{ARM_WEBHOOK, Coverage, Registration, ServerVersion};
use super::served::{SERVED_VERSIONS_ANNOTATION, Served};
use super::tls::ReloadingCert;
use crate::api::{ApiError, Cluster, clock};
use crate::duration::Backoff;
use crate::gc::discovery;
use crate::metrics::{Condition, Metrics, Readiness};

/// Where the CA bundle to publish comes from.
pub enum CaSource {
    /// The Secret syncgc keeps (`--tls-secret`); its certificate is served.
    Secret(Box<Keeper>),
    /// A file someone else keeps (`--webhook-ca-file`, for example cert-manager's `ca.crt`).
    File(PathBuf),
}

/// The `APIService` of syncgc's API, whose CA bundle the passes keep.
pub const API_SERVICE: &str = "v1alpha1.syncgc.io";

/// How often a pass runs when nothing asks sooner.
pub const ROUND_INTERVAL: Duration = Duration::from_secs(10);
/// The shortest time between passes.
const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The longest wait after failed passes.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub struct Managed {
    pub cluster: Cluster,
    /// The configuration to keep, but for the server's version, the scope and the CA bundle.
    pub registration: Registration,
    pub ca: CaSource,
    pub cert: Arc<ReloadingCert>,
    /// The table of resources, for the rules written before 1.28.
    pub resources: discovery::ResourcesReader,
    pub readiness: Readiness,
    pub metrics: Metrics,
    /// syncgc's own user, asked once of an apiserver from 1.28 on (see
    /// [`Registration::own_user`]).
    pub own_user: tokio::sync::OnceCell<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error("the apiserver's version: {0}")]
    Version(String),
    #[error("reading the CA bundle {}: {source}", .path.display())]
    CaFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the serving certificate of the Secret: {0}")]
    Tls(#[from] super::tls::TlsError),
    #[error("MutatingWebhookConfiguration {0} was written by another replica in between")]
    Conflict(String),
}

impl ManageError {
    fn is_conflict(&self) -> bool {
        matches!(
            self,
            Self::Conflict(_) | Self::Secret(SecretError::Conflict(_))
        )
    }
}

/// What a pass did to the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    Nothing,
    Created,
    Updated,
    /// Not yet: before 1.28 the rules wait for the first discovery.
    Waiting,
}

impl Managed {
    /// The interval between passes: short enough to renew within the renewal margin.
    fn interval(&self) -> Duration {
        match &self.ca {
            CaSource::Secret(keeper) => {
                (keeper.validity.renew_before / 4).clamp(MIN_INTERVAL, ROUND_INTERVAL)
            }
            CaSource::File(_) => ROUND_INTERVAL,
        }
    }

    /// Runs passes until `shutdown`. Condition `webhook` fails until there is a certificate to
    /// serve (with `--tls-secret`, from the Secret) and only then: admission needs nothing more,
    /// whatever later passes meet. Condition `registration` fails until a pass has written
    /// the configuration, and while passes fail (a refused write among them).
    pub async fn run(self, shutdown: CancellationToken) {
        self.readiness
            .fail(Condition::Registration, "the webhook is not registered yet");
        if !self.cert.is_loaded() {
            self.readiness
                .fail(Condition::Webhook, "no certificate to serve yet");
        }
        let mut discoveries = self.resources.discoveries();
        let mut backoff = Backoff::new(MIN_INTERVAL, MAX_BACKOFF);
        loop {
            let pass = self.reconcile().await;
            let result = if pass.is_ok() { "ok" } else { "error" };
            self.metrics
                .managed_rounds
                .with_label_values(&[result])
                .inc();
            let wait = match &pass {
                Ok(Written::Waiting) => {
                    backoff.reset();
                    self.readiness.fail(
                        Condition::Registration,
                        "waiting for discovery to write the webhook's rules",
                    );
                    self.interval()
                }
                Ok(_) => {
                    backoff.reset();
                    self.readiness.clear(Condition::Registration);
                    self.interval()
                }
                Err(err) if err.is_conflict() => {
                    tracing::debug!(%err, "managing the webhook");
                    MIN_INTERVAL
                }
                Err(err) => {
                    let wait = backoff.failed();
                    tracing::warn!(%err, retry_in = ?wait, "managing the webhook");
                    self.readiness
                        .fail(Condition::Registration, err.to_string());
                    wait
                }
            };
            if self.cert.is_loaded() {
                self.readiness.clear(Condition::Webhook);
            } else if let Err(err) = &pass {
                self.readiness.fail(
                    Condition::Webhook,
                    format!("no certificate to serve: {err}"),
                );
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
                // Once nothing writes the table any more, only the interval.
                Ok(()) = discoveries.changed() => {}
            }
        }
    }

    /// syncgc's own user, asked once; `None` (its DELETEs then reach the guards' webhook,
    /// which lets them through as judged) until the apiserver says.
    async fn own_user(&self) -> Option<String> {
        let asked = self.own_user.get_or_try_init(|| async {
            match self.cluster.username().await {
                Ok(Some(user)) => Ok(user),
                Ok(None) => Err("the SelfSubjectReview names no user".to_owned()),
                Err(err) => Err(err.to_string()),
            }
        });
        match asked.await {
            Ok(user) => Some(user.clone()),
            Err(err) => {
                tracing::warn!(%err, "could not learn syncgc's own user: its own DELETEs of guarded objects reach the guards' webhook");
                None
            }
        }
    }

    async fn reconcile(&self) -> Result<Written, ManageError> {
        let answered: ServerVersion = self
            .cluster
            .server_version()
            .await?
            .parse()
            .map_err(ManageError::Version)?;
        let api: Api<MutatingWebhookConfiguration> = self.cluster.all();
        let name = &self.registration.name;
        let existing = self.cluster.get_whole(&api, name).await?;
        let mut served = existing
            .as_ref()
            .and_then(|c| c.annotations().get(SERVED_VERSIONS_ANNOTATION))
            .map(|record| Served::parse(record))
            .unwrap_or_default();
        served.answered(answered, clock::now());
        let server = served.oldest().unwrap_or(answered);
        let record = served.to_string();
        let ca_bundle = match &self.ca {
            CaSource::Secret(keeper) => {
                let (contents, changes) = keeper
                    .reconcile(&self.cluster, &published(existing.as_ref()))
                    .await?;
                for change in &changes {
                    tracing::info!(secret = %keeper.secret(), change = change.as_str(), "certificate Secret written");
                    self.count("secret", change.as_str());
                }
                let origin = |key: &str| format!("Secret {} {key}", keeper.secret());
                let reload = self.cert.set(
                    contents.tls_cert.as_bytes(),
                    contents.tls_key.as_bytes(),
                    &origin(crate::certs::TLS_CERT),
                    &origin(crate::certs::TLS_KEY),
                )?;
                if reload == super::tls::Reload::Reloaded {
                    tracing::info!("serving the certificate of the Secret");
                    self.metrics
                        .certificate_reloads
                        .with_label_values(&["reloaded"])
                        .inc();
                }
                if let Some(not_after) = contents.serving_not_after() {
                    self.metrics
                        .certificate_expiry
                        .set(not_after.unix_timestamp());
                }
                contents.ca_bundle.into_bytes()
            }
            CaSource::File(path) => std::fs::read(path).map_err(|source| ManageError::CaFile {
                path: path.clone(),
                source,
            })?,
        };
        self.publish_api_ca(&ca_bundle).await;
        let scope = if server.match_conditions() {
            Coverage::Every
        } else if *self.resources.discoveries().borrow() == 0 {
            return Ok(Written::Waiting);
        } else {
            let resources = self.resources.read();
            let discovered = Coverage::of_discovery(
                resources.served().map(|(_, r)| r),
                resources.failed_groups(),
            );
            // While apiservers of several versions answer, another replica's discovery may
            // be another version's: the rules only grow until one version is left, so that
            // the replicas agree.
            match arm_rules(existing.as_ref()) {
                Some(written) if served.mixed() => discovered.widened(written),
                _ => discovered,
            }
        };
        let own_user = match server.match_conditions() {
            true => self.own_user().await,
            false => None,
        };
        let desired = Registration {
            server,
            scope,
            ca_bundle,
            own_user,
            ..self.registration.clone()
        }
        .configuration();
        let written = match existing {
            None => {
                let mut created = desired;
                created.metadata.labels = Some(certificate::managed_by());
                created.metadata.annotations =
                    Some([(SERVED_VERSIONS_ANNOTATION.to_owned(), record)].into());
                self.write(self.cluster.create_whole(&api, &created).await)?;
                Written::Created
            }
            Some(mut current) => {
                let recorded =
                    current.annotations().get(SERVED_VERSIONS_ANNOTATION) == Some(&record);
                // Its labels are left as they are: an installer's (Helm's
                // `app.kubernetes.io/managed-by: Helm`) is not fought over.
                if current.webhooks == desired.webhooks && recorded {
                    return Ok(Written::Nothing);
                }
                current
                    .annotations_mut()
                    .insert(SERVED_VERSIONS_ANNOTATION.to_owned(), record);
                current.webhooks = desired.webhooks;
                self.write(self.cluster.replace_whole(&api, &current).await)?;
                Written::Updated
            }
        };
        let what = if written == Written::Created {
            "created"
        } else {
            "updated"
        };
        tracing::info!(configuration = %name, %server, %answered, what, "webhook configuration written");
        self.count("mutatingwebhookconfiguration", what);
        Ok(written)
    }

    /// Gives the `APIService` of syncgc's API (installed beside the configuration, see
    /// [`crate::aggregated`]) the same CA bundle, when it differs and the service checks it.
    /// The webhook does not wait on it: a failure is logged, and the next pass tries again.
    async fn publish_api_ca(&self, ca_bundle: &[u8]) {
        let api: Api<APIService> = self.cluster.all();
        let existing = match self.cluster.get_whole(&api, API_SERVICE).await {
            Ok(Some(existing)) => existing,
            Ok(None) => return,
            Err(err) => {
                tracing::warn!(%err, apiservice = API_SERVICE, "reading the APIService");
                return;
            }
        };
        let Some(spec) = existing.spec else {
            return;
        };
        let published = spec.ca_bundle.as_ref().map(|b| b.0.as_slice());
        if spec.insecure_skip_tls_verify == Some(true) || published == Some(ca_bundle) {
            return;
        }
        let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca_bundle);
        let patch = serde_json::json!({"spec": {"caBundle": encoded}});
        match self.cluster.merge_whole(&api, API_SERVICE, &patch).await {
            Ok(_) => {
                tracing::info!(apiservice = API_SERVICE, "CA bundle published");
                self.count("apiservice", "updated");
            }
            Err(err) => tracing::warn!(%err, apiservice = API_SERVICE, "publishing the CA bundle"),
        }
    }

    fn write(
        &self,
        result: Result<MutatingWebhookConfiguration, ApiError>,
    ) -> Result<(), ManageError> {
        match result {
            Ok(_) => Ok(()),
            Err(err) if err.status() == Some(409) => {
                Err(ManageError::Conflict(self.registration.name.clone()))
            }
            Err(err) => Err(err.into()),
        }
    }

    fn count(&self, object: &str, what: &str) {
        self.metrics
            .managed_writes
            .with_label_values(&[object, what])
            .inc();
    }
}

/// The rules of the configuration's webhook for CREATE and UPDATE.
fn arm_rules(
    configuration: Option<&MutatingWebhookConfiguration>,
) -> Option<&[RuleWithOperations]> {
    configuration?
        .webhooks
        .as_ref()?
        .iter()
        .find(|hook| hook.name == ARM_WEBHOOK)?
        .rules
        .as_deref()
}

/// The CA bundle the configuration publishes to every one of its webhooks (empty when they
/// differ or there is none).
fn published(configuration: Option<&MutatingWebhookConfiguration>) -> Vec<u8> {
    let mut bundles = configuration
        .and_then(|c| c.webhooks.as_ref())
        .into_iter()
        .flatten()
        .map(|hook| {
            hook.client_config
                .ca_bundle
                .as_ref()
                .map(|b| b.0.as_slice())
        });
    match bundles.next() {
        Some(Some(first)) if bundles.all(|b| b == Some(first)) => first.to_vec(),
        _ => Vec::new(),
    }
}
