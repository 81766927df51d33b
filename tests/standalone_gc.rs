//! syncgc as the cluster's whole garbage collector (`--mode standalone`): the real apiserver,
//! kube-controller-manager **without** its GC, and one `syncgc run --mode standalone` process.
//! The Kubernetes GC integration suite (test/integration/garbagecollector, 1.20) ported scenario
//! by scenario, named as in SCENARIOS.md (GC-nn), plus properties from its unit tests and known
//! upstream bugs. GC-12 and GC-13 need syncgc started after their objects:
//! `tests/startup/standalone_start.rs`.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ReplicationController};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use support::gc::{delete_with, owner_names, pod, rc, reference, service_account_ready};
use support::process::Syncgc;
use support::surface::{
    create_as, cronjob, dynamic, ingress, pod_template, reference_to, resource, seen, stays,
};
use support::{
    TestNamespace, being_deleted, clear_finalizers, config_map, create, create_crd, delete,
    delete_crd, eventually, exists, gone, in_wave, owner_ref, tree, with_finalizer,
};

const WAIT: Duration = Duration::from_secs(60);
const X_Y: &str = "x/y";

fn syncgc() -> &'static Syncgc {
    static SHARED: OnceLock<Syncgc> = OnceLock::new();
    SHARED.get_or_init(|| {
        Syncgc::start(
            &format!("syncgc-standalone-{}", std::process::id()),
            &["--mode", "standalone", "--qps", "500", "--burst", "1000"],
        )
    })
}

async fn namespace(test: &str) -> TestNamespace {
    support::kcm(support::Kcm::NoGc);
    let collector = tokio::task::spawn_blocking(syncgc).await.unwrap();
    support::plan::predicting(collector, "standalone");
    let client = support::client().await;
    let ns = TestNamespace::new(&client, test).await;
    service_account_ready(&ns).await;
    ns
}

/// Waits until the collector's graph holds each of `objects`.
async fn seen_all<K: kube::Resource>(objects: &[K]) {
    for object in objects {
        seen(
            syncgc(),
            &object.uid().expect("read back from the apiserver"),
        )
        .await;
    }
}

async fn warnings(client: &kube::Client, object: &str, reason: &str) -> usize {
    Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object))
        .count()
}

/// GC-01 TestCascadingDeletion.
#[tokio::test]
async fn gc01_cascading_deletion() {
    let ns = namespace("gc01_cascading_deletion").await;
    let (rcs, pods) = (ns.api::<ReplicationController>(), ns.api::<Pod>());
    let rc1 = create(&rcs, &rc("rc1", &[])).await;
    let rc2 = create(&rcs, &rc("rc2", &[])).await;
    create(&pods, &pod("pod1", vec![owner_ref(&rc1, false)], &[])).await;
    create(&pods, &pod("pod2", vec![], &[])).await;
    create(
        &pods,
        &pod(
            "pod3",
            vec![owner_ref(&rc1, false), owner_ref(&rc2, false)],
            &[],
        ),
    )
    .await;

    delete(&rcs, "rc1", &DeleteParams::background()).await;
    eventually("pod1 is collected", WAIT, || gone(&pods, "pod1")).await;
    eventually("pod3 loses its reference to rc1", WAIT, || async {
        let pod3 = pods.get("pod3").await.unwrap();
        (owner_names(&pod3) == ["rc2"]).then_some(())
    })
    .await;
    assert!(exists(&pods, "pod2").await);
}

/// GC-02 TestCreateWithNonExistentOwner: an owner never seen is verified by a live read.
#[tokio::test]
async fn gc02_create_with_nonexistent_owner() {
    let ns = namespace("gc02_create_with_nonexistent_owner").await;
    let pods = ns.api::<Pod>();
    let missing = reference(
        "v1",
        "ReplicationController",
        "test.rc.1",
        "doesn't matter",
        None,
    );
    create(&pods, &pod("pod", vec![missing], &[])).await;
    eventually("the pod is collected", Duration::from_secs(30), || {
        gone(&pods, "pod")
    })
    .await;
}

