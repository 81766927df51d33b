//! syncgc against kube-controller-manager's garbage collector and against the limits of this
//! machine, in one run on the local control plane, as ratios of what was measured in the same
//! run:
//!
//! 1. cascade deletion of an owner with N ConfigMap dependents (flat, and a tree three levels
//!    deep), in the background and in the foreground, by kube-controller-manager's GC and by
//!    `syncgc run --mode standalone` (with kube-controller-manager's GC off): at the
//!    controller-manager's default client limits and unthrottled, with the API requests each
//!    makes per collected object;
//! 2. the limit: the same objects deleted by a plain client loop with the same concurrency;
//! 3. synchronous deletion: `kubectl delete` of an armed owner (cooperative mode) against the
//!    cluster's own foreground deletion of the same tree;
//! 4. the release barrier's cost per release ([`barrier`]), and deletion order's: N
//!    dependents in four waves against the same without an order ([`order`]); what it costs
//!    as the number of kinds served grows, before and after adding 300 CRDs ([`platform`]);
//!    `syncgc plan` of an owner with 10,000 dependents there, and what `explain --watch` asks
//!    of the apiserver while it follows a deletion ([`plan`]); the same plan through syncgc's
//!    API among 1,000,000 objects, and the deletion causes of a namespace ([`served`]);
//!    the guards' price: the webhook's added latency for a DELETE judged by the cascade limit,
//!    and the collector's throughput with causes recorded ÷ without ([`guards`]);
//! 5. the webhook over TLS under load, against a bare axum + rustls server ([`bare`]);
//! 6. what the webhook's registration costs writes that do not concern it ([`writes`]);
//! 7. the ownership graph's bytes per node, and syncgc's resident memory with 10,000 objects;
//! 8. time to ready, memory per object and a cascade of 100,000 dependents as the cluster
//!    grows to 1,000,000 objects, against kube-controller-manager's GC ([`scale`]);
//! 9. workloads whose Pods take seconds to stop, on the real node: `kubectl delete` of the
//!    opted-in workload against `kubectl delete --cascade=foreground` ([`workloads`]);
//! 10. a real operator's namespace deleted at once with syncgc holding what the operator needs,
//!     against the same teardown by hand in the right order ([`teardown`]).
//!
//! Run with `hack/bench.sh`, which starts the control plane and writes the results to
//! `benches/results/`; `hack/bench.sh graph webhook` runs some phases only (`graph`, `cascade`,
//! `sync`, `order`, `barrier`, `platform`, `plan`, `api`, `guards`, `webhook`, `writes`, `memory`, `scale`,
//! `workloads`, `teardown`).

mod bare;
mod barrier;
mod cascade;
mod graph;
mod guards;
mod load;
mod order;
mod plan;
mod plane;
mod platform;
mod report;
mod scale;
mod served;
mod teardown;
mod tree;
mod workloads;
mod writes;

#[path = "../../tests/support/operator.rs"]
mod operator;
#[path = "../support/review.rs"]
mod review_fixture;
#[path = "../../tests/support/workload.rs"]
mod workload;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PropagationPolicy};
use syncgc::names::{SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER};

use cascade::{Deletion, Outcome};
use plane::{Kcm, Plane, UNTHROTTLED_BURST, UNTHROTTLED_QPS};
use report::{Goal, Report, mib, round};
use tree::{OWNER, Shape, Tree};

#[global_allocator]
static ALLOCATOR: graph::Counting = graph::Counting;

const PHASES: [&str; 15] = [
    "graph",
    "cascade",
    "sync",
    "order",
    "barrier",
    "platform",
    "plan",
    "api",
    "guards",
    "webhook",
    "writes",
    "memory",
    "scale",
    "workloads",
    "teardown",
];
const POLICIES: [PropagationPolicy; 2] =
    [PropagationPolicy::Background, PropagationPolicy::Foreground];
const SHAPES: [Shape; 2] = [Shape::Flat, Shape::Tree];

/// What a run is asked to do, from the environment and the arguments.
struct Settings {
    phases: Vec<String>,
    /// N of the unthrottled cascades.
    sizes: Vec<usize>,
    /// N of the cascades at kube-controller-manager's default limits (flat).
    throttled_size: usize,
    /// Requests in flight: the collectors' workers, the loop's and the creations' concurrency.
    concurrency: usize,
    /// Runs of each unthrottled case of syncgc and of the loop.
    repeats: usize,
    /// Connections of the webhook load.
    connections: usize,
    /// Objects syncgc watches when its memory is read.
    watched: usize,
    /// Releases measured with and without the release barrier.
    barrier_trials: usize,
    /// ConfigMaps written per round of the writes phase, requests in flight, rounds of each
    /// kind.
    writes: usize,
    writers: usize,
    writes_rounds: usize,
    /// Objects the scale phase grows to, and dependents of its cascade.
    scale: usize,
    scale_cascade: usize,
    /// Runs of each workload, opted in and in the foreground.
    workload_repeats: usize,
    out: PathBuf,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> Result<T> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("{name}={v} is not a valid value")),
        Err(_) => Ok(default),
    }
}

