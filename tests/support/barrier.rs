//! The release barrier's scenarios that both modes run (`tests/release_barrier.rs`,
//! `tests/release_barrier_standalone.rs`), and the parts of them that the scenarios of a
//! failing watch and an apiserver restart use (`tests/disruptions/release_barrier.rs`): an
//! owner whose dependent the watches have not delivered yet (a kind created a second before, a
//! dependent created an instant before the owner's DELETE, a kind that cannot be read) must not
//! go while that dependent exists.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use syncgc::names::SYNCHRONOUS_FINALIZER;

use super::surface::{WAIT, create_as, dynamic, stays};
use super::{
    HOLD, TestNamespace, being_deleted, clear_finalizers, config_map, create, create_crd, delete,
    eventually, exists, gone, opted_in, owner_ref,
};

/// How the owner waits for its dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Opted in and armed by syncgc's webhook, deleted in the background.
    Synchronous,
    /// Deleted with `propagationPolicy: Foreground` (standalone mode).
    Foreground,
}

impl Wait {
    /// A new owner ConfigMap named `name` that will wait this way.
    pub async fn owner(self, ns: &TestNamespace, name: &str) -> ConfigMap {
        let owner = match self {
            Self::Synchronous => opted_in(name, vec![], &[]),
            Self::Foreground => config_map(name, vec![]),
        };
        let owner = create(&ns.api::<ConfigMap>(), &owner).await;
        // An owner the webhook did not arm (a call that failed open) would go at once.
        let armed = owner
            .finalizers()
            .iter()
            .any(|f| f == SYNCHRONOUS_FINALIZER);
        assert!(
            armed || self == Self::Foreground,
            "the webhook did not arm {name}: the apiserver's call to it failed (see its log)"
        );
        owner
    }

    /// Deletes the owner `name` so that it waits.
    pub async fn delete(self, ns: &TestNamespace, name: &str) {
        let params = match self {
            Self::Synchronous => DeleteParams::background(),
            Self::Foreground => DeleteParams::foreground(),
        };
        ns.api::<ConfigMap>()
            .delete(name, &params)
            .await
            .unwrap_or_else(|err| panic!("deleting {name}: {err}"));
    }
}

/// A custom resource kind whose CRD is created an instant before an owner's DELETE: its
/// held dependent of that kind is created as soon as the apiserver takes it (about a second
/// after the CRD), and the owner deleted at once. The owner stays while the dependent exists,
/// and goes once it is let go.
pub async fn a_new_kind_holds_its_owner(ns: &TestNamespace, wait: Wait) {
    let owner = wait.owner(ns, "owner").await;
    let widgets = create_crd(ns, "Widget", "widgets").await;
    let api = dynamic(ns, &widgets);
    let mut widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": widgets.api_version, "kind": widgets.kind,
        "metadata": { "name": "w", "finalizers": [HOLD],
            "ownerReferences": [owner_ref(&owner, true)] } }))
    .unwrap();
    widget.metadata.namespace = Some(ns.name.clone());
    eventually("the apiserver takes the custom resource", WAIT, || async {
        api.create(&PostParams::default(), &widget)
            .await
            .ok()
            .map(drop)
    })
    .await;
    wait.delete(ns, "owner").await;
    held_then_let_go(ns, &api, "w", "the custom resource of a new kind").await;
}

/// The owner `owner` stays for 3 s and while its dependent `name` in `api` is held (it is
/// deleted meanwhile, by the collector acting for the owner), and goes once it is let go.
pub async fn held_then_let_go<K>(ns: &TestNamespace, api: &Api<K>, name: &str, what: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let configmaps = ns.api::<ConfigMap>();
    stays(
        &format!("the owner waits for {what}"),
        Duration::from_secs(3),
        || exists(&configmaps, "owner"),
    )
    .await;
    eventually(&format!("{what} is being deleted"), WAIT, || {
        being_deleted(api, name)
    })
    .await;
    assert!(exists(&configmaps, "owner").await, "released early");
    clear_finalizers(api, name).await;
    eventually("the owner goes", WAIT, || gone(&configmaps, "owner")).await;
}

