//! What stops, restarts or lies while owners wait: syncgc killed or stopped mid-deletion and
//! started again (`restart`, `deletion_order`), kube-apiserver restarted and a watch failing
//! (`release_barrier`), etcd compacted behind the watches and the apiserver at its in-flight
//! limits (`faults`), leaders dying or frozen past their lease (`leader_election`, `fencing`),
//! and clocks two minutes off (`clock_skew`).
//!
//! The tests run one at a time, each holding `support::process::alone()` for its whole run:
//! each starts syncgc processes of its own, which act in every namespace, and several stop or
//! restart what every other test would see.

#[path = "../support/mod.rs"]
mod support;

mod clock_skew;
mod deletion_order;
mod faults;
mod fencing;
mod leader_election;
mod release_barrier;
mod restart;
