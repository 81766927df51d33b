//! What syncgc's webhook costs writes that do not concern it: unannotated ConfigMaps created,
//! updated and deleted over keep-alive connections, in rounds without syncgc's registration,
//! with it exactly as `syncgc webhook-config` makes it, with the same registration calling the
//! floor webhook instead ([`crate::bare`]: the least a webhook can answer, on syncgc's stack),
//! with it as `--unarmed-delete deny` needs it, and with its DELETE webhook alone (ordered
//! ABCDE EDCBA, so that a drift of the machine weighs on each alike); the rates' ratios, the
//! admission reviews that reached syncgc per operation, and where the CPU goes: the time the
//! apiserver, etcd, the webhook's server (syncgc's threads but the collector's, or the floor)
//! and syncgc's collector spent per write. On this machine the apiserver and etcd use both
//! cores while writing, so a write's CPU decides its rate.

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
    Coverage, DEFAULT_EXCLUDED_NAMESPACES, GuardScope, Registration, WebhookClient,
};

use crate::Settings;
use crate::plane::{Plane, cpu_seconds, process_named};
use crate::report::{Goal, Report, round};

const NAME: &str = "syncgc-bench-writes";
const OPERATIONS: [&str; 3] = ["CREATE", "UPDATE", "DELETE"];
/// The pause before each operation's writes.
const SETTLE: Duration = Duration::from_secs(3);
/// The name of syncgc's collector thread; its other threads serve the webhook (and the rest).
const COLLECTOR_THREAD: &str = "collector";

/// The kinds of rounds: no registration, syncgc's, the floor's, syncgc's with
/// `--unarmed-delete deny`, syncgc's DELETE webhook alone.
const VARIANTS: usize = 5;
const WITHOUT: usize = 0;
const SYNCGC: usize = 1;
const FLOOR: usize = 2;
const DENY: usize = 3;
const DELETE_ALONE: usize = 4;

/// What one operation spent, in seconds: its time, and the CPU of each process.
#[derive(Default, Clone, Copy)]
struct Spent {
    seconds: f64,
    reviews: f64,
    apiserver: f64,
    etcd: f64,
    /// The webhook's server: syncgc's threads other than the collector's, or the floor.
    webhook: f64,
    collector: f64,
    /// Connections syncgc's webhook accepted.
    connections: f64,
}

impl std::ops::AddAssign for Spent {
    fn add_assign(&mut self, o: Self) {
        self.seconds += o.seconds;
        self.reviews += o.reviews;
        self.apiserver += o.apiserver;
        self.etcd += o.etcd;
        self.webhook += o.webhook;
        self.collector += o.collector;
        self.connections += o.connections;
    }
}

/// Where the time and CPU of one operation are read from.
struct Meters<'a> {
    syncgc: &'a crate::plane::Syncgc,
    floor: u32,
    apiserver: u32,
    etcd: u32,
}

