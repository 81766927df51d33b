//! The collector on a real cluster's API surface: an aggregated API that does not answer,
//! kinds served only at a non-preferred version, CRDs whose versions move, an object served
//! under two groups, a controller that writes no status while deleting, deadlines copied from
//! elsewhere or that cannot be stored, and a timeout that must bound a whole chain. Each runs
//! against the real apiserver, with kube-controller-manager and its GC (cooperative mode), and
//! a `syncgc run` with short timeouts registered as the webhook for these tests' namespaces.

mod support;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use syncgc::names::{
    DEADLINE_ANNOTATION, SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER, TIMEOUT_ANNOTATION,
};

use support::process::{Syncgc, WEBHOOK_LABEL};
use support::surface::{
    ClusterObject, WAIT, crd, create_as, cronjob, delete_holding, dynamic, ingress, recorded,
    reference_to, resource, seen, served, stays, waiting_for, waits_for_a_held,
};
use support::{
    TestNamespace, clear_finalizers, create, delete, eventually, exists, gone, held, kubectl,
    opted_in, owner_ref,
};
/// Owners here wait this long unless they say otherwise.
const BASE: &str = "4s";

/// One syncgc for the tests of this binary: a 4 s base timeout, nothing per dependent, 40 s
/// at most, and discovery again only every 10 minutes, so that a new kind is watched in time
/// only if a CRD change makes it look.
fn syncgc() -> &'static Syncgc {
    static SHARED: OnceLock<Syncgc> = OnceLock::new();
    SHARED.get_or_init(|| {
        Syncgc::start(
            &format!("syncgc-surface-{}", std::process::id()),
            &[
                "--timeout-base",
                BASE,
                "--timeout-per-dependent",
                "0s",
                "--timeout-max",
                "40s",
                "--rediscovery-interval",
                "10m",
            ],
        )
    })
}

async fn namespace(test: &str) -> TestNamespace {
    let syncgc = tokio::task::spawn_blocking(syncgc).await.unwrap();
    let client = support::client().await;
    TestNamespace::with_labels(&client, test, &[(WEBHOOK_LABEL, &syncgc.name)]).await
}

/// An armed CronJob, a kind 1.20 serves only as `batch/v1beta1` (not the group's preferred
/// version), waits for its dependents and is released.
#[tokio::test]
async fn an_armed_cronjob_is_released() {
    let ns = namespace("cronjob").await;
    let cronjobs = resource("batch", "v1beta1", "CronJob", "cronjobs");
    let api = dynamic(&ns, &cronjobs);
    let owner = create_as(&api, &cronjobs, cronjob("nightly", waiting_for("60s"))).await;
    assert_eq!(owner.finalizers(), [SYNCHRONOUS_FINALIZER]);
    let configmaps = delete_holding(&ns, &api, &cronjobs, &owner).await;
    stays("the CronJob waits", Duration::from_secs(2), || {
        exists(&api, "nightly")
    })
    .await;
    clear_finalizers(&configmaps, "held").await;
    eventually("the CronJob is released", WAIT, || gone(&api, "nightly")).await;
}

/// A CRD group whose kinds are served at different versions, and a CRD that moves from
/// v1beta1 to v1 and then stops serving v1beta1: every kind is watched throughout, and owners
/// wait for dependents of every kind.
#[tokio::test]
async fn every_kind_of_a_group_is_watched_whatever_its_version() {
    let ns = namespace("versions").await;
    let syncgc = syncgc();
    let client = ns.client.clone();
    let group = format!("{}.mixed.syncgc.test", ns.name);
    let stable = resource(&group, "v1", "Stable", "stables");
    let early = resource(&group, "v1alpha1", "Early", "earlies");
    let moving_beta = resource(&group, "v1beta1", "Moving", "movings");
    let moving = resource(&group, "v1", "Moving", "movings");
    let _crds = [
        ClusterObject::apply(
            &format!("crd/stables.{group}"),
            crd(&group, "Stable", "stables", &[("v1", true, true)]),
        ),
        ClusterObject::apply(
            &format!("crd/earlies.{group}"),
            crd(&group, "Early", "earlies", &[("v1alpha1", true, true)]),
        ),
        ClusterObject::apply(
            &format!("crd/movings.{group}"),
            crd(&group, "Moving", "movings", &[("v1beta1", true, true)]),
        ),
    ];
    for r in [&stable, &early, &moving_beta] {
        served(&client, r).await;
    }
    // The group prefers v1; Early is served only at v1alpha1, Moving only at v1beta1.
    waits_for_a_held(syncgc, &ns, &early, "early").await;
    waits_for_a_held(syncgc, &ns, &moving_beta, "moving-beta").await;

    // An armed owner of the moving kind waits while its versions move under it.
    let owners = dynamic(&ns, &moving_beta);
    let owner = create_as(
        &owners,
        &moving_beta,
        json!({ "metadata": { "name": "owner", "annotations": waiting_for("60s") } }),
    )
    .await;
    assert_eq!(owner.finalizers(), [SYNCHRONOUS_FINALIZER]);
    let configmaps = delete_holding(&ns, &owners, &moving_beta, &owner).await;
    let move_to = |versions: &[(&str, bool, bool)]| {
        let body = crd(&group, "Moving", "movings", versions).to_string();
        kubectl(&["apply", "-f", "-"], Some(&body));
    };
    move_to(&[("v1beta1", true, false), ("v1", true, true)]);
    served(&client, &moving).await;
    move_to(&[("v1beta1", false, false), ("v1", true, true)]);
    let v1 = dynamic(&ns, &moving);
    stays(
        "the owner waits across the moves",
        Duration::from_secs(3),
        || exists(&v1, "owner"),
    )
    .await;
    // Watched at v1 now: a new object of the kind is seen.
    let probe = create_as(&v1, &moving, json!({ "metadata": { "name": "probe" } })).await;
    seen(syncgc, &probe.uid().unwrap()).await;
    clear_finalizers(&configmaps, "held").await;
    eventually("the owner is released", WAIT, || gone(&v1, "owner")).await;
    waits_for_a_held(syncgc, &ns, &moving, "moving").await;
    waits_for_a_held(syncgc, &ns, &stable, "stable").await;
}

