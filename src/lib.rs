//! syncgc: synchronous garbage collection for Kubernetes.
//!
//! An owner that opts in (`syncgc.io/synchronous: "true"`) carries the finalizer
//! `syncgc.io/synchronous`; when it is deleted it stays, with a `deletionTimestamp`, until all of
//! its dependents (transitively) are gone, or until a timeout that grows with their number.
//! In cooperative mode it runs beside kube-controller-manager's garbage collector; in
//! standalone mode it is the whole garbage collector (background, foreground, orphan).
//!
//! ```text
//!  kube-apiserver ──AdmissionReview──▶ webhook (axum + tokio-rustls)  ──reads──┐
//!       ▲   │                               │ side-effect PATCH (armed only)    │
//!       │   └──metadata watches (all deletable GVRs)──▶ graph builder ─▶ OwnershipGraph (one writer)
//!       │                                                                      │ work items
//!       └──────────── GET / PATCH / DELETE (preconditions, rate limit) ◀── GC workers + timeouts
//!                                                                    metrics / readyz / debug endpoints
//! ```
//!
//! Modules, from the top down; a module imports only from the modules below its own line
//! (`tests/offline/layout.rs` checks it, and that the parts of [`gc`] use each other without a
//! circle):
//!
//! - [`cli`]: the command line (`syncgc certs`, `webhook-config`, `plan`, `explain`, `disarm`,
//!   `check`), parsed with clap.
//! - [`app`]: `syncgc run`: its flags ([`app::RunArgs`]) next to what runs them, wiring every
//!   part together.
//! - [`check`]: `syncgc check`, whether syncgc works on a cluster (it asks what the parts
//!   below know); [`aggregated`]: what syncgc knows (deletion plans, deletion causes) served
//!   as the Kubernetes API `syncgc.io/v1alpha1` through the aggregation layer.
//! - [`webhook`]: the mutating admission webhook (HTTPS server, the pure `admit` decision);
//!   [`plan`]: `syncgc plan`, what a DELETE would take down (the collector's rules run on a
//!   copy of the graph, [`gc::cascade`]); [`explain`]: `syncgc explain`, what keeps an object
//!   from going; [`disarm`]: `syncgc disarm`, syncgc's finalizer and label off every object,
//!   for uninstalling.
//! - [`gc`]: discovery, metadata watches, the work queue, the pure GC decisions, the workers
//!   (their context below the parts: the synchronous finalizer, the foreground wait, the
//!   deletion order, the release barrier; the collector dispatches to them).
//! - [`annotations`]: the rules of syncgc's annotations (timeouts, what is wrong with an
//!   object's), which the webhook and the collector both follow.
//! - [`graph`]: the ownership graph (nodes keyed by uid, one writer), pure; [`certs`]:
//!   development certificates; [`leader`]: leader election with a Lease.
//! - [`api`]: the seam every Kubernetes call goes through, a file per concept (errors, the
//!   client, the rate limit, targets, metadata lists, guarded patches, Events, whole-object
//!   writes), and the apiserver's clock ([`api::clock`]).
//! - [`report`]: the words the commands print in (an object, a finalizer and who removes it).
//! - [`metrics`]: the Prometheus registry and the plain-HTTP `/metrics`, `/healthz`,
//!   `/readyz`; [`names`], [`duration`]: the names that are a contract; Go-style durations.
//!
//! Locks are `parking_lot`'s (no poisoning). Where two are held at once, the graph's is taken
//! first, then the discovered resources', then a part's own (the barrier's state, the
//! deadlines, the waves).
#![forbid(unsafe_code)]

pub mod aggregated;
pub mod annotations;
pub mod api;
pub mod app;
pub mod certs;
pub mod check;
pub mod cli;
pub mod disarm;
pub mod duration;
pub mod explain;
pub mod gc;
pub mod graph;
pub mod leader;
pub mod metrics;
pub mod names;
pub mod plan;
pub mod report;
pub mod webhook;
