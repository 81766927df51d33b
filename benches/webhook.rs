//! How fast `/mutate` answers a realistic review (a ~10 KB Deployment), measured three ways in
//! one run, with a baseline from the same run:
//!
//! - baseline: parsing the body into a `serde_json::Value` (what a webhook that reads the
//!   whole object does before deciding anything);
//! - decision: `Review::parse` + `admit` + `respond`, the pure path;
//! - router: the whole axum handler through `Router::oneshot` (no TLS, no network).
//!
//! Run with `cargo bench --bench webhook`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use axum::body::Body;
use http::Request;
use serde_json::Value;
use syncgc::metrics::Metrics;
use syncgc::webhook::admit::{Policy, admit};
use syncgc::webhook::handler::{self, Webhook};
use syncgc::webhook::review::{self, Answer, Review};
use tower::ServiceExt;

/// The allocator `syncgc run` uses.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/review.rs"]
mod review_fixture;
use review_fixture::deployment_review;

/// Mean time per call of `f` over enough calls to fill `budget`.
fn measure(budget: Duration, mut f: impl FnMut()) -> Duration {
    for _ in 0..100 {
        f();
    }
    let mut calls = 0u32;
    let started = Instant::now();
    while started.elapsed() < budget {
        for _ in 0..100 {
            f();
        }
        calls += 100;
    }
    started.elapsed() / calls
}

fn main() {
    syncgc::api::install_crypto_provider();
    let body = deployment_review();
    let budget = Duration::from_secs(2);
    let policy = Policy::default();

    let baseline = measure(budget, || {
        black_box(serde_json::from_slice::<Value>(black_box(&body)).unwrap());
    });
    let decision = measure(budget, || {
        let review = Review::parse(black_box(&body)).unwrap();
        let decided = admit(&review.request, &policy, 0);
        let answer = Answer::Allow {
            patch: decided.patch,
            warnings: decided.warnings,
        };
        black_box(review::respond(
            review.api_version,
            &review.request.uid,
            answer,
        ));
    });

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let router = runtime.block_on(async {
        let client =
            kube::Client::try_from(kube::Config::new("https://127.0.0.1:1".parse().unwrap()))
                .unwrap();
        let metrics = Metrics::new().unwrap();
        handler::router(Webhook {
            policy,
            cluster: syncgc::api::Cluster::new(
                client,
                None,
                Duration::from_secs(30),
                metrics.clone(),
            ),
            metrics,
            graph: syncgc::graph::Writer::new(syncgc::graph::Graph::new(
                syncgc::graph::Mode::Cooperative,
            ))
            .reader(),
            resources: Default::default(),
            body_timeout: Duration::from_secs(10),
            causes: None,
            // No collector: the graph, empty, is all there is.
            authenticate: false,
            needs: Default::default(),
            readiness: {
                let readiness = syncgc::metrics::Readiness::default();
                readiness.set(true);
                readiness
            },
        })
    });
    let routed = measure(budget, || {
        let request = Request::post("/mutate?timeout=10s")
            .header("content-type", "application/json")
            .body(Body::from(body.clone()))
            .unwrap();
        let response = runtime.block_on(router.clone().oneshot(request)).unwrap();
        assert_eq!(response.status(), 200);
        black_box(response);
    });

    println!(
        "webhook: a {} byte CREATE review of a Deployment",
        body.len()
    );
    println!("{:<44} {:>10}", "", "per review");
    for (name, time) in [
        ("baseline: serde_json::Value parse of the body", baseline),
        ("decision: parse + admit + respond", decision),
        ("router: POST /mutate through axum", routed),
    ] {
        println!(
            "{name:<44} {:>8.1}µs  {:>5.2}× baseline",
            time.as_secs_f64() * 1e6,
            time.as_secs_f64() / baseline.as_secs_f64()
        );
    }
}
