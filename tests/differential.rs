//! The differential test: the same scenarios run once with kube-controller-manager's own
//! garbage collector (syncgc not running) and once with `syncgc --mode standalone` and
//! kube-controller-manager without its GC; once each run has settled, which objects exist,
//! their ownerReferences, their finalizers and whether they are being deleted must be the same.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use support::gc::{delete_with, reference};
use support::process::Syncgc;
use support::{
    HOLD, Kcm, TestNamespace, config_map, create, delete, owner_and_held, owner_ref, with_finalizer,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Scenario {
    Background,
    ForegroundHeld,
    Orphan,
    SolidOwner,
    NonexistentOwner,
    ForegroundTree,
    BackgroundTree,
    WrongKind,
    ForegroundCycle,
    DoubleForeground,
    UnknownKind,
    OwnerKeptByFinalizer,
    OrphanTwiceWithFinalizer,
    DefaultPropagationOfSecrets,
}

const SCENARIOS: [Scenario; 14] = [
    Scenario::Background,
    Scenario::ForegroundHeld,
    Scenario::Orphan,
    Scenario::SolidOwner,
    Scenario::NonexistentOwner,
    Scenario::ForegroundTree,
    Scenario::BackgroundTree,
    Scenario::WrongKind,
    Scenario::ForegroundCycle,
    Scenario::DoubleForeground,
    Scenario::UnknownKind,
    Scenario::OwnerKeptByFinalizer,
    Scenario::OrphanTwiceWithFinalizer,
    Scenario::DefaultPropagationOfSecrets,
];

/// Sets up `scenario` in `ns` and starts its deletion.
async fn run(scenario: Scenario, ns: &TestNamespace) {
    let maps = ns.api::<ConfigMap>();
    let cm = |name: &str, owners| config_map(name, owners);
    match scenario {
        Scenario::Background => {
            let owner = create(&maps, &cm("owner", vec![])).await;
            let other = create(&maps, &cm("other", vec![])).await;
            create(&maps, &cm("d1", vec![owner_ref(&owner, false)])).await;
            create(&maps, &cm("d2", vec![owner_ref(&owner, true)])).await;
            create(
                &maps,
                &cm(
                    "d3",
                    vec![owner_ref(&owner, false), owner_ref(&other, false)],
                ),
            )
            .await;
            delete(&maps, "owner", &DeleteParams::background()).await;
        }
        Scenario::ForegroundHeld => {
            let owner = owner_and_held(&maps, &cm("owner", vec![])).await;
            create(&maps, &cm("blocking", vec![owner_ref(&owner, true)])).await;
            create(&maps, &cm("non-blocking", vec![owner_ref(&owner, false)])).await;
            delete(&maps, "owner", &DeleteParams::foreground()).await;
        }
        Scenario::Orphan => {
            let owner = create(&maps, &cm("owner", vec![])).await;
            create(&maps, &cm("d1", vec![owner_ref(&owner, true)])).await;
            create(&maps, &cm("d2", vec![owner_ref(&owner, false)])).await;
            settle_watches().await;
            delete(&maps, "owner", &DeleteParams::orphan()).await;
        }
        Scenario::SolidOwner => {
            let a = create(&maps, &cm("a", vec![])).await;
            let b = create(&maps, &cm("b", vec![])).await;
            create(
                &maps,
                &cm("d", vec![owner_ref(&a, true), owner_ref(&b, false)]),
            )
            .await;
            delete(&maps, "a", &DeleteParams::foreground()).await;
        }
        Scenario::NonexistentOwner => {
            let ghost = reference(
                "v1",
                "ConfigMap",
                "ghost",
                "5e3c2a0e-0000-4000-8000-000000000001",
                None,
            );
            create(&maps, &cm("d", vec![ghost])).await;
        }
        Scenario::ForegroundTree | Scenario::BackgroundTree => {
            let root = create(&maps, &cm("root", vec![])).await;
            support::tree(&maps, &root, &[("mid", 2), ("leaf", 2)], true).await;
            let policy = if scenario == Scenario::ForegroundTree {
                DeleteParams::foreground()
            } else {
                DeleteParams::background()
            };
            delete(&maps, "root", &policy).await;
        }
        Scenario::WrongKind => {
            let owner = create(&maps, &cm("owner", vec![])).await;
            let wrong = reference("v1", "Secret", "owner", &owner.uid().unwrap(), None);
            create(&maps, &cm("bad", vec![wrong])).await;
            create(&maps, &cm("good", vec![owner_ref(&owner, false)])).await;
        }
        Scenario::ForegroundCycle => {
            let a = create(&maps, &cm("a", vec![])).await;
            let b = create(&maps, &cm("b", vec![owner_ref(&a, true)])).await;
            let patch = json!({ "metadata": { "ownerReferences": [owner_ref(&b, true)] } });
            maps.patch("a", &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap();
            delete(&maps, "a", &DeleteParams::foreground()).await;
        }
        Scenario::DoubleForeground => {
            create(&maps, &with_finalizer(cm("x", vec![]), "x/y")).await;
            delete(&maps, "x", &DeleteParams::foreground()).await;
            settle(&ns.client, &ns.name).await;
            delete(&maps, "x", &DeleteParams::foreground()).await;
        }
        Scenario::UnknownKind => {
            let unknown = reference("unknown.group/v1", "UnknownType", "u", "uid-u", None);
            let dangling = reference(
                "v1",
                "ConfigMap",
                "gone",
                "5e3c2a0e-0000-4000-8000-000000000002",
                None,
            );
            create(&maps, &cm("d", vec![unknown, dangling])).await;
        }
        Scenario::OwnerKeptByFinalizer => {
            let owner = create(&maps, &with_finalizer(cm("owner", vec![]), "x/y")).await;
            create(&maps, &cm("d", vec![owner_ref(&owner, true)])).await;
            delete(&maps, "owner", &DeleteParams::background()).await;
        }
        Scenario::OrphanTwiceWithFinalizer => {
            create(&maps, &with_finalizer(cm("x", vec![]), "x/y")).await;
            delete_with::<ConfigMap>(
                &ns.client,
                &ns.name,
                "x",
                json!({ "orphanDependents": true }),
            )
            .await;
            settle(&ns.client, &ns.name).await;
            delete_with::<ConfigMap>(
                &ns.client,
                &ns.name,
                "x",
                json!({ "orphanDependents": true }),
            )
            .await;
        }
        Scenario::DefaultPropagationOfSecrets => {
            let secrets = ns.api::<Secret>();
            let owner: Secret =
                serde_json::from_value(json!({ "metadata": { "name": "owner" } })).unwrap();
            let owner = create(&secrets, &owner).await;
            create(&maps, &cm("of-secret", vec![owner_ref(&owner, false)])).await;
            secrets
                .delete("owner", &DeleteParams::default())
                .await
                .unwrap();
        }
    }
}

/// Gives the collector's watches a moment (upstream's tests wait for the GC's graph before
/// orphaning; see GCR-01).
async fn settle_watches() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// What a scenario ends with: per object, its finalizers, its owners (kind, name, blocking)
/// and whether it is being deleted.
type Snapshot = BTreeMap<String, (Vec<String>, Vec<(String, String, bool)>, bool)>;

async fn snapshot(client: &kube::Client, namespace: &str) -> Snapshot {
    fn entry<K: kube::Resource>(o: &K) -> (Vec<String>, Vec<(String, String, bool)>, bool) {
        let mut finalizers = o.finalizers().to_vec();
        finalizers.sort();
        let owners = o
            .owner_references()
            .iter()
            .map(|r| {
                (
                    r.kind.clone(),
                    r.name.clone(),
                    r.block_owner_deletion == Some(true),
                )
            })
            .collect();
        (finalizers, owners, o.meta().deletion_timestamp.is_some())
    }
    let mut all = Snapshot::new();
    let maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    for o in maps
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        if o.name_any() != "kube-root-ca.crt" {
            all.insert(format!("ConfigMap/{}", o.name_any()), entry(&o));
        }
    }
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace);
    for o in secrets.list(&ListParams::default()).await.unwrap().items {
        if o.type_.as_deref() != Some("kubernetes.io/service-account-token") {
            all.insert(format!("Secret/{}", o.name_any()), entry(&o));
        }
    }
    all
}

