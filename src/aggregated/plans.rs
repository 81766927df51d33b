//! `POST …/namespaces/{namespace}/deletionplans` and `POST …/clusterdeletionplans`: what a
//! DELETE of the object a plan names would do, made on the collector's graph by the cascade
//! model ([`cascade::on_copy`]) and reported in the words of `syncgc plan`
//! ([`crate::plan::plan`]). Answered only to a user who may get the object; the objects of
//! kinds or namespaces the user may not read are counted, not named.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::access::{MAX_QUESTIONS, Question};
use super::front_proxy::User;
use super::status::Refusal;
use super::{Aggregated, Caller, answer};
use crate::api::{Propagation, Target};
use crate::gc::cascade;
use crate::gc::config::CollectorArgs;
use crate::gc::discovery::{Resource, Resources};
use crate::graph::{Below, Flags, Graph, Uid};
use crate::names::PROPAGATION_ANNOTATION;
use crate::names::{API_GROUP_VERSION, SYNCHRONOUS_FINALIZER, TIMEOUT_ANNOTATION};
use crate::plan::{self, DeletionPlan, ModeFrom, Plan, PropagationFrom, Scope};
use crate::report::Object;

/// The most entries of `delete`, `orphan`, `keep` and `wait` one answer holds; the rest are
/// counted in `omitted`.
pub const MAX_ENTRIES: usize = 10_000;
/// The most objects below the target the cascade model runs on: a bigger tree is refused (413)
/// rather than answered after the apiserver stopped waiting.
pub const MAX_MODELLED: usize = 250_000;
pub async fn create_namespaced(
    State(api): State<Arc<Aggregated>>,
    Path(namespace): Path<String>,
    Caller(user): Caller,
    body: Bytes,
) -> Response {
    create(&api, &user, Some(namespace), &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub async fn create_cluster(
    State(api): State<Arc<Aggregated>>,
    Caller(user): Caller,
    body: Bytes,
) -> Response {
    create(&api, &user, None, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The review in `body`, checked.
pub fn parse(body: &[u8], namespace: Option<&str>) -> Result<DeletionPlan, Refusal> {
    let kind = DeletionPlan::kind_in(namespace);
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let review: DeletionPlan = serde_path_to_error::deserialize(&mut deserializer)
        .map_err(|err| Refusal::bad_request(format!("a {kind} that does not parse: {err}")))?;
    if !review.kind.is_empty() && review.kind != kind {
        return Err(Refusal::bad_request(format!(
            "this path takes a {kind}, not a {}",
            review.kind
        )));
    }
    if !review.api_version.is_empty() && review.api_version != API_GROUP_VERSION {
        return Err(Refusal::bad_request(format!(
            "this path takes {API_GROUP_VERSION}, not {}",
            review.api_version
        )));
    }
    if review.spec.target.name.is_empty() {
        return Err(Refusal::bad_request("spec.target.name is empty"));
    }
    Ok(review)
}

/// A DELETE's `propagationPolicy`, as its options (and `syncgc.io/propagation`) spell it.
pub fn policy(policy: &str) -> Result<Propagation, Refusal> {
    Propagation::from_annotation(policy).ok_or_else(|| {
        Refusal::bad_request(format!(
            "spec.propagationPolicy {policy:?} is none of Background, Foreground, Orphan"
        ))
    })
}

async fn create(
    api: &Aggregated,
    user: &User,
    namespace: Option<String>,
    body: &[u8],
) -> Result<Response, Refusal> {
    let mut review = parse(body, namespace.as_deref())?;
    let propagation = review
        .spec
        .propagation_policy
        .as_deref()
        .map(policy)
        .transpose()?;
    let target = &review.spec.target;
    let resource = served(&api.resources.read(), &target.api_version, &target.kind)?;
    let described = crate::api::described(&resource.api.kind, namespace.as_deref(), &target.name);
    match (resource.namespaced, &namespace) {
        (true, None) => {
            return Err(Refusal::bad_request(format!(
                "{} is namespaced: its plans are DeletionPlans of its namespace",
                resource.api.kind
            )));
        }
        (false, Some(_)) => {
            return Err(Refusal::bad_request(format!(
                "{} is cluster-scoped: its plans are ClusterDeletionPlans",
                resource.api.kind
            )));
        }
        _ => {}
    }
    if resource.api.group.is_empty() && resource.api.kind == "Namespace" {
        return Err(Refusal::bad_request(
            "a Namespace's plan reads every object in it: `syncgc plan namespace/NAME` makes it",
        ));
    }
    let may_get = Question::read(
        &resource.api.group,
        &resource.api.plural,
        namespace.as_deref(),
    )
    .named(&target.name);
    if !api.access.allows(user, &may_get).await? {
        return Err(Refusal::forbidden(format!(
            "{} may not get {described}: a plan is answered only to who may read its object",
            user.name
        )));
    }
    if !api.readiness.get() {
        return Err(Refusal::unavailable(
            "syncgc has not listed every resource yet: its graph cannot say what a DELETE takes down",
        ));
    }
    let live = Target {
        resource: resource.api.clone(),
        namespace: namespace.clone(),
        name: target.name.clone(),
        uid: String::new(),
    };
    let meta = api
        .cluster
        .get_metadata(&live)
        .await
        .map_err(|err| Refusal::unavailable(format!("reading {described}: {err}")))?
        .ok_or_else(|| {
            Refusal::missing(
                &resource.api.plural,
                &target.name,
                format!("{described} does not exist"),
            )
        })?;
    let uid = Uid::parse(meta.uid.as_deref().unwrap_or_default());
    let mut plan = {
        let graph = api.graph.read();
        let resources = api.resources.read();
        made(&graph, &resources, uid, &meta, propagation, &api.collector).map_err(|refusal| {
            Refusal {
                message: format!("{described}: {}", refusal.message),
                ..refusal
            }
        })?
    };
    plan.withheld = withhold(api, user, &mut plan).await?;
    plan.omitted = plan.bounded(MAX_ENTRIES);
    review.api_version = API_GROUP_VERSION.to_owned();
    review.kind = DeletionPlan::kind_in(namespace.as_deref()).to_owned();
    review.metadata = ObjectMeta {
        namespace,
        creation_timestamp: Some(Time(jiff::Timestamp::now())),
        ..ObjectMeta::default()
    };
    review.status = Some(plan);
    Ok(answer(StatusCode::CREATED, &review))
}

/// The served resource of `api_version` and `kind`.
fn served(resources: &Resources, api_version: &str, kind: &str) -> Result<Resource, Refusal> {
    match resources.by_kind(api_version, kind) {
        Some((_, resource)) if resource.served && resources.serves_version(api_version, kind) => {
            Ok(resource.clone())
        }
        _ => Err(Refusal::bad_request(format!(
            "the cluster serves no kind {kind} in {api_version}"
        ))),
    }
}

/// The plan of the DELETE of `uid` (whose live metadata is `meta`) with `propagation` (or
/// the object's own), on `graph`.
fn made(
    graph: &Graph,
    resources: &Resources,
    uid: Uid,
    meta: &ObjectMeta,
    propagation: Option<Propagation>,
    collector: &CollectorArgs,
) -> Result<Plan, Refusal> {
    if graph.node(uid).is_none_or(|n| n.is(Flags::VIRTUAL)) {
        return Err(Refusal::unavailable(
            "syncgc's graph has not seen it yet (it was just created): ask again",
        ));
    }
    let annotations = meta.annotations.clone().unwrap_or_default();
    let (propagation, from) = match propagation {
        Some(propagation) => (propagation, PropagationFrom::Spec),
        None => match annotations
            .get(PROPAGATION_ANNOTATION)
            .and_then(|a| Propagation::from_annotation(a))
        {
            Some(propagation) => (propagation, PropagationFrom::Annotation),
            None => (Propagation::Background, PropagationFrom::Default),
        },
    };
    let below = Below::new(graph, uid);
    let dependents = below.count();
    if dependents > MAX_MODELLED {
        return Err(Refusal::too_large(format!(
            "{dependents} objects depend on it, more than the {MAX_MODELLED} a plan models \
             within the apiserver's timeout"
        )));
    }
    let synchronous = meta
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == SYNCHRONOUS_FINALIZER);
    let timeout = synchronous.then(|| {
        collector.timeouts().for_owner(
            dependents,
            annotations.get(TIMEOUT_ANNOTATION).map(String::as_str),
        )
    });
    let (outcome, _) = cascade::on_copy(&below, propagation);
    Ok(plan::plan(
        &|uid| object_in(graph, resources, uid),
        Scope {
            unlisted: plan::unlisted_groups(resources),
            unjudged: &HashSet::new(),
        },
        uid,
        (propagation, from),
        (graph.mode(), ModeFrom::Server),
        timeout,
        &outcome,
        collector,
    ))
}

/// The object `uid` as the graph knows it (only its uid and name when the graph knows it only
/// from a reference to it).
pub fn object_in(graph: &Graph, resources: &Resources, uid: Uid) -> Object {
    let node = graph.node(uid);
    let api = node
        .and_then(|n| n.resource)
        .and_then(|r| resources.get(r))
        .map(|r| &r.api);
    Object {
        api_version: api.map(|a| a.api_version.clone()).unwrap_or_default(),
        kind: api.map(|a| a.kind.clone()).unwrap_or_default(),
        namespace: node.and_then(|n| n.namespace()).map(str::to_owned),
        name: node.map(|n| n.name.to_string()).unwrap_or_default(),
        uid: uid.to_string(),
    }
}

/// Leaves out of `plan` the objects `user` may not read (and those of kinds the graph does
/// not know); returns how many.
async fn withhold(api: &Aggregated, user: &User, plan: &mut Plan) -> Result<usize, Refusal> {
    let target = plan.object.uid.clone();
    let questions: HashMap<(String, String, Option<String>), Question> = {
        let resources = api.resources.read();
        let asked: BTreeSet<(String, String, Option<String>)> = plan
            .objects()
            .map(|o| (o.api_version.clone(), o.kind.clone(), o.namespace.clone()))
            .collect();
        asked
            .into_iter()
            .filter_map(|(api_version, kind, namespace)| {
                let (_, resource) = resources.by_kind(&api_version, &kind)?;
                let question = Question::read(
                    &resource.api.group,
                    &resource.api.plural,
                    namespace.as_deref(),
                );
                Some(((api_version, kind, namespace), question))
            })
            .take(MAX_QUESTIONS)
            .collect()
    };
    let answers = api
        .access
        .answers(user, questions.values().cloned())
        .await?;
    Ok(plan.withhold(|o| {
        o.uid == target
            || questions
                .get(&(o.api_version.clone(), o.kind.clone(), o.namespace.clone()))
                .is_some_and(|q| answers.get(q) == Some(&true))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_that_does_not_parse_is_a_bad_request_that_says_where() {
        let refused = parse(br#"{"spec": {"target": {"kind": 3}}}"#, Some("ns")).unwrap_err();
        assert_eq!(refused.code, StatusCode::BAD_REQUEST);
        assert!(
            refused.message.contains("spec.target"),
            "{}",
            refused.message
        );
        let refused = parse(b"not json", None).unwrap_err();
        assert_eq!(refused.code, StatusCode::BAD_REQUEST);
        let wrong_kind = br#"{"kind": "DeletionPlan", "spec": {"target": {"apiVersion": "v1", "kind": "Namespace", "name": "x"}}}"#;
        assert_eq!(
            parse(wrong_kind, None).unwrap_err().code,
            StatusCode::BAD_REQUEST
        );
        let unknown_field = br#"{"spec": {"target": {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}, "dryRun": true}}"#;
        assert_eq!(
            parse(unknown_field, Some("ns")).unwrap_err().code,
            StatusCode::BAD_REQUEST
        );
        let good = br#"{"apiVersion": "syncgc.io/v1alpha1", "kind": "DeletionPlan", "spec": {"target": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "propagationPolicy": "Foreground"}}"#;
        let review = parse(good, Some("ns")).unwrap();
        assert_eq!(review.spec.target.kind, "Deployment");
        assert_eq!(policy("Foreground").unwrap(), Propagation::Foreground);
        assert_eq!(
            policy("foreground").unwrap_err().code,
            StatusCode::BAD_REQUEST
        );
    }
}
