//! A real operator's teardown, on the real node: an operator Pod
//! (`examples/finalizer-operator.rs`, with its own ServiceAccount and Role) and 20 ConfigMaps
//! carrying its finalizer in one namespace. Deleted two ways, in turns: with syncgc
//! (cooperative, its webhook registered for the namespace, the operator annotated
//! `syncgc.io/handles-finalizers`) by `kubectl delete namespace` alone, which syncgc turns into
//! the right order by holding what the operator needs; and by hand in the right order, without
//! syncgc: the ConfigMaps first, until the operator has removed their finalizers, then the
//! namespace. Measured: from the first DELETE until the namespace is gone.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, ResourceExt};

use crate::operator::{HANDLED, IMAGE, Operator};
use crate::plane::{Kcm, Plane};
use crate::report::{Goal, Report, quantile, round};
use crate::{Settings, cooperative_syncgc, kubectl};

/// The name of the webhook's registration, and the label of the namespaces it serves.
const NAME: &str = "syncgc-bench-teardown";
/// Teardowns of each kind, in turns.
const ROUNDS: usize = 3;
/// ConfigMaps carrying the operator's finalizer.
const RESOURCES: usize = 20;
/// The operator acts within this; a namespace goes within [`GONE_WITHIN`].
const ACTS_WITHIN: Duration = Duration::from_secs(120);
const GONE_WITHIN: Duration = Duration::from_secs(300);

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    eprintln!("teardown: a real operator's namespace, {ROUNDS} runs each way");
    plane.kcm(Kcm::DEFAULT_LIMITS).await?;
    import_operator()?;
    let (syncgc, first, registration) = cooperative_syncgc(settings, plane, NAME).await?;
    plane.drop_namespace(&first).await?;
    let (mut held, mut by_hand) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for hand in [round % 2 == 1, round % 2 == 0] {
            let took = teardown(plane, hand).await?;
            eprintln!(
                "teardown: {} in {took:.1?}",
                if hand { "by hand" } else { "with syncgc" }
            );
            match hand {
                true => by_hand.push(took.as_secs_f64()),
                false => held.push(took.as_secs_f64()),
            }
        }
    }
    registration.remove().await?;
    drop(syncgc);

    let (held, by_hand) = (quantile(&held, 0.5), quantile(&by_hand, 0.5));
    let table = report.table(
        format!(
            "Teardown of a real operator's namespace on the real node (its Pod removes the \
             finalizer of {RESOURCES} ConfigMaps with its own account and Role): `kubectl \
             delete namespace` alone with syncgc holding what the operator needs, against the \
             same by hand in the right order without syncgc (the ConfigMaps until gone, then \
             the namespace); from the first DELETE until the namespace is gone, medians of \
             {ROUNDS} each in turns"
        ),
        vec!["teardown", "seconds"],
    );
    table.rows.push(vec![
        "namespace deleted, syncgc holding".into(),
        round(held),
    ]);
    table
        .rows
        .push(vec!["by hand, in order".into(), round(by_hand)]);
    table
        .rows
        .push(vec!["syncgc ÷ by hand".into(), round(held / by_hand)]);
    report.target(
        "teardown: a real operator's namespace deleted at once, with syncgc ÷ by hand in order",
        held / by_hand,
        Goal::AtMost(2.0),
        "×",
    );
    Ok(())
}

/// The operator's image, built by `hack/bench.sh` beside the bench, imported into the node.
fn import_operator() -> Result<()> {
    let exe = std::env::current_exe()?;
    let release = exe
        .parent()
        .and_then(|deps| deps.parent())
        .context("the bench's directory")?;
    let operator = release.join("examples").join("finalizer-operator");
    anyhow::ensure!(
        operator.exists(),
        "{} is missing: hack/bench.sh builds it",
        operator.display()
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/image.sh");
    let out = std::process::Command::new(script)
        .env("SYNCGC_BINARY", &operator)
        .env("SYNCGC_IMAGE_REF", IMAGE)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "hack/image.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// One teardown: the operator and its resources set up in a new namespace, then deleted by
/// hand in order (`hand`) or at once with syncgc holding; how long until the namespace went.
async fn teardown(plane: &Plane, hand: bool) -> Result<Duration> {
    let labels: &[(&str, &str)] = match hand {
        true => &[],
        false => &[("syncgc.io/bench", NAME)],
    };
    let ns = plane.namespace("bench-teardown", labels).await?;
    let operator = Operator {
        handles: !hand,
        cluster: false,
    };
    for object in operator.manifests(&ns, IMAGE) {
        kubectl(&["apply", "-f", "-"], Some(&object.to_string()))?;
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(plane.client.clone(), &ns);
    let carrying = |name: String| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            finalizers: Some(vec![HANDLED.to_owned()]),
            ..Default::default()
        },
        ..Default::default()
    };
    // The operator acts: a probe carrying its finalizer goes once deleted.
    configmaps
        .create(&PostParams::default(), &carrying("probe".into()))
        .await?;
    configmaps
        .delete("probe", &DeleteParams::background())
        .await?;
    until(
        ACTS_WITHIN,
        "the operator to finalize its probe",
        || async { Ok(configmaps.get_metadata_opt("probe").await?.is_none()) },
    )
    .await?;
    for n in 0..RESOURCES {
        configmaps
            .create(&PostParams::default(), &carrying(format!("resource-{n}")))
            .await?;
    }
    if !hand {
        let accounts: Api<ServiceAccount> = Api::namespaced(plane.client.clone(), &ns);
        until(
            ACTS_WITHIN,
            "syncgc to select the operator's account",
            || async {
                Ok(accounts
                    .get_metadata_opt("operator")
                    .await?
                    .is_some_and(|a| a.labels().contains_key(syncgc::names::GUARDED_LABEL)))
            },
        )
        .await?;
    }
    // Every watch has seen the objects.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let namespaces: Api<Namespace> = Api::all(plane.client.clone());
    let started = Instant::now();
    if hand {
        for n in 0..RESOURCES {
            configmaps
                .delete(&format!("resource-{n}"), &DeleteParams::background())
                .await?;
        }
        until(
            ACTS_WITHIN,
            "the operator to finalize its resources",
            || async {
                let left = configmaps.list_metadata(&ListParams::default()).await?;
                Ok(!left
                    .items
                    .iter()
                    .any(|o| o.finalizers().iter().any(|f| f == HANDLED)))
            },
        )
        .await?;
    }
    namespaces.delete(&ns, &DeleteParams::background()).await?;
    until(GONE_WITHIN, "the namespace to go", || async {
        Ok(namespaces.get_metadata_opt(&ns).await?.is_none())
    })
    .await?;
    Ok(started.elapsed())
}

/// Polls `done` every 100 ms until it holds; fails after `within`, saying it waited for `what`.
async fn until<F, Fut>(within: Duration, what: &str, done: F) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + within;
    while !done().await? {
        anyhow::ensure!(Instant::now() < deadline, "waited {within:?} for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
