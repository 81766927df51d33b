//! The garbage collector's decisions, pure: what to do with a dependent given the state of its
//! owners, and when a waiting owner goes. The annotation rules (timeouts, what is wrong with an
//! object's annotations) are below both the collector and the webhook: [`crate::annotations`].

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

pub use crate::api::Propagation;
use crate::graph::{Coordinates, Flags, Graph, Mode, Node, Uid};

/// An owner as a dependent sees it (the upstream GC's vocabulary in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// Exists and does not wait for its dependents: not being deleted, or being deleted in
    /// the background or with `orphan` [solid].
    Solid,
    /// Being deleted with `foregroundDeletion` [waiting for dependents deletion].
    WaitingForeground,
    /// Armed by syncgc and being deleted: waits for all its dependents.
    WaitingSynchronous,
    /// Gone, or replaced by an object with another uid [dangling].
    Absent,
    /// Cannot be looked up: a kind the apiserver does not serve, or a namespaced owner of a
    /// cluster-scoped dependent. Never taken for absent.
    Unresolvable,
}

impl OwnerState {
    /// How a dependent sees an owner with `flags`.
    pub fn of(flags: Flags) -> Self {
        if flags.contains(Flags::GONE) {
            Self::Absent
        } else if !flags.contains(Flags::DELETING) || flags.contains(Flags::ORPHAN) {
            Self::Solid
        } else if flags.contains(Flags::ARMED) {
            Self::WaitingSynchronous
        } else if flags.contains(Flags::FOREGROUND) {
            Self::WaitingForeground
        } else {
            Self::Solid
        }
    }

    fn waiting(self) -> bool {
        matches!(self, Self::WaitingForeground | Self::WaitingSynchronous)
    }
}

/// The collector that judges, and acts on, a dependent: syncgc, or Kubernetes' garbage
/// collector, which knows nothing of syncgc's finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActedBy {
    Syncgc,
    Kubernetes,
}

/// How a dependent in the namespace `from` sees the owner `uid` its reference names as
/// `coordinates`, from the graph alone and in the eyes of `by`: the one rule of the workers'
/// fast path and live reads, the cascade model and `syncgc explain`. `None` where the graph
/// cannot say — it has not seen that owner, or the reference does not name it where the
/// dependent can reach it — and a live read (or the model's facts) must.
pub fn owner_in_graph(
    graph: &Graph,
    uid: Uid,
    coordinates: Coordinates,
    from: Option<&str>,
    by: ActedBy,
) -> Option<OwnerState> {
    let owner = graph
        .node(uid)
        .filter(|owner| owner.seen() && owner.is_named_by(coordinates, from))?;
    Some(match by {
        ActedBy::Syncgc => OwnerState::of(owner.flags),
        ActedBy::Kubernetes => OwnerState::of(owner.flags.with(Flags::ARMED, false)),
    })
}

/// What the decision needs of the dependent itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dependent {
    /// It has dependents of its own.
    pub has_dependents: bool,
    /// One of its dependents is itself waiting for its dependents (a possible cycle).
    pub dependent_waits: bool,
    /// It carries syncgc's finalizer.
    pub armed: bool,
    /// The policy its own finalizers ask for.
    pub own: Propagation,
    /// Every owner that waits for it has reached its wave (see [`Wave::is_highest_of`](crate::graph::Wave::is_highest_of)).
    pub in_turn: bool,
}

impl Dependent {
    /// What the decision needs of the dependent `uid` with `flags`: its own, its dependents'
    /// from the graph, and whether its turn has come (`in_turn`, from the deletion order).
    pub fn of(graph: &Graph, uid: Uid, flags: Flags, in_turn: bool) -> Self {
        let mut has_dependents = false;
        let mut dependent_waits = false;
        for (_, dependent, _) in graph.valid_dependents(uid) {
            has_dependents = true;
            dependent_waits |= dependent.waits_for_dependents();
        }
        Self {
            has_dependents,
            dependent_waits,
            armed: flags.contains(Flags::ARMED),
            own: Propagation::from_finalizers(
                flags.contains(Flags::ORPHAN),
                flags.contains(Flags::FOREGROUND),
            ),
            in_turn,
        }
    }
}

