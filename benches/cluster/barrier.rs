//! The release barrier's cost: the time from an armed owner's last dependent going to the
//! owner's release, with the barrier and without it (`--release-barrier=false`), each time with
//! syncgc in cooperative mode as the only thing that changes; and the requests the barrier
//! adds per release (from syncgc's own counters). With the barrier, the releases are measured
//! again under the soak's write load.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, ResourceExt};
use syncgc::names::{SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER};

use crate::plane::{Kcm, Plane, Syncgc, UNTHROTTLED_BURST, UNTHROTTLED_QPS};
use crate::report::{Goal, Report, round};
use crate::tree::{owner_with_dependents, reference_to};
use crate::{Settings, registered_namespace, run_args};

const HOLD: &str = "bench.syncgc.io/hold";
/// The webhook's registration, and the label of the namespaces it serves.
const NAME: &str = "syncgc-bench-barrier";
/// The soak's writers (benches/soak).
const WRITERS: usize = 3;

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
    eprintln!(
        "barrier: {n} releases of an armed owner, without and with the release barrier, then \
         with it under write load"
    );
    plane.kcm(Kcm::unthrottled(true, c as u32)).await?;
    let mut measured = Vec::new();
    let mut written = 0.0;
    for barrier in ["false", "true"] {
        let mut args = run_args("cooperative", UNTHROTTLED_QPS, UNTHROTTLED_BURST, c);
        args.extend(["--release-barrier".to_owned(), barrier.to_owned()]);
        let syncgc = plane.syncgc(&args).await?;
        let (namespace, registration) = registered_namespace(plane, &syncgc, NAME).await?;
        let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), &namespace);
        measured.push(releases(&syncgc, &api, 0..n).await?);
        if barrier == "true" {
            let load = WriteLoad::start(plane).await?;
            measured.push(releases(&syncgc, &api, n..2 * n).await?);
            written = load.stop(plane).await?;
        }
        registration.remove().await?;
        plane.drop_namespace(&namespace).await?;
    }
    let [without, with, loaded] = [&measured[0], &measured[1], &measured[2]];
    let table = report.table(
        format!(
            "Release barrier: from the last dependent of an armed owner going to the owner's \
             release, {n} releases one after another (an owner and one held ConfigMap each, in a \
             namespace of their own with the namespace's default objects), syncgc cooperative; \
             under write load, the soak's workload beside them ({WRITERS} writers, {written:.0} \
             objects created per second and as many deleted)"
        ),
        vec![
            "",
            "p50 ms",
            "p99 ms",
            "barrier rounds per release",
            "barrier requests per release",
        ],
    );
    for (name, m) in [
        ("without the barrier", without),
        ("with the barrier", with),
        ("with the barrier, under write load", loaded),
    ] {
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
    report.target(
        "release: p99 from the last dependent's DELETED event to the owner's, under the soak's \
         write load",
        loaded.percentile_ms(0.99),
        Goal::AtMost(1000.0),
        "ms",
    );
    Ok(())
}

/// The releases numbered `trials`, one after another, and the barrier's requests for them.
async fn releases(
    syncgc: &Syncgc,
    api: &Api<ConfigMap>,
    trials: std::ops::Range<usize>,
) -> Result<Measured> {
    let (reads, rounds) = (
        syncgc.metric("syncgc_barrier_reads_total").await?,
        syncgc.metric("syncgc_barrier_rounds_total").await?,
    );
    let mut latencies = Vec::with_capacity(trials.len());
    for i in trials {
        latencies.push(release(api, i).await?);
    }
    latencies.sort();
    Ok(Measured {
        latencies,
        reads: syncgc.metric("syncgc_barrier_reads_total").await? - reads,
        rounds: syncgc.metric("syncgc_barrier_rounds_total").await? - rounds,
    })
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
        owner_references: Some(vec![reference_to(&created)?]),
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

/// The soak's write load (benches/soak, without its faults): [`WRITERS`] writers, each in a
/// namespace of its own, one tree after another (an owner, armed three times in five, with 1
/// to 6 dependents; the owner deleted as soon as they are made), 0.2 to 1.5 s apart.
struct WriteLoad {
    stop: Arc<AtomicBool>,
    writers: Vec<tokio::task::JoinHandle<Result<usize>>>,
    apis: Vec<Api<ConfigMap>>,
    started: Instant,
}

impl WriteLoad {
    async fn start(plane: &Plane) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (mut writers, mut apis) = (Vec::new(), Vec::new());
        for w in 0..WRITERS {
            let namespace = plane.namespace(NAME, &[("syncgc.io/bench", NAME)]).await?;
            let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), &namespace);
            let (writer, stop) = (api.clone(), stop.clone());
            writers.push(tokio::spawn(async move {
                let mut made = 0;
                for k in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    made += tree(&writer, k).await?;
                    // Spread over 0.2 to 1.5 s, differently for each writer.
                    let pause = 200 + (w * 7919 + k * 104_729) % 1300;
                    tokio::time::sleep(Duration::from_millis(pause as u64)).await;
                }
                Ok(made)
            }));
            apis.push(api);
        }
        Ok(Self {
            stop,
            writers,
            apis,
            started: Instant::now(),
        })
    }

    /// Stops the writers, waits until the owners they deleted are released, drops their
    /// namespaces; the objects created per second.
    async fn stop(self, plane: &Plane) -> Result<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let mut made = 0;
        for writer in self.writers {
            made += writer.await??;
        }
        let rate = made as f64 / self.started.elapsed().as_secs_f64();
        let deadline = Instant::now() + Duration::from_secs(120);
        for api in &self.apis {
            loop {
                let held = api
                    .list_metadata(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .any(|cm| cm.finalizers().iter().any(|f| f == SYNCHRONOUS_FINALIZER));
                if !held {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "the write load's owners were not released within 120 s"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            plane
                .drop_namespace(api.namespace().context("a namespaced Api")?)
                .await?;
        }
        Ok(rate)
    }
}

/// The write load's tree `k`: made, its owner deleted; the objects it created.
async fn tree(api: &Api<ConfigMap>, k: usize) -> Result<usize> {
    let owner = format!("t{k}");
    let armed = k % 5 < 3;
    let object = ConfigMap {
        metadata: ObjectMeta {
            name: Some(owner.clone()),
            annotations: armed
                .then(|| [(SYNCHRONOUS_ANNOTATION.to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let dependents = 1 + k % 6;
    owner_with_dependents(api, object, dependents).await?;
    api.delete(&owner, &DeleteParams::background()).await?;
    Ok(1 + dependents)
}
