//! The foreground wait (`foregroundDeletion`, standalone mode): upstream's
//! `processDeletingDependentsItem`. An owner deleted in foreground stays until no dependent
//! with `blockOwnerDeletion` is left; its dependents are deleted meanwhile, in the waves of
//! its deletion order.

use kube::runtime::events::EventType;

use super::barrier::{self, Barrier, Verdict};
use super::context::Context;
use super::decide;
use super::waves::Waves;
use crate::api::{ApiError, Target};
use crate::graph::{Flags, Uid, Work};
use crate::names::{FOREGROUND_FINALIZER, Reason};

/// The foreground wait at work: what it reads and acts through, and the parts it asks.
pub struct Foreground<'a> {
    pub cx: &'a Context,
    pub waves: &'a Waves,
    pub barrier: &'a Barrier,
}

impl Foreground<'_> {
    /// Deletes every dependent; removes `foregroundDeletion` once no dependent with
    /// `blockOwnerDeletion` is left and the release barrier agrees — or, since upstream would
    /// have removed it once the graph showed none, once the barrier has held it for
    /// `--timeout-base`, with a Warning saying what was not proven.
    pub async fn sync(&self, uid: Uid, target: &Target) -> Result<(), ApiError> {
        let cx = self.cx;
        self.waves.delete_next(cx, uid, target).await;
        let blocking = cx
            .graph()
            .valid_dependents(uid)
            .filter(|(.., link)| link.blocks(Flags::FOREGROUND))
            .count();
        if !decide::finalizer_done(blocking) {
            self.barrier.kept(uid, true);
            return Ok(());
        }
        let bound = cx.config.timeouts.base;
        match self.barrier.through(cx, uid, target, true).await {
            Verdict::Pass => {}
            Verdict::Held { hold, since, .. } if since.elapsed() >= bound => {
                let note = format!(
                    "no dependent blocking its deletion is left that the graph knows of; removing foregroundDeletion after {bound:?} held by the release barrier, which could not confirm it: waiting for {hold}"
                );
                tracing::warn!(owner = %target, %hold, "{note}");
                cx.event(target, EventType::Warning, Reason::BarrierTimedOut, note)
                    .await;
            }
            Verdict::Held { since, .. } => {
                let held_for = since.elapsed();
                let recheck = barrier::recheck(held_for).min(bound.saturating_sub(held_for));
                cx.queue.add_after(Work::SyncOwner(uid), recheck);
                return Ok(());
            }
            Verdict::Round => {
                // The round queues it; this bounds the wait should the round never end.
                cx.queue.add_after(Work::SyncOwner(uid), bound);
                return Ok(());
            }
        }
        tracing::debug!(owner = %target, "no blocking dependent left: removing foregroundDeletion");
        cx.remove_finalizer(uid, target, FOREGROUND_FINALIZER).await
    }
}