impl Dependent {
    /// The dependent `uid` with `flags` as Kubernetes' collector sees it: its dependents are
    /// every object naming its uid, a dependent waits only in foreground deletion, and no
    /// deletion order holds it.
    pub fn as_kubernetes_sees(graph: &Graph, uid: Uid, flags: Flags) -> Self {
        let dependents = graph.dependents(uid);
        Self {
            has_dependents: !dependents.is_empty(),
            dependent_waits: dependents
                .iter()
                .any(|d| graph.node(*d).is_some_and(Node::waiting_in_foreground)),
            armed: false,
            own: Propagation::from_finalizers(
                flags.contains(Flags::ORPHAN),
                flags.contains(Flags::FOREGROUND),
            ),
            in_turn: true,
        }
    }
}

/// What the graph alone says about a dependent (the fast path of `attemptToDeleteItem`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastPath {
    /// Nothing to do.
    Done,
    /// Delete it, on the condition that it is still as the graph saw it.
    Delete {
        propagation: Propagation,
        resource_version: u64,
    },
    /// The graph cannot decide (an owner it has not seen or whose reference does not reach
    /// it, references to rewrite, no resourceVersion to hold the deletion to): read it.
    Live,
}

/// [`FastPath`] for the dependent `uid`, seen as `node`, whose turn has come or not (`in_turn`,
/// asked only once every owner is classified): upstream's reference classification (each
/// owner solid, waiting or absent) from the graph wherever it has seen every owner the
/// references name.
pub fn fast_path(graph: &Graph, uid: Uid, node: &Node, in_turn: impl FnOnce() -> bool) -> FastPath {
    if node.is(Flags::DELETING) {
        return FastPath::Done;
    }
    let mut owners = Vec::with_capacity(node.owners.len());
    for link in node.owners.iter() {
        let seen = owner_in_graph(
            graph,
            link.uid,
            link.coordinates,
            node.namespace(),
            ActedBy::Syncgc,
        );
        let Some(state) = seen else {
            return FastPath::Live;
        };
        owners.push(state);
    }
    let dependent = Dependent::of(graph, uid, node.flags, in_turn());
    match attempt_to_delete(graph.mode(), &owners, dependent) {
        Attempt::Wait => FastPath::Done,
        Attempt::Delete {
            propagation,
            unblock,
        } if unblock.is_empty() && node.resource_version != 0 => FastPath::Delete {
            propagation,
            resource_version: node.resource_version,
        },
        _ => FastPath::Live,
    }
}

/// What to do with a dependent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Nothing, for now.
    Wait,
    /// It keeps living (an owner is solid); drop its references to the owners at these
    /// indices, which are gone or wait for it.
    Keep { drop: Vec<usize> },
    /// Arm it before deleting it: its owner waits synchronously and it has dependents, so the
    /// wait is transitive.
    Arm,
    /// Delete it with `propagation`, after making its references at `unblock` non-blocking.
    Delete {
        propagation: Propagation,
        unblock: Vec<usize>,
    },
}

/// `attemptToDeleteItem` for a dependent with `owners` (in ownerReference order). In
/// cooperative mode syncgc only acts for an owner that waits synchronously.
pub fn attempt_to_delete(mode: Mode, owners: &[OwnerState], dependent: Dependent) -> Attempt {
    use OwnerState::*;
    let indices = |keep: fn(OwnerState) -> bool| -> Vec<usize> {
        (0..owners.len()).filter(|i| keep(owners[*i])).collect()
    };
    if owners.is_empty() || owners.contains(&Unresolvable) {
        return Attempt::Wait;
    }
    let synchronous = owners.contains(&WaitingSynchronous);
    if mode == Mode::Cooperative && !synchronous {
        return Attempt::Wait;
    }
    if owners.contains(&Solid) {
        let drop = indices(|o| o != Solid);
        return if drop.is_empty() {
            Attempt::Wait
        } else {
            Attempt::Keep { drop }
        };
    }
    if !dependent.in_turn {
        return Attempt::Wait;
    }
    if dependent.has_dependents && synchronous {
        return if dependent.armed {
            Attempt::Delete {
                propagation: Propagation::Background,
                unblock: Vec::new(),
            }
        } else {
            Attempt::Arm
        };
    }
    if dependent.has_dependents && owners.iter().any(|o| o.waiting()) {
        // Its dependents go first; when one of them waits too, this may be a cycle, and the
        // references to the waiting owners stop blocking so that they need not wait for it.
        let unblock = if dependent.dependent_waits {
            indices(OwnerState::waiting)
        } else {
            Vec::new()
        };
        return Attempt::Delete {
            propagation: Propagation::Foreground,
            unblock,
        };
    }
    Attempt::Delete {
        propagation: dependent.own,
        unblock: Vec::new(),
    }
}

