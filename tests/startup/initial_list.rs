//! A watch's first list is read from the apiserver's watch cache (`--initial-list
//! watch-cache`, the default) for a fast start; the graph it builds must be the one a
//! consistent list from etcd builds (`--initial-list etcd`), and so must a start that asked for
//! streaming lists from a server that refuses them (`--initial-list stream` on 1.20).

use crate::support;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use support::process::Syncgc;
use support::{TestNamespace, clear_finalizers, config_map, create, held, opted_in, owner_ref};

#[tokio::test]
async fn a_start_from_the_watch_cache_builds_the_graph_a_consistent_start_builds() {
    let _alone = support::process::alone().await;
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "initial-list").await;
    let configmaps = ns.api::<ConfigMap>();
    let secrets = ns.api::<Secret>();
    // Owners and dependents of two kinds, two owners for one, a cluster-scoped owner (a
    // ClusterRole) and the namespace as owners, an object being deleted that a finalizer
    // holds, an armed owner: the state of none of them changes while the collectors start.
    let root = create(&configmaps, &config_map("root", vec![])).await;
    let middle = create(
        &configmaps,
        &config_map("middle", vec![owner_ref(&root, true)]),
    )
    .await;
    for i in 0..20 {
        let mut secret: Secret = serde_json::from_value(json!({ "metadata": {
            "name": format!("leaf-{i}"),
            "ownerReferences": [owner_ref(&middle, i % 2 == 0)] } }))
        .unwrap();
        if i == 0 {
            secret
                .metadata
                .owner_references
                .as_mut()
                .unwrap()
                .push(owner_ref(&root, false));
        }
        create(&secrets, &secret).await;
    }
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role = roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": ns.name } })).unwrap(),
        )
        .await
        .unwrap();
    let namespace: Namespace = Api::all(client.clone()).get(&ns.name).await.unwrap();
    create(
        &configmaps,
        &config_map(
            "of-cluster-scoped-owners",
            vec![owner_ref(&role, false), owner_ref(&namespace, false)],
        ),
    )
    .await;
    create(&configmaps, &held("held", vec![owner_ref(&root, false)])).await;
    configmaps
        .delete("held", &DeleteParams::background())
        .await
        .unwrap();
    let mut armed = opted_in("armed", vec![], &[]);
    armed.meta_mut().finalizers = Some(vec![syncgc::names::SYNCHRONOUS_FINALIZER.to_owned()]);
    armed.meta_mut().labels = Some([(syncgc::names::ARMED_LABEL.into(), "true".into())].into());
    create(&configmaps, &armed).await;

    let mut uids: Vec<String> = (configmaps.list_metadata(&Default::default()).await.unwrap())
        .items
        .iter()
        .filter_map(|o| o.uid())
        .collect();
    let listed = secrets.list_metadata(&Default::default()).await.unwrap();
    uids.extend(listed.items.iter().filter_map(|o| o.uid()));
    uids.extend(role.uid());
    uids.extend(namespace.uid());

    let graph = |initial_list: &'static str| {
        let uids = uids.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let syncgc = Syncgc::start(
                    &format!("syncgc-initial-list-{initial_list}-{}", std::process::id()),
                    &["--initial-list", initial_list],
                );
                assert_eq!(
                    syncgc.metric("syncgc_watch_errors_total"),
                    0.0,
                    "every list and watch succeeded (empty lists too)"
                );
                uids.iter()
                    .map(|uid| {
                        let (status, body) = syncgc
                            .get(&format!("/debug/graph?uid={uid}"))
                            .expect("/debug/graph");
                        assert_eq!(status, 200, "{body}");
                        canonical(&body)
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap()
        }
    };
    let from_cache = graph("watch-cache").await;
    let from_etcd = graph("etcd").await;
    // 1.20 refuses a streaming list (no WatchList): each watch lists from the cache instead.
    let refused_stream = graph("stream").await;
    let middle_view = &from_etcd[uids
        .iter()
        .position(|u| Some(u) == middle.uid().as_ref())
        .unwrap()];
    assert!(
        middle_view.len() >= 23,
        "the graph around `middle` holds it, its owner and its 20 dependents: {middle_view:?}"
    );
    for (i, uid) in uids.iter().enumerate() {
        assert_eq!(from_cache[i], from_etcd[i], "the graph around {uid}");
        assert_eq!(refused_stream[i], from_etcd[i], "the graph around {uid}");
    }

    clear_finalizers(&configmaps, "held").await;
    roles
        .delete(&ns.name, &DeleteParams::background())
        .await
        .unwrap();
}

/// `/debug/graph`'s answer as a set of lines, one per node and per edge, so that the order in
/// which each start met the objects does not matter.
fn canonical(body: &str) -> BTreeSet<String> {
    let view: serde_json::Value = serde_json::from_str(body).unwrap();
    let nodes = view["nodes"].as_array().into_iter().flatten();
    let edges = view["edges"].as_array().into_iter().flatten();
    nodes.chain(edges).map(|v| v.to_string()).collect()
}
