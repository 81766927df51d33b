//! Leader election with a `coordination.k8s.io/v1` Lease, by client-go's rules: every replica
//! serves the webhook and keeps the graph; only the leader's workers act.
//!
//! - Every retry period each replica reads the Lease. The leader writes it again (renews); a
//!   leader that has not renewed within the renew deadline stops leading.
//! - A contender decides that someone else's lease has expired by its own observation, never
//!   by comparing the Lease's `renewTime` with its own clock: it remembers the last record it
//!   read and the local monotonic instant at which that record last changed, and takes the
//!   lease only once the record has stayed the same for the lease's `leaseDurationSeconds`.
//!   Since renew deadline < lease duration, the old leader has stopped by then.
//! - Every write carries the read resourceVersion (a compare-and-swap), so two contenders
//!   never both win.
//!
//! A Lease that cannot be read or written (its namespace missing, access forbidden, ...) makes
//! the readiness condition `leader-election` fail with the reason, logged once per distinct
//! reason, and counted in `syncgc_leader_election_errors_total`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::ObjectMeta;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::api::{ApiError, Cluster, Fence, Verb};
use crate::metrics::{Condition, Metrics, Readiness};
use crate::names::MODE_ANNOTATION;

/// Where the Lease lives when neither the flag nor the pod's own namespace says.
pub const DEFAULT_NAMESPACE: &str = "syncgc-system";
/// The pod's own namespace, as Kubernetes mounts it with the service account's token.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    #[error(
        "--leader-election-renew-deadline ({renew_deadline:?}) must be shorter than \
         --leader-election-lease-duration ({lease_duration:?})"
    )]
    RenewDeadlineNotBelowLeaseDuration {
        renew_deadline: Duration,
        lease_duration: Duration,
    },
    #[error(
        "--leader-election-retry-period ({retry_period:?}) must be more than 0 and shorter than \
         --leader-election-renew-deadline ({renew_deadline:?})"
    )]
    RetryPeriodNotBelowRenewDeadline {
        retry_period: Duration,
        renew_deadline: Duration,
    },
    #[error(
        "the Lease namespace {namespace:?} does not exist (404); create it or set \
         --leader-election-namespace"
    )]
    NamespaceMissing { namespace: String },
    #[error(
        "syncgc may not {verb} Leases in namespace {namespace:?} (403: {message}); grant its \
         service account get, create and update on leases.coordination.k8s.io there, or set \
         --leader-election-namespace"
    )]
    Forbidden {
        verb: Verb,
        namespace: String,
        /// The apiserver's, which names the account refused.
        message: String,
    },
    #[error("the Lease {namespace}/{name} was written by another replica in between (409)")]
    Conflict { namespace: String, name: String },
    #[error(transparent)]
    Call(ApiError),
    #[error("the apiserver did not answer leader election within {0:?}")]
    Timeout(Duration),
    #[error("the Lease was read {0:?} ago, longer than a try may take: not written")]
    Stale(Duration),
}

impl ElectionError {
    /// The `reason` label of `syncgc_leader_election_errors_total`.
    pub fn reason(&self) -> Failure {
        match self {
            Self::NamespaceMissing { .. } => Failure::NamespaceMissing,
            Self::Forbidden { .. } => Failure::Forbidden,
            Self::Conflict { .. } => Failure::Conflict,
            Self::RenewDeadlineNotBelowLeaseDuration { .. }
            | Self::RetryPeriodNotBelowRenewDeadline { .. }
            | Self::Call(_)
            | Self::Timeout(_)
            | Self::Stale(_) => Failure::Other,
        }
    }

