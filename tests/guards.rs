//! The guards on DELETE end to end: the real apiserver calls syncgc's webhook for every DELETE,
//! kube-controller-manager's garbage collector and namespace controller send theirs, and one
//! `syncgc run` process judges them on its graph. Each guard has its control case: the same
//! objects without the annotation go.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use syncgc::names::{MAX_CASCADE_ANNOTATION, PROTECTED_ANNOTATION};

use support::guards::{self, annotate, annotated, dry_run, labelled, refusal};
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

    // Refused as soon as syncgc's graph holds four of the children; the message counts all
    // five once the graph has seen them.
    let message = eventually("the refusal counts all five children", WAIT, || async {
        refusal(&api, "owner", &dry_run())
            .await
            .filter(|m| m.contains("would delete 5 objects"))
    })
    .await;
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

/// Objects protected by the thousand at once, then released at once: each is labelled in the
/// write that protects it, their owner is selected (its DELETE refused), and once they are
/// released the owner's DELETE goes through and its cascade runs, none of them kept: nothing
/// is refused for ever.
#[tokio::test]
async fn objects_protected_and_released_by_the_thousand_are_judged_then_let_go() {
    use futures::StreamExt as _;
    const MANY: usize = 2000;
    let ns = namespace("many_protected").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &config_map("owner", vec![])).await;
    let names: Vec<String> = (0..MANY).map(|i| format!("c-{i}")).collect();
    let at_once = |value: Option<&'static str>| {
        let api = api.clone();
        futures::stream::iter(names.clone()).for_each_concurrent(32, move |name| {
            let api = api.clone();
            async move { annotate(&api, &name, PROTECTED_ANNOTATION, value).await }
        })
    };
    futures::stream::iter(names.clone())
        .for_each_concurrent(32, |name| {
            let child = config_map(&name, vec![support::owner_ref(&owner, false)]);
            let api = api.clone();
            async move {
                create(&api, &child).await;
            }
        })
        .await;

    at_once(Some("true")).await;
    let listed = api.list_metadata(&ListParams::default()).await.unwrap();
    let unlabelled = listed
        .items
        .iter()
        .filter(|o| o.name_any().starts_with("c-") && !labelled(*o))
        .count();
    assert_eq!(unlabelled, 0, "labelled in the write that protects them");
    let message = eventually("the owner's DELETE is refused", WAIT, || async {
        refusal(&api, "owner", &dry_run()).await
    })
    .await;
    assert!(message.contains("which is protected"), "{message}");

    at_once(None).await;
    eventually("the owner's DELETE goes through", WAIT, || async {
        refusal(&api, "owner", &DeleteParams::background())
            .await
            .is_none()
            .then_some(())
    })
    .await;
    // The garbage collector (at its default rate) takes minutes over all of them: once it has
    // deleted a hundred, none of the rest was kept as protected (its references dropped).
    let left = eventually("the cascade runs", Duration::from_secs(120), || async {
        let left = api.list_metadata(&ListParams::default()).await.unwrap();
        let children: Vec<_> = left
            .items
            .into_iter()
            .filter(|o| o.name_any().starts_with("c-"))
            .collect();
        (children.len() <= MANY - 100).then_some(children)
    })
    .await;
    let kept: Vec<String> = left
        .iter()
        .filter(|o| {
            o.metadata
                .owner_references
                .as_ref()
                .is_none_or(Vec::is_empty)
        })
        .map(ResourceExt::name_any)
        .collect();
    assert!(kept.is_empty(), "kept as protected after release: {kept:?}");
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
    let args = ["--timeout-base", "20s", "--timeout-per-dependent", "1s"];
    let (mut syncgc, ns) = own_syncgc("protected_ns", &args).await;
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
    // syncgc restarting while the hold is on: the hold runs from the namespace's
    // deletionTimestamp, on the apiserver's clock, so the new process keeps the same bound.
    let bound = |message: &str| {
        message
            .split(" after its deletion")
            .next()
            .and_then(|m| m.rsplit('(').next())
            .map(str::to_owned)
    };
    let before = refusal(&api, "m-precious", &dry_run())
        .await
        .expect("the protected object's DELETE is refused during the hold");
    let name = syncgc.name.clone();
    syncgc.kill();
    let _restarted = Syncgc::start_async(&name, &args).await;
    let after = eventually("the restarted syncgc judges the hold", WAIT, || async {
        refusal(&api, "m-precious", &dry_run()).await
    })
    .await;
    assert!(bound(&before).is_some(), "{before}");
    assert_eq!(bound(&before), bound(&after), "{before} / {after}");
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