/// Whether an owner's controller has seen its latest spec: `status.observedGeneration` has
/// caught up with `metadata.generation`, but for the one increment that deletion itself makes
/// (the apiserver bumps the generation of an object with finalizers when it sets its
/// deletionTimestamp, and many controllers, the DaemonSet controller among them, write no
/// status for an object being deleted). Owners without an observedGeneration have.
pub fn generation_caught_up(generation: Option<i64>, observed_generation: Option<i64>) -> bool {
    match (generation, observed_generation) {
        (Some(generation), Some(observed)) => observed.saturating_add(1) >= generation,
        _ => true,
    }
}

/// The deadline an owner waits under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deadline {
    /// The one stored on it (`syncgc.io/deadline`), which lies within its bounds.
    Stored(Timestamp),
    /// None was stored: this one, to be stored.
    New(Timestamp),
    /// The stored one (shown) lies outside `[deletionTimestamp, deletionTimestamp + max]`
    /// or is not a time (copied from elsewhere: a re-apply, a restore): this one replaces it.
    Replaced { stored: String, deadline: Timestamp },
}

impl Deadline {
    pub fn at(&self) -> Timestamp {
        match self {
            Self::Stored(at) | Self::New(at) | Self::Replaced { deadline: at, .. } => *at,
        }
    }
}

/// The deadline of an owner deleted at `deleted_at` that stores `stored` and would get
/// `timeout` now: the stored one only inside `[deleted_at, deleted_at + max]`.
pub fn deadline(
    deleted_at: Timestamp,
    stored: Option<&str>,
    timeout: Duration,
    max: Duration,
) -> Deadline {
    let fresh = after(deleted_at, timeout.min(max));
    let Some(stored) = stored else {
        return Deadline::New(fresh);
    };
    match stored.parse::<Timestamp>() {
        Ok(at) if within_bounds(deleted_at, at, max) => Deadline::Stored(at),
        _ => Deadline::Replaced {
            stored: stored.to_owned(),
            deadline: fresh,
        },
    }
}

/// Whether `deadline` may bound the wait of an owner deleted at `deleted_at`: not before the
/// deletion, not past `max` after it.
pub fn within_bounds(deleted_at: Timestamp, deadline: Timestamp, max: Duration) -> bool {
    deadline >= deleted_at && deadline <= after(deleted_at, max)
}

fn after(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX)
}

/// What to do with a synchronously waiting owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Remove the finalizer: every dependent is gone.
    Now,
    /// Remove the finalizer: the deadline has passed with dependents left.
    TimedOut,
    /// Every dependent is gone, but its controller has not seen its latest spec: look again
    /// soon.
    WaitForGeneration,
    /// Dependents are left: wait for them (until the deadline).
    Wait,
}

/// What becomes of an owner the graph shows free of dependents while the release barrier
/// has not let it go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unproven {
    /// Its deadline has passed: the deadline bounds every wait, the barrier's too.
    TimedOut,
    /// Look at it again after this long: `recheck`, or at its deadline if that comes first.
    LookAgain(Duration),
}

/// What becomes of an owner the barrier has not let go at `now`, to be looked at again
/// after `recheck` otherwise.
pub fn unproven(now: Timestamp, deadline: Timestamp, recheck: Duration) -> Unproven {
    if now >= deadline {
        return Unproven::TimedOut;
    }
    let until_deadline = deadline.duration_since(now).unsigned_abs();
    Unproven::LookAgain(recheck.min(until_deadline))
}