/// GC-03 TestStressingCascadingDeletion: 10 collections of 5 variants, each an RC with 3 pods.
#[tokio::test]
async fn gc03_stressing_cascading_deletion() {
    let ns = namespace("gc03_stressing_cascading_deletion").await;
    let (rcs, pods) = (ns.api::<ReplicationController>(), ns.api::<Pod>());
    let variants: [(&[&str], serde_json::Value); 5] = [
        (&[], json!({})),
        (&["orphan"], json!({})),
        (&["orphan"], json!({ "orphanDependents": false })),
        (&[], json!({ "orphanDependents": true })),
        (&[], json!({ "propagationPolicy": "Orphan" })),
    ];
    let mut made = Vec::new();
    for i in 0..10 {
        for (v, (finalizers, _)) in variants.iter().enumerate() {
            let name = format!("rc-{v}-{i}");
            made.push((v, name.clone(), create(&rcs, &rc(&name, finalizers)).await));
        }
    }
    let dependents = futures::future::join_all(made.iter().flat_map(|(_, name, owner)| {
        let pods = &pods;
        (0..3).map(move |p| async move {
            let dependent = pod(&format!("{name}-{p}"), vec![owner_ref(owner, false)], &[]);
            create(pods, &dependent).await
        })
    }))
    .await;
    // The orphan variants need the collector to have seen the pods (GCR-01).
    seen_all(&dependents).await;
    futures::future::join_all(made.iter().map(|(v, name, _)| {
        delete_with::<ReplicationController>(&ns.client, &ns.name, name, variants[*v].1.clone())
    }))
    .await;

    eventually(
        "no RC is left and only the orphans remain",
        Duration::from_secs(300),
        || async {
            let left_rcs = rcs
                .list_metadata(&ListParams::default())
                .await
                .unwrap()
                .items
                .len();
            let left = pods
                .list_metadata(&ListParams::default())
                .await
                .unwrap()
                .items;
            (left_rcs == 0 && left.len() == 120).then_some(())
        },
    )
    .await;
    let left = pods
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(
        left.iter().all(|p| !p.name_any().starts_with("rc-2-")),
        "variant 3 is collected"
    );
    assert!(
        left.iter().all(|p| p.owner_references().is_empty()),
        "orphans keep no reference"
    );
}

/// GC-04 TestOrphaning.
#[tokio::test]
async fn gc04_orphaning() {
    let ns = namespace("gc04_orphaning").await;
    let (rcs, pods) = (ns.api::<ReplicationController>(), ns.api::<Pod>());
    let owner = create(&rcs, &rc("rc", &[])).await;
    let mut dependents = Vec::new();
    for i in 0..3 {
        let dependent = pod(&format!("pod{i}"), vec![owner_ref(&owner, false)], &[]);
        dependents.push(create(&pods, &dependent).await);
    }
    seen_all(&dependents).await;
    delete_with::<ReplicationController>(
        &ns.client,
        &ns.name,
        "rc",
        json!({ "orphanDependents": true }),
    )
    .await;
    eventually("the RC is gone", Duration::from_secs(30), || {
        gone(&rcs, "rc")
    })
    .await;
    for i in 0..3 {
        let p = pods.get(&format!("pod{i}")).await.unwrap();
        assert!(
            p.owner_references().is_empty(),
            "{:?}",
            p.owner_references()
        );
    }
}

/// GC-05 TestSolidOwnerDoesNotBlockWaitingOwner.
#[tokio::test]
async fn gc05_solid_owner_does_not_block_waiting_owner() {
    let ns = namespace("gc05_solid_owner").await;
    let (rcs, pods) = (ns.api::<ReplicationController>(), ns.api::<Pod>());
    let rc1 = create(&rcs, &rc("rc1", &[])).await;
    let rc2 = create(&rcs, &rc("rc2", &[])).await;
    create(
        &pods,
        &pod(
            "pod",
            vec![owner_ref(&rc1, true), owner_ref(&rc2, false)],
            &[],
        ),
    )
    .await;
    delete(&rcs, "rc1", &DeleteParams::foreground()).await;
    eventually("rc1 is gone", Duration::from_secs(30), || gone(&rcs, "rc1")).await;
    assert_eq!(owner_names(&pods.get("pod").await.unwrap()), ["rc2"]);
}

