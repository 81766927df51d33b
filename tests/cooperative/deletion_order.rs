//! Deletion order (`syncgc.io/deletion-order`) against the real apiserver: the dependents of an
//! armed owner are deleted in waves, the highest first, and a wave starts only when every
//! object of the one before is gone (cooperative mode, kube-controller-manager's GC running).

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, PropagationPolicy};
use syncgc::names::TIMEOUT_ANNOTATION;

use support::process::{WEBHOOK_LABEL, shared};
use support::surface::stays;
use support::{
    TestNamespace, being_deleted, clear_finalizers, config_map, create, delete, eventually, exists,
    gone, held, in_wave, opted_in, owner_ref,
};

const WAIT: Duration = Duration::from_secs(60);

async fn namespace(test: &str) -> TestNamespace {
    let syncgc = tokio::task::spawn_blocking(shared).await.unwrap();
    let client = support::client().await;
    TestNamespace::with_labels(&client, test, &[(WEBHOOK_LABEL, &syncgc.name)]).await
}

/// The Events with `reason` in the test's namespace: the name of the object each is about,
/// and its note.
async fn events(ns: &TestNamespace, reason: &str) -> Vec<(String, String)> {
    ns.events(reason)
        .await
        .into_iter()
        .map(|e| {
            let name = e.regarding.and_then(|r| r.name).unwrap_or_default();
            (name, e.note.unwrap_or_default())
        })
        .collect()
}

/// The notes of the `SyncGCWave` Events in the test's namespace.
async fn wave_notes(ns: &TestNamespace) -> Vec<String> {
    events(ns, "SyncGCWave")
        .await
        .into_iter()
        .map(|(_, note)| note)
        .collect()
}

/// Whether `name` exists and is not being deleted.
async fn untouched(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name)
        .await
        .unwrap()
        .is_some_and(|cm| cm.metadata.deletion_timestamp.is_none())
}

/// Three waves (2, 1 and the default 0), an object of the first held by a foreign finalizer:
/// nothing of the second wave is touched while it is held; once it is let go the second wave
/// goes within a second, then the third, then the owner.
#[tokio::test]
async fn each_wave_waits_until_the_one_before_is_gone() {
    let ns = namespace("order-waves").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    let reference = || vec![owner_ref(&owner, true)];
    create(&api, &in_wave(held("first-held", reference()), "2")).await;
    create(&api, &in_wave(config_map("first", reference()), "2")).await;
    create(&api, &in_wave(config_map("second-a", reference()), "1")).await;
    create(&api, &in_wave(config_map("second-b", reference()), " 1")).await;
    create(&api, &config_map("last", reference())).await;

    delete(&api, "owner", &DeleteParams::default()).await;
    eventually("the first wave is deleted", WAIT, || async {
        (being_deleted(&api, "first-held").await.is_some() && !exists(&api, "first").await)
            .then_some(())
    })
    .await;
    stays(
        "the later waves are left alone while the first is held",
        Duration::from_secs(3),
        || async {
            untouched(&api, "second-a").await
                && untouched(&api, "second-b").await
                && untouched(&api, "last").await
        },
    )
    .await;

    let explained = std::process::Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args(["explain", "configmap/owner", "-n", &ns.name])
        .env("KUBECONFIG", support::kubeconfig_path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        text.contains(
            "deletion order: wave 2 in progress (1 object(s) left), then wave(s) 1 (2), 0 (1)"
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "wave 2 holds ConfigMap {}/first-held: its finalizers: test.syncgc.io/hold",
            ns.name
        )),
        "{text}"
    );

    clear_finalizers(&api, "first-held").await;
    let released = Instant::now();
    eventually("the second wave goes", WAIT, || async {
        (!exists(&api, "second-a").await && !exists(&api, "second-b").await).then_some(())
    })
    .await;
    let second = released.elapsed();
    eventually("the last wave goes, then the owner", WAIT, || async {
        (!exists(&api, "last").await).then_some(())
    })
    .await;
    eventually("the owner goes", WAIT, || gone(&api, "owner")).await;
    eventually(
        "a SyncGCWave Event says each wave started",
        WAIT,
        || async {
            let notes = wave_notes(&ns).await;
            ["wave 2: 2", "wave 1: 2", "wave 0: 1"]
                .iter()
                .all(|want| notes.iter().any(|n| n.contains(want)))
                .then_some(())
        },
    )
    .await;
    assert!(
        second < Duration::from_secs(1),
        "the second wave went {second:?} after the first was let go"
    );
}

