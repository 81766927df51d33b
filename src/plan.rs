//! `syncgc plan KIND/NAME`: before anything is deleted, what a DELETE of the object would take
//! down, as the garbage collector would run it. The metadata of the object's scope (its
//! namespace; every namespace for a cluster-scoped object) is listed through the project's
//! Kubernetes seam into a graph, the owners of its tree found elsewhere are read one by one,
//! and the DELETE is run on that graph by the collectors' own rules ([`crate::gc::cascade`]):
//! syncgc's, and beside it (cooperative mode, read from the running syncgc's leader Lease)
//! Kubernetes' collector's. The report puts every object the DELETE touches in one list: what
//! would be deleted (in which wave, with which propagation, by which collector), orphaned,
//! kept (by which owner, or behind which wave of a deletion order), and what would stay being
//! deleted (held by which finalizer, removed by whom, waiting for what); which resources
//! could not be listed (the plan is then incomplete), the timeout syncgc would fix, and how
//! long the requests would take at the collector's rate.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use clap::{Args, ValueEnum};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use serde::{Deserialize, Serialize};

use crate::api::Propagation;
use crate::api::meta::Meta;
use crate::gc::cascade::{self, Fate, FinalizerHold, Outcome};
use crate::gc::config::CollectorArgs;
use crate::gc::decide::ActedBy;
use crate::gc::discovery::Resources;
use crate::gc::snapshot::{Named, Snapshot, Unlisted};
use crate::graph::{Mode, Uid};
use crate::names::{MODE_ANNOTATION, PROPAGATION_ANNOTATION, SYNCHRONOUS_FINALIZER};
use crate::report::{Finalizer, Object, Output, Remover};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The object, as KIND/NAME (KIND: kind, plural or short name, optionally .group).
    #[arg(value_name = "KIND/NAME")]
    pub object: String,
    /// Its namespace; the kubeconfig's by default.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// The propagation of the DELETE; by default the object's `syncgc.io/propagation`, else
    /// background (as `kubectl delete`).
    #[arg(long, value_enum)]
    pub cascade: Option<CascadeFlag>,
    /// The collector that acts beside syncgc's: by default the running syncgc's mode, from
    /// the `syncgc.io/mode` of its leader Lease (cooperative when there is none).
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// The namespace of syncgc's leader Lease.
    #[arg(long, default_value = crate::leader::DEFAULT_NAMESPACE)]
    pub syncgc_namespace: String,
    /// The name of syncgc's leader Lease.
    #[arg(long, default_value = "syncgc")]
    pub leader_election_lease: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    pub output: Output,
    #[command(flatten)]
    pub access: crate::api::Access,
    /// The timeouts and rate syncgc runs with (for the timeout it would fix and the estimate).
    #[command(flatten)]
    pub collector: CollectorArgs,
}

/// `--cascade`, as `kubectl delete` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CascadeFlag {
    Background,
    Foreground,
    Orphan,
}

impl From<CascadeFlag> for Propagation {
    fn from(cascade: CascadeFlag) -> Self {
        match cascade {
            CascadeFlag::Background => Self::Background,
            CascadeFlag::Foreground => Self::Foreground,
            CascadeFlag::Orphan => Self::Orphan,
        }
    }
}

/// How long a wave takes besides its requests: the watch event that says an object is gone,
/// and the worker's look (measured: tens of milliseconds on a local control plane).
const WAVE_LATENCY: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Deleted {
    #[serde(flatten)]
    pub object: Object,
    /// 1 for the first DELETEs after the object's own.
    pub wave: usize,
    /// The propagation its DELETE is sent with.
    pub propagation: Propagation,
    pub deleted_by: DeletedBy,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    #[serde(flatten)]
    pub object: Object,
    /// The owners it lives on with.
    pub kept_by: Vec<Object>,
    /// Its owner deletes its dependents in order, and this wave of that order (a
    /// `syncgc.io/deletion-order` value) never ends, so its own never comes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by_wave: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    #[serde(flatten)]
    pub object: Object,
    /// Its DELETE's wave and propagation; none when it was being deleted before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagation: Option<Propagation>,
    pub finalizers: Vec<Finalizer>,
}

/// The collector (or controller) that sends a DELETE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeletedBy {
    #[serde(rename = "syncgc")]
    Syncgc,
    #[serde(rename = "kubernetes")]
    Kubernetes,
    #[serde(rename = "namespace-controller")]
    NamespaceController,
}

impl DeletedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Syncgc => "syncgc",
            Self::Kubernetes => "kubernetes",
            Self::NamespaceController => "namespace-controller",
        }
    }
}

impl From<ActedBy> for DeletedBy {
    fn from(by: ActedBy) -> Self {
        match by {
            ActedBy::Syncgc => Self::Syncgc,
            ActedBy::Kubernetes => Self::Kubernetes,
        }
    }
}