impl Settings {
    fn read() -> Result<Self> {
        // `cargo bench` passes `--bench`.
        let phases: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with("--"))
            .collect();
        if let Some(unknown) = phases.iter().find(|p| !PHASES.contains(&p.as_str())) {
            bail!(
                "unknown phase {unknown}: the phases are {}",
                PHASES.join(", ")
            );
        }
        let sizes = env_or("SYNCGC_BENCH_SIZES", "1000,5000".to_owned())?
            .split(',')
            .map(|s| s.trim().parse::<usize>())
            .collect::<Result<Vec<_>, _>>()
            .context("SYNCGC_BENCH_SIZES: numbers separated by commas")?;
        Ok(Self {
            phases: if phases.is_empty() {
                PHASES.iter().map(|p| p.to_string()).collect()
            } else {
                phases
            },
            sizes,
            throttled_size: env_or("SYNCGC_BENCH_THROTTLED_SIZE", 1000)?,
            concurrency: env_or("SYNCGC_BENCH_CONCURRENCY", 16)?,
            repeats: env_or("SYNCGC_BENCH_REPEATS", 9)?.max(1),
            connections: env_or("SYNCGC_BENCH_CONNECTIONS", 8)?,
            watched: env_or("SYNCGC_BENCH_WATCHED", 10_000)?,
            barrier_trials: env_or("SYNCGC_BENCH_BARRIER_TRIALS", 100)?,
            writes: env_or("SYNCGC_BENCH_WRITES", 4000)?,
            writers: env_or("SYNCGC_BENCH_WRITERS", 32)?,
            writes_rounds: env_or("SYNCGC_BENCH_WRITES_ROUNDS", 3)?,
            scale: env_or("SYNCGC_BENCH_SCALE_N", 1_000_000)?,
            scale_cascade: env_or("SYNCGC_BENCH_SCALE_CASCADE", scale::CASCADE)?,
            workload_repeats: env_or("SYNCGC_BENCH_WORKLOAD_REPEATS", 5)?.max(1),
            out: env_or(
                "SYNCGC_BENCH_OUT",
                PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/benches/results")),
            )?,
        })
    }

    fn runs(&self, phase: &str) -> bool {
        self.phases.iter().any(|p| p == phase)
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some(bare::SUBCOMMAND) {
        let (addr, cert, key) = (args.next(), args.next(), args.next());
        let (Some(addr), Some(cert), Some(key)) = (addr, cert, key) else {
            bail!("usage: {} ADDR CERT KEY [floor]", bare::SUBCOMMAND);
        };
        let floor = args.next().as_deref() == Some("floor");
        return tokio::runtime::Runtime::new()?.block_on(bare::serve(
            addr.parse()?,
            cert.as_ref(),
            key.as_ref(),
            floor,
        ));
    }
    let settings = Settings::read()?;
    let started = Instant::now();
    let mut report = Report::default();
    // First, while nothing else allocates.
    if settings.runs("graph") {
        graph_phase(&mut report);
    }
    let needs_cluster = settings.phases.iter().any(|p| p != "graph");
    let mut machine = machine();
    // What was measured before an error is written all the same, the error said with it.
    let mut failed = None;
    if needs_cluster {
        let work = tempfile::tempdir()?;
        let runtime = tokio::runtime::Runtime::new()?;
        let version = runtime.block_on(async {
            let mut plane = Plane::connect(work.path()).await?;
            cluster_phases(&settings, &mut plane, &mut report).await?;
            syncgc::api::server_version(&plane.client)
                .await
                .map_err(anyhow::Error::from)
        });
        match version {
            Ok(version) => machine.push_str(&format!(", Kubernetes {version}")),
            Err(err) => failed = Some(err),
        }
    }
    let stopped = failed
        .as_ref()
        .map(|err| format!(" Stopped by an error: {err:#}."))
        .unwrap_or_default();
    let heading = format!(
        "# syncgc benchmark, {}\n\n{machine}; phases: {}; {:.0} minutes.{stopped}",
        jiff::Timestamp::now().strftime("%Y-%m-%d"),
        settings.phases.join(", "),
        started.elapsed().as_secs_f64() / 60.0
    );
    println!("\n{}", report.markdown(&heading, None));
    report.write(&settings.out, "cluster", &heading)?;
    println!(
        "written to {}/cluster.md and cluster.svg",
        settings.out.display()
    );
    if let Some(err) = failed {
        return Err(err);
    }
    Ok(())
}

