//! `/debug/graph?uid=…` on the metrics port: the part of the ownership graph around one object
//! (its owners and, transitively, its dependents) as JSON, or as Graphviz DOT with
//! `&format=dot`. Read-only, for people asking what blocks a deletion.

use std::collections::HashSet;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

use super::Collector;
use super::discovery::Resources;
use crate::graph::{Graph, Uid};

#[derive(Debug, Deserialize)]
struct GraphParams {
    uid: Option<String>,
    format: Option<String>,
}

/// One node as `/debug/graph` shows it.
#[derive(Debug, Serialize)]
pub struct NodeView {
    pub uid: String,
    /// The kind, unless the graph has not seen the object.
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
    pub flags: Vec<&'static str>,
}

/// An ownerReference between two nodes shown.
#[derive(Debug, Serialize)]
pub struct EdgeView {
    pub owner: String,
    pub dependent: String,
    pub block_owner_deletion: bool,
}

#[derive(Debug, Serialize)]
pub struct GraphView {
    pub nodes: Vec<NodeView>,
    pub edges: Vec<EdgeView>,
}

pub fn router(collector: Arc<Collector>) -> Router {
    Router::new()
        .route("/debug/graph", get(serve))
        .with_state(collector)
}

impl GraphView {
    /// The neighbourhood of `uid` (see [`crate::graph::Graph::neighbourhood`]), with the kinds
    /// of `resources`.
    pub fn of(graph: &Graph, resources: &Resources, uid: Uid) -> Self {
        let uids = graph.neighbourhood(uid);
        let shown: HashSet<Uid> = uids.iter().copied().collect();
        let mut view = Self {
            nodes: Vec::new(),
            edges: Vec::new(),
        };
        for uid in uids {
            let Some(node) = graph.node(uid) else {
                continue;
            };
            view.nodes.push(NodeView {
                uid: uid.to_string(),
                kind: node
                    .resource
                    .and_then(|r| resources.get(r))
                    .map(|r| r.api.kind.clone()),
                namespace: node.namespace().map(str::to_owned),
                name: node.name.to_string(),
                flags: node.flags.names(),
            });
            for link in node.owners.iter().filter(|l| shown.contains(&l.uid)) {
                view.edges.push(EdgeView {
                    owner: link.uid.to_string(),
                    dependent: uid.to_string(),
                    block_owner_deletion: link.block_owner_deletion,
                });
            }
        }
        view
    }
}

async fn serve(
    State(collector): State<Arc<Collector>>,
    Query(params): Query<GraphParams>,
) -> Response {
    let Some(uid) = params.uid else {
        return (
            StatusCode::BAD_REQUEST,
            "give the object's uid: /debug/graph?uid=…\n",
        )
            .into_response();
    };
    let view = GraphView::of(
        &collector.cx.graph(),
        &collector.cx.resources(),
        Uid::parse(&uid),
    );
    if view.nodes.is_empty() {
        return (
            StatusCode::NOT_FOUND,
            format!("{uid} is not in the graph\n"),
        )
            .into_response();
    }
    match params.format.as_deref() {
        Some("dot") => ([(header::CONTENT_TYPE, "text/vnd.graphviz")], dot(&view)).into_response(),
        None | Some("json") => axum::Json(view).into_response(),
        Some(other) => (
            StatusCode::BAD_REQUEST,
            format!("unknown format {other:?}: json or dot\n"),
        )
            .into_response(),
    }
}

/// Graphviz DOT: one box per object (dashed when not seen), an edge from each owner to its
/// dependents (bold when it blocks the owner's deletion).
pub fn dot(view: &GraphView) -> String {
    let mut out = String::from("digraph ownership {\n  rankdir=TB;\n  node [shape=box];\n");
    for node in &view.nodes {
        let name = match &node.namespace {
            Some(ns) => format!("{ns}/{}", node.name),
            None => node.name.clone(),
        };
        let label = format!(
            "{} {}\\n{}",
            node.kind.as_deref().unwrap_or("?"),
            name,
            node.flags.join(",")
        );
        let style = if node.flags.contains(&"virtual") {
            ", style=dashed"
        } else {
            ""
        };
        out.push_str(&format!(
            "  \"{}\" [label=\"{}\"{style}];\n",
            node.uid,
            label.replace('"', "'")
        ));
    }
    for edge in &view.edges {
        let style = if edge.block_owner_deletion {
            " [style=bold]"
        } else {
            ""
        };
        out.push_str(&format!(
            "  \"{}\" -> \"{}\"{style};\n",
            edge.owner, edge.dependent
        ));
    }
    out.push_str("}\n");
    out
}
