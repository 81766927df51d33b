//! The graph shared between its one writer and its readers, as kube-rs hands out a `Store`
//! from its `Writer`: the graph builder holds the [`Writer`]; the workers, the release barrier,
//! the webhook and `/debug/graph` hold [`Reader`]s, which cannot change it.

use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::Graph;

/// The graph's one writer.
#[derive(Debug)]
pub struct Writer(Arc<RwLock<Graph>>);

/// A read-only handle on the graph.
#[derive(Debug, Clone)]
pub struct Reader(Arc<RwLock<Graph>>);

impl Writer {
    pub fn new(graph: Graph) -> Self {
        Self(Arc::new(RwLock::new(graph)))
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, Graph> {
        self.0.write()
    }

    pub fn reader(&self) -> Reader {
        Reader(self.0.clone())
    }
}

impl Reader {
    pub fn read(&self) -> RwLockReadGuard<'_, Graph> {
        self.0.read()
    }
}
