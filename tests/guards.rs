//! The guards on DELETE end to end: the real apiserver calls syncgc's webhook for every DELETE,
//! kube-controller-manager's garbage collector and namespace controller send theirs, and one
//! `syncgc run` process judges them on its graph. Each guard has its control case: the same
//! objects without the annotation go.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use syncgc::names::{
    GUARDED_LABEL, HANDLES_FINALIZERS_ANNOTATION, MAX_CASCADE_ANNOTATION, PROTECTED_ANNOTATION,
};

use support::guards::{self, annotate, annotated, dry_run, refusal, refused_dry_run};
use support::process::{Syncgc, TEST_TIMEOUTS, WEBHOOK_LABEL};
use support::{TestNamespace, config_map, create, eventually, exists, gone, tree};

const WAIT: Duration = Duration::from_secs(60);

async fn namespace(test: &str) -> TestNamespace {
    support::process::served_namespace(test).await
}

#[tokio::test]
async fn a_protected_object_is_deleted_neither_directly_nor_by_a_cascade() {
    let ns = namespace("protected").await;
    guards::a_protected_object_is_deleted_neither_directly_nor_by_a_cascade(&ns).await;
}

#[tokio::test]
async fn a_collectors_delete_of_a_protected_object_drops_the_reference_instead() {
    let ns = namespace("protected_collected").await;
    guards::a_collectors_delete_of_a_protected_object_drops_the_reference_instead(&ns).await;
}

#[tokio::test]
async fn a_cascade_over_its_limit_is_refused_until_the_limit_is_raised() {
    let ns = namespace("cascade_limit").await;
    let api = ns.api::<ConfigMap>();
    let owner = annotated(config_map("owner", vec![]), MAX_CASCADE_ANNOTATION, "3");
    let owner = create(&api, &owner).await;
    tree(&api, &owner, &[("d", 5)], false).await;

    let message = refused_dry_run(&api, "owner").await;
    for part in [
        "would delete 5 objects (5 ConfigMap)",
        "cascade limit of 3 (syncgc.io/max-cascade)",
        &format!("syncgc plan configmap/owner -n {}", ns.name),
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    let message = refusal(&api, "owner", &DeleteParams::background()).await;
    assert!(message.is_some_and(|m| m.contains("more than its cascade limit")));
    assert!(exists(&api, "owner").await);

    // A value that is not a limit never blocks a DELETE.
    annotate(&api, "owner", MAX_CASCADE_ANNOTATION, Some("-1")).await;
    assert!(refusal(&api, "owner", &dry_run()).await.is_none());
    // Raised, it lets the DELETE through, and the cascade runs.
    annotate(&api, "owner", MAX_CASCADE_ANNOTATION, Some("5")).await;
    assert!(
        refusal(&api, "owner", &DeleteParams::background())
            .await
            .is_none()
    );
    eventually("the cascade ran", WAIT, || async {
        let left = api.list_metadata(&ListParams::default()).await.unwrap();
        (!left.items.iter().any(|o| o.name_any().starts_with('d'))).then_some(())
    })
    .await;
}

/// The finalizer of the objects that the operator handles.
const HANDLED: &str = "example.com/cleanup";

/// The image of `examples/finalizer-operator.rs` (built by `cargo test`), imported into the
/// node once per test binary.
fn operator_image() -> &'static str {
    static IMAGE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    IMAGE.get_or_init(|| {
        let syncgc = std::path::Path::new(env!("CARGO_BIN_EXE_syncgc"));
        let operator = syncgc.with_file_name("examples").join("finalizer-operator");
        assert!(
            operator.exists(),
            "cargo test builds {}",
            operator.display()
        );
        support::chart::hack(
            "image.sh",
            &[],
            &[
                ("SYNCGC_BINARY", operator.to_str().unwrap()),
                ("SYNCGC_IMAGE_REF", "syncgc.local/finalizer-operator:test"),
            ],
        )
    })
}

/// A real operator in `ns`: a ServiceAccount, a Role that may read and finalize ConfigMaps, its
/// RoleBinding, and a Deployment of one Pod running [`operator_image`] as that account, which
/// removes [`HANDLED`] itself; annotated as its handler when `handles`.
async fn operator(ns: &TestNamespace, handles: bool) {
    let annotations = if handles {
        json!({ HANDLES_FINALIZERS_ANNOTATION: HANDLED })
    } else {
        json!({})
    };
    let apply = |object: serde_json::Value| {
        let ns = ns.name.clone();
        async move {
            support::kubectl(&["-n", &ns, "apply", "-f", "-"], Some(&object.to_string()));
        }
    };
    apply(
        json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": "operator" } }),
    )
    .await;
    apply(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": { "name": "operator" },
        "rules": [{ "apiGroups": [""], "resources": ["configmaps"],
                    "verbs": ["get", "list", "watch", "patch", "update"] }],
    }))
    .await;
    apply(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": { "name": "operator" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator" },
        "subjects": [{ "kind": "ServiceAccount", "name": "operator", "namespace": ns.name }],
    }))
    .await;
    let mut spec = support::workload::slow_pod_spec("Always");
    spec["serviceAccountName"] = json!("operator");
    spec["terminationGracePeriodSeconds"] = json!(1);
    spec["containers"] = json!([{
        "name": "operator",
        "image": operator_image(),
        "imagePullPolicy": "Never",
        "env": [{ "name": "FINALIZER", "value": HANDLED }],
    }]);
    apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "operator", "annotations": annotations },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": "operator" } },
            "template": { "metadata": { "labels": { "app": "operator" } }, "spec": spec },
        },
    }))
    .await;
}

