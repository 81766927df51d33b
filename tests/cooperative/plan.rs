//! `syncgc plan` against the real apiserver with Kubernetes' own garbage collector beside
//! syncgc (cooperative mode): each shape planned, then deleted, and what happened held
//! against the plan (the shapes both modes run are in tests/support/plan.rs; those of this
//! mode only, deletion waves and the propagation annotation, here); the errors of a plan; its
//! JSON documented.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DeleteParams;

use support::plan::{Going, names, owners, plan, set, settled, try_plan, waves};
use support::process::{WEBHOOK_LABEL, shared};
use support::{TestNamespace, config_map, create, eventually, gone, in_wave, opted_in, owner_ref};

const WAIT: Duration = Duration::from_secs(60);

async fn namespace(test: &str) -> TestNamespace {
    support::kcm(support::Kcm::Gc);
    let syncgc = tokio::task::spawn_blocking(shared).await.unwrap();
    support::plan::predicting(syncgc, "cooperative");
    let client = support::client().await;
    TestNamespace::with_labels(&client, test, &[(WEBHOOK_LABEL, &syncgc.name)]).await
}

#[tokio::test]
async fn an_armed_tree_goes_as_planned() {
    support::plan::a_tree(&namespace("plan-tree").await, true).await;
}

#[tokio::test]
async fn an_unarmed_tree_goes_as_planned() {
    support::plan::a_tree(&namespace("plan-unarmed").await, false).await;
}

#[tokio::test]
async fn the_deletion_order_goes_in_the_planned_waves() {
    waves_of_the_deletion_order(&namespace("plan-order").await).await;
}

crate::plans_in_this_mode!();

#[tokio::test]
async fn a_reference_from_another_namespace_is_left_out() {
    let other = namespace("plan-elsewhere").await;
    support::plan::a_reference_from_another_namespace(&namespace("plan-here").await, &other).await;
}

#[tokio::test]
async fn the_propagation_annotation_is_planned() {
    the_propagation_annotation(&namespace("plan-annotation").await).await;
}

/// A name or a kind that does not exist is an error, with a non-zero exit that says which.
#[tokio::test]
async fn a_missing_object_is_an_error() {
    let ns = namespace("plan-missing").await;
    let (code, err) = try_plan(&ns, "configmap/nothing", &[]).unwrap_err();
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("configmap/nothing not found in namespace"),
        "{err}"
    );
    let (code, err) = try_plan(&ns, "nokind/x", &[]).unwrap_err();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no kind \"nokind\""), "{err}");
    let (_, err) = try_plan(&ns, "configmap", &[]).unwrap_err();
    assert!(err.contains("KIND/NAME"), "{err}");

    // A namespace being deleted (held by an object with a finalizer of another controller).
    let maps = ns.api::<k8s_openapi::api::core::v1::ConfigMap>();
    support::create(&maps, &support::held("held", vec![])).await;
    let namespaces = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(ns.client.clone());
    namespaces
        .delete(&ns.name, &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let (code, err) = try_plan(&ns, "configmap/held", &[]).unwrap_err();
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("the namespace {} is being deleted", ns.name)),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");
    support::clear_finalizers(&maps, "held").await;
    let (code, err) =
        support::plan::try_plan_in("no-such-namespace", "configmap/x", &[]).unwrap_err();
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the namespace no-such-namespace does not exist"),
        "{err}"
    );
}

/// Every field of the JSON a plan prints is in docs/commands.md.
#[tokio::test]
async fn every_field_of_the_plan_is_documented() {
    let ns = namespace("plan-fields").await;
    let api = ns.api::<k8s_openapi::api::core::v1::ConfigMap>();
    let owner = support::create(&api, &support::opted_in("owner", vec![], &[])).await;
    let held = support::held("held", vec![support::owner_ref(&owner, true)]);
    support::create(&api, &held).await;
    let plan = plan(&ns, "configmap/owner", &[]);
    let mut fields = BTreeSet::new();
    collect(&plan, &mut fields);
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/commands.md")).unwrap();
    for field in &fields {
        assert!(
            docs.contains(&format!("`{field}`")),
            "docs/commands.md documents {field}"
        );
    }
    assert!(fields.len() > 20, "{fields:?}");
    support::clear_finalizers(&api, "held").await;
}

fn collect(value: &serde_json::Value, fields: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                fields.insert(key.clone());
                collect(value, fields);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect(v, fields)),
        _ => {}
    }
}

