//! Scale: how long a collector is blind after it starts, what each object costs it in memory,
//! and how a very large tree is collected, as the cluster grows to N objects
//! (`SYNCGC_BENCH_SCALE_N`, 1,000,000 by default; measured at a tenth, three tenths and all).
//! The objects are created straight into the apiserver, [`CREATING`] requests in flight: in
//! each ten, an owner ConfigMap, eight ConfigMaps it owns and one custom resource it owns (of
//! one namespaced CRD). At each size, in the same run, each collector started three times and
//! the medians reported:
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
//!   from its start until `/readyz` answers 200, its resident memory then and its peak so far
//!   (`VmHWM`: the initial lists' buffers included), and its resident memory [`SETTLE`] after;
//!   the same with no object of the namespace yet is the baseline the objects add to.
//! - The apiserver's answer alone: every ConfigMap's metadata listed from its watch cache as
//!   syncgc lists it (protobuf, `resourceVersion=0`), read to its end and dropped ([`STARTS`]
//!   times, the median): what any collector waits for before it knows the ConfigMaps.
//!   And the same list with the custom resources' (in JSON: the apiserver encodes them one by
//!   one) sent at once, as syncgc sends them: the least any collector of both waits for.
//!
//! With all N objects in place, one owner with [`CASCADE`] dependents
//! (`SYNCGC_BENCH_SCALE_CASCADE`) in a namespace of its own is deleted in the background, once
//! by each collector at the same client limits: the time until every dependent is gone, the
//! requests per object, and syncgc's resident memory over it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ObjectMeta, PostParams,
    PropagationPolicy,
};

use crate::cascade::{self, Deletion, Outcome};
use crate::plane::{Kcm, Plane, UNTHROTTLED_BURST, UNTHROTTLED_QPS};
use crate::report::{Goal, Report, mib, round};
use crate::tree::Shape;
use crate::{Settings, run_args};

/// Requests in flight while the objects are created.
const CREATING: usize = 64;
/// The custom resources' group, kind and plural.
const GROUP: &str = "scale.bench.syncgc.io";
const KIND: &str = "Scaled";
const PLURAL: &str = "scaleds";
/// The default number of dependents of the cascade at scale.
pub const CASCADE: usize = 100_000;
/// How often syncgc's resident memory is read during the cascade.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

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
    /// syncgc's resident memory at ready, and its peak until then (0 for
    /// kube-controller-manager).
    pub at_ready: u64,
    pub peak: u64,
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
        at_ready: median(&samples, |s| s.at_ready),
        peak: median(&samples, |s| s.peak),
    })
}

/// The median of one measurement over `samples`, each field taken alone.
fn median<T: Ord + Copy>(samples: &[Sample], key: fn(&Sample) -> T) -> T {
    middle(samples.iter().map(key).collect())
}

/// The middle one of `values` in order.
fn middle<T: Ord + Copy>(mut values: Vec<T>) -> T {
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
    syncgc_at_ready: u64,
    syncgc_peak: u64,
    /// The apiserver's answer to syncgc's list of every ConfigMap, read alone.
    list_alone: Duration,
    /// That list and the custom resources' sent at once, as syncgc sends them.
    lists_together: Duration,
}

impl Point {
    fn ready_ratio(&self) -> f64 {
        self.syncgc_ready.as_secs_f64() / self.native_ready.as_secs_f64()
    }

    /// syncgc's time to ready per object, in microseconds.
    fn ready_per_object(&self) -> f64 {
        self.syncgc_ready.as_secs_f64() * 1e6 / self.objects as f64
    }

    /// The apiserver's time per object for the ConfigMap list alone, in microseconds.
    /// syncgc's time to ready ÷ the ConfigMap list alone.
    fn ready_over_list(&self) -> f64 {
        self.syncgc_ready.as_secs_f64() / self.list_alone.as_secs_f64()
    }

