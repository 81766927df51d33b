//! Synchronous deletion end to end: the real apiserver, kube-controller-manager with its own GC
//! (cooperative mode), and one `syncgc run` process registered as the webhook for these tests'
//! namespaces. Scenario names follow SCENARIOS.md (SG-nn).

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use syncgc::names::{
    ARMED_LABEL, DEADLINE_ANNOTATION, SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER,
    TIMEOUT_ANNOTATION,
};

use support::process::{Following, shared};
use support::{
    HOLD, TestNamespace, being_deleted, clear_finalizers, config_map, create, create_crd, delete,
    delete_crd, eventually, exists, gone, held, opted_in, owner_and_held, owner_ref, tree,
};

const WAIT: Duration = Duration::from_secs(60);

async fn namespace(test: &str) -> TestNamespace {
    support::process::served_namespace(test).await
}

/// The ConfigMaps a test made (kube-controller-manager puts `kube-root-ca.crt` in every
/// namespace).
async fn left(api: &Api<ConfigMap>) -> Vec<String> {
    api.list_metadata(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .filter(|name| name != "kube-root-ca.crt")
        .collect()
}

/// SG-01, SG-04: the owner stays, with its deletionTimestamp, while any of its 50 dependents
/// exists (one held by a foreign finalizer), and goes once they are all gone.
#[tokio::test]
async fn sg01_owner_waits_for_all_its_dependents() {
    let ns = namespace("sg01_owner_waits").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    assert_eq!(owner.finalizers(), [SYNCHRONOUS_FINALIZER]);
    create(&api, &held("held", vec![owner_ref(&owner, true)])).await;
    tree(&api, &owner, &[("d", 49)], false).await;

    delete(&api, "owner", &DeleteParams::default()).await;
    eventually("the 49 free dependents are gone", WAIT, || async {
        (left(&api).await.len() == 2).then_some(())
    })
    .await;
    let waiting = api.get("owner").await.unwrap();
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert!(waiting.annotations().contains_key(DEADLINE_ANNOTATION));
    assert!(
        api.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    assert_eq!(ns.events("SyncGCWaiting").await.len(), 1);

    clear_finalizers(&api, "held").await;
    eventually("the owner is released and gone", WAIT, || {
        gone(&api, "owner")
    })
    .await;
    eventually("SyncGCReleased is recorded", WAIT, || async {
        (!ns.events("SyncGCReleased").await.is_empty()).then_some(())
    })
    .await;
}

/// `kubectl delete` (which waits) returns only when the dependents are gone.
#[tokio::test]
async fn kubectl_delete_returns_when_the_tree_is_gone() {
    let ns = namespace("kubectl_delete_returns").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    tree(&api, &owner, &[("d", 20)], true).await;
    let namespace = ns.name.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .args([
                "delete",
                "configmap",
                "owner",
                "-n",
                &namespace,
                "--timeout=60s",
            ])
            .env("KUBECONFIG", support::kubeconfig_path())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("stays until its 20 dependent(s) are gone"),
        "{stderr}"
    );
    assert_eq!(left(&api).await, Vec::<String>::new());
}

/// SG-09: a tree of depth 3 goes leaf first: no object disappears while one below it exists.
#[tokio::test]
async fn sg09_a_tree_goes_leaf_first() {
    let ns = namespace("sg09_a_tree_goes_leaf_first").await;
    let api = ns.api::<ConfigMap>();
    let root = create(&api, &opted_in("root", vec![], &[])).await;
    let mut below: Vec<(String, Vec<String>)> = Vec::new();
    for c in 0..3 {
        let child = create(
            &api,
            &config_map(&format!("c{c}"), vec![owner_ref(&root, true)]),
        )
        .await;
        let mut grandchildren = Vec::new();
        for g in 0..3 {
            let name = format!("c{c}-g{g}");
            create(&api, &config_map(&name, vec![owner_ref(&child, true)])).await;
            grandchildren.push(name);
        }
        below.push((format!("c{c}"), grandchildren));
    }

    delete(&api, "root", &DeleteParams::background()).await;
    let started = Instant::now();
    loop {
        let root_exists = exists(&api, "root").await;
        let mut children_left = 0;
        for (child, grandchildren) in &below {
            let child_exists = exists(&api, child).await;
            for g in grandchildren {
                if exists(&api, g).await {
                    assert!(child_exists, "{child} went before its dependent {g}");
                }
            }
            if child_exists {
                children_left += 1;
                assert!(root_exists, "root went before its dependent {child}");
            }
        }
        if !root_exists {
            assert_eq!(children_left, 0);
            break;
        }
        assert!(started.elapsed() < WAIT, "the tree is not gone");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(left(&api).await, Vec::<String>::new());
}

/// SG-10, the ADR case: a dependent that also has a live owner survives and loses only its
/// reference to the deleted owner, which is released.
#[tokio::test]
async fn sg10_a_dependent_with_a_live_owner_survives() {
    let ns = namespace("sg10_a_dependent_with_a_live_owner").await;
    let api = ns.api::<ConfigMap>();
    let deleted = create(&api, &opted_in("deleted", vec![], &[])).await;
    let live = create(&api, &config_map("live", vec![])).await;
    create(
        &api,
        &config_map(
            "shared",
            vec![owner_ref(&deleted, true), owner_ref(&live, true)],
        ),
    )
    .await;

    delete(&api, "deleted", &DeleteParams::background()).await;
    eventually("the deleted owner is released", WAIT, || {
        gone(&api, "deleted")
    })
    .await;
    let shared = api.get("shared").await.unwrap();
    assert!(shared.metadata.deletion_timestamp.is_none());
    let owners: Vec<_> = shared
        .owner_references()
        .iter()
        .map(|o| o.name.clone())
        .collect();
    assert_eq!(owners, ["live"]);
}

/// SG-13: with Orphan, the dependents survive without the reference; the owner is released.
#[tokio::test]
async fn sg13_orphan_keeps_the_dependents() {
    let ns = namespace("sg13_orphan_keeps_the_dependents").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    tree(&api, &owner, &[("d", 3)], true).await;
    let orphan = DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
        ..Default::default()
    };
    delete(&api, "owner", &orphan).await;
    eventually("the owner is released", WAIT, || gone(&api, "owner")).await;
    for i in 0..3 {
        let d = api.get(&format!("d{i}")).await.unwrap();
        assert!(d.owner_references().is_empty());
        assert!(d.metadata.deletion_timestamp.is_none());
    }
}

/// SG-07: two armed objects that own each other are both released by their timeout, which a
/// Warning Event says.
#[tokio::test]
async fn sg07_an_ownership_cycle_is_broken_by_the_timeout() {
    let ns = namespace("sg07_an_ownership_cycle").await;
    let api = ns.api::<ConfigMap>();
    let mut a = opted_in("a", vec![], &[]);
    a.annotations_mut()
        .insert(TIMEOUT_ANNOTATION.into(), "2s".into());
    let a = create(&api, &a).await;
    let mut b = opted_in("b", vec![owner_ref(&a, true)], &[]);
    b.annotations_mut()
        .insert(TIMEOUT_ANNOTATION.into(), "2s".into());
    let b = create(&api, &b).await;
    let patch = json!({ "metadata": { "ownerReferences": [owner_ref(&b, true)] } });
    api.patch("a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    let started = Instant::now();
    delete(&api, "a", &DeleteParams::background()).await;
    eventually("both are gone", WAIT, || async {
        (gone(&api, "a").await.is_some() && gone(&api, "b").await.is_some()).then_some(())
    })
    .await;
    // The deadline counts from the deletionTimestamp, which has whole seconds.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "released before the timeout"
    );
    eventually("SyncGCTimedOut is recorded", WAIT, || async {
        (!ns.events("SyncGCTimedOut").await.is_empty()).then_some(())
    })
    .await;
}

/// SG-11: a dependent created while its owner waits is collected too, and the owner waits
/// for it.
#[tokio::test]
async fn sg11_a_dependent_created_while_the_owner_waits_is_collected() {
    let ns = namespace("sg11_a_dependent_created_late").await;
    let api = ns.api::<ConfigMap>();
    let owner = owner_and_held(&api, &opted_in("owner", vec![], &[])).await;
    delete(&api, "owner", &DeleteParams::background()).await;
    eventually("the held dependent is being deleted", WAIT, || {
        being_deleted(&api, "held")
    })
    .await;

    create(&api, &held("late", vec![owner_ref(&owner, true)])).await;
    eventually("the late dependent is being deleted", WAIT, || {
        being_deleted(&api, "late")
    })
    .await;
    clear_finalizers(&api, "held").await;
    eventually("held is gone", WAIT, || gone(&api, "held")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        exists(&api, "owner").await,
        "the owner went while late exists"
    );
    clear_finalizers(&api, "late").await;
    eventually("the owner is gone", WAIT, || gone(&api, "owner")).await;
}

/// SG-02: an owner that did not opt in is left to the cluster's GC.
#[tokio::test]
async fn sg02_an_owner_that_did_not_opt_in_is_untouched() {
    let ns = namespace("sg02_an_owner_that_did_not_opt_in").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &config_map("owner", vec![])).await;
    assert!(owner.finalizers().is_empty());
    create(
        &api,
        &config_map("dependent", vec![owner_ref(&owner, true)]),
    )
    .await;
    delete(&api, "owner", &DeleteParams::background()).await;
    assert!(
        gone(&api, "owner").await.is_some(),
        "the owner went at once"
    );
    eventually("the cluster's GC deleted the dependent", WAIT, || {
        gone(&api, "dependent")
    })
    .await;
    assert!(ns.events("SyncGCWaiting").await.is_empty());
}

