//! A work queue that deduplicates, delays and backs off, in the manner of client-go's rate-limited
//! work queue: an item is handed to one worker at a time; added again while being worked on,
//! it comes back once that worker is done. Its items are keyed by uid, hashed as the graph
//! hashes them: with the process's key ([`UidHash`]), so that no one who chooses uids (any
//! ownerReference names one) can make them pile up in one bucket.

use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::graph::UidHash;

const BASE_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

struct Items<T> {
    /// Handed out before `ready`, in the order they came.
    first: VecDeque<T>,
    ready: VecDeque<T>,
    queued: HashSet<T, UidHash>,
    processing: HashSet<T, UidHash>,
    /// Items added while processing: back in the queue when done (ahead, when added so).
    dirty: HashMap<T, bool, UidHash>,
    delayed: BTreeSet<(Instant, T)>,
    failures: HashMap<T, u32, UidHash>,
    shut_down: bool,
}

pub struct WorkQueue<T> {
    state: Mutex<Items<T>>,
    notify: Notify,
}

impl<T: Clone + Eq + Hash + Ord> Default for WorkQueue<T> {
    fn default() -> Self {
        Self {
            state: Mutex::new(Items {
                first: VecDeque::new(),
                ready: VecDeque::new(),
                queued: HashSet::default(),
                processing: HashSet::default(),
                dirty: HashMap::default(),
                delayed: BTreeSet::new(),
                failures: HashMap::default(),
                shut_down: false,
            }),
            notify: Notify::new(),
        }
    }
}

impl<T: Clone + Eq + Hash> Items<T> {
    /// Queues `item` (ahead, when `first`): once done, when it is being processed; moved
    /// ahead, when it is queued behind. Whether it is newly ready.
    fn put(&mut self, item: T, first: bool) -> bool {
        if self.processing.contains(&item) {
            *self.dirty.entry(item).or_insert(false) |= first;
            return false;
        }
        if self.queued.insert(item.clone()) {
            if first {
                self.first.push_back(item);
            } else {
                self.ready.push_back(item);
            }
            return true;
        }
        if first && let Some(at) = self.ready.iter().position(|queued| *queued == item) {
            self.ready.remove(at);
            self.first.push_back(item);
        }
        false
    }
}

