//! `syncgc plan` held against what the DELETE then does on the real apiserver: the shapes of
//! tree a plan must get right, each planned, then deleted, and what happened compared with
//! what the plan said — which objects went, in which order, which were orphaned, which lived
//! on with which owners, which waited on a finalizer of another controller. The shapes: a
//! dependent with two owners, one of them cluster-scoped; a foreign finalizer; deletion waves;
//! orphan, background and foreground; a custom resource of a kind created a moment before the
//! plan; a reference from another namespace; a foreground owner's dependents in a deletion
//! order; a cluster-scoped dependent of a namespaced owner; a reference at an apiVersion that
//! is not served. They run with Kubernetes' collector beside syncgc (tests/cooperative/plan.rs)
//! and with syncgc alone (tests/standalone_gc.rs): the plan reads the mode from the tests'
//! syncgc's leader Lease, and where the two collectors differ each shape says what each does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{DeleteParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::process::TEST_TIMEOUTS;
use super::surface::dynamic;
use super::{
    HOLD, TestNamespace, being_deleted, clear_finalizers, config_map, create, create_crd,
    eventually, exists, gone, in_wave, opted_in, owner_ref, with_finalizer,
};

const WAIT: Duration = Duration::from_secs(60);

/// The syncgc whose mode the plans predict (its leader Lease's name), and that mode.
static COLLECTOR: std::sync::OnceLock<(String, &'static str)> = std::sync::OnceLock::new();

/// Plans predict `syncgc`, which runs in `mode` (`cooperative` or `standalone`).
pub fn predicting(syncgc: &super::process::Syncgc, mode: &'static str) {
    COLLECTOR.get_or_init(|| (syncgc.name.clone(), mode));
}

/// The mode the plans predict.
fn mode() -> &'static str {
    COLLECTOR.get().map_or("cooperative", |(_, mode)| mode)
}

/// `syncgc plan OBJECT -n NS -o json ARGS` with the tests' timeouts: the plan, or what the
/// command said when it failed (its exit code and its error).
pub fn try_plan(ns: &TestNamespace, object: &str, args: &[&str]) -> Result<Value, (i32, String)> {
    try_plan_in(&ns.name, object, args)
}

/// [`try_plan`] in the namespace named `ns`.
pub fn try_plan_in(ns: &str, object: &str, args: &[&str]) -> Result<Value, (i32, String)> {
    let lease = COLLECTOR
        .get()
        .map(|(lease, _)| ["--leader-election-lease", lease.as_str()]);
    let mut all = vec!["plan", object, "-n", ns, "-o", "json"];
    all.extend(TEST_TIMEOUTS);
    all.extend(lease.iter().flatten().copied());
    all.extend(args.iter().copied());
    super::syncgc_json(&all)
}

/// The plan for `object` in `ns`, with `args`.
pub fn plan(ns: &TestNamespace, object: &str, args: &[&str]) -> Value {
    try_plan(ns, object, args).unwrap_or_else(|(code, err)| panic!("plan {object}: {code}: {err}"))
}