/// SG-17: an opted-in object created while the webhook did not see it is armed by the
/// controller (backfill).
#[tokio::test]
async fn sg17_an_unarmed_opted_in_object_is_backfilled() {
    tokio::task::spawn_blocking(shared).await.unwrap();
    let client = support::client().await;
    // No webhook label: the webhook does not see this namespace, the controller does.
    let ns = TestNamespace::new(&client, "sg17_backfill").await;
    let api = ns.api::<ConfigMap>();
    let created = create(&api, &opted_in("late-armed", vec![], &[])).await;
    assert!(created.finalizers().is_empty());
    eventually("the controller arms and labels it", WAIT, || async {
        let cm = api.get("late-armed").await.unwrap();
        let armed = cm.finalizers().iter().any(|f| f == SYNCHRONOUS_FINALIZER);
        let labelled = cm.labels().get(ARMED_LABEL).is_some_and(|v| v == "true");
        (armed && labelled).then_some(())
    })
    .await;
    let opt_out = json!({ "metadata": { "annotations": { SYNCHRONOUS_ANNOTATION: null }, "finalizers": null } });
    api.patch(
        "late-armed",
        &PatchParams::default(),
        &Patch::Merge(&opt_out),
    )
    .await
    .unwrap();
}

/// A custom resource kind created while syncgc runs is discovered and watched, and its
/// objects count as dependents: a tree whose leaves are custom resources goes leaf first.
#[tokio::test]
async fn sg09_custom_resource_leaves_of_a_new_kind_go_first() {
    use kube::api::{DynamicObject, PostParams};

    let ns = namespace("sg09_custom_resource_leaves").await;
    let client = ns.client.clone();
    let resource = create_crd(&ns, "Leaf", "leaves").await;

    // The probe: an opted-in Leaf where the webhook does not look is armed by the controller
    // once it watches the new kind.
    let unhooked = TestNamespace::new(&client, "sg09_custom_resource_probe").await;
    let probes = Api::<DynamicObject>::namespaced_with(client.clone(), &unhooked.name, &resource);
    let mut probe = DynamicObject::new("probe", &resource);
    probe.metadata.annotations =
        Some([(SYNCHRONOUS_ANNOTATION.to_owned(), "true".to_owned())].into());
    eventually("the apiserver serves the new kind", WAIT, || async {
        probes.create(&PostParams::default(), &probe).await.ok()
    })
    .await;
    eventually("syncgc watches the new kind", WAIT, || async {
        let probe = probes.get("probe").await.unwrap();
        probe
            .finalizers()
            .iter()
            .any(|f| f == SYNCHRONOUS_FINALIZER)
            .then_some(())
    })
    .await;
    let opt_out = json!({ "metadata": { "annotations": { SYNCHRONOUS_ANNOTATION: null }, "finalizers": null } });
    probes
        .patch("probe", &PatchParams::default(), &Patch::Merge(&opt_out))
        .await
        .unwrap();

    let leaves = Api::<DynamicObject>::namespaced_with(client.clone(), &ns.name, &resource);
    let api = ns.api::<ConfigMap>();
    let root = create(&api, &opted_in("root", vec![], &[])).await;
    let child = create(&api, &config_map("child", vec![owner_ref(&root, true)])).await;
    for i in 0..3 {
        let mut leaf = DynamicObject::new(&format!("leaf-{i}"), &resource);
        leaf.metadata.owner_references = Some(vec![owner_ref(&child, true)]);
        if i == 0 {
            leaf.metadata.finalizers = Some(vec![HOLD.to_owned()]);
        }
        leaves.create(&PostParams::default(), &leaf).await.unwrap();
    }

    delete(&api, "root", &DeleteParams::background()).await;
    eventually("the free leaves are gone", WAIT, || async {
        let left = leaves
            .list_metadata(&ListParams::default())
            .await
            .unwrap()
            .items
            .len();
        (left == 1).then_some(())
    })
    .await;
    assert!(
        exists(&api, "child").await,
        "the child went before its held leaf"
    );
    assert!(exists(&api, "root").await, "the root went before its child");
    clear_finalizers(&leaves, "leaf-0").await;
    eventually("the root is gone", WAIT, || gone(&api, "root")).await;
    assert!(!exists(&api, "child").await);
    assert!(
        leaves
            .list_metadata(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    delete_crd(&client, &resource).await;
}

/// `/debug/graph` shows an owner with its dependents, transitively, as JSON and as DOT, to a
/// caller the apiserver authenticates by its token and authorizes for the path; to no other.
#[tokio::test]
async fn debug_graph_shows_an_owner_and_what_hangs_off_it() {
    let ns = namespace("debug_graph").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    let child = create(&api, &config_map("child", vec![owner_ref(&owner, true)])).await;
    create(
        &api,
        &config_map("grandchild", vec![owner_ref(&child, false)]),
    )
    .await;
    let syncgc = shared();
    let uid = owner.uid().unwrap();
    let view: serde_json::Value = eventually("the graph has all three", WAIT, || async {
        let (status, body) = syncgc.get(&format!("/debug/graph?uid={uid}"))?;
        let view: serde_json::Value = serde_json::from_str(&body).ok()?;
        (status == 200 && view["nodes"].as_array()?.len() == 3).then_some(view)
    })
    .await;
    assert_eq!(view["nodes"][0]["name"], "owner");
    assert_eq!(view["nodes"][0]["kind"], "ConfigMap");
    assert_eq!(
        view["nodes"][0]["flags"],
        json!(["armed", "opted-in", "labelled"])
    );
    assert_eq!(view["edges"].as_array().unwrap().len(), 2);
    let (status, dot) = syncgc
        .get(&format!("/debug/graph?uid={uid}&format=dot"))
        .unwrap();
    assert_eq!(status, 200);
    assert!(dot.starts_with("digraph ownership {"), "{dot}");
    assert_eq!(dot.matches(" -> ").count(), 2, "{dot}");
    let (status, _) = syncgc.get("/debug/graph?uid=no-such-uid").unwrap();
    assert_eq!(status, 404);
    let (status, _) = syncgc.get("/debug/graph").unwrap();
    assert_eq!(status, 400);

    let path = format!("/debug/graph?uid={uid}");
    let (status, body) = syncgc.get_as(None, &path).unwrap();
    assert_eq!(status, 401, "no token: {body}");
    let (status, body) = syncgc.get_as(Some("not-a-token"), &path).unwrap();
    assert_eq!(status, 401, "a token the apiserver does not know: {body}");
    // A ServiceAccount no RBAC grants the path.
    let token =
        tokio::task::spawn_blocking(|| support::service_account_token("syncgc-system", "default"))
            .await
            .unwrap();
    let (status, body) = syncgc.get_as(Some(&token), &path).unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("may not get /debug/graph"), "{body}");
}

/// `syncgc explain`, also as the kubectl plugin `kubectl syncgc`: while a held dependent keeps
/// the owner, it says so and exits 1; once the owner is gone, it is not found (exit 2).
#[tokio::test]
async fn explain_says_what_blocks_a_deletion() {
    let ns = namespace("explain").await;
    let api = ns.api::<ConfigMap>();
    owner_and_held(&api, &opted_in("owner", vec![], &[])).await;
    delete(&api, "owner", &DeleteParams::default()).await;
    eventually("the owner waits", WAIT, || being_deleted(&api, "owner")).await;

    let plugins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_syncgc"),
        plugins.path().join("kubectl-syncgc"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        plugins.path().display(),
        std::env::var("PATH").unwrap()
    );
    let explain = |name: &str| {
        let out = std::process::Command::new("kubectl")
            .args(["syncgc", "explain", name, "-n", &ns.name])
            .env("PATH", &path)
            .env("KUBECONFIG", support::kubeconfig_path())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = explain("configmap/owner");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("{SYNCHRONOUS_FINALIZER}: removed by syncgc")),
        "{text}"
    );
    assert!(
        text.contains(&format!("ConfigMap {}/held", ns.name)),
        "{text}"
    );
    assert!(
        text.contains(
            "BLOCKS: the owner waits for every dependent; its finalizers: test.syncgc.io/hold"
        ),
        "{text}"
    );

    clear_finalizers(&api, "held").await;
    eventually("the owner is gone", WAIT, || gone(&api, "owner")).await;
    let (code, text) = explain("configmaps/owner");
    assert_eq!(code, Some(2), "gone, it is not found: {text}");
}