/// `kubectl delete --dry-run=server` of an armed owner is told what the DELETE would take
/// down, by the collector's plan of it, in warnings the apiserver passes on uncut; nothing
/// is deleted.
#[tokio::test]
async fn a_dry_run_delete_is_told_the_plan() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let ns = namespace("plan-dry-run").await;
    let maps = ns.api::<ConfigMap>();
    let owner = support::create(&maps, &support::opted_in("owner", vec![], &[])).await;
    let reference = || vec![support::owner_ref(&owner, true)];
    let other = support::create(&maps, &support::config_map("other", vec![])).await;
    // Its other owner is of a kind nobody serves: no collector can find that owner absent.
    // (Made first: the collector has it once it has the ConfigMaps made after it.)
    let mut unserved = reference();
    unserved.push(OwnerReference {
        api_version: "example.com/v1".into(),
        kind: "Nothing".into(),
        name: "x".into(),
        uid: "7a0c6a53-0000-4000-8000-000000000007".into(),
        ..Default::default()
    });
    support::create(&maps, &support::config_map("unserved", unserved)).await;
    let mut made = vec![
        support::create(&maps, &support::config_map("a", reference())).await,
        support::create(&maps, &support::held("held", reference())).await,
    ];
    let mut two = reference();
    two.push(support::owner_ref(&other, false));
    made.push(support::create(&maps, &support::config_map("shared", two)).await);
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("s".into()),
            owner_references: Some(reference()),
            ..Default::default()
        },
        ..Default::default()
    };
    let secret = support::create(&ns.api::<Secret>(), &secret).await;
    let mut uids: Vec<String> = made
        .iter()
        .map(|m| m.metadata.uid.clone().unwrap())
        .collect();
    uids.push(secret.metadata.uid.clone().unwrap());
    for uid in &uids {
        support::surface::seen(shared(), uid).await;
    }

    let out = std::process::Command::new("kubectl")
        .args([
            "delete",
            "configmap",
            "owner",
            "-n",
            &ns.name,
            "--dry-run=server",
        ])
        .env("KUBECONFIG", support::kubeconfig_path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("Warning: "))
        .collect();
    let want = [
        format!(
            "Warning: syncgc: dry run; in full: syncgc plan configmap/owner -n {}. ConfigMap {}/owner \
             (background) would delete 2 object(s) in 1 wave(s): 1 ConfigMap, 1 Secret",
            ns.name, ns.name
        ),
        "Warning: syncgc: dry run: 2 would live on with other owners, 1 would stay Terminating, held \
         by finalizers"
            .to_owned(),
        format!(
            "Warning: syncgc: dry run: ConfigMap {}/owner would stay 1m0.5s, until syncgc releases it: \
             what it waits for waits on another controller",
            ns.name
        ),
    ];
    assert_eq!(warnings, want, "{said}");
    assert!(
        support::being_deleted(&maps, "owner").await.is_none(),
        "a dry run deletes nothing"
    );
    support::clear_finalizers(&maps, "held").await;
}

/// Deletion order: an armed owner whose dependents carry `syncgc.io/deletion-order` 2, 1 and
/// none. The plan puts them in waves 1, 2, 3, and the collector deletes them in that order.
async fn waves_of_the_deletion_order(ns: &TestNamespace) {
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    let reference = || vec![owner_ref(&owner, true)];
    create(&api, &in_wave(config_map("first", reference()), "2")).await;
    create(&api, &in_wave(config_map("second", reference()), "1")).await;
    create(&api, &config_map("last", reference())).await;
    let plan = plan(ns, "configmap/owner", &[]);
    assert_eq!(
        waves(&plan),
        [("first", 1), ("second", 2), ("last", 3)]
            .map(|(n, w)| (n.to_owned(), w))
            .into(),
        "{plan:#}"
    );
    assert_eq!(plan["goes"], true, "{plan:#}");
    let going = Going::record(&api).await;
    support::delete(&api, "owner", &DeleteParams::default()).await;
    settled(&api, &plan, &["first", "second", "last"]).await;
    eventually("the owner goes", WAIT, || gone(&api, "owner")).await;
    going.follows(&plan, &[("first", "second"), ("second", "last")]);
}

/// An object's own `syncgc.io/propagation` is the propagation of its DELETE, as the webhook
/// gives it: the plan says so, and follows it.
async fn the_propagation_annotation(ns: &TestNamespace) {
    let api = ns.api::<ConfigMap>();
    let owner = create(
        &api,
        &opted_in(
            "owner",
            vec![],
            &[(syncgc::names::PROPAGATION_ANNOTATION, "Orphan")],
        ),
    )
    .await;
    create(&api, &config_map("d", vec![owner_ref(&owner, true)])).await;
    let plan = plan(ns, "configmap/owner", &[]);
    assert_eq!(plan["propagation"], "orphan", "{plan:#}");
    assert_eq!(plan["propagationFrom"], "annotation", "{plan:#}");
    assert_eq!(names(&plan, "orphan"), set(&["d"]), "{plan:#}");
    support::delete(&api, "owner", &DeleteParams::default()).await;
    eventually("the owner goes", WAIT, || gone(&api, "owner")).await;
    eventually("d loses its reference", WAIT, || async {
        owners(&api, "d").await.is_empty().then_some(())
    })
    .await;
}
