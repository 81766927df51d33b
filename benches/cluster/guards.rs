//! The guards' price, in two readings of the same run:
//!
//! 1. the webhook's added latency for a DELETE judged by the cascade limit: a server-side dry
//!    run of the DELETE of an owner with 10,000 dependents (syncgc cooperative, its webhook
//!    registered), refused by `syncgc.io/max-cascade: "100"` and passed by `"20000"` (the
//!    cascade run on a copy of the tree), against the same DELETE without a limit (nothing to
//!    judge: the guards' fast path), in turns, p50 and p99 of each;
//! 2. the collector's throughput with causes recorded ÷ without: syncgc standalone, its webhook
//!    registered for the namespace, collecting N dependents of a deleted owner, with
//!    `--record-causes` true and false in turns, medians of `SYNCGC_BENCH_REPEATS` runs;
//! 3. what the guards' selection costs and how fast it follows: with protected and limited
//!    objects present in another namespace, a namespace of 10,000 unannotated ConfigMaps
//!    deleted with syncgc's registration serving it ÷ without (in turns), and the DELETE
//!    reviews that reached syncgc meanwhile; and the time from a protected object's CREATE to
//!    its owner carrying `syncgc.io/guarded` (p50, p99).

use std::time::{Duration, Instant};

use anyhow::Result;
use kube::api::{DeleteParams, Patch, PatchParams};
use syncgc::names::MAX_CASCADE_ANNOTATION;

use crate::plane::{Kcm, Plane, UNTHROTTLED_BURST, UNTHROTTLED_QPS};
use crate::report::{Goal, Report, round};
use crate::tree::{OWNER, Shape, Tree};
use crate::{Settings, cascade, cooperative_syncgc, registered_namespace, run_args};

/// The owner's dependents for the latency reading.
const DEPENDENTS: usize = 10_000;
/// Dry-run DELETEs per case and round.
const TRIALS: usize = 40;
const ROUNDS: usize = 2;
/// The name of the webhook's registration, and the label of the namespaces it serves.
const NAME: &str = "syncgc-bench-guards";

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    latency(settings, plane, report).await?;
    throughput(settings, plane, report).await?;
    selection(settings, plane, report).await
}

/// ConfigMaps in each namespace deleted whole by the selection reading.
const NAMESPACE_OBJECTS: usize = 10_000;
/// Namespace deletions of each kind, in turns.
const NAMESPACE_ROUNDS: usize = 2;
/// Protected objects whose owners' selection is timed.
const SELECTIONS: usize = 50;