/// The cluster phases, ordered so that kube-controller-manager changes modes as seldom as
/// possible.
async fn cluster_phases(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let mut cascades = Cascades::default();
    if settings.runs("cascade") {
        cascades.native(settings, plane).await?;
    }
    if settings.runs("sync") {
        sync_phase(settings, plane, report).await?;
    }
    if settings.runs("order") {
        order::phase(settings, plane, report).await?;
    }
    if settings.runs("barrier") {
        barrier::phase(settings, plane, report).await?;
    }
    if settings.runs("platform") {
        platform::phase(settings, plane, report).await?;
    }
    if settings.runs("plan") {
        plan::phase(settings, plane, report).await?;
    }
    if settings.runs("api") {
        served::phase(settings, plane, report).await?;
    }
    if settings.runs("guards") {
        guards::phase(settings, plane, report).await?;
    }
    if settings.runs("cascade") {
        cascades.syncgc(settings, plane).await?;
        cascades.report(settings, report);
    }
    if settings.runs("webhook") {
        webhook_phase(settings, plane, report).await?;
    }
    if settings.runs("writes") {
        writes::phase(settings, plane, report).await?;
    }
    if settings.runs("memory") {
        memory_phase(settings, plane, report).await?;
    }
    if settings.runs("scale") {
        scale::phase(settings, plane, report).await?;
    }
    if settings.runs("workloads") {
        workloads::phase(settings, plane, report).await?;
    }
    if settings.runs("teardown") {
        teardown::phase(settings, plane, report).await?;
    }
    Ok(())
}

fn graph_phase(report: &mut Report) {
    let sizes = graph::SIZES;
    eprintln!("graph: {sizes:?} synthetic objects");
    let m = sizes.map(graph::measure);
    let table = report.table(
        "Ownership graph, synthetic objects (a tenth owners with 9 dependents each); the \
         largest pause is the longest single apply or removal",
        vec![
            "",
            "syncgc, 100,000",
            "syncgc, 1,000,000",
            "syncgc, 10,000,000",
            "kube-controller-manager (estimate)",
        ],
    );
    let row = |name: &str, each: &dyn Fn(&graph::GraphMeasurement) -> String, native: &str| {
        let mut row = vec![name.to_owned()];
        row.extend(m.iter().map(each));
        row.push(native.to_owned());
        row
    };
    let ns = |d: Duration| format!("{} ns", d.as_nanos());
    table.rows.extend([
        row(
            "bytes per node (heap, counted: node, uid index, name, owners, dependents)",
            &|m| format!("{:.0}", m.bytes_per_node),
            "≈ 336 (node struct 240, empty dependents map 48, uidToNode entry ≈ 48); ≈ 620 \
             with the strings and owner slice it points to (graph.go, Go 1.19 sizes)",
        ),
        row("apply, per object", &|m| ns(m.apply), ""),
        row(
            "the memory system's part: a bare uid map of 64-byte records, each object's and \
             its owner's reached, per object",
            &|m| ns(m.bare_index),
            "",
        ),
        row("removal, per object (each timed)", &|m| ns(m.remove), ""),
        row(
            "transitive dependents, per owner",
            &|m| ns(m.transitive_dependents),
            "",
        ),
        row(
            "largest pause",
            &|m| format!("{:.1} ms", m.largest_pause.as_secs_f64() * 1000.0),
            "",
        ),
    ]);
    let [small, large, largest] = sizes.map(thousands);
    report.target(
        format!("graph: bytes per node, {small} objects"),
        m[0].bytes_per_node,
        Goal::AtMost(150.0),
        "B",
    );
    report.target(
        format!("graph: bytes per node, {largest} objects"),
        m[2].bytes_per_node,
        Goal::AtMost(200.0),
        "B",
    );
    report.target(
        format!("graph: bytes per node, {large} ÷ {small} objects"),
        m[1].bytes_per_node / m[0].bytes_per_node,
        Goal::AtMost(1.2),
        "×",
    );
    type Figure = fn(&graph::GraphMeasurement) -> f64;
    let growth: [(&str, Figure); 4] = [
        ("bytes per node", |m| m.bytes_per_node),
        ("apply per object", |m| m.apply.as_secs_f64()),
        ("removal per object", |m| m.remove.as_secs_f64()),
        ("transitive dependents per owner", |m| {
            m.transitive_dependents.as_secs_f64()
        }),
    ];
    for (name, figure) in growth {
        report.target(
            format!("graph: {name}, {largest} ÷ {large} objects"),
            figure(&m[2]) / figure(&m[1]),
            Goal::AtMost(1.2),
            "×",
        );
    }
    graph::hashing(report);
}