    /// Whether trying again may succeed without anyone changing the configuration or the
    /// cluster (the election tries again anyway: people fix clusters).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Conflict { .. } | Self::Timeout(_) | Self::Stale(_) => true,
            Self::Call(err) => err.is_retryable(),
            Self::RenewDeadlineNotBelowLeaseDuration { .. }
            | Self::RetryPeriodNotBelowRenewDeadline { .. }
            | Self::NamespaceMissing { .. }
            | Self::Forbidden { .. } => false,
        }
    }

    /// What a failed call to the apiserver means for leader election.
    fn of_call(err: ApiError, verb: Verb, namespace: &str, name: &str) -> Self {
        match (err.status(), verb) {
            // Creating in a namespace that does not exist is the only way a create finds nothing.
            (Some(404), Verb::Create) => Self::NamespaceMissing {
                namespace: namespace.to_owned(),
            },
            (Some(403), _) => Self::Forbidden {
                verb,
                namespace: namespace.to_owned(),
                message: match &err {
                    ApiError::Call {
                        source: kube::Error::Api(status),
                        ..
                    } => status.message.clone(),
                    _ => String::new(),
                },
            },
            // Created by another replica since we read it, written since, or deleted since.
            (Some(409), _) | (Some(404), Verb::Update) => Self::Conflict {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            },
            _ => Self::Call(err),
        }
    }
}

/// Why leader election failed, as a closed set of label values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    NamespaceMissing,
    Forbidden,
    Conflict,
    Other,
}

impl Failure {
    pub const ALL: [Self; 4] = [
        Self::NamespaceMissing,
        Self::Forbidden,
        Self::Conflict,
        Self::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::NamespaceMissing => "namespace_missing",
            Self::Forbidden => "forbidden",
            Self::Conflict => "conflict",
            Self::Other => "other",
        }
    }
}

/// The three durations of client-go's leader election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long the lease lasts unchanged (as each contender observes it) before it can be
    /// taken over; written into the Lease, rounded up to whole seconds.
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// How long to wait between two tries.
    pub retry_period: Duration,
}

impl Timing {
    /// Checks client-go's rules: retry period < renew deadline < lease duration.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, ElectionError> {
        if renew_deadline >= lease_duration {
            return Err(ElectionError::RenewDeadlineNotBelowLeaseDuration {
                renew_deadline,
                lease_duration,
            });
        }
        if retry_period.is_zero() || retry_period >= renew_deadline {
            return Err(ElectionError::RetryPeriodNotBelowRenewDeadline {
                retry_period,
                renew_deadline,
            });
        }
        Ok(Self {
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }

    /// `leaseDurationSeconds` as written: rounded up, so that contenders never wait less
    /// than the renew deadline.
    fn lease_duration_seconds(&self) -> i32 {
        let seconds =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(seconds.max(1)).unwrap_or(i32::MAX)
    }
}

/// The Lease's namespace: `flag` when given; else the pod's own namespace (`pod_namespace`,
/// from `POD_NAMESPACE`, else `service_account`, the service account's namespace file); else
/// [`DEFAULT_NAMESPACE`]. Returns where it came from too.
pub fn lease_namespace(
    flag: Option<String>,
    pod_namespace: Option<String>,
    service_account: Option<String>,
) -> (String, &'static str) {
    let given =
        |value: Option<String>| value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    if let Some(namespace) = given(flag) {
        (namespace, "--leader-election-namespace")
    } else if let Some(namespace) = given(pod_namespace) {
        (namespace, "POD_NAMESPACE")
    } else if let Some(namespace) = given(service_account) {
        (namespace, SERVICE_ACCOUNT_NAMESPACE_FILE)
    } else {
        (DEFAULT_NAMESPACE.to_owned(), "the default")
    }
}

/// [`lease_namespace`] with this process's environment and files.
pub fn lease_namespace_here(flag: Option<String>) -> (String, &'static str) {
    lease_namespace(
        flag,
        std::env::var("POD_NAMESPACE").ok(),
        std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE).ok(),
    )
}

/// The parts of a Lease that leader election reads. Two reads that differ in any of them are
/// two records: the lease changed in between (client-go compares whole records too).
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRecord {
    /// `None` when nobody holds it (never held, or released).
    pub holder: Option<String>,
    /// `leaseDurationSeconds` as written by its holder.
    pub lease_duration: Duration,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub transitions: i32,
    pub resource_version: Option<String>,
}

impl LeaseRecord {
    /// The record of `lease`; a Lease without `leaseDurationSeconds` is taken to last
    /// `fallback`.
    pub fn of(lease: &Lease, fallback: Duration) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            lease_duration: spec.lease_duration_seconds.map_or(fallback, |s| {
                Duration::from_secs(u64::try_from(s).unwrap_or(0))
            }),
            acquire_time: spec.acquire_time.map(|MicroTime(t)| t),
            renew_time: spec.renew_time.map(|MicroTime(t)| t),
            transitions: spec.lease_transitions.unwrap_or(0),
            resource_version: lease.metadata.resource_version.clone(),
        }
    }
}

