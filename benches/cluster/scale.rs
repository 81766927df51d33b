//! Scale: how long a collector is blind after it starts, and what each object costs it in
//! memory, as the cluster grows to N ConfigMaps (`SYNCGC_BENCH_SCALE_N`, 100,000 by default;
//! one in ten owns the next nine, as in the graph phase). At each size, in the same run, each
//! collector started three times and the medians reported:
//!
//! - kube-controller-manager restarted with its garbage collector: the time from its start
//!   until it logs "all resource monitors have synced" (it collects from then on), its resident
//!   memory, and its Go heap in use right after a full collection; restarted without it: the
//!   same memory readings. The differences are what its garbage collector holds. The resident
//!   difference swings by tens of MiB from one start to the next (Go's collector runs when its
//!   pacing says so, and returns freed memory slowly); the heap in use after a collection is
//!   the same within 1 MiB, and is the least the native GC holds: the memory target is
//!   measured against it.
//! - `syncgc run --mode standalone` started (kube-controller-manager without its GC): the time
//!   from its start until `/readyz` answers 200, and its resident memory then; the same with no
//!   object of the namespace yet is the baseline the objects add to.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use crate::Settings;
use crate::plane::{Kcm, Plane};
use crate::report::{Goal, Report, round};

/// Resident memory moves for a while after a start (Go's collector, freed list buffers): it is
/// read this long after the collector is ready.
const SETTLE: Duration = Duration::from_secs(5);

/// How many times each collector is started at each size: the medians are reported (the time
/// to ready and, above all, Go's resident memory vary from one start to the next).
const STARTS: usize = 3;

/// A collector started for a measurement.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    /// kube-controller-manager, with or without its GC.
    Native { gc: bool },
    /// syncgc standalone.
    Syncgc,
}

/// What one start measured: the time to ready and the memory [`SETTLE`] after.
pub struct Sample {
    pub ready: Duration,
    pub resident: u64,
    /// kube-controller-manager's Go heap in use after a full collection (0 for syncgc).
    pub heap: u64,
}

/// The medians of [`STARTS`] starts' measurements, each start alone.
pub async fn median_start(plane: &mut Plane, settings: &Settings, start: Start) -> Result<Sample> {
    let mut samples = Vec::new();
    for _ in 0..STARTS {
        samples.push(match start {
            Start::Native { gc } => kcm_start(plane, settings, gc).await?,
            Start::Syncgc => syncgc_start(plane, settings).await?,
        });
    }
    Ok(Sample {
        ready: median(&samples, |s| s.ready),
        resident: median(&samples, |s| s.resident),
        heap: median(&samples, |s| s.heap),
    })
}

/// The median of one measurement over `samples`, each field taken alone.
fn median<T: Ord + Copy>(samples: &[Sample], key: fn(&Sample) -> T) -> T {
    let mut values: Vec<T> = samples.iter().map(key).collect();
    values.sort_unstable();
    values[values.len() / 2]
}

/// One size's measurements.
struct Point {
    objects: usize,
    native_ready: Duration,
    native_bytes: f64,
    /// Per object, from the Go heap in use after a collection, with its GC − without.
    native_heap_bytes: f64,
    syncgc_ready: Duration,
    syncgc_bytes: f64,
}

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let n = settings.scale;
    let sizes: Vec<usize> = [n / 10, n / 4, n / 2, n]
        .into_iter()
        .filter(|s| *s > 0)
        .collect();
    eprintln!("scale: {sizes:?} ConfigMaps");
    // The objects of earlier phases' namespaces must be gone before the baseline is taken.
    plane.settle_namespaces().await?;
    let namespace = plane.namespace("bench-scale", &[]).await?;
    let syncgc_baseline = median_start(plane, settings, Start::Syncgc).await?.resident;
    let mut points = Vec::new();
    let (mut created, mut owners) = (0, HashMap::new());
    for &size in &sizes {
        create(
            plane,
            &namespace,
            created..size,
            &mut owners,
            settings.concurrency,
        )
        .await?;
        created = size;
        let with_gc = median_start(plane, settings, Start::Native { gc: true }).await?;
        let without_gc = median_start(plane, settings, Start::Native { gc: false }).await?;
        let syncgc = median_start(plane, settings, Start::Syncgc).await?;
        let per_object =
            |with: u64, without: u64| with.saturating_sub(without) as f64 / size as f64;
        let point = Point {
            objects: size,
            native_ready: with_gc.ready,
            native_bytes: per_object(with_gc.resident, without_gc.resident),
            native_heap_bytes: per_object(with_gc.heap, without_gc.heap),
            syncgc_ready: syncgc.ready,
            syncgc_bytes: per_object(syncgc.resident, syncgc_baseline),
        };
        eprintln!(
            "scale: {size} objects: ready native {:.2} s, syncgc {:.2} s; bytes per object native {:.0} resident, {:.0} Go heap, syncgc {:.0}",
            point.native_ready.as_secs_f64(),
            point.syncgc_ready.as_secs_f64(),
            point.native_bytes,
            point.native_heap_bytes,
            point.syncgc_bytes
        );
        points.push(point);
    }
    plane.drop_namespace(&namespace).await?;
    // What runs next on the cluster (a test run, say) finds it without 100,000 objects still
    // being deleted.
    plane.settle_namespaces().await?;

    let table = report.table(
        format!(
            "Scale: ConfigMaps in one namespace (one in ten owns the next nine), each collector \
             started with them in etcd; ready = from its start until it collects \
             (kube-controller-manager: \"all resource monitors have synced\"; syncgc standalone: \
             `/readyz` 200); bytes per object {}s after: kube-controller-manager with its GC − \
             without, in resident memory (which swings by tens of MiB from one start to the \
             next with Go's collector's pacing) and in Go heap in use right after a full \
             collection (`HeapInuse` of its heap profile with `gc=1`: what its objects hold at \
             least, the same within 1 MiB from start to start); syncgc's resident memory − \
             syncgc's started before the objects ({:.1} MiB); medians of {STARTS} starts each",
            SETTLE.as_secs(),
            syncgc_baseline as f64 / f64::from(1 << 20)
        ),
        vec![
            "objects",
            "native ready s",
            "syncgc ready s",
            "ready syncgc ÷ native",
            "native B/object resident",
            "native B/object Go heap",
            "syncgc B/object resident",
            "syncgc ÷ native resident",
            "syncgc ÷ native Go heap",
        ],
    );
    for p in &points {
        table.rows.push(vec![
            p.objects.to_string(),
            round(p.native_ready.as_secs_f64()),
            round(p.syncgc_ready.as_secs_f64()),
            round(p.syncgc_ready.as_secs_f64() / p.native_ready.as_secs_f64()),
            format!("{:.0}", p.native_bytes),
            format!("{:.0}", p.native_heap_bytes),
            format!("{:.0}", p.syncgc_bytes),
            round(p.syncgc_bytes / p.native_bytes),
            round(p.syncgc_bytes / p.native_heap_bytes),
        ]);
    }
    let last = points.last().context("no size measured")?;
    report.target(
        format!(
            "scale, {} objects: time to ready syncgc ÷ native",
            last.objects
        ),
        last.syncgc_ready.as_secs_f64() / last.native_ready.as_secs_f64(),
        Goal::AtMost(0.5),
        "×",
    );
    report.target(
        format!(
            "scale, {} objects: memory per object, syncgc resident ÷ native Go heap in use",
            last.objects
        ),
        last.syncgc_bytes / last.native_heap_bytes,
        Goal::AtMost(0.5),
        "×",
    );
    Ok(())
}

