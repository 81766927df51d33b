//! A node that goes dark in the middle of a synchronous delete: the kubelet stops, so the
//! Pods it ran are never confirmed gone. The opted-in owner waits for them only until its
//! timeout, then is released with a `SyncGCTimedOut` Event that says so; nothing stays stuck.
//! When the kubelet is back, the Pods go. It runs beside no other test of the binary
//! ([`crate::NODE`]): the kubelet it stops runs their Pods.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;
use syncgc::names::TIMEOUT_ANNOTATION;

use support::workload::workload;
use support::{TestNamespace, cluster_sh, eventually, gone, kubectl, try_cluster_sh};

/// The kubelet is started again (and the node Ready) however the test ends.
struct KubeletBack;

impl Drop for KubeletBack {
    fn drop(&mut self) {
        if let Err(err) = try_cluster_sh(&["kubelet", "start"], &[]) {
            eprintln!("{err}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_whose_node_goes_dark_is_released_by_its_timeout() {
    let _node = crate::NODE.write().await;
    support::process::shared();
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "node-dark").await;
    let mut deployment = workload("Deployment", "web", true, support::server().minor);
    deployment["metadata"]["annotations"][TIMEOUT_ANNOTATION] = json!("10s");
    kubectl(
        &["apply", "-n", &ns.name, "-f", "-"],
        Some(&deployment.to_string()),
    );
    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name);
    eventually("the Pods run", Duration::from_secs(120), || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        let ready = list.items.iter().filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|c| c.iter().all(|c| c.ready))
        });
        (ready.count() == 2).then_some(())
    })
    .await;

    cluster_sh(&["kubelet", "stop"], &[]);
    let _back = KubeletBack;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns.name);
    let started = Instant::now();
    deployments
        .delete("web", &DeleteParams::background())
        .await
        .unwrap();
    eventually(
        "the Deployment is released by its timeout",
        Duration::from_secs(60),
        || gone(&deployments, "web"),
    )
    .await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(9),
        "released after {took:?}, before its timeout, with its Pods unconfirmed"
    );
    let left = pods.list(&ListParams::default()).await.unwrap().items;
    assert!(
        !left.is_empty(),
        "the Pods went without a kubelet: the test could not tell a timeout from a release"
    );
    let events = ns.events("SyncGCTimedOut").await;
    assert!(
        events.iter().any(|e| e
            .regarding
            .as_ref()
            .is_some_and(|r| r.name.as_deref() == Some("web"))),
        "no SyncGCTimedOut Event for the Deployment: {events:?}"
    );

    drop(_back);
    eventually(
        "the Pods go once the kubelet is back",
        Duration::from_secs(120),
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?;
            list.items.is_empty().then_some(())
        },
    )
    .await;
}
