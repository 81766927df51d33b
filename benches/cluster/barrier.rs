//! The release barrier's cost: the time from an armed owner's last dependent going to the
//! owner's release, with the barrier and without it (`--release-barrier=false`), each time with
//! syncgc in cooperative mode as the only thing that changes; and the requests the barrier
//! adds per release (from syncgc's own counters).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, ResourceExt};
use syncgc::names::SYNCHRONOUS_ANNOTATION;

use crate::plane::{Kcm, Plane, UNTHROTTLED_BURST, UNTHROTTLED_QPS};
use crate::report::{Goal, Report, round};
use crate::{Settings, registered_namespace, run_args};

const HOLD: &str = "bench.syncgc.io/hold";

/// What one syncgc measured.
struct Measured {
    /// From the last dependent's DELETED event to the owner's, per release, sorted.
    latencies: Vec<Duration>,
    reads: f64,
    rounds: f64,
}

impl Measured {
    fn percentile_ms(&self, q: f64) -> f64 {
        let i = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
        self.latencies[i].as_secs_f64() * 1000.0
    }
}

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let n = settings.barrier_trials;
    let c = settings.concurrency;
    eprintln!("barrier: {n} releases of an armed owner, without and with the release barrier");
    plane.kcm(Kcm::unthrottled(true, c as u32)).await?;
    let mut measured = Vec::new();
    for barrier in ["false", "true"] {
        let mut args = run_args("cooperative", UNTHROTTLED_QPS, UNTHROTTLED_BURST, c);
        args.extend(["--release-barrier".to_owned(), barrier.to_owned()]);
        let syncgc = plane.syncgc(&args).await?;
        let (namespace, registration) =
            registered_namespace(plane, &syncgc, "syncgc-bench-barrier").await?;
        let (reads, rounds) = (
            syncgc.metric("syncgc_barrier_reads_total").await?,
            syncgc.metric("syncgc_barrier_rounds_total").await?,
        );
        let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), &namespace);
        let mut latencies = Vec::with_capacity(n);
        for i in 0..n {
            latencies.push(release(&api, i).await?);
        }
        latencies.sort();
        measured.push(Measured {
            latencies,
            reads: syncgc.metric("syncgc_barrier_reads_total").await? - reads,
            rounds: syncgc.metric("syncgc_barrier_rounds_total").await? - rounds,
        });
        registration.remove().await?;
        plane.drop_namespace(&namespace).await?;
    }
    let [without, with] = [&measured[0], &measured[1]];
    let table = report.table(
        format!(
            "Release barrier: from the last dependent of an armed owner going to the owner's \
             release, {n} releases one after another (an owner and one held ConfigMap each, in a \
             namespace of their own with the namespace's default objects), syncgc cooperative"
        ),
        vec![
            "",
            "p50 ms",
            "p99 ms",
            "barrier rounds per release",
            "barrier requests per release",
        ],
    );
    for (name, m) in [("without the barrier", without), ("with the barrier", with)] {
        table.rows.push(vec![
            name.into(),
            round(m.percentile_ms(0.5)),
            round(m.percentile_ms(0.99)),
            round(m.rounds / n as f64),
            round(m.reads / n as f64),
        ]);
    }
    table.rows.push(vec![
        "with ÷ without".into(),
        round(with.percentile_ms(0.5) / without.percentile_ms(0.5)),
        round(with.percentile_ms(0.99) / without.percentile_ms(0.99)),
        String::new(),
        String::new(),
    ]);
    report.target(
        "release: p50 from the last dependent's DELETED event to the owner's, idle",
        with.percentile_ms(0.5),
        Goal::AtMost(50.0),
        "ms",
    );
    Ok(())
}

/// One release: an armed owner with one held dependent, deleted; the dependent let go. The
/// time between their DELETED events, as one watch of the namespace sees them.
async fn release(api: &Api<ConfigMap>, i: usize) -> Result<Duration> {
    let (owner, dependent) = (format!("owner-{i}"), format!("dependent-{i}"));
    let mut object = ConfigMap {
        metadata: ObjectMeta {
            name: Some(owner.clone()),
            annotations: Some([(SYNCHRONOUS_ANNOTATION.to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let created = api.create(&PostParams::default(), &object).await?;
    object.metadata = ObjectMeta {
        name: Some(dependent.clone()),
        finalizers: Some(vec![HOLD.to_owned()]),
        owner_references: Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: owner.clone(),
                uid: created.uid().context("the owner's uid")?,
                block_owner_deletion: Some(true),
                controller: None,
            },
        ]),
        ..Default::default()
    };
    let held = api.create(&PostParams::default(), &object).await?;
    let version = held.resource_version().context("a resourceVersion")?;
    let events = api.watch(&WatchParams::default(), &version).await?;
    let mut events = std::pin::pin!(events);
    api.delete(&owner, &DeleteParams::background()).await?;
    // syncgc deletes the dependent for the owner; it stays, held, until let go.
    loop {
        if api
            .get(&dependent)
            .await?
            .metadata
            .deletion_timestamp
            .is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let clear = serde_json::json!({ "metadata": { "finalizers": null } });
    api.patch(&dependent, &PatchParams::default(), &Patch::Merge(&clear))
        .await?;
    let mut gone = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    while let Some(event) = tokio::time::timeout_at(deadline.into(), events.next())
        .await
        .context("the owner was not released within 120 s")?
    {
        if let WatchEvent::Deleted(object) = event? {
            let at = Instant::now();
            if object.name_any() == dependent {
                gone = Some(at);
            } else if object.name_any() == owner {
                return Ok(at - gone.context("the owner went before its dependent")?);
            }
        }
    }
    anyhow::bail!("the watch ended before the owner was released")
}
