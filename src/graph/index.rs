//! The graph's index of nodes by uid, split in [`SHARDS`] maps by the uid's hash. A hash map
//! grows by moving every entry to a table twice as large, all at once: at ten million objects
//! one move takes about a second, with the graph's lock held. Split, each map holds a
//! [`SHARDS`]th of the objects and grows on its own, so the longest pause is that much shorter
//! for the same total work.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, Hasher};

use super::{Node, Uid, UidHash};

/// How many maps the index is split into.
const SHARDS: usize = 64;

type Shard = HashMap<Uid, Box<Node>, UidHash>;

#[derive(Debug)]
pub struct Nodes {
    shards: Box<[Shard]>,
}

impl Default for Nodes {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }
}

/// The shard of `uid`: bits of its hash that neither the maps' bucket index (the low bits)
/// nor their control bytes (the top seven) use.
fn shard(uid: &Uid) -> usize {
    let mut hasher = UidHash::default().build_hasher();
    std::hash::Hash::hash(uid, &mut hasher);
    (hasher.finish() >> 48) as usize % SHARDS
}

impl Nodes {
    pub fn get(&self, uid: &Uid) -> Option<&Node> {
        self.shards[shard(uid)].get(uid).map(|n| &**n)
    }

    pub fn get_mut(&mut self, uid: &Uid) -> Option<&mut Node> {
        self.shards[shard(uid)].get_mut(uid).map(|n| &mut **n)
    }

    pub fn entry(&mut self, uid: Uid) -> Entry<'_, Uid, Box<Node>> {
        self.shards[shard(&uid)].entry(uid)
    }

    pub fn remove(&mut self, uid: &Uid) -> Option<Box<Node>> {
        self.shards[shard(uid)].remove(uid)
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(HashMap::len).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Uid, &Node)> {
        self.shards
            .iter()
            .flat_map(|s| s.iter().map(|(uid, n)| (uid, &**n)))
    }

    pub fn values(&self) -> impl Iterator<Item = &Node> {
        self.iter().map(|(_, n)| n)
    }
}

impl std::ops::Index<&Uid> for Nodes {
    type Output = Node;

    fn index(&self, uid: &Uid) -> &Node {
        self.get(uid).expect("a node in the index")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_spread_over_every_shard() {
        let mut counts = [0usize; SHARDS];
        for n in 0..64_000u128 {
            counts[shard(&Uid::from_u128(n))] += 1;
        }
        let (least, most) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*least > 800 && *most < 1200, "{least}..{most}");
    }
}
