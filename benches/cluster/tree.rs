//! The objects a cascade deletes: an owner ConfigMap and N ConfigMap dependents, flat or in a
//! tree three levels deep, created with a fixed number of requests in flight; and a watch that
//! tells the instant the last of them is gone.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, ResourceExt};
use syncgc::names::DELETION_ORDER_ANNOTATION;
use tokio::sync::oneshot;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// N dependents of the owner.
    Flat,
    /// Three levels below the owner: f, f² and the rest of N (f the cube root of N).
    Tree,
}

impl Shape {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Flat => "flat",
            Self::Tree => "3-level tree",
        }
    }

    /// How many objects each level below the owner holds; their sum is `n`.
    pub fn levels(self, n: usize) -> Vec<usize> {
        match self {
            Self::Flat => vec![n],
            Self::Tree => {
                let f = (n as f64).cbrt().round().max(1.0) as usize;
                vec![f, f * f, n.saturating_sub(f + f * f)]
            }
        }
    }
}

/// The objects of one cascade, in one namespace.
pub struct Tree {
    pub api: Api<ConfigMap>,
    /// The same, for metadata only.
    meta: Api<PartialObjectMeta<ConfigMap>>,
    /// Every object's name, owner first.
    pub names: Vec<String>,
    /// Every object's uid.
    pub uids: HashSet<String>,
}

pub const OWNER: &str = "owner";

impl Tree {
    /// Creates the owner (with `annotations`) and `n` dependents in `shape` in `namespace`,
    /// `concurrency` requests at a time. Each reference blocks its owner's deletion. With
    /// `waves` over 1, the owner's own dependents are spread evenly over that many waves of
    /// `syncgc.io/deletion-order` (the first created in the highest).
    pub async fn create(
        client: &Client,
        namespace: &str,
        shape: Shape,
        n: usize,
        concurrency: usize,
        annotations: &[(&str, &str)],
        waves: usize,
    ) -> Result<Self> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let owner = ConfigMap {
            metadata: ObjectMeta {
                name: Some(OWNER.into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        let owner = api.create(&PostParams::default(), &owner).await?;
        let mut names = vec![OWNER.to_owned()];
        let mut uids = HashSet::from([owner.metadata.uid.clone().unwrap_or_default()]);
        // The level above: (name, uid) of each object.
        let mut above = vec![(OWNER.to_owned(), owner.metadata.uid.unwrap_or_default())];
        for (level, count) in shape.levels(n).into_iter().enumerate() {
            let objects = (0..count).map(|i| {
                let (owner_name, owner_uid) = &above[i % above.len()];
                let wave = (waves - 1 - i * waves / count).to_string();
                ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(format!("level{}-{i}", level + 1)),
                        annotations: (level == 0 && waves > 1).then(|| {
                            BTreeMap::from([(DELETION_ORDER_ANNOTATION.to_owned(), wave)])
                        }),
                        owner_references: Some(vec![reference(
                            owner_name.clone(),
                            owner_uid.clone(),
                        )]),
                        ..Default::default()
                    },
                    ..Default::default()
                }
            });
            let created: Vec<(String, String)> = futures::stream::iter(objects)
                .map(|object| {
                    let api = api.clone();
                    async move {
                        let created = api.create(&PostParams::default(), &object).await?;
                        Ok::<_, kube::Error>((
                            created.metadata.name.unwrap_or_default(),
                            created.metadata.uid.unwrap_or_default(),
                        ))
                    }
                })
                .buffer_unordered(concurrency)
                .try_collect()
                .await
                .context("creating the dependents")?;
            for (name, uid) in &created {
                names.push(name.clone());
                uids.insert(uid.clone());
            }
            above = created;
        }
        Ok(Self {
            api,
            meta: Api::namespaced(client.clone(), namespace),
            names,
            uids,
        })
    }

    /// Watches the objects; returns once the watch has listed them, with a task that ends at
    /// the instant the last of them is gone (or fails after `limit`).
    pub async fn watch_until_gone(
        &self,
        limit: Duration,
    ) -> Result<tokio::task::JoinHandle<Result<Instant>>> {
        let (listed, ready) = oneshot::channel();
        let api = self.meta.clone();
        let mut remaining = self.uids.clone();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed);
            let mut relisted: Option<HashSet<String>> = None;
            let watch = watcher(api, watcher::Config::default()).default_backoff();
            let mut watch = std::pin::pin!(watch);
            let deadline = tokio::time::sleep(limit);
            let mut deadline = std::pin::pin!(deadline);
            loop {
                let event = tokio::select! {
                    () = &mut deadline => bail!("{} objects still there after {limit:?}", remaining.len()),
                    event = watch.next() => event.context("the watch ended")?,
                };
                let uid =
                    |o: &PartialObjectMeta<ConfigMap>| o.metadata.uid.clone().unwrap_or_default();
                match event {
                    Ok(Event::Delete(o)) => {
                        remaining.remove(&uid(&o));
                    }
                    Ok(Event::Init) => relisted = Some(HashSet::new()),
                    Ok(Event::InitApply(o)) => {
                        if let Some(seen) = &mut relisted {
                            seen.insert(uid(&o));
                        }
                    }
                    Ok(Event::InitDone) => {
                        if let Some(seen) = relisted.take() {
                            remaining.retain(|u| seen.contains(u));
                        }
                        if let Some(listed) = listed.take() {
                            let _ = listed.send(());
                        }
                    }
                    Ok(Event::Apply(_)) => {}
                    Err(err) => eprintln!("  watch: {err}"),
                }
                if remaining.is_empty() && listed.is_none() {
                    return Ok(Instant::now());
                }
            }
        });
        ready.await.context("the watch ended before it listed")?;
        Ok(task)
    }
}

/// A reference to the ConfigMap `owner`, blocking its foreground deletion.
pub fn reference_to(owner: &ConfigMap) -> Result<OwnerReference> {
    Ok(reference(
        owner.name_any(),
        owner.uid().context("the owner's uid")?,
    ))
}

/// A reference to the ConfigMap `name` (`uid`), blocking its foreground deletion.
fn reference(name: String, uid: String) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name,
        uid,
        block_owner_deletion: Some(true),
        controller: None,
    }
}

/// Creates `owner`, then `dependents` ConfigMaps named after it (`NAME-0`, `NAME-1`, …) that
/// refer to it.
pub async fn owner_with_dependents(
    api: &Api<ConfigMap>,
    owner: ConfigMap,
    dependents: usize,
) -> Result<()> {
    let owner = api.create(&PostParams::default(), &owner).await?;
    let (name, reference) = (owner.name_any(), reference_to(&owner)?);
    for d in 0..dependents {
        let dependent = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("{name}-{d}")),
                owner_references: Some(vec![reference.clone()]),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &dependent).await?;
    }
    Ok(())
}
