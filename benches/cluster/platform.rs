//! Platform clusters: what the release barrier costs as the number of kinds served grows. The
//! same readings on the same cluster before and after adding [`CRDS`] namespaced
//! CustomResourceDefinitions, syncgc cooperative at its default limits: a lone release (an
//! armed owner with five dependents deleted, until it is gone), p50 and p99 of
//! `SYNCGC_BENCH_BARRIER_TRIALS`; the barrier's requests per lone release; and bursts of
//! [`BURST`] armed owners with two dependents each, deleted at once, in one namespace and
//! spread over [`SPREAD`] namespaces, until all are gone. Then, with the CRDs,
//! [`CRS_PER_CRD`] custom resources of each kind carrying an annotation of
//! [`ANNOTATION_BYTES`]: each collector's time to ready and memory per object, as the `scale`
//! phase measures them (kube-controller-manager's GC against syncgc standalone).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use syncgc::names::SYNCHRONOUS_ANNOTATION;

use crate::plane::{Kcm, Plane};
use crate::report::{Goal, Report, round};
use crate::scale::{Start, median_start};
use crate::tree::owner_with_dependents;
use crate::{Settings, kubectl, registered_namespace};

/// Namespaced CRDs added for the second reading.
pub const CRDS: usize = 300;
/// Owners deleted at once in a burst.
const BURST: usize = 200;
/// Namespaces a spread burst is spread over.
const SPREAD: usize = 50;
/// Dependents of a lone release's owner, and of a burst's.
const LONE_DEPENDENTS: usize = 5;
const BURST_DEPENDENTS: usize = 2;
/// Custom resources of each kind for the startup reading, and the bytes of the annotation
/// each carries.
const CRS_PER_CRD: usize = 100;
const ANNOTATION_BYTES: usize = 8 * 1024;
/// The label of everything the phase makes outside its namespaces.
const LABEL: &str = "syncgc.io/bench=platform";
const GROUP: &str = "platform.bench.syncgc.io";

/// One reading of the cluster as it is.
struct Reading {
    kinds: usize,
    lone: Vec<Duration>,
    requests_per_release: f64,
    /// The mean time of the barrier's rounds of one namespace over the lone releases.
    round: Duration,
    burst: Duration,
    spread: Duration,
}

fn percentile_ms(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    eprintln!("platform: lone releases and bursts, before and after adding {CRDS} CRDs");
    plane
        .kcm(Kcm::unthrottled(true, settings.concurrency as u32))
        .await?;
    crds(false)?;
    let mut readings = Vec::new();
    for with_crds in [false, true] {
        if with_crds {
            crds(true)?;
        }
        // A platform cluster at rest: not measured while the apiserver takes in the CRDs.
        plane.apiserver_at_rest().await?;
        // A syncgc started on the cluster as it is, as a user's would be.
        let syncgc = plane
            .syncgc(&["--mode".to_owned(), "cooperative".to_owned()])
            .await?;
        let (namespace, registration) =
            registered_namespace(plane, &syncgc, "syncgc-bench-platform").await?;
        let kinds = syncgc.metric("syncgc_watched_resources").await? as usize;
        let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), &namespace);
        let reads = syncgc.metric("syncgc_barrier_reads_total").await?;
        let rounds = round_totals(&syncgc).await?;
        let n = settings.barrier_trials;
        let mut lone = Vec::with_capacity(n);
        for i in 0..n {
            lone.push(lone_release(&api, i).await?);
        }
        lone.sort();
        let requests_per_release =
            (syncgc.metric("syncgc_barrier_reads_total").await? - reads) / n as f64;
        let (seconds, count) = round_totals(&syncgc).await?;
        let round = Duration::from_secs_f64((seconds - rounds.0) / (count - rounds.1).max(1.0));
        let burst = delete_at_once(std::slice::from_ref(&api)).await?;
        let mut spread_namespaces = Vec::new();
        for _ in 0..SPREAD {
            spread_namespaces.push(
                plane
                    .namespace(
                        "syncgc-bench-platform",
                        &[("syncgc.io/bench", "syncgc-bench-platform")],
                    )
                    .await?,
            );
        }
        let apis: Vec<Api<ConfigMap>> = spread_namespaces
            .iter()
            .map(|ns| Api::namespaced(plane.client.clone(), ns))
            .collect();
        let spread = delete_at_once(&apis).await?;
        eprintln!(
            "platform: {kinds} kinds watched: lone p50 {:.0} ms, burst {:.1} s, spread {:.1} s",
            percentile_ms(&lone, 0.5),
            burst.as_secs_f64(),
            spread.as_secs_f64()
        );
        readings.push(Reading {
            kinds,
            lone,
            requests_per_release,
            round,
            burst,
            spread,
        });
        registration.remove().await?;
        for ns in spread_namespaces.iter().chain([&namespace]) {
            plane.drop_namespace(ns).await?;
        }
    }
    startup(settings, plane, report).await?;
    crds(false)?;
    plane
        .kcm(Kcm::unthrottled(true, settings.concurrency as u32))
        .await?;
    let [before, after] = [&readings[0], &readings[1]];
    let table = report.table(
        format!(
            "Platform cluster: the same cluster before and after adding {CRDS} namespaced CRDs, \
             syncgc cooperative at its defaults. Lone release: an armed owner with \
             {LONE_DEPENDENTS} dependents deleted, until it is gone ({} one after another). \
             Bursts: {BURST} armed owners with {BURST_DEPENDENTS} dependents each deleted at \
             once, until all are gone, in one namespace and over {SPREAD} namespaces",
            settings.barrier_trials
        ),
        vec![
            "",
            "resources watched",
            "lone p50 ms",
            "lone p99 ms",
            "barrier requests per lone release",
            "barrier round mean ms",
            "burst, one namespace s",
            "burst, spread s",
        ],
    );
    for (name, r) in [("before", before), (&format!("with {CRDS} CRDs"), after)] {
        table.rows.push(vec![
            name.to_string(),
            r.kinds.to_string(),
            round(percentile_ms(&r.lone, 0.5)),
            round(percentile_ms(&r.lone, 0.99)),
            round(r.requests_per_release),
            round(r.round.as_secs_f64() * 1000.0),
            round(r.burst.as_secs_f64()),
            round(r.spread.as_secs_f64()),
        ]);
    }
    let ratio = |f: fn(&Reading) -> f64| f(after) / f(before);
    let burst = ratio(|r| r.burst.as_secs_f64());
    let spread = ratio(|r| r.spread.as_secs_f64());
    table.rows.push(vec![
        "with ÷ before".into(),
        String::new(),
        round(ratio(|r| percentile_ms(&r.lone, 0.5))),
        round(ratio(|r| percentile_ms(&r.lone, 0.99))),
        round(ratio(|r| r.requests_per_release)),
        round(ratio(|r| r.round.as_secs_f64())),
        round(burst),
        round(spread),
    ]);
    report.target(
        format!("platform: lone release p50 with {CRDS} CRDs"),
        percentile_ms(&after.lone, 0.5),
        Goal::AtMost(300.0),
        "ms",
    );
    report.target(
        format!("platform: burst in one namespace, {CRDS} CRDs ÷ none"),
        burst,
        Goal::AtMost(1.2),
        "×",
    );
    report.target(
        format!("platform: burst over {SPREAD} namespaces, {CRDS} CRDs ÷ none"),
        spread,
        Goal::AtMost(1.2),
        "×",
    );
    Ok(())
}