impl Meters<'_> {
    /// The counters now, for the webhook of `variant`.
    async fn read(&self, variant: usize) -> Result<[Spent; 3]> {
        let reviews = reviews(self.syncgc).await?;
        let pid = self.syncgc.pid();
        let common = Spent {
            apiserver: cpu_seconds(self.apiserver, |_| true)?,
            etcd: cpu_seconds(self.etcd, |_| true)?,
            webhook: if variant == FLOOR {
                cpu_seconds(self.floor, |_| true)?
            } else {
                cpu_seconds(pid, |t| t != COLLECTOR_THREAD)?
            },
            collector: cpu_seconds(pid, |t| t == COLLECTOR_THREAD)?,
            connections: self
                .syncgc
                .metric("syncgc_webhook_connections_total")
                .await?,
            ..Spent::default()
        };
        Ok(reviews.map(|reviews| Spent { reviews, ..common }))
    }
}

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let (n, connections, pairs) = (settings.writes, settings.writers, settings.writes_rounds);
    eprintln!(
        "writes: {n} ConfigMaps created, updated and deleted over {connections} connections, \
         {pairs} rounds each without the webhook, with syncgc's, with the floor's, with \
         syncgc's as --unarmed-delete deny registers it, and with its DELETE webhook alone"
    );
    let syncgc = plane
        .syncgc(&crate::run_args("cooperative", 50, 100, 8))
        .await?;
    let (mut floor, floor_addr) = crate::bare::start(plane, true).await?;
    let meters = Meters {
        syncgc: &syncgc,
        floor: floor.id(),
        apiserver: process_named("kube-apiserver")?,
        etcd: process_named("etcd")?,
    };
    let namespace = plane.namespace(NAME, &[]).await?;
    let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), &namespace);
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(plane.client.clone());
    let server = plane.server().await?;
    // What `syncgc run --manage-webhook` registers: before 1.28, rules from discovery.
    let found = syncgc::gc::discovery::discover(&plane.client, &[]).await?;
    let scope = Coverage::of_discovery(&found.resources, &found.failed);
    let registration = |addr, unarmed_delete| -> Result<MutatingWebhookConfiguration> {
        Ok(Registration {
            name: NAME.into(),
            client: WebhookClient::Url(format!("https://{addr}/mutate")),
            ca_bundle: std::fs::read(plane.certs().join("ca.crt"))?,
            timeout_seconds: 3,
            excluded_namespaces: DEFAULT_EXCLUDED_NAMESPACES.map(str::to_owned).to_vec(),
            unarmed_delete,
            guards: GuardScope::Selected,
            server,
            scope: scope.clone(),
            own_user: None,
        }
        .configuration())
    };
    let allow = registration(syncgc.webhook, UnarmedDelete::Allow)?;
    // The DELETE webhook alone: what DELETE pays for its own registration, apart from what
    // CREATE and UPDATE calls leave the apiserver to do.
    let mut delete_only = allow.clone();
    delete_only.webhooks.as_mut().context("webhooks")?.remove(0);
    let variants: [Option<MutatingWebhookConfiguration>; VARIANTS] = [
        None,
        Some(allow),
        Some(registration(floor_addr, UnarmedDelete::Allow)?),
        Some(registration(syncgc.webhook, UnarmedDelete::Deny)?),
        Some(delete_only),
    ];
    let mut spent = [[Spent::default(); 3]; VARIANTS];
    let _ = webhooks.delete(NAME, &DeleteParams::default()).await;
    for pair in 0..pairs {
        // A B C D E, then E D C B A: a drift of the machine weighs on every kind alike.
        let mut order: Vec<usize> = (0..VARIANTS).collect();
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
            applied(&api, matches!(v, SYNCGC | FLOOR | DENY)).await?;
            let took = writes(&api, &meters, v, pair * VARIANTS + v, n, connections).await?;
            for (total, op) in spent[v].iter_mut().zip(took) {
                *total += op;
            }
        }
    }
    let _ = webhooks.delete(NAME, &DeleteParams::default()).await;
    let _ = floor.kill();
    let _ = floor.wait();
    plane.drop_namespace(&namespace).await?;

    let total = (n * pairs) as f64;
    let rate = |v: usize, i: usize| total / spent[v][i].seconds;
    let ratio = |v: usize, i: usize| spent[WITHOUT][i].seconds / spent[v][i].seconds;
    let table = report.table(
        format!(
            "Writes that do not concern syncgc: {n} unannotated ConfigMaps created, updated \
             (a merge patch of their data) and deleted with {connections} requests in flight, \
             {pairs} rounds of each kind: without a registration, with syncgc's as \
             `syncgc webhook-config` prints it, with the same calling the floor webhook (the \
             uid echoed, allowed, on syncgc's stack), with syncgc's as \
             `syncgc webhook-config --unarmed-delete deny` prints it, with its DELETE webhook \
             alone (order ABCDE EDCBA); a {SETTLE:?} pause before each operation; rates over \
             all rounds of a kind"
        ),
        vec![
            "operation",
            "without /s",
            "syncgc /s",
            "syncgc ÷ without",
            "floor /s",
            "floor ÷ without",
            "reviews syncgc answered per write",
            "with deny /s",
            "deny ÷ without",
            "DELETE webhook alone /s",
            "alone ÷ without",
        ],
    );
    for (i, operation) in OPERATIONS.iter().enumerate() {
        table.rows.push(vec![
            (*operation).into(),
            round(rate(WITHOUT, i)),
            round(rate(SYNCGC, i)),
            round(ratio(SYNCGC, i)),
            round(rate(FLOOR, i)),
            round(ratio(FLOOR, i)),
            round(spent[SYNCGC][i].reviews / total),
            round(rate(DENY, i)),
            round(ratio(DENY, i)),
            round(rate(DELETE_ALONE, i)),
            round(ratio(DELETE_ALONE, i)),
        ]);
    }
    let cpu = report.table(
        "Where a write's CPU goes: µs of CPU per write of each process over the same rounds \
         (from /proc, 10 ms ticks); the webhook's server is syncgc's threads other than its \
         collector's, or the floor's process"
            .to_owned(),
        vec![
            "operation",
            "webhook",
            "apiserver µs",
            "etcd µs",
            "webhook's server µs",
            "syncgc's collector µs",
            "total µs",
            "webhook's server µs per review",
            "syncgc's connections per 1,000 reviews",
        ],
    );
    let us = |seconds: f64| round(seconds / total * 1e6);
    for (i, operation) in OPERATIONS.iter().enumerate() {
        for (v, name) in [(WITHOUT, "none"), (SYNCGC, "syncgc"), (FLOOR, "floor")] {
            let s = spent[v][i];
            // Every write reaches the floor (the same registration as syncgc's).
            let reviews = if v == FLOOR {
                spent[SYNCGC][i].reviews
            } else {
                s.reviews
            };
            cpu.rows.push(vec![
                (*operation).into(),
                name.into(),
                us(s.apiserver),
                us(s.etcd),
                if v == WITHOUT {
                    String::new()
                } else {
                    us(s.webhook)
                },
                us(s.collector),
                us(s.apiserver + s.etcd + s.webhook + s.collector),
                if reviews > 0.0 && v != WITHOUT {
                    round(s.webhook / reviews * 1e6)
                } else {
                    String::new()
                },
                if v == SYNCGC && reviews > 0.0 {
                    round(s.connections / reviews * 1000.0)
                } else {
                    String::new()
                },
            ]);
        }
    }
    report.target(
        "writes: unannotated CREATE with ÷ without syncgc's webhook",
        ratio(SYNCGC, 0),
        Goal::AtLeast(0.9),
        "×",
    );
    // The floor answers every write syncgc's registration sends it, as syncgc does.
    let per_review = |v: usize| spent[v][0].webhook / spent[SYNCGC][0].reviews * 1e6;
    report.target(
        "writes: syncgc's own CPU per unarmed CREATE review (its server's above the floor's, \
         the same TLS and HTTP stack answering the least)",
        per_review(SYNCGC) - per_review(FLOOR),
        Goal::AtMost(20.0),
        "µs",
    );
    report.target(
        "writes: unannotated DELETE with ÷ without syncgc's webhook",
        ratio(SYNCGC, 2),
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

/// Creates, updates and deletes `n` ConfigMaps, `connections` requests in flight, with the
/// webhook of `variant` registered; what each of the three spent.
async fn writes(
    api: &Api<ConfigMap>,
    meters: &Meters<'_>,
    variant: usize,
    turn: usize,
    n: usize,
    connections: usize,
) -> Result<[Spent; 3]> {
    let name = |i: usize| format!("w-{turn}-{i}");
    let mut spent = [Spent::default(); 3];
    for op in 0..OPERATIONS.len() {
        // What the previous operation left to do (the apiserver's and etcd's own catching up)
        // is not counted against the next.
        tokio::time::sleep(SETTLE).await;
        let before = meters.read(variant).await?[op];
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
        let seconds = started.elapsed().as_secs_f64();
        let after = meters.read(variant).await?[op];
        spent[op] = Spent {
            seconds,
            reviews: after.reviews - before.reviews,
            apiserver: after.apiserver - before.apiserver,
            etcd: after.etcd - before.etcd,
            webhook: after.webhook - before.webhook,
            collector: after.collector - before.collector,
            connections: after.connections - before.connections,
        };
    }
    Ok(spent)
}
