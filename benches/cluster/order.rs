//! Deletion order's cost: `kubectl delete` of an armed owner (cooperative mode) whose N flat
//! dependents are spread over four waves of `syncgc.io/deletion-order`, against the same owner
//! and dependents without an order, in turns, medians of `SYNCGC_BENCH_REPEATS` runs each.

use anyhow::Result;
use syncgc::names::SYNCHRONOUS_ANNOTATION;

use crate::plane::{Kcm, Plane, UNTHROTTLED_BURST, UNTHROTTLED_QPS};
use crate::report::{Goal, Report, round};
use crate::tree::{Shape, Tree};
use crate::{Settings, cooperative_syncgc, kubectl_delete_owner};

/// The waves of the ordered case.
const WAVES: usize = 4;
const WAVES_STARTED: &str = "syncgc_waves_started_total";
/// The name of the webhook's registration, and the label of the namespaces it serves.
const NAME: &str = "syncgc-bench-order";

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let n = settings.throttled_size;
    let c = settings.concurrency;
    eprintln!("order: kubectl delete of an owner with {n} dependents in {WAVES} waves and in one");
    plane.kcm(Kcm::unthrottled(true, c as u32)).await?;
    let (syncgc, first, registration) = cooperative_syncgc(settings, plane, NAME).await?;
    plane.drop_namespace(&first).await?;
    let mut times: [Vec<f64>; 2] = Default::default();
    for _ in 0..settings.repeats {
        for (waves, runs) in [1, WAVES].into_iter().zip(times.iter_mut()) {
            let namespace = plane.namespace(NAME, &[("syncgc.io/bench", NAME)]).await?;
            let armed = [(SYNCHRONOUS_ANNOTATION, "true")];
            Tree::create(&plane.client, &namespace, Shape::Flat, n, c, &armed, waves).await?;
            let started = syncgc.metric(WAVES_STARTED).await?;
            let (took, left) = kubectl_delete_owner(plane, &namespace, &[]).await?;
            anyhow::ensure!(
                left == 0,
                "kubectl delete returned with {left} of {n} objects left ({waves} wave(s))"
            );
            let announced = syncgc.metric(WAVES_STARTED).await? - started;
            let expected = if waves > 1 { waves as f64 } else { 0.0 };
            anyhow::ensure!(
                announced == expected,
                "{announced} waves started where {expected} were expected"
            );
            runs.push(took.as_secs_f64());
            plane.drop_namespace(&namespace).await?;
        }
    }
    registration.remove().await?;
    drop(syncgc);

    let [plain, ordered] = times.map(|mut runs| {
        runs.sort_by(f64::total_cmp);
        runs[runs.len() / 2]
    });
    let table = report.table(
        format!(
            "Deletion order: `kubectl delete` of an armed owner with {n} flat dependents until \
             it returns, syncgc (cooperative) at qps {UNTHROTTLED_QPS} / burst \
             {UNTHROTTLED_BURST} with {c} workers; medians of {} runs each, in turns",
            settings.repeats
        ),
        vec!["", "seconds"],
    );
    table
        .rows
        .push(vec!["no order (one wave)".into(), round(plain)]);
    table
        .rows
        .push(vec![format!("{WAVES} waves"), round(ordered)]);
    table
        .rows
        .push(vec![format!("{WAVES} waves ÷ one"), round(ordered / plain)]);
    report.target(
        format!("{WAVES} waves ÷ no order, {n} dependents"),
        ordered / plain,
        Goal::AtMost(1.3),
        "×",
    );
    Ok(())
}