/// When an owner with `dependents` left, whose generation stands as given, is released.
pub fn release(
    now: Timestamp,
    deadline: Timestamp,
    dependents: usize,
    generation: Option<i64>,
    observed_generation: Option<i64>,
) -> Release {
    let caught_up = generation_caught_up(generation, observed_generation);
    match (dependents, now >= deadline) {
        (0, _) if caught_up => Release::Now,
        (_, true) => Release::TimedOut,
        (0, false) => Release::WaitForGeneration,
        (_, false) => Release::Wait,
    }
}

/// Whether a collector's finalizer that waits for dependents (`foregroundDeletion`, syncgc's)
/// has done its work, with `left` of the dependents it waits for still there: upstream's
/// `processDeletingDependentsItem` for the first (`blockOwnerDeletion: true` dependents), the
/// first condition of [`release`] for the second. The workers and the cascade model ask it.
pub fn finalizer_done(left: usize) -> bool {
    left == 0
}

#[cfg(test)]
mod tests {
    use super::OwnerState::*;
    use super::*;

    #[test]
    fn the_deadline_bounds_the_barrier_too() {
        let deadline: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let before = deadline - SignedDuration::from_secs(10);
        let recheck = Duration::from_secs(1);
        assert_eq!(
            unproven(before, deadline, recheck),
            Unproven::LookAgain(recheck)
        );
        // Waiting for a round: looked at again at the deadline at the latest.
        assert_eq!(
            unproven(before, deadline, Duration::MAX),
            Unproven::LookAgain(Duration::from_secs(10))
        );
        assert_eq!(unproven(deadline, deadline, recheck), Unproven::TimedOut);
        let after = deadline + SignedDuration::from_secs(53);
        assert_eq!(unproven(after, deadline, recheck), Unproven::TimedOut);
    }

    const LEAF: Dependent = Dependent {
        has_dependents: false,
        dependent_waits: false,
        armed: false,
        own: Propagation::Background,
        in_turn: true,
    };
    const PARENT: Dependent = Dependent {
        has_dependents: true,
        ..LEAF
    };

    fn delete(propagation: Propagation, unblock: Vec<usize>) -> Attempt {
        Attempt::Delete {
            propagation,
            unblock,
        }
    }

    fn both(owners: &[OwnerState], dependent: Dependent) -> Attempt {
        let standalone = attempt_to_delete(Mode::Standalone, owners, dependent);
        assert_eq!(
            standalone,
            attempt_to_delete(Mode::Cooperative, owners, dependent),
            "{owners:?}"
        );
        standalone
    }

    #[test]
    fn a_dependent_whose_owners_all_go_is_deleted() {
        assert_eq!(
            both(&[WaitingSynchronous], LEAF),
            delete(Propagation::Background, vec![])
        );
        assert_eq!(
            both(&[Absent, WaitingSynchronous, WaitingForeground], LEAF),
            delete(Propagation::Background, vec![])
        );
    }

    #[test]
    fn a_dependent_waits_for_its_wave_unless_another_owner_keeps_it() {
        let later = Dependent {
            in_turn: false,
            ..LEAF
        };
        assert_eq!(both(&[WaitingSynchronous], later), Attempt::Wait);
        assert_eq!(
            attempt_to_delete(Mode::Standalone, &[WaitingForeground], later),
            Attempt::Wait
        );
        let parent = Dependent {
            in_turn: false,
            ..PARENT
        };
        assert_eq!(
            both(&[WaitingSynchronous], parent),
            Attempt::Wait,
            "not armed before its wave"
        );
        // The order is the waiting owners' matter: a solid owner keeps it, and its references
        // to the others go as before.
        assert_eq!(
            both(&[WaitingSynchronous, Solid], later),
            Attempt::Keep { drop: vec![0] }
        );
    }

    #[test]
    fn a_dependent_with_dependents_of_a_synchronous_owner_is_armed_first() {
        assert_eq!(both(&[WaitingSynchronous], PARENT), Attempt::Arm);
        let armed = Dependent {
            armed: true,
            ..PARENT
        };
        assert_eq!(
            both(&[WaitingSynchronous], armed),
            delete(Propagation::Background, vec![])
        );
    }

