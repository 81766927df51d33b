//! syncgc's API (`syncgc.io/v1alpha1`) served by a test's syncgc process through the real
//! aggregation layer: an `APIService` whose Service (no selector) has the node's address as its
//! endpoint (the apiserver calls endpoints, `--enable-aggregator-routing`, and endpoints may not
//! be loopback addresses), where syncgc listens on every address. The CA bundle is the one that
//! signed syncgc's serving certificate, whose names cover the Services of `syncgc-system`.
//!
//! The APIService is one for the cluster: the tests that register it run one at a time, and it
//! is removed when its syncgc stops (by the watchdog of [`super::process`], too, should the
//! test process die), since an APIService whose backend is gone fails every discovery and
//! keeps namespaces from being deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::json;

use super::process::Syncgc;
use super::{eventually, kubectl};

pub const API_SERVICE: &str = "v1alpha1.syncgc.io";
const NAMESPACE: &str = "syncgc-system";

/// The Service in front of the syncgc named `name`.
fn service_of(name: &str) -> String {
    format!("api-{name}")
}

/// The shell that removes the APIService (when it is still this syncgc's) and the Service of
/// the syncgc named `name`, for its watchdog.
pub fn unregister_script(name: &str) -> String {
    let service = service_of(name);
    format!(
        "if [ \"$(kubectl get apiservice {API_SERVICE} -o jsonpath='{{.spec.service.name}}' 2>/dev/null)\" = {service} ]; then \
           kubectl delete apiservice {API_SERVICE} --ignore-not-found >/dev/null; fi; \
         kubectl -n {NAMESPACE} delete service {service} --ignore-not-found >/dev/null 2>&1"
    )
}

/// The address of the local cluster's node, where the apiserver reaches this machine's
/// processes.
async fn node_address(client: &kube::Client) -> String {
    let nodes = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    nodes
        .items
        .iter()
        .flat_map(|n| n.status.iter().flat_map(|s| s.addresses.iter().flatten()))
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
        .expect("the local cluster's node has an InternalIP (hack/cluster.sh up)")
}

/// Registers `syncgc`'s API with the aggregation layer and waits until the apiserver serves
/// it (the APIService Available, its discovery answered).
pub async fn register(syncgc: &Syncgc) {
    register_replicas(syncgc, &[syncgc], &[]).await;
}

/// [`register`] with replicas: the Service of `syncgc` has the endpoints `ready`, which the
/// aggregation layer calls, and `not_ready`, which it does not (as a Pod's that is not ready).
pub async fn register_replicas(syncgc: &Syncgc, ready: &[&Syncgc], not_ready: &[&Syncgc]) {
    let client = super::client().await;
    let address = node_address(&client).await;
    let service = service_of(&syncgc.name);
    let subset = |replica: &&Syncgc, ready: bool| {
        let addresses = if ready {
            "addresses"
        } else {
            "notReadyAddresses"
        };
        json!({addresses: [{"ip": address}],
               "ports": [{"name": "https", "port": replica.webhook.port()}]})
    };
    let subsets: Vec<_> = (ready.iter().map(|r| subset(r, true)))
        .chain(not_ready.iter().map(|r| subset(r, false)))
        .collect();
    let ca = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        std::fs::read(syncgc.ca_file()).unwrap(),
    );
    super::syncgc_namespace();
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": service, "namespace": NAMESPACE},
         "spec": {"ports": [{"name": "https", "port": 443}]}},
        {"apiVersion": "v1", "kind": "Endpoints",
         "metadata": {"name": service, "namespace": NAMESPACE},
         "subsets": subsets},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": API_SERVICE},
         "spec": {"group": "syncgc.io", "version": "v1alpha1",
                  "groupPriorityMinimum": 1000, "versionPriority": 15, "caBundle": ca,
                  "service": {"name": service, "namespace": NAMESPACE, "port": 443}}},
    ]});
    tokio::task::spawn_blocking(move || {
        kubectl(&["apply", "-f", "-"], Some(&objects.to_string()));
    })
    .await
    .unwrap();
    eventually(
        "the apiserver serves syncgc.io/v1alpha1",
        Duration::from_secs(60),
        || async {
            let request = http::Request::get("/apis/syncgc.io/v1alpha1")
                .body(Vec::new())
                .unwrap();
            client.request_text(request).await.ok()
        },
    )
    .await;
}

/// A kubeconfig (written into `dir`) for the user `user`, of the groups `groups`: a client
/// certificate the cluster's CA signs, as an administrator hands one to a tenant.
pub fn certificate_kubeconfig(user: &str, groups: &[&str], dir: &std::path::Path) -> String {
    let pki = std::path::Path::new(&super::kubeconfig_path()).with_file_name("pki");
    let (key, csr, crt) = (
        dir.join(format!("{user}.key")),
        dir.join(format!("{user}.csr")),
        dir.join(format!("{user}.crt")),
    );
    let subject: String = std::iter::once(format!("/CN={user}"))
        .chain(groups.iter().map(|g| format!("/O={g}")))
        .collect();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &path(&key),
        "-subj",
        &subject,
        "-out",
        &path(&csr),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &path(&csr),
        "-CA",
        &path(&pki.join("ca.crt")),
        "-CAkey",
        &path(&pki.join("ca.key")),
        "-CAcreateserial",
        "-CAserial",
        &path(&dir.join("ca.srl")),
        "-days",
        "1",
        "-out",
        &path(&crt),
    ]);
    super::user_kubeconfig(
        user,
        json!({ "client-certificate": path(&crt), "client-key": path(&key) }),
        dir,
    )
}