/// What this replica last read of the Lease, and the local monotonic instant at which that
/// record last changed.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseSeen {
    pub record: LeaseRecord,
    pub since: Instant,
}

impl LeaseSeen {
    /// `previous` after reading `record` at `now`: the instant moves on only when the record
    /// changed.
    pub fn update(previous: Option<Self>, record: LeaseRecord, now: Instant) -> Self {
        match previous {
            Some(previous) if previous.record == record => previous,
            _ => Self { record, since: now },
        }
    }
}

/// What to do with the Lease, decided without I/O.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// There is none: create it with us as holder.
    Create,
    /// We hold it: renew it.
    Renew,
    /// Nobody holds it, or its holder's record has stayed the same for its lease duration of
    /// our own time: take it over.
    TakeOver { from: Option<String> },
    /// Someone else holds it; it may be taken over after `expires_in` more unless it changes.
    Held {
        holder: String,
        expires_in: Duration,
    },
}

/// Whether `identity` may write the Lease observed as `observed` (`None`: there is none) at
/// the local instant `now`. The Lease's `renewTime` plays no part: clocks of two machines do
/// not agree, and only a change of the record seen on our own clock proves its holder alive.
pub fn claim(observed: Option<&LeaseSeen>, identity: &str, now: Instant) -> Claim {
    let Some(LeaseSeen { record, since }) = observed else {
        return Claim::Create;
    };
    match record.holder.as_deref() {
        None => Claim::TakeOver { from: None },
        Some(holder) if holder == identity => Claim::Renew,
        Some(holder) => {
            let unchanged_for = now.saturating_duration_since(*since);
            match record.lease_duration.checked_sub(unchanged_for) {
                Some(left) if !left.is_zero() => Claim::Held {
                    holder: holder.to_owned(),
                    expires_in: left,
                },
                _ => Claim::TakeOver {
                    from: Some(holder.to_owned()),
                },
            }
        }
    }
}

/// The spec to write for `claim` (not [`Claim::Held`]) over `old`, at the wall-clock time `now`
/// (informational for people: nobody's decision depends on it).
fn written(
    claim: &Claim,
    old: Option<&LeaseSpec>,
    identity: &str,
    timing: &Timing,
    now: Timestamp,
) -> LeaseSpec {
    let old = old.cloned().unwrap_or_default();
    let (acquire_time, transitions) = match claim {
        Claim::Renew => (
            old.acquire_time.or(Some(MicroTime(now))),
            old.lease_transitions.unwrap_or(0),
        ),
        Claim::TakeOver { .. } => (
            Some(MicroTime(now)),
            old.lease_transitions.unwrap_or(0).saturating_add(1),
        ),
        Claim::Create | Claim::Held { .. } => (Some(MicroTime(now)), 0),
    };
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(timing.lease_duration_seconds()),
        acquire_time,
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// Which failures have been logged since leader election last worked, so that each distinct
/// one is logged once (not on every retry), and the recovery once.
#[derive(Debug, Default)]
struct Reported(BTreeSet<String>);

impl Reported {
    /// Whether `reason` is news since leader election last worked.
    fn failed(&mut self, reason: &str) -> bool {
        self.0.insert(reason.to_owned())
    }

    /// Whether leader election had failed since it last worked.
    fn worked(&mut self) -> bool {
        let failed = !self.0.is_empty();
        self.0.clear();
        failed
    }
}

#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub timing: Timing,
    /// The collector's mode (`cooperative`, `standalone`), written on the Lease
    /// ([`MODE_ANNOTATION`]) for `syncgc plan`.
    pub mode: &'static str,
}