    fn list_per_object(&self) -> f64 {
        self.list_alone.as_secs_f64() * 1e6 / self.objects as f64
    }

    fn peak_ratio(&self) -> f64 {
        self.syncgc_peak as f64 / self.syncgc_at_ready as f64
    }
}

/// The cascade at scale, by one collector.
struct Cascade {
    outcome: Outcome,
    /// syncgc's largest resident memory during it, and before it (0 for the native GC).
    peak: u64,
    before: u64,
}

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let n = settings.scale;
    let mut sizes: Vec<usize> = [n / 10, 3 * n / 10, n]
        .into_iter()
        .filter(|s| *s > 0)
        .collect();
    sizes.dedup();
    eprintln!(
        "scale: {sizes:?} objects, then a cascade of {} dependents",
        settings.scale_cascade
    );
    // The objects of earlier phases' namespaces must be gone before the baseline is taken.
    plane.settle_namespaces().await?;
    crd(plane, true).await?;
    let namespace = plane.namespace("bench-scale", &[]).await?;
    let syncgc_baseline = median_start(plane, settings, Start::Syncgc).await?.resident;
    let mut points = Vec::new();
    let (mut created, mut owners) = (0, HashMap::new());
    for &size in &sizes {
        let started = Instant::now();
        create(plane, &namespace, created..size, &mut owners).await?;
        eprintln!(
            "scale: created {} objects in {:.0} s",
            size - created,
            started.elapsed().as_secs_f64()
        );
        created = size;
        plane.apiserver_at_rest().await?;
        let with_gc = median_start(plane, settings, Start::Native { gc: true }).await?;
        let without_gc = median_start(plane, settings, Start::Native { gc: false }).await?;
        let syncgc = median_start(plane, settings, Start::Syncgc).await?;
        let list_alone = read_lists(plane, &[CONFIG_MAPS]).await?;
        let lists_together = read_lists(plane, &[CONFIG_MAPS, &scaleds()]).await?;
        let per_object =
            |with: u64, without: u64| with.saturating_sub(without) as f64 / size as f64;
        let point = Point {
            objects: size,
            native_ready: with_gc.ready,
            native_bytes: per_object(with_gc.resident, without_gc.resident),
            native_heap_bytes: per_object(with_gc.heap, without_gc.heap),
            syncgc_ready: syncgc.ready,
            syncgc_bytes: per_object(syncgc.resident, syncgc_baseline),
            syncgc_at_ready: syncgc.at_ready,
            syncgc_peak: syncgc.peak,
            list_alone,
            lists_together,
        };
        eprintln!(
            "scale: {size} objects: ready native {:.2} s, syncgc {:.2} s, the ConfigMap list alone {:.2} s, with the custom resources' {:.2} s; bytes per object native {:.0} resident, {:.0} Go heap, syncgc {:.0}; syncgc peak {:.0} MiB, at ready {:.0} MiB",
            point.native_ready.as_secs_f64(),
            point.syncgc_ready.as_secs_f64(),
            point.list_alone.as_secs_f64(),
            point.lists_together.as_secs_f64(),
            point.native_bytes,
            point.native_heap_bytes,
            point.syncgc_bytes,
            mib(point.syncgc_peak),
            mib(point.syncgc_at_ready),
        );
        points.push(point);
    }
    let native = cascade_at_scale(settings, plane, true).await?;
    let syncgc = cascade_at_scale(settings, plane, false).await?;
    report_phase(settings, report, syncgc_baseline, &points, &native, &syncgc)?;
    // What runs next on the cluster (a test run, say) finds it without the objects still
    // being deleted: they are deleted here, many at a time (the namespace controller deletes
    // a collection one object after another, an hour for a million).
    clear(plane, &namespace).await?;
    plane.drop_namespace(&namespace).await?;
    crd(plane, false).await?;
    plane.settle_namespaces().await
}

