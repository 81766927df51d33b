//! The local control plane, and what runs against it without a syncgc process: the apiserver
//! serves what the collector needs (`control_plane`), the graph's watches go over connections
//! of their own (`streams`), Kubernetes' own garbage collector (`native_gc`), and the webhook
//! served in-process and called by the apiserver, registered for one test's namespace at a
//! time (`webhook`). Each test has a namespace of its own; they run side by side.

#[path = "../support/mod.rs"]
mod support;

mod control_plane;
mod native_gc;
mod streams;
mod webhook;