impl Election {
    /// Tries for the lease every retry period until `shutdown`, publishing whether this
    /// replica leads (and moving `fence` on to each renewal's start plus the renew deadline)
    /// and keeping the readiness condition `leader-election` true to whether the
    /// Lease can be read and written; on shutdown a leader releases the lease so that another
    /// can take over at once. `cluster` should not be rate-limited with the collector's calls.
    pub async fn run(
        self,
        cluster: Cluster,
        leading: watch::Sender<bool>,
        fence: Fence,
        readiness: Readiness,
        metrics: Metrics,
        shutdown: CancellationToken,
    ) {
        let deadline = self.timing.renew_deadline;
        // Whether this replica leads, to the workers and the seam's fence.
        let lead = |renewed: Option<Instant>| {
            fence.hold_until(renewed.map(|at| at + deadline));
            publish(renewed.is_some(), &self.identity, &leading, &metrics);
        };
        for reason in Failure::ALL {
            metrics
                .leader_election_errors
                .with_label_values(&[reason.as_str()]);
        }
        readiness.clear(Condition::LeaderElection);
        let mut observed: Option<LeaseSeen> = None;
        // When the try that last renewed (or took) the lease started.
        let mut renewed: Option<Instant> = None;
        let mut reported = Reported::default();
        loop {
            self.expire(&mut renewed);
            lead(renewed);
            let started = Instant::now();
            // A leader must notice within its renew deadline that it cannot renew.
            let budget = renewed.map_or(self.timing.renew_deadline, |at| {
                (at + self.timing.renew_deadline).saturating_duration_since(started)
            });
            let outcome = tokio::time::timeout(
                budget,
                self.try_acquire_or_renew(&cluster, &mut observed, started + budget),
            )
            .await
            .unwrap_or(Err(ElectionError::Timeout(budget)));
            match outcome {
                Ok(holds) => {
                    renewed = holds.then_some(started);
                    if reported.worked() {
                        tracing::info!(lease = %self.lease(), "leader election works again");
                    }
                    readiness.clear(Condition::LeaderElection);
                }
                Err(err) => self.failed(&err, &mut reported, &readiness, &metrics),
            }
            self.expire(&mut renewed);
            lead(renewed);
            // The next try after the retry period; a leader wakes at its renew deadline.
            let mut wake = Instant::now() + self.timing.retry_period;
            if let Some(at) = renewed {
                wake = wake.min(at + self.timing.renew_deadline);
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(wake.into()) => {}
            }
        }
        fence.hold_until(None);
        if *leading.borrow() {
            leading.send_replace(false);
            metrics.leader.set(0);
            if let Err(err) = self.release(&cluster).await {
                tracing::warn!(%err, "releasing the leader lease");
            }
        }
    }

    /// Stops leading once the renew deadline has passed since the last renewal.
    fn expire(&self, renewed: &mut Option<Instant>) {
        if renewed.is_some_and(|at| at.elapsed() >= self.timing.renew_deadline) {
            tracing::warn!(
                lease = %self.lease(),
                renew_deadline = ?self.timing.renew_deadline,
                "could not renew the leader lease within the renew deadline; stopping leading"
            );
            *renewed = None;
        }
    }

    fn api(&self, cluster: &Cluster) -> kube::Api<Lease> {
        cluster.namespaced(&self.namespace)
    }

    fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Counts `err`, logs it unless it was logged since leader election last worked, and
    /// fails the readiness condition with it (a conflict is an ordinary race, neither).
    fn failed(
        &self,
        err: &ElectionError,
        reported: &mut Reported,
        readiness: &Readiness,
        metrics: &Metrics,
    ) {
        let reason = err.reason();
        metrics
            .leader_election_errors
            .with_label_values(&[reason.as_str()])
            .inc();
        if reason == Failure::Conflict {
            tracing::debug!(%err, "leader election");
            return;
        }
        let text = err.to_string();
        if reported.failed(&text) {
            match reason {
                Failure::NamespaceMissing | Failure::Forbidden => {
                    tracing::error!(lease = %self.lease(), "leader election: {text}");
                }
                Failure::Conflict | Failure::Other => {
                    tracing::warn!(lease = %self.lease(), "leader election: {text}");
                }
            }
        }
        readiness.fail(Condition::LeaderElection, text);
    }