/// Where the propagation comes from: `--cascade`, the object's `syncgc.io/propagation`, or
/// `kubectl delete`'s default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PropagationFrom {
    #[serde(rename = "--cascade")]
    Flag,
    #[serde(rename = "annotation")]
    Annotation,
    #[serde(rename = "default")]
    Default,
    /// The `propagationPolicy` of a `DeletionPlan`'s spec.
    #[serde(rename = "spec")]
    Spec,
}

impl PropagationFrom {
    fn says(self) -> &'static str {
        match self {
            Self::Flag => "--cascade",
            Self::Spec => "the plan's propagationPolicy",
            Self::Annotation => "its syncgc.io/propagation",
            Self::Default => "kubectl delete's default",
        }
    }
}

/// Where the mode comes from: `--mode`, the running syncgc's Lease, or the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModeFrom {
    #[serde(rename = "--mode")]
    Flag,
    #[serde(rename = "lease")]
    Lease,
    #[serde(rename = "default")]
    Default,
    /// The syncgc that answered the plan through its API.
    #[serde(rename = "server")]
    Server,
}

impl ModeFrom {
    fn says(self) -> &'static str {
        match self {
            Self::Flag => "--mode",
            Self::Lease => "the running syncgc's mode",
            Self::Server => "the mode of the syncgc that made the plan",
            Self::Default => "no running syncgc found: cooperative",
        }
    }
}

/// A finalizer nothing would remove, and the objects that carry it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Unhandled {
    pub finalizer: String,
    pub objects: Vec<Object>,
}

/// A finalizer handler's hold on a namespace's deletion: what syncgc keeps while objects
/// carrying its finalizers are being deleted, and for how long at most.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HandlerHold {
    pub handler: Object,
    pub finalizers: Vec<String>,
    /// Objects of the namespace carrying them.
    pub objects: usize,
    /// What is kept: the handler and what is below it (its ReplicaSets, Pods), and what it
    /// needs to act (its account, token, bindings, roles, configuration, Services), as `Kind
    /// namespace/name`.
    pub keeps: Vec<String>,
    /// The most the hold lasts (seconds), from the first object's deletion.
    pub seconds: f64,
}

/// The plan, as `-o json` prints it (a stable format: see docs/commands.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub object: Object,
    pub propagation: Propagation,
    pub propagation_from: PropagationFrom,
    /// The mode predicted: `cooperative` (Kubernetes' collector beside syncgc) or
    /// `standalone`.
    pub mode: Mode,
    pub mode_from: ModeFrom,
    /// Armed: the DELETE returns only once the tree is gone, or the timeout passes.
    pub synchronous: bool,
    /// The object is gone at the end (not held by a finalizer of another controller).
    pub goes: bool,
    /// What holds the object when it stays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<Finalizer>,
    /// The timeout syncgc would fix, armed only (seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<f64>,
    pub waves: usize,
    /// DELETEs and patches the garbage collector sends.
    pub requests: usize,
    /// How long the requests and waves take at the collector's rate (seconds), without what
    /// waits on finalizers of others.
    pub estimate_seconds: f64,
    /// Every resource of the scope was listed: nothing in `unlisted`.
    pub complete: bool,
    /// Objects of the tree with an owner of a kind that could not be listed (or of an API
    /// group whose discovery failed): the plan keeps them, not knowing whether that owner
    /// lives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unjudged: Vec<Object>,
    /// For a Namespace: the finalizers of objects in it that nothing would remove — neither
    /// Kubernetes' own controllers nor a workload that says it handles them
    /// (`syncgc.io/handles-finalizers`, in the namespace or cluster-wide).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhandled_finalizers: Vec<Unhandled>,
    /// For a Namespace: the finalizer handlers whose teardown syncgc holds, and what it keeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<HandlerHold>,
    pub delete: Vec<Deleted>,
    pub orphan: Vec<Object>,
    pub keep: Vec<Kept>,
    pub wait: Vec<Waiting>,
    pub unlisted: Vec<Unlisted>,
    /// Objects of kinds or namespaces the reader may not read (a plan made by syncgc's API):
    /// counted, not named.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub withheld: usize,
    /// Entries left out of `delete`, `orphan`, `keep` and `wait` beyond what one answer of
    /// syncgc's API holds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `syncgc.io/v1alpha1` `DeletionPlan` (of a namespaced object, in its namespace) and
/// `ClusterDeletionPlan` (of a cluster-scoped one): a review, answered when it is created and
/// stored nowhere, of what a DELETE of `spec.target` would do, made by syncgc on its graph
/// ([`crate::aggregated`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeletionPlan {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    pub spec: PlanSpec,
    /// What the DELETE would do, when syncgc answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Plan>,
}

