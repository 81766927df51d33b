//! Faults a production control plane produces, one at a time, while an armed owner waits:
//! etcd compacted while syncgc's watches are behind (they resume from a revision compacted
//! away, get 410 Gone, and the DELETED event of what went meanwhile never comes: a relist must
//! find it gone), and an apiserver at its in-flight limits (429s through a cascade: retried
//! with backoff, nothing lost, the webhook answering). In each the owner goes neither while a
//! dependent is left nor never. Each runs beside no other test: the apiserver restarts.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use syncgc::names::{SYNCHRONOUS_FINALIZER, TIMEOUT_ANNOTATION};
use tokio::sync::MutexGuard;

use support::process::{Syncgc, TEST_TIMEOUTS, WEBHOOK_LABEL};
use support::surface::seen;
use support::{
    Kcm, TestNamespace, being_deleted, clear_finalizers, cluster_sh, config_map, create, delete,
    eventually, exists, gone, held, opted_in, owner_ref, tree, try_cluster_sh,
};

const WAIT: Duration = Duration::from_secs(60);

/// One test at a time (each restarts the apiserver), kube-controller-manager with its garbage
/// collector, and a syncgc of the test's own, with the credentials of a controller (not the
/// admin's, which no in-flight limit refuses), serving a namespace of the test's own.
async fn syncgc_and_namespace(
    what: &str,
) -> (MutexGuard<'static, ()>, Client, TestNamespace, Syncgc) {
    let alone = support::process::alone().await;
    support::kcm(Kcm::Gc);
    let name = format!("syncgc-{what}-{}", std::process::id());
    let client = support::client().await;
    let ns = TestNamespace::with_labels(&client, what, &[(WEBHOOK_LABEL, &name)]).await;
    let kubeconfig = support::controller_kubeconfig_path();
    let syncgc =
        tokio::task::spawn_blocking(move || Syncgc::start_as(&name, &kubeconfig, &TEST_TIMEOUTS))
            .await
            .unwrap();
    (alone, client, ns, syncgc)
}

/// An owner armed by the webhook, with a timeout far beyond the tests' waits (a release by it
/// would be noticed).
async fn armed_owner(api: &Api<ConfigMap>) -> ConfigMap {
    let owner = create(
        api,
        &opted_in("owner", vec![], &[(TIMEOUT_ANNOTATION, "10m")]),
    )
    .await;
    assert_eq!(owner.finalizers(), [SYNCHRONOUS_FINALIZER], "armed");
    owner
}