/// Waits until the namespace has not changed for 6 s, and returns how it ended.
async fn settle(client: &kube::Client, namespace: &str) -> Snapshot {
    let mut last = snapshot(client, namespace).await;
    let mut unchanged = 0;
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = snapshot(client, namespace).await;
        if now == last {
            unchanged += 1;
            if unchanged >= 6 {
                return now;
            }
        } else {
            unchanged = 0;
            last = now;
        }
    }
    panic!("namespace {namespace} did not settle: {last:?}");
}

async fn run_all(collector: &str) -> (Vec<TestNamespace>, BTreeMap<Scenario, Snapshot>) {
    let client = support::client().await;
    let mut namespaces = Vec::new();
    for scenario in SCENARIOS {
        namespaces.push(
            TestNamespace::new(
                &client,
                &format!("diff-{collector}-{scenario:?}").to_lowercase(),
            )
            .await,
        );
    }
    futures::future::join_all(SCENARIOS.iter().zip(&namespaces).map(|(s, ns)| run(*s, ns))).await;
    let ends =
        futures::future::join_all(namespaces.iter().map(|ns| settle(&ns.client, &ns.name))).await;
    (namespaces, SCENARIOS.into_iter().zip(ends).collect())
}

/// Waits until a garbage collector collects: kube-controller-manager's starts collecting only
/// once its graph has synced, some time after it starts.
async fn collecting() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "diff-probe").await;
    let maps = ns.api::<ConfigMap>();
    let owner = create(&maps, &config_map("owner", vec![])).await;
    create(
        &maps,
        &config_map("dependent", vec![owner_ref(&owner, false)]),
    )
    .await;
    delete(&maps, "owner", &DeleteParams::background()).await;
    support::eventually("the collector collects", Duration::from_secs(180), || {
        support::gone(&maps, "dependent")
    })
    .await;
}