impl DeletionPlan {
    /// The kind of a plan of an object of `namespace` (`None`: a cluster-scoped object).
    pub fn kind_in(namespace: Option<&str>) -> &'static str {
        match namespace {
            Some(_) => "DeletionPlan",
            None => "ClusterDeletionPlan",
        }
    }

    /// Where plans of objects of `namespace` are created.
    pub fn path_in(namespace: Option<&str>) -> String {
        let base = format!("/apis/{}", crate::names::API_GROUP_VERSION);
        match namespace {
            Some(ns) => format!("{base}/namespaces/{ns}/deletionplans"),
            None => format!("{base}/clusterdeletionplans"),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanSpec {
    pub target: PlanTarget,
    /// `Background`, `Foreground` or `Orphan`, as a DELETE's options name it; by default the
    /// object's `syncgc.io/propagation`, else `Background`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagation_policy: Option<String>,
}

/// The object a plan is of: its namespace is the plan's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanTarget {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl PlanArgs {
    pub async fn run(&self) -> anyhow::Result<Plan> {
        self.collector.validate()?;
        // One request at a time: no client-side limit on top (with 300 kinds served, one at
        // 50 a second took 5 s).
        let cluster = self.access.cluster(None, Duration::from_secs(30)).await?;
        let named = Named::find(&cluster, &self.object, self.namespace.as_deref()).await?;
        if let Some(namespace) = named.scope() {
            not_being_deleted(&cluster, namespace).await?;
        }
        // syncgc's API makes the plan on its graph, unless the plan is of a mode it does not
        // run or of a Namespace (which reads every object in it).
        let namespace =
            named.resource.api.group.is_empty() && named.resource.api.kind == "Namespace";
        if self.mode.is_none()
            && !namespace
            && let Some(plan) = self.served(&cluster, &named).await?
        {
            return Ok(plan);
        }
        let (mode, mode_from) = match self.mode {
            Some(mode) => (mode, ModeFrom::Flag),
            None => match self.running_mode(&cluster).await {
                Some(mode) => (mode, ModeFrom::Lease),
                None => (Mode::Cooperative, ModeFrom::Default),
            },
        };
        let resources = &named.table;
        let mut read = Snapshot::read(&cluster, resources, named.scope()).await;
        read.unlisted.extend(unlisted_groups(resources));
        let uid = read.uid_of(&named)?;
        let meta = read.objects[&uid].1.clone();
        read.read_owners(&cluster, resources, uid).await;
        let (propagation, from) = match self.cascade {
            Some(cascade) => (cascade.into(), PropagationFrom::Flag),
            None => match meta
                .annotations
                .get(PROPAGATION_ANNOTATION)
                .and_then(Propagation::from_annotation)
            {
                Some(propagation) => (propagation, PropagationFrom::Annotation),
                None => (Propagation::Background, PropagationFrom::Default),
            },
        };
        let dependents = read.graph.transitive_dependents(uid);
        let synchronous = meta.finalizers.iter().any(|f| f == SYNCHRONOUS_FINALIZER);
        let timeout = synchronous.then(|| {
            self.collector.timeouts().for_owner(
                dependents,
                meta.annotations.get(crate::names::TIMEOUT_ANNOTATION),
            )
        });
        let outcome = cascade::run(&mut read.graph, &read.facts, mode, uid, propagation);
        let mut plan = plan(
            &|uid| entry(resources, &read, uid),
            Scope {
                unlisted: read.unlisted.clone(),
                unjudged: &read.unjudged,
            },
            uid,
            (propagation, from),
            (mode, mode_from),
            timeout,
            &outcome,
            &self.collector,
        );
        if named.resource.api.group.is_empty() && named.resource.api.kind == "Namespace" {
            namespace_contents(&mut plan, resources, &read, &named.name);
            holds(&mut plan, resources, &read, self.collector.timeouts());
            for hold in &mut plan.holds {
                let uid = Uid::parse(&hold.handler.uid);
                let Some(target) = read.objects.get(&uid).and_then(|(id, meta)| {
                    Some(crate::api::Target {
                        resource: resources.get(*id)?.api.clone(),
                        namespace: meta.namespace.clone(),
                        name: meta.name.clone(),
                        uid: hold.handler.uid.clone(),
                    })
                }) else {
                    continue;
                };
                match crate::gc::needs::resolve(&cluster, &target).await {
                    Ok(needs) => hold.keeps.extend(needs.into_iter().map(|n| n.described)),
                    Err(err) => hold
                        .keeps
                        .push(format!("(what it needs could not be read: {err})")),
                }
            }
        }
        Ok(plan)
    }

    /// The plan syncgc's API makes of `named` ([`crate::aggregated`]); `None` where it is not
    /// served to this user (no APIService, none available, no right to create plans): the
    /// plan is then made here.
    async fn served(
        &self,
        cluster: &crate::api::Cluster,
        named: &Named,
    ) -> anyhow::Result<Option<Plan>> {
        let api = &named.resource.api;
        let review = DeletionPlan {
            api_version: crate::names::API_GROUP_VERSION.to_owned(),
            kind: DeletionPlan::kind_in(named.scope()).to_owned(),
            metadata: Default::default(),
            spec: PlanSpec {
                target: PlanTarget {
                    api_version: api.api_version.clone(),
                    kind: api.kind.clone(),
                    name: named.name.clone(),
                },
                propagation_policy: self
                    .cascade
                    .map(|c| Propagation::from(c).policy().to_owned()),
            },
            status: None,
        };
        let request = http::Request::post(DeletionPlan::path_in(named.scope()))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&review)?)?;
        match cluster.streams().request::<DeletionPlan>(request).await {
            Ok(DeletionPlan {
                status: Some(mut plan),
                ..
            }) => {
                if self.cascade.is_some() {
                    plan.propagation_from = PropagationFrom::Flag;
                }
                Ok(Some(plan))
            }
            Ok(_) => anyhow::bail!("syncgc's API answered a plan without its status"),
            Err(kube::Error::Api(status)) if served_elsewhere(&status) => {
                tracing::debug!(%status.message, "syncgc's API makes no plan here; making it as a client");
                Ok(None)
            }
            Err(kube::Error::Api(status)) => anyhow::bail!("{}", status.message),
            Err(err) => Err(anyhow::Error::new(err).context("asking syncgc's API for the plan")),
        }
    }

    /// The mode of the running syncgc, from its leader Lease.
    async fn running_mode(&self, cluster: &crate::api::Cluster) -> Option<Mode> {
        let leases = cluster.namespaced::<Lease>(&self.syncgc_namespace);
        let lease = cluster
            .get_whole(&leases, &self.leader_election_lease)
            .await
            .ok()??;
        let mode = lease.metadata.annotations?.remove(MODE_ANNOTATION)?;
        ValueEnum::from_str(&mode, false).ok()
    }
}

