//! syncgc started on a cluster that already holds what it must handle: the graph its first
//! lists build, from the watch cache or from etcd (`initial_list`); a standalone collector
//! started after the objects it must collect exist (`standalone_start`); and an aggregated API
//! that does not answer, before syncgc starts and while it runs (`aggregated_api`).
//!
//! The tests run one at a time, each holding `support::process::alone()` for its whole run:
//! each starts syncgc processes of its own, which act in every namespace (the standalone one
//! without kube-controller-manager's collector), and every client sees the broken APIServices.

#[path = "../support/mod.rs"]
mod support;

mod aggregated_api;
mod initial_list;
mod standalone_start;
