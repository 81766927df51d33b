//! `GET …/namespaces/{namespace}/deletioncauses[/{name}]` and `GET …/deletioncauses`: why the
//! objects of a namespace (of every namespace) went, from the record of causes, each with its
//! chain up to the root of its cascade. A cause is answered only to a user who may get objects
//! of its kind in its namespace; the others, and the links of a chain the user may not read,
//! are counted, not named. `kubectl get` gets a Table.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta, Time};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::access::{MAX_QUESTIONS, Question};
use super::front_proxy::User;
use super::status::Refusal;
use super::{Aggregated, Caller, answer, wants_table};
use crate::gc::causes::{DeletionCause, DeletionCauseList, Done, Entry, Scope};
use crate::graph::Uid;
use crate::names::API_GROUP_VERSION;

pub async fn list_namespaced(
    State(api): State<Arc<Aggregated>>,
    Path(namespace): Path<String>,
    Caller(user): Caller,
    headers: HeaderMap,
) -> Response {
    list(&api, &user, Some(&namespace), None, &headers).await
}

pub async fn list_all(
    State(api): State<Arc<Aggregated>>,
    Caller(user): Caller,
    headers: HeaderMap,
) -> Response {
    list(&api, &user, None, None, &headers).await
}

pub async fn get_one(
    State(api): State<Arc<Aggregated>>,
    Path((namespace, name)): Path<(String, String)>,
    Caller(user): Caller,
    headers: HeaderMap,
) -> Response {
    list(&api, &user, Some(&namespace), Some(&name), &headers).await
}

async fn list(
    api: &Aggregated,
    user: &User,
    namespace: Option<&str>,
    name: Option<&str>,
    headers: &HeaderMap,
) -> Response {
    let answered = causes(api, user, namespace, name).await;
    if let Ok(list) = &answered {
        tracing::debug!(
            namespace = namespace.unwrap_or("*"),
            user = %user.name,
            causes = list.items.len(),
            withheld = list.withheld,
            unanswered = ?list.unanswered,
            "answered the deletion causes"
        );
    }
    match answered {
        Err(refusal) => refusal.into_response(),
        Ok(list) if wants_table(headers) => answer(StatusCode::OK, &table(&list)),
        Ok(mut list) if name.is_some() => match list.items.pop() {
            Some(item) => answer(StatusCode::OK, &item),
            None => Refusal::forbidden(format!(
                "{} may not read the object of the deletion cause {}",
                user.name,
                name.unwrap_or_default()
            ))
            .into_response(),
        },
        Ok(list) => answer(StatusCode::OK, &list),
    }
}

