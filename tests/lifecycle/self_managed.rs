//! `syncgc run --manage-webhook --tls-secret`: on a control plane with neither its webhook
//! configuration nor its certificate, syncgc registers itself, keeps a CA and a serving
//! certificate in a Secret, arms objects end to end, puts back a configuration edited by hand,
//! agrees with a second replica on one CA, stays written for the oldest apiserver version
//! answering, and rotates its certificates under load without an
//! admission call failing.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use support::process::{Syncgc, free_port};
use support::{TestNamespace, cleanup, create, eventually, opted_in};
use syncgc::names::{ARMED_LABEL, SYNCHRONOUS_FINALIZER};
use syncgc::webhook::registration::ServerVersion;
use syncgc::webhook::served::{SERVED_VERSIONS_ANNOTATION, Served};

/// Starts replicas of `syncgc run --manage-webhook` at the same moment, each with its own
/// webhook port, all registered at the first one's URL and sharing one Secret.
fn replicas(name: &str, secret: &str, extra: &[&[&str]]) -> (Vec<Syncgc>, String) {
    let ports: Vec<_> = extra.iter().map(|_| free_port()).collect();
    let url = format!("https://127.0.0.1:{}/mutate", ports[0].port());
    let threads: Vec<_> = extra
        .iter()
        .zip(&ports)
        .enumerate()
        .map(|(i, (extra, port))| {
            let mut args: Vec<String> = [
                "--manage-webhook",
                "--webhook-url",
                &url,
                "--webhook-config-name",
                name,
                "--tls-secret",
                secret,
                "--webhook-addr",
                &port.to_string(),
            ]
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
            args.extend(extra.iter().map(|a| (*a).to_owned()));
            let replica = format!("{name}-{i}");
            std::thread::spawn(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                Syncgc::start(&replica, &args)
            })
        })
        .collect();
    let started = threads.into_iter().map(|t| t.join().unwrap()).collect();
    (started, url)
}

/// Deletes the configuration and the Secret `name` (before a test, and after it: the watchdog
/// deletes the configuration too when the test process ends).
fn forget(name: &str) {
    let name = name.to_owned();
    cleanup(move |client| async move {
        let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
            .delete(&name, &DeleteParams::default())
            .await;
        let _ = Api::<Secret>::namespaced(client, "syncgc-system")
            .delete(&name, &DeleteParams::default())
            .await;
        Ok(())
    });
}

async fn secret_entry(client: &kube::Client, secret: &str, key: &str) -> Option<Vec<u8>> {
    let (namespace, name) = secret.split_once('/').unwrap();
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .ok()??;
    Some(secret.data?.get(key)?.0.clone())
}

/// Whether the webhook at `addr` serves a certificate for 127.0.0.1 that `bundle` verifies.
async fn verified(addr: std::net::SocketAddr, bundle: &[u8]) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    syncgc::api::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(bundle) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    connector
        .connect(name, stream)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

fn ca_bundles(configuration: &MutatingWebhookConfiguration) -> Vec<Vec<u8>> {
    configuration
        .webhooks
        .iter()
        .flatten()
        .map(|w| w.client_config.ca_bundle.clone().unwrap_or_default().0)
        .collect()
}