/// The names in the plan's list `list`.
pub fn names(plan: &Value, list: &str) -> BTreeSet<String> {
    plan[list]
        .as_array()
        .unwrap_or_else(|| panic!("the plan has a list {list}: {plan}"))
        .iter()
        .map(|entry| entry["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The wave of each object the plan deletes.
pub fn waves(plan: &Value) -> BTreeMap<String, u64> {
    plan["delete"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["wave"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The order in which ConfigMaps of a namespace start going (a deletionTimestamp, or gone),
/// from a watch opened before the DELETE, and the propagation each DELETE had: the finalizer
/// the apiserver put with the deletionTimestamp (`foregroundDeletion`, `orphan`), or none.
pub struct Going {
    order: Arc<Mutex<Vec<(String, &'static str)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Going {
    pub async fn record(api: &Api<ConfigMap>) -> Self {
        let version = super::resource_version(api).await;
        let mut events = Box::pin(
            api.watch_metadata(&WatchParams::default().timeout(290), &version)
                .await
                .unwrap(),
        );
        let order = Arc::new(Mutex::new(Vec::new()));
        let seen = order.clone();
        let task = tokio::spawn(async move {
            while let Ok(Some(event)) = events.try_next().await {
                let (name, propagation) = match event {
                    WatchEvent::Modified(m) if m.metadata.deletion_timestamp.is_some() => {
                        let has = |f: &str| m.finalizers().iter().any(|x| x == f);
                        let propagation = if has("foregroundDeletion") {
                            "foreground"
                        } else if has("orphan") {
                            "orphan"
                        } else {
                            "background"
                        };
                        (m.name_any(), propagation)
                    }
                    WatchEvent::Deleted(m) => (m.name_any(), "background"),
                    _ => continue,
                };
                let mut seen = seen.lock().unwrap();
                if !seen.iter().any(|(n, _)| *n == name) {
                    seen.push((name, propagation));
                }
            }
        });
        Self { order, task }
    }

    /// Where `name` stands in the order, if it started going.
    fn at(&self, name: &str) -> Option<usize> {
        self.order
            .lock()
            .unwrap()
            .iter()
            .position(|(n, _)| n == name)
    }

    /// Each object the plan deletes started going with the propagation the plan gives, and
    /// each object deleted in an earlier wave than a dependent of it (the order the collector
    /// must keep) started going before it.
    pub fn follows(&self, plan: &Value, api_order: &[(&str, &str)]) {
        let seen = self.order.lock().unwrap().clone();
        for entry in plan["delete"].as_array().unwrap() {
            let name = entry["name"].as_str().unwrap();
            let Some((_, propagation)) = seen.iter().find(|(n, _)| n == name) else {
                continue;
            };
            assert_eq!(
                entry["propagation"], *propagation,
                "{name}'s DELETE had the planned propagation: {plan:#}"
            );
        }
        let waves = waves(plan);
        for (before, after) in api_order {
            assert!(
                waves[*before] < waves[*after],
                "the plan deletes {before} in an earlier wave than {after}: {plan:#}"
            );
            let (b, a) = (self.at(before), self.at(after));
            assert!(
                b.is_some() && a.is_some() && b < a,
                "{before} started going before {after}: {:?}",
                self.order.lock().unwrap()
            );
        }
    }
}

impl Drop for Going {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fates of the ConfigMaps `all` after the delete has run its course: the plan's
/// `delete` are gone, its `wait` are being deleted (and left as they are), everything else
/// exists, the `orphan` without a reference to `owner`.
pub async fn settled(api: &Api<ConfigMap>, plan: &Value, all: &[&str]) {
    let deleted = names(plan, "delete");
    let waiting = names(plan, "wait");
    for name in all {
        let name = *name;
        if waiting.contains(name) {
            eventually(&format!("{name} waits being deleted"), WAIT, || {
                being_deleted(api, name)
            })
            .await;
        } else if deleted.contains(name) {
            eventually(&format!("{name} is gone"), WAIT, || gone(api, name)).await;
        }
    }
    for name in all {
        if !deleted.contains(*name) {
            assert!(exists(api, name).await, "{name} lives on, as the plan says");
        }
    }
}

/// The owners `name` has, by name.
pub async fn owners(api: &Api<ConfigMap>, name: &str) -> BTreeSet<String> {
    let object = api.get(name).await.unwrap();
    object
        .owner_references()
        .iter()
        .map(|r| r.name.clone())
        .collect()
}

/// An owner, `armed` or not, deleted with kubectl's default (background), over a tree with
/// every fate: a chain three deep, a custom resource, a dependent with a second owner that
/// lives, one whose other owner is a cluster-scoped ClusterRole (read by the plan one by one),
/// and one held by a finalizer of another controller. The plan says which go in which waves,
/// which live on and why, and (armed) that the owner stays while the held one does; the
/// DELETE does that, and once the held one is let go the owner goes.
pub async fn a_tree(ns: &TestNamespace, armed: bool) {
    let api = ns.api::<ConfigMap>();
    let owner = if armed {
        opted_in("owner", vec![], &[])
    } else {
        config_map("owner", vec![])
    };
    let owner = create(&api, &owner).await;
    let a = create(&api, &config_map("a", vec![owner_ref(&owner, true)])).await;
    let a1 = create(&api, &config_map("a1", vec![owner_ref(&a, true)])).await;
    create(&api, &config_map("a2", vec![owner_ref(&a1, false)])).await;
    let other = create(&api, &config_map("other", vec![])).await;
    create(
        &api,
        &config_map(
            "shared",
            vec![owner_ref(&owner, true), owner_ref(&other, false)],
        ),
    )
    .await;
    let roles = Api::<ClusterRole>::all(ns.client.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": { "name": format!("{}-owner", ns.name) } }))
    .unwrap();
    let role = roles.create(&PostParams::default(), &role).await.unwrap();
    let _role = ClusterRoleGone(role.name_any());
    create(
        &api,
        &config_map(
            "role-owned",
            vec![owner_ref(&owner, false), owner_ref(&role, false)],
        ),
    )
    .await;
    create(
        &api,
        &with_finalizer(config_map("held", vec![owner_ref(&owner, true)]), HOLD),
    )
    .await;
    let widgets = create_crd(ns, "Plank", "planks").await;
    let planks = dynamic(ns, &widgets);
    let reference = owner_ref(&owner, true);
    eventually("the apiserver takes the custom resource", WAIT, || async {
        let object = json!({ "metadata": { "name": "w", "ownerReferences": [reference] } });
        let mut object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
        object.types = Some(kube::api::TypeMeta {
            api_version: widgets.api_version.clone(),
            kind: widgets.kind.clone(),
        });
        planks
            .create(&PostParams::default(), &object)
            .await
            .ok()
            .map(drop)
    })
    .await;

    let plan = plan(ns, "configmap/owner", &[]);
    assert_eq!(plan["object"]["name"], "owner", "{plan:#}");
    assert_eq!(plan["propagation"], "background", "{plan:#}");
    assert_eq!(plan["propagationFrom"], "default", "{plan:#}");
    assert_eq!(plan["synchronous"], armed, "{plan:#}");
    assert_eq!(
        (&plan["mode"], &plan["modeFrom"]),
        (&json!(mode()), &json!("lease")),
        "{plan:#}"
    );
    // Kinds of other tests may come and go meanwhile; this test's are listed.
    let unlisted: Vec<&str> = plan["unlisted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["resource"].as_str().unwrap())
        .collect();
    assert!(
        unlisted
            .iter()
            .all(|r| !r.contains(&ns.name) && *r != "configmaps"),
        "{plan:#}"
    );
    assert_eq!(
        names(&plan, "delete"),
        set(&["a", "a1", "a2", "w"]),
        "{plan:#}"
    );
    assert_eq!(
        names(&plan, "keep"),
        set(&["shared", "role-owned"]),
        "{plan:#}"
    );
    assert_eq!(names(&plan, "wait"), set(&["held"]), "{plan:#}");
    assert!(names(&plan, "orphan").is_empty(), "{plan:#}");
    if armed {
        assert_eq!(
            plan["goes"], false,
            "the owner waits for the held one: {plan:#}"
        );
        // 60 s and 100 ms for each of its 7 dependents.
        assert_eq!(plan["timeoutSeconds"], 60.7, "{plan:#}");
    } else {
        assert_eq!(plan["goes"], true, "{plan:#}");
        assert!(plan.get("timeoutSeconds").is_none(), "{plan:#}");
    }
    let kept: BTreeMap<&str, Vec<&str>> = plan["keep"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let by = k["keptBy"].as_array().unwrap();
            (
                k["name"].as_str().unwrap(),
                by.iter().map(|o| o["name"].as_str().unwrap()).collect(),
            )
        })
        .collect();
    assert_eq!(kept["shared"], ["other"], "{plan:#}");
    assert_eq!(kept["role-owned"], [role.name_any().as_str()], "{plan:#}");
    assert_eq!(
        plan["wait"][0]["finalizers"][0]["name"], HOLD,
        "the finalizer it waits on: {plan:#}"
    );

    let going = Going::record(&api).await;
    super::delete(&api, "owner", &DeleteParams::default()).await;
    let all = ["a", "a1", "a2", "other", "shared", "role-owned", "held"];
    settled(&api, &plan, &all).await;
    eventually("the custom resource is gone", WAIT, || gone(&planks, "w")).await;
    assert_eq!(
        exists(&api, "owner").await,
        armed,
        "an armed owner waits for the held one"
    );
    going.follows(&plan, &[("a", "a1"), ("a1", "a2")]);
    assert!(owners(&api, "shared").await.contains("other"));
    assert!(owners(&api, "role-owned").await.contains(&role.name_any()));
    clear_finalizers(&api, "held").await;
    eventually("the owner goes", WAIT, || gone(&api, "owner")).await;
    super::delete_crd(&ns.client, &widgets).await;
}

/// Unarmed owners deleted with foreground and with orphan propagation (`--cascade`, as
/// kubectl's flag): foreground deletes the tree, dependents before dependents of them;
/// orphan leaves the dependents without their reference, and what hangs off them with theirs.
pub async fn foreground_and_orphan(ns: &TestNamespace) {
    let api = ns.api::<ConfigMap>();
    let fg = create(&api, &config_map("fg", vec![])).await;
    let b = create(&api, &config_map("b", vec![owner_ref(&fg, true)])).await;
    create(&api, &config_map("b1", vec![owner_ref(&b, true)])).await;
    create(&api, &config_map("c", vec![owner_ref(&fg, false)])).await;
    let orphaning = create(&api, &config_map("orphaning", vec![])).await;
    let d = create(&api, &config_map("d", vec![owner_ref(&orphaning, true)])).await;
    create(&api, &config_map("d1", vec![owner_ref(&d, true)])).await;

    let foreground = plan(ns, "cm/fg", &["--cascade", "foreground"]);
    assert_eq!(foreground["propagation"], "foreground", "{foreground:#}");
    assert_eq!(foreground["propagationFrom"], "--cascade", "{foreground:#}");
    assert_eq!(foreground["synchronous"], false, "{foreground:#}");
    assert!(foreground.get("timeoutSeconds").is_none(), "{foreground:#}");
    assert_eq!(
        names(&foreground, "delete"),
        set(&["b", "b1", "c"]),
        "{foreground:#}"
    );
    let orphan = plan(ns, "configmaps/orphaning", &["--cascade", "orphan"]);
    assert_eq!(names(&orphan, "orphan"), set(&["d"]), "{orphan:#}");
    assert!(names(&orphan, "delete").is_empty(), "{orphan:#}");
    assert_eq!(names(&orphan, "keep"), set(&["d1"]), "{orphan:#}");

    let going = Going::record(&api).await;
    super::delete(&api, "fg", &DeleteParams::foreground()).await;
    super::delete(&api, "orphaning", &DeleteParams::orphan()).await;
    settled(&api, &foreground, &["b", "b1", "c"]).await;
    eventually("fg goes", WAIT, || gone(&api, "fg")).await;
    going.follows(&foreground, &[("b", "b1")]);
    settled(&api, &orphan, &["d", "d1"]).await;
    eventually("orphaning goes", WAIT, || gone(&api, "orphaning")).await;
    eventually("d loses its reference", WAIT, || async {
        owners(&api, "d").await.is_empty().then_some(())
    })
    .await;
    assert_eq!(owners(&api, "d1").await, set(&["d"]));
}

/// A reference from another namespace to the owner's uid is no dependency (a namespaced owner
/// is in its dependent's namespace): the plan leaves the object out, and the DELETE leaves it.
pub async fn a_reference_from_another_namespace(ns: &TestNamespace, other: &TestNamespace) {
    let api = ns.api::<ConfigMap>();
    let there = other.api::<ConfigMap>();
    let owner = create(&api, &config_map("owner", vec![])).await;
    create(&api, &config_map("d", vec![owner_ref(&owner, true)])).await;
    let keeper = create(&there, &config_map("keeper", vec![])).await;
    create(
        &there,
        &config_map(
            "stranger",
            vec![owner_ref(&owner, true), owner_ref(&keeper, false)],
        ),
    )
    .await;
    let plan = plan(ns, "configmap/owner", &["--cascade", "foreground"]);
    assert_eq!(names(&plan, "delete"), set(&["d"]), "{plan:#}");
    assert!(names(&plan, "keep").is_empty(), "{plan:#}");
    super::delete(&api, "owner", &DeleteParams::foreground()).await;
    eventually("the owner goes", WAIT, || gone(&api, "owner")).await;
    assert!(!exists(&api, "d").await, "its dependent went with it");
    assert!(
        exists(&there, "stranger").await,
        "the reference from elsewhere is no dependency"
    );
}

/// A foreground owner, not armed, whose dependents carry `syncgc.io/deletion-order` 2, 1 and
/// none: syncgc deletes them in that order (standalone), Kubernetes' collector all at once.
pub async fn the_deletion_order_of_a_foreground_owner(ns: &TestNamespace) {
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &config_map("owner", vec![])).await;
    let reference = || vec![owner_ref(&owner, true)];
    create(&api, &in_wave(config_map("first", reference()), "2")).await;
    create(&api, &in_wave(config_map("second", reference()), "1")).await;
    create(&api, &config_map("last", reference())).await;
    let plan = plan(ns, "configmap/owner", &["--cascade", "foreground"]);
    let (want, by) = match mode() {
        "standalone" => ([1, 2, 3], "syncgc"),
        _ => ([1, 1, 1], "kubernetes"),
    };
    let names = ["first", "second", "last"];
    assert_eq!(
        waves(&plan),
        names
            .iter()
            .zip(want)
            .map(|(n, w)| ((*n).to_owned(), w))
            .collect(),
        "{plan:#}"
    );
    for entry in plan["delete"].as_array().unwrap() {
        assert_eq!(entry["deletedBy"], by, "{plan:#}");
    }
    let going = Going::record(&api).await;
    super::delete(&api, "owner", &DeleteParams::foreground()).await;
    settled(&api, &plan, &names).await;
    eventually("the owner goes", WAIT, || gone(&api, "owner")).await;
    if mode() == "standalone" {
        going.follows(&plan, &[("first", "second"), ("second", "last")]);
    } else {
        going.follows(&plan, &[]);
    }
}

/// A cluster-scoped object (a ClusterRole) naming a namespaced owner with `blockOwnerDeletion`,
/// beside a namespaced dependent. Neither collector collects it. Kubernetes' collector links it
/// by uid: it holds the owner's foreground deletion until it goes, and `orphan` removes its
/// reference; syncgc does not take it for a dependent.
pub async fn a_cluster_scoped_dependent_of_a_namespaced_owner(ns: &TestNamespace) {
    let api = ns.api::<ConfigMap>();
    let roles = Api::<ClusterRole>::all(ns.client.clone());
    let kubernetes = mode() == "cooperative";
    for cascade in ["foreground", "orphan"] {
        let owner = create(&api, &config_map(&format!("{cascade}-owner"), vec![])).await;
        create(
            &api,
            &config_map(&format!("{cascade}-d"), vec![owner_ref(&owner, true)]),
        )
        .await;
        let role: ClusterRole = serde_json::from_value(json!({ "metadata": {
            "name": format!("{}-{cascade}", ns.name),
            "ownerReferences": [owner_ref(&owner, true)] } }))
        .unwrap();
        let role = roles.create(&PostParams::default(), &role).await.unwrap();
        let role = role.name_any();
        let _role = ClusterRoleGone(role.clone());
        let object = format!("configmap/{cascade}-owner");
        let plan = plan(ns, &object, &["--cascade", cascade]);
        let dependent = format!("{cascade}-d");
        if cascade == "foreground" {
            assert_eq!(names(&plan, "delete"), set(&[&dependent]), "{plan:#}");
            assert_eq!(names(&plan, "keep"), set(&[&role]), "{plan:#}");
            assert_eq!(plan["goes"], !kubernetes, "{plan:#}");
            if kubernetes {
                let held = &plan["heldBy"][0];
                assert_eq!(held["name"], "foregroundDeletion", "{plan:#}");
                assert_eq!(held["waitsFor"][0]["name"], role.as_str(), "{plan:#}");
            }
        } else {
            let orphaned = if kubernetes {
                set(&[&dependent, &role])
            } else {
                set(&[&dependent])
            };
            assert_eq!(names(&plan, "orphan"), orphaned, "{plan:#}");
        }
        let params = match cascade {
            "foreground" => DeleteParams::foreground(),
            _ => DeleteParams::orphan(),
        };
        let owner = format!("{cascade}-owner");
        super::delete(&api, &owner, &params).await;
        if cascade == "foreground" {
            eventually("the namespaced dependent goes", WAIT, || {
                gone(&api, &dependent)
            })
            .await;
            if kubernetes {
                // Held for good: long enough for a collector to have let it go.
                tokio::time::sleep(Duration::from_secs(3)).await;
                assert!(
                    being_deleted(&api, &owner).await.is_some(),
                    "Kubernetes' collector holds the owner for the ClusterRole"
                );
                roles.delete(&role, &DeleteParams::default()).await.unwrap();
            }
            eventually("the owner goes", WAIT, || gone(&api, &owner)).await;
            if !kubernetes {
                assert!(
                    exists(&roles, &role).await,
                    "the ClusterRole is not collected"
                );
            }
        } else {
            eventually("the owner goes", WAIT, || gone(&api, &owner)).await;
            let references = || async { roles.get(&role).await.unwrap().owner_references().len() };
            if kubernetes {
                eventually("the ClusterRole loses its reference", WAIT, || async {
                    (references().await == 0).then_some(())
                })
                .await;
            } else {
                assert_eq!(references().await, 1, "syncgc leaves the reference");
            }
        }
    }
}

/// A dependent whose reference names its owner at an apiVersion that is not served (`v9` of
/// the core group), beside one with a good reference. syncgc looks the owner up by group and
/// kind and collects both; Kubernetes' collector cannot map `v9` and keeps that one for good.
pub async fn a_reference_at_a_version_not_served(ns: &TestNamespace) {
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &config_map("owner", vec![])).await;
    let mut unserved = owner_ref(&owner, false);
    unserved.api_version = "v9".to_owned();
    create(&api, &config_map("unserved", vec![unserved])).await;
    create(&api, &config_map("good", vec![owner_ref(&owner, false)])).await;
    let plan = plan(ns, "configmap/owner", &[]);
    let kubernetes = mode() == "cooperative";
    if kubernetes {
        assert_eq!(names(&plan, "delete"), set(&["good"]), "{plan:#}");
        assert_eq!(names(&plan, "keep"), set(&["unserved"]), "{plan:#}");
    } else {
        assert_eq!(
            names(&plan, "delete"),
            set(&["good", "unserved"]),
            "{plan:#}"
        );
    }
    super::delete(&api, "owner", &DeleteParams::default()).await;
    eventually("the good dependent goes", WAIT, || gone(&api, "good")).await;
    if kubernetes {
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            exists(&api, "unserved").await,
            "Kubernetes' collector keeps it"
        );
    } else {
        eventually("the other goes", WAIT, || gone(&api, "unserved")).await;
    }
}

/// The names `names`, as a plan lists them.
pub fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// Deletes the ClusterRole named when dropped.
struct ClusterRoleGone(String);

impl Drop for ClusterRoleGone {
    fn drop(&mut self) {
        let name = self.0.clone();
        super::cleanup(move |client| async move {
            Api::<ClusterRole>::all(client)
                .delete(&name, &DeleteParams::default())
                .await?;
            Ok(())
        });
    }
}

/// The plan tests every mode runs, each given a namespace by the including file's
/// `namespace(test)`: tests/cooperative/plan.rs (beside Kubernetes' collector) and
/// tests/standalone_gc.rs.
#[macro_export]
macro_rules! plans_in_this_mode {
    () => {
        /// Every shape of data (tests/support/plan.rs), each in its own namespace.
        #[tokio::test]
        async fn every_shape_goes_as_planned() {
            for shape in support::plan::SHAPES {
                let ns = namespace(&format!("plan-{}", shape.name)).await;
                support::plan::as_planned(&ns, shape).await;
            }
        }

        #[tokio::test]
        async fn the_deletion_order_of_a_foreground_owner() {
            let ns = namespace("plan-fg-order").await;
            support::plan::the_deletion_order_of_a_foreground_owner(&ns).await;
        }

        #[tokio::test]
        async fn a_cluster_scoped_dependent_of_a_namespaced_owner() {
            let ns = namespace("plan-cluster-scoped").await;
            support::plan::a_cluster_scoped_dependent_of_a_namespaced_owner(&ns).await;
        }

        #[tokio::test]
        async fn a_reference_at_a_version_not_served() {
            let ns = namespace("plan-unserved").await;
            support::plan::a_reference_at_a_version_not_served(&ns).await;
        }

        #[tokio::test]
        async fn foreground_and_orphan_go_as_planned() {
            support::plan::foreground_and_orphan(&namespace("plan-cascade").await).await;
        }
    };
}

/// One ConfigMap of a [`Shape`].
pub struct Object {
    pub name: &'static str,
    /// Its owners, by name (made before it), each with `blockOwnerDeletion`.
    pub owners: &'static [(&'static str, bool)],
    /// Opted in: armed by the webhook.
    pub armed: bool,
    /// Carries a finalizer of another controller ([`super::HOLD`]).
    pub held: bool,
    /// Its `syncgc.io/deletion-order`.
    pub order: Option<&'static str>,
}

/// A ConfigMap of a shape, with nothing but its name and owners.
pub const fn object(name: &'static str, owners: &'static [(&'static str, bool)]) -> Object {
    Object {
        name,
        owners,
        armed: false,
        held: false,
        order: None,
    }
}

/// A tree as data, in the upstream tests' step style: the objects, made in order, and the
/// DELETE of one of them with a `--cascade` (none: kubectl's default).
pub struct Shape {
    pub name: &'static str,
    pub objects: &'static [Object],
    pub delete: &'static str,
    pub cascade: Option<&'static str>,
}

/// The shapes every mode runs through [`as_planned`]; a new one needs only its data.
pub const SHAPES: &[Shape] = &[
    Shape {
        name: "chain",
        objects: &[
            object("owner", &[]),
            object("a", &[("owner", true)]),
            object("b", &[("a", false)]),
            object("c", &[("owner", false)]),
        ],
        delete: "owner",
        cascade: None,
    },
    Shape {
        name: "foreground-chain",
        objects: &[
            object("owner", &[]),
            object("a", &[("owner", true)]),
            object("a1", &[("a", true)]),
            object("c", &[("owner", false)]),
        ],
        delete: "owner",
        cascade: Some("foreground"),
    },
    Shape {
        name: "held-below",
        objects: &[
            object("owner", &[]),
            object("a", &[("owner", true)]),
            Object {
                held: true,
                ..object("held", &[("a", true)])
            },
            object("held-child", &[("held", true)]),
        ],
        delete: "owner",
        cascade: Some("foreground"),
    },
    Shape {
        name: "armed-siblings",
        objects: &[
            Object {
                armed: true,
                ..object("owner", &[])
            },
            object("x", &[("owner", true)]),
            object("x1", &[("x", true)]),
            object("y", &[("owner", false)]),
        ],
        delete: "owner",
        cascade: None,
    },
    Shape {
        name: "orphan",
        objects: &[
            object("owner", &[]),
            object("d", &[("owner", true)]),
            object("d1", &[("d", true)]),
        ],
        delete: "owner",
        cascade: Some("orphan"),
    },
    Shape {
        name: "two-owners",
        objects: &[
            object("owner", &[]),
            object("other", &[]),
            object("shared", &[("owner", true), ("other", false)]),
            object("only", &[("owner", true)]),
        ],
        delete: "owner",
        cascade: Some("foreground"),
    },
    Shape {
        name: "armed-order",
        objects: &[
            Object {
                armed: true,
                ..object("owner", &[])
            },
            Object {
                order: Some("1"),
                ..object("first", &[("owner", true)])
            },
            object("then", &[("owner", true)]),
            object("then-child", &[("then", true)]),
        ],
        delete: "owner",
        cascade: None,
    },
];

/// Makes `shape` in `ns`, plans its DELETE, sends it, and holds every object's fate against
/// the plan: what it deletes is gone, what it says stays being deleted does, what it orphans
/// loses its reference, the rest lives; the object deleted goes or stays as it says; each
/// owner deleted with a dependent starts going before it, in an earlier wave; each DELETE has
/// the planned propagation. Then lets the held ones go.
pub async fn as_planned(ns: &TestNamespace, shape: &Shape) {
    let api = ns.api::<ConfigMap>();
    let mut made: BTreeMap<&str, ConfigMap> = BTreeMap::new();
    for object in shape.objects {
        let owners = object
            .owners
            .iter()
            .map(|(owner, block)| owner_ref(&made[owner], *block))
            .collect();
        let mut cm = if object.armed {
            opted_in(object.name, owners, &[])
        } else {
            config_map(object.name, owners)
        };
        if object.held {
            cm = with_finalizer(cm, HOLD);
        }
        if let Some(order) = object.order {
            cm = in_wave(cm, order);
        }
        made.insert(object.name, create(&api, &cm).await);
    }
    let cascade: Vec<&str> = shape
        .cascade
        .iter()
        .flat_map(|c| ["--cascade", c])
        .collect();
    let plan = plan(ns, &format!("configmap/{}", shape.delete), &cascade);
    let going = Going::record(&api).await;
    let params = match shape.cascade {
        Some("foreground") => DeleteParams::foreground(),
        Some("orphan") => DeleteParams::orphan(),
        _ => DeleteParams::default(),
    };
    super::delete(&api, shape.delete, &params).await;
    let all: Vec<&str> = shape
        .objects
        .iter()
        .map(|o| o.name)
        .filter(|n| *n != shape.delete)
        .collect();
    let (name, mode) = (shape.name, mode());
    settled(&api, &plan, &all).await;
    if plan["goes"] == true {
        eventually(&format!("{name}: the object goes"), WAIT, || {
            gone(&api, shape.delete)
        })
        .await;
    } else {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            being_deleted(&api, shape.delete).await.is_some(),
            "{name} ({mode}): the object stays being deleted, as planned: {plan:#}"
        );
    }
    for orphan in names(&plan, "orphan") {
        eventually(
            &format!("{name}: {orphan} loses its reference"),
            WAIT,
            || async { (!owners(&api, &orphan).await.contains(shape.delete)).then_some(()) },
        )
        .await;
    }
    let deleted = names(&plan, "delete");
    let pairs: Vec<(&str, &str)> = shape
        .objects
        .iter()
        .flat_map(|o| o.owners.iter().map(move |(owner, _)| (*owner, o.name)))
        .filter(|(owner, dependent)| deleted.contains(*owner) && deleted.contains(*dependent))
        .collect();
    going.follows(&plan, &pairs);
    for object in shape.objects.iter().filter(|o| o.held) {
        clear_finalizers(&api, object.name).await;
    }
}