/// Time to ready and memory per object of kube-controller-manager's GC and syncgc standalone,
/// each started over [`CRS_PER_CRD`] custom resources of each of the phase's kinds.
async fn startup(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let namespace = plane.namespace("syncgc-bench-platform-crs", &[]).await?;
    let baseline = median_start(plane, settings, Start::Syncgc).await?.resident;
    let objects = CRDS * CRS_PER_CRD;
    eprintln!("platform: creating {objects} custom resources");
    let payload = "x".repeat(ANNOTATION_BYTES);
    let creates = (0..objects).map(|i| {
        let kind = i % CRDS;
        let resource = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(GROUP, "v1", &format!("Kind{kind}")),
            &format!("kind{kind}s"),
        );
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(plane.client.clone(), &namespace, &resource);
        let mut object = kube::api::DynamicObject::new(&format!("cr-{i}"), &resource);
        object.metadata.annotations =
            Some([("bench.syncgc.io/payload".to_owned(), payload.clone())].into());
        async move { api.create(&PostParams::default(), &object).await }
    });
    futures::stream::iter(creates)
        .buffer_unordered(settings.concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let with_gc = median_start(plane, settings, Start::Native { gc: true }).await?;
    let without_gc = median_start(plane, settings, Start::Native { gc: false }).await?;
    let syncgc = median_start(plane, settings, Start::Syncgc).await?;
    let per_object = |with: u64, without: u64| with.saturating_sub(without) as f64 / objects as f64;
    let native_heap = per_object(with_gc.heap, without_gc.heap);
    let native_resident = per_object(with_gc.resident, without_gc.resident);
    let syncgc_bytes = per_object(syncgc.resident, baseline);
    let ready = syncgc.ready.as_secs_f64() / with_gc.ready.as_secs_f64();
    let table = report.table(
        format!(
            "Platform cluster, startup: {objects} custom resources ({CRS_PER_CRD} of each of \
             the {CRDS} CRDs, an annotation of {ANNOTATION_BYTES} bytes each) in one namespace; \
             each collector started over them as in the scale phase (medians of three starts)"
        ),
        vec![
            "native ready s",
            "syncgc ready s",
            "ready syncgc ÷ native",
            "native B/object resident",
            "native B/object Go heap",
            "syncgc B/object resident",
            "syncgc ÷ native Go heap",
        ],
    );
    table.rows.push(vec![
        round(with_gc.ready.as_secs_f64()),
        round(syncgc.ready.as_secs_f64()),
        round(ready),
        format!("{native_resident:.0}"),
        format!("{native_heap:.0}"),
        format!("{syncgc_bytes:.0}"),
        round(syncgc_bytes / native_heap),
    ]);
    report.target(
        format!("platform, {objects} custom resources: time to ready syncgc ÷ native"),
        ready,
        Goal::AtMost(0.5),
        "×",
    );
    report.target(
        format!(
            "platform, {objects} custom resources: memory per object, syncgc resident ÷ native Go heap in use"
        ),
        syncgc_bytes / native_heap,
        Goal::AtMost(0.5),
        "×",
    );
    // Removing the CRDs removes their objects; the namespace goes once they have.
    crds(false)?;
    plane.drop_namespace(&namespace).await?;
    Ok(())
}

