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
//! Modules, imports pointing down only:
//!
//! - [`cli`]: the command line (`syncgc run`, `syncgc certs`), parsed with clap.
//! - [`app`]: `run`, which wires every part of the `run` subcommand together.
//! - [`explain`]: `syncgc explain`, what keeps an object from going.
//! - [`webhook`]: the mutating admission webhook (HTTPS server, the pure `admit` decision).
//! - [`gc`]: discovery, metadata watches, the work queue, the pure GC decisions, the workers.
//! - [`leader`]: leader election with a Lease; only the leader's workers act.
//! - [`graph`]: the ownership graph (nodes keyed by uid, one writer), pure.
//! - [`certs`]: development certificates (a CA and a serving certificate signed by it).
//! - [`metrics`]: the Prometheus registry and the plain-HTTP `/metrics`, `/healthz`, `/readyz`.
//! - [`api`]: the seam every Kubernetes call goes through.
//! - [`names`], [`duration`]: the names that are a contract; Go-style durations.
#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod certs;
pub mod cli;
pub mod duration;
pub mod explain;
pub mod gc;
pub mod graph;
pub mod leader;
pub mod metrics;
pub mod names;
pub mod webhook;