    /// One try: `Ok(true)` when this replica holds the lease now, having written it. The
    /// write leaves only before `until` (the try's budget) by this replica's monotonic clock,
    /// checked right before it: a replica frozen between the read and the write writes nothing
    /// decided from a read that old.
    async fn try_acquire_or_renew(
        &self,
        cluster: &Cluster,
        observed: &mut Option<LeaseSeen>,
        until: Instant,
    ) -> Result<bool, ElectionError> {
        let existing = cluster
            .get_whole(&self.api(cluster), &self.name)
            .await
            .map_err(|err| self.call_failed(err, Verb::Get))?;
        let now = Instant::now();
        *observed = existing.as_ref().map(|lease| {
            let record = LeaseRecord::of(lease, self.timing.lease_duration);
            LeaseSeen::update(observed.take(), record, now)
        });
        let claim = claim(observed.as_ref(), &self.identity, now);
        match &claim {
            Claim::Held { holder, expires_in } => {
                tracing::trace!(%holder, ?expires_in, "the leader lease is held");
                return Ok(false);
            }
            Claim::TakeOver { from: Some(from) } => {
                tracing::info!(
                    lease = %self.lease(),
                    %from,
                    "taking the leader lease over: unchanged for its whole duration"
                );
            }
            Claim::Create | Claim::Renew | Claim::TakeOver { from: None } => {}
        }
        let spec = written(
            &claim,
            existing.as_ref().and_then(|l| l.spec.as_ref()),
            &self.identity,
            &self.timing,
            Timestamp::now(),
        );
        if Instant::now() >= until {
            return Err(ElectionError::Stale(now.elapsed()));
        }
        let stored = match existing {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        annotations: Some(
                            [(MODE_ANNOTATION.to_owned(), self.mode.to_owned())].into(),
                        ),
                        ..Default::default()
                    },
                    spec: Some(spec),
                };
                cluster
                    .create_whole(&self.api(cluster), &lease)
                    .await
                    .map_err(|err| self.call_failed(err, Verb::Create))?
            }
            Some(mut lease) => {
                // The read resourceVersion makes this a compare-and-swap.
                lease.spec = Some(spec);
                lease
                    .metadata
                    .annotations
                    .get_or_insert_default()
                    .insert(MODE_ANNOTATION.to_owned(), self.mode.to_owned());
                cluster
                    .replace_whole(&self.api(cluster), &lease)
                    .await
                    .map_err(|err| self.call_failed(err, Verb::Update))?
            }
        };
        *observed = Some(LeaseSeen {
            record: LeaseRecord::of(&stored, self.timing.lease_duration),
            since: Instant::now(),
        });
        Ok(true)
    }

    fn call_failed(&self, err: ApiError, verb: Verb) -> ElectionError {
        ElectionError::of_call(err, verb, &self.namespace, &self.name)
    }

    /// Gives the lease up as client-go does: no holder, a one-second duration, so that a
    /// contender takes it at its next try.
    async fn release(&self, cluster: &Cluster) -> Result<(), ElectionError> {
        let Some(mut lease) = cluster
            .get_whole(&self.api(cluster), &self.name)
            .await
            .map_err(|err| self.call_failed(err, Verb::Get))?
        else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(Timestamp::now());
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        cluster
            .replace_whole(&self.api(cluster), &lease)
            .await
            .map(drop)
            .map_err(|err| self.call_failed(err, Verb::Update))
    }
}

