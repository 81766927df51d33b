//! What holds an owner at the barrier, decided from a round's findings: the scope a round
//! reads ([`Scope`]), what it found ([`Round`], [`Referrer`]), the check of one owner against
//! it ([`check`]) and why it holds ([`Hold`]); how soon a held owner is looked at again.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::gc::discovery::{self, Resource};
use crate::graph::{Coordinates, Uid};

/// How soon an owner held by the barrier is looked at again, at first and at the most.
const RECHECK: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(10));

/// Where the objects that may refer to an owner live.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    Namespace(String),
    Cluster,
}

impl Scope {
    pub fn of(namespace: Option<&str>) -> Self {
        namespace.map_or(Self::Cluster, |ns| Self::Namespace(ns.to_owned()))
    }

    pub(super) fn namespace(&self) -> Option<&str> {
        match self {
            Self::Namespace(ns) => Some(ns),
            Self::Cluster => None,
        }
    }

    /// Whether objects of `resource` may refer to an owner in this scope (a cluster-scoped
    /// object cannot have a namespaced owner).
    pub(super) fn covers(&self, resource: &Resource) -> bool {
        *self == Self::Cluster || resource.namespaced
    }
}

/// How long after a replica begins to lead the one before may still act (longer than a
/// lease).
pub const HANDOVER: Duration = Duration::from_secs(20);

/// How long an inherited owner waits for an object whose owner is gone ([`Hold::Orphan`]): the
/// garbage collector deletes such objects within seconds, so one that stays longer is taken
/// for no leftover of the owner's tree (it may be one the collector does not see yet, and an
/// unrelated one must not hold every inherited owner of its namespace until its deadline).
pub const ORPHAN_WAIT: Duration = Duration::from_secs(30);

/// Why the barrier holds an owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// A CustomResourceDefinition or APIService serves resources discovery has not found.
    Discovery(String),
    /// A resource in the owner's scope could not be read.
    Unreadable { resource: String, error: String },
    /// An object refers to the owner, or to a dependent deleted on its behalf.
    Dependent {
        resource: String,
        namespace: Option<String>,
        name: String,
    },
    /// An owner this replica did not see deleted from the start (see [`WaitingOwner::inherited`]):
    /// an object in its scope refers to an owner that is gone, which may have been a
    /// dependent deleted on its behalf before.
    Orphan {
        resource: String,
        namespace: Option<String>,
        name: String,
    },
}

impl Hold {
    /// The reason, for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Discovery(_) => "discovery",
            Self::Unreadable { .. } => "unreadable",
            Self::Dependent { .. } => "dependent",
            Self::Orphan { .. } => "orphan",
        }
    }
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Discovery(what) => write!(f, "discovery to catch up: {what}"),
            Self::Unreadable { resource, error } => {
                write!(f, "a read of {resource} to succeed ({error})")
            }
            Self::Dependent {
                resource,
                namespace,
                name,
            } => write!(
                f,
                "{resource} {} to go: a fresh read shows it still refers to the owner's tree",
                at(namespace.as_deref(), name)
            ),
            Self::Orphan {
                resource,
                namespace,
                name,
            } => write!(
                f,
                "{resource} {} to go: it refers to an owner that is gone, perhaps a dependent \
                 deleted on this owner's behalf before syncgc restarted or another replica took \
                 over",
                at(namespace.as_deref(), name)
            ),
        }
    }
}

fn at(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// An object that refers to an owner the graph does not show alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrer {
    pub uid: Uid,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: String,
    /// What its reference names.
    pub coordinates: Coordinates,
    pub blocking: bool,
    /// The owner it refers to is gone (of a kind syncgc watches, and not in the graph), and
    /// no other owner of it lives: the garbage collector deletes it.
    pub dangling: bool,
}

/// What one round of consistent reads of a scope found.
#[derive(Debug)]
pub struct Round {
    pub(super) started: Instant,
    /// The references to owners that the graph shows gone, unknown or being deleted (the only
    /// ones a waiting owner's check can need), by the owner's uid.
    pub(super) references: HashMap<Uid, Vec<Referrer>>,
    /// What keeps the round from vouching for anything.
    pub(super) unsure: Option<Hold>,
}

/// An owner at the barrier, as the check needs it.
#[derive(Debug, Clone, Copy)]
pub struct WaitingOwner<'a> {
    pub uid: Uid,
    pub coordinates: Coordinates,
    pub namespace: Option<&'a str>,
    /// Only references with `blockOwnerDeletion` hold it (foreground deletion).
    pub blocking_only: bool,
    /// Deleted before this replica began to lead (or within a lease of it): dependents may
    /// have been deleted on its behalf by a process whose record of them is lost, so any
    /// object in its scope that refers to an owner that is gone holds it.
    pub inherited: bool,
}

/// Whether `round` lets `owner`, whose tree (dependents deleted on its behalf, transitively)
/// is `tree`, go: the first reason it does not.
pub fn check(round: &Round, owner: WaitingOwner<'_>, tree: &HashSet<Uid>) -> Option<Hold> {
    if let Some(unsure) = &round.unsure {
        return Some(unsure.clone());
    }
    let holding = |referrer: &Referrer| Hold::Dependent {
        resource: referrer.resource.clone(),
        namespace: referrer.namespace.clone(),
        name: referrer.name.clone(),
    };
    let own = round.references.get(&owner.uid).into_iter().flatten();
    if let Some(referrer) = own
        .filter(|r| r.coordinates == owner.coordinates)
        .filter(|r| owner.namespace.is_none() || r.namespace.as_deref() == owner.namespace)
        .find(|r| r.blocking || !owner.blocking_only)
    {
        return Some(holding(referrer));
    }
    // References between members of the tree (a cycle) are the graph's matter.
    if let Some(referrer) = tree
        .iter()
        .filter(|uid| **uid != owner.uid)
        .flat_map(|uid| round.references.get(uid).into_iter().flatten())
        .find(|r| !tree.contains(&r.uid))
    {
        return Some(holding(referrer));
    }
    if !owner.inherited {
        return None;
    }
    round
        .references
        .values()
        .flatten()
        .filter(|r| r.dangling && (r.blocking || !owner.blocking_only))
        .find(|r| owner.namespace.is_none() || r.namespace.as_deref() == owner.namespace)
        .map(|r| Hold::Orphan {
            resource: r.resource.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        })
}

/// How soon an owner the barrier has held for `held_for` is looked at again: within a second
/// at first, then less and less often, up to ten seconds, while the hold lasts. Each look
/// costs a round; what ends a hold (a watch that recovers, discovery that catches up, a
/// dependent the graph comes to see) has the owner looked at at once, and its deadline at the
/// latest.
pub fn recheck(held_for: Duration) -> Duration {
    (held_for / 4).clamp(RECHECK.0, RECHECK.1)
}

/// Whether the CustomResourceDefinition or APIService `object` (of the discovery source
/// `source`) serves objects: a CRD that is Established with a served version, an APIService
/// that is Available. One that serves nothing cannot hide a dependent.
pub fn serves_objects(source: &str, object: &serde_json::Value) -> bool {
    let condition = |kind: &str| {
        object["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == kind && c["status"] == "True")
    };
    if source == discovery::API_SERVICES {
        return condition("Available");
    }
    let versions = object["spec"]["versions"].as_array();
    let served = match versions {
        Some(versions) if !versions.is_empty() => versions.iter().any(|v| v["served"] == true),
        // apiextensions.k8s.io/v1beta1 without a list of versions serves `spec.version`.
        _ => object["spec"]["version"].is_string(),
    };
    condition("Established") && served
}
