//! Workloads whose Pods take seconds to stop, on the local cluster's real node: for each kind,
//! an opted-in workload deleted with `kubectl delete` (syncgc cooperative, beside
//! kube-controller-manager's GC at its default limits), against the same workload not opted in
//! and deleted with `kubectl delete --cascade=foreground`, in turns. Measured: how long after
//! its last Pod disappears `kubectl delete` returns (the owner's release, as the user sees it),
//! and each whole delete.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, Event};

use crate::plane::{Kcm, Plane};
use crate::report::{Goal, Report, quantile, round};
use crate::workload::{KINDS, workload};
use crate::{Settings, cooperative_syncgc, kubectl};

/// The name of the webhook's registration, and the label of the namespaces it serves.
const NAME: &str = "syncgc-bench-workloads";
/// Pods start on the node within this.
const RUNNING: Duration = Duration::from_secs(120);

/// One delete: how long `kubectl delete` took, when it returned, when the workload's last Pod
/// went, and how many of its Pods were left when it returned.
struct Deleted {
    took: Duration,
    returned: Instant,
    last_pod: Instant,
    left: usize,
}

pub async fn phase(settings: &Settings, plane: &mut Plane, report: &mut Report) -> Result<()> {
    let repeats = settings.workload_repeats;
    eprintln!("workloads: {} kinds, {repeats} runs each", KINDS.len());
    plane.kcm(Kcm::DEFAULT_LIMITS).await?;
    let (syncgc, first, registration) = cooperative_syncgc(settings, plane, NAME).await?;
    plane.drop_namespace(&first).await?;
    let version: syncgc::api::ServerVersion = syncgc::api::server_version(&plane.client)
        .await?
        .parse()
        .map_err(anyhow::Error::msg)?;

    let table = report.table(
        format!(
            "Workloads whose Pods stop 3 s after SIGTERM, on the real node: `kubectl delete` of \
             the opted-in workload (syncgc cooperative) against `kubectl delete \
             --cascade=foreground` of the same workload not opted in (kube-controller-manager's \
             GC at its default limits), in turns, {repeats} runs each; the release is when \
             `kubectl delete` returned after the last Pod disappeared"
        ),
        vec![
            "workload",
            "Pods",
            "release after last Pod p50 s",
            "p99 s",
            "syncgc delete p50 s",
            "foreground delete p50 s",
            "syncgc ÷ foreground",
            "Pods left at return: syncgc / foreground",
        ],
    );
    let mut all_releases = Vec::new();
    let (mut synchronous_total, mut foreground_total, mut early) = (0.0, 0.0, 0);
    for (kind, pods) in KINDS {
        let (mut releases, mut synchronous, mut foreground) = (vec![], vec![], vec![]);
        let mut left = [0, 0];
        for _ in 0..repeats {
            for opted_in in [true, false] {
                let namespace = plane.namespace(NAME, &[("syncgc.io/bench", NAME)]).await?;
                let object = workload(kind, "app", opted_in, version.minor);
                let run = one(plane, &namespace, &object, pods).await;
                plane.drop_namespace(&namespace).await?;
                let deleted = run?;
                left[usize::from(!opted_in)] += deleted.left;
                if opted_in {
                    let after = deleted.returned.saturating_duration_since(deleted.last_pod);
                    releases.push(after.as_secs_f64());
                    synchronous.push(deleted.took.as_secs_f64());
                } else {
                    foreground.push(deleted.took.as_secs_f64());
                }
            }
        }
        let (s, f) = (quantile(&synchronous, 0.5), quantile(&foreground, 0.5));
        // A foreground delete that returned with Pods left did not wait: no baseline.
        if left[1] == 0 {
            synchronous_total += s;
            foreground_total += f;
        }
        early += left[0];
        table.rows.push(vec![
            kind.to_owned(),
            pods.to_string(),
            round(quantile(&releases, 0.5)),
            round(quantile(&releases, 0.99)),
            round(s),
            round(f),
            if left[1] == 0 {
                round(s / f)
            } else {
                "— (did not wait)".to_owned()
            },
            format!("{} / {}", left[0], left[1]),
        ]);
        all_releases.extend(releases);
    }
    report.target(
        "workloads: opted-in deletes that returned with Pods left",
        early as f64,
        Goal::AtMost(0.0),
        "",
    );
    registration.remove().await?;
    drop(syncgc);

    report.target(
        "workloads: release after the last Pod, p99 of every run",
        quantile(&all_releases, 0.99),
        Goal::AtMost(1.0),
        "s",
    );
    report.target(
        "workloads: whole delete ÷ kubectl delete --cascade=foreground (sum of medians)",
        synchronous_total / foreground_total,
        Goal::AtMost(1.0),
        "×",
    );
    Ok(())
}

