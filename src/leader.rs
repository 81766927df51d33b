//! Leader election with a `coordination.k8s.io/v1` Lease: every replica serves the webhook and
//! keeps the graph; only the leader's workers act. A leader that cannot renew within the lease
//! duration stops leading; a lease not renewed within its duration can be taken over.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
}

/// What a look at the lease found, decided without I/O.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Ours, or free: write it with us as holder.
    Take { transitions: i32, acquired: bool },
    /// Someone else holds it, and renewed it in time.
    Held,
}

/// Whether `identity` may take `spec` at `now`.
pub fn claim(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> Claim {
    let Some(spec) = spec else {
        return Claim::Take {
            transitions: 0,
            acquired: true,
        };
    };
    let transitions = spec.lease_transitions.unwrap_or(0);
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
    if holder == Some(identity) {
        return Claim::Take {
            transitions,
            acquired: false,
        };
    }
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    let expired = match &spec.renew_time {
        Some(MicroTime(renewed)) => renewed
            .checked_add(duration)
            .is_ok_and(|expiry| expiry < now),
        None => true,
    };
    if holder.is_none() || expired {
        Claim::Take {
            transitions: transitions + 1,
            acquired: true,
        }
    } else {
        Claim::Held
    }
}

impl Election {
    /// Tries for the lease until `shutdown`, publishing whether this replica leads; on
    /// shutdown a leader gives the lease up so that another can take over at once.
    pub async fn run(
        self,
        client: Client,
        leading: watch::Sender<bool>,
        metrics: Metrics,
        shutdown: CancellationToken,
    ) {
        let leases: Api<Lease> = Api::namespaced(client, &self.namespace);
        let retry = (self.lease_duration / 5).max(Duration::from_millis(200));
        let mut last_renewal: Option<tokio::time::Instant> = None;
        loop {
            match self.try_lead(&leases).await {
                Ok(true) => last_renewal = Some(tokio::time::Instant::now()),
                Ok(false) => last_renewal = None,
                Err(err) => tracing::warn!(%err, lease = %self.name, "renewing the leader lease"),
            }
            let leader = last_renewal.is_some_and(|at| at.elapsed() < self.lease_duration);
            if leading.send_replace(leader) != leader {
                tracing::info!(identity = %self.identity, leader, "leadership changed");
            }
            metrics.leader.set(i64::from(leader));
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(retry) => {}
            }
        }
        if *leading.borrow() {
            leading.send_replace(false);
            metrics.leader.set(0);
            if let Err(err) = self.give_up(&leases).await {
                tracing::warn!(%err, "giving the leader lease up");
            }
        }
    }

    /// One round: `Ok(true)` when this replica holds the lease now.
    async fn try_lead(&self, leases: &Api<Lease>) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let existing = leases.get_opt(&self.name).await?;
        let Claim::Take {
            transitions,
            acquired,
        } = claim(
            existing.as_ref().and_then(|l| l.spec.as_ref()),
            &self.identity,
            now,
        )
        else {
            return Ok(false);
        };
        let old_spec = existing
            .as_ref()
            .and_then(|l| l.spec.clone())
            .unwrap_or_default();
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: if acquired {
                Some(MicroTime(now))
            } else {
                old_spec.acquire_time
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        };
        let written = match existing {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(spec),
                };
                leases.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                // The read resourceVersion makes this a compare-and-swap.
                lease.spec = Some(spec);
                leases
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(err) => Err(err),
        }
    }

    async fn give_up(&self, leases: &Api<Lease>) -> Result<(), kube::Error> {
        let Some(mut lease) = leases.get_opt(&self.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        leases
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, renewed_secs_ago: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(duration),
            renew_time: Some(MicroTime(
                Timestamp::now() - SignedDuration::from_secs(renewed_secs_ago),
            )),
            lease_transitions: Some(2),
            ..Default::default()
        }
    }

    #[test]
    fn a_missing_or_free_lease_is_taken() {
        assert_eq!(
            claim(None, "me", Timestamp::now()),
            Claim::Take {
                transitions: 0,
                acquired: true
            }
        );
        let mut free = spec("", 0, 15);
        free.holder_identity = None;
        assert_eq!(
            claim(Some(&free), "me", Timestamp::now()),
            Claim::Take {
                transitions: 3,
                acquired: true
            }
        );
    }

    #[test]
    fn our_lease_is_renewed_and_anothers_respected_until_it_expires() {
        let now = Timestamp::now();
        assert_eq!(
            claim(Some(&spec("me", 5, 15)), "me", now),
            Claim::Take {
                transitions: 2,
                acquired: false
            }
        );
        assert_eq!(claim(Some(&spec("other", 5, 15)), "me", now), Claim::Held);
        assert_eq!(
            claim(Some(&spec("other", 20, 15)), "me", now),
            Claim::Take {
                transitions: 3,
                acquired: true
            }
        );
    }
}