/// `n` trials, 20 at a time, of an owner whose held dependent (a Secret, or a custom resource
/// of a kind made at the start) is created an instant before the owner's DELETE, while
/// unrelated writes load the apiserver: in every trial the owner is still there when the
/// dependent is being deleted (it is deleted by the collector acting for the owner, or, had
/// the owner gone, by the collection of an orphan), and goes once the dependent is let go.
pub async fn trials(ns: &TestNamespace, load: &TestNamespace, wait: Wait, n: usize) {
    let gadgets = create_crd(ns, "Gadget", "gadgets").await;
    super::surface::served(&ns.client, &gadgets).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let writers: Vec<_> = (0..4)
        .map(|w| tokio::spawn(unrelated_writes(load.api::<Secret>(), w, stop.clone())))
        .collect();
    let mut early = Vec::new();
    for batch in (0..n).collect::<Vec<_>>().chunks(20) {
        let outcomes =
            futures::future::join_all(batch.iter().map(|i| trial(ns, &gadgets, wait, *i))).await;
        early.extend(outcomes.into_iter().flatten());
    }
    stop.cancel();
    for writer in writers {
        let writes = writer.await.unwrap();
        assert!(writes > 0, "the unrelated writes ran");
    }
    assert!(early.is_empty(), "owners released early: {early:?}");
}

/// One trial: `Some(name)` of an owner released while its dependent existed.
async fn trial(ns: &TestNamespace, gadgets: &ApiResource, wait: Wait, i: usize) -> Option<String> {
    let name = format!("owner-{i}");
    let owner = wait.owner(ns, &name).await;
    let reference = owner_ref(&owner, true);
    let dependent = format!("dependent-{i}");
    let configmaps = ns.api::<ConfigMap>();
    let released_early = if i.is_multiple_of(2) {
        let secrets = ns.api::<Secret>();
        create(&secrets, &held_secret(&dependent, reference)).await;
        released_early(ns, wait, &name, &secrets, &dependent).await
    } else {
        let api = dynamic(ns, gadgets);
        create_as(
            &api,
            gadgets,
            json!({ "metadata": { "name": dependent, "finalizers": [HOLD],
                "ownerReferences": [reference] } }),
        )
        .await;
        released_early(ns, wait, &name, &api, &dependent).await
    };
    eventually("the owner goes", WAIT, || gone(&configmaps, &name)).await;
    released_early.then_some(name)
}

/// Deletes the owner `owner` so that it waits, and waits until its held dependent `name` in
/// `api` is being deleted: whether the owner was gone by then. Lets the dependent go.
async fn released_early<K>(
    ns: &TestNamespace,
    wait: Wait,
    owner: &str,
    api: &Api<K>,
    name: &str,
) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait.delete(ns, owner).await;
    eventually(
        &format!("the held dependent {name} is being deleted"),
        WAIT,
        || being_deleted(api, name),
    )
    .await;
    let early = !exists(&ns.api::<ConfigMap>(), owner).await;
    clear_finalizers(api, name).await;
    early
}

/// `n` trees, 10 at a time, each an owner, a ConfigMap it owns, and a held Secret that
/// ConfigMap owns, created an instant before the owner's DELETE: whatever the watches had
/// delivered by then (the intermediate ConfigMap released when the graph shows its own
/// dependents gone, or gone before the graph saw the Secret), the owner is still there when
/// the Secret is being deleted, and goes once it is let go.
pub async fn a_dependent_below_an_intermediate_owner_holds_the_top(
    ns: &TestNamespace,
    wait: Wait,
    n: usize,
) {
    let mut early = Vec::new();
    for batch in (0..n).collect::<Vec<_>>().chunks(10) {
        let outcomes =
            futures::future::join_all(batch.iter().map(|i| tree_trial(ns, wait, *i))).await;
        early.extend(outcomes.into_iter().flatten());
    }
    assert!(early.is_empty(), "owners released early: {early:?}");
}

/// One tree: `Some(name)` of an owner released while the Secret below it existed.
async fn tree_trial(ns: &TestNamespace, wait: Wait, i: usize) -> Option<String> {
    let name = format!("top-{i}");
    let owner = wait.owner(ns, &name).await;
    let configmaps = ns.api::<ConfigMap>();
    let middle = config_map(&format!("middle-{i}"), vec![owner_ref(&owner, true)]);
    let middle = create(&configmaps, &middle).await;
    let secrets = ns.api::<Secret>();
    let leaf = format!("leaf-{i}");
    create(&secrets, &held_secret(&leaf, owner_ref(&middle, true))).await;
    let early = released_early(ns, wait, &name, &secrets, &leaf).await;
    eventually("the owner goes", WAIT, || gone(&configmaps, &name)).await;
    early.then_some(name)
}