/// GC-06 TestNonBlockingOwnerRefDoesNotBlock, GC-59.
#[tokio::test]
async fn gc06_non_blocking_owner_ref_does_not_block() {
    let ns = namespace("gc06_non_blocking").await;
    let (rcs, pods) = (ns.api::<ReplicationController>(), ns.api::<Pod>());
    let owner = create(&rcs, &rc("rc", &[])).await;
    let mut unset = owner_ref(&owner, false);
    unset.block_owner_deletion = None;
    create(&pods, &pod("pod1", vec![unset], &[X_Y])).await;
    create(&pods, &pod("pod2", vec![owner_ref(&owner, false)], &[X_Y])).await;
    delete(&rcs, "rc", &DeleteParams::foreground()).await;
    eventually("the RC is gone", Duration::from_secs(30), || {
        gone(&rcs, "rc")
    })
    .await;
    for name in ["pod1", "pod2"] {
        eventually("the dependent is being deleted", WAIT, || {
            being_deleted(&pods, name)
        })
        .await;
        clear_finalizers(&pods, name).await;
    }
}

/// GC-07 TestDoubleDeletionWithFinalizer (#77081, #81081), GCR-05.
#[tokio::test]
async fn gc07_double_deletion_with_finalizer() {
    let ns = namespace("gc07_double_deletion").await;
    let pods = ns.api::<Pod>();
    create(&pods, &pod("pod", vec![], &[X_Y])).await;
    for round in 0..2 {
        delete(&pods, "pod", &DeleteParams::foreground()).await;
        eventually(
            &format!("foregroundDeletion is removed (round {round})"),
            Duration::from_secs(10),
            || async { (pods.get("pod").await.unwrap().finalizers() == [X_Y]).then_some(()) },
        )
        .await;
    }
    let remove = json!([{ "op": "remove", "path": "/metadata/finalizers" }]);
    pods.patch(
        "pod",
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(remove).unwrap()),
    )
    .await
    .unwrap();
    eventually("the pod is gone", Duration::from_secs(10), || {
        gone(&pods, "pod")
    })
    .await;
}

/// GC-08 TestBlockingOwnerRefDoesBlock, with kcp's extension: letting the dependent go lets
/// the owner go.
#[tokio::test]
async fn gc08_blocking_owner_ref_does_block() {
    let ns = namespace("gc08_blocking").await;
    let (rcs, pods) = (ns.api::<ReplicationController>(), ns.api::<Pod>());
    let owner = create(&rcs, &rc("rc", &[])).await;
    create(&pods, &pod("pod", vec![owner_ref(&owner, true)], &[X_Y])).await;
    delete(&rcs, "rc", &DeleteParams::foreground()).await;
    stays(
        "the RC waits, in foreground deletion",
        Duration::from_secs(15),
        || async {
            let rc = rcs.get("rc").await.unwrap();
            rc.finalizers().iter().any(|f| f == "foregroundDeletion") && exists(&pods, "pod").await
        },
    )
    .await;
    clear_finalizers(&pods, "pod").await;
    eventually("the pod is gone", WAIT, || gone(&pods, "pod")).await;
    eventually("the RC is gone", WAIT, || gone(&rcs, "rc")).await;
}

/// GC-09 TestCustomResourceCascadingDeletion.
#[tokio::test]
async fn gc09_custom_resource_cascading_deletion() {
    let ns = namespace("gc09_custom_resource").await;
    let resource = create_crd(&ns, "Owner", "owners").await;
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    let owner = make_custom(&api, &resource, "owner", vec![]).await;
    make_custom(
        &api,
        &resource,
        "dependent",
        vec![custom_ref(&resource, &owner)],
    )
    .await;
    delete(&api, "owner", &DeleteParams::foreground()).await;
    eventually("the owner is gone", WAIT, || gone(&api, "owner")).await;
    eventually("the dependent is gone", WAIT, || gone(&api, "dependent")).await;
    delete_crd(&ns.client, &resource).await;
}