    #[test]
    fn a_solid_owner_keeps_it_and_only_the_other_references_go() {
        assert_eq!(
            both(&[WaitingSynchronous, Solid, Absent], LEAF),
            Attempt::Keep { drop: vec![0, 2] }
        );
        assert_eq!(
            attempt_to_delete(Mode::Standalone, &[WaitingForeground, Solid], LEAF),
            Attempt::Keep { drop: vec![0] }
        );
        assert_eq!(
            attempt_to_delete(Mode::Standalone, &[Solid, Solid], LEAF),
            Attempt::Wait
        );
    }

    #[test]
    fn without_a_synchronous_owner_cooperative_mode_leaves_it_to_the_cluster() {
        for owners in [&[][..], &[Absent], &[WaitingForeground, Absent], &[Solid]] {
            assert_eq!(
                attempt_to_delete(Mode::Cooperative, owners, LEAF),
                Attempt::Wait,
                "{owners:?}"
            );
        }
    }

    #[test]
    fn standalone_mode_collects_dangling_dependents_with_their_own_policy() {
        assert_eq!(
            attempt_to_delete(Mode::Standalone, &[Absent], LEAF),
            delete(Propagation::Background, vec![])
        );
        let orphaning = Dependent {
            own: Propagation::Orphan,
            ..PARENT
        };
        assert_eq!(
            attempt_to_delete(Mode::Standalone, &[Absent, Absent], orphaning),
            delete(Propagation::Orphan, vec![])
        );
        assert_eq!(
            attempt_to_delete(Mode::Standalone, &[], LEAF),
            Attempt::Wait
        );
    }

    #[test]
    fn dependents_of_a_foreground_owner_go_in_foreground_when_they_have_dependents() {
        assert_eq!(
            attempt_to_delete(Mode::Standalone, &[WaitingForeground], LEAF),
            delete(Propagation::Background, vec![])
        );
        assert_eq!(
            attempt_to_delete(Mode::Standalone, &[WaitingForeground, Absent], PARENT),
            delete(Propagation::Foreground, vec![])
        );
        // A cycle: its own dependent waits for it too, so its references stop blocking.
        let in_cycle = Dependent {
            dependent_waits: true,
            ..PARENT
        };
        assert_eq!(
            attempt_to_delete(Mode::Standalone, &[Absent, WaitingForeground], in_cycle),
            delete(Propagation::Foreground, vec![1])
        );
    }

    #[test]
    fn an_owner_that_cannot_be_looked_up_is_never_taken_for_absent() {
        assert_eq!(
            both(&[Unresolvable, WaitingSynchronous], LEAF),
            Attempt::Wait
        );
        assert_eq!(
            attempt_to_delete(Mode::Standalone, &[Absent, Unresolvable], LEAF),
            Attempt::Wait
        );
    }

