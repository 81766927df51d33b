//! The graph's index of nodes by uid, split in [`SHARDS`] maps by the uid's hash. A hash map
//! grows by moving every entry to a table twice as large, all at once: at ten million objects
//! one move takes about a second, with the graph's lock held. Split, each map holds a
//! [`SHARDS`]th of the objects and grows on its own, so the longest pause is that much shorter
//! for the same total work.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;

use super::{Node, Uid, UidHash};

/// How many maps the index is split into.
const SHARDS: usize = 64;

/// The index, its maps hashing with `S` (the process's keyed [`UidHash`]; another only in the
/// graph benchmark, as a baseline).
#[derive(Debug)]
pub struct Nodes<S = UidHash> {
    hasher: S,
    shards: Box<[HashMap<Uid, Box<Node>, S>]>,
}

impl<S: BuildHasher + Default + Clone> Default for Nodes<S> {
    fn default() -> Self {
        let hasher = S::default();
        Self {
            shards: (0..SHARDS)
                .map(|_| HashMap::with_hasher(hasher.clone()))
                .collect(),
            hasher,
        }
    }
}

impl<S: BuildHasher> Nodes<S> {
    /// The shard of `uid`: bits of the hash its map uses that neither the map's bucket index
    /// (the low bits) nor its control bytes (the top seven) use. Keyed like the maps, so no
    /// one who does not know the key can choose uids that fill one shard.
    #[inline]
    fn shard(&self, uid: &Uid) -> usize {
        (self.hasher.hash_one(uid) >> 48) as usize % SHARDS
    }

    pub fn get(&self, uid: &Uid) -> Option<&Node> {
        self.shards[self.shard(uid)].get(uid).map(|n| &**n)
    }

    pub fn get_mut(&mut self, uid: &Uid) -> Option<&mut Node> {
        let shard = self.shard(uid);
        self.shards[shard].get_mut(uid).map(|n| &mut **n)
    }

    pub fn entry(&mut self, uid: Uid) -> Entry<'_, Uid, Box<Node>> {
        let shard = self.shard(&uid);
        self.shards[shard].entry(uid)
    }

    pub fn remove(&mut self, uid: &Uid) -> Option<Box<Node>> {
        let shard = self.shard(uid);
        self.shards[shard].remove(uid)
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

impl<S: BuildHasher> std::ops::Index<&Uid> for Nodes<S> {
    type Output = Node;

    fn index(&self, uid: &Uid) -> &Node {
        self.get(uid).expect("a node in the index")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many of `uids` each shard gets: within a fifth of an even share.
    fn spread(uids: impl Iterator<Item = Uid>) {
        let nodes = Nodes::<UidHash>::default();
        let mut counts = [0usize; SHARDS];
        for uid in uids {
            counts[nodes.shard(&uid)] += 1;
        }
        let (least, most) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*least > 800 && *most < 1200, "{least}..{most}");
    }

    #[test]
    fn uids_spread_over_every_shard() {
        spread((0..64_000u128).map(Uid::from_u128));
    }

    /// Uids made to share one unkeyed hash (so one shard, 35, of the unkeyed index) spread
    /// like any others under the keyed hash.
    #[test]
    fn uids_colliding_unkeyed_spread_over_every_shard() {
        spread(crate::graph::uid::tests::colliding(64_000));
    }
}