/// GC-10 TestMixedRelationships.
#[tokio::test]
async fn gc10_mixed_relationships() {
    let ns = namespace("gc10_mixed").await;
    let resource = create_crd(&ns, "Mixed", "mixeds").await;
    let custom: Api<kube::api::DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    let maps = ns.api::<ConfigMap>();
    let custom_owner = make_custom(&custom, &resource, "custom-owner", vec![]).await;
    create(
        &maps,
        &config_map("core-dependent", vec![custom_ref(&resource, &custom_owner)]),
    )
    .await;
    let core_owner = create(&maps, &config_map("core-owner", vec![])).await;
    make_custom(
        &custom,
        &resource,
        "custom-dependent",
        vec![owner_ref(&core_owner, false)],
    )
    .await;

    custom
        .delete("custom-owner", &DeleteParams::foreground())
        .await
        .unwrap();
    eventually("the custom owner is gone", WAIT, || {
        gone(&custom, "custom-owner")
    })
    .await;
    eventually("its core dependent is gone", WAIT, || {
        gone(&maps, "core-dependent")
    })
    .await;
    delete(&maps, "core-owner", &DeleteParams::foreground()).await;
    eventually("the core owner is gone", WAIT, || gone(&maps, "core-owner")).await;
    eventually("its custom dependent is gone", WAIT, || {
        gone(&custom, "custom-dependent")
    })
    .await;
    delete_crd(&ns.client, &resource).await;
}

/// GC-11 TestCRDDeletionCascading, twice: the collector drops the watch of the deleted kind
/// and watches it again when it comes back.
#[tokio::test]
async fn gc11_crd_deletion_cascading() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let ns = namespace("gc11_crd_deletion").await;
    let maps = ns.api::<ConfigMap>();
    for pass in 0..2 {
        let resource = create_crd(&ns, "Parent", "parents").await;
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
        let owner = eventually("the new kind is served", WAIT, || async {
            let obj = kube::api::DynamicObject::new("owner", &resource).data(json!({}));
            api.create(&Default::default(), &obj).await.ok()
        })
        .await;
        let dependent = format!("dependent-{pass}");
        create(
            &maps,
            &config_map(&dependent, vec![custom_ref(&resource, &owner)]),
        )
        .await;
        // Upstream waits for the GC's resync period; syncgc watches the new kind once its
        // discovery finds it (within 20 s).
        seen(syncgc(), &owner.uid().unwrap()).await;
        delete_crd(&ns.client, &resource).await;
        // Once the kind is gone, so is its URL: a 404 either way.
        eventually("the custom owner is gone", WAIT, || async {
            match api.get_opt("owner").await {
                Ok(None) => Some(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Some(()),
                _ => None,
            }
        })
        .await;
        eventually("its ConfigMap dependent is gone", WAIT, || {
            gone(&maps, &dependent)
        })
        .await;
        let crds = Api::<CustomResourceDefinition>::all(ns.client.clone());
        let name = format!("{}.{}", resource.plural, resource.group);
        eventually("the CRD is gone", WAIT, || gone(&crds, &name)).await;
    }
}

/// GC-36/GC-37: a reference to a namespaced owner that lives in another namespace names
/// nothing in the dependent's namespace: the dependent is collected, with a Warning, and the
/// owner is untouched.
#[tokio::test]
async fn gc36_reference_across_namespaces_is_dangling() {
    let ns1 = namespace("gc36_ns1").await;
    let ns2 = namespace("gc36_ns2").await;
    let (maps1, maps2) = (ns1.api::<ConfigMap>(), ns2.api::<ConfigMap>());
    let owner = create(&maps2, &config_map("owner", vec![])).await;
    create(&maps2, &config_map("good", vec![owner_ref(&owner, false)])).await;
    create(&maps1, &config_map("bad", vec![owner_ref(&owner, false)])).await;
    eventually(
        "the child in the wrong namespace is collected",
        WAIT,
        || gone(&maps1, "bad"),
    )
    .await;
    eventually("a Warning says why", WAIT, || async {
        (warnings(&ns1.client, "bad", "OwnerRefInvalidNamespace").await > 0).then_some(())
    })
    .await;
    stays(
        "the owner and its good child stay",
        Duration::from_secs(5),
        || async { exists(&maps2, "owner").await && exists(&maps2, "good").await },
    )
    .await;
}

