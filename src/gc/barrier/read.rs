//! A round's reads: consistent lists of every watched resource in a scope, metadata only,
//! and of the discovery sources, under the barrier's own request budget.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use tokio::time::Instant;

use super::hold::{Hold, Referrer, Round, Scope, serves_objects};
use super::{BUDGET, READS_AT_ONCE, ROUNDS_A_SECOND};
use crate::api::{Cluster, RateLimiter, Target, meta};
use crate::gc::context::Context;
use crate::gc::discovery::{self, Rediscovery, Resource};
use crate::gc::watch;
use crate::graph::{Flags, Reader, Uid};
use crate::metrics::Metrics;

/// What the barrier reads with: its own budget on the collector's client, and read-only
/// views of what the graph builder keeps.
pub struct Reads {
    pub(super) cluster: Cluster,
    /// The barrier's own budget: at least [`BUDGET`], raised to [`ROUNDS_A_SECOND`] rounds of
    /// the largest round read so far.
    pub(super) budget: Arc<RateLimiter>,
    pub(super) graph: Reader,
    pub(super) resources: discovery::ResourcesReader,
    pub(super) rediscovery: Arc<Rediscovery>,
    pub(super) metrics: Metrics,
}

impl Reads {
    /// Reads through the collector's client `cluster`, under a budget of their own.
    /// The reads of the collector over `cx`, with a budget of their own.
    pub fn of(cx: &Context, rediscovery: Arc<Rediscovery>) -> Self {
        let budget = Arc::new(RateLimiter::new(BUDGET.0, BUDGET.1));
        Self {
            cluster: cx.cluster.with_limiter(budget.clone()),
            budget,
            graph: cx.graph.clone(),
            resources: cx.resources.clone(),
            rediscovery,
            metrics: cx.metrics.clone(),
        }
    }

    /// One round: consistent reads of every watched resource in `scope`, and of the discovery
    /// sources.
    pub(super) async fn round(&self, scope: &Scope) -> Round {
        let started = Instant::now();
        self.metrics.barrier_rounds.inc();
        // Discovery as of the round's start: the resources read are those it had taken in.
        let (reads, known) = {
            let resources = self.resources.read();
            let reads: Vec<(Resource, bool, Option<Source>)> = resources
                .served()
                .filter(|(_, r)| r.watched)
                .filter_map(|(_, r)| {
                    let name = discovery::resource_name(&r.api);
                    let source = Source::of(&name);
                    let referrers = scope.covers(r);
                    (referrers || source.is_some()).then(|| (r.clone(), referrers, source))
                })
                .collect();
            let known = Discovered {
                resources: resources
                    .served()
                    .map(|(_, r)| discovery::resource_name(&r.api))
                    .collect(),
                group_versions: resources.group_versions().clone(),
            };
            (reads, known)
        };
        let size = reads.len() as f64;
        self.budget
            .at_least(ROUNDS_A_SECOND * size, (2.0 * size) as u32)
            .await;
        let results: Vec<Result<Findings, Hold>> = futures::stream::iter(reads)
            .map(|(resource, referrers, source)| {
                self.read_one(scope, resource, referrers, source, &known)
            })
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;
        let mut round = Round {
            started,
            references: HashMap::new(),
            unsure: None,
        };
        let mut unknown = Vec::new();
        for result in results {
            match result {
                Ok(found) => {
                    for (uid, referrer) in found.references {
                        round.references.entry(uid).or_default().push(referrer);
                    }
                    unknown.extend(found.unknown);
                }
                Err(hold) => round.unsure = round.unsure.take().or(Some(hold)),
            }
        }
        if round.unsure.is_none() {
            round.unsure = self.undiscovered(unknown).await;
        }
        let kind = if scope.namespace().is_some() {
            "namespace"
        } else {
            "cluster"
        };
        self.metrics
            .barrier_round_duration
            .with_label_values(&[kind])
            .observe(started.elapsed().as_secs_f64());
        tracing::debug!(?scope, references = round.references.len(), unsure = ?round.unsure, "release barrier: read the scope");
        round
    }