    #[test]
    fn generations_allow_for_the_bump_of_deletion_itself() {
        assert!(generation_caught_up(Some(3), Some(3)));
        // A DaemonSet being deleted: generation 2 → 3 by the deletion, status left at 2.
        assert!(generation_caught_up(Some(3), Some(2)));
        // A spec change not yet seen, then the deletion.
        assert!(!generation_caught_up(Some(4), Some(2)));
        assert!(generation_caught_up(Some(3), None));
        assert!(generation_caught_up(None, None));
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    #[test]
    fn a_stored_deadline_is_honoured_only_within_its_bounds() {
        let max = Duration::from_secs(3600);
        let timeout = Duration::from_secs(60);
        let deleted = at(0);
        assert_eq!(deadline(deleted, None, timeout, max), Deadline::New(at(60)));
        let stored = at(600).to_string();
        assert_eq!(
            deadline(deleted, Some(&stored), timeout, max),
            Deadline::Stored(at(600))
        );
        // Copied from an earlier life: in the past, or past the maximum.
        for copied in [at(-10).to_string(), at(3601).to_string(), "soon".to_owned()] {
            assert_eq!(
                deadline(deleted, Some(&copied), timeout, max),
                Deadline::Replaced {
                    stored: copied.clone(),
                    deadline: at(60)
                },
                "{copied}"
            );
        }
        // The timeout is capped by the maximum, too.
        assert_eq!(
            deadline(deleted, None, Duration::from_secs(7200), max).at(),
            at(3600)
        );
    }

    #[test]
    fn an_owner_is_released_when_its_dependents_are_gone_or_its_deadline_passes() {
        let deadline = at(60);
        assert_eq!(release(at(1), deadline, 0, None, None), Release::Now);
        assert_eq!(release(at(1), deadline, 2, None, None), Release::Wait);
        assert_eq!(release(at(60), deadline, 2, None, None), Release::TimedOut);
        assert_eq!(
            release(at(1), deadline, 0, Some(5), Some(2)),
            Release::WaitForGeneration
        );
        assert_eq!(
            release(at(61), deadline, 0, Some(5), Some(2)),
            Release::TimedOut
        );
        // Gone dependents win over a deadline passed at the same moment.
        assert_eq!(release(at(61), deadline, 0, Some(3), Some(2)), Release::Now);
    }

    #[test]
    fn foreground_deletion_ends_with_the_last_blocking_dependent() {
        assert!(finalizer_done(0));
        assert!(!finalizer_done(1));
    }

    mod from_the_graph {
        use super::super::*;
        use crate::graph::{Coordinates, Observed, ResourceId};

        fn object(n: u128, owners: &[u128], flags: Flags) -> Observed {
            Observed {
                resource_version: 5,
                ..Observed::config_map(n, owners, flags)
            }
        }

        fn plan_of(mode: Mode, objects: Vec<Observed>, uid: u128) -> FastPath {
            let mut graph = Graph::new(mode);
            for object in objects {
                graph.apply(ResourceId::new(0), object);
            }
            let uid = Uid::from_u128(uid);
            let node = graph.node(uid).unwrap().clone();
            fast_path(&graph, uid, &node, || true)
        }

        const WAITING: Flags = Flags::ARMED.with(Flags::DELETING, true);

        #[test]
        fn a_dependent_of_a_seen_waiting_owner_is_deleted_under_its_resource_version() {
            let objects = vec![object(1, &[], WAITING), object(2, &[1], Flags::empty())];
            assert_eq!(
                plan_of(Mode::Cooperative, objects, 2),
                FastPath::Delete {
                    propagation: Propagation::Background,
                    resource_version: 5
                }
            );
        }

        #[test]
        fn an_owner_the_graph_cannot_vouch_for_is_read() {
            // Never seen: a virtual node.
            let unseen = vec![object(2, &[1], Flags::empty())];
            assert_eq!(plan_of(Mode::Standalone, unseen, 2), FastPath::Live);
            // Seen, but the reference names another object.
            let mut other = object(2, &[1], Flags::empty());
            other.owners[0].coordinates = Coordinates::of("v1", "ConfigMap", "other");
            let renamed = vec![object(1, &[], WAITING), other];
            assert_eq!(plan_of(Mode::Cooperative, renamed, 2), FastPath::Live);
        }

        #[test]
        fn a_solid_owner_or_a_dependent_being_deleted_needs_nothing() {
            let solid = vec![
                object(1, &[], Flags::empty()),
                object(2, &[1], Flags::empty()),
            ];
            assert_eq!(plan_of(Mode::Standalone, solid, 2), FastPath::Done);
            let deleting = vec![object(1, &[], WAITING), object(2, &[1], Flags::DELETING)];
            assert_eq!(plan_of(Mode::Cooperative, deleting, 2), FastPath::Done);
        }

        #[test]
        fn owner_states_follow_the_flags() {
            assert_eq!(OwnerState::of(Flags::empty()), OwnerState::Solid);
            assert_eq!(OwnerState::of(WAITING), OwnerState::WaitingSynchronous);
            let foreground = Flags::FOREGROUND.with(Flags::DELETING, true);
            assert_eq!(OwnerState::of(foreground), OwnerState::WaitingForeground);
            let orphaning = WAITING.with(Flags::ORPHAN, true);
            assert_eq!(OwnerState::of(orphaning), OwnerState::Solid);
            assert_eq!(
                OwnerState::of(Flags::VIRTUAL.with(Flags::GONE, true)),
                OwnerState::Absent
            );
        }
    }
}
