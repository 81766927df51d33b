//! syncgc in cooperative mode, beside kube-controller-manager's garbage collector: one `syncgc
//! run` process for the whole binary (`support::process::shared`) and no other, registered as
//! the webhook for the tests' namespaces. Synchronous deletion end to end and `syncgc explain`
//! (`synchronous_gc`, `explain`), deletion order (`deletion_order`), `syncgc plan` (`plan`),
//! and a real operator's teardown on the real node (`operator_teardown`). Each test has a
//! namespace of its own; they run side by side.

#[path = "../support/mod.rs"]
mod support;

mod deletion_order;
mod explain;
mod operator_teardown;
mod plan;
mod synchronous_gc;
