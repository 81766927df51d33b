//! The group's discovery documents (what `kubectl api-resources` lists) and its OpenAPI (what
//! the aggregator merges into the apiserver's, for `kubectl explain` and validation).

use axum::Json;
use serde_json::{Value, json};

use super::Vouched;
use crate::names::{API_GROUP, API_GROUP_VERSION, API_VERSION};

/// `(plural, singular, kind, namespaced, verbs)` of each resource served.
pub const RESOURCES: [(&str, &str, &str, bool, &[&str]); 3] = [
    (
        "deletionplans",
        "deletionplan",
        "DeletionPlan",
        true,
        &["create"],
    ),
    (
        "clusterdeletionplans",
        "clusterdeletionplan",
        "ClusterDeletionPlan",
        false,
        &["create"],
    ),
    (
        "deletioncauses",
        "deletioncause",
        "DeletionCause",
        true,
        &["get", "list"],
    ),
];

fn group_document() -> Value {
    let version = json!({"groupVersion": API_GROUP_VERSION, "version": API_VERSION});
    json!({
        "name": API_GROUP,
        "versions": [version],
        "preferredVersion": version,
    })
}

pub async fn groups(_: Vouched) -> Json<Value> {
    Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group_document()]}))
}

pub async fn group(_: Vouched) -> Json<Value> {
    let mut group = group_document();
    group["kind"] = json!("APIGroup");
    group["apiVersion"] = json!("v1");
    Json(group)
}

pub async fn resources(_: Vouched) -> Json<Value> {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .map(|(plural, singular, kind, namespaced, verbs)| {
            json!({
                "name": plural,
                "singularName": singular,
                "namespaced": namespaced,
                "kind": kind,
                "verbs": verbs,
                "categories": ["syncgc"],
            })
        })
        .collect();
    Json(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_GROUP_VERSION,
        "resources": resources,
    }))
}

/// The OpenAPI v2 document: each kind's schema, and the paths that use them (the aggregator
/// keeps only the definitions its paths reach).
pub async fn openapi(_: Vouched) -> Json<Value> {
    Json(openapi_document())
}

fn gvk(kind: &str) -> Value {
    json!([{"group": API_GROUP, "version": API_VERSION, "kind": kind}])
}

fn definition(kind: &str) -> String {
    format!("io.syncgc.{API_VERSION}.{kind}")
}

fn reference(kind: &str) -> Value {
    json!({"$ref": format!("#/definitions/{}", definition(kind))})
}

pub fn openapi_document() -> Value {
    // Standard object and list metadata, without reaching into the apiserver's definitions.
    let meta = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let plan_spec = json!({
        "type": "object",
        "required": ["target"],
        "properties": {
            "target": {
                "type": "object",
                "description": "The object the plan is of; in the plan's namespace when it is namespaced.",
                "required": ["apiVersion", "kind", "name"],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "name": {"type": "string"},
                },
            },
            "propagationPolicy": {
                "type": "string",
                "description": "Background, Foreground or Orphan; by default the object's syncgc.io/propagation, else Background.",
            },
        },
    });
    let plan = |kind: &str, description: &str| {
        json!({
            "type": "object",
            "description": description,
            "required": ["spec"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": meta,
                "spec": plan_spec,
                "status": {
                    "type": "object",
                    "description": "What the DELETE would do: the plan syncgc plan -o json prints, with withheld (objects the reader may not read, counted) and omitted (entries beyond one answer).",
                    "x-kubernetes-preserve-unknown-fields": true,
                },
            },
            "x-kubernetes-group-version-kind": gvk(kind),
        })
    };
    let entry = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let cause = json!({
        "type": "object",
        "description": "Why an object went: what was done to it, by whom, and its causes up to the root of the cascade.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": meta,
            "object": entry,
            "causes": {"type": "array", "items": entry},
            "withheld": {"type": "integer"},
            "incomplete": {"type": "boolean"},
        },
        "x-kubernetes-group-version-kind": gvk("DeletionCause"),
    });
    let cause_list = json!({
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": meta,
            "items": {"type": "array", "items": reference("DeletionCause")},
            "withheld": {"type": "integer"},
            "unanswered": {"type": "array", "items": {"type": "string"}},
        },
        "x-kubernetes-group-version-kind": gvk("DeletionCauseList"),
    });
    let create = |kind: &str| {
        json!({
            "post": {
                "operationId": format!("create{kind}"),
                "consumes": ["application/json"],
                "produces": ["application/json"],
                "parameters": [{"name": "body", "in": "body", "required": true, "schema": reference(kind)}],
                "responses": {"201": {"description": "Created", "schema": reference(kind)}},
                "x-kubernetes-action": "post",
                "x-kubernetes-group-version-kind": gvk(kind)[0],
            }
        })
    };
    let read = |operation: &str, kind: &str| {
        json!({
            "get": {
                "operationId": operation,
                "produces": ["application/json"],
                "responses": {"200": {"description": "OK", "schema": reference(kind)}},
                "x-kubernetes-action": if kind.ends_with("List") { "list" } else { "get" },
                "x-kubernetes-group-version-kind": gvk(kind)[0],
            }
        })
    };
    let base = format!("/apis/{API_GROUP_VERSION}");
    json!({
        "swagger": "2.0",
        "info": {"title": "syncgc", "version": API_VERSION},
        "paths": {
            format!("{base}/namespaces/{{namespace}}/deletionplans"): create("DeletionPlan"),
            format!("{base}/clusterdeletionplans"): create("ClusterDeletionPlan"),
            format!("{base}/namespaces/{{namespace}}/deletioncauses"): read("listNamespacedDeletionCause", "DeletionCauseList"),
            format!("{base}/deletioncauses"): read("listDeletionCauseForAllNamespaces", "DeletionCauseList"),
            format!("{base}/namespaces/{{namespace}}/deletioncauses/{{name}}"): read("readNamespacedDeletionCause", "DeletionCause"),
        },
        "definitions": {
            definition("DeletionPlan"): plan("DeletionPlan", "What a DELETE of an object of this namespace would take down, made by syncgc on its graph when the plan is created; stored nowhere."),
            definition("ClusterDeletionPlan"): plan("ClusterDeletionPlan", "What a DELETE of a cluster-scoped object would take down, made by syncgc on its graph when the plan is created; stored nowhere."),
            definition("DeletionCause"): cause,
            definition("DeletionCauseList"): cause_list,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_of_the_openapi_reaches_a_definition() {
        let document = openapi_document();
        let text = document["paths"].to_string();
        for (name, _) in document["definitions"].as_object().unwrap() {
            let used = text.contains(&format!("#/definitions/{name}"))
                || document["definitions"]
                    .to_string()
                    .contains(&format!("#/definitions/{name}"));
            assert!(used, "{name} is reached by no path");
        }
        assert_eq!(RESOURCES.len(), 3);
    }
}
