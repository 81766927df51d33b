//! syncgc in standalone mode started after the objects it must collect exist, as after a
//! restart of the collector: GC-12 (TestCrossNamespaceReferences), GC-13
//! (TestClusterScopedOwners, with the owners' kind unwatched so that they are only ever seen by
//! live reads, as upstream's delayed watch does), GCR-08 (#109748) and FI-03.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use support::gc::reference;
use support::process::Syncgc;
use support::{
    HOLD, Kcm, TestNamespace, clear_finalizers, config_map, create, delete, eventually, exists,
    gone, held, owner_ref,
};

const WAIT: Duration = Duration::from_secs(60);

fn secret(
    name: &str,
    owners: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    label: bool,
) -> Secret {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "ownerReferences": owners,
            "labels": if label { json!({ "single-bad-reference": "true" }) } else { json!({}) },
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn a_collector_started_late_collects_what_it_finds() {
    let _alone = support::process::alone().await;
    support::kcm(Kcm::NoGc);
    let client = support::client().await;

    // GC-12.
    let a = TestNamespace::new(&client, "gc12_a").await;
    let b = TestNamespace::new(&client, "gc12_b").await;
    let parent = create(&b.api::<ConfigMap>(), &config_map("parent", vec![])).await;
    let parent_uid = parent.uid().unwrap();
    for i in 0..10 {
        create(
            &b.api::<Secret>(),
            &secret(&format!("child{i}"), vec![owner_ref(&parent, false)], false),
        )
        .await;
    }
    let bad = || reference("v1", "Pod", "invalid", &parent_uid, None);
    let mut unknown: Vec<_> = (0..25)
        .map(|n| {
            reference(
                "test/v1",
                &format!("invalid{n}"),
                "n",
                &format!("uid-{n}"),
                None,
            )
        })
        .collect();
    unknown.push(bad());
    for i in 0..5 {
        let mut cm = config_map(&format!("invalid-cm-{i}"), unknown.clone());
        cm.metadata.labels = None;
        create(&a.api::<ConfigMap>(), &cm).await;
        create(
            &a.api::<Secret>(),
            &secret(&format!("invalid-secret-{i}"), unknown.clone(), false),
        )
        .await;
        create(
            &a.api::<Secret>(),
            &secret(&format!("single-bad-{i}"), vec![bad()], true),
        )
        .await;
    }

    // GCR-08 and FI-03: an owner deleted while no collector ran, and owners left waiting in
    // foreground and for orphaning.
    let c = TestNamespace::new(&client, "gcr08").await;
    let maps = c.api::<ConfigMap>();
    let deleted = create(&maps, &config_map("deleted", vec![])).await;
    create(
        &maps,
        &config_map("of-deleted", vec![owner_ref(&deleted, false)]),
    )
    .await;
    delete(&maps, "deleted", &DeleteParams::background()).await;
    let foreground = create(&maps, &config_map("foreground", vec![])).await;
    create(
        &maps,
        &config_map("of-foreground", vec![owner_ref(&foreground, true)]),
    )
    .await;
    delete(&maps, "foreground", &DeleteParams::foreground()).await;
    let orphaning = create(&maps, &config_map("orphaning", vec![])).await;
    create(
        &maps,
        &held("of-orphaning", vec![owner_ref(&orphaning, true)]),
    )
    .await;
    delete(&maps, "orphaning", &DeleteParams::orphan()).await;

    // GC-13.
    let d = TestNamespace::new(&client, "gc13").await;
    let volumes = Api::<PersistentVolume>::all(client.clone());
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": { "name": format!("{}-pv", d.name) },
        "spec": { "capacity": { "storage": "1Mi" }, "accessModes": ["ReadWriteOnce"],
                  "hostPath": { "path": "/tmp/none" } }
    }))
    .unwrap();
    let volume = volumes
        .create(&PostParams::default(), &volume)
        .await
        .unwrap();
    let d_maps = d.api::<ConfigMap>();
    create(
        &d_maps,
        &config_map("cm-valid", vec![owner_ref(&volume, false)]),
    )
    .await;
    create(
        &d_maps,
        &config_map(
            "cm-missing",
            vec![reference(
                "v1",
                "PersistentVolume",
                "missing-name",
                "missing-uid",
                None,
            )],
        ),
    )
    .await;
    create(
        &d_maps,
        &config_map(
            "cm-invalid",
            vec![reference(
                "unknown.group/v1",
                "UnknownType",
                "x",
                "unknown-uid",
                None,
            )],
        ),
    )
    .await;

    let syncgc = tokio::task::spawn_blocking(|| {
        Syncgc::start(
            &format!("syncgc-late-{}", std::process::id()),
            &[
                "--mode",
                "standalone",
                "--ignore-resource",
                "persistentvolumes,events,events.events.k8s.io",
            ],
        )
    })
    .await
    .unwrap();

    let a_secrets = a.api::<Secret>();
    let single_bad = ListParams::default().labels("single-bad-reference=true");
    eventually(
        "the single-bad-reference Secrets are collected",
        Duration::from_secs(10),
        || async {
            a_secrets
                .list_metadata(&single_bad)
                .await
                .unwrap()
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
    create(&a_secrets, &secret("single-bad-late", vec![bad()], true)).await;
    eventually(
        "the late one is collected too",
        Duration::from_secs(10),
        || gone(&a_secrets, "single-bad-late"),
    )
    .await;
    let b_secrets = b.api::<Secret>();
    for i in 0..10 {
        assert!(
            exists(&b_secrets, &format!("child{i}")).await,
            "child{i} of the real parent"
        );
    }

    eventually(
        "the dependent of the owner deleted earlier is collected",
        WAIT,
        || gone(&maps, "of-deleted"),
    )
    .await;
    eventually(
        "the foreground owner's dependent is collected",
        WAIT,
        || gone(&maps, "of-foreground"),
    )
    .await;
    eventually("the foreground owner is gone", WAIT, || {
        gone(&maps, "foreground")
    })
    .await;
    eventually("the orphaning owner is gone", WAIT, || {
        gone(&maps, "orphaning")
    })
    .await;
    let orphan = maps.get("of-orphaning").await.unwrap();
    assert!(
        orphan.owner_references().is_empty(),
        "orphaned: {:?}",
        orphan.owner_references()
    );
    assert_eq!(orphan.finalizers(), [HOLD]);
    clear_finalizers(&maps, "of-orphaning").await;

    eventually(
        "cm-missing is collected (its owner verified absent)",
        WAIT,
        || gone(&d_maps, "cm-missing"),
    )
    .await;
    // The persistent volume is the only owner outside the graph (its resource is ignored).
    eventually("syncgc reads the volume that owns cm-valid", WAIT, || {
        let read = syncgc.metric_where("syncgc_owner_reads_total", "result=\"present\"") >= 1.0;
        async move { read.then_some(()) }
    })
    .await;
    assert!(
        exists(&d_maps, "cm-valid").await,
        "an owner the graph never saw is read, not presumed absent"
    );
    assert!(
        exists(&d_maps, "cm-invalid").await,
        "an owner of an unknown kind is never taken for absent"
    );
    for i in 0..5 {
        assert!(exists(&a.api::<ConfigMap>(), &format!("invalid-cm-{i}")).await);
    }
    volumes
        .delete(&volume.name_any(), &DeleteParams::default())
        .await
        .unwrap();
}