async fn selection(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::{ObjectMeta, PostParams};
    use syncgc::names::{GUARDED_LABEL, PROTECTED_ANNOTATION};
    let c = settings.concurrency;
    eprintln!(
        "guards: a namespace of {NAMESPACE_OBJECTS} deleted with and without syncgc; selection latency"
    );
    plane.kcm(Kcm::unthrottled(true, c as u32)).await?;
    let (syncgc, guarded, registration) = cooperative_syncgc(settings, plane, NAME).await?;
    let configmaps = |ns: &str| kube::Api::<ConfigMap>::namespaced(plane.client.clone(), ns);
    let config_map =
        |name: String, annotations: &[(&str, &str)], owner: Option<&ConfigMap>| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                owner_references: owner.map(|o| {
                    vec![
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                            api_version: "v1".into(),
                            kind: "ConfigMap".into(),
                            name: o.metadata.name.clone().unwrap_or_default(),
                            uid: o.metadata.uid.clone().unwrap_or_default(),
                            ..Default::default()
                        },
                    ]
                }),
                ..Default::default()
            },
            ..Default::default()
        };
    // Guards in use elsewhere: protected and limited objects.
    let api = configmaps(&guarded);
    for n in 0..20 {
        let protected = config_map(
            format!("protected-{n}"),
            &[(PROTECTED_ANNOTATION, "true")],
            None,
        );
        api.create(&PostParams::default(), &protected).await?;
        let limited = config_map(
            format!("limited-{n}"),
            &[(MAX_CASCADE_ANNOTATION, "100")],
            None,
        );
        api.create(&PostParams::default(), &limited).await?;
    }

    // A protected object's owner carries the label how long after the object's CREATE.
    let mut selected_after = Vec::new();
    for n in 0..SELECTIONS {
        let owner = api
            .create(
                &PostParams::default(),
                &config_map(format!("owner-{n}"), &[], None),
            )
            .await?;
        let child = config_map(
            format!("child-{n}"),
            &[(PROTECTED_ANNOTATION, "true")],
            Some(&owner),
        );
        api.create(&PostParams::default(), &child).await?;
        let started = Instant::now();
        loop {
            let owner = api.get(&format!("owner-{n}")).await?;
            if owner
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(GUARDED_LABEL))
            {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(60),
                "owner-{n} never selected"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        selected_after.push(started.elapsed().as_secs_f64() * 1000.0);
    }

    // A namespace of unannotated ConfigMaps deleted whole, served by syncgc's registration or
    // not, in turns.
    let namespaces: kube::Api<Namespace> = kube::Api::all(plane.client.clone());
    let label = ("syncgc.io/bench", NAME);
    let mut took: [Vec<f64>; 2] = Default::default();
    let reviews_before = syncgc
        .metric("syncgc_webhook_requests_total{operation=\"DELETE\"")
        .await?;
    for _ in 0..NAMESPACE_ROUNDS {
        for (served, runs) in [true, false].into_iter().zip(took.iter_mut()) {
            let labels: &[(&str, &str)] = if served { &[label] } else { &[] };
            let namespace = plane.namespace("bench-namespace", labels).await?;
            let api = configmaps(&namespace);
            futures::stream::iter(0..NAMESPACE_OBJECTS)
                .map(|n| {
                    let api = api.clone();
                    let object = config_map(format!("cm-{n}"), &[], None);
                    async move { api.create(&PostParams::default(), &object).await }
                })
                .buffer_unordered(c)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?;
            tokio::time::sleep(cascade::SETTLE).await;
            let started = Instant::now();
            plane.drop_namespace(&namespace).await?;
            while namespaces.get_opt(&namespace).await?.is_some() {
                anyhow::ensure!(
                    started.elapsed() < Duration::from_secs(600),
                    "{namespace} stays"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            runs.push(started.elapsed().as_secs_f64());
        }
    }
    let reviews = syncgc
        .metric("syncgc_webhook_requests_total{operation=\"DELETE\"")
        .await?
        - reviews_before;
    registration.remove().await?;
    plane.drop_namespace(&guarded).await?;
    drop(syncgc);

    let median = |runs: &mut Vec<f64>| {
        runs.sort_by(f64::total_cmp);
        runs[runs.len() / 2]
    };
    let [with, without] = took.map(|mut runs| median(&mut runs));
    let table = report.table(
        format!(
            "Guards' selection: with 20 protected and 20 limited objects in another namespace, \
             a namespace of {NAMESPACE_OBJECTS} unannotated ConfigMaps deleted (until gone) \
             served by syncgc's registration and not, medians of {NAMESPACE_ROUNDS} each in \
             turns; and the DELETE reviews that reached syncgc during them"
        ),
        vec!["", "seconds", "without ÷ with", "DELETE reviews at syncgc"],
    );
    table.rows.push(vec![
        "with syncgc".into(),
        round(with),
        String::new(),
        round(reviews),
    ]);
    table.rows.push(vec![
        "without".into(),
        round(without),
        String::new(),
        String::new(),
    ]);
    table.rows.push(vec![
        "ratio".into(),
        String::new(),
        round(without / with),
        String::new(),
    ]);
    report.target(
        "guards: a namespace of 10,000 deleted with ÷ without syncgc",
        without / with,
        Goal::AtLeast(0.95),
        "×",
    );
    report.target(
        "guards: unannotated DELETE reviews reaching syncgc",
        reviews,
        Goal::AtMost(0.0),
        "",
    );
    selected_after.sort_by(f64::total_cmp);
    let at = |q: f64| selected_after[((selected_after.len() - 1) as f64 * q).round() as usize];
    let table = report.table(
        format!(
            "Guards' selection: from a protected object's CREATE to its owner labelled \
             `syncgc.io/guarded` (polled every 5 ms), {SELECTIONS} objects"
        ),
        vec!["p50 ms", "p99 ms"],
    );
    table.rows.push(vec![round(at(0.5)), round(at(0.99))]);
    report.target(
        "guards: an owner of a new protected object selected, p99",
        at(0.99),
        Goal::AtMost(1000.0),
        "ms",
    );
    Ok(())
}

async fn latency(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let c = settings.concurrency;
    eprintln!("guards: dry-run DELETEs of an owner with {DEPENDENTS} dependents");
    plane.kcm(Kcm::unthrottled(true, c as u32)).await?;
    let (syncgc, namespace, registration) = cooperative_syncgc(settings, plane, NAME).await?;
    let tree = Tree::create(
        &plane.client,
        &namespace,
        Shape::Flat,
        DEPENDENTS,
        c,
        &[],
        1,
    )
    .await?;
    tokio::time::sleep(cascade::SETTLE).await;
    let cases: [(&str, Option<&str>, bool); 3] = [
        ("no limit (nothing to judge)", None, true),
        ("limit 20,000: passed", Some("20000"), true),
        ("limit 100: refused", Some("100"), false),
    ];
    let dry_run = DeleteParams {
        dry_run: true,
        ..DeleteParams::background()
    };
    let mut times: [Vec<f64>; 3] = Default::default();
    for _ in 0..ROUNDS {
        for ((_, limit, passes), runs) in cases.iter().zip(times.iter_mut()) {
            let patch = serde_json::json!({ "metadata": { "annotations": { MAX_CASCADE_ANNOTATION: limit } } });
            tree.api
                .patch_metadata(OWNER, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            for _ in 0..TRIALS {
                let started = Instant::now();
                let result = tree.api.delete(OWNER, &dry_run).await;
                runs.push(started.elapsed().as_secs_f64() * 1000.0);
                match (result, passes) {
                    (Ok(_), true) => {}
                    (Err(kube::Error::Api(status)), false) if status.code == 403 => {}
                    (result, _) => anyhow::bail!(
                        "the dry-run DELETE with limit {limit:?}: {:?}",
                        result.map(drop)
                    ),
                }
            }
        }
    }
    registration.remove().await?;
    plane.drop_namespace(&namespace).await?;
    drop(syncgc);

    let table = report.table(
        format!(
            "Guards: a server-side dry-run DELETE of an owner with {DEPENDENTS} flat dependents \
             through the apiserver and syncgc's webhook (cooperative), judged by \
             `syncgc.io/max-cascade`; {} each, in turns",
            TRIALS * ROUNDS
        ),
        vec!["DELETE", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms"],
    );
    let percentiles = |runs: &mut Vec<f64>| {
        runs.sort_by(f64::total_cmp);
        let at = |q: f64| runs[((runs.len() - 1) as f64 * q).round() as usize];
        (at(0.5), at(0.99))
    };
    let [base, passed, refused] = times.map(|mut runs| percentiles(&mut runs));
    for ((label, ..), (p50, p99)) in cases.iter().zip([base, passed, refused]) {
        table.rows.push(vec![
            (*label).into(),
            round(p50),
            round(p99),
            round(p50 - base.0),
            round(p99 - base.1),
        ]);
    }
    for (what, (_, p99)) in [("refused", refused), ("passed", passed)] {
        report.target(
            format!("guards: cascade limit at {DEPENDENTS} dependents, {what}, added p99"),
            p99 - base.1,
            Goal::AtMost(100.0),
            "ms",
        );
    }
    Ok(())
}

async fn throughput(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let n = settings.sizes.iter().copied().max().unwrap_or(5000);
    let c = settings.concurrency;
    eprintln!("guards: cascades of {n} with causes recorded and without");
    plane.kcm(Kcm::unthrottled(false, c as u32)).await?;
    let mut times: [Vec<f64>; 2] = Default::default();
    for _ in 0..settings.repeats {
        for (record, runs) in ["true", "false"].into_iter().zip(times.iter_mut()) {
            let mut args = run_args("standalone", UNTHROTTLED_QPS, UNTHROTTLED_BURST, c);
            args.extend(["--record-causes".to_owned(), record.to_owned()]);
            let syncgc = plane.syncgc(&args).await?;
            let (namespace, registration) = registered_namespace(plane, &syncgc, NAME).await?;
            let tree = Tree::create(&plane.client, &namespace, Shape::Flat, n, c, &[], 1).await?;
            tokio::time::sleep(cascade::SETTLE).await;
            let gone = tree.watch_until_gone(Duration::from_secs(900)).await?;
            let started = Instant::now();
            tree.api.delete(OWNER, &DeleteParams::background()).await?;
            let finished = gone.await??;
            runs.push(finished.duration_since(started).as_secs_f64());
            registration.remove().await?;
            plane.drop_namespace(&namespace).await?;
            drop(syncgc);
        }
    }
    let [with, without] = times.map(|mut runs| {
        runs.sort_by(f64::total_cmp);
        runs[runs.len() / 2]
    });
    let table = report.table(
        format!(
            "Causes: syncgc standalone (its webhook registered, qps {UNTHROTTLED_QPS} / burst \
             {UNTHROTTLED_BURST}, {c} workers) collecting {n} flat dependents of a deleted \
             owner; medians of {} runs each, in turns",
            settings.repeats
        ),
        vec!["", "seconds", "objects/s"],
    );
    for (label, seconds) in [
        ("`--record-causes=true`", with),
        ("`--record-causes=false`", without),
    ] {
        table.rows.push(vec![
            label.into(),
            round(seconds),
            round(n as f64 / seconds),
        ]);
    }
    let ratio = without / with;
    table.rows.push(vec![
        "with ÷ without (throughput)".into(),
        String::new(),
        round(ratio),
    ]);
    report.target(
        "causes: collector throughput with ÷ without",
        ratio,
        Goal::AtLeast(0.97),
        "×",
    );
    Ok(())
}
