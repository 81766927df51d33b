//! The workers' deletion orders: [`Orders`] (pure, [`super::order`]) behind a lock, and what
//! moving them on says (a `SyncGCWave` Event, a Warning for an invalid order) and queues.

use kube::runtime::events::EventType;
use parking_lot::Mutex;

use super::context::Context;
use super::order::{Abandoned, Orders};
use crate::api::Target;
use crate::graph::{Graph, Uid, Work};
use crate::names::{DELETION_ORDER_ANNOTATION, Reason};

/// The workers' deletion orders: [`Orders`] behind a lock, and what moving them on says and
/// queues.
#[derive(Debug, Default)]
pub struct Waves(Mutex<Orders>);

impl Waves {
    /// Whether `uid` may be deleted now for every owner of it that waits (its wave reached).
    pub fn in_turn(&self, graph: &Graph, uid: Uid) -> bool {
        self.0.lock().in_turn(graph, uid, graph.wave(uid))
    }

    pub fn forget(&self, graph: &Graph) {
        self.0.lock().forget(graph);
    }

    /// Queues the attempts to delete the dependents of the waiting owner `uid` that its order
    /// has reached ([`Orders::next`]). A wave that starts gets a `SyncGCWave` Event on
    /// `target`; a dependent with an invalid order, a Warning of its own the first time.
    pub async fn delete_next(&self, cx: &Context, uid: Uid, target: &Target) {
        let batch = {
            let graph = cx.graph();
            self.0
                .lock()
                .next(&graph, uid, |dependent| cx.recently_deleted(dependent))
        };
        if let Some((wave, count)) = batch.started {
            cx.metrics.waves_started.inc();
            tracing::info!(owner = %target, wave = wave.0, count, "deleting a wave of dependents");
            let note = format!("deleting wave {}: {count} dependent(s)", wave.0);
            cx.new_event(target, EventType::Normal, Reason::Wave, note)
                .await;
        }
        for (dependent, value) in batch.invalid {
            let Some((dependent, _)) = cx.observed(dependent) else {
                continue;
            };
            let note = format!(
                "{DELETION_ORDER_ANNOTATION} {value:?} is not an integer; it is deleted in wave 0"
            );
            tracing::warn!(%dependent, "{note}");
            cx.event(&dependent, EventType::Warning, Reason::InvalidOrder, note)
                .await;
        }
        for dependent in batch.uids {
            cx.enqueue(Work::AttemptToDelete(dependent));
        }
    }

    /// The owner `uid`'s deadline passed: abandons its order if waves are left besides the
    /// current one ([`Orders::abandon`]), saying so on `target`. Whether it did.
    pub async fn abandon(&self, cx: &Context, uid: Uid, target: &Target) -> bool {
        let abandoned = {
            let graph = cx.graph();
            self.0.lock().abandon(&graph, uid)
        };
        let Some(Abandoned { current, later }) = abandoned else {
            return false;
        };
        tracing::warn!(owner = %target, wave = current.0, later, "the deadline passed before the last wave: the order is abandoned");
        let note = format!(
            "the deadline passed while wave {} was being deleted: the order is abandoned and the {later} dependent(s) of the later waves are deleted at once",
            current.0
        );
        cx.new_event(target, EventType::Warning, Reason::OrderAbandoned, note)
            .await;
        true
    }
}
