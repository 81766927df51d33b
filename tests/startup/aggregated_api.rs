//! FI-11: an aggregated API that does not answer (an APIService whose service is missing, as
//! when metrics-server is down) stops nothing. It runs beside no other test: its syncgc runs
//! beside no other, and the broken APIServices are gone before the next test starts.

use crate::support;

use kube::ResourceExt;
use serde_json::json;

use support::TestNamespace;
use support::process::{Syncgc, WEBHOOK_LABEL};
use support::surface::{
    ClusterObject, broken_api_service, crd, create_as, dynamic, resource, seen, served,
    waits_for_a_held,
};

/// FI-11: an aggregated API whose service is missing, present before syncgc starts and added
/// while it runs, stops nothing: syncgc becomes ready, waits and releases, and a CRD created
/// afterwards is watched at once.
#[tokio::test]
async fn an_unavailable_aggregated_api_stops_nothing() {
    let _alone = support::process::alone().await;
    let client = support::client().await;
    let _before = broken_api_service(&format!("before{}.syncgc.test", std::process::id()));
    let name = format!("syncgc-broken-api-{}", std::process::id());
    // Started while discovery of one group fails: it must still become ready.
    let syncgc = tokio::task::spawn_blocking(move || {
        Syncgc::start(&name, &["--rediscovery-interval", "10m"])
    })
    .await
    .unwrap();
    assert!(syncgc.metric("syncgc_discovery_failed_groups") >= 1.0);
    let _after = broken_api_service(&format!("after{}.syncgc.test", std::process::id()));
    let ns =
        TestNamespace::with_labels(&client, "unavailable_api", &[(WEBHOOK_LABEL, &syncgc.name)])
            .await;
    waits_for_a_held(
        &syncgc,
        &ns,
        &resource("", "v1", "ConfigMap", "configmaps"),
        "cm",
    )
    .await;

    // A CRD created now is watched at once (the periodic rediscovery is 10 minutes away).
    let group = format!("{}.late.syncgc.test", ns.name);
    let widgets = resource(&group, "v1", "Widget", "widgets");
    let _crd = ClusterObject::apply(
        &format!("crd/widgets.{group}"),
        crd(&group, "Widget", "widgets", &[("v1", true, true)]),
    );
    served(&client, &widgets).await;
    let probe = create_as(
        &dynamic(&ns, &widgets),
        &widgets,
        json!({ "metadata": { "name": "probe" } }),
    )
    .await;
    // Within seen's 15 s: the periodic rediscovery is 10 minutes away.
    seen(&syncgc, &probe.uid().unwrap()).await;
    waits_for_a_held(&syncgc, &ns, &widgets, "widget").await;

    // A plan there says it is incomplete, and which objects it could not judge: one whose
    // other owner is of the group that does not answer.
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let maps = ns.api::<ConfigMap>();
    let owner = support::create(&maps, &support::config_map("owner", vec![])).await;
    let unknown = OwnerReference {
        api_version: format!("before{}.syncgc.test/v1", std::process::id()),
        kind: "Thing".into(),
        name: "t".into(),
        uid: "7a0c6a53-0000-4000-8000-000000000008".into(),
        ..Default::default()
    };
    let owners = vec![support::owner_ref(&owner, true), unknown];
    support::create(&maps, &support::config_map("d", owners)).await;
    let plan = support::plan::plan(&ns, "configmap/owner", &["--mode", "cooperative"]);
    assert_eq!(plan["complete"], false, "{plan:#}");
    assert_eq!(plan["unjudged"][0]["name"], "d", "{plan:#}");
    assert_eq!(plan["keep"][0]["name"], "d", "{plan:#}");
}
