//! What syncgc's webhook costs writes that do not concern it: unannotated ConfigMaps created,
//! updated and deleted over keep-alive connections, in rounds without syncgc's registration,
//! with it exactly as `syncgc webhook-config` makes it, with it as `--unarmed-delete deny`
//! needs it, and with its DELETE webhook alone (ordered ABCD DCBA, so that a drift of the
//! machine weighs on each alike); the rates' ratios, and the admission reviews that reached
//! syncgc per operation.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use syncgc::names::{SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER};
use syncgc::webhook::admit::UnarmedDelete;
use syncgc::webhook::registration::{
    Coverage, DEFAULT_EXCLUDED_NAMESPACES, Registration, WebhookClient,
};

use crate::Settings;
use crate::plane::Plane;
use crate::report::{Goal, Report, round};

const NAME: &str = "syncgc-bench-writes";
const OPERATIONS: [&str; 3] = ["CREATE", "UPDATE", "DELETE"];
/// The pause before each operation's writes.
const SETTLE: Duration = Duration::from_secs(3);

/// Seconds each operation took over all rounds of one kind, and the reviews syncgc answered.
#[derive(Default)]
struct Rounds {
    seconds: [f64; 3],
    reviews: [f64; 3],
}

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let (n, connections, pairs) = (settings.writes, settings.writers, settings.writes_rounds);
    eprintln!(
        "writes: {n} ConfigMaps created, updated and deleted over {connections} connections, \
         {pairs} rounds each without the webhook, with it, and with it as --unarmed-delete deny \
         registers it"
    );
    let syncgc = plane
        .syncgc(&crate::run_args("cooperative", 50, 100, 8))
        .await?;
    let namespace = plane.namespace(NAME, &[]).await?;
    let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), &namespace);
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(plane.client.clone());
    let server = plane.server().await?;
    // What `syncgc run --manage-webhook` registers: before 1.28, rules from discovery.
    let found = syncgc::gc::discovery::discover(&plane.client, &[]).await?;
    let scope = Coverage::of_discovery(&found.resources, &found.failed);
    let registration = |unarmed_delete| -> Result<MutatingWebhookConfiguration> {
        Ok(Registration {
            name: NAME.into(),
            client: WebhookClient::Url(format!("https://{}/mutate", syncgc.webhook)),
            ca_bundle: std::fs::read(plane.certs().join("ca.crt"))?,
            timeout_seconds: 3,
            excluded_namespaces: DEFAULT_EXCLUDED_NAMESPACES.map(str::to_owned).to_vec(),
            unarmed_delete,
            guards: true,
            server,
            scope: scope.clone(),
        }
        .configuration())
    };
    let allow = registration(UnarmedDelete::Allow)?;
    // The DELETE webhook alone: what DELETE pays for its own registration, apart from what
    // CREATE and UPDATE calls leave the apiserver to do.
    let mut delete_only = allow.clone();
    delete_only.webhooks.as_mut().context("webhooks")?.remove(0);
    let variants = [
        None,
        Some(allow),
        Some(registration(UnarmedDelete::Deny)?),
        Some(delete_only),
    ];
    let mut rounds: [Rounds; 4] = Default::default();
    let _ = webhooks.delete(NAME, &DeleteParams::default()).await;
    for pair in 0..pairs {
        // A B C D, then D C B A: a drift of the machine weighs on every kind alike.
        let mut order: Vec<usize> = (0..variants.len()).collect();
        if pair % 2 == 1 {
            order.reverse();
        }
        for v in order {
            let _ = webhooks.delete(NAME, &DeleteParams::default()).await;
            if let Some(configuration) = &variants[v] {
                webhooks
                    .create(&PostParams::default(), configuration)
                    .await?;
            }
            // The DELETE webhook alone cannot be probed with a create; the creates and updates
            // before its deletes leave the apiserver seconds to take it.
            applied(&api, v == 1 || v == 2).await?;
            let before = reviews(&syncgc).await?;
            let took = writes(&api, pair * variants.len() + v, n, connections).await?;
            let after = reviews(&syncgc).await?;
            for i in 0..OPERATIONS.len() {
                rounds[v].seconds[i] += took[i].as_secs_f64();
                rounds[v].reviews[i] += after[i] - before[i];
            }
        }
    }
    let _ = webhooks.delete(NAME, &DeleteParams::default()).await;
    plane.drop_namespace(&namespace).await?;

    let total = (n * pairs) as f64;
    let [without, with, deny, delete_only] = &rounds;
    let table = report.table(
        format!(
            "Writes that do not concern syncgc: {n} unannotated ConfigMaps created, updated \
             (a merge patch of their data) and deleted with {connections} requests in flight, \
             {pairs} rounds without syncgc's registration, {pairs} with it as \
             `syncgc webhook-config` prints it, {pairs} with it as \
             `syncgc webhook-config --unarmed-delete deny` prints it, {pairs} with its DELETE \
             webhook alone (order ABCD DCBA); a {SETTLE:?} pause before each operation; rates \
             over all rounds of a kind"
        ),
        vec![
            "operation",
            "without /s",
            "with /s",
            "with ÷ without",
            "reviews syncgc answered per write",
            "with deny /s",
            "deny ÷ without",
            "DELETE webhook alone /s",
            "alone ÷ without",
        ],
    );
    let ratio = |r: &Rounds, i: usize| without.seconds[i] / r.seconds[i];
    for (i, operation) in OPERATIONS.iter().enumerate() {
        table.rows.push(vec![
            (*operation).into(),
            round(total / without.seconds[i]),
            round(total / with.seconds[i]),
            round(ratio(with, i)),
            round(with.reviews[i] / total),
            round(total / deny.seconds[i]),
            round(ratio(deny, i)),
            round(total / delete_only.seconds[i]),
            round(ratio(delete_only, i)),
        ]);
    }
    report.target(
        "writes: unannotated DELETE with ÷ without syncgc's webhook",
        ratio(with, 2),
        Goal::AtLeast(0.97),
        "×",
    );
    Ok(())
}