/// An armed DaemonSet: its deletion bumps its generation and the DaemonSet controller writes
/// no status for a deleting DaemonSet, yet it is released within seconds of its last
/// dependent, not by its timeout.
#[tokio::test]
async fn an_armed_daemonset_is_released_once_its_dependents_are_gone() {
    let ns = namespace("daemonset").await;
    let daemonsets = resource("apps", "v1", "DaemonSet", "daemonsets");
    let api = dynamic(&ns, &daemonsets);
    let owner = create_as(
        &api,
        &daemonsets,
        json!({
            "metadata": { "name": "agent", "annotations": waiting_for("60s") },
            "spec": {
                "selector": { "matchLabels": { "app": "agent" } },
                "template": { "metadata": { "labels": { "app": "agent" } },
                    "spec": { "containers": [{ "name": "c", "image": "fake.invalid/none" }] } }
            }
        }),
    )
    .await;
    eventually("the DaemonSet controller has seen it", WAIT, || async {
        let ds = api.get("agent").await.ok()?;
        (ds.data["status"]["observedGeneration"].as_i64() == ds.metadata.generation).then_some(())
    })
    .await;
    let configmaps = delete_holding(&ns, &api, &daemonsets, &owner).await;
    clear_finalizers(&configmaps, "held").await;
    let released = Instant::now();
    eventually("the DaemonSet is released", Duration::from_secs(15), || {
        gone(&api, "agent")
    })
    .await;
    assert!(released.elapsed() < Duration::from_secs(15));
    recorded(&ns, "agent", "SyncGCReleased").await;
}

/// A deadline copied from elsewhere (in the past, far in the future) is replaced, and an owner
/// whose annotations leave no room for one is released all the same: each is bounded by the
/// configured timeout (4 s here), not released at once and not kept longer.
#[tokio::test]
async fn copied_deadlines_and_no_room_for_one_are_bounded_by_the_timeout() {
    let ns = namespace("deadlines").await;
    let api = ns.api::<ConfigMap>();
    // Annotations may hold 256 KiB in all: leave less room than a deadline takes.
    let filler = "x".repeat(
        256 * 1024
            - "test.syncgc.io/filler".len()
            - SYNCHRONOUS_ANNOTATION.len()
            - "true".len()
            - 20,
    );
    let cases = [
        ("past", vec![(DEADLINE_ANNOTATION, "2020-01-01T00:00:00Z")]),
        (
            "future",
            vec![(DEADLINE_ANNOTATION, "2999-01-01T00:00:00Z")],
        ),
        ("full", vec![("test.syncgc.io/filler", filler.as_str())]),
    ];
    for (name, annotations) in &cases {
        let owner = create(&api, &opted_in(name, vec![], annotations)).await;
        assert_eq!(owner.finalizers(), [SYNCHRONOUS_FINALIZER], "{name}");
        create(
            &api,
            &held(&format!("{name}-held"), vec![owner_ref(&owner, true)]),
        )
        .await;
    }
    let deleted = Instant::now();
    for (name, _) in &cases {
        delete(&api, name, &DeleteParams::background()).await;
    }
    stays("every owner waits", Duration::from_secs(2), || async {
        for (name, _) in &cases {
            if !exists(&api, name).await {
                return false;
            }
        }
        true
    })
    .await;
    for (name, _) in &cases {
        eventually(
            &format!("{name} is released by its timeout"),
            Duration::from_secs(30),
            || gone(&api, name),
        )
        .await;
    }
    assert!(
        deleted.elapsed() < Duration::from_secs(30),
        "bounded by the 4 s timeout, not the copied deadline"
    );
    for (name, event) in [
        ("past", "SyncGCDeadlineReplaced"),
        ("future", "SyncGCDeadlineReplaced"),
        ("full", "SyncGCDeadlineNotStored"),
    ] {
        recorded(&ns, name, event).await;
        recorded(&ns, name, "SyncGCTimedOut").await;
    }
    for (name, _) in &cases {
        clear_finalizers(&api, &format!("{name}-held")).await;
    }
}