/// A Secret `name` owned by `owner`, held by [`HOLD`].
pub fn held_secret(name: &str, owner: OwnerReference) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            owner_references: Some(vec![owner]),
            finalizers: Some(vec![HOLD.to_owned()]),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Creates and deletes Secrets (a kind the trials' dependents have) in `api` until `stop`;
/// returns how many writes.
async fn unrelated_writes(
    api: Api<Secret>,
    writer: usize,
    stop: tokio_util::sync::CancellationToken,
) -> usize {
    let mut writes = 0;
    let mut i = 0usize;
    while !stop.is_cancelled() {
        let name = format!("load-{writer}-{i}");
        i += 1;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            string_data: Some([("k".to_owned(), "v".repeat(4096))].into()),
            ..Default::default()
        };
        if api.create(&PostParams::default(), &secret).await.is_ok() {
            writes += 1;
        }
        if api.delete(&name, &DeleteParams::default()).await.is_ok() {
            writes += 1;
        }
    }
    writes
}

/// A custom resource kind `things` stored at v1 and served also at v2 (the version syncgc
/// watches), through a conversion webhook that does not answer: once an object is stored,
/// every list and watch at v2 of its namespace fails, as they do in a real cluster when a
/// conversion webhook is down. The CRD goes when the guard is dropped; the resource is at v1.
pub async fn unconvertible_kind(
    ns: &TestNamespace,
) -> (super::surface::ClusterObject, ApiResource) {
    let group = format!("{}.test.syncgc.io", ns.name);
    let mut definition = super::surface::crd(
        &group,
        "Thing",
        "things",
        &[("v1", true, true), ("v2", true, false)],
    );
    definition["spec"]["conversion"] = json!({ "strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": { "url": "https://127.0.0.1:9/convert" } } });
    let crd = super::surface::ClusterObject::apply(&format!("crd/things.{group}"), definition);
    let things = super::surface::resource(&group, "v1", "Thing", "things");
    super::surface::served(&ns.client, &things).await;
    (crd, things)
}

/// A kind that cannot be read in the owner's namespace (see [`unconvertible_kind`]; its one
/// object there refers to nothing) holds the owner once its dependent is gone, until the
/// bound of its wait: the owner's `syncgc.io/timeout` of 10 s (`Wait::Synchronous`), or
/// syncgc's `--timeout-base` for foreground deletion (`bound`). It is then released, and the
/// Event `reason` names the kind that could not be read.
pub async fn an_unreadable_kind_holds_the_owner_until_its_bound(
    ns: &TestNamespace,
    wait: Wait,
    bound: Duration,
    reason: &str,
) {
    let (_crd, things) = unconvertible_kind(ns).await;
    let api = dynamic(ns, &things);
    create_as(
        &api,
        &things,
        json!({ "metadata": { "name": "unrelated" } }),
    )
    .await;
    let configmaps = ns.api::<ConfigMap>();
    let owner = match wait {
        Wait::Synchronous => {
            let owner = opted_in(
                "owner",
                vec![],
                &[(syncgc::names::TIMEOUT_ANNOTATION, "10s")],
            );
            create(&configmaps, &owner).await
        }
        Wait::Foreground => wait.owner(ns, "owner").await,
    };
    create(
        &configmaps,
        &config_map("dependent", vec![owner_ref(&owner, true)]),
    )
    .await;
    let deleted = std::time::Instant::now();
    wait.delete(ns, "owner").await;
    eventually("the dependent is deleted", WAIT, || {
        gone(&configmaps, "dependent")
    })
    .await;
    stays(
        "the owner is held while a kind in its namespace cannot be read",
        Duration::from_secs(4),
        || exists(&configmaps, "owner"),
    )
    .await;
    eventually("the owner is released at its bound", bound + WAIT, || {
        gone(&configmaps, "owner")
    })
    .await;
    // A deadline counts from the deletionTimestamp, which has whole seconds.
    let waited = deleted.elapsed() + Duration::from_secs(1);
    assert!(
        waited >= bound,
        "released after {waited:?}, before its bound {bound:?}"
    );
    let named = format!("things.{}", things.group);
    eventually(&format!("a {reason} Event names {named}"), WAIT, || async {
        ns.events(reason)
            .await
            .iter()
            .any(|e| e.note.as_deref().is_some_and(|n| n.contains(&named)))
            .then_some(())
    })
    .await;
    delete(&api, "unrelated", &DeleteParams::background()).await;
}
