//! The objects below one, walked at most once however many ask: what the guards' judgement,
//! the cascade model's copy, the dry-run warning's count and the record of a cascade's root
//! all read of one DELETE's tree, under one read of the graph.

use std::cell::OnceCell;
use std::collections::HashMap;

use super::{Graph, Step, Uid};

/// The tree below `root` in `graph`, as [`Graph::walk`] gives it, walked on first use.
pub struct Below<'g> {
    graph: &'g Graph,
    root: Uid,
    steps: OnceCell<Vec<Step>>,
}

impl<'g> Below<'g> {
    pub fn new(graph: &'g Graph, root: Uid) -> Self {
        Self {
            graph,
            root,
            steps: OnceCell::new(),
        }
    }

    pub fn graph(&self) -> &'g Graph {
        self.graph
    }

    pub fn root(&self) -> Uid {
        self.root
    }

    /// The objects below the root, depth first, each with the owner it was reached from.
    pub fn steps(&self) -> &[Step] {
        self.steps
            .get_or_init(|| self.graph.walk(self.root).collect())
    }

    /// The number of direct and indirect dependents ([`Graph::transitive_dependents`]).
    pub fn count(&self) -> usize {
        self.steps().len()
    }

    /// The root, then every object below it ([`Graph::tree`]).
    pub fn tree(&self) -> impl Iterator<Item = Uid> + '_ {
        std::iter::once(self.root).chain(self.steps().iter().map(|step| step.uid))
    }

    /// The chain of owners from the root down to `uid`, both included (at most 66 long: a
    /// message's worth).
    pub fn path_to(&self, uid: Uid) -> Vec<Uid> {
        let parents: HashMap<Uid, Uid> = self.steps().iter().map(|s| (s.uid, s.owner)).collect();
        let mut chain = vec![uid];
        while let Some(parent) = parents.get(chain.last().unwrap_or(&uid)) {
            if *parent == self.root || chain.len() > 64 {
                break;
            }
            chain.push(*parent);
        }
        chain.push(self.root);
        chain.reverse();
        chain
    }
}