/// GC-38/GC-39, GCR-11: a cluster-scoped object with a namespaced owner is never collected, and
/// a Warning says so.
#[tokio::test]
async fn gc38_cluster_scoped_child_of_namespaced_owner_is_kept() {
    let ns = namespace("gc38_cluster_scoped_child").await;
    let owner = create(&ns.api::<ConfigMap>(), &config_map("owner", vec![])).await;
    let roles = Api::<ClusterRole>::all(ns.client.clone());
    let name = format!("{}-child", ns.name);
    let child: ClusterRole = serde_json::from_value(json!({
        "metadata": { "name": name, "ownerReferences": [owner_ref(&owner, false)] }
    }))
    .unwrap();
    create(&roles, &child).await;
    ns.api::<ConfigMap>()
        .delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("a Warning says why it is kept", WAIT, || async {
        (warnings(&ns.client, &name, "OwnerRefInvalidNamespace").await > 0).then_some(())
    })
    .await;
    stays(
        "the cluster-scoped child stays",
        Duration::from_secs(5),
        || exists(&roles, &name),
    )
    .await;
    delete(&roles, &name, &DeleteParams::default()).await;
}

/// GC-45..47, GCR-12: a reference with the uid of an existing owner but another kind is
/// dangling; one with the right kind is not.
#[tokio::test]
async fn gc45_reference_with_the_wrong_kind_is_dangling() {
    let ns = namespace("gc45_wrong_kind").await;
    let maps = ns.api::<ConfigMap>();
    let owner = create(&maps, &config_map("owner", vec![])).await;
    let wrong = reference("v1", "Secret", "owner", &owner.uid().unwrap(), None);
    create(&maps, &config_map("bad", vec![wrong])).await;
    create(&maps, &config_map("good", vec![owner_ref(&owner, false)])).await;
    eventually("the badly referring child is collected", WAIT, || {
        gone(&maps, "bad")
    })
    .await;
    stays("the good child stays", Duration::from_secs(3), || {
        exists(&maps, "good")
    })
    .await;
    delete(&maps, "owner", &DeleteParams::background()).await;
    eventually("the good child follows its owner", WAIT, || {
        gone(&maps, "good")
    })
    .await;
}

/// GC-54: a plain DELETE takes each type's default: `orphan` for v1 ReplicationControllers,
/// background for apps/v1 ReplicaSets.
#[tokio::test]
async fn gc54_default_propagation_per_type() {
    let ns = namespace("gc54_defaults").await;
    let (rcs, pods, sets) = (
        ns.api::<ReplicationController>(),
        ns.api::<Pod>(),
        ns.api::<ReplicaSet>(),
    );
    let owner = create(&rcs, &rc("rc", &[])).await;
    let of_rc = create(&pods, &pod("of-rc", vec![owner_ref(&owner, false)], &[])).await;
    let set: ReplicaSet = serde_json::from_value(json!({
        "metadata": { "name": "rs" },
        "spec": { "replicas": 0, "selector": { "matchLabels": { "rs": "rs" } },
            "template": { "metadata": { "labels": { "rs": "rs" } },
                "spec": { "containers": [{ "name": "c", "image": "fake.invalid/none" }] } } }
    }))
    .unwrap();
    let set = create(&sets, &set).await;
    let of_rs = create(&pods, &pod("of-rs", vec![owner_ref(&set, false)], &[])).await;
    seen_all(&[of_rc, of_rs]).await;
    delete(&rcs, "rc", &DeleteParams::default()).await;
    delete(&sets, "rs", &DeleteParams::default()).await;
    eventually("the RC is gone", WAIT, || gone(&rcs, "rc")).await;
    eventually("the ReplicaSet's pod is collected", WAIT, || {
        gone(&pods, "of-rs")
    })
    .await;
    assert!(
        pods.get("of-rc")
            .await
            .unwrap()
            .owner_references()
            .is_empty()
    );
}

/// GC-55: a second DELETE with Orphan turns a waiting foreground deletion into orphaning.
#[tokio::test]
async fn gc55_orphan_after_foreground_orphans() {
    let ns = namespace("gc55_policy_swap").await;
    let maps = ns.api::<ConfigMap>();
    let owner = create(&maps, &with_finalizer(config_map("owner", vec![]), X_Y)).await;
    let held = with_finalizer(config_map("held", vec![owner_ref(&owner, true)]), X_Y);
    create(&maps, &held).await;
    delete(&maps, "owner", &DeleteParams::foreground()).await;
    eventually("the held dependent is being deleted", WAIT, || {
        being_deleted(&maps, "held")
    })
    .await;
    delete(&maps, "owner", &DeleteParams::orphan()).await;
    eventually("the held dependent is orphaned", WAIT, || async {
        let held = maps.get("held").await.unwrap();
        held.owner_references().is_empty().then_some(())
    })
    .await;
    eventually("orphan is removed", WAIT, || async {
        (maps.get("owner").await.unwrap().finalizers() == [X_Y]).then_some(())
    })
    .await;
}

