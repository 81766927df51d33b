//! A finalizer handler as operators are, for the tests on the real node: run as a Pod with its
//! own ServiceAccount, it removes the finalizer `$FINALIZER` from every ConfigMap being deleted
//! in its namespace (in every namespace with `$SCOPE=cluster`), each second, with its own
//! credentials, and says what it cannot do. Built by `cargo test` as an example; the tests put
//! it in an image (`hack/image.sh` with `SYNCGC_BINARY`).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    syncgc::api::client::install_crypto_provider();
    let finalizer = std::env::var("FINALIZER").expect("FINALIZER names the finalizer to remove");
    let cluster_wide = std::env::var("SCOPE").is_ok_and(|s| s == "cluster");
    let client = Client::try_default().await.expect("in-cluster credentials");
    let api: Api<ConfigMap> = if cluster_wide {
        Api::all(client.clone())
    } else {
        Api::default_namespaced(client.clone())
    };
    println!("handling {finalizer}");
    loop {
        match api.list_metadata(&ListParams::default()).await {
            Ok(list) => {
                for object in list.items.iter().filter(|o| {
                    o.metadata.deletion_timestamp.is_some() && o.finalizers().contains(&finalizer)
                }) {
                    let rest: Vec<&String> = object
                        .finalizers()
                        .iter()
                        .filter(|f| **f != finalizer)
                        .collect();
                    let patch = serde_json::json!({
                        "metadata": {
                            "finalizers": rest,
                            "resourceVersion": object.resource_version(),
                        }
                    });
                    let api: Api<ConfigMap> = Api::namespaced(
                        client.clone(),
                        object.namespace().as_deref().unwrap_or_default(),
                    );
                    match api
                        .patch_metadata(
                            &object.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await
                    {
                        Ok(_) => println!("finalized {}", object.name_any()),
                        Err(err) => println!("could not finalize {}: {err}", object.name_any()),
                    }
                }
            }
            Err(err) => println!("could not list: {err}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