/// A timeout that is not a duration: the owner waits by the default timeout, and a Warning
/// Event says so when its deletion starts.
#[tokio::test]
async fn a_timeout_that_is_no_duration_is_recorded_and_the_default_applies() {
    let ns = namespace("a_timeout_that_is_no_duration").await;
    let api = ns.api::<ConfigMap>();
    owner_and_held(
        &api,
        &opted_in("owner", vec![], &[(TIMEOUT_ANNOTATION, "ninety")]),
    )
    .await;
    delete(&api, "owner", &DeleteParams::background()).await;
    let event = eventually("SyncGCInvalidAnnotation is recorded", WAIT, || async {
        ns.events("SyncGCInvalidAnnotation").await.pop()
    })
    .await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("syncgc.io/timeout: \"ninety\" is not a duration")
            && note.contains("the default timeout applies"),
        "{note}"
    );
    assert!(exists(&api, "owner").await, "it waits for its dependent");
    clear_finalizers(&api, "held").await;
    eventually("the owner is released", WAIT, || gone(&api, "owner")).await;
}

/// `syncgc explain` by short name, as JSON, and following a deletion with `--watch`: a line
/// per change until the owner is gone, exit 0; exit 3 for an owner released by its timeout.
#[tokio::test]
async fn explain_follows_a_deletion_until_the_owner_is_gone() {
    let ns = namespace("explain_follows").await;
    let api = ns.api::<ConfigMap>();
    owner_and_held(&api, &opted_in("owner", vec![], &[])).await;
    let late = create(
        &api,
        &opted_in("late", vec![], &[(TIMEOUT_ANNOTATION, "3s")]),
    )
    .await;
    create(&api, &held("kept", vec![owner_ref(&late, true)])).await;
    delete(&api, "owner", &DeleteParams::default()).await;
    delete(&api, "late", &DeleteParams::default()).await;
    eventually("the owner waits", WAIT, || being_deleted(&api, "held")).await;

    let syncgc = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_syncgc"))
            .args(["explain", "-n", &ns.name, "--kubeconfig"])
            .arg(support::kubeconfig_path())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let report = syncgc(&["cm/owner", "-o", "json"])
        .wait_with_output()
        .unwrap();
    assert_eq!(report.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["blocked"], true, "{report}");
    assert_eq!(report["blocking"], 1, "{report}");
    assert_eq!(
        report["dependents"][0]["object"],
        format!("ConfigMap {}/held", ns.name)
    );
    assert_eq!(
        report["finalizers"][0]["name"], SYNCHRONOUS_FINALIZER,
        "{report}"
    );

    let mut watch = Following::new(syncgc(&["cm/owner", "--watch"]));
    let mut timed_out = Following::new(syncgc(&["configmap/late", "-w"]));
    watch.started().await;
    timed_out.started().await;
    clear_finalizers(&api, "held").await;
    let (status, lines) = watch.ended(WAIT).await;
    assert_eq!(status.code(), Some(0), "{lines}");
    let lines: Vec<&str> = lines.lines().collect();
    assert!(
        lines[0].contains("being deleted; 1 dependent(s) left, 1 blocking"),
        "{lines:?}"
    );
    assert!(lines.last().unwrap().ends_with("owner: gone"), "{lines:?}");
    let (status, lines) = timed_out.ended(WAIT).await;
    assert_eq!(status.code(), Some(3), "{lines}");
    assert!(lines.contains("released by its timeout"), "{lines}");
}