/// Creates ConfigMaps `from..to` in `namespace`: every tenth an owner (its uid kept in
/// `owners`), the nine after it its dependents; owners first.
async fn create(
    plane: &Plane,
    namespace: &str,
    range: std::ops::Range<usize>,
    owners: &mut HashMap<usize, String>,
    concurrency: usize,
) -> Result<()> {
    eprintln!("scale: creating ConfigMaps {range:?}");
    let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), namespace);
    let make = |objects: Vec<ConfigMap>| {
        futures::stream::iter(objects)
            .map(|object| {
                let api = api.clone();
                async move { api.create(&PostParams::default(), &object).await }
            })
            .buffer_unordered(concurrency)
            .collect::<Vec<_>>()
    };
    let new_owners = range.clone().filter(|i| i % 10 == 0);
    for created in make(new_owners.map(|i| config_map(i, None)).collect()).await {
        let created = created?;
        let name = created.metadata.name.unwrap_or_default();
        let i = name.trim_start_matches("cm-").parse()?;
        owners.insert(i, created.metadata.uid.unwrap_or_default());
    }
    let dependents = range.filter(|i| i % 10 != 0).map(|i| {
        let owner = i - i % 10;
        config_map(i, Some((name_of(owner), owners[&owner].clone())))
    });
    for created in make(dependents.collect()).await {
        created?;
    }
    Ok(())
}

fn name_of(i: usize) -> String {
    format!("cm-{i}")
}

fn config_map(i: usize, owner: Option<(String, String)>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name_of(i)),
            owner_references: owner.map(|(name, uid)| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name,
                    uid,
                    controller: Some(true),
                    block_owner_deletion: None,
                }]
            }),
            ..Default::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..Default::default()
    }
}

/// Restarts kube-controller-manager with or without its GC; with it, how long until its
/// monitors synced; and its resident memory [`SETTLE`] after, then its Go heap in use after a
/// full collection.
async fn kcm_start(plane: &mut Plane, settings: &Settings, gc: bool) -> Result<Sample> {
    let ready = plane
        .restart_kcm(Kcm::unthrottled(gc, settings.concurrency as u32))
        .await?;
    tokio::time::sleep(SETTLE).await;
    let resident = plane.kcm_rss()?;
    let heap = plane.kcm_heap_in_use().await?;
    eprintln!(
        "scale: kube-controller-manager {} its GC: {} MiB resident, {} MiB Go heap in use",
        if gc { "with" } else { "without" },
        resident >> 20,
        heap >> 20
    );
    Ok(Sample {
        ready: ready.unwrap_or_default(),
        resident,
        heap,
    })
}

/// Starts syncgc standalone (kube-controller-manager without its GC): how long until ready, and
/// its resident memory [`SETTLE`] after.
async fn syncgc_start(plane: &mut Plane, settings: &Settings) -> Result<Sample> {
    plane
        .kcm(Kcm::unthrottled(false, settings.concurrency as u32))
        .await?;
    let started = Instant::now();
    let syncgc = plane
        .syncgc(&["--mode".to_owned(), "standalone".to_owned()])
        .await?;
    let ready = started.elapsed();
    tokio::time::sleep(SETTLE).await;
    Ok(Sample {
        ready,
        resident: syncgc.rss()?,
        heap: 0,
    })
}