/// Tells the workers (and `syncgc_leader`) whether this replica leads.
fn publish(leader: bool, identity: &str, leading: &watch::Sender<bool>, metrics: &Metrics) {
    if leading.send_replace(leader) != leader {
        tracing::info!(%identity, leader, "leadership changed");
    }
    metrics.leader.set(i64::from(leader));
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn record(holder: &str, renewed: Timestamp, version: &str) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.to_owned()).filter(|h| !h.is_empty()),
            lease_duration: 15 * SECOND,
            acquire_time: Some(renewed),
            renew_time: Some(renewed),
            transitions: 2,
            resource_version: Some(version.to_owned()),
        }
    }

    fn timing() -> Timing {
        Timing::new(15 * SECOND, 10 * SECOND, 2 * SECOND).unwrap()
    }

    #[test]
    fn a_missing_lease_is_created_a_free_one_taken_and_ours_renewed() {
        let t0 = Instant::now();
        assert_eq!(claim(None, "me", t0), Claim::Create);
        let free = LeaseSeen::update(None, record("", Timestamp::now(), "1"), t0);
        assert_eq!(claim(Some(&free), "me", t0), Claim::TakeOver { from: None });
        let ours = LeaseSeen::update(None, record("me", Timestamp::now(), "1"), t0);
        assert_eq!(claim(Some(&ours), "me", t0), Claim::Renew);
    }

    #[test]
    fn anothers_lease_expires_only_after_its_duration_of_our_own_time_unchanged() {
        let t0 = Instant::now();
        let renewed = Timestamp::now();
        let seen = LeaseSeen::update(None, record("other", renewed, "1"), t0);
        assert_eq!(
            claim(Some(&seen), "me", t0 + 14 * SECOND),
            Claim::Held {
                holder: "other".into(),
                expires_in: SECOND
            }
        );
        // The same record read again does not restart the count...
        let again = LeaseSeen::update(
            Some(seen.clone()),
            record("other", renewed, "1"),
            t0 + 14 * SECOND,
        );
        assert_eq!(again.since, t0);
        assert_eq!(
            claim(Some(&again), "me", t0 + 15 * SECOND),
            Claim::TakeOver {
                from: Some("other".into())
            }
        );
        // ...but a renewal (any change) does.
        let renewal = LeaseSeen::update(
            Some(seen),
            record("other", renewed + SignedDuration::from_secs(2), "2"),
            t0 + 14 * SECOND,
        );
        assert_eq!(renewal.since, t0 + 14 * SECOND);
        assert_eq!(
            claim(Some(&renewal), "me", t0 + 28 * SECOND),
            Claim::Held {
                holder: "other".into(),
                expires_in: SECOND
            }
        );
    }

    #[test]
    fn the_renew_time_on_the_holders_clock_does_not_matter() {
        let t0 = Instant::now();
        let far_past = Timestamp::now() - SignedDuration::from_hours(24 * 365);
        let far_future = Timestamp::now() + SignedDuration::from_hours(24 * 365);
        for renewed in [far_past, far_future] {
            // Just seen: held for its whole duration, however old or new its renewTime looks.
            let seen = LeaseSeen::update(None, record("other", renewed, "1"), t0);
            assert_eq!(
                claim(Some(&seen), "me", t0),
                Claim::Held {
                    holder: "other".into(),
                    expires_in: 15 * SECOND
                },
                "renewTime {renewed}"
            );
            // Unchanged for its duration: expired, however new its renewTime looks.
            assert_eq!(
                claim(Some(&seen), "me", t0 + 15 * SECOND),
                Claim::TakeOver {
                    from: Some("other".into())
                },
                "renewTime {renewed}"
            );
        }
    }

    #[test]
    fn the_duration_is_the_one_written_in_the_lease() {
        let t0 = Instant::now();
        let mut short = record("other", Timestamp::now(), "1");
        short.lease_duration = 3 * SECOND;
        let seen = LeaseSeen::update(None, short, t0);
        assert_eq!(
            claim(Some(&seen), "me", t0 + 3 * SECOND),
            Claim::TakeOver {
                from: Some("other".into())
            }
        );
        let lease = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some("other".into()),
                lease_duration_seconds: Some(7),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            LeaseRecord::of(&lease, 15 * SECOND).lease_duration,
            7 * SECOND
        );
        let unset = Lease {
            spec: Some(LeaseSpec::default()),
            ..Default::default()
        };
        assert_eq!(
            LeaseRecord::of(&unset, 15 * SECOND).lease_duration,
            15 * SECOND
        );
        assert_eq!(LeaseRecord::of(&unset, 15 * SECOND).holder, None);
    }

    #[test]
    fn what_is_written_keeps_or_counts_transitions() {
        let now = Timestamp::now();
        let earlier = now - SignedDuration::from_secs(60);
        let old = LeaseSpec {
            holder_identity: Some("me".into()),
            acquire_time: Some(MicroTime(earlier)),
            renew_time: Some(MicroTime(earlier)),
            lease_transitions: Some(4),
            lease_duration_seconds: Some(15),
            ..Default::default()
        };
        let renewed = written(&Claim::Renew, Some(&old), "me", &timing(), now);
        assert_eq!(renewed.acquire_time, Some(MicroTime(earlier)));
        assert_eq!(renewed.renew_time, Some(MicroTime(now)));
        assert_eq!(renewed.lease_transitions, Some(4));
        let taken = written(
            &Claim::TakeOver { from: None },
            Some(&old),
            "you",
            &timing(),
            now,
        );
        assert_eq!(taken.holder_identity.as_deref(), Some("you"));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        assert_eq!(taken.lease_transitions, Some(5));
        assert_eq!(taken.lease_duration_seconds, Some(15));
        let created = written(&Claim::Create, None, "me", &timing(), now);
        assert_eq!(created.lease_transitions, Some(0));
    }

    #[test]
    fn timing_follows_client_gos_rules() {
        assert!(Timing::new(15 * SECOND, 10 * SECOND, 2 * SECOND).is_ok());
        let err = Timing::new(15 * SECOND, 15 * SECOND, 2 * SECOND).unwrap_err();
        assert!(
            err.to_string()
                .contains("--leader-election-renew-deadline (15s) must be shorter"),
            "{err}"
        );
        let err = Timing::new(15 * SECOND, 10 * SECOND, 10 * SECOND).unwrap_err();
        assert!(
            err.to_string()
                .contains("--leader-election-retry-period (10s)"),
            "{err}"
        );
        assert!(Timing::new(15 * SECOND, 10 * SECOND, Duration::ZERO).is_err());
        // A fraction of a second is written rounded up: contenders never wait less.
        let t = Timing::new(Duration::from_millis(2500), 2 * SECOND, SECOND / 2).unwrap();
        assert_eq!(t.lease_duration_seconds(), 3);
    }

    fn api_error(code: u16) -> ApiError {
        ApiError::Call {
            verb: Verb::Get,
            target: "Lease ns/syncgc".into(),
            source: kube::Error::Api(
                kube::core::Status {
                    code,
                    message: format!("the apiserver's {code}"),
                    ..Default::default()
                }
                .boxed(),
            ),
        }
    }

    #[test]
    fn failed_calls_say_what_to_do() {
        let err = ElectionError::of_call(api_error(404), Verb::Create, "syncgc-system", "syncgc");
        assert_eq!(err.reason(), Failure::NamespaceMissing);
        assert_eq!(
            err.to_string(),
            "the Lease namespace \"syncgc-system\" does not exist (404); create it or set \
             --leader-election-namespace"
        );
        // docs/observability.md shows it as /readyz names it.
        assert_eq!(
            crate::report::samples::line("docs/observability.md", "leader-election: "),
            format!("{}: {err}", crate::metrics::Condition::LeaderElection)
        );
        let err = ElectionError::of_call(api_error(403), Verb::Get, "team-a", "syncgc");
        assert_eq!(err.reason(), Failure::Forbidden);
        assert!(
            err.to_string().starts_with(
                "syncgc may not get Leases in namespace \"team-a\" (403: the apiserver's 403); \
                 grant its service account get, create and update"
            ),
            "{err}"
        );
        for (code, verb) in [
            (409, Verb::Update),
            (409, Verb::Create),
            (404, Verb::Update),
        ] {
            let err = ElectionError::of_call(api_error(code), verb, "ns", "syncgc");
            assert_eq!(err.reason(), Failure::Conflict, "{code} on {verb}");
        }
        let err = ElectionError::of_call(api_error(500), Verb::Get, "ns", "syncgc");
        assert_eq!(err.reason(), Failure::Other);
    }

    #[test]
    fn each_failure_is_reported_once_until_election_works_again() {
        let mut reported = Reported::default();
        assert!(!reported.worked());
        assert!(reported.failed("a"));
        assert!(!reported.failed("a"));
        assert!(reported.failed("b"));
        assert!(!reported.failed("a"));
        assert!(reported.worked());
        assert!(!reported.worked());
        assert!(reported.failed("a"));
    }

    #[test]
    fn the_lease_namespace_is_the_flags_else_the_pods_own_else_the_default() {
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(
            lease_namespace(some("flag"), some("pod"), some("sa")).0,
            "flag"
        );
        assert_eq!(lease_namespace(None, some("pod"), some("sa")).0, "pod");
        assert_eq!(lease_namespace(None, some(""), some("sa\n")).0, "sa");
        assert_eq!(lease_namespace(None, None, None).0, "syncgc-system");
    }
}