/// GC-56: an owner deleted and made again under the same name: the old one's dependents go,
/// the new one's stay.
#[tokio::test]
async fn gc56_same_name_new_uid() {
    let ns = namespace("gc56_same_name").await;
    let maps = ns.api::<ConfigMap>();
    let old = create(&maps, &config_map("owner", vec![])).await;
    create(
        &maps,
        &config_map("old-child", vec![owner_ref(&old, false)]),
    )
    .await;
    delete(&maps, "owner", &DeleteParams::background()).await;
    let new = create(&maps, &config_map("owner", vec![])).await;
    create(
        &maps,
        &config_map("new-child", vec![owner_ref(&new, false)]),
    )
    .await;
    eventually("the old owner's child is collected", WAIT, || {
        gone(&maps, "old-child")
    })
    .await;
    stays(
        "the new owner's child stays",
        Duration::from_secs(3),
        || exists(&maps, "new-child"),
    )
    .await;
}

/// GC-58, GC-60: an owner deleted in the background but kept by a finalizer is solid; its
/// dependents (even blocking ones) go once it is gone.
#[tokio::test]
async fn gc58_owner_kept_by_a_finalizer_is_solid() {
    let ns = namespace("gc58_solid_while_finalizing").await;
    let maps = ns.api::<ConfigMap>();
    let owner = create(&maps, &with_finalizer(config_map("owner", vec![]), X_Y)).await;
    create(&maps, &config_map("child", vec![owner_ref(&owner, true)])).await;
    delete(&maps, "owner", &DeleteParams::background()).await;
    stays(
        "the child stays while its owner exists",
        Duration::from_secs(5),
        || exists(&maps, "child"),
    )
    .await;
    clear_finalizers(&maps, "owner").await;
    eventually("the child is collected", WAIT, || gone(&maps, "child")).await;
}

/// GC-61: orphaning by one owner leaves the other's reference; deleting that one collects.
#[tokio::test]
async fn gc61_orphan_one_owner_then_delete_the_other() {
    let ns = namespace("gc61_two_owners").await;
    let maps = ns.api::<ConfigMap>();
    let a = create(&maps, &config_map("a", vec![])).await;
    let b = create(&maps, &config_map("b", vec![])).await;
    let d = create(
        &maps,
        &config_map("d", vec![owner_ref(&a, false), owner_ref(&b, false)]),
    )
    .await;
    seen_all(&[d]).await;
    delete(&maps, "a", &DeleteParams::orphan()).await;
    eventually("a is gone", WAIT, || gone(&maps, "a")).await;
    assert_eq!(owner_names(&maps.get("d").await.unwrap()), ["b"]);
    delete(&maps, "b", &DeleteParams::background()).await;
    eventually("d is collected", WAIT, || gone(&maps, "d")).await;
}

/// GCR-06 (#89503): a second orphaning DELETE's `orphan` finalizer is removed too.
#[tokio::test]
async fn gcr06_orphan_twice() {
    let ns = namespace("gcr06_orphan_twice").await;
    let pods = ns.api::<Pod>();
    create(&pods, &pod("pod", vec![], &[X_Y])).await;
    for round in 0..2 {
        delete_with::<Pod>(
            &ns.client,
            &ns.name,
            "pod",
            json!({ "orphanDependents": true }),
        )
        .await;
        eventually(
            &format!("orphan is removed (round {round})"),
            Duration::from_secs(10),
            || async { (pods.get("pod").await.unwrap().finalizers() == [X_Y]).then_some(()) },
        )
        .await;
    }
    clear_finalizers(&pods, "pod").await;
    eventually("the pod is gone", Duration::from_secs(10), || {
        gone(&pods, "pod")
    })
    .await;
}