/// Registers itself, writes the Secret, arms end to end; a second replica started at the same
/// moment agrees on one CA and serves too; neither writes while nothing changes; a hand-edited
/// configuration is put back; `/debug/graph` only with the flag; and the configuration is
/// what `syncgc webhook-config` prints for the same cluster.
#[tokio::test]
async fn syncgc_registers_itself_and_keeps_its_certificate() {
    let _alone = support::process::alone().await;
    support::syncgc_namespace();
    let client = support::client().await;
    let name = format!("syncgc-self-{}", std::process::id());
    let secret = format!("syncgc-system/{name}");
    let configurations = Api::<MutatingWebhookConfiguration>::all(client.clone());
    forget(&name);
    assert!(secret_entry(&client, &secret, "ca.crt").await.is_none());

    let (mut replicas, url) = tokio::task::spawn_blocking({
        let (name, secret) = (name.clone(), secret.clone());
        move || replicas(&name, &secret, &[&["--debug-graph=false"], &[]])
    })
    .await
    .unwrap();

    // One CA: the Secret's, published in the configuration, verifying both replicas.
    let bundle = secret_entry(&client, &secret, "ca.crt").await.unwrap();
    let cas = x509_parser::pem::Pem::iter_from_buffer(&bundle).count();
    assert_eq!(cas, 1, "one CA in the Secret");
    let configuration = configurations.get(&name).await.unwrap();
    // Every webhook (arming, the guards', evictions, DELETE) with the same bundle.
    assert_eq!(ca_bundles(&configuration), vec![bundle.clone(); 4]);
    assert_eq!(
        configuration.labels().get("app.kubernetes.io/managed-by"),
        Some(&"syncgc".to_owned())
    );
    for replica in &replicas {
        verified(replica.webhook, &bundle)
            .await
            .unwrap_or_else(|err| {
                panic!("{} serves no certificate of the CA: {err}", replica.name)
            });
    }

    // Before 1.28 the rules come from discovery and leave out Events and Leases.
    let arm = &configuration.webhooks.as_ref().unwrap()[0];
    let rules = serde_json::to_value(&arm.rules).unwrap();
    if !support::server().match_conditions() {
        for rule in rules.as_array().unwrap() {
            let groups = &rule["apiGroups"];
            assert!(!groups.as_array().unwrap().contains(&json!("*")), "{rules}");
            assert!(
                !groups
                    .as_array()
                    .unwrap()
                    .contains(&json!("coordination.k8s.io")),
                "{rules}"
            );
            assert!(
                !groups.as_array().unwrap().contains(&json!("events.k8s.io")),
                "{rules}"
            );
            if groups == &json!([""]) {
                let resources = rule["resources"].as_array().unwrap();
                assert!(resources.contains(&json!("configmaps")), "{rules}");
                assert!(!resources.contains(&json!("events")), "{rules}");
            }
        }
    }

    // The same configuration `syncgc webhook-config` prints for this cluster.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), &bundle).unwrap();
    let printed = std::process::Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args([
            "webhook-config",
            "--webhook-url",
            &url,
            "--webhook-config-name",
            &name,
        ])
        .args(["--kubeconfig", &support::kubeconfig_path(), "--ca-file"])
        .arg(dir.path().join("ca.crt"))
        .output()
        .unwrap();
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let printed: Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(
        printed["webhooks"],
        serde_json::to_value(&configuration.webhooks).unwrap()
    );

    // Armed by the webhook: the create's answer already carries the finalizer and the label.
    let ns = TestNamespace::new(&client, "self-managed").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    assert_eq!(owner.finalizers(), [SYNCHRONOUS_FINALIZER]);
    assert_eq!(
        owner.labels().get(ARMED_LABEL).map(String::as_str),
        Some("true")
    );

    // Replicas that agree write nothing more.
    quiet(&configurations, &name, &replicas).await;

    // A CA bundle blanked by hand is put back.
    let blank =
        json!([{ "op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": "" }]);
    configurations
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(blank).unwrap()),
        )
        .await
        .unwrap();
    let started = Instant::now();
    eventually(
        "the configuration is put back",
        Duration::from_secs(30),
        || async {
            let restored = configurations.get(&name).await.ok()?;
            (ca_bundles(&restored) == vec![bundle.clone(); 4]).then_some(())
        },
    )
    .await;
    println!("put back after {:?}", started.elapsed());

    // A newer apiserver answered at the same address a minute ago (a control plane being
    // upgraded): the configuration stays written for the older version, this server's, and
    // records both; it is not rewritten at every round.
    let server = support::server();
    let newer = ServerVersion {
        minor: server.minor + 10,
        ..server
    };
    let minute_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
    let minute_ago = minute_ago.round(jiff::Unit::Second).unwrap();
    configurations
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                SERVED_VERSIONS_ANNOTATION: format!("{newer}={minute_ago}")
            } } })),
        )
        .await
        .unwrap();
    let recorded = eventually(
        "this server's version recorded beside the newer one",
        Duration::from_secs(30),
        || async {
            let configuration = configurations.get(&name).await.ok()?;
            let record = configuration
                .annotations()
                .get(SERVED_VERSIONS_ANNOTATION)?;
            let served = Served::parse(record);
            (served.oldest() == Some(server)).then_some((record.clone(), configuration))
        },
    )
    .await;
    assert!(
        recorded.0.contains(&format!("{newer}={minute_ago}")),
        "{}",
        recorded.0
    );
    assert_eq!(
        serde_json::to_value(&recorded.1.webhooks).unwrap(),
        serde_json::to_value(&configuration.webhooks).unwrap(),
        "written for {server} as before"
    );
    quiet(&configurations, &name, &replicas).await;

    // /debug/graph only where it was asked for.
    assert_eq!(replicas[0].get("/debug/graph").map(|r| r.0), Some(404));
    assert_eq!(replicas[1].get("/debug/graph").map(|r| r.0), Some(400));
    for replica in &mut replicas {
        replica.kill();
    }
    forget(&name);
}