/// The phase's tables and targets.
fn report_phase(
    settings: &Settings,
    report: &mut Report,
    syncgc_baseline: u64,
    points: &[Point],
    native: &Cascade,
    syncgc: &Cascade,
) -> Result<()> {
    let n = settings.scale;

    let table = report.table(
        format!(
            "Scale: objects in one namespace, in each ten an owner ConfigMap, eight ConfigMaps \
             and one custom resource it owns; each collector started with them in etcd; ready \
             = from its start until it collects (kube-controller-manager: \"all resource \
             monitors have synced\"; syncgc standalone: `/readyz` 200); bytes per object {}s \
             after: kube-controller-manager with its GC − without, in resident memory (which \
             swings by tens of MiB from one start to the next with Go's collector's pacing) \
             and in Go heap in use right after a full collection (`HeapInuse` of its heap \
             profile with `gc=1`: what its objects hold at least, the same within 1 MiB from \
             start to start); syncgc's resident memory − syncgc's started before the objects \
             ({:.1} MiB); syncgc's peak (`VmHWM`) and resident memory at ready; growth = \
             syncgc's figure per object ÷ the same at the smallest size; list alone = the \
             apiserver's answer to syncgc's list of every ConfigMap (protobuf metadata from its \
             watch cache), read to its end and dropped, and its time per object ÷ the same at \
             the smallest size; with the custom resources' = that list and the custom \
             resources' (which the apiserver answers in JSON) sent at once, as syncgc sends \
             them, until both have ended; medians of {STARTS} starts or lists each",
            SETTLE.as_secs(),
            mib(syncgc_baseline)
        ),
        vec![
            "objects",
            "native ready s",
            "syncgc ready s",
            "ready syncgc ÷ native",
            "syncgc ready µs/object, growth",
            "list alone s",
            "list alone µs/object, growth",
            "syncgc ready ÷ list alone",
            "with the custom resources' s",
            "native B/object resident",
            "native B/object Go heap",
            "syncgc B/object resident",
            "syncgc ÷ native Go heap",
            "syncgc B/object growth",
            "syncgc peak MiB",
            "syncgc at ready MiB",
            "peak ÷ at ready",
        ],
    );
    let first = points.first().context("no size measured")?;
    for p in points {
        table.rows.push(vec![
            p.objects.to_string(),
            round(p.native_ready.as_secs_f64()),
            round(p.syncgc_ready.as_secs_f64()),
            round(p.ready_ratio()),
            format!(
                "{}, {}",
                round(p.ready_per_object()),
                round(p.ready_per_object() / first.ready_per_object())
            ),
            round(p.list_alone.as_secs_f64()),
            format!(
                "{}, {}",
                round(p.list_per_object()),
                round(p.list_per_object() / first.list_per_object())
            ),
            round(p.ready_over_list()),
            round(p.lists_together.as_secs_f64()),
            format!("{:.0}", p.native_bytes),
            format!("{:.0}", p.native_heap_bytes),
            format!("{:.0}", p.syncgc_bytes),
            round(p.syncgc_bytes / p.native_heap_bytes),
            round(p.syncgc_bytes / first.syncgc_bytes),
            format!("{:.0}", mib(p.syncgc_peak)),
            format!("{:.0}", mib(p.syncgc_at_ready)),
            round(p.peak_ratio()),
        ]);
    }
    let table = report.table(
        format!(
            "Cascade at scale: one owner with {} ConfigMap dependents in a namespace of its \
             own, deleted in the background with the scale phase's {} objects in place; each \
             collector at the same client limit (qps {UNTHROTTLED_QPS} / burst \
             {UNTHROTTLED_BURST}, {} workers); seconds from the owner's DELETE until every \
             object is gone, API requests on ConfigMaps per collected object, syncgc's \
             resident memory before and at most during it (read every {} ms)",
            settings.scale_cascade,
            n,
            settings.concurrency,
            SAMPLE_EVERY.as_millis()
        ),
        vec![
            "native s",
            "syncgc s",
            "syncgc ÷ native",
            "native req/obj",
            "syncgc req/obj",
            "syncgc MiB before",
            "syncgc MiB at most",
        ],
    );
    table.rows.push(vec![
        round(native.outcome.seconds),
        round(syncgc.outcome.seconds),
        round(syncgc.outcome.seconds / native.outcome.seconds),
        round(native.outcome.requests_per_object),
        round(syncgc.outcome.requests_per_object),
        format!("{:.0}", mib(syncgc.before)),
        format!("{:.0}", mib(syncgc.peak)),
    ]);
    let last = points.last().context("no size measured")?;
    let objects = last.objects;
    report.target(
        format!("scale, {objects} objects: time to ready syncgc ÷ native"),
        last.ready_ratio(),
        Goal::AtMost(0.5),
        "×",
    );
    report.target(
        format!(
            "scale, {objects} objects: memory per object, syncgc resident ÷ native Go heap in use"
        ),
        last.syncgc_bytes / last.native_heap_bytes,
        Goal::AtMost(0.5),
        "×",
    );
    report.target(
        format!(
            "scale, {objects} objects: syncgc's peak during startup ÷ its resident memory at ready"
        ),
        last.peak_ratio(),
        Goal::AtMost(1.5),
        "×",
    );
    report.target(
        format!(
            "scale: syncgc's time to ready per object, {objects} ÷ {} objects",
            first.objects
        ),
        last.ready_per_object() / first.ready_per_object(),
        Goal::AtMost(1.2),
        "×",
    );
    for p in [first, last] {
        report.target(
            format!(
                "scale, {} objects: syncgc's time to ready ÷ the apiserver's ConfigMap list alone",
                p.objects
            ),
            p.ready_over_list(),
            Goal::AtMost(1.15),
            "×",
        );
    }
    report.target(
        format!(
            "scale: syncgc's memory per object, {objects} ÷ {} objects",
            first.objects
        ),
        last.syncgc_bytes / first.syncgc_bytes,
        Goal::AtMost(1.2),
        "×",
    );
    Ok(())
}

