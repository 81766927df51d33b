//! `syncgc plan` and `syncgc explain --watch` on a platform cluster: 300 extra namespaced CRDs
//! served, and an owner with [`DEPENDENTS`] ConfigMap dependents. The plan's time and peak
//! resident memory (median and largest of [`PLANS`] runs), against its reads alone in the same
//! run (discovery and every namespaced kind's metadata listed, paged, in the namespace: what
//! any plan must read); and the apiserver requests per second while `explain --watch` follows
//! a deletion that waits (a foreground owner held by a finalizer; counted from 3 s after its
//! first line, once its watches have started), against the cluster idle and
//! against the former `--watch`, replayed by the bench as it read: the object, every namespaced
//! kind of its namespace and its Events, every 2 s.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use syncgc::api::{Cluster, Target};

use crate::Settings;
use crate::plane::{Kcm, Plane, high_water_mark};
use crate::platform::{CRDS, crds};
use crate::report::{Goal, Report, round};
use crate::tree::reference_to;

/// Dependents of the planned owner.
const DEPENDENTS: usize = 10_000;
/// Plans run; the median time is reported.
const PLANS: usize = 5;
/// How long each request rate is measured.
const WINDOW: Duration = Duration::from_secs(20);
/// How long `explain --watch` runs before its requests are counted (its watches' start).
const SETTLE: Duration = Duration::from_secs(3);
/// The former `explain --watch`'s interval.
const FORMER_INTERVAL: Duration = Duration::from_secs(2);

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    eprintln!("plan: an owner with {DEPENDENTS} dependents, {CRDS} CRDs served");
    plane
        .kcm(Kcm::unthrottled(true, settings.concurrency as u32))
        .await?;
    crds(true)?;
    // No namespace being deleted: the namespace controller's lists of every kind would count.
    plane.settle_namespaces().await?;
    plane.apiserver_at_rest().await?;
    let namespace = plane.namespace("syncgc-bench-plan", &[]).await?;
    let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), &namespace);
    let owner = create(&api, "owner", vec![], None).await?;
    let reference = reference_to(&owner)?;
    futures::stream::iter(0..DEPENDENTS)
        .map(|d| {
            let (api, reference) = (api.clone(), reference.clone());
            async move { create(&api, &format!("d-{d}"), vec![reference], None).await }
        })
        .buffer_unordered(settings.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    plane.apiserver_at_rest().await?;

    let mut reads = Vec::new();
    let mut plans = Vec::new();
    let mut peak = 0u64;
    for _ in 0..PLANS {
        reads.push(read_alone(plane, &namespace).await?);
        let (took, rss) = plan(plane, &namespace)?;
        plans.push(took);
        peak = peak.max(rss);
    }
    reads.sort();
    plans.sort();
    let (read, plan) = (reads[PLANS / 2], plans[PLANS / 2]);
    eprintln!(
        "plan: {:.2} s (reads alone {:.2} s), peak {:.0} MiB",
        plan.as_secs_f64(),
        read.as_secs_f64(),
        peak as f64 / (1024.0 * 1024.0)
    );

    // A deletion that waits: a foreground owner whose one dependent is held.
    let followed = create(&api, "followed", vec![], None).await?;
    create(
        &api,
        "held",
        vec![reference_to(&followed)?],
        Some("bench.syncgc.io/hold"),
    )
    .await?;
    api.delete("followed", &DeleteParams::foreground()).await?;
    plane.settle_namespaces().await?;
    plane.apiserver_at_rest().await?;
    let idle = rate(plane, async { tokio::time::sleep(WINDOW).await }).await?;
    let former = rate(plane, former_watch(plane, &namespace)).await?;
    let mut watch = Command::new(crate::plane::syncgc_binary())
        .args(["explain", "configmap/followed", "-n", &namespace, "--watch"])
        .env("KUBECONFIG", plane.kubeconfig())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting syncgc explain --watch")?;
    {
        // Its one read of the scope done: it printed where the deletion stands.
        use std::io::BufRead as _;
        let stdout = watch.stdout.take().context("its stdout")?;
        let mut first = String::new();
        std::io::BufReader::new(stdout).read_line(&mut first)?;
    }
    // And its watches started: what it costs while it follows, not its start.
    tokio::time::sleep(SETTLE).await;
    let now = rate(plane, async { tokio::time::sleep(WINDOW).await }).await?;
    let _ = watch.kill();
    let _ = watch.wait();
    eprintln!("plan: requests/s idle {idle:.1}, former --watch {former:.1}, --watch {now:.1}");

    let table = report.table(
        format!(
            "Plan and explain: an owner with {DEPENDENTS} ConfigMap dependents in a cluster serving \
             {CRDS} extra namespaced CRDs (median of {PLANS} plans; requests over {} s)",
            WINDOW.as_secs()
        ),
        vec!["", "value", "against"],
    );
    table.rows.push(vec![
        "`syncgc plan`: time".into(),
        format!("{} s", round(plan.as_secs_f64())),
        format!(
            "its reads alone {} s: ×{}",
            round(read.as_secs_f64()),
            round(plan.as_secs_f64() / read.as_secs_f64())
        ),
    ]);
    table.rows.push(vec![
        "`syncgc plan`: peak resident memory".into(),
        format!("{} MiB", round(peak as f64 / (1024.0 * 1024.0))),
        format!(
            "{} bytes per object",
            round(peak as f64 / (DEPENDENTS + 1) as f64)
        ),
    ]);
    table.rows.push(vec![
        "`explain --watch`: apiserver requests/s beyond idle".into(),
        round(now - idle).to_string(),
        format!(
            "the former `--watch`: {} (idle: {})",
            round(former - idle),
            round(idle)
        ),
    ]);
    report.target(
        format!("plan: {DEPENDENTS} dependents, {CRDS} CRDs"),
        plan.as_secs_f64(),
        Goal::AtMost(2.0),
        "s",
    );
    report.target(
        "explain --watch: requests/s beyond idle",
        (now - idle).max(0.0),
        Goal::AtMost(1.0),
        "/s",
    );
    // Let the held dependent go, or the namespace would stay Terminating.
    let patch = serde_json::json!({ "metadata": { "finalizers": null } });
    api.patch_metadata(
        "held",
        &Default::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    plane.drop_namespace(&namespace).await?;
    crds(false)?;
    Ok(())
}

async fn create(
    api: &Api<ConfigMap>,
    name: &str,
    owners: Vec<OwnerReference>,
    finalizer: Option<&str>,
) -> Result<ConfigMap> {
    let object = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            owner_references: (!owners.is_empty()).then_some(owners),
            finalizers: finalizer.map(|f| vec![f.to_owned()]),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(api.create(&PostParams::default(), &object).await?)
}

/// What any plan reads: discovery, and every namespaced kind's metadata in the namespace,
/// paged, through the same client.
async fn read_alone(plane: &Plane, namespace: &str) -> Result<Duration> {
    let started = Instant::now();
    let cluster = cluster(plane)?;
    let found = syncgc::gc::discovery::discover(cluster.streams(), &[]).await?;
    for resource in found.resources.iter().filter(|r| r.namespaced) {
        let collection = Target::collection(&resource.api, Some(namespace));
        cluster.list_metadata(&collection, drop).await?;
    }
    Ok(started.elapsed())
}

fn cluster(plane: &Plane) -> Result<Cluster> {
    Ok(Cluster::new(
        plane.client.clone(),
        None,
        Duration::from_secs(60),
        syncgc::metrics::Metrics::new()?,
    ))
}

/// One `syncgc plan` of the owner: its time, and its peak resident memory (its high-water mark,
/// read while it runs).
fn plan(plane: &Plane, namespace: &str) -> Result<(Duration, u64)> {
    let started = Instant::now();
    let mut child = Command::new(crate::plane::syncgc_binary())
        .args(["plan", "configmap/owner", "-n", namespace, "-o", "json"])
        .env("KUBECONFIG", plane.kubeconfig())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting syncgc plan")?;
    let mut peak = 0;
    loop {
        if let Some(status) = child.try_wait()? {
            anyhow::ensure!(status.success(), "syncgc plan failed: {status}");
            return Ok((started.elapsed(), peak));
        }
        if let Ok(hwm) = high_water_mark(child.id()) {
            peak = peak.max(hwm);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The former `explain --watch` for [`WINDOW`]: every 2 s, the object, every namespaced kind
/// of its namespace, and its Events.
async fn former_watch(plane: &Plane, namespace: &str) {
    let run = async {
        let found = syncgc::gc::discovery::discover(&plane.client, &[]).await?;
        let events: Api<Event> = Api::namespaced(plane.client.clone(), namespace);
        let maps: Api<ConfigMap> = Api::namespaced(plane.client.clone(), namespace);
        loop {
            maps.get_metadata_opt("followed").await?;
            for resource in found.resources.iter().filter(|r| r.namespaced) {
                let api: Api<kube::api::DynamicObject> =
                    Api::namespaced_with(plane.client.clone(), namespace, &resource.api);
                let _ = api.list_metadata(&ListParams::default()).await;
            }
            let _ = events.list(&ListParams::default()).await;
            tokio::time::sleep(FORMER_INTERVAL).await;
        }
        #[allow(unreachable_code)]
        anyhow::Ok(())
    };
    let _ = tokio::time::timeout(WINDOW, run).await;
}

/// The apiserver's requests per second (every verb but WATCH) while `during` runs.
async fn rate(plane: &Plane, during: impl std::future::Future<Output = ()>) -> Result<f64> {
    let before = plane.all_requests().await?;
    let started = Instant::now();
    during.await;
    let after = plane.all_requests().await?;
    Ok((after - before) / started.elapsed().as_secs_f64())
}
