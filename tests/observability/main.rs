//! What syncgc tells: the cause of every collected object, followed back by `syncgc explain
//! --why-deleted` and held against kube-apiserver's audit log (`causes`), the waiting gauges
//! of each replica (`waiting_gauges`), and the alert rules and a real Prometheus scraping
//! syncgc (`prometheus`).
//!
//! The tests run one at a time, each holding `support::process::alone()` for its whole run:
//! the gauges count the whole cluster, and each syncgc the tests start acts in every namespace.

#[path = "../support/mod.rs"]
mod support;

mod causes;
mod prometheus;
mod waiting_gauges;
