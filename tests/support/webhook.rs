//! A syncgc webhook served in-process on loopback over TLS, registered with the real apiserver
//! for one test namespace only, so that tests running in parallel do not see each other's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, ResourceExt};
use syncgc::certs::{DevCerts, SubjectAltNames};
use syncgc::metrics::Metrics;
use syncgc::names::{SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER};
use syncgc::webhook::admit::Policy;
use syncgc::webhook::handler::{self, Webhook};
use syncgc::webhook::registration::{Coverage, NAMESPACE_NAME_LABEL, Registration, WebhookClient};
use syncgc::webhook::server::{self, Limits};
use syncgc::webhook::tls::ReloadingCert;
use tokio_util::sync::CancellationToken;

use super::{TestNamespace, cleanup, eventually};

/// A running webhook server (no registration).
pub struct Served {
    pub addr: SocketAddr,
    pub metrics: Metrics,
    pub cert: Arc<ReloadingCert>,
    pub certs_dir: tempfile::TempDir,
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
}

impl Served {
    pub fn ca_file(&self) -> PathBuf {
        self.certs_dir.path().join("ca.crt")
    }
}

/// Serves the webhook with fresh certificates for localhost and 127.0.0.1.
pub async fn serve(client: Client, policy: Policy, limits: Limits) -> Served {
    syncgc::api::install_crypto_provider();
    let certs_dir = tempfile::tempdir().unwrap();
    DevCerts::generate(&SubjectAltNames {
        dns: vec!["localhost".into()],
        ips: vec!["127.0.0.1".parse().unwrap()],
    })
    .unwrap()
    .write(certs_dir.path(), false)
    .unwrap();
    let cert = Arc::new(
        ReloadingCert::load(
            &certs_dir.path().join("tls.crt"),
            &certs_dir.path().join("tls.key"),
        )
        .unwrap(),
    );
    let metrics = Metrics::new().unwrap();
    let router = handler::router(Webhook {
        policy,
        metrics: metrics.clone(),
        cluster: syncgc::api::Cluster::new(client, None, Duration::from_secs(30), metrics.clone()),
        graph: syncgc::graph::Writer::new(syncgc::graph::Graph::new(
            syncgc::graph::Mode::Cooperative,
        ))
        .reader(),
        resources: Default::default(),
        body_timeout: Duration::from_secs(2),
        causes: None,
        // No collector: the graph, empty, is all there is.
        authenticate: false,
        needs: Default::default(),
        readiness: {
            let readiness = syncgc::metrics::Readiness::default();
            readiness.set(true);
            readiness
        },
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server::serve(
        listener,
        cert.clone(),
        router,
        limits,
        metrics.webhook_connections.clone(),
        shutdown.clone(),
    ));
    Served {
        addr,
        metrics,
        cert,
        certs_dir,
        shutdown,
        task,
    }
}

/// A webhook registered for the objects of one namespace; unregistered and stopped on drop.
pub struct RegisteredWebhook {
    pub served: Served,
    name: String,
}

impl RegisteredWebhook {
    /// Serves the webhook with `policy`, registers it for `ns`, and waits until the apiserver
    /// calls it.
    pub async fn start(ns: &TestNamespace, policy: Policy) -> Self {
        let served = serve(ns.client.clone(), policy, Limits::default()).await;
        let name = format!("syncgc-{}", ns.name);
        let mut configuration = Registration {
            name: name.clone(),
            client: WebhookClient::Url(format!("https://127.0.0.1:{}/mutate", served.addr.port())),
            ca_bundle: std::fs::read(served.ca_file()).unwrap(),
            timeout_seconds: 10,
            excluded_namespaces: vec![],
            unarmed_delete: policy.unarmed_delete,
            guards: syncgc::webhook::registration::GuardScope::Off,
            server: super::server(),
            scope: Coverage::Every,
            own_user: None,
        }
        .configuration();
        for webhook in configuration.webhooks.iter_mut().flatten() {
            webhook.namespace_selector = Some(LabelSelector {
                match_labels: Some([(NAMESPACE_NAME_LABEL.to_owned(), ns.name.clone())].into()),
                match_expressions: None,
            });
        }
        Api::<MutatingWebhookConfiguration>::all(ns.client.clone())
            .create(&PostParams::default(), &configuration)
            .await
            .expect("registering the webhook");
        let this = Self { served, name };
        this.wait_until_called(ns).await;
        this
    }

    /// The apiserver picks a new configuration up after a moment: probe with dry-run creates
    /// of an opted-in ConfigMap until one comes back armed.
    async fn wait_until_called(&self, ns: &TestNamespace) {
        let api = ns.api::<ConfigMap>();
        let mut probe = super::config_map("webhook-probe", vec![]);
        probe.metadata.annotations =
            Some([(SYNCHRONOUS_ANNOTATION.to_owned(), "true".to_owned())].into());
        let dry_run = PostParams {
            dry_run: true,
            ..Default::default()
        };
        eventually(
            "the apiserver calls the webhook",
            Duration::from_secs(30),
            || async {
                let created = api.create(&dry_run, &probe).await.unwrap();
                created
                    .finalizers()
                    .iter()
                    .any(|f| f == SYNCHRONOUS_FINALIZER)
                    .then_some(())
            },
        )
        .await;
    }
}

impl Drop for RegisteredWebhook {
    fn drop(&mut self) {
        let name = self.name.clone();
        cleanup(move |client| async move {
            Api::<MutatingWebhookConfiguration>::all(client)
                .delete(&name, &DeleteParams::default())
                .await?;
            Ok(())
        });
        self.served.shutdown.cancel();
    }
}
