//! A leader frozen past its lease writes nothing once another replica has begun to lead: two
//! replicas as the user `syncgc-controller`, whose writes kube-apiserver's audit log records
//! with each replica's User-Agent (`hack/cluster.sh`). The leader is stopped (SIGSTOP) while
//! its workers hold items (a cascade at five requests a second), the other takes over and
//! finishes the work, the first is let go on — and the audit log shows no write from it after
//! the second's first write.

use crate::support;

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::DeleteParams;

use support::process::Syncgc;
use support::{TestNamespace, create, delete, eventually, gone, opted_in, tree};

const WAIT: Duration = Duration::from_secs(120);

fn leads(syncgc: &Syncgc) -> bool {
    syncgc.metric("syncgc_leader") == 1.0
}

/// A write kube-apiserver's audit log recorded (`uri` and `agent` are for the failure
/// messages).
#[derive(Debug)]
#[allow(dead_code)]
struct Write {
    received: Timestamp,
    verb: String,
    uri: String,
    agent: String,
}

/// kube-apiserver's audit log of syncgc-controller's writes (`hack/cluster.sh`).
fn audit_log() -> String {
    let log = std::path::Path::new(&support::kubeconfig_path()).with_file_name("logs/audit.log");
    std::fs::read_to_string(&log).unwrap_or_else(|err| {
        panic!(
            "{}: {err}: kube-apiserver runs without its audit log; start the control plane again (hack/cluster.sh down; hack/cluster.sh up)",
            log.display()
        )
    })
}

/// A write of syncgc-controller's made now, which the audit log records: the name of the
/// ConfigMap it created.
async fn mark() -> String {
    let config = syncgc::api::config(Some(support::controller_kubeconfig_path().as_ref()))
        .await
        .unwrap();
    let client = syncgc::api::client(config).unwrap();
    let name = format!("fencing-mark-{}", std::process::id());
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    let _ = api.delete(&name, &DeleteParams::default()).await;
    create(&api, &support::config_map(&name, vec![])).await;
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    name
}

/// The writes the audit log holds from the replica whose process id is `pid` (its
/// User-Agent is `syncgc/VERSION (HOST-PID)`, followed by the cause of a cascade's request).
fn writes_of(pid: &str) -> Vec<Write> {
    let text = audit_log();
    let agent = format!("-{pid})");
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| {
            event["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("syncgc/") && a.contains(&agent))
        })
        .map(|event| Write {
            received: event["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse().ok())
                .expect("requestReceivedTimestamp"),
            verb: event["verb"].as_str().unwrap_or_default().to_owned(),
            uri: event["requestURI"].as_str().unwrap_or_default().to_owned(),
            agent: event["userAgent"].as_str().unwrap_or_default().to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn a_leader_frozen_past_its_lease_writes_nothing_after_the_next_leader_begins() {
    let _alone = support::process::alone().await;
    let lease = format!("syncgc-fence-{}", std::process::id());
    let controller = support::controller_kubeconfig_path();
    let args = ["--qps", "5", "--burst", "1"];
    let (first, second) = tokio::task::spawn_blocking({
        let lease = lease.clone();
        move || {
            let first = Syncgc::start_as(&lease, &controller, &args);
            let second = Syncgc::start_as(&lease, &controller, &args);
            (first, second)
        }
    })
    .await
    .unwrap();
    eventually("exactly one replica leads", WAIT, || async {
        (leads(&first) != leads(&second)).then_some(())
    })
    .await;
    let (leader, follower) = if leads(&first) {
        (first, second)
    } else {
        (second, first)
    };

    let client = support::client().await;
    let ns = TestNamespace::new(&client, "fencing").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    let dependents = tree(&api, &owner, &[("d", 40)], false).await;
    eventually("the leader arms the owner", WAIT, || async {
        let owner = api.get("owner").await.ok()?;
        (!owner.finalizers().is_empty()).then_some(())
    })
    .await;
    delete(&api, "owner", &DeleteParams::background()).await;
    eventually("the leader deletes dependents", WAIT, || async {
        let left = api.list(&Default::default()).await.ok()?.items.len();
        (left < dependents[0].len() - 2).then_some(())
    })
    .await;

    // Frozen while its workers hold items, past its lease.
    leader.pause();
    let paused = Timestamp::now();
    eventually("the follower takes over", WAIT, || async {
        leads(&follower).then_some(())
    })
    .await;
    eventually("the new leader finishes the cascade", WAIT, || {
        gone(&api, "owner")
    })
    .await;

    leader.resume();
    eventually(
        "the first replica, let go on, knows it does not lead and was refused writes",
        WAIT,
        || async {
            (!leads(&leader)
                && leader.metric_where("syncgc_queue_retries_total", "not_leading") > 0.0)
                .then_some(())
        },
    )
    .await;

    // The audit log is written in batches, in order: once a write made now is in it, so is
    // everything before.
    let marker = mark().await;
    eventually("the audit log has caught up", WAIT, || async {
        audit_log().contains(&marker).then_some(())
    })
    .await;
    let before = writes_of(leader.pid());
    assert!(
        before
            .iter()
            .any(|w| w.received < paused && w.verb == "delete"),
        "the first replica was deleting before it froze: {before:#?}"
    );
    let next = writes_of(follower.pid());
    let first_write = next
        .iter()
        .filter(|w| w.received > paused)
        .map(|w| w.received)
        .min()
        .expect("the second replica wrote after the first froze");
    assert!(
        next.iter().any(|w| w.verb == "delete"),
        "the second replica deleted: {next:#?}"
    );
    let late: Vec<&Write> = before
        .iter()
        .filter(|w| w.received >= first_write)
        .collect();
    assert!(
        late.is_empty(),
        "written by the first replica after the second's first write ({first_write}): {late:#?}"
    );
}
