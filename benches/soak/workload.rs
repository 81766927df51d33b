//! The workload: trees of ConfigMaps of mixed shapes (an owner, armed three times in five and
//! ordered in waves one armed time in three, with 1 to 6 dependents, some shared with an anchor
//! that lives, some with grandchildren, one at times created an instant before the owner's
//! DELETE), each deleted as soon as it is made (armed, or in the background, the foreground or
//! orphaning); what of each tree must go and what stays; and what stayed, deleted once its tree
//! is collected.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;
use syncgc::names::{DELETION_ORDER_ANNOTATION, SYNCHRONOUS_ANNOTATION, TIMEOUT_ANNOTATION};

use crate::observer::Observer;
use crate::{LABEL, Rng, TIMEOUT};

/// A tree the workload deleted, and what of it must go.
pub struct Pending {
    pub owner: String,
    pub deleted: Instant,
    pub must_go: Vec<String>,
    /// What stays once the tree is collected (dependents with another owner, an orphaning's
    /// dependents), as `namespace/name`: retired then, see [`retire`].
    pub stays: Vec<String>,
    /// syncgc collects it (an armed owner's, or any in standalone mode); in cooperative mode
    /// kube-controller-manager collects the others, and how soon is not syncgc's to answer for.
    pub by_syncgc: bool,
}

#[derive(Default)]
pub struct Counts {
    pub trees: u64,
    pub objects: u64,
    pub deletes: BTreeMap<&'static str, u64>,
    pub collected: Vec<Duration>,
    /// Trees kube-controller-manager had not collected in time (cooperative mode).
    pub late_by_kcm: u64,
    /// Objects deleted by the workload once the tree they stayed from was collected.
    pub retired: u64,
}

pub fn config_map(name: &str, role: &str, owners: Vec<OwnerReference>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(LABEL.to_owned(), role.to_owned())].into()),
            owner_references: (!owners.is_empty()).then_some(owners),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn reference(owner: &ConfigMap, block: bool) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.name_any(),
        uid: owner.uid().unwrap_or_default(),
        block_owner_deletion: Some(block),
        controller: None,
    }
}

/// One tree: created, then deleted as its shape says; returns what must go.
pub async fn one_tree(
    api: &Api<ConfigMap>,
    anchor: &ConfigMap,
    id: u64,
    standalone: bool,
    rng: &mut Rng,
    counts: &Mutex<Counts>,
) -> Result<Pending> {
    let armed = rng.chance(60);
    let ordered = armed && rng.chance(30);
    let mut owner = config_map(&format!("t{id}"), "tree", vec![]);
    if armed {
        owner.metadata.annotations = Some(
            [
                (SYNCHRONOUS_ANNOTATION.to_owned(), "true".to_owned()),
                (
                    TIMEOUT_ANNOTATION.to_owned(),
                    syncgc::duration::format(TIMEOUT),
                ),
            ]
            .into(),
        );
    }
    let owner = api.create(&PostParams::default(), &owner).await?;
    let ns = owner.namespace().unwrap_or_default();
    let mut must_go = vec![format!("{ns}/{}", owner.name_any())];
    let mut survivors = Vec::new();
    let n = 1 + rng.below(6);
    for d in 0..n {
        let name = format!("t{id}-d{d}");
        let mut owners = vec![reference(&owner, rng.chance(70))];
        let shared = rng.chance(15);
        if shared {
            owners.push(reference(anchor, false));
        }
        let mut dependent = config_map(&name, if shared { "survivor" } else { "tree" }, owners);
        if ordered {
            dependent.metadata.annotations = Some(
                [(
                    DELETION_ORDER_ANNOTATION.to_owned(),
                    rng.below(3).to_string(),
                )]
                .into(),
            );
        }
        let dependent = api.create(&PostParams::default(), &dependent).await?;
        if shared {
            survivors.push(format!("{ns}/{name}"));
        } else {
            must_go.push(format!("{ns}/{name}"));
        }
        if !shared && rng.chance(30) {
            for g in 0..1 + rng.below(2) {
                let grandchild = format!("{name}-g{g}");
                api.create(
                    &PostParams::default(),
                    &config_map(
                        &grandchild,
                        "tree",
                        vec![reference(&dependent, rng.chance(50))],
                    ),
                )
                .await?;
                must_go.push(format!("{ns}/{grandchild}"));
            }
        }
    }
    // A dependent created an instant before its owner's DELETE.
    if rng.chance(30) {
        let late = format!("t{id}-late");
        api.create(
            &PostParams::default(),
            &config_map(&late, "tree", vec![reference(&owner, true)]),
        )
        .await?;
        must_go.push(format!("{ns}/{late}"));
    }
    let (params, how) = if armed {
        (DeleteParams::background(), "armed")
    } else {
        match rng.below(3) {
            0 => (DeleteParams::background(), "background"),
            1 => (DeleteParams::foreground(), "foreground"),
            _ => (DeleteParams::orphan(), "orphan"),
        }
    };
    api.delete(&owner.name_any(), &params).await?;
    {
        let mut counts = counts.lock();
        counts.trees += 1;
        counts.objects += must_go.len() as u64 + survivors.len() as u64;
        *counts.deletes.entry(how).or_default() += 1;
    }
    let mut stays = survivors;
    if how == "orphan" {
        // Its dependents stay and lose the reference, but for one no watch of the garbage
        // collector's had reported yet, which it collects later (upstream does the same:
        // docs/limitations.md): they are not held to survive, and the check at the end finds
        // none still referring to the owner.
        stays.extend(must_go.drain(1..));
    }
    Ok(Pending {
        owner: must_go[0].clone(),
        deleted: Instant::now(),
        must_go,
        stays,
        by_syncgc: armed || standalone,
    })
}

/// Deletes what stayed of collected trees (`namespace/name`), the observer told first so that
/// it does not hold a survivor to survive: the objects alive stay about as many over the run,
/// and a replica's memory follows what it leaks, not what the workload keeps. What cannot be
/// deleted now (the apiserver restarting or refusing) is tried again next time.
pub async fn retire(
    client: &Client,
    observer: &Mutex<Observer>,
    retiring: &mut Vec<String>,
    counts: &Mutex<Counts>,
) {
    let mut again = Vec::new();
    for key in retiring.drain(..) {
        let Some((ns, name)) = key.split_once('/') else {
            continue;
        };
        observer.lock().retired.insert(key.clone());
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => counts.lock().retired += 1,
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(_) => again.push(key),
        }
    }
    *retiring = again;
}