/// The API groups whose discovery failed, which a plan cannot see into; but syncgc's own
/// (unavailable while no replica is ready), which serves nothing that can be deleted.
pub fn unlisted_groups(resources: &Resources) -> Vec<Unlisted> {
    resources
        .failed_groups()
        .iter()
        .filter(|group| *group != crate::names::API_GROUP)
        .map(|group| Unlisted {
            resource: format!("the API group {group:?}"),
            error: "its discovery failed".to_owned(),
        })
        .collect()
}

/// Whether the apiserver's refusal says syncgc's API does not make this plan (rather than
/// what syncgc said of the object): not served, unavailable, not granted to the user, or a
/// tree too big to model there.
fn served_elsewhere(status: &kube::core::Status) -> bool {
    match status.code {
        404 => !crate::api::names_missing_object(status),
        403 => status.message.contains("cannot create resource"),
        413 | 503 => true,
        _ => false,
    }
}

/// A plan of an object in a namespace being deleted would be a plan of nothing: the namespace
/// controller deletes everything in it.
async fn not_being_deleted(cluster: &crate::api::Cluster, namespace: &str) -> anyhow::Result<()> {
    let namespaces = cluster.all::<Namespace>();
    match cluster.get_whole(&namespaces, namespace).await? {
        None => anyhow::bail!("the namespace {namespace} does not exist"),
        Some(ns) if ns.metadata.deletion_timestamp.is_some() => anyhow::bail!(
            "the namespace {namespace} is being deleted: everything in it goes with it, whatever a plan says"
        ),
        Some(_) => Ok(()),
    }
}

/// What the plan knows of the scope it was made in: what could not be listed, and the objects
/// whose owners could not be judged.
pub struct Scope<'a> {
    pub unlisted: Vec<Unlisted>,
    pub unjudged: &'a HashSet<Uid>,
}

/// The report of `outcome`, the DELETE of `target`, naming each object with `name`.
#[expect(clippy::too_many_arguments, reason = "the parts of one report")]
pub fn plan(
    name: &dyn Fn(Uid) -> Object,
    scope: Scope<'_>,
    target: Uid,
    (propagation, from): (Propagation, PropagationFrom),
    (mode, mode_from): (Mode, ModeFrom),
    timeout: Option<Duration>,
    outcome: &Outcome,
    collector: &CollectorArgs,
) -> Plan {
    let entry = |uid: &Uid| name(*uid);
    let finalizers = |held: &[FinalizerHold]| -> Vec<Finalizer> {
        held.iter()
            .map(|hold| Finalizer {
                name: hold.finalizer.clone(),
                removed_by: Remover::of(&hold.finalizer),
                waits_for: hold.waits_for.iter().map(entry).collect(),
            })
            .collect()
    };
    let mut plan = Plan {
        object: entry(&target),
        propagation,
        propagation_from: from,
        mode,
        mode_from,
        synchronous: timeout.is_some(),
        goes: outcome.gone,
        held_by: finalizers(&outcome.held),
        timeout_seconds: timeout.map(|t| t.as_secs_f64()),
        waves: outcome.waves,
        requests: outcome.requests,
        estimate_seconds: estimate(outcome, collector).as_secs_f64(),
        complete: scope.unlisted.is_empty(),
        unjudged: outcome
            .fates
            .keys()
            .filter(|uid| scope.unjudged.contains(uid))
            .map(entry)
            .collect(),
        unhandled_finalizers: Vec::new(),
        holds: Vec::new(),
        delete: Vec::new(),
        orphan: Vec::new(),
        keep: Vec::new(),
        wait: Vec::new(),
        unlisted: scope.unlisted,
        withheld: 0,
        omitted: 0,
    };
    for (uid, fate) in &outcome.fates {
        match fate {
            Fate::Deleted {
                wave,
                propagation,
                by,
            } => plan.delete.push(Deleted {
                object: entry(uid),
                wave: *wave,
                propagation: *propagation,
                deleted_by: (*by).into(),
            }),
            Fate::Terminating { sent, held } => plan.wait.push(Waiting {
                object: entry(uid),
                wave: sent.map(|(wave, _)| wave),
                propagation: sent.map(|(_, p)| p),
                finalizers: finalizers(held),
            }),
            Fate::Orphaned => plan.orphan.push(entry(uid)),
            Fate::Kept { by } => plan.keep.push(Kept {
                object: entry(uid),
                kept_by: by.iter().map(entry).collect(),
                blocked_by_wave: None,
            }),
            Fate::Unreached { owner, blocked_by } => plan.keep.push(Kept {
                object: entry(uid),
                kept_by: vec![entry(owner)],
                blocked_by_wave: Some(blocked_by.0),
            }),
        }
    }
    plan.delete
        .sort_by(|a, b| (a.wave, &a.object).cmp(&(b.wave, &b.object)));
    plan
}

