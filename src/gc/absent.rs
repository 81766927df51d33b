//! Owners verified absent by a live read, so that the many dependents of one missing owner
//! cost one read, not one each. Keyed by the full coordinates the reference names (its
//! namespace as looked up, group, kind, name and uid): the absence of one identity never
//! implies the absence of another with the same uid. Bounded: the least recently used entry
//! goes first.

use std::collections::{HashMap, VecDeque};

/// Where an ownerReference was looked up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AbsentKey {
    pub namespace: Option<String>,
    pub group: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

#[derive(Debug)]
pub struct AbsentOwners {
    capacity: usize,
    /// Each entry with the tick of its last use.
    entries: HashMap<AbsentKey, u64>,
    /// Uses in order; entries whose tick no longer matches are stale.
    uses: VecDeque<(AbsentKey, u64)>,
    tick: u64,
}

impl AbsentOwners {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: HashMap::new(),
            uses: VecDeque::new(),
            tick: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `owner` is known to be absent (and marks it used).
    pub fn contains(&mut self, owner: &AbsentKey) -> bool {
        if !self.entries.contains_key(owner) {
            return false;
        }
        self.touch(owner.clone());
        true
    }

    pub fn insert(&mut self, owner: AbsentKey) {
        self.touch(owner);
        while self.entries.len() > self.capacity {
            let Some((oldest, tick)) = self.uses.pop_front() else {
                break;
            };
            if self.entries.get(&oldest) == Some(&tick) {
                self.entries.remove(&oldest);
            }
        }
        // Stale uses pile up when the same owners are used over and over.
        if self.uses.len() > 4 * self.capacity {
            let entries = &self.entries;
            self.uses.retain(|(c, t)| entries.get(c) == Some(t));
        }
    }

    fn touch(&mut self, owner: AbsentKey) {
        self.tick += 1;
        self.entries.insert(owner.clone(), self.tick);
        self.uses.push_back((owner, self.tick));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rc(name: &str) -> AbsentKey {
        AbsentKey {
            namespace: Some("ns".into()),
            group: String::new(),
            kind: "ReplicationController".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    /// GC-28: with room for two, rc1 used again outlives rc2 when rc3 comes.
    #[test]
    fn the_least_recently_used_owner_goes_first() {
        let mut cache = AbsentOwners::new(2);
        cache.insert(rc("rc1"));
        cache.insert(rc("rc2"));
        assert!(cache.contains(&rc("rc1")));
        cache.insert(rc("rc3"));
        assert!(cache.contains(&rc("rc1")));
        assert!(!cache.contains(&rc("rc2")));
        assert!(cache.contains(&rc("rc3")));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn other_coordinates_with_the_same_uid_are_not_absent() {
        let mut cache = AbsentOwners::new(10);
        cache.insert(rc("rc1"));
        let elsewhere = AbsentKey {
            namespace: Some("other".into()),
            ..rc("rc1")
        };
        assert!(!cache.contains(&elsewhere));
    }

    #[test]
    fn repeated_use_stays_bounded() {
        let mut cache = AbsentOwners::new(3);
        for i in 0..1000 {
            cache.insert(rc(&format!("rc{}", i % 5)));
            assert!(cache.contains(&rc(&format!("rc{}", i % 5))));
        }
        assert!(cache.len() <= 3);
        assert!(cache.uses.len() <= 4 * 3 + 2);
    }
}