/// An owner waits for two dependents; syncgc is stopped (SIGSTOP), the apiserver restarts
/// without its watch cache (every connection closes, and watches read etcd from then on), one
/// dependent goes and etcd is compacted past its deletion. Let go on, syncgc's watches resume
/// from revisions compacted away, are answered 410 Gone and list again: the owner stays while
/// the other dependent is left, and goes once it is gone.
#[tokio::test]
async fn a_compaction_behind_the_watches_releases_neither_early_nor_never() {
    let (_alone, _, ns, syncgc) = syncgc_and_namespace("compaction").await;
    let api = ns.api::<ConfigMap>();
    let owner = armed_owner(&api).await;
    let first = create(&api, &held("first", vec![owner_ref(&owner, true)])).await;
    create(&api, &held("second", vec![owner_ref(&owner, true)])).await;
    seen(&syncgc, &first.uid().unwrap()).await;
    delete(&api, "owner", &DeleteParams::background()).await;
    eventually("both dependents are being deleted", WAIT, || async {
        being_deleted(&api, "first").await?;
        being_deleted(&api, "second").await
    })
    .await;

    let relists = syncgc.metric("syncgc_watch_relists_total");
    syncgc.pause();
    let _apiserver = Restarted::with(&[("SYNCGC_APISERVER_WATCH_CACHE", "false")]);
    // No connection of syncgc's is open: the deletion is only in etcd's history.
    clear_finalizers(&api, "first").await;
    eventually("the first dependent is gone", WAIT, || gone(&api, "first")).await;
    cluster_sh(&["compact"], &[]);
    syncgc.resume();

    eventually("a watch lists again after 410 Gone", WAIT, || {
        let listed = syncgc.metric("syncgc_watch_relists_total") > relists;
        async move { listed.then_some(()) }
    })
    .await;
    let first = first.uid().unwrap();
    eventually("the relist finds the first dependent gone", WAIT, || {
        let found = syncgc
            .get(&format!("/debug/graph?uid={first}"))
            .is_some_and(|(status, _)| status == 404);
        async move { found.then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        exists(&api, "owner").await,
        "released while a dependent is left"
    );
    clear_finalizers(&api, "second").await;
    eventually("the owner goes once the second is gone", WAIT, || {
        gone(&api, "owner")
    })
    .await;
}

/// kube-apiserver restarted with in-flight limits of 4 and 2 (mutating) and no flow control,
/// so that a request over them is refused with 429 at once, while writers with a
/// controller's credentials keep it at them: an armed owner's cascade of 40 dependents meets
/// 429s, retries them with backoff and deletes every one; an object created meanwhile is
/// armed (the webhook answers: it does not call the apiserver); the owner stays while a held
/// dependent is left and goes once it is gone. The test's own calls are the admin's, which
/// the limits never refuse.
#[tokio::test]
async fn an_apiserver_at_its_inflight_limit_loses_nothing() {
    let (_alone, client, ns, syncgc) = syncgc_and_namespace("throttled").await;
    let writers_ns = TestNamespace::new(&client, "throttled-writers").await;
    let api = ns.api::<ConfigMap>();
    let owner = armed_owner(&api).await;
    const DEPENDENTS: usize = 40;
    tree(&api, &owner, &[("dependent-", DEPENDENTS)], true).await;
    let last = create(&api, &held("last", vec![owner_ref(&owner, true)])).await;
    seen(&syncgc, &last.uid().unwrap()).await;

    let squeezed = Restarted::with(&[
        ("SYNCGC_APISERVER_INFLIGHT", "4"),
        ("SYNCGC_APISERVER_MUTATING_INFLIGHT", "2"),
        ("SYNCGC_APISERVER_FLOW_CONTROL", "false"),
    ]);
    // Writers that do not wait when refused (syncgc's client retries nothing).
    let config = syncgc::api::config(Some(support::controller_kubeconfig_path().as_ref()))
        .await
        .unwrap();
    let controller = syncgc::api::client(config).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let api: Api<ConfigMap> = Api::namespaced(controller.clone(), &writers_ns.name);
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("writer-{w}-{i}");
                    i += 1;
                    let created = api
                        .create(&PostParams::default(), &config_map(&name, vec![]))
                        .await;
                    let deleted = api.delete(&name, &DeleteParams::default()).await;
                    if created.is_err() || deleted.is_err() {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            })
        })
        .collect();
    let throttled = || syncgc.metric_where("syncgc_queue_retries_total", "reason=\"throttled\"");
    let before = throttled();

    delete(&api, "owner", &DeleteParams::background()).await;
    let armed = create(&api, &opted_in("created-meanwhile", vec![], &[])).await;
    assert_eq!(
        armed.finalizers(),
        [SYNCHRONOUS_FINALIZER],
        "armed while the apiserver is at its limits"
    );
    eventually(
        "every dependent is deleted",
        Duration::from_secs(120),
        || async {
            let left = api
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .filter(|cm| cm.name_any().starts_with("dependent-"))
                .count();
            (left == 0).then_some(())
        },
    )
    .await;
    let met = throttled() - before;
    println!("syncgc queued {met} items again after a 429");
    assert!(met > 0.0, "syncgc met no 429: the limits did not bite");
    assert!(
        exists(&api, "owner").await,
        "released while a dependent is left"
    );
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        let _ = writer.await;
    }
    drop(squeezed);
    clear_finalizers(&api, "last").await;
    eventually("the owner goes once the last is gone", WAIT, || {
        gone(&api, "owner")
    })
    .await;
}

/// kube-apiserver restarted with `env` (`hack/cluster.sh`'s settings), and restarted as usual
/// when dropped.
struct Restarted;

impl Restarted {
    fn with(env: &[(&str, &str)]) -> Self {
        cluster_sh(&["restart-apiserver"], env);
        Self
    }
}

impl Drop for Restarted {
    fn drop(&mut self) {
        let restarted = try_cluster_sh(&["restart-apiserver"], &[]);
        if let Err(err) = restarted
            && !std::thread::panicking()
        {
            panic!("{err}");
        }
    }
}