/// The operator's Pods, and whether each is being deleted.
async fn operator_pods(ns: &TestNamespace) -> Vec<(String, bool)> {
    let pods = ns.api::<Pod>();
    let params = ListParams::default().labels("app=operator");
    pods.list_metadata(&params)
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| (p.name_any(), p.metadata.deletion_timestamp.is_some()))
        .collect()
}

/// A namespace holding a real operator (its own account and Role, removing its finalizer
/// itself) and 20 ConfigMaps carrying that finalizer is deleted; returns whether the
/// namespace went with nobody but the operator removing a finalizer. Without the annotation,
/// the namespace controller deletes the operator's account, token and binding in its first
/// seconds, and the operator can no longer act.
async fn delete_namespace_around_an_operator(test: &str, handles: bool) -> bool {
    let ns = namespace(test).await;
    support::gc::service_account_ready(&ns).await;
    operator(&ns, handles).await;
    let api = ns.api::<ConfigMap>();
    // The operator acts: a probe object carrying its finalizer goes once deleted.
    let mut probe = config_map("probe", vec![]);
    probe.metadata.finalizers = Some(vec![HANDLED.to_owned()]);
    create(&api, &probe).await;
    api.delete("probe", &DeleteParams::background())
        .await
        .unwrap();
    eventually(
        "the operator finalizes the probe",
        Duration::from_secs(120),
        || gone(&api, "probe"),
    )
    .await;
    for n in 0..20 {
        let mut cm = config_map(&format!("resource-{n}"), vec![]);
        cm.metadata.finalizers = Some(vec![HANDLED.to_owned()]);
        create(&api, &cm).await;
    }
    // The plan of the namespace says whether anything would remove the finalizer.
    let plan = support::plan::plan(&ns, &format!("namespace/{}", ns.name), &[]);
    let unhandled = plan["unhandledFinalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if handles {
        assert!(unhandled.is_empty(), "{plan:#}");
        // What it needs is read (by the syncgc serving the namespace) and selected with it:
        // its account, token, RoleBinding and Role at least.
        let syncgc = tokio::task::spawn_blocking(support::process::shared)
            .await
            .unwrap();
        eventually("syncgc has read what the operator needs", WAIT, || async {
            (syncgc.metric("syncgc_guard_needed_objects") >= 4.0).then_some(())
        })
        .await;
        let accounts = ns.api::<k8s_openapi::api::core::v1::ServiceAccount>();
        eventually("the operator's account is selected", WAIT, || async {
            labelled(&accounts.get("operator").await.ok()?).then_some(())
        })
        .await;
    } else {
        assert_eq!(unhandled.len(), 1, "{plan:#}");
        assert_eq!(unhandled[0]["finalizer"], HANDLED);
        assert_eq!(unhandled[0]["objects"].as_array().unwrap().len(), 20);
    }
    // The graph has seen the Pod, its owners, and the resources.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let namespaces = Api::<Namespace>::all(ns.client.clone());
    namespaces
        .delete(&ns.name, &DeleteParams::background())
        .await
        .unwrap();
    let deleted = std::time::Instant::now();
    let went = eventually_or_not(Duration::from_secs(90), || gone(&namespaces, &ns.name)).await;
    if went {
        eprintln!(
            "{test}: the namespace went {:?} after its DELETE",
            deleted.elapsed()
        );
    }
    if !went {
        let left = api.list_metadata(&ListParams::default()).await.unwrap();
        let stranded = left
            .items
            .iter()
            .filter(|o| o.finalizers().iter().any(|f| f == HANDLED))
            .count();
        eprintln!(
            "{test}: the namespace stays with {stranded} object(s) carrying {HANDLED}; pods {:?}",
            operator_pods(&ns).await
        );
        // Cleaned up for the next tests: what the stranded operator could not do.
        let clear = json!({ "metadata": { "finalizers": null } });
        for object in &left.items {
            let _ = api
                .patch_metadata(
                    &object.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&clear),
                )
                .await;
        }
        eventually("the namespace is gone", Duration::from_secs(180), || {
            gone(&namespaces, &ns.name)
        })
        .await;
    }
    went
}