/// Creates the workload `object` in `namespace`, waits until its `pods` Pods run, and deletes
/// it: plainly when it is opted in, else in the foreground, each after a pause of its own
/// between 0 and 10 s. (The kubelet confirms a stopped Pod gone on its status sync, every
/// 10 s when the first try is too early: a delete's time depends on where in that cycle it
/// starts, and runs at fixed intervals would favour one side.)
async fn one(
    plane: &Plane,
    namespace: &str,
    object: &serde_json::Value,
    pods: usize,
) -> Result<Deleted> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let opted_in = object["metadata"]["annotations"]
        .get(syncgc::names::SYNCHRONOUS_ANNOTATION)
        .is_some();
    kubectl(
        &["apply", "-n", namespace, "-f", "-"],
        Some(&object.to_string()),
    )?;
    if kind == "CronJob" {
        kubectl(
            &[
                "create",
                "job",
                "-n",
                namespace,
                "app-run",
                "--from=cronjob/app",
            ],
            None,
        )?;
    }
    let api: Api<Pod> = Api::namespaced(plane.client.clone(), namespace);
    let watch = PodWatch::start(api);
    watch
        .until(|w| w.ready == pods, RUNNING)
        .await
        .with_context(|| {
            format!("{pods} Pod(s) of the {kind} did not all run within {RUNNING:?}")
        })?;

    tokio::time::sleep(jitter()).await;
    let resource = format!("{}/app", kind.to_lowercase());
    let mut args = vec![
        "delete",
        "-n",
        namespace,
        resource.as_str(),
        "--timeout=300s",
    ];
    if !opted_in {
        args.push("--cascade=foreground");
    }
    let started = Instant::now();
    kubectl(&args, None)?;
    let returned = Instant::now();
    // Pods left: still there a second after kubectl returned (the watch may see the last
    // DELETED event a little after kubectl saw the owner go).
    let settled = returned + Duration::from_secs(1);
    watch
        .until(|w| w.gone.len() == w.seen, Duration::from_secs(120))
        .await
        .with_context(|| format!("the Pods of {resource} did not go"))?;
    let seen = watch.state();
    let last_pod = *seen.gone.iter().max().context("no Pod was seen to go")?;
    Ok(Deleted {
        took: returned - started,
        returned,
        last_pod,
        left: seen.gone.iter().filter(|at| **at > settled).count(),
    })
}

/// A pause between 0 and 10 s, different each time.
fn jitter() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    Duration::from_millis(u64::from(nanos) % 10_000)
}

/// What a watch of a namespace's Pods has seen.
#[derive(Default)]
struct Seen {
    seen: usize,
    ready: usize,
    /// When each Pod that went was seen to go.
    gone: Vec<Instant>,
}

/// A watch of the Pods of a namespace, counting those seen and ready, and when each went.
struct PodWatch {
    state: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodWatch {
    fn start(api: Api<Pod>) -> Self {
        let state = Arc::new(Mutex::new(Seen::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let mut names = std::collections::BTreeMap::<String, bool>::new();
            let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = events.next().await {
                let mut seen = shared.lock().unwrap();
                match event {
                    Event::Apply(pod) | Event::InitApply(pod) => {
                        let ready = pod
                            .status
                            .as_ref()
                            .and_then(|s| s.container_statuses.as_ref())
                            .is_some_and(|c| c.iter().all(|c| c.ready));
                        names.insert(pod.metadata.name.unwrap_or_default(), ready);
                    }
                    Event::Delete(pod) => {
                        if names
                            .remove(&pod.metadata.name.unwrap_or_default())
                            .is_some()
                        {
                            seen.gone.push(Instant::now());
                        }
                    }
                    Event::Init | Event::InitDone => {}
                }
                seen.seen = names.len() + seen.gone.len();
                seen.ready = names.values().filter(|r| **r).count();
            }
        });
        Self { state, task }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.state.lock().unwrap()
    }

    async fn until(&self, done: impl Fn(&Seen) -> bool, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while !done(&self.state()) {
            ensure!(Instant::now() < deadline, "timed out after {timeout:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
