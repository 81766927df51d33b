//! The guards' price, in two readings of the same run:
//!
//! 1. the webhook's added latency for a DELETE judged by the cascade limit: a server-side dry
//!    run of the DELETE of an owner with 10,000 dependents (syncgc cooperative, its webhook
//!    registered), refused by `syncgc.io/max-cascade: "100"` and passed by `"20000"` (the
//!    cascade run on a copy of the tree), against the same DELETE without a limit (nothing to
//!    judge: the guards' fast path), in turns, p50 and p99 of each;
//! 2. the collector's throughput with causes recorded ÷ without: syncgc standalone, its webhook
//!    registered for the namespace, collecting N dependents of a deleted owner, with
//!    `--record-causes` true and false in turns, medians of `SYNCGC_BENCH_REPEATS` runs.

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
    throughput(settings, plane, report).await
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
