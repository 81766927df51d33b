//! Names that are a contract with users and with Kubernetes.

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

/// The apiserver's finalizer for foreground cascading deletion.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// The apiserver's finalizer for orphaning dependents.
pub const ORPHAN_FINALIZER: &str = "orphan";
