//! A real operator's teardown, on the real node: an operator Pod (`examples/finalizer-operator.rs`)
//! removes its finalizer with its own ServiceAccount and RBAC, and syncgc holds what it needs
//! while the objects carrying that finalizer are being deleted — by the namespace controller,
//! or during an uninstall in Helm's order. The tests never touch a finalizer of the objects
//! under test until the control case has stranded them. Apart from `tests/guards.rs`: the
//! cluster-scoped objects these tests delete reach every syncgc registered at the time.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use support::guards::{self, labelled};
use support::operator::{HANDLED, Operator};
use support::{TestNamespace, config_map, create, eventually, gone};

const WAIT: Duration = Duration::from_secs(60);

async fn namespace(test: &str) -> TestNamespace {
    support::process::served_namespace(test).await
}

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
                ("SYNCGC_IMAGE_REF", support::operator::IMAGE),
            ],
        )
    })
}

/// A real operator in `ns` (see [`Operator::manifests`]), which removes [`HANDLED`] itself.
async fn operator(ns: &TestNamespace, handles: bool, cluster: bool) {
    let operator = Operator { handles, cluster };
    for object in operator.manifests(&ns.name, operator_image()) {
        support::kubectl(&["apply", "-f", "-"], Some(&object.to_string()));
    }
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

/// Starts the operator in `home` (handling its finalizer cluster-wide with `cluster`), shows
/// that it acts (a probe object in `ns` carrying its finalizer goes once deleted) and gives `ns`
/// 20 ConfigMaps carrying it; with `handles`, waits until the syncgc serving the tests has read
/// what the operator needs (its account, token, binding and role at least).
async fn operator_and_its_objects(
    home: &TestNamespace,
    ns: &TestNamespace,
    handles: bool,
    cluster: bool,
) {
    support::gc::service_account_ready(home).await;
    operator(home, handles, cluster).await;
    let api = ns.api::<ConfigMap>();
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
    if handles {
        let syncgc = tokio::task::spawn_blocking(support::process::shared)
            .await
            .unwrap();
        eventually("syncgc has read what the operator needs", WAIT, || async {
            (syncgc.metric("syncgc_guard_needed_objects") >= 4.0).then_some(())
        })
        .await;
    }
}

/// Removes the finalizers of what is left in `api`'s namespace: the cleanup of a control case,
/// for the next tests. Returns how many objects carried [`HANDLED`].
async fn clear_stranded(api: &Api<ConfigMap>) -> usize {
    let left = api.list_metadata(&ListParams::default()).await.unwrap();
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
    left.items
        .iter()
        .filter(|o| o.finalizers().iter().any(|f| f == HANDLED))
        .count()
}

/// A namespace holding a real operator (its own account and Role, removing its finalizer
/// itself) and 20 ConfigMaps carrying that finalizer is deleted; returns whether the
/// namespace went with nobody but the operator removing a finalizer. Without the annotation,
/// the namespace controller deletes the operator's account, token and binding in its first
/// seconds, and the operator can no longer act.
async fn delete_namespace_around_an_operator(test: &str, handles: bool) -> bool {
    let ns = namespace(test).await;
    operator_and_its_objects(&ns, &ns, handles, false).await;
    let api = ns.api::<ConfigMap>();
    // The plan of the namespace says whether anything would remove the finalizer.
    let plan = support::plan::plan(&ns, &format!("namespace/{}", ns.name), &[]);
    let unhandled = plan["unhandledFinalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if handles {
        assert!(unhandled.is_empty(), "{plan:#}");
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
        let pods = operator_pods(&ns).await;
        let stranded = clear_stranded(&api).await;
        eprintln!(
            "{test}: the namespace stayed with {stranded} object(s) carrying {HANDLED}; pods {pods:?}"
        );
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

/// An operator that handles its finalizer cluster-wide (a ClusterRole and its binding) is
/// uninstalled in Helm's order — its Deployment, ClusterRoleBinding, ClusterRole and
/// ServiceAccount, each DELETE sent once and a refusal left as Helm leaves it — while the
/// namespace of 20 ConfigMaps carrying its finalizer is being deleted; returns whether that
/// namespace went with nobody but the operator removing a finalizer.
async fn uninstall_an_operator_in_helms_order(test: &str, handles: bool) -> bool {
    let home = namespace(&format!("{test}_home")).await;
    let ns = namespace(test).await;
    operator_and_its_objects(&home, &ns, handles, true).await;
    let api = ns.api::<ConfigMap>();
    let (_, _, name) = Operator {
        handles,
        cluster: true,
    }
    .rbac(&home.name);
    let bindings = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(ns.client.clone());
    if handles {
        eventually(
            "the operator's ClusterRoleBinding is selected",
            WAIT,
            || async { labelled(&bindings.get(&name).await.ok()?).then_some(()) },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    let namespaces = Api::<Namespace>::all(ns.client.clone());
    namespaces
        .delete(&ns.name, &DeleteParams::background())
        .await
        .unwrap();
    let roles = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(ns.client.clone());
    let deployments = home.api::<k8s_openapi::api::apps::v1::Deployment>();
    let accounts = home.api::<k8s_openapi::api::core::v1::ServiceAccount>();
    // As Helm: each DELETE once, a refusal kept, what is gone already skipped.
    let uninstall = || async {
        let params = DeleteParams::background();
        let gone_or = |result: Result<Option<String>, kube::Error>| match result {
            Ok(refused) => refused,
            Err(kube::Error::Api(status)) if status.code == 404 => None,
            Err(err) => panic!("uninstalling: {err}"),
        };
        vec![
            gone_or(guards::try_refusal(&deployments, "operator", &params).await),
            gone_or(guards::try_refusal(&bindings, &name, &params).await),
            gone_or(guards::try_refusal(&roles, &name, &params).await),
            gone_or(guards::try_refusal(&accounts, "operator", &params).await),
        ]
    };
    let refused = uninstall().await;
    let went = eventually_or_not(Duration::from_secs(90), || gone(&namespaces, &ns.name)).await;
    let stranded = if went { 0 } else { clear_stranded(&api).await };
    eprintln!(
        "{test}: refused {} of the uninstall's 4 DELETEs; the namespace {}",
        refused.iter().flatten().count(),
        if went {
            "went".to_owned()
        } else {
            format!("stayed with {stranded} object(s) carrying {HANDLED}")
        }
    );
    // What the hold kept goes when the uninstall is run again.
    eventually("a second uninstall goes through", WAIT, || async {
        uninstall().await.iter().all(Option::is_none).then_some(())
    })
    .await;
    went
}

/// An operator that handles its finalizer cluster-wide, uninstalled in Helm's order while its
/// resources' namespace is being deleted, keeps its Deployment, account, ClusterRoleBinding and
/// ClusterRole until it has removed the finalizers with them; the control strands.
#[tokio::test]
async fn a_cluster_wide_operator_uninstalled_in_helms_order_finishes_first() {
    assert!(
        uninstall_an_operator_in_helms_order("helm_handler", true).await,
        "the resources of a cluster-wide handler strand when it is uninstalled"
    );
    assert!(
        !uninstall_an_operator_in_helms_order("helm_no_handler", false).await,
        "without the annotation, the uninstall takes the operator's credentials away"
    );
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