/// A wave's object with dependents of its own counts as gone only when they are gone too: the
/// next wave waits while a dependent of the first wave's object is held.
#[tokio::test]
async fn a_wave_is_gone_only_when_its_objects_dependents_are() {
    let ns = namespace("order-transitive").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    let parent = create(
        &api,
        &in_wave(config_map("parent", vec![owner_ref(&owner, true)]), "1"),
    )
    .await;
    create(&api, &held("child", vec![owner_ref(&parent, true)])).await;
    create(&api, &config_map("later", vec![owner_ref(&owner, true)])).await;

    delete(&api, "owner", &DeleteParams::default()).await;
    eventually("the first wave's object is being deleted", WAIT, || async {
        (being_deleted(&api, "parent").await.is_some()
            && being_deleted(&api, "child").await.is_some())
        .then_some(())
    })
    .await;
    stays(
        "the next wave waits for the first wave's object's dependent",
        Duration::from_secs(3),
        || untouched(&api, "later"),
    )
    .await;
    clear_finalizers(&api, "child").await;
    eventually("the next wave goes", WAIT, || gone(&api, "later")).await;
    eventually("the owner goes", WAIT, || gone(&api, "owner")).await;
    assert!(!exists(&api, "parent").await);
}

/// The owner's deadline passes while its first wave is held: the order is abandoned (a Warning
/// Event says so), the later waves are deleted at once and the owner goes; the held object
/// stays until let go.
#[tokio::test]
async fn the_deadline_abandons_the_order_and_the_rest_goes_at_once() {
    let ns = namespace("order-deadline").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(
        &api,
        &opted_in("owner", vec![], &[(TIMEOUT_ANNOTATION, "3s")]),
    )
    .await;
    let reference = || vec![owner_ref(&owner, true)];
    create(&api, &in_wave(held("first", reference()), "2")).await;
    create(&api, &in_wave(config_map("second", reference()), "1")).await;
    create(&api, &config_map("last", reference())).await;

    delete(&api, "owner", &DeleteParams::default()).await;
    eventually("the first wave is being deleted", WAIT, || {
        being_deleted(&api, "first")
    })
    .await;
    assert!(untouched(&api, "second").await && untouched(&api, "last").await);
    eventually("the owner goes at its deadline", WAIT, || {
        gone(&api, "owner")
    })
    .await;
    eventually("the later waves go at once", WAIT, || async {
        (!exists(&api, "second").await && !exists(&api, "last").await).then_some(())
    })
    .await;
    eventually("an Event says the order was abandoned", WAIT, || async {
        events(&ns, "SyncGCOrderAbandoned")
            .await
            .into_iter()
            .any(|(name, note)| {
                name == "owner" && note.contains("wave 2") && note.contains("2 dependent(s)")
            })
            .then_some(())
    })
    .await;
    assert!(
        being_deleted(&api, "first").await.is_some(),
        "the held object stays until let go"
    );
    clear_finalizers(&api, "first").await;
    eventually("the held object goes once let go", WAIT, || {
        gone(&api, "first")
    })
    .await;
}

/// An order that is not an integer is accepted, warned about on the dependent, and counts as
/// wave 0, with the dependents that carry none: both wait for the higher wave.
#[tokio::test]
async fn an_invalid_order_is_warned_about_and_counts_as_the_default_wave() {
    let ns = namespace("order-invalid").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    let reference = || vec![owner_ref(&owner, true)];
    create(&api, &in_wave(held("first", reference()), "1")).await;
    create(&api, &in_wave(config_map("odd", reference()), "first")).await;
    create(&api, &config_map("plain", reference())).await;

    delete(&api, "owner", &DeleteParams::default()).await;
    eventually(
        "a Warning names the invalid order on its object",
        WAIT,
        || async {
            events(&ns, "SyncGCInvalidOrder")
                .await
                .into_iter()
                .any(|(name, note)| name == "odd" && note.contains("\"first\" is not an integer"))
                .then_some(())
        },
    )
    .await;
    stays(
        "wave 0, the invalid order with it, waits for wave 1",
        Duration::from_secs(2),
        || async { untouched(&api, "odd").await && untouched(&api, "plain").await },
    )
    .await;
    clear_finalizers(&api, "first").await;
    eventually("wave 0 goes, then the owner", WAIT, || async {
        (!exists(&api, "odd").await && !exists(&api, "plain").await && !exists(&api, "owner").await)
            .then_some(())
    })
    .await;
}