/// `syncgc.io/timeout: 30s` on an owner whose tree is three levels deep, the grandchild held:
/// the intermediate object syncgc arms waits under the owner's deadline, not the 4 s base, so
/// the owner is not released while the grandchild exists.
#[tokio::test]
async fn the_owners_timeout_bounds_a_three_level_chain() {
    let ns = namespace("chain").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(
        &api,
        &opted_in("owner", vec![], &[(TIMEOUT_ANNOTATION, "30s")]),
    )
    .await;
    let child = create(
        &api,
        &support::config_map("child", vec![owner_ref(&owner, true)]),
    )
    .await;
    create(&api, &held("grandchild", vec![owner_ref(&child, true)])).await;
    delete(&api, "owner", &DeleteParams::background()).await;
    eventually("the grandchild is being deleted", WAIT, || {
        support::being_deleted(&api, "grandchild")
    })
    .await;
    let armed = api.get("child").await.unwrap();
    assert!(
        armed
            .finalizers()
            .contains(&SYNCHRONOUS_FINALIZER.to_owned())
    );
    assert_eq!(
        armed.annotations().get(DEADLINE_ANNOTATION),
        api.get("owner")
            .await
            .unwrap()
            .annotations()
            .get(DEADLINE_ANNOTATION),
        "the intermediate inherits the owner's deadline"
    );
    // Well past the 4 s base: nothing is released while the grandchild exists.
    stays(
        "the owner and the child wait",
        Duration::from_secs(8),
        || async { exists(&api, "owner").await && exists(&api, "child").await },
    )
    .await;
    clear_finalizers(&api, "grandchild").await;
    for name in ["grandchild", "child", "owner"] {
        eventually(&format!("{name} is gone"), WAIT, || gone(&api, name)).await;
    }
    recorded(&ns, "owner", "SyncGCReleased").await;
}

/// On 1.20 an Ingress is served by `extensions` and `networking.k8s.io`: one object, watched
/// once. An armed Ingress whose dependents refer to it through either group, touched again
/// and again while it waits, is never released before they are gone.
#[tokio::test]
async fn an_ingress_owner_is_never_released_early() {
    let ns = namespace("ingress").await;
    let ingresses = resource("networking.k8s.io", "v1", "Ingress", "ingresses");
    let legacy = resource("extensions", "v1beta1", "Ingress", "ingresses");
    let api = dynamic(&ns, &ingresses);
    let owner = create_as(&api, &ingresses, ingress("web", waiting_for("60s"))).await;
    assert_eq!(owner.finalizers(), [SYNCHRONOUS_FINALIZER]);
    let configmaps = ns.api::<ConfigMap>();
    create(
        &configmaps,
        &held("new", vec![reference_to(&owner, &ingresses)]),
    )
    .await;
    create(
        &configmaps,
        &held("old", vec![reference_to(&owner, &legacy)]),
    )
    .await;
    delete(&api, "web", &DeleteParams::background()).await;
    eventually("both dependents are being deleted", WAIT, || async {
        support::being_deleted(&configmaps, "new").await?;
        support::being_deleted(&configmaps, "old").await
    })
    .await;
    // Touched through both groups while it waits.
    let legacy_api = dynamic(&ns, &legacy);
    for i in 0..20 {
        let which = if i % 2 == 0 { &api } else { &legacy_api };
        let patch = json!({ "metadata": { "labels": { "touch": i.to_string() } } });
        which
            .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    clear_finalizers(&configmaps, "new").await;
    stays(
        "the Ingress waits for the dependent through extensions",
        Duration::from_secs(3),
        || exists(&api, "web"),
    )
    .await;
    clear_finalizers(&configmaps, "old").await;
    eventually("the Ingress is released", WAIT, || gone(&api, "web")).await;
    recorded(&ns, "web", "SyncGCReleased").await;
}
