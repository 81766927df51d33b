//! Two replicas, one Lease: exactly one leads; when it dies, the other takes over and finishes
//! the synchronous deletion the first had started; one that does not lead stops at SIGTERM.
//! And a Lease that cannot be written (its namespace missing) keeps `/readyz` failing with the
//! reason until the namespace exists. One test at a time ([`support::process::alone`]): a
//! replica that leads collects every armed owner, so one test's replicas would act in the
//! other's namespace.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};

use support::process::{Syncgc, WEBHOOK_LABEL};
use support::{
    TestNamespace, being_deleted, clear_finalizers, delete, eventually, gone, opted_in,
    owner_and_held,
};

fn leads(syncgc: &Syncgc) -> bool {
    syncgc.metric("syncgc_leader") == 1.0
}

#[tokio::test]
async fn one_replica_leads_and_another_takes_over_when_it_dies() {
    let _alone = support::process::alone().await;
    let lease = format!("syncgc-le-{}", std::process::id());
    let (first, second) = tokio::task::spawn_blocking({
        let lease = lease.clone();
        move || {
            // Same lease and webhook registration name: two replicas of one deployment.
            let first = Syncgc::start(&lease, &[]);
            let second = Syncgc::start(&lease, &[]);
            (first, second)
        }
    })
    .await
    .unwrap();

    let one_leader = eventually(
        "exactly one replica leads",
        Duration::from_secs(30),
        || async { (leads(&first) != leads(&second)).then_some(()) },
    );
    one_leader.await;

    // A replica that does not lead, its workers started and waiting for the lease, stops at
    // SIGTERM (the election goes on until the collector has stopped).
    let mut third = tokio::task::spawn_blocking({
        let lease = lease.clone();
        move || Syncgc::start(&lease, &[])
    })
    .await
    .unwrap();
    eventually(
        "the third replica's collector has listed everything",
        Duration::from_secs(30),
        || async {
            (third.metric_where("syncgc_ready", "condition=\"collector\"") == 1.0).then_some(())
        },
    )
    .await;
    assert!(!leads(&third));
    tokio::task::spawn_blocking(move || third.stop())
        .await
        .unwrap();

    let (leader, follower) = if leads(&first) {
        (first, second)
    } else {
        (second, first)
    };
    let mut leader = leader;

    let client = support::client().await;
    let ns =
        TestNamespace::with_labels(&client, "leader_election", &[(WEBHOOK_LABEL, &lease)]).await;
    let api = ns.api::<ConfigMap>();
    owner_and_held(&api, &opted_in("owner", vec![], &[])).await;
    delete(&api, "owner", &DeleteParams::background()).await;
    eventually(
        "the leader deletes the dependent",
        Duration::from_secs(30),
        || being_deleted(&api, "held"),
    )
    .await;

    tokio::task::spawn_blocking(move || leader.kill())
        .await
        .unwrap();
    eventually(
        "the follower takes over",
        Duration::from_secs(30),
        || async { leads(&follower).then_some(()) },
    )
    .await;
    clear_finalizers(&api, "held").await;
    eventually(
        "the new leader releases the owner",
        Duration::from_secs(30),
        || gone(&api, "owner"),
    )
    .await;
}

/// Deletes the namespace named when dropped (also when the test fails).
struct DeleteNamespace(String);

impl Drop for DeleteNamespace {
    fn drop(&mut self) {
        let name = self.0.clone();
        support::cleanup(move |client| async move {
            match Api::<Namespace>::all(client)
                .delete(&name, &DeleteParams::background())
                .await
            {
                Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
                Err(err) => Err(anyhow::anyhow!("deleting namespace {name}: {err}")),
            }
        });
    }
}

#[tokio::test]
async fn a_missing_lease_namespace_keeps_readyz_failing_with_the_reason_until_it_exists() {
    let _alone = support::process::alone().await;
    let name = format!("syncgc-le-ns-{}", std::process::id());
    let lease_namespace = format!("t-lease-ns-{:x}", std::process::id());
    let _delete = DeleteNamespace(lease_namespace.clone());
    let mut syncgc = tokio::task::spawn_blocking({
        let (name, lease_namespace) = (name.clone(), lease_namespace.clone());
        move || Syncgc::spawn(&name, &["--leader-election-namespace", &lease_namespace])
    })
    .await
    .unwrap();
    // docs/observability.md's sample, for syncgc's namespace.
    let reason = support::samples::line("docs/observability.md", "leader-election: the Lease")
        .replace("\"syncgc-system\"", &format!("\"{lease_namespace}\""))
        + "\n";
    let readyz = || syncgc.get("/readyz").expect("/readyz answers");

    eventually(
        "/readyz names the missing namespace",
        Duration::from_secs(60),
        || async { readyz().1.contains(&reason).then_some(()) },
    )
    .await;
    eventually(
        "every watch has listed",
        Duration::from_secs(60),
        || async { (syncgc.metric("syncgc_ready{condition=\"collector\"}") == 1.0).then_some(()) },
    )
    .await;
    // It stays so, retry after retry: the reason is all that holds readiness back.
    for _ in 0..10 {
        assert_eq!(readyz(), (503, reason.clone()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!leads(&syncgc), "it leads without a Lease");
    assert_eq!(
        syncgc.metric("syncgc_ready{condition=\"leader-election\"}"),
        0.0
    );
    let errors = "syncgc_leader_election_errors_total{reason=\"namespace_missing\"}";
    assert!(
        syncgc.metric(errors) >= 3.0,
        "{errors} {}",
        syncgc.metric(errors)
    );

    let client = support::client().await;
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(lease_namespace.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client)
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    eventually(
        "/readyz answers 200 once the namespace exists",
        Duration::from_secs(30),
        || async { (readyz() == (200, "ok\n".to_owned())).then_some(()) },
    )
    .await;
    eventually("it leads", Duration::from_secs(30), || async {
        leads(&syncgc).then_some(())
    })
    .await;
    assert_eq!(
        syncgc.metric("syncgc_ready{condition=\"leader-election\"}"),
        1.0
    );

    // Logged once as an error, however many retries failed, and once when it recovered.
    let log = std::fs::read_to_string(std::env::temp_dir().join(format!("{name}.log"))).unwrap();
    let logged = |text: &str| log.lines().filter(|l| l.contains(text)).count();
    let missing = format!("the Lease namespace \"{lease_namespace}\" does not exist");
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("ERROR") && l.contains(&missing))
            .count(),
        1,
        "{log}"
    );
    assert_eq!(logged("leader election works again"), 1, "{log}");
    tokio::task::spawn_blocking(move || syncgc.kill())
        .await
        .unwrap();
}