/// What the namespace controller does to the objects of the namespace `name` beside the
/// ownership cascade: every object is deleted (wave 1, by `namespace-controller`), and one
/// carrying finalizers of others stays being deleted until they are removed — by Kubernetes,
/// by a finalizer handler (held by syncgc until then), or by nothing the cluster says.
fn namespace_contents(plan: &mut Plan, resources: &Resources, read: &Snapshot, name: &str) {
    use crate::graph::Guards;
    let handlers: Vec<(Uid, crate::graph::Handles, Option<String>)> = read
        .objects
        .iter()
        .filter_map(|(uid, (_, meta))| {
            let handles = Guards::of(meta).handles?;
            (handles.cluster_wide || meta.namespace.as_deref() == Some(name))
                .then(|| (*uid, handles, meta.namespace.clone()))
        })
        .collect();
    let mut contents: Vec<(&Uid, &Meta)> = read
        .objects
        .iter()
        .filter(|(_, (_, meta))| meta.namespace.as_deref() == Some(name))
        .map(|(uid, (_, meta))| (uid, meta))
        .collect();
    contents.sort_by_key(|(uid, _)| entry(resources, read, **uid));
    let mut unhandled: BTreeMap<String, Vec<Object>> = BTreeMap::new();
    for (uid, meta) in contents {
        let object = entry(resources, read, *uid);
        let foreign = Guards::of(meta).foreign;
        if foreign.is_empty() {
            plan.delete.push(Deleted {
                object,
                wave: 1,
                propagation: Propagation::Background,
                deleted_by: DeletedBy::NamespaceController,
            });
            continue;
        }
        let finalizers = foreign
            .iter()
            .map(|finalizer| {
                let handler = handlers
                    .iter()
                    .find(|(_, h, _)| h.finalizers.contains(finalizer));
                let removed_by = Remover::in_namespace(finalizer, handler.is_some());
                if removed_by == Remover::Nothing {
                    unhandled
                        .entry(finalizer.to_string())
                        .or_default()
                        .push(object.clone());
                }
                Finalizer {
                    name: finalizer.to_string(),
                    removed_by,
                    waits_for: handler
                        .map(|(uid, ..)| vec![entry(resources, read, *uid)])
                        .unwrap_or_default(),
                }
            })
            .collect();
        plan.wait.push(Waiting {
            object,
            wave: Some(1),
            propagation: Some(Propagation::Background),
            finalizers,
        });
    }
    plan.unhandled_finalizers = unhandled
        .into_iter()
        .map(|(finalizer, objects)| Unhandled { finalizer, objects })
        .collect();
    plan.goes &= plan.unhandled_finalizers.is_empty();
}

/// The holds of the finalizer handlers whose finalizers objects of the namespace carry: each
/// keeps the handler and its tree for as long as a synchronous owner with as many dependents
/// as those objects may wait (what the handler needs is added by the caller, which reads it).
fn holds(
    plan: &mut Plan,
    resources: &Resources,
    read: &Snapshot,
    timeouts: crate::annotations::Timeouts,
) {
    use crate::graph::Guards;
    let describe =
        |entry: Object| crate::api::described(&entry.kind, entry.namespace.as_deref(), &entry.name);
    let carried: Vec<Vec<Box<str>>> = plan
        .wait
        .iter()
        .filter_map(|w| read.objects.get(&Uid::parse(&w.object.uid)))
        .map(|(_, meta)| Guards::of(meta).foreign)
        .collect();
    let mut handlers: Vec<(&Uid, crate::graph::Handles)> = read
        .objects
        .iter()
        .filter_map(|(uid, (_, meta))| Some((uid, Guards::of(meta).handles?)))
        .collect();
    handlers.sort_by_key(|(uid, _)| **uid);
    for (uid, handles) in handlers {
        let objects = carried
            .iter()
            .filter(|foreign| foreign.iter().any(|f| handles.finalizers.contains(f)))
            .count();
        if objects == 0 {
            continue;
        }
        plan.holds.push(HandlerHold {
            handler: entry(resources, read, *uid),
            finalizers: handles.finalizers.iter().map(ToString::to_string).collect(),
            objects,
            keeps: read
                .graph
                .tree(*uid)
                .map(|member| describe(entry(resources, read, member)))
                .collect(),
            seconds: timeouts.for_owner(objects, None).as_secs_f64(),
        });
    }
}