/// A dependent of a later wave that another, live owner keeps is not deleted: its reference
/// to the waiting owner goes, and the order moves on without it.
#[tokio::test]
async fn a_dependent_with_a_second_live_owner_is_kept_and_the_order_moves_on() {
    let ns = namespace("order-shared").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    let other = create(&api, &config_map("other", vec![])).await;
    create(
        &api,
        &in_wave(
            config_map(
                "shared",
                vec![owner_ref(&owner, true), owner_ref(&other, false)],
            ),
            "1",
        ),
    )
    .await;
    create(&api, &config_map("last", vec![owner_ref(&owner, true)])).await;

    delete(&api, "owner", &DeleteParams::default()).await;
    eventually("the last wave goes, then the owner", WAIT, || async {
        (!exists(&api, "last").await && !exists(&api, "owner").await).then_some(())
    })
    .await;
    let shared = api.get("shared").await.unwrap();
    assert!(shared.metadata.deletion_timestamp.is_none());
    let owners: Vec<String> = shared
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(owners, ["other"], "only the live owner is left");
}

/// Orphaning ignores the order: every dependent is orphaned at once, whatever its wave.
#[tokio::test]
async fn orphaning_ignores_the_order() {
    let ns = namespace("order-orphan").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    let reference = || vec![owner_ref(&owner, true)];
    create(&api, &in_wave(held("first", reference()), "2")).await;
    create(&api, &in_wave(config_map("second", reference()), "1")).await;
    create(&api, &config_map("last", reference())).await;

    let orphan = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    delete(&api, "owner", &orphan).await;
    eventually("the owner goes", WAIT, || gone(&api, "owner")).await;
    for name in ["first", "second", "last"] {
        let cm = api.get(name).await.unwrap();
        assert!(
            cm.metadata.deletion_timestamp.is_none(),
            "{name} was deleted"
        );
        assert!(
            cm.metadata.owner_references.unwrap_or_default().is_empty(),
            "{name} still refers to the owner"
        );
    }
}

/// A line of `hack/demo-order.sh` with its milliseconds left out.
fn timeless(line: &str) -> String {
    line.split(' ')
        .map(|word| {
            if word.parse::<u64>().is_ok() {
                "N"
            } else {
                word
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The transcript of `hack/demo-order.sh` that docs/development.md and docs/how-it-works.md
/// show is what the script prints when run (in the test's namespace): each line shown is
/// printed, its milliseconds aside, and the objects' changes in the order shown (the order
/// the waves fix).
#[tokio::test]
async fn the_demo_order_transcript_is_what_the_script_prints() {
    let ns = namespace("demo-order").await;
    let demo =
        tokio::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/demo-order.sh"))
            .env("SYNCGC_DEMO_NAMESPACE", &ns.name)
            .output();
    let out = tokio::time::timeout(Duration::from_secs(120), demo)
        .await
        .expect("the demo ends within two minutes")
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<String> = printed.lines().map(timeless).collect();
    for page in ["docs/development.md", "docs/how-it-works.md"] {
        let shown = support::samples::block(page, "kubectl delete configmap shop: ");
        let mut last_change = 0;
        for line in shown.lines().filter(|l| l.trim() != "...") {
            let line = timeless(line);
            let at = printed
                .iter()
                .position(|p| *p == line)
                .unwrap_or_else(|| panic!("{page}: {line:?} is not printed:\n{printed:#?}"));
            if line.starts_with("  N ms: ") {
                assert!(
                    at > last_change,
                    "{page}: {line:?} comes earlier:\n{printed:#?}"
                );
                last_change = at;
            }
        }
    }
}