#[tokio::test]
async fn standalone_syncgc_ends_where_the_cluster_gc_ends() {
    support::kcm(Kcm::Gc);
    collecting().await;
    let (native_namespaces, native) = run_all("native").await;
    let _syncgc = tokio::task::spawn_blocking(|| {
        Syncgc::start(
            &format!("syncgc-differential-{}", std::process::id()),
            &["--mode", "standalone"],
        )
    })
    .await
    .unwrap();
    let (standalone_namespaces, standalone) = run_all("standalone").await;
    let mut differences = Vec::new();
    for scenario in SCENARIOS {
        if native[&scenario] != standalone[&scenario] {
            differences.push(format!(
                "{scenario:?}:\n  kube-controller-manager: {:?}\n  syncgc standalone:       {:?}",
                native[&scenario], standalone[&scenario]
            ));
        }
    }
    // Held objects keep their namespaces from going.
    for ns in native_namespaces.iter().chain(&standalone_namespaces) {
        let maps = ns.api::<ConfigMap>();
        for o in maps
            .list_metadata(&ListParams::default())
            .await
            .unwrap()
            .items
        {
            if o.finalizers().iter().any(|f| f == HOLD || f == "x/y") {
                support::clear_finalizers(&maps, &o.name_any()).await;
            }
        }
    }
    assert!(
        differences.is_empty(),
        "the collectors ended differently:\n{}",
        differences.join("\n")
    );
}