/// `n` with commas between thousands: 1,000,000.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Who collects, and at which client limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Collector {
    Native,
    Syncgc,
    /// A plain client loop deleting every object.
    Loop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Case {
    collector: Collector,
    throttled: bool,
    shape: Shape,
    n: usize,
    /// None for the loop.
    policy: Option<Policy>,
}

/// `PropagationPolicy` without `Orphan`, hashable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Policy {
    Background,
    Foreground,
}

impl Policy {
    fn of(policy: &PropagationPolicy) -> Self {
        match policy {
            PropagationPolicy::Foreground => Self::Foreground,
            _ => Self::Background,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Background => "background",
            Self::Foreground => "foreground",
        }
    }
}

/// Every run of every case.
#[derive(Default)]
struct Cascades(HashMap<Case, Vec<Outcome>>);

impl Cascades {
    async fn measure(
        &mut self,
        settings: &Settings,
        plane: &Plane,
        case: Case,
        deletion: Deletion,
    ) -> Result<()> {
        let outcome = cascade::run(plane, case.shape, case.n, settings.concurrency, deletion)
            .await
            .with_context(|| format!("{case:?}"))?;
        eprintln!(
            "  {:?} {} {} {} {}: {:.1} s, {:.2} requests per object",
            case.collector,
            if case.throttled {
                "throttled"
            } else {
                "unthrottled"
            },
            case.shape.as_str(),
            case.n,
            case.policy.map_or("loop", Policy::as_str),
            outcome.seconds,
            outcome.requests_per_object
        );
        self.0.entry(case).or_default().push(outcome);
        Ok(())
    }

    /// Every case for `collector`: throttled flat, then unthrottled in every shape and size.
    async fn collect_throttled(
        &mut self,
        settings: &Settings,
        plane: &Plane,
        collector: Collector,
    ) -> Result<()> {
        for policy in &POLICIES {
            let case = Case {
                collector,
                throttled: true,
                shape: Shape::Flat,
                n: settings.throttled_size,
                policy: Some(Policy::of(policy)),
            };
            self.measure(settings, plane, case, Deletion::Owner(policy.clone()))
                .await?;
        }
        Ok(())
    }

    /// The unthrottled cascades of `n` objects in `shape` for `collector`: both policies (the
    /// other way round when `reversed`), or the loop.
    async fn collect_unthrottled(
        &mut self,
        settings: &Settings,
        plane: &Plane,
        collector: Collector,
        n: usize,
        shape: Shape,
        reversed: bool,
    ) -> Result<()> {
        let base = Case {
            collector,
            throttled: false,
            shape,
            n,
            policy: None,
        };
        if collector == Collector::Loop {
            return self.measure(settings, plane, base, Deletion::Loop).await;
        }
        let mut policies = POLICIES.to_vec();
        if reversed {
            policies.reverse();
        }
        for policy in policies {
            let case = Case {
                policy: Some(Policy::of(&policy)),
                ..base
            };
            self.measure(settings, plane, case, Deletion::Owner(policy))
                .await?;
        }
        Ok(())
    }

    async fn native(&mut self, settings: &Settings, plane: &mut Plane) -> Result<()> {
        eprintln!("cascade: kube-controller-manager's GC at its default client limits");
        plane.kcm(Kcm::DEFAULT_LIMITS).await?;
        self.collect_throttled(settings, plane, Collector::Native)
            .await?;
        eprintln!("cascade: kube-controller-manager's GC unthrottled");
        plane
            .kcm(Kcm::unthrottled(true, settings.concurrency as u32))
            .await?;
        for &n in &settings.sizes {
            for shape in SHAPES {
                self.collect_unthrottled(settings, plane, Collector::Native, n, shape, false)
                    .await?;
            }
        }
        Ok(())
    }

