//! The graph's lists and watches go over connections of their own ([`syncgc::api::streams`]),
//! each carrying fewer requests than the apiserver lets one HTTP/2 connection carry (250 by
//! default): with more watches than that, every one starts and sees what happens.

use crate::support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{WatchEvent, WatchParams};

use support::{TestNamespace, config_map, create};

/// More than one HTTP/2 connection carries at the apiserver's default.
const WATCHES: usize = 300;
/// A watch is answered as soon as it is registered.
const STARTS_WITHIN: Duration = Duration::from_secs(30);

#[tokio::test]
async fn more_watches_than_a_connection_carries_all_start_and_see_an_object_appear() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "streams").await;
    let config = syncgc::api::config(Some(support::kubeconfig_path().as_ref()))
        .await
        .unwrap();
    let streams: Api<ConfigMap> = Api::namespaced(syncgc::api::streams(config).unwrap(), &ns.name);
    let version = support::resource_version(&streams).await;
    let watches = futures::future::join_all((0..WATCHES).map(|i| {
        let (streams, version) = (streams.clone(), version.clone());
        async move {
            tokio::time::timeout(
                STARTS_WITHIN,
                streams.watch_metadata(&WatchParams::default(), &version),
            )
            .await
            .unwrap_or_else(|_| panic!("watch {i} of {WATCHES} did not start in {STARTS_WITHIN:?}"))
            .unwrap_or_else(|err| panic!("watch {i} of {WATCHES}: {err}"))
            .boxed()
        }
    }))
    .await;
    create(&ns.api::<ConfigMap>(), &config_map("seen", vec![])).await;
    let seen = futures::future::join_all(watches.into_iter().map(|mut watch| async move {
        loop {
            match watch.try_next().await {
                // kube-controller-manager adds a ConfigMap of its own to a new namespace.
                Ok(Some(WatchEvent::Added(object)))
                    if object.metadata.name.as_deref() == Some("seen") =>
                {
                    return true;
                }
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => return false,
            }
        }
    }));
    let seen = tokio::time::timeout(STARTS_WITHIN, seen)
        .await
        .expect("every watch sees the ConfigMap appear");
    let saw = seen.iter().filter(|&&saw| saw).count();
    assert_eq!(saw, WATCHES, "every watch sees the ConfigMap appear");
}