/// The causes of `namespace` (of every namespace when `None`), or the one `name`d, that
/// `user` may read.
async fn causes(
    api: &Aggregated,
    user: &User,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<DeletionCauseList, Refusal> {
    let record = api.causes.as_ref().ok_or_else(|| {
        Refusal::not_found("syncgc runs with --record-causes=false: it keeps no causes")
    })?;
    // What the graph has confirmed since the last tick is answered too.
    record.confirm(&api.graph.read(), Instant::now());
    let scope = Scope::of(namespace);
    let joined = api.peers.join(record, scope.clone()).await;
    let mut entries = joined.causes.in_scope(&scope);
    if let Some(name) = name {
        entries.retain(|e| DeletionCause::name_of(&e.kind, &e.name) == name);
        entries.truncate(1);
        if entries.is_empty() {
            return Err(Refusal::missing(
                "deletioncauses",
                name,
                format!(
                    "no deletion cause {name} in the namespace {}: the record keeps the last {} \
                 deletions for {} minutes, and a restart loses it",
                    namespace.unwrap_or_default(),
                    crate::gc::causes::CAPACITY,
                    crate::gc::causes::KEEP / 60
                ),
            ));
        }
    }
    let chains: Vec<Vec<Entry>> = entries
        .iter()
        .map(|e| joined.causes.chain(Uid::parse(&e.uid)))
        .filter(|chain| !chain.is_empty())
        .collect();
    let readable = readable(api, user, &chains).await?;
    let mut list = DeletionCauseList {
        api_version: API_GROUP_VERSION.to_owned(),
        kind: "DeletionCauseList".to_owned(),
        metadata: ListMeta::default(),
        items: Vec::new(),
        withheld: 0,
        unanswered: joined.unanswered,
    };
    for mut chain in chains {
        let object = chain.remove(0);
        if !readable.allows(&object) {
            list.withheld += 1;
            continue;
        }
        let incomplete = chain.last().unwrap_or(&object).cause.is_some();
        let before = chain.len();
        chain.retain(|e| readable.allows(e));
        list.items.push(DeletionCause {
            api_version: API_GROUP_VERSION.to_owned(),
            kind: "DeletionCause".to_owned(),
            metadata: ObjectMeta {
                name: Some(DeletionCause::name_of(&object.kind, &object.name)),
                namespace: object.namespace.clone(),
                creation_timestamp: jiff::Timestamp::from_second(object.at).ok().map(Time),
                ..ObjectMeta::default()
            },
            withheld: before - chain.len(),
            causes: chain,
            incomplete,
            object,
        });
    }
    Ok(list)
}

/// Whether `user` may read each of `entries`: get objects of its kind (of every served
/// resource of that kind) in its namespace.
async fn readable(
    api: &Aggregated,
    user: &User,
    chains: &[Vec<Entry>],
) -> Result<Readable, Refusal> {
    let asked: BTreeSet<(String, Option<String>)> = chains
        .iter()
        .flatten()
        .map(|e| (e.kind.clone(), e.namespace.clone()))
        .collect();
    let questions: HashMap<(String, Option<String>), Vec<Question>> = {
        let resources = api.resources.read();
        asked
            .into_iter()
            .take(MAX_QUESTIONS)
            .map(|(kind, namespace)| {
                let questions = resources
                    .served()
                    .filter(|(_, r)| r.api.kind == kind)
                    .map(|(_, r)| Question::read(&r.api.group, &r.api.plural, namespace.as_deref()))
                    .collect();
                ((kind, namespace), questions)
            })
            .collect()
    };
    let answers = api
        .access
        .answers(user, questions.values().flatten().cloned())
        .await?;
    let allowed: BTreeSet<(String, Option<String>)> = questions
        .into_iter()
        .filter(|(_, qs)| !qs.is_empty() && qs.iter().all(|q| answers.get(q) == Some(&true)))
        .map(|(key, _)| key)
        .collect();
    Ok(Readable(allowed))
}

/// The kinds and namespaces a user may read.
struct Readable(BTreeSet<(String, Option<String>)>);

impl Readable {
    fn allows(&self, entry: &Entry) -> bool {
        self.0
            .contains(&(entry.kind.clone(), entry.namespace.clone()))
    }
}

/// `list` as a `meta.k8s.io/v1` Table, as `kubectl get` prints it.
fn table(list: &DeletionCauseList) -> Value {
    let now = jiff::Timestamp::now().as_second();
    let rows: Vec<Value> = list
        .items
        .iter()
        .map(|item| {
            let object = &item.object;
            let root = match item.causes.last() {
                _ if item.incomplete => "(no longer recorded)".to_owned(),
                Some(root) => format!("{} by {}", root.described(), root.by),
                None => "(itself)".to_owned(),
            };
            json!({
                "cells": [
                    item.metadata.name,
                    object.kind,
                    object.name,
                    match object.action { Done::Deleted => "deleted", Done::Orphaned => "orphaned" },
                    object.by,
                    root,
                    age(now - object.at),
                ],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": item.metadata,
                },
            })
        })
        .collect();
    let column = |name: &str, description: &str| json!({"name": name, "type": "string", "format": if name == "Name" { "name" } else { "" }, "description": description, "priority": 0});
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": [
            column("Name", "kind.name of the object"),
            column("Kind", "the object's kind"),
            column("Object", "the object's name"),
            column("Action", "deleted, or orphaned: its references to owners going removed"),
            column("By", "the user whose request did it"),
            column("Root", "the root of the cascade: the DELETE someone sent"),
            column("Age", "since it was done"),
        ],
        "rows": rows,
    })
}

/// `seconds` as kubectl prints an age: `45s`, `12m`, `5h`, `3d`.
fn age(seconds: i64) -> String {
    let seconds = seconds.max(0);
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7200 => format!("{}m", seconds / 60),
        7200..172_800 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(uid: &str, kind: &str, name: &str, cause: Option<&str>) -> Entry {
        Entry {
            uid: uid.into(),
            kind: kind.into(),
            namespace: Some("ns".into()),
            name: name.into(),
            action: Done::Deleted,
            by: "alice".into(),
            at: 0,
            cause: cause.map(str::to_owned),
        }
    }

    #[test]
    fn a_table_names_each_cause_and_its_root() {
        let root = entry("1", "Deployment", "web", None);
        let pod = entry("2", "Pod", "web-1", Some("1"));
        let list = DeletionCauseList {
            api_version: API_GROUP_VERSION.into(),
            kind: "DeletionCauseList".into(),
            metadata: ListMeta::default(),
            items: vec![DeletionCause {
                api_version: API_GROUP_VERSION.into(),
                kind: "DeletionCause".into(),
                metadata: ObjectMeta {
                    name: Some(DeletionCause::name_of("Pod", "web-1")),
                    ..ObjectMeta::default()
                },
                object: pod,
                causes: vec![root],
                withheld: 0,
                incomplete: false,
            }],
            withheld: 0,
            unanswered: Vec::new(),
        };
        let table = table(&list);
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[0], "pod.web-1");
        assert_eq!(cells[5], "Deployment ns/web by alice");
        assert_eq!(table["columnDefinitions"].as_array().unwrap().len(), 7);
        assert_eq!(age(59), "59s");
        assert_eq!(age(3600), "60m");
        assert_eq!(age(10_000), "2h");
    }
}