impl<T: Clone + Eq + Hash + Ord> WorkQueue<T> {
    fn state(&self) -> parking_lot::MutexGuard<'_, Items<T>> {
        self.state.lock()
    }

    /// Queues `item` now, unless it is queued already.
    pub fn add(&self, item: T) {
        self.put(item, false);
    }

    /// Queues `item` ahead of the items [`WorkQueue::add`] queued (moving it there if it is
    /// one of them), behind those queued this way before it.
    pub fn add_first(&self, item: T) {
        self.put(item, true);
    }

    fn put(&self, item: T, first: bool) {
        let mut state = self.state();
        if state.put(item, first) {
            drop(state);
            self.notify.notify_one();
        }
    }

    /// Queues `item` after `delay` (an earlier pending time for it wins).
    pub fn add_after(&self, item: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(item);
        }
        let at = Instant::now() + delay;
        let mut state = self.state();
        let existing = state.delayed.iter().find(|(_, i)| *i == item).cloned();
        match existing {
            Some((when, _)) if when <= at => return,
            Some(old) => {
                state.delayed.remove(&old);
            }
            None => {}
        }
        state.delayed.insert((at, item));
        drop(state);
        self.notify.notify_one();
    }

    /// Queues `item` again after a backoff that doubles with each consecutive failure.
    pub fn retry(&self, item: T) -> Duration {
        let failures = {
            let mut state = self.state();
            let failures = state.failures.entry(item.clone()).or_insert(0);
            *failures = failures.saturating_add(1);
            *failures
        };
        let delay = BASE_BACKOFF
            .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(20)))
            .min(MAX_BACKOFF);
        self.add_after(item, delay);
        delay
    }

    /// Forgets the failures of `item` (it succeeded).
    pub fn forget(&self, item: &T) {
        self.state().failures.remove(item);
    }

    /// Marks `item` as no longer being processed.
    pub fn done(&self, item: &T) {
        let mut state = self.state();
        state.processing.remove(item);
        let Some(first) = state.dirty.remove(item) else {
            return;
        };
        if state.put(item.clone(), first) {
            drop(state);
            self.notify.notify_one();
        }
    }

    /// The next item, waiting for one; `None` once shut down.
    pub async fn next(&self) -> Option<T> {
        loop {
            let notified = self.notify.notified();
            let wake_at = {
                let mut state = self.state();
                if state.shut_down {
                    return None;
                }
                let now = Instant::now();
                while let Some(first) = state.delayed.first().cloned() {
                    if first.0 > now {
                        break;
                    }
                    state.delayed.remove(&first);
                    state.put(first.1, false);
                }
                if let Some(item) = state.first.pop_front().or_else(|| state.ready.pop_front()) {
                    state.queued.remove(&item);
                    state.processing.insert(item.clone());
                    if !state.ready.is_empty() || !state.first.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(item);
                }
                state.delayed.first().map(|(at, _)| *at)
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Items waiting now or later.
    pub fn len(&self) -> usize {
        let state = self.state();
        state.first.len() + state.ready.len() + state.delayed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether no item waits to be handed out now.
    pub fn idle(&self) -> bool {
        let state = self.state();
        state.first.is_empty() && state.ready.is_empty()
    }

    /// Wakes every waiting worker with `None`.
    pub fn shut_down(&self) {
        self.state().shut_down = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn deduplicates_and_keeps_order() {
        let q = WorkQueue::default();
        for i in [1, 2, 1, 3, 2] {
            q.add(i);
        }
        assert_eq!(q.len(), 3);
        for expected in [1, 2, 3] {
            let item = q.next().await.unwrap();
            assert_eq!(item, expected);
            q.done(&item);
        }
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn an_item_added_first_overtakes_those_waiting() {
        let q = WorkQueue::default();
        for i in [1, 2, 3] {
            q.add(i);
        }
        q.add_first(9);
        q.add_first(8);
        q.add_first(2);
        for expected in [9, 8, 2, 1, 3] {
            let item = q.next().await.unwrap();
            assert_eq!(item, expected);
            q.done(&item);
        }
    }

    #[tokio::test]
    async fn an_item_added_first_while_queued_or_processing_goes_ahead() {
        let q = WorkQueue::default();
        for i in [1, 2, 3, 4] {
            q.add(i);
        }
        let item = q.next().await.unwrap();
        q.add_first(1);
        q.add_first(3);
        q.done(&item);
        for expected in [3, 1, 2, 4] {
            let item = q.next().await.unwrap();
            assert_eq!(item, expected);
            q.done(&item);
        }
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn an_item_added_while_processing_comes_back_after_done() {
        let q = WorkQueue::default();
        q.add(7);
        let item = q.next().await.unwrap();
        q.add(7);
        assert!(q.is_empty(), "not handed out twice at once");
        q.done(&item);
        assert_eq!(q.next().await, Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_items_wait_and_the_earliest_time_wins() {
        let q = WorkQueue::default();
        q.add_after(1, Duration::from_secs(10));
        q.add_after(1, Duration::from_secs(5));
        q.add_after(1, Duration::from_secs(20));
        let started = Instant::now();
        assert_eq!(q.next().await, Some(1));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_exponentially_until_forgotten() {
        let q = WorkQueue::<u8>::default();
        assert_eq!(q.retry(1), Duration::from_millis(50));
        assert_eq!(q.retry(1), Duration::from_millis(100));
        assert_eq!(q.retry(1), Duration::from_millis(200));
        q.forget(&1);
        assert_eq!(q.retry(1), Duration::from_millis(50));
        for _ in 0..40 {
            q.retry(2);
        }
        assert_eq!(q.retry(2), MAX_BACKOFF);
    }

    #[tokio::test]
    async fn shut_down_wakes_workers() {
        let q = std::sync::Arc::new(WorkQueue::<u8>::default());
        let worker = tokio::spawn({
            let q = q.clone();
            async move { q.next().await }
        });
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(worker.await.unwrap(), None);
    }
}