/// A foreground deletion through an ownership cycle (A owns B, B owns A, both blocking) ends:
/// B's reference to the waiting A is unblocked and B deleted in foreground.
#[tokio::test]
async fn foreground_cycle_does_not_deadlock() {
    let ns = namespace("foreground_cycle").await;
    let maps = ns.api::<ConfigMap>();
    let a = create(&maps, &config_map("a", vec![])).await;
    let b = create(&maps, &config_map("b", vec![owner_ref(&a, true)])).await;
    maps.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": { "ownerReferences": [owner_ref(&b, true)] }
        })),
    )
    .await
    .unwrap();
    create(&maps, &config_map("c", vec![owner_ref(&b, true)])).await;
    delete(&maps, "a", &DeleteParams::foreground()).await;
    for name in ["a", "b", "c"] {
        eventually(&format!("{name} is gone"), WAIT, || gone(&maps, name)).await;
    }
}

/// A three-level tree in foreground: each level goes after the one below, and syncgc counts
/// its work by propagation and finalizer.
#[tokio::test]
async fn foreground_tree_goes_leaf_first_and_is_counted() {
    let ns = namespace("foreground_tree").await;
    let maps = ns.api::<ConfigMap>();
    let before = syncgc().metric("syncgc_gc_finalizers_removed_total");
    let root = create(&maps, &config_map("root", vec![])).await;
    tree(&maps, &root, &[("mid", 3), ("leaf", 3)], true).await;
    delete(&maps, "root", &DeleteParams::foreground()).await;
    eventually("the root is gone", WAIT, || gone(&maps, "root")).await;
    let left = maps
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(
        left.iter().all(|m| m.name_any() == "kube-root-ca.crt"),
        "the root went last: {:?}",
        left.iter().map(|m| m.name_any()).collect::<Vec<_>>()
    );
    // Counted once each write has returned, which may be after the root is gone.
    eventually(
        "the finalizers removed and the deletions are counted",
        WAIT,
        || {
            let counted = syncgc().metric("syncgc_gc_finalizers_removed_total") >= before + 4.0
                && syncgc().metric("syncgc_gc_deletions_total") > 0.0;
            async move { counted.then_some(()) }
        },
    )
    .await;
}

async fn make_custom(
    api: &Api<kube::api::DynamicObject>,
    resource: &kube::api::ApiResource,
    name: &str,
    owners: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
) -> kube::api::DynamicObject {
    let mut obj = kube::api::DynamicObject::new(name, resource).data(json!({}));
    obj.metadata.owner_references = Some(owners);
    // A new kind takes a moment to be served.
    eventually(&format!("{name} is created"), WAIT, || async {
        api.create(&Default::default(), &obj).await.ok()
    })
    .await
}

fn custom_ref(
    resource: &kube::api::ApiResource,
    owner: &kube::api::DynamicObject,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    reference(
        &resource.api_version,
        &resource.kind,
        &owner.name_any(),
        &owner.uid().unwrap(),
        Some(true),
    )
}