/// Admission reviews syncgc has answered so far, per operation.
async fn reviews(syncgc: &crate::plane::Syncgc) -> Result<[f64; 3]> {
    let mut counts = [0.0; 3];
    for (i, operation) in OPERATIONS.iter().enumerate() {
        counts[i] = syncgc
            .metric(&format!(
                "syncgc_webhook_requests_total{{operation=\"{operation}\""
            ))
            .await?;
    }
    Ok(counts)
}

/// Waits until the apiserver calls the webhook (`registered`) or no longer does: a dry-run
/// create of an opted-in ConfigMap comes back armed, or not.
async fn applied(api: &Api<ConfigMap>, registered: bool) -> Result<()> {
    let probe = ConfigMap {
        metadata: ObjectMeta {
            name: Some("probe".into()),
            annotations: Some([(SYNCHRONOUS_ANNOTATION.to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut agreed = 0;
    while Instant::now() < deadline {
        let made = api.create(&dry_run, &probe).await?;
        let armed = made.finalizers().iter().any(|f| f == SYNCHRONOUS_FINALIZER);
        // Every apiserver's copy of the configuration must agree: a few answers in a row.
        agreed = if armed == registered { agreed + 1 } else { 0 };
        if agreed == 5 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the apiserver did not take the registration's change (registered: {registered})")
}

/// Creates, updates and deletes `n` ConfigMaps, `connections` requests in flight; the time
/// each of the three took.
async fn writes(
    api: &Api<ConfigMap>,
    turn: usize,
    n: usize,
    connections: usize,
) -> Result<[Duration; 3]> {
    let name = |i: usize| format!("w-{turn}-{i}");
    let mut took = [Duration::ZERO; 3];
    for (op, slot) in took.iter_mut().enumerate() {
        // What the previous operation left to do (the apiserver's and etcd's own catching up)
        // is not counted against the next.
        tokio::time::sleep(SETTLE).await;
        let started = Instant::now();
        let results: Vec<Result<()>> = futures::stream::iter(0..n)
            .map(|i| async move {
                match op {
                    0 => {
                        let object = ConfigMap {
                            metadata: ObjectMeta {
                                name: Some(name(i)),
                                ..Default::default()
                            },
                            data: Some([("k".to_owned(), "v".to_owned())].into()),
                            ..Default::default()
                        };
                        api.create(&PostParams::default(), &object).await.map(drop)
                    }
                    1 => {
                        let patch = serde_json::json!({ "data": { "k": i.to_string() } });
                        api.patch(&name(i), &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                            .map(drop)
                    }
                    _ => api
                        .delete(&name(i), &DeleteParams::default())
                        .await
                        .map(drop),
                }
                .with_context(|| format!("{} {}", OPERATIONS[op], name(i)))
            })
            .buffer_unordered(connections)
            .collect()
            .await;
        results.into_iter().collect::<Result<()>>()?;
        *slot = started.elapsed();
    }
    Ok(took)
}
