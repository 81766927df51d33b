//! syncgc's API through the aggregation layer ([`syncgc::aggregated`]): the plan of an owner
//! with [`DEPENDENTS`] ConfigMap dependents among N objects (`SYNCGC_BENCH_API_N`, 1,000,000
//! by default, in namespaces of 100,000), asked [`ASKS`] times of `syncgc run` through the
//! apiserver (p50 and p99), against `syncgc plan` making the same plan as a client (listing
//! the namespace; the median of [`PLANS`]) in the same run; and the deletion causes of a
//! namespace holding [`DEPENDENTS`] recent causes (an armed owner's cascade), listed [`ASKS`]
//! times.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use serde_json::{Value, json};

use crate::Settings;
use crate::plane::{Kcm, Plane, UNTHROTTLED_BURST, UNTHROTTLED_QPS};
use crate::report::{Goal, Report, round};
use crate::tree::reference_to;

/// Dependents of the planned owner, and causes of the namespace listed.
const DEPENDENTS: usize = 10_000;
/// Requests in flight while the objects are created.
const CREATING: usize = 64;
/// Objects per namespace of the cluster's bulk.
const PER_NAMESPACE: usize = 100_000;
/// Plans and lists asked through the API.
const ASKS: usize = 50;
/// Plans made as a client.
const PLANS: usize = 5;
/// The label that selects the bench's webhook.
const LABEL: (&str, &str) = ("syncgc.io/bench-api", "on");
const API_SERVICE: &str = "v1alpha1.syncgc.io";

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let total: usize = std::env::var("SYNCGC_BENCH_API_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    eprintln!("api: an owner with {DEPENDENTS} dependents among {total} objects");
    plane
        .kcm(Kcm::unthrottled(true, settings.concurrency as u32))
        .await?;
    plane.settle_namespaces().await?;
    let mut bulk = Vec::new();
    let mut created = 0;
    while created < total.saturating_sub(2 * DEPENDENTS) {
        let namespace = plane.namespace("syncgc-bench-api-bulk", &[]).await?;
        let count = PER_NAMESPACE.min(total - 2 * DEPENDENTS - created);
        fill(plane, &namespace, count).await?;
        created += count;
        eprintln!("api: {created} objects created");
        bulk.push(namespace);
    }
    let planned = plane.namespace("syncgc-bench-api-plan", &[]).await?;
    let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), &planned);
    let owner = create(&api, "owner".into(), vec![], false).await?;
    let reference = reference_to(&owner)?;
    children(&api, &reference).await?;
    plane.apiserver_at_rest().await?;

    let syncgc = plane
        .syncgc(&[
            "--qps".into(),
            UNTHROTTLED_QPS.to_string(),
            "--burst".into(),
            UNTHROTTLED_BURST.to_string(),
        ])
        .await?;
    register(plane, syncgc.webhook.port()).await?;

    // The plan, through the API and as a client.
    let review = json!({
        "apiVersion": "syncgc.io/v1alpha1", "kind": "DeletionPlan",
        "metadata": {"namespace": planned},
        "spec": {"target": {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner"}},
    });
    let path = format!("/apis/syncgc.io/v1alpha1/namespaces/{planned}/deletionplans");
    let mut served = Vec::new();
    for _ in 0..ASKS {
        let request = http::Request::post(&path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&review)?)?;
        let started = Instant::now();
        let plan: Value = plane.client.request(request).await?;
        served.push(started.elapsed());
        let deleted = plan["status"]["delete"].as_array().map_or(0, Vec::len);
        anyhow::ensure!(
            deleted == DEPENDENTS,
            "the served plan deletes {deleted} objects"
        );
    }
    let mut client = Vec::new();
    for _ in 0..PLANS {
        let started = Instant::now();
        let out = std::process::Command::new(crate::plane::syncgc_binary())
            .args([
                "plan",
                "configmap/owner",
                "-n",
                &planned,
                "--mode",
                "cooperative",
                "-o",
                "json",
            ])
            .env("KUBECONFIG", plane.kubeconfig())
            .output()
            .context("syncgc plan")?;
        client.push(started.elapsed());
        anyhow::ensure!(
            out.status.success(),
            "syncgc plan: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The causes of a namespace: an armed owner's cascade, each object recorded.
    let recorded = plane.namespace("syncgc-bench-api-causes", &[LABEL]).await?;
    let webhooks = plane
        .register_webhook("syncgc-bench-api", syncgc.webhook, LABEL, 10)
        .await?;
    let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), &recorded);
    let armed = create(&api, "owner".into(), vec![], true).await?;
    children(&api, &reference_to(&armed)?).await?;
    plane.apiserver_at_rest().await?;
    api.delete("owner", &DeleteParams::background()).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    while api.get_opt("owner").await?.is_some() {
        anyhow::ensure!(Instant::now() < deadline, "the armed owner did not go");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let path = format!("/apis/syncgc.io/v1alpha1/namespaces/{recorded}/deletioncauses");
    let mut listed = Vec::new();
    let mut items = 0;
    for _ in 0..ASKS {
        let request = http::Request::get(&path).body(Vec::new())?;
        let started = Instant::now();
        let list: Value = plane.client.request(request).await?;
        listed.push(started.elapsed());
        items = list["items"].as_array().map_or(0, Vec::len);
    }
    anyhow::ensure!(items > DEPENDENTS, "{items} causes listed");

    let (plan_p50, plan_p99) = (percentile(&mut served, 0.5), percentile(&mut served, 0.99));
    let client_median = percentile(&mut client, 0.5);
    let (causes_p50, causes_p99) = (percentile(&mut listed, 0.5), percentile(&mut listed, 0.99));
    eprintln!(
        "api: plan p50 {plan_p50:?} p99 {plan_p99:?} (client {client_median:?}); causes p50 {causes_p50:?} p99 {causes_p99:?}"
    );
    let ms = |d: Duration| format!("{} ms", round(d.as_secs_f64() * 1000.0));
    let table = report.table(
        format!(
            "syncgc's API through the aggregation layer: the plan of an owner with {DEPENDENTS} \
             ConfigMap dependents among {total} objects ({ASKS} asks; the client's median of \
             {PLANS}), and the deletion causes of a namespace holding {items} recent causes \
             ({ASKS} lists)"
        ),
        vec!["", "p50", "p99", "against"],
    );
    table.rows.push(vec![
        "`DeletionPlan` through the apiserver".into(),
        ms(plan_p50),
        ms(plan_p99),
        format!(
            "`syncgc plan` as a client: {} (÷ API p50: ×{})",
            ms(client_median),
            round(client_median.as_secs_f64() / plan_p50.as_secs_f64())
        ),
    ]);
    table.rows.push(vec![
        "`deletioncauses` list through the apiserver".into(),
        ms(causes_p50),
        ms(causes_p99),
        String::new(),
    ]);
    report.target(
        format!("api: plan of {DEPENDENTS} dependents among {total} objects, p99"),
        plan_p99.as_secs_f64() * 1000.0,
        Goal::AtMost(100.0),
        "ms",
    );

    webhooks
        .delete("syncgc-bench-api", &DeleteParams::default())
        .await?;
    unregister(plane).await?;
    drop(syncgc);
    for namespace in bulk.iter().chain([&planned, &recorded]) {
        plane.drop_namespace(namespace).await?;
    }
    Ok(())
}

fn percentile(samples: &mut [Duration], at: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 * at).ceil() as usize).clamp(1, samples.len()) - 1;
    samples[index]
}