/// Every ConfigMap, listed as syncgc lists it.
const CONFIG_MAPS: &str = "/api/v1/configmaps";

/// Every custom resource of the phase, listed as syncgc lists it.
fn scaleds() -> String {
    format!("/apis/{}/{PLURAL}", custom_resource().api_version)
}

/// The apiserver's answers to syncgc's lists of every object of `collections`, sent at once
/// (metadata, in protobuf where it can, from its watch cache), each read to its end and
/// dropped: the median of [`STARTS`] times until the last has ended.
async fn read_lists(plane: &Plane, collections: &[&str]) -> Result<Duration> {
    let read = |collection: &str| {
        let cache = kube::api::ListParams {
            resource_version: Some("0".to_owned()),
            ..Default::default()
        };
        let request = kube::core::Request::new(collection).list_metadata(&cache);
        let collection = collection.to_owned();
        async move {
            let mut request = request?;
            request.headers_mut().insert(
                http::header::ACCEPT,
                http::HeaderValue::from_static(syncgc::api::proto::ACCEPT),
            );
            let response = plane
                .client
                .send(request.map(kube::client::Body::from))
                .await?;
            if !response.status().is_success() {
                bail!("listing {collection}: {}", response.status());
            }
            let mut body = response.into_body();
            while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
                frame?;
            }
            Ok(())
        }
    };
    let mut times = Vec::new();
    for _ in 0..STARTS {
        let started = Instant::now();
        futures::future::try_join_all(collections.iter().map(|c| read(c))).await?;
        times.push(started.elapsed());
    }
    Ok(middle(times))
}

