//! The cause of every collected object: the real apiserver calls the webhook for the DELETE of
//! an armed owner, kube-controller-manager's collector and syncgc (as the user
//! `syncgc-controller`, whose writes kube-apiserver's audit log records with their User-Agent)
//! collect its tree, which syncgc follows, and `syncgc explain --why-deleted` (through syncgc's API,
//! which the aggregation layer serves) follows any of its objects back to the DELETE someone sent.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use serde_json::Value;

use support::process::{Syncgc, TEST_TIMEOUTS, WEBHOOK_LABEL};
use support::{TestNamespace, config_map, create, eventually, gone, opted_in, owner_ref};

const WAIT: Duration = Duration::from_secs(60);

/// `syncgc explain --why-deleted OBJECT -n NS -o json`, which asks syncgc's API through the
/// apiserver: the report, or the exit code and standard error.
fn why_deleted(ns: &str, object: &str) -> Result<Value, (i32, String)> {
    support::syncgc_json(&["explain", "--why-deleted", object, "-n", ns, "-o", "json"])
}

/// kube-apiserver's audit log of syncgc-controller's writes (`hack/cluster.sh`).
fn audit_log() -> String {
    let log = std::path::Path::new(&support::kubeconfig_path()).with_file_name("logs/audit.log");
    std::fs::read_to_string(&log).unwrap_or_default()
}

#[tokio::test]
async fn every_collected_object_names_the_delete_it_comes_from() {
    let _alone = support::process::alone().await;
    support::kcm(support::Kcm::Gc);
    let name = format!("syncgc-causes-{}", std::process::id());
    let controller = support::controller_kubeconfig_path();
    let syncgc = tokio::task::spawn_blocking({
        let name = name.clone();
        let args: Vec<&str> = TEST_TIMEOUTS
            .iter()
            .copied()
            .chain(["--debug-graph"])
            .collect();
        move || Syncgc::start_as(&name, &controller, &args)
    })
    .await
    .unwrap();
    support::served_api::register(&syncgc).await;
    let client = support::client().await;
    let ns = TestNamespace::with_labels(&client, "causes", &[(WEBHOOK_LABEL, &syncgc.name)]).await;
    let api: Api<ConfigMap> = ns.api();

    // An armed owner (syncgc deletes its dependents) over three dependents, one of which owns
    // a fourth object (Kubernetes' collector deletes it once its owner is gone).
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    let mut middle = None;
    for n in 0..3 {
        let dependent = create(
            &api,
            &config_map(&format!("d{n}"), vec![owner_ref(&owner, true)]),
        )
        .await;
        middle.get_or_insert(dependent);
    }
    let middle = middle.unwrap();
    create(&api, &config_map("leaf", vec![owner_ref(&middle, false)])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the tree is gone", WAIT, || async {
        for name in ["owner", "d0", "d1", "d2", "leaf"] {
            gone(&api, name).await?;
        }
        Some(())
    })
    .await;

    // The leaf: deleted (by a collector) because d0 went, because owner went, which the
    // test's user deleted.
    let why = why_deleted(&ns.name, "configmap/leaf").expect("the leaf's deletion is recorded");
    let chain = why["chain"].as_array().unwrap();
    let names: Vec<&str> = chain.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["leaf", "d0", "owner"], "{why:#}");
    assert_eq!(why["incomplete"], false);
    let by = |i: usize| chain[i]["by"].as_str().unwrap().to_owned();
    let sample: Value =
        serde_json::from_str(include_str!("../fixtures/explain/why-deleted-leaf.json")).unwrap();
    // Kubernetes' collector's DELETE of the leaf does not reach syncgc (no guard applies):
    // the leaf is recorded as a step of the cascade syncgc followed from the owner, deleted by
    // a collector as docs/commands.md's sample shows it (or by syncgc, when it went first).
    assert!(
        chain[0]["by"] == sample["chain"][0]["by"] || by(0) == "syncgc",
        "{why:#}"
    );
    assert_eq!(
        by(1),
        "syncgc",
        "syncgc deleted the armed owner's dependents"
    );
    let user = by(2);
    assert!(!user.is_empty() && user != "syncgc-controller", "{why:#}");
    // docs/commands.md's sample is printed from a chain of this shape (its test renders it):
    // the same fields, and syncgc's steps by the same name.
    let fields = |e: &Value| -> Vec<String> { e.as_object().unwrap().keys().cloned().collect() };
    for (real, shown) in chain.iter().zip(sample["chain"].as_array().unwrap()) {
        assert_eq!(fields(real), fields(shown), "{why:#}");
    }
    assert_eq!(sample["chain"][1]["by"], chain[1]["by"], "{why:#}");
    assert_eq!(chain[2]["uid"], owner.uid().unwrap());

    // syncgc's DELETEs name the root and its user in their User-Agent, which the audit log
    // records.
    let named = format!(
        "cause: root=ConfigMap/{}/owner uid={} user={user}",
        ns.name,
        owner.uid().unwrap()
    );
    let deletes = eventually("the audit log has syncgc's DELETEs", WAIT, || async {
        let log = audit_log();
        let deletes: Vec<Value> = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| {
                e["verb"] == "delete"
                    && e["objectRef"]["namespace"] == ns.name.as_str()
                    && e["userAgent"]
                        .as_str()
                        .is_some_and(|a| a.starts_with("syncgc/"))
            })
            .collect();
        (deletes.len() >= 3).then_some(deletes)
    })
    .await;
    for delete in &deletes {
        let agent = delete["userAgent"].as_str().unwrap();
        assert!(
            agent.ends_with(&named),
            "{agent:?} does not end with {named:?}"
        );
    }

    // The root gets one summary Event when the cascade ends.
    let events = eventually("the summary Event", WAIT, || async {
        let events = ns.events("SyncGCCascadeEnded").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(events.len(), 1);
    let note = events[0].note.clone().unwrap_or_default();
    assert!(note.contains("4 object(s) deleted (4 ConfigMap)"), "{note}");
    assert_eq!(
        events[0].regarding.as_ref().unwrap().name.as_deref(),
        Some("owner")
    );

    // An object never deleted is answered with why nothing is known.
    create(&api, &config_map("alive", vec![])).await;
    let (code, err) = why_deleted(&ns.name, "configmap/alive").unwrap_err();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("syncgc recorded no deletion"), "{err}");
}
