//! Workloads on the local cluster's real node: Pods that take seconds to stop, their owners
//! deleted synchronously (`slow_to_stop`, side by side), and a node that goes dark in the middle
//! of a delete (`dark_node`), which stops the kubelet and so runs beside none of them.

#[path = "../support/mod.rs"]
mod support;

mod dark_node;
mod slow_to_stop;

/// The node: each test of `slow_to_stop` shares it (read), `dark_node` has it alone (write).
static NODE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