/// Whether `check` is `Some` within `within`.
async fn eventually_or_not<F, Fut>(within: Duration, check: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let started = std::time::Instant::now();
    while started.elapsed() < within {
        if check().await.is_some() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// A real operator's teardown completes: deleting its namespace, syncgc holds its Pods and
/// what they need (its account, token, RoleBinding, Role) while the objects carrying its
/// finalizer are being deleted, the operator removes the finalizers with its own credentials
/// (the test never touches one), and the namespace goes. The control: without the annotation
/// the operator loses its credentials and the namespace stays.
#[tokio::test]
async fn a_real_operators_teardown_completes() {
    assert!(
        delete_namespace_around_an_operator("handler", true).await,
        "the namespace of a handler that needs its account stays"
    );
    assert!(
        !delete_namespace_around_an_operator("no_handler", false).await,
        "without the annotation, the operator loses what it needs and its objects strand"
    );
}

/// An eviction deletes its Pod with no DELETE review of its own: syncgc judges it as that
/// DELETE. A protected Pod is not evicted; the same Pod unprotected is (the control).
#[tokio::test]
async fn an_eviction_is_judged_as_its_pods_delete() {
    let ns = namespace("eviction").await;
    let pods = ns.api::<Pod>();
    let evict = |name: &str| {
        let body = json!({
            "apiVersion": "policy/v1beta1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns.name},
        });
        let pods = pods.clone();
        let name = name.to_owned();
        async move {
            pods.create_subresource::<serde_json::Value, serde_json::Value>(
                "eviction",
                &name,
                &kube::api::PostParams::default(),
                &body,
            )
            .await
        }
    };
    support::gc::service_account_ready(&ns).await;
    let mut precious = support::gc::pod("precious", vec![], &[]);
    precious.annotations_mut().insert(
        syncgc::names::PROTECTED_ANNOTATION.to_owned(),
        "true".to_owned(),
    );
    create(&pods, &precious).await;
    create(&pods, &support::gc::pod("plain", vec![], &[])).await;

    let refused = evict("precious")
        .await
        .expect_err("a protected Pod is not evicted");
    assert!(refused.to_string().contains("is protected"), "{refused}");
    assert!(exists(&pods, "precious").await);
    evict("plain").await.expect("an unprotected Pod is evicted");
    eventually("the evicted Pod goes", WAIT, || gone(&pods, "plain")).await;

    annotate(&pods, "precious", syncgc::names::PROTECTED_ANNOTATION, None).await;
    evict("precious").await.expect("evicted once unprotected");
}

/// A syncgc process of this test's own (its metrics count only this test's reviews), and a
/// namespace it serves.
async fn own_syncgc(test: &str, args: &[&str]) -> (Syncgc, TestNamespace) {
    let name = format!("syncgc-{}-{}", test.replace('_', "-"), std::process::id());
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let syncgc = tokio::task::spawn_blocking({
        let name = name.clone();
        move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let syncgc = Syncgc::start(&name, &args);
            syncgc.wait_ready(WAIT);
            syncgc
        }
    })
    .await
    .unwrap();
    let client = support::client().await;
    let ns = TestNamespace::with_labels(&client, test, &[(WEBHOOK_LABEL, &syncgc.name)]).await;
    (syncgc, ns)
}

/// The reviews of DELETEs syncgc has answered.
fn delete_reviews(syncgc: &Syncgc) -> f64 {
    syncgc.metric_where("syncgc_webhook_requests_total", "operation=\"DELETE\"")
}

fn labelled<K: kube::Resource>(object: &K) -> bool {
    object
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(GUARDED_LABEL))
        .map(String::as_str)
        == Some("true")
}