/// Adds the phase's CRDs and waits until they are Established (`add`), or removes them.
pub fn crds(add: bool) -> Result<()> {
    if !add {
        kubectl(&["delete", "crd", "-l", LABEL, "--wait=true"], None)?;
        return Ok(());
    }
    let manifests: String = (0..CRDS)
        .map(|i| {
            serde_json::json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": { "name": format!("kind{i}s.{GROUP}"),
                    "labels": { "syncgc.io/bench": "platform" } },
                "spec": {
                    "group": GROUP, "scope": "Namespaced",
                    "names": { "plural": format!("kind{i}s"), "kind": format!("Kind{i}") },
                    "versions": [{ "name": "v1", "served": true, "storage": true,
                        "schema": { "openAPIV3Schema": { "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true } } }]
                }
            })
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n");
    kubectl(&["apply", "-f", "-"], Some(&manifests))?;
    kubectl(
        &[
            "wait",
            "crd",
            "-l",
            LABEL,
            "--for=condition=Established",
            "--timeout=300s",
        ],
        None,
    )?;
    Ok(())
}

/// An armed owner `name`, labelled as one.
fn armed_owner(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            annotations: Some([(SYNCHRONOUS_ANNOTATION.to_owned(), "true".to_owned())].into()),
            labels: Some([("owner".to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The barrier's rounds of a namespace so far: their seconds and their count.
async fn round_totals(syncgc: &crate::plane::Syncgc) -> Result<(f64, f64)> {
    let series =
        |part| format!("syncgc_barrier_round_duration_seconds_{part}{{scope=\"namespace\"}}");
    Ok((
        syncgc.metric(&series("sum")).await?,
        syncgc.metric(&series("count")).await?,
    ))
}

/// One lone release: from the owner's DELETE to its DELETED event.
async fn lone_release(api: &Api<ConfigMap>, i: usize) -> Result<Duration> {
    let owner = format!("lone-{i}");
    owner_with_dependents(api, armed_owner(&owner), LONE_DEPENDENTS).await?;
    // As a user's `kubectl delete` after creating: the watches have seen the tree.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let version = api
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .context("a list's resourceVersion")?;
    let events = api.watch(&WatchParams::default(), &version).await?;
    let mut events = std::pin::pin!(events);
    let started = Instant::now();
    api.delete(&owner, &DeleteParams::background()).await?;
    let deadline = started + Duration::from_secs(120);
    while let Some(event) = tokio::time::timeout_at(deadline.into(), events.next())
        .await
        .context("the owner was not released within 120 s")?
    {
        if let WatchEvent::Deleted(object) = event?
            && object.name_any() == owner
        {
            return Ok(started.elapsed());
        }
    }
    anyhow::bail!("the watch ended before the owner was released")
}

/// [`BURST`] owners spread evenly over `apis`' namespaces, deleted at once: how long until
/// all are gone.
async fn delete_at_once(apis: &[Api<ConfigMap>]) -> Result<Duration> {
    let owners: Vec<(&Api<ConfigMap>, String)> = (0..BURST)
        .map(|i| (&apis[i % apis.len()], format!("burst-{i}")))
        .collect();
    futures::stream::iter(&owners)
        .map(|(api, name)| owner_with_dependents(api, armed_owner(name), BURST_DEPENDENTS))
        .buffer_unordered(32)
        .collect::<Vec<Result<()>>>()
        .await
        .into_iter()
        .collect::<Result<()>>()?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    futures::stream::iter(&owners)
        .map(|(api, name)| async move { api.delete(name, &DeleteParams::background()).await })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let deadline = started + Duration::from_secs(600);
    let owners_left = ListParams::default().labels("owner=true");
    loop {
        let mut left = 0;
        for api in apis {
            left += api.list_metadata(&owners_left).await?.items.len();
        }
        if left == 0 {
            return Ok(started.elapsed());
        }
        anyhow::ensure!(Instant::now() < deadline, "{left} owners left after 600 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