    async fn syncgc(&mut self, settings: &Settings, plane: &mut Plane) -> Result<()> {
        plane
            .kcm(Kcm::unthrottled(false, settings.concurrency as u32))
            .await?;
        eprintln!("cascade: syncgc standalone at kube-controller-manager's default client limits");
        let limits = Kcm::DEFAULT_LIMITS;
        let syncgc = plane
            .syncgc(&run_args("standalone", limits.qps, limits.burst, 8))
            .await?;
        self.collect_throttled(settings, plane, Collector::Syncgc)
            .await?;
        drop(syncgc);
        // Rounds of syncgc's runs and the loop's in turn, each shape and size paired (syncgc
        // started for its two policies, and the loop at once), so that what drifts in the
        // machine weighs on a pair alike; every other round in the reverse order (the loop,
        // then syncgc's policies the other way round), so that neither goes first every time.
        for round in 1..=settings.repeats {
            let reversed = round % 2 == 0;
            eprintln!(
                "cascade: syncgc standalone unthrottled and a plain client DELETE loop, no \
                 collector, each shape {} (round {round} of {})",
                if reversed {
                    "loop first"
                } else {
                    "syncgc first"
                },
                settings.repeats
            );
            for &n in &settings.sizes {
                for shape in SHAPES {
                    if reversed {
                        self.collect_unthrottled(settings, plane, Collector::Loop, n, shape, false)
                            .await?;
                    }
                    let syncgc = plane
                        .syncgc(&run_args(
                            "standalone",
                            UNTHROTTLED_QPS,
                            UNTHROTTLED_BURST,
                            settings.concurrency,
                        ))
                        .await?;
                    let collector = Collector::Syncgc;
                    self.collect_unthrottled(settings, plane, collector, n, shape, reversed)
                        .await?;
                    drop(syncgc);
                    if !reversed {
                        self.collect_unthrottled(settings, plane, Collector::Loop, n, shape, false)
                            .await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The run of `case` with the median time.
    fn get(&self, case: Case) -> Option<Outcome> {
        let mut runs = self.0.get(&case)?.clone();
        runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
        runs.get(runs.len() / 2).copied()
    }

    /// `case`'s rate as a share of `limit`'s in each round (its run's against the run of
    /// `limit` in the same round), lowest first.
    fn shares(&self, case: Case, limit: Case) -> Vec<f64> {
        let (Some(runs), Some(limits)) = (self.0.get(&case), self.0.get(&limit)) else {
            return Vec::new();
        };
        let mut shares: Vec<f64> = runs
            .iter()
            .zip(limits)
            .map(|(run, limit)| limit.seconds / run.seconds)
            .collect();
        shares.sort_by(f64::total_cmp);
        shares
    }

    fn report(&self, settings: &Settings, report: &mut Report) {
        let limits = Kcm::DEFAULT_LIMITS;
        let table = report.table(
            format!(
                "Cascade deletion at kube-controller-manager's default client limits (qps {}, \
                 burst {}), {} flat dependents: seconds from the owner's DELETE until every \
                 object is gone; API requests on ConfigMaps per collected object",
                limits.qps, limits.burst, settings.throttled_size
            ),
            vec![
                "policy",
                "native s",
                "syncgc s",
                "syncgc ÷ native",
                "native req/obj",
                "syncgc req/obj",
            ],
        );
        let mut targets = Vec::new();
        for policy in [Policy::Background, Policy::Foreground] {
            let case = |collector| Case {
                collector,
                throttled: true,
                shape: Shape::Flat,
                n: settings.throttled_size,
                policy: Some(policy),
            };
            let (Some(native), Some(syncgc)) = (
                self.get(case(Collector::Native)),
                self.get(case(Collector::Syncgc)),
            ) else {
                continue;
            };
            let ratio = syncgc.seconds / native.seconds;
            table.rows.push(vec![
                policy.as_str().into(),
                round(native.seconds),
                round(syncgc.seconds),
                round(ratio),
                round(native.requests_per_object),
                round(syncgc.requests_per_object),
            ]);
            let goal = match policy {
                Policy::Background => 0.5,
                Policy::Foreground => 0.35,
            };
            targets.push((
                format!("default limits, {}: syncgc ÷ native time", policy.as_str()),
                ratio,
                Goal::AtMost(goal),
            ));
        }

        let table = report.table(
            format!(
                "Unthrottled: client limit qps {UNTHROTTLED_QPS} / burst {UNTHROTTLED_BURST}, \
                 {c} GC workers for each collector ({c} for kube-controller-manager's \
                 `--concurrent-gc-syncs`), {c} requests in flight for the plain DELETE loop; \
                 syncgc and the loop: the median of {r} runs each, in turns; \
                 kube-controller-manager: one run. Rates are objects deleted per second; \
                 `÷ loop` is a collector's rate as a share of the loop's (for syncgc, the \
                 median of its {r} runs' shares, each against the loop run beside it: right \
                 after it in odd rounds, right before it in even ones; each round's share, \
                 lowest first, under `each round`)",
                c = settings.concurrency,
                r = settings.repeats
            ),
            vec![
                "N",
                "shape",
                "policy",
                "native s",
                "syncgc s",
                "loop s",
                "syncgc ÷ native time",
                "native ÷ loop",
                "syncgc ÷ loop",
                "each round",
                "native req/obj",
                "syncgc req/obj",
            ],
        );
        for &n in &settings.sizes {
            for shape in SHAPES {
                let at = |collector, policy| Case {
                    collector,
                    throttled: false,
                    shape,
                    n,
                    policy,
                };
                let Some(plain) = self.get(at(Collector::Loop, None)) else {
                    continue;
                };
                for policy in [Policy::Background, Policy::Foreground] {
                    let at_syncgc = at(Collector::Syncgc, Some(policy));
                    let shares = self.shares(at_syncgc, at(Collector::Loop, None));
                    let (Some(native), Some(syncgc), Some(&share)) = (
                        self.get(at(Collector::Native, Some(policy))),
                        self.get(at_syncgc),
                        shares.get(shares.len() / 2),
                    ) else {
                        continue;
                    };
                    table.rows.push(vec![
                        n.to_string(),
                        shape.as_str().into(),
                        policy.as_str().into(),
                        round(native.seconds),
                        round(syncgc.seconds),
                        round(plain.seconds),
                        round(syncgc.seconds / native.seconds),
                        round(plain.seconds / native.seconds),
                        round(share),
                        shares
                            .iter()
                            .map(|s| round(*s))
                            .collect::<Vec<_>>()
                            .join(" "),
                        round(native.requests_per_object),
                        round(syncgc.requests_per_object),
                    ]);
                    targets.push((
                        format!(
                            "unthrottled, {n} {}, {}: syncgc ÷ loop rate",
                            shape.as_str(),
                            policy.as_str()
                        ),
                        share,
                        Goal::AtLeast(0.9),
                    ));
                }
            }
        }
        for (name, value, goal) in targets {
            report.target(name, value, goal, "×");
        }
    }
}

/// `syncgc run`'s arguments for `mode` at a client limit, with `workers` GC workers.
pub(crate) fn run_args(mode: &str, qps: u32, burst: u32, workers: usize) -> Vec<String> {
    [
        "--mode",
        mode,
        "--qps",
        &qps.to_string(),
        "--burst",
        &burst.to_string(),
        "--workers",
        &workers.to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// syncgc in cooperative mode, unthrottled with the benchmark's concurrency in workers, its
/// webhook registered for the namespaces labelled for `name`, of which it makes one.
async fn cooperative_syncgc(
    settings: &Settings,
    plane: &Plane,
    name: &str,
) -> Result<(plane::Syncgc, String, Registered)> {
    let syncgc = plane
        .syncgc(&run_args(
            "cooperative",
            UNTHROTTLED_QPS,
            UNTHROTTLED_BURST,
            settings.concurrency,
        ))
        .await?;
    let (namespace, registration) = registered_namespace(plane, &syncgc, name).await?;
    Ok((syncgc, namespace, registration))
}

/// syncgc standalone at its default limits, kube-controller-manager's GC off: for the
/// readings that need no collection.
async fn standalone_syncgc(
    settings: &Settings,
    plane: &mut Plane,
    env: &[(&str, &str)],
) -> Result<plane::Syncgc> {
    plane
        .kcm(Kcm::unthrottled(false, settings.concurrency as u32))
        .await?;
    plane
        .syncgc_with_env(&["--mode".to_owned(), "standalone".to_owned()], env)
        .await
}

/// `kubectl delete` of the owner in `namespace` (with `extra` arguments), once the collectors
/// have seen the tree: how long it took to return, and how many objects were left then (the
/// namespace's `kube-root-ca.crt` not counted).
async fn kubectl_delete_owner(
    plane: &Plane,
    namespace: &str,
    extra: &[&str],
) -> Result<(Duration, usize)> {
    tokio::time::sleep(cascade::SETTLE).await;
    let args = [
        &[
            "delete",
            "configmap",
            OWNER,
            "-n",
            namespace,
            "--timeout=600s",
        ],
        extra,
    ]
    .concat();
    let started = Instant::now();
    let out = Command::new("kubectl")
        .args(&args)
        .stdout(Stdio::null())
        .output()
        .context("running kubectl (hack/bench.sh puts it on PATH)")?;
    let took = started.elapsed();
    anyhow::ensure!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let api: Api<ConfigMap> = Api::namespaced(plane.client.clone(), namespace);
    let list = api.list_metadata(&ListParams::default()).await?;
    let left = list
        .items
        .iter()
        .filter(|o| o.metadata.name.as_deref() != Some("kube-root-ca.crt"))
        .count();
    Ok((took, left))
}

/// `kubectl ARGS` with `input` on its standard input; fails with what it said.
fn kubectl(args: &[&str], input: Option<&str>) -> Result<()> {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running kubectl (hack/bench.sh puts it on PATH)")?;
    if let Some(input) = input {
        child
            .stdin
            .take()
            .context("kubectl's stdin")?
            .write_all(input.as_bytes())?;
    }
    drop(child.stdin.take());
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// syncgc's webhook registered as `name`, for a new namespace of its own (returned).
async fn registered_namespace(
    plane: &Plane,
    syncgc: &plane::Syncgc,
    name: &str,
) -> Result<(String, Registered)> {
    let webhooks = plane
        .register_webhook(name, syncgc.webhook, ("syncgc.io/bench", name), 10)
        .await?;
    let namespace = plane.namespace(name, &[("syncgc.io/bench", name)]).await?;
    Ok((
        namespace,
        Registered {
            webhooks,
            name: name.to_owned(),
        },
    ))
}

/// A webhook registration made by [`registered_namespace`].
struct Registered {
    webhooks: Api<MutatingWebhookConfiguration>,
    name: String,
}

impl Registered {
    async fn remove(self) -> Result<()> {
        self.webhooks
            .delete(&self.name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}

async fn sync_phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let n = settings.throttled_size;
    let c = settings.concurrency;
    eprintln!("sync: kubectl delete of an owner with {n} dependents");
    plane.kcm(Kcm::unthrottled(true, c as u32)).await?;

    // The cluster's own foreground deletion.
    let namespace = plane.namespace("bench-foreground", &[]).await?;
    Tree::create(&plane.client, &namespace, Shape::Flat, n, c, &[], 1).await?;
    let (foreground, left_native) =
        kubectl_delete_owner(plane, &namespace, &["--cascade=foreground"]).await?;
    plane.drop_namespace(&namespace).await?;

    // syncgc, cooperative, its webhook registered for a namespace of its own.
    let (syncgc, namespace, registration) =
        cooperative_syncgc(settings, plane, "syncgc-bench").await?;
    let tree = Tree::create(
        &plane.client,
        &namespace,
        Shape::Flat,
        n,
        c,
        &[(SYNCHRONOUS_ANNOTATION, "true")],
        1,
    )
    .await?;
    let owner = tree.api.get(OWNER).await?;
    anyhow::ensure!(
        owner
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == SYNCHRONOUS_FINALIZER),
        "the webhook did not arm the owner"
    );
    let (synchronous, left_synchronous) = kubectl_delete_owner(plane, &namespace, &[]).await?;
    registration.remove().await?;
    plane.drop_namespace(&namespace).await?;
    drop(syncgc);

    let table = report.table(
        format!(
            "Synchronous deletion: `kubectl delete` of an owner with {n} flat dependents until it \
             returns; kube-controller-manager and syncgc (cooperative) at qps {UNTHROTTLED_QPS} / \
             burst {UNTHROTTLED_BURST} with {c} GC workers each"
        ),
        vec!["", "seconds", "objects left when it returned"],
    );
    table.rows.push(vec![
        "`--cascade=foreground`, kube-controller-manager's GC".into(),
        round(foreground.as_secs_f64()),
        left_native.to_string(),
    ]);
    table.rows.push(vec![
        "armed owner, syncgc".into(),
        round(synchronous.as_secs_f64()),
        left_synchronous.to_string(),
    ]);
    table.rows.push(vec![
        "syncgc ÷ foreground".into(),
        round(synchronous.as_secs_f64() / foreground.as_secs_f64()),
        String::new(),
    ]);
    anyhow::ensure!(
        left_synchronous == 0,
        "kubectl delete of the armed owner returned with {left_synchronous} objects left"
    );
    Ok(())
}

async fn webhook_phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let c = settings.connections;
    eprintln!("webhook: {c} connections against syncgc and the bare server");
    let body = axum::body::Bytes::from(review_fixture::deployment_review());
    let ca = std::fs::read(plane.certs().join("ca.crt"))?;
    let syncgc = standalone_syncgc(settings, plane, &[]).await?;
    let (mut bare, bare_addr) = bare::start(plane, false).await?;
    let (warmup, duration) = (Duration::from_secs(2), Duration::from_secs(8));
    // Alternating, twice each, so that drift on the machine hits both alike.
    let mut runs: HashMap<&str, Vec<load::Load>> = HashMap::new();
    for _ in 0..2 {
        for (server, addr) in [("syncgc", syncgc.webhook), ("bare", bare_addr)] {
            let load = load::run(addr, &ca, body.clone(), c, warmup, duration).await?;
            eprintln!(
                "  {server}: {:.0}/s, p50 {:.2} ms, p99 {:.2} ms",
                load.per_second(),
                load.percentile_ms(0.5),
                load.percentile_ms(0.99)
            );
            runs.entry(server).or_default().push(load);
        }
    }
    let _ = bare.kill();
    let _ = bare.wait();
    // An unarmed DELETE, with the guards on (the default): answered from the review and the
    // graph, with no read of the object (no side effect is attempted).
    let delete = axum::body::Bytes::from(review_fixture::unarmed_delete_review());
    let effects = syncgc.metric("syncgc_webhook_side_effects_total").await?;
    let deletes = load::run(syncgc.webhook, &ca, delete, c, warmup, duration).await?;
    let effects = syncgc.metric("syncgc_webhook_side_effects_total").await? - effects;
    eprintln!(
        "  syncgc, unarmed DELETE: {:.0}/s, p50 {:.2} ms, p99 {:.2} ms, {effects} side effects",
        deletes.per_second(),
        deletes.percentile_ms(0.5),
        deletes.percentile_ms(0.99)
    );
    drop(syncgc);
    let mut merged = |server| load::Load::merge(runs.remove(server).unwrap_or_default());
    let (syncgc, bare) = (merged("syncgc"), merged("bare"));

    let table = report.table(
        format!(
            "Webhook: POST /mutate over TLS, a {} byte CREATE review of a Deployment, {c} \
             keep-alive connections from a load generator on the same machine, 2 × 8 s each",
            body.len()
        ),
        vec!["server", "reviews/s", "p50 ms", "p99 ms"],
    );
    for (server, load) in [("syncgc run", &syncgc), ("bare axum + rustls", &bare)] {
        table.rows.push(vec![
            server.into(),
            round(load.per_second()),
            round(load.percentile_ms(0.5)),
            round(load.percentile_ms(0.99)),
        ]);
    }
    table.rows.push(vec![
        "syncgc run, unarmed DELETE".into(),
        round(deletes.per_second()),
        round(deletes.percentile_ms(0.5)),
        round(deletes.percentile_ms(0.99)),
    ]);
    let throughput = syncgc.per_second() / bare.per_second();
    let p99 = syncgc.percentile_ms(0.99) / bare.percentile_ms(0.99);
    table.rows.push(vec![
        "syncgc ÷ bare".into(),
        round(throughput),
        round(syncgc.percentile_ms(0.5) / bare.percentile_ms(0.5)),
        round(p99),
    ]);
    report.target(
        "webhook: syncgc ÷ bare throughput",
        throughput,
        Goal::AtLeast(0.6),
        "×",
    );
    report.target("webhook: syncgc ÷ bare p99", p99, Goal::AtMost(1.5), "×");
    report.target(
        "webhook: syncgc p99",
        syncgc.percentile_ms(0.99),
        Goal::AtMost(5.0),
        "ms",
    );
    report.target(
        "webhook: syncgc p99, unarmed DELETE review (guards on)",
        deletes.percentile_ms(0.99),
        Goal::AtMost(5.0),
        "ms",
    );
    report.target(
        "webhook: reads of the object for unarmed DELETE reviews",
        effects,
        Goal::AtMost(0.0),
        "",
    );
    Ok(())
}

async fn memory_phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let total = settings.watched;
    eprintln!("memory: syncgc's resident memory with {total} more objects watched");
    // mimalloc hands freed pages back at once, so that resident memory follows what is live.
    let syncgc = standalone_syncgc(settings, plane, &[("MIMALLOC_PURGE_DELAY", "0")]).await?;
    let observed = "syncgc_graph_nodes{kind=\"observed\"}";
    // The graph gauges are refreshed every 5 seconds.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (nodes_before, rss_before) = (syncgc.metric(observed).await?, syncgc.rss()?);
    let namespace = plane.namespace("bench-memory", &[]).await?;
    Tree::create(
        &plane.client,
        &namespace,
        Shape::Flat,
        total - 1,
        settings.concurrency,
        &[],
        1,
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let nodes = loop {
        let nodes = syncgc.metric(observed).await?;
        if nodes >= nodes_before + total as f64 {
            break nodes;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "syncgc's graph did not grow by {total}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let rss_after = syncgc.rss()?;
    plane.drop_namespace(&namespace).await?;
    drop(syncgc);

    let table = report.table(
        "Resident memory of `syncgc run` (standalone), every resource watched, mimalloc \
         returning freed pages at once (`MIMALLOC_PURGE_DELAY=0`)"
            .to_string(),
        vec!["", "objects in the graph", "resident MiB"],
    );
    table.rows.push(vec![
        "before".into(),
        format!("{nodes_before:.0}"),
        round(mib(rss_before)),
    ]);
    table.rows.push(vec![
        format!("after {total} ConfigMaps (one owner, the rest its dependents)"),
        format!("{nodes:.0}"),
        round(mib(rss_after)),
    ]);
    table.rows.push(vec![
        "per added object".into(),
        String::new(),
        format!(
            "{:.0} bytes",
            rss_after.saturating_sub(rss_before) as f64 / (nodes - nodes_before)
        ),
    ]);
    Ok(())
}

/// The CPU, cores, memory and kernel of this machine.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim())
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / (1 << 20) as f64);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{model}, {cores} cores, {memory_gib:.0} GiB, Linux {}",
        kernel.trim()
    )
}