/// Only the DELETEs a guard may concern reach syncgc. A protected object is labelled
/// `syncgc.io/guarded` in the write that protects it, its owner and its namespace within a
/// round of the leader; with protected and limited objects present, the DELETEs of 20
/// unannotated ConfigMaps send syncgc no review, while the protected object's own DELETE
/// does (and is refused). Unprotected, the label goes again from all three.
#[tokio::test]
async fn only_the_deletes_a_guard_may_concern_reach_syncgc() {
    let (syncgc, ns) = own_syncgc("selection", &TEST_TIMEOUTS).await;
    let api = ns.api::<ConfigMap>();
    let namespaces = Api::<Namespace>::all(ns.client.clone());
    let owner = create(&api, &config_map("owner", vec![])).await;
    let precious = annotated(
        config_map("precious", vec![support::owner_ref(&owner, false)]),
        PROTECTED_ANNOTATION,
        "true",
    );
    assert!(
        labelled(&create(&api, &precious).await),
        "labelled as it is written"
    );
    let limited = create(
        &api,
        &annotated(config_map("limited", vec![]), MAX_CASCADE_ANNOTATION, "10"),
    )
    .await;
    assert!(labelled(&limited));
    let started = std::time::Instant::now();
    eventually("the owner and the namespace are labelled", WAIT, || async {
        let owner = api.get("owner").await.ok()?;
        let namespace = namespaces.get(&ns.name).await.ok()?;
        (labelled(&owner) && labelled(&namespace)).then_some(())
    })
    .await;
    eprintln!(
        "owner and namespace labelled within {:?}",
        started.elapsed()
    );
    for n in 0..20 {
        create(&api, &config_map(&format!("plain-{n}"), vec![])).await;
    }
    let before = delete_reviews(&syncgc);
    for n in 0..20 {
        api.delete(&format!("plain-{n}"), &DeleteParams::background())
            .await
            .unwrap();
    }
    assert_eq!(
        delete_reviews(&syncgc),
        before,
        "no unannotated object's DELETE reached syncgc"
    );
    // The control: a guarded object's DELETE does reach it, and is refused.
    let refused = refusal(&api, "precious", &DeleteParams::background()).await;
    assert!(refused.is_some_and(|m| m.contains("is protected")));
    assert_eq!(delete_reviews(&syncgc), before + 1.0);
    assert!(syncgc.metric("syncgc_guard_selected_objects") >= 4.0);

    annotate(&api, "precious", PROTECTED_ANNOTATION, None).await;
    eventually("the label goes where no guard applies", WAIT, || async {
        let owner = api.get("owner").await.ok()?;
        let precious = api.get("precious").await.ok()?;
        let namespace = namespaces.get(&ns.name).await.ok()?;
        (!labelled(&owner) && !labelled(&precious) && !labelled(&namespace)).then_some(())
    })
    .await;
    assert!(
        labelled(&api.get("limited").await.unwrap()),
        "still limited"
    );
}

/// A protected object in a namespace whose DELETE went through while syncgc could not answer
/// holds it for a bounded time only: its DELETE is refused, its unprotected siblings of its
/// kind (a collection's DELETE stops at the first refusal) are deleted by syncgc meanwhile, a
/// Warning Event on the namespace says until when, and then the namespace goes. (Its control:
/// without the siblings' DELETEs, the `z-` ones, after the protected object in the collection's
/// order, would stay until the hold ends; the test asserts they went well before.)
#[tokio::test]
async fn a_protected_object_holds_a_namespace_being_deleted_for_a_bounded_time() {
    let (syncgc, ns) = own_syncgc(
        "protected_ns",
        &["--timeout-base", "20s", "--timeout-per-dependent", "1s"],
    )
    .await;
    let api = ns.api::<ConfigMap>();
    let namespaces = Api::<Namespace>::all(ns.client.clone());
    create(
        &api,
        &annotated(
            config_map("m-precious", vec![]),
            PROTECTED_ANNOTATION,
            "true",
        ),
    )
    .await;
    for n in 0..5 {
        create(&api, &config_map(&format!("a-{n}"), vec![])).await;
        create(&api, &config_map(&format!("z-{n}"), vec![])).await;
    }
    eventually("the namespace is labelled", WAIT, || async {
        labelled(&namespaces.get(&ns.name).await.ok()?).then_some(())
    })
    .await;
    // The namespace's DELETE while syncgc cannot answer: the webhook fails open.
    syncgc.pause();
    let deleted = namespaces
        .delete(&ns.name, &DeleteParams::background())
        .await;
    syncgc.resume();
    deleted.expect("the namespace's DELETE goes through while syncgc is away");
    let started = std::time::Instant::now();

    eventually("the protected object's siblings are gone", WAIT, || async {
        for n in 0..5 {
            gone(&api, &format!("z-{n}")).await?;
            gone(&api, &format!("a-{n}")).await?;
        }
        Some(())
    })
    .await;
    let precious = api
        .get("m-precious")
        .await
        .expect("the protected object stays");
    assert!(precious.metadata.deletion_timestamp.is_none());
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the siblings went before the hold ended"
    );
    // A cluster-scoped object's Events are in kube-system.
    let events =
        Api::<k8s_openapi::api::core::v1::Event>::namespaced(ns.client.clone(), "kube-system");
    eventually("a Warning Event on the namespace says so", WAIT, || async {
        let found = events.list(&ListParams::default()).await.ok()?;
        found
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("SyncGCProtectedHoldsNamespace")
                    && e.involved_object.name.as_deref() == Some(ns.name.as_str())
            })
            .map(drop)
    })
    .await;
    eventually(
        "the namespace goes once the hold has ended",
        Duration::from_secs(120),
        || gone(&namespaces, &ns.name),
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(15),
        "not before the hold ended"
    );
}
