//! Fencing: no write that depends on leading leaves a replica unless its lease is valid by its
//! own monotonic clock at that moment. Leader election moves the fence on at every renewal to
//! the renewal's start plus the renew deadline (a replica whose lease is not renewed by then
//! stops leading, and another replica takes it only after the longer lease duration); the
//! seam checks it right before each write of a fenced [`super::Cluster`]. A replica frozen
//! past its lease (SIGSTOP, a frozen cgroup, a stalled process) wakes up to a fence that has
//! passed: its writes fail with [`super::ApiError::NotLeading`], and the items they were for go
//! back to the queue. What no fence can stop is a request already on the wire when the replica
//! froze; and the monotonic clock may not advance while a whole (virtual) machine is
//! suspended, so such a replica wakes up believing its lease holds for what was left of it.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

/// Until when this replica may write as the leader; shared by the election and the seam.
#[derive(Debug, Clone, Default)]
pub struct Fence(Arc<Mutex<Option<Instant>>>);

impl Fence {
    /// This replica may write until `until` (a renewal's start plus the renew deadline), or
    /// not at all (`None`: it does not lead).
    pub fn hold_until(&self, until: Option<Instant>) {
        *self.0.lock() = until;
    }

    /// Whether this replica may write as the leader now.
    pub fn holds(&self) -> bool {
        self.holds_at(Instant::now())
    }

    fn holds_at(&self, now: Instant) -> bool {
        self.0.lock().is_some_and(|until| now < until)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_fence_holds_until_the_renew_deadline_and_not_after() {
        let fence = Fence::default();
        let now = Instant::now();
        assert!(!fence.holds_at(now), "not leading: no write");
        fence.hold_until(Some(now + Duration::from_secs(2)));
        assert!(fence.holds_at(now + Duration::from_secs(1)));
        assert!(
            !fence.holds_at(now + Duration::from_secs(2)),
            "frozen past the renew deadline: no write, whatever the election has not noticed yet"
        );
        fence.clone().hold_until(None);
        assert!(!fence.holds_at(now), "a clone is the same fence");
    }
}