    /// Reads `resource` in `scope`: the references to owners the graph does not show alive
    /// (when `referrers`), and, when it is a discovery `source`, the objects discovery does
    /// not know.
    async fn read_one(
        &self,
        scope: &Scope,
        resource: Resource,
        referrers: bool,
        source: Option<Source>,
        known: &Discovered,
    ) -> Result<Findings, Hold> {
        let name = discovery::resource_name(&resource.api);
        let collection = Target::collection(
            &resource.api,
            if referrers { scope.namespace() } else { None },
        );
        let aliases = self.resources.read().aliases().clone();
        let mut found = Findings::default();
        let result = self
            .cluster
            .list_metadata(&collection, |page: Vec<meta::Meta>| {
                let graph = self.graph.read();
                let resources = self.resources.read();
                // Whether `object`'s reference to `uid` names a kind syncgc watches.
                let watched_kind = |object: &meta::Meta, uid: Uid| {
                    object
                        .owner_references
                        .iter()
                        .find(|r| Uid::parse(&r.uid) == uid)
                        .and_then(|r| resources.by_kind(&r.api_version, &r.kind))
                        .is_some_and(|(_, r)| r.watched)
                };
                for object in &page {
                    let Some(observed) = watch::observe(&resource.api, object, &aliases) else {
                        continue;
                    };
                    if let Some(source) = source
                        && !known.knows(source, &observed.name)
                    {
                        found
                            .unknown
                            .push((resource.clone(), source, observed.name.clone()));
                    }
                    if !referrers {
                        continue;
                    }
                    let alive = |uid: Uid| {
                        graph
                            .node(uid)
                            .is_some_and(|n| !n.is(Flags::VIRTUAL) && !n.is(Flags::DELETING))
                    };
                    // An object with a living owner is not the garbage collector's to delete,
                    // so it is no leftover of a tree.
                    let kept = observed.owners.iter().any(|l| alive(l.uid));
                    for link in &observed.owners {
                        if !alive(link.uid) {
                            let dangling = !kept
                                && graph.node(link.uid).is_none_or(|n| n.is(Flags::VIRTUAL))
                                && watched_kind(object, link.uid);
                            found.references.push((
                                link.uid,
                                Referrer {
                                    uid: observed.uid,
                                    resource: name.clone(),
                                    namespace: observed.namespace.clone(),
                                    name: observed.name.clone(),
                                    coordinates: link.coordinates,
                                    blocking: link.block_owner_deletion,
                                    dangling,
                                },
                            ));
                        }
                    }
                }
            })
            .await;
        self.metrics.barrier_reads.inc();
        match result {
            Ok(()) => Ok(found),
            Err(err) => Err(Hold::Unreadable {
                resource: name,
                error: err.to_string(),
            }),
        }
    }

    /// Of the CRDs and APIServices discovery does not know, the first that serves objects
    /// (see [`serves_objects`]): discovery is asked to look again, and it holds the round.
    async fn undiscovered(&self, unknown: Vec<(Resource, Source, String)>) -> Option<Hold> {
        for (resource, source, name) in unknown {
            let target = Target {
                resource: resource.api.clone(),
                namespace: None,
                name: name.clone(),
                uid: String::new(),
            };
            self.metrics.barrier_reads.inc();
            let object = match self.cluster.get(&target).await {
                Ok(Some(object)) => object,
                Ok(None) => continue,
                Err(err) => {
                    return Some(Hold::Unreadable {
                        resource: format!("{} {name}", source.name()),
                        error: err.to_string(),
                    });
                }
            };
            if serves_objects(source.name(), &object.data) {
                self.rediscovery.ask();
                return Some(Hold::Discovery(format!(
                    "{} {name} serves objects and is not discovered yet",
                    resource.api.kind
                )));
            }
        }
        None
    }
}

/// What discovery knows, as of a round's start.
struct Discovered {
    /// Served resources, as `plural.group` (a CRD's name).
    resources: HashSet<String>,
    /// Group versions listed, as `version.group` (an APIService's name).
    group_versions: BTreeSet<String>,
}

impl Discovered {
    fn knows(&self, source: Source, name: &str) -> bool {
        match source {
            Source::Crd => self.resources.contains(name),
            Source::ApiService => self.group_versions.contains(name),
        }
    }
}

/// What the read of one resource found.
#[derive(Debug, Default)]
struct Findings {
    references: Vec<(Uid, Referrer)>,
    /// Objects of a discovery source that discovery does not know, with the source.
    unknown: Vec<(Resource, Source, String)>,
}

/// A resource whose objects say what is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Crd,
    ApiService,
}

impl Source {
    fn of(resource: &str) -> Option<Self> {
        match resource {
            discovery::CRDS => Some(Self::Crd),
            discovery::API_SERVICES => Some(Self::ApiService),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Crd => discovery::CRDS,
            Self::ApiService => discovery::API_SERVICES,
        }
    }
}