/// One owner with `SYNCGC_BENCH_SCALE_CASCADE` flat dependents deleted in the background by the
/// native GC (`native`) or by syncgc standalone, unthrottled, with syncgc's memory read over it.
async fn cascade_at_scale(settings: &Settings, plane: &mut Plane, native: bool) -> Result<Cascade> {
    let n = settings.scale_cascade;
    let c = settings.concurrency;
    eprintln!(
        "scale: cascade of {n} dependents by {}",
        if native {
            "kube-controller-manager"
        } else {
            "syncgc"
        }
    );
    plane.kcm(Kcm::unthrottled(native, c as u32)).await?;
    let deletion = Deletion::Owner(PropagationPolicy::Background);
    if native {
        let outcome = cascade::run(plane, Shape::Flat, n, CREATING, deletion).await?;
        eprintln!(
            "scale: cascade by kube-controller-manager: {:.1} s, {:.2} requests per object",
            outcome.seconds, outcome.requests_per_object
        );
        return Ok(Cascade {
            outcome,
            peak: 0,
            before: 0,
        });
    }
    let syncgc = plane
        .syncgc(&run_args(
            "standalone",
            UNTHROTTLED_QPS,
            UNTHROTTLED_BURST,
            c,
        ))
        .await?;
    let pid = syncgc.pid();
    let before = crate::plane::rss(pid)?;
    let peak = Arc::new(AtomicU64::new(before));
    let sampling = tokio::spawn({
        let peak = peak.clone();
        async move {
            loop {
                if let Ok(rss) = crate::plane::rss(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
        }
    });
    let outcome = cascade::run(plane, Shape::Flat, n, CREATING, deletion).await;
    sampling.abort();
    drop(syncgc);
    let outcome = outcome?;
    let peak = peak.load(Ordering::Relaxed);
    eprintln!(
        "scale: cascade by syncgc: {:.1} s, {:.2} requests per object",
        outcome.seconds, outcome.requests_per_object
    );
    Ok(Cascade {
        outcome,
        peak,
        before,
    })
}

/// Creates objects `from..to` in `namespace`: in each ten, the first an owner ConfigMap (its
/// uid kept in `owners`), the last a custom resource it owns, the eight between ConfigMaps it
/// owns; the owners first.
async fn create(
    plane: &Plane,
    namespace: &str,
    range: std::ops::Range<usize>,
    owners: &mut HashMap<usize, String>,
) -> Result<()> {
    eprintln!("scale: creating objects {range:?}");
    let configmaps: Api<ConfigMap> = Api::namespaced(plane.client.clone(), namespace);
    let resource = custom_resource();
    let custom: Api<DynamicObject> =
        Api::namespaced_with(plane.client.clone(), namespace, &resource);
    let created: Vec<(usize, String)> =
        futures::stream::iter(range.clone().filter(|i| i % 10 == 0))
            .map(|i| {
                let api = configmaps.clone();
                async move {
                    let created = api
                        .create(&PostParams::default(), &config_map(i, None))
                        .await?;
                    Ok::<_, kube::Error>((i, created.metadata.uid.unwrap_or_default()))
                }
            })
            .buffer_unordered(CREATING)
            .try_collect()
            .await
            .context("creating the owners")?;
    owners.extend(created);
    let owners = &*owners;
    let reference = |i: usize| {
        let owner = i - i % 10;
        (name_of(owner), owners[&owner].clone())
    };
    let done = std::sync::atomic::AtomicUsize::new(0);
    futures::stream::iter(range.filter(|i| i % 10 != 0))
        .map(|i| {
            let (configmaps, custom, resource) = (&configmaps, &custom, &resource);
            let (done, owner) = (&done, reference(i));
            async move {
                let post = PostParams::default();
                if i % 10 == 9 {
                    let mut object = DynamicObject::new(&name_of(i), resource);
                    object.metadata.owner_references = Some(vec![owner_reference(owner)]);
                    custom.create(&post, &object).await.map(drop)?;
                } else {
                    configmaps
                        .create(&post, &config_map(i, Some(owner)))
                        .await
                        .map(drop)?;
                }
                let done = done.fetch_add(1, Ordering::Relaxed) + 1;
                if done % 100_000 == 0 {
                    eprintln!("scale: {done} dependents created");
                }
                Ok::<_, kube::Error>(())
            }
        })
        .buffer_unordered(CREATING)
        .try_collect::<Vec<()>>()
        .await
        .context("creating the dependents")?;
    Ok(())
}

fn name_of(i: usize) -> String {
    format!("o-{i}")
}

/// A reference to the owner ConfigMap (name, uid).
fn owner_reference((name, uid): (String, String)) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name,
        uid,
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn config_map(i: usize, owner: Option<(String, String)>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name_of(i)),
            owner_references: owner.map(|owner| vec![owner_reference(owner)]),
            ..Default::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..Default::default()
    }
}

