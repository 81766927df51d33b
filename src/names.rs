//! Names that are a contract with users and with Kubernetes.

/// syncgc's version and the commit it was built from, as `--version` and the first log line of
/// `syncgc run` say.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SYNCGC_COMMIT"),
    ")"
);

/// The opt-in annotation; its value must be `"true"`.
pub const SYNCHRONOUS_ANNOTATION: &str = "syncgc.io/synchronous";
/// The synchronous-GC finalizer an opted-in object carries.
pub const SYNCHRONOUS_FINALIZER: &str = "syncgc.io/synchronous";
/// Per-object default propagation when a DELETE names none: `Foreground | Background | Orphan`.
pub const PROPAGATION_ANNOTATION: &str = "syncgc.io/propagation";
/// Per-object override of the timeout base, e.g. `"90s"`.
pub const TIMEOUT_ANNOTATION: &str = "syncgc.io/timeout";
/// The label on an opted-in object that carries the synchronous finalizer, set and removed with
/// the finalizer: the webhook's DELETE registration selects objects by it.
pub const ARMED_LABEL: &str = "syncgc.io/armed";
/// The deadline of a synchronous deletion (RFC 3339), stored so that a restart keeps it.
pub const DEADLINE_ANNOTATION: &str = "syncgc.io/deadline";
/// On a dependent, its wave in its waiting owners' deletion order: an integer, default 0; the
/// highest wave is deleted first, and each wave is gone before the next starts.
pub const DELETION_ORDER_ANNOTATION: &str = "syncgc.io/deletion-order";

/// On any object: `"true"` keeps every cascade from deleting it. Its own DELETE is refused
/// until the annotation is removed, a DELETE whose cascade would reach it is refused, and a
/// collector's DELETE of it is refused while its references to the owners that are going are
/// removed instead.
pub const PROTECTED_ANNOTATION: &str = "syncgc.io/protected";
/// On any object: the most objects its DELETE may delete, by the cascade's model (a
/// non-negative integer); a DELETE that would delete more is refused.
pub const MAX_CASCADE_ANNOTATION: &str = "syncgc.io/max-cascade";
/// The label syncgc keeps on every object whose DELETE a guard may refuse: the protected and
/// limited objects, the owners whose cascade reaches a protected object, the namespaces that
/// hold one, and the finalizer handlers with what they need. The guards' DELETE webhook
/// selects objects by it, so that no other DELETE reaches syncgc.
pub const GUARDED_LABEL: &str = "syncgc.io/guarded";
/// On a workload (Deployment, StatefulSet, DaemonSet, or a bare Pod): the finalizers its Pods
/// remove, comma-separated. While objects in its scope that carry one of them are being
/// deleted, the teardown of the workload's Pods (and of what owns them below the workload) is
/// held.
pub const HANDLES_FINALIZERS_ANNOTATION: &str = "syncgc.io/handles-finalizers";
/// Beside [`HANDLES_FINALIZERS_ANNOTATION`]: `"cluster"` makes the workload's scope the whole
/// cluster; `"namespace"` (the default) its own namespace.
pub const HANDLES_FINALIZERS_SCOPE_ANNOTATION: &str = "syncgc.io/handles-finalizers-scope";

/// On the leader Lease: the mode of the syncgc that holds it (`cooperative`, `standalone`),
/// for `syncgc plan` to predict the collector that acts.
pub const MODE_ANNOTATION: &str = "syncgc.io/mode";
/// The API group syncgc serves through the aggregation layer, and its version.
pub const API_GROUP: &str = "syncgc.io";
pub const API_VERSION: &str = "v1alpha1";
/// `syncgc.io/v1alpha1`.
pub const API_GROUP_VERSION: &str = "syncgc.io/v1alpha1";
/// The apiserver's finalizer for foreground cascading deletion.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// The apiserver's finalizer for orphaning dependents.
pub const ORPHAN_FINALIZER: &str = "orphan";

/// The reasons of the Events syncgc records: a contract too (alerts and
/// `kubectl get events --field-selector reason=…` select on them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// An armed owner waits for its dependents, until its deadline.
    Waiting,
    /// An armed owner was released: its dependents are gone.
    Released,
    /// An armed owner was released by its deadline.
    TimedOut,
    /// A stored deadline out of bounds was replaced.
    DeadlineReplaced,
    /// The deadline could not be stored on the owner.
    DeadlineNotStored,
    /// The release barrier holds an owner the graph shows free.
    Barrier,
    /// `foregroundDeletion` removed after `--timeout-base` held by the release barrier.
    BarrierTimedOut,
    /// A wave of ordered dependents starts.
    Wave,
    /// The deadline passed before the last wave.
    OrderAbandoned,
    /// A dependent's deletion order is not an integer.
    InvalidOrder,
    /// An owner's `syncgc.io/` annotations hold a mistake (the webhook's warnings, recorded
    /// when its deletion starts).
    InvalidAnnotation,
    /// A finalizer handler's hold on its Pods ended by its timeout, objects still holding.
    HandlerTimedOut,
    /// A protected object holds its namespace, being deleted, for a bounded time (on the
    /// namespace).
    ProtectedHoldsNamespace,
    /// The cascade a DELETE started has ended: what it deleted, by kind, and how long it took.
    CascadeEnded,
    /// An ownerReference that cannot reach its owner (upstream's reason).
    OwnerRefInvalidNamespace,
}

impl Reason {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "SyncGCWaiting",
            Self::Released => "SyncGCReleased",
            Self::TimedOut => "SyncGCTimedOut",
            Self::DeadlineReplaced => "SyncGCDeadlineReplaced",
            Self::DeadlineNotStored => "SyncGCDeadlineNotStored",
            Self::Barrier => "SyncGCBarrier",
            Self::BarrierTimedOut => "SyncGCBarrierTimedOut",
            Self::Wave => "SyncGCWave",
            Self::OrderAbandoned => "SyncGCOrderAbandoned",
            Self::InvalidOrder => "SyncGCInvalidOrder",
            Self::InvalidAnnotation => "SyncGCInvalidAnnotation",
            Self::HandlerTimedOut => "SyncGCHandlerTimedOut",
            Self::ProtectedHoldsNamespace => "SyncGCProtectedHoldsNamespace",
            Self::CascadeEnded => "SyncGCCascadeEnded",
            Self::OwnerRefInvalidNamespace => "OwnerRefInvalidNamespace",
        }
    }

    /// The Event's action: syncgc's own work, or the garbage collector's as upstream says it.
    pub const fn action(self) -> &'static str {
        match self {
            Self::OwnerRefInvalidNamespace => "GarbageCollection",
            _ => "SynchronousDeletion",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `NAMESPACE/NAME`, both non-empty, split.
pub fn namespaced_name(text: &str) -> Option<(String, String)> {
    let (namespace, name) = text.split_once('/')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains('/'))
        .then(|| (namespace.to_owned(), name.to_owned()))
}