async fn create(
    api: &Api<ConfigMap>,
    name: String,
    owners: Vec<OwnerReference>,
    armed: bool,
) -> Result<ConfigMap> {
    let object = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            owner_references: (!owners.is_empty()).then_some(owners),
            annotations: armed.then(|| {
                [(
                    syncgc::names::SYNCHRONOUS_ANNOTATION.to_owned(),
                    "true".to_owned(),
                )]
                .into()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(api.create(&PostParams::default(), &object).await?)
}

/// [`DEPENDENTS`] ConfigMaps owned by `reference`.
async fn children(api: &Api<ConfigMap>, reference: &OwnerReference) -> Result<()> {
    futures::stream::iter(0..DEPENDENTS)
        .map(|d| create(api, format!("d-{d}"), vec![reference.clone()], false))
        .buffer_unordered(CREATING)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// `count` ConfigMaps in `namespace`: in each ten an owner and nine it owns.
async fn fill(plane: &Plane, namespace: &str, count: usize) -> Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), namespace);
    futures::stream::iter((0..count).step_by(10))
        .map(|i| {
            let api = api.clone();
            async move {
                let owner = create(&api, format!("o-{i}"), vec![], false).await?;
                let reference = reference_to(&owner)?;
                for d in 1..10.min(count - i) {
                    create(&api, format!("o-{i}-{d}"), vec![reference.clone()], false).await?;
                }
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(CREATING)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Registers syncgc's API, served on `port` of every address of this machine, with the
/// aggregation layer (a Service whose endpoint is the node's address), and waits until it is
/// served.
async fn register(plane: &Plane, port: u16) -> Result<()> {
    let nodes = Api::<Node>::all(plane.client.clone())
        .list(&Default::default())
        .await?;
    let address = nodes
        .items
        .iter()
        .flat_map(|n| n.status.iter().flat_map(|s| s.addresses.iter().flatten()))
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
        .context("the node's address")?;
    let ca = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        std::fs::read(plane.certs().join("ca.crt"))?,
    );
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "syncgc-system"}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "syncgc-api", "namespace": "syncgc-system"},
         "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}},
        {"apiVersion": "v1", "kind": "Endpoints",
         "metadata": {"name": "syncgc-api", "namespace": "syncgc-system"},
         "subsets": [{"addresses": [{"ip": address}], "ports": [{"name": "https", "port": port}]}]},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": API_SERVICE},
         "spec": {"group": "syncgc.io", "version": "v1alpha1",
                  "groupPriorityMinimum": 1000, "versionPriority": 15, "caBundle": ca,
                  "service": {"name": "syncgc-api", "namespace": "syncgc-system", "port": 443}}},
    ]});
    kubectl(plane, &["apply", "-f", "-"], &objects.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let request = http::Request::get("/apis/syncgc.io/v1alpha1").body(Vec::new())?;
        if plane.client.request_text(request).await.is_ok() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "syncgc.io/v1alpha1 is not served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn unregister(plane: &Plane) -> Result<()> {
    kubectl(
        plane,
        &["delete", "apiservice", API_SERVICE, "--ignore-not-found"],
        "",
    )?;
    kubectl(
        plane,
        &[
            "-n",
            "syncgc-system",
            "delete",
            "service",
            "syncgc-api",
            "--ignore-not-found",
        ],
        "",
    )
}

fn kubectl(plane: &Plane, args: &[&str], input: &str) -> Result<()> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", plane.kubeconfig())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("kubectl")?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(input.as_bytes())?;
    anyhow::ensure!(child.wait()?.success(), "kubectl {args:?} failed");
    Ok(())
}