fn custom_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", KIND), PLURAL)
}

/// Adds the phase's CRD and waits until it is Established (`add`), or deletes it (and with it
/// its objects).
async fn crd(plane: &Plane, add: bool) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(plane.client.clone());
    let name = format!("{PLURAL}.{GROUP}");
    if !add {
        api.delete(&name, &DeleteParams::default()).await?;
        return Ok(());
    }
    let definition: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": { "plural": PLURAL, "kind": KIND },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } } }]
        }
    }))?;
    if api.get_opt(&name).await?.is_none() {
        api.create(&PostParams::default(), &definition).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let established = api.get(&name).await?.status.is_some_and(|status| {
            status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        if established {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("CRD {name} not Established after a minute");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
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
        at_ready: 0,
        peak: 0,
    })
}

/// Starts syncgc standalone (kube-controller-manager without its GC): how long until ready, its
/// resident memory and peak then, and its resident memory [`SETTLE`] after.
async fn syncgc_start(plane: &mut Plane, settings: &Settings) -> Result<Sample> {
    plane
        .kcm(Kcm::unthrottled(false, settings.concurrency as u32))
        .await?;
    let started = Instant::now();
    let syncgc = plane
        .syncgc(&["--mode".to_owned(), "standalone".to_owned()])
        .await?;
    let ready = started.elapsed();
    let at_ready = syncgc.rss()?;
    let peak = crate::plane::high_water_mark(syncgc.pid())?;
    tokio::time::sleep(SETTLE).await;
    Ok(Sample {
        ready,
        resident: syncgc.rss()?,
        heap: 0,
        at_ready,
        peak,
    })
}

/// Deletes every ConfigMap and custom resource of `namespace`, [`CREATING`] requests in flight.
async fn clear(plane: &Plane, namespace: &str) -> Result<()> {
    let resource = custom_resource();
    let started = Instant::now();
    let configmaps: Api<ConfigMap> = Api::namespaced(plane.client.clone(), namespace);
    let custom: Api<DynamicObject> =
        Api::namespaced_with(plane.client.clone(), namespace, &resource);
    let deleted = delete_all(&configmaps).await? + delete_all(&custom).await?;
    eprintln!(
        "scale: deleted {deleted} objects in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Deletes every object `api` lists, a page at a time, [`CREATING`] requests in flight: how
/// many.
async fn delete_all<K>(api: &Api<K>) -> Result<usize>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut deleted = 0;
    loop {
        let page = api
            .list_metadata(&kube::api::ListParams::default().limit(5000))
            .await?;
        if page.items.is_empty() {
            return Ok(deleted);
        }
        let names: Vec<String> = page
            .items
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .collect();
        deleted += names.len();
        futures::stream::iter(names)
            .map(|name| async move {
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    // Gone already (a collector took it).
                    Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                    Err(err) => Err(err),
                }
            })
            .buffer_unordered(CREATING)
            .try_collect::<Vec<()>>()
            .await?;
    }
}