/// The plan's entry for `uid`: read, or only known from a reference to it.
fn entry(resources: &Resources, read: &Snapshot, uid: Uid) -> Object {
    if let Some((id, meta)) = read.objects.get(&uid)
        && let Some(resource) = resources.get(*id)
    {
        let api = &resource.api;
        return Object {
            api_version: api.api_version.clone(),
            kind: api.kind.clone(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            uid: uid.to_string(),
        };
    }
    let reference = read
        .objects
        .values()
        .flat_map(|(_, meta)| &meta.owner_references)
        .find(|r| Uid::parse(&r.uid) == uid);
    Object {
        api_version: reference.map(|r| r.api_version.clone()).unwrap_or_default(),
        kind: reference.map(|r| r.kind.clone()).unwrap_or_default(),
        namespace: None,
        name: reference.map(|r| r.name.clone()).unwrap_or_default(),
        uid: uid.to_string(),
    }
}

/// How long the cascade takes at the collector's rate: its requests beyond the burst at
/// `--qps`, and each wave's latency.
pub fn estimate(outcome: &Outcome, collector: &CollectorArgs) -> Duration {
    let beyond = outcome.requests.saturating_sub(collector.burst as usize);
    Duration::from_secs_f64(beyond as f64 / collector.qps) + WAVE_LATENCY * outcome.waves as u32
}

impl Plan {
    /// Every object the plan names.
    pub fn objects(&self) -> impl Iterator<Item = &Object> {
        fn finalizers(held: &[Finalizer]) -> impl Iterator<Item = &Object> {
            held.iter().flat_map(|f| &f.waits_for)
        }
        std::iter::once(&self.object)
            .chain(finalizers(&self.held_by))
            .chain(&self.unjudged)
            .chain(self.unhandled_finalizers.iter().flat_map(|u| &u.objects))
            .chain(self.holds.iter().map(|h| &h.handler))
            .chain(self.delete.iter().map(|d| &d.object))
            .chain(self.orphan.iter())
            .chain(
                self.keep
                    .iter()
                    .flat_map(|k| std::iter::once(&k.object).chain(&k.kept_by)),
            )
            .chain(
                self.wait
                    .iter()
                    .flat_map(|w| std::iter::once(&w.object).chain(finalizers(&w.finalizers))),
            )
    }

    /// Leaves out every object `readable` refuses, wherever it is named; returns how many
    /// objects were left out.
    pub fn withhold(&mut self, readable: impl Fn(&Object) -> bool) -> usize {
        let withheld: HashSet<String> = self
            .objects()
            .filter(|o| !readable(o))
            .map(|o| o.uid.clone())
            .collect();
        let shown = |o: &Object| !withheld.contains(&o.uid);
        let finalizers = |held: &mut Vec<Finalizer>| {
            for finalizer in held {
                finalizer.waits_for.retain(shown);
            }
        };
        finalizers(&mut self.held_by);
        self.unjudged.retain(shown);
        for unhandled in &mut self.unhandled_finalizers {
            unhandled.objects.retain(shown);
        }
        self.unhandled_finalizers.retain(|u| !u.objects.is_empty());
        self.holds.retain(|h| shown(&h.handler));
        self.delete.retain(|d| shown(&d.object));
        self.orphan.retain(shown);
        self.keep.retain(|k| shown(&k.object));
        for kept in &mut self.keep {
            kept.kept_by.retain(shown);
        }
        self.wait.retain(|w| shown(&w.object));
        for waiting in &mut self.wait {
            finalizers(&mut waiting.finalizers);
        }
        withheld.len()
    }

    /// Keeps at most `max` entries of `delete`, `orphan`, `keep` and `wait` together, in that
    /// order; returns how many were left out.
    pub fn bounded(&mut self, max: usize) -> usize {
        let mut room = max;
        let mut omitted = 0;
        let mut cut = |len: usize| {
            let kept = len.min(room);
            room -= kept;
            omitted += len - kept;
            kept
        };
        let keep = cut(self.delete.len());
        self.delete.truncate(keep);
        let keep = cut(self.orphan.len());
        self.orphan.truncate(keep);
        let keep = cut(self.keep.len());
        self.keep.truncate(keep);
        let keep = cut(self.wait.len());
        self.wait.truncate(keep);
        omitted
    }

    /// The plan for people: a tree read at a glance.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let what = |e: &Object| match &e.namespace {
            Some(ns) => format!("{}/{} ({ns})", e.kind.to_ascii_lowercase(), e.name),
            None => format!("{}/{}", e.kind.to_ascii_lowercase(), e.name),
        };
        let _ = writeln!(
            out,
            "{}: deleted with propagation {} ({}){}",
            what(&self.object),
            self.propagation.as_str(),
            self.propagation_from.says(),
            if self.synchronous {
                ", synchronously: the DELETE returns once the tree is gone"
            } else {
                ""
            }
        );
        let _ = writeln!(
            out,
            "  collectors: {} ({})",
            match self.mode {
                Mode::Standalone => "syncgc alone",
                Mode::Cooperative => {
                    "syncgc for armed owners, Kubernetes' garbage collector for the rest"
                }
            },
            self.mode_from.says()
        );
        let mut waves: BTreeMap<usize, Vec<&Deleted>> = BTreeMap::new();
        for deleted in &self.delete {
            waves.entry(deleted.wave).or_default().push(deleted);
        }
        for (wave, objects) in &waves {
            let _ = writeln!(out, "  wave {wave}: {} deleted", objects.len());
            for deleted in objects {
                let _ = writeln!(
                    out,
                    "    - {} ({}, by {})",
                    what(&deleted.object),
                    deleted.propagation.as_str(),
                    deleted.deleted_by.as_str()
                );
            }
        }
        for orphan in &self.orphan {
            let _ = writeln!(
                out,
                "  orphaned (kept, its reference removed): {}",
                what(orphan)
            );
        }
        for kept in &self.keep {
            let by: Vec<String> = kept.kept_by.iter().map(what).collect();
            let by = if by.is_empty() {
                "an owner that cannot be looked up".to_owned()
            } else {
                by.join(", ")
            };
            match kept.blocked_by_wave {
                Some(wave) => {
                    let _ = writeln!(
                        out,
                        "  kept: {}, its turn in {by}'s deletion order never comes: wave {wave} does not end",
                        what(&kept.object)
                    );
                }
                None => {
                    let _ = writeln!(out, "  kept: {}, while {by} lives", what(&kept.object));
                }
            }
        }
        let holds = std::iter::once((&self.object, &self.held_by))
            .chain(self.wait.iter().map(|w| (&w.object, &w.finalizers)));
        for (object, finalizers) in holds {
            for finalizer in finalizers {
                let waits_for: Vec<String> = finalizer.waits_for.iter().map(what).collect();
                let _ = writeln!(
                    out,
                    "  stays being deleted: {} for its finalizer {}, removed by {}{}",
                    what(object),
                    finalizer.name,
                    finalizer.removed_by,
                    if waits_for.is_empty() {
                        String::new()
                    } else {
                        format!("; it waits for {}", waits_for.join(", "))
                    }
                );
            }
        }
        let _ = writeln!(
            out,
            "{} object(s) deleted in {} wave(s), {} request(s): about {:.1}s at the collector's rate{}",
            self.delete.len(),
            self.waves,
            self.requests,
            self.estimate_seconds,
            if self.wait.is_empty() {
                ""
            } else {
                ", plus what waits on finalizers of others"
            }
        );
        if let Some(timeout) = self.timeout_seconds {
            let _ = writeln!(
                out,
                "syncgc would release it after {} at the latest",
                crate::duration::format(Duration::from_secs_f64(timeout))
            );
        }
        if !self.goes {
            let _ = writeln!(
                out,
                "it stays: something in the tree waits on a finalizer of another controller"
            );
        }
        for unlisted in &self.unlisted {
            let _ = writeln!(
                out,
                "incomplete: {} could not be listed ({}); its objects are not in the plan",
                unlisted.resource, unlisted.error
            );
        }
        if self.withheld > 0 {
            let _ = writeln!(
                out,
                "{} object(s) of kinds or namespaces you may not read are left out",
                self.withheld
            );
        }
        if self.omitted > 0 {
            let _ = writeln!(
                out,
                "{} more entries are left out of this answer",
                self.omitted
            );
        }
        for hold in &self.holds {
            let _ = writeln!(
                out,
                "held for its handler: {} handles {} ({} object(s) here): syncgc keeps {} until \
                 those are gone, for at most {}s",
                what(&hold.handler),
                hold.finalizers.join(", "),
                hold.objects,
                hold.keeps.join(", "),
                hold.seconds
            );
        }
        for unhandled in &self.unhandled_finalizers {
            let objects: Vec<String> = unhandled.objects.iter().map(what).collect();
            let _ = writeln!(
                out,
                "left without a handler: {} on {} object(s) ({}): no workload says it removes it \
                 (syncgc.io/handles-finalizers), so they may stay Terminating and hold the \
                 namespace",
                unhandled.finalizer,
                objects.len(),
                objects.join(", ")
            );
        }
        if !self.unjudged.is_empty() {
            let objects: Vec<String> = self.unjudged.iter().map(what).collect();
            let _ = writeln!(
                out,
                "not judged (an owner of a kind that could not be listed; kept here): {}",
                objects.join(", ")
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/commands.md's `syncgc plan` sample is what `plan` prints for a plan recorded with
    /// `-o json` on a cluster (a Deployment and its ReplicaSet's Pods, a ConfigMap with another
    /// owner, a Secret held by another controller's finalizer, syncgc's Lease naming its mode).
    #[test]
    fn the_docs_sample_is_what_plan_prints_for_a_recorded_plan() {
        use crate::report::samples;
        let recorded: Plan =
            serde_json::from_str(include_str!("../tests/fixtures/plan/deployment-web.json"))
                .unwrap();
        let printed = format!(
            "$ syncgc plan deployment/web -n team-a\n{}",
            recorded.text()
        );
        let page = "docs/commands.md";
        let sample = samples::block(page, "$ syncgc plan deployment/web -n team-a\n");
        samples::assert_printed(page, &sample, &printed);
    }

    fn object(kind: &str, namespace: &str, name: &str) -> Object {
        Object {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: Some(namespace.into()),
            name: name.into(),
            uid: format!("{kind}-{namespace}-{name}"),
        }
    }

    fn deleted(object: Object) -> Deleted {
        Deleted {
            object,
            wave: 1,
            propagation: Propagation::Background,
            deleted_by: DeletedBy::Syncgc,
        }
    }

    fn plan_of(root: Object) -> Plan {
        Plan {
            object: root,
            propagation: Propagation::Background,
            propagation_from: PropagationFrom::Default,
            mode: Mode::Cooperative,
            mode_from: ModeFrom::Server,
            synchronous: false,
            goes: true,
            held_by: Vec::new(),
            timeout_seconds: None,
            waves: 1,
            requests: 0,
            estimate_seconds: 0.0,
            complete: true,
            unjudged: Vec::new(),
            unhandled_finalizers: Vec::new(),
            holds: Vec::new(),
            delete: Vec::new(),
            orphan: Vec::new(),
            keep: Vec::new(),
            wait: Vec::new(),
            unlisted: Vec::new(),
            withheld: 0,
            omitted: 0,
        }
    }

    #[test]
    fn what_a_reader_may_not_read_is_counted_wherever_it_is_named() {
        let root = object("ConfigMap", "a", "root");
        let secret = object("Secret", "a", "token");
        let mut plan = plan_of(root.clone());
        plan.delete = vec![
            deleted(object("ConfigMap", "a", "child")),
            deleted(secret.clone()),
        ];
        plan.keep = vec![Kept {
            object: object("ConfigMap", "a", "kept"),
            kept_by: vec![
                root.clone(),
                secret.clone(),
                object("ConfigMap", "b", "other"),
            ],
            blocked_by_wave: None,
        }];
        plan.wait = vec![Waiting {
            object: object("ConfigMap", "a", "waiting"),
            wave: Some(1),
            propagation: None,
            finalizers: vec![Finalizer {
                waits_for: vec![secret.clone()],
                ..Finalizer::of("example.com/hold")
            }],
        }];
        let readable = |o: &Object| o.kind != "Secret" && o.namespace.as_deref() == Some("a");
        // The Secret (named three times) and the ConfigMap of namespace b.
        assert_eq!(plan.withhold(readable), 2);
        assert_eq!(plan.delete.len(), 1);
        assert_eq!(plan.keep[0].kept_by, [root]);
        assert!(plan.wait[0].finalizers[0].waits_for.is_empty());
        assert!(plan.objects().all(readable));
    }

    #[test]
    fn an_answer_holds_at_most_so_many_entries_and_counts_the_rest() {
        let mut plan = plan_of(object("ConfigMap", "a", "root"));
        plan.delete = (0..5)
            .map(|n| deleted(object("ConfigMap", "a", &format!("d{n}"))))
            .collect();
        plan.orphan = (0..3)
            .map(|n| object("ConfigMap", "a", &format!("o{n}")))
            .collect();
        assert_eq!(plan.bounded(6), 2);
        assert_eq!((plan.delete.len(), plan.orphan.len()), (5, 1));
        assert_eq!(plan.bounded(100), 0);
    }

    #[test]
    fn syncgc_s_own_group_failing_discovery_leaves_a_plan_complete() {
        let mut resources = Resources::default();
        resources.update(crate::gc::discovery::Found {
            failed: [
                crate::names::API_GROUP.to_owned(),
                "metrics.k8s.io".to_owned(),
            ]
            .into(),
            ..Default::default()
        });
        let unlisted = unlisted_groups(&resources);
        assert_eq!(unlisted.len(), 1, "{unlisted:?}");
        assert!(unlisted[0].resource.contains("metrics.k8s.io"));
    }
}
