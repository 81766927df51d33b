//! One cascade: a tree is created in a namespace of its own, the collectors get a moment to
//! see it, then the owner is deleted (or, for the limit, every object is deleted by a plain
//! client loop), and the time until the last object is gone and the API requests on
//! ConfigMaps per collected object are measured.

use std::time::{Duration, Instant};

use anyhow::Result;
use futures::{StreamExt, TryStreamExt};
use kube::api::{DeleteParams, PropagationPolicy};

use crate::plane::Plane;
use crate::tree::{OWNER, Shape, Tree};

/// How the tree is deleted.
#[derive(Debug, Clone)]
pub enum Deletion {
    /// The owner is deleted with this policy; a garbage collector does the rest.
    Owner(PropagationPolicy),
    /// A client deletes every object itself, `concurrency` requests at a time.
    Loop,
}

#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub seconds: f64,
    /// Requests on ConfigMaps (all verbs but WATCH) per dependent, the benchmark's own
    /// deletions not counted.
    pub requests_per_object: f64,
}

/// Time for the collectors' watches to deliver every object created before the deletion.
pub const SETTLE: Duration = Duration::from_secs(2);
/// Time for calls still in flight when the last object went to be counted.
const TRAILING: Duration = Duration::from_secs(2);
/// The longest a cascade may take.
const LIMIT: Duration = Duration::from_secs(900);

pub async fn run(
    plane: &Plane,
    shape: Shape,
    n: usize,
    concurrency: usize,
    deletion: Deletion,
) -> Result<Outcome> {
    let namespace = plane.namespace("bench", &[]).await?;
    let tree = Tree::create(&plane.client, &namespace, shape, n, concurrency, &[], 1).await?;
    tokio::time::sleep(SETTLE).await;
    let gone = tree.watch_until_gone(LIMIT).await?;
    let before = plane.requests("configmaps").await?;
    let started = Instant::now();
    let own = match deletion {
        Deletion::Owner(policy) => {
            let params = DeleteParams {
                propagation_policy: Some(policy),
                ..Default::default()
            };
            tree.api.delete(OWNER, &params).await?;
            1
        }
        Deletion::Loop => {
            // Each request a task of its own, on every worker thread, and its answer read
            // but not decoded: as little client work as a DELETE can take.
            let url = tree.api.resource_url();
            futures::stream::iter(&tree.names)
                .map(|name| {
                    let client = plane.client.clone();
                    let request = http::Request::delete(format!("{url}/{name}")).body(Vec::new());
                    tokio::spawn(async move {
                        client
                            .request_text(request?)
                            .await
                            .map_err(anyhow::Error::from)
                    })
                })
                .buffer_unordered(concurrency)
                .map(|joined| joined?)
                .try_collect::<Vec<_>>()
                .await?;
            tree.names.len()
        }
    };
    let finished = gone.await??;
    tokio::time::sleep(TRAILING).await;
    let after = plane.requests("configmaps").await?;
    plane.drop_namespace(&namespace).await?;
    Ok(Outcome {
        seconds: finished.duration_since(started).as_secs_f64(),
        requests_per_object: (after - before - own as f64) / n as f64,
    })
}