/// Every replica makes two more rounds, and neither writes the configuration.
async fn quiet(
    configurations: &Api<MutatingWebhookConfiguration>,
    name: &str,
    replicas: &[Syncgc],
) {
    let version = configurations.get(name).await.unwrap().resource_version();
    let writes = || -> f64 {
        replicas
            .iter()
            .map(|r| r.metric("syncgc_managed_writes_total"))
            .sum()
    };
    let before = writes();
    let rounds =
        |replica: &Syncgc| replica.metric_where("syncgc_managed_rounds_total", "result=\"ok\"");
    let started: Vec<f64> = replicas.iter().map(rounds).collect();
    eventually(
        "every replica makes two more rounds",
        Duration::from_secs(60),
        || {
            let done = replicas
                .iter()
                .zip(&started)
                .all(|(r, s)| rounds(r) >= s + 2.0);
            async move { done.then_some(()) }
        },
    )
    .await;
    assert_eq!(
        configurations.get(name).await.unwrap().resource_version(),
        version
    );
    assert_eq!(writes(), before, "writes while nothing changed");
}

/// Certificates that live seconds: while creates of opted-in objects run without pause, the
/// CA is renewed and serving certificates are issued again and again; every create is armed
/// by the webhook (a failed call would let the object through unarmed), none is refused.
#[tokio::test]
async fn a_rotation_under_load_arms_every_create() {
    let _alone = support::process::alone().await;
    support::syncgc_namespace();
    let client = support::client().await;
    let name = format!("syncgc-rotate-{}", std::process::id());
    let secret = format!("syncgc-system/{name}");
    forget(&name);
    let (mut replicas, _) = tokio::task::spawn_blocking({
        let (name, secret) = (name.clone(), secret.clone());
        move || {
            replicas(
                &name,
                &secret,
                &[&[
                    "--tls-ca-validity",
                    "40s",
                    "--tls-cert-validity",
                    "16s",
                    "--tls-renew-before",
                    "8s",
                ]],
            )
        }
    })
    .await
    .unwrap();
    let syncgc = &replicas[0];

    let ns = TestNamespace::new(&client, "rotation").await;
    let api = ns.api::<ConfigMap>();
    let first_ca = secret_entry(&client, &secret, "ca.crt").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(55);
    let mut created = 0;
    while Instant::now() < deadline {
        let object = create(&api, &opted_in(&format!("o{created}"), vec![], &[])).await;
        assert_eq!(
            object.finalizers(),
            [SYNCHRONOUS_FINALIZER],
            "create {created} was not armed by the webhook"
        );
        created += 1;
        // Steady rather than flat out: fewer objects to opt out at the end.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let changes = |change: &str| {
        syncgc.metric_where(
            "syncgc_managed_writes_total",
            &format!("change=\"{change}\""),
        )
    };
    println!(
        "{created} creates; CA renewed {} times, serving certificates issued {} times",
        changes("ca-renewed"),
        changes("serving-issued")
    );
    assert!(changes("ca-renewed") >= 1.0, "the CA was not renewed");
    assert!(
        changes("serving-issued") >= 2.0,
        "serving certificates were not renewed"
    );
    assert_ne!(
        secret_entry(&client, &secret, "ca.crt").await.unwrap(),
        first_ca
    );
    assert!(
        syncgc.metric("syncgc_webhook_requests_total") >= f64::from(created),
        "every create reached the webhook"
    );
    for replica in &mut replicas {
        replica.kill();
    }
    forget(&name);
    // Nothing opted in is left for the next tests' syncgc to arm and wait on.
    let opt_out = json!({ "metadata": {
        "annotations": { syncgc::names::SYNCHRONOUS_ANNOTATION: null }, "finalizers": null } });
    let names: Vec<String> = api
        .list_metadata(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    futures::stream::iter(names)
        .for_each_concurrent(16, |name| {
            let (api, opt_out) = (&api, &opt_out);
            async move {
                let _ = api
                    .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(opt_out))
                    .await;
            }
        })
        .await;
}