/// The upstream e2e case "should delete jobs and pods created by cronjob": a CronJob, served
/// only as `batch/v1beta1` on 1.20 (not its group's preferred version), owns a Job; deleted in
/// the background, its Job is collected.
#[tokio::test]
async fn jobs_of_a_deleted_cronjob_are_collected() {
    let ns = namespace("cronjob_jobs").await;
    let (cronjobs, jobs) = (
        resource("batch", "v1beta1", "CronJob", "cronjobs"),
        resource("batch", "v1", "Job", "jobs"),
    );
    let owner = create_as(
        &dynamic(&ns, &cronjobs),
        &cronjobs,
        cronjob("nightly", json!({})),
    )
    .await;
    let job_api = dynamic(&ns, &jobs);
    let job = create_as(
        &job_api,
        &jobs,
        json!({ "metadata": { "name": "run", "ownerReferences": [reference_to(&owner, &cronjobs)] },
            "spec": { "parallelism": 0, "template": pod_template() } }),
    )
    .await;
    seen(syncgc(), &job.uid().unwrap()).await;
    dynamic(&ns, &cronjobs)
        .delete("nightly", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the Job is collected", WAIT, || gone(&job_api, "run")).await;
}

/// On 1.20 an Ingress is served by `extensions` and `networking.k8s.io`, watched once: an
/// Ingress deleted with `Orphan` keeps the dependents that refer to it through either group
/// (their references go, they stay).
#[tokio::test]
async fn orphaning_an_ingress_keeps_dependents_referring_through_either_group() {
    let ns = namespace("ingress_orphan").await;
    let ingresses = resource("networking.k8s.io", "v1", "Ingress", "ingresses");
    let legacy = resource("extensions", "v1beta1", "Ingress", "ingresses");
    let api = dynamic(&ns, &ingresses);
    let owner = create_as(&api, &ingresses, ingress("web", json!({}))).await;
    let configmaps = ns.api::<ConfigMap>();
    for (name, through) in [("new", &ingresses), ("old", &legacy)] {
        let dependent = create(
            &configmaps,
            &config_map(name, vec![reference_to(&owner, through)]),
        )
        .await;
        seen(syncgc(), &dependent.uid().unwrap()).await;
    }
    delete(&api, "web", &DeleteParams::orphan()).await;
    eventually("the Ingress is gone", WAIT, || gone(&api, "web")).await;
    stays(
        "both dependents stay, orphaned",
        Duration::from_secs(3),
        || async {
            for name in ["new", "old"] {
                match configmaps.get_opt(name).await.unwrap() {
                    Some(cm) if cm.owner_references().is_empty() => {}
                    _ => return false,
                }
            }
            true
        },
    )
    .await;
}

/// Foreground deletion follows `syncgc.io/deletion-order` as synchronous deletion does: the
/// default wave waits while an object of the higher one is held, and goes once it is let go.
#[tokio::test]
async fn foreground_deletion_goes_in_waves() {
    let ns = namespace("order-foreground").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &config_map("owner", vec![])).await;
    let first = with_finalizer(config_map("first", vec![owner_ref(&owner, true)]), X_Y);
    create(&api, &in_wave(first, "5")).await;
    create(&api, &config_map("then", vec![owner_ref(&owner, true)])).await;
    delete(&api, "owner", &DeleteParams::foreground()).await;
    eventually("the first wave is being deleted", WAIT, || {
        being_deleted(&api, "first")
    })
    .await;
    stays("the default wave waits", Duration::from_secs(3), || async {
        api.get_opt("then")
            .await
            .unwrap()
            .is_some_and(|cm| cm.metadata.deletion_timestamp.is_none())
    })
    .await;
    clear_finalizers(&api, "first").await;
    eventually("the default wave goes", WAIT, || gone(&api, "then")).await;
    eventually("the owner goes", WAIT, || gone(&api, "owner")).await;
}

/// `syncgc plan` with syncgc the only collector: each shape planned, deleted, and what
/// happened held against the plan (tests/support/plan.rs).
#[tokio::test]
async fn a_tree_goes_as_planned() {
    support::plan::a_tree(&namespace("plan-tree").await, false).await;
}

crate::plans_in_this_mode!();

#[tokio::test]
async fn a_reference_from_another_namespace_is_left_out_of_the_plan() {
    let other = namespace("plan-elsewhere").await;
    support::plan::a_reference_from_another_namespace(&namespace("plan-here").await, &other).await;
}

/// A namespace whose DELETEs reach the standalone syncgc's webhook, for its guards.
async fn guarded_namespace(test: &str) -> TestNamespace {
    support::kcm(support::Kcm::NoGc);
    let collector = tokio::task::spawn_blocking(syncgc).await.unwrap();
    let client = support::client().await;
    let label = [(support::process::WEBHOOK_LABEL, collector.name.as_str())];
    let ns = TestNamespace::with_labels(&client, test, &label).await;
    service_account_ready(&ns).await;
    ns
}

#[tokio::test]
async fn a_protected_object_is_deleted_neither_directly_nor_by_a_cascade() {
    let ns = guarded_namespace("protected").await;
    support::guards::a_protected_object_is_deleted_neither_directly_nor_by_a_cascade(&ns).await;
}

/// syncgc's own DELETE of a protected object whose owner is gone is refused by its webhook,
/// which drops the reference instead.
#[tokio::test]
async fn a_collectors_delete_of_a_protected_object_drops_the_reference_instead() {
    let ns = guarded_namespace("protected_collected").await;
    support::guards::a_collectors_delete_of_a_protected_object_drops_the_reference_instead(&ns)
        .await;
}
