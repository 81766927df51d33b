//! The local control plane (hack/cluster.sh) and the syncgc processes the benchmark runs
//! against it: switching kube-controller-manager between its modes and client limits, starting
//! `syncgc run`, reading the apiserver's request counters and a process's resident memory.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use syncgc::webhook::admit::UnarmedDelete;
use syncgc::webhook::registration::{
    Coverage, GuardScope, Registration, ServerVersion, WebhookClient,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How kube-controller-manager runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kcm {
    /// Whether its garbage collector runs (`hack/cluster.sh kcm gc`, else `nogc`).
    pub gc: bool,
    pub qps: u32,
    pub burst: u32,
    /// `--concurrent-gc-syncs`: its garbage collector's workers.
    pub gc_syncs: u32,
}

impl Kcm {
    /// kube-controller-manager's defaults: `--kube-api-qps=20 --kube-api-burst=30`, 20 workers.
    pub const DEFAULT_LIMITS: Self = Self {
        gc: true,
        qps: 20,
        burst: 30,
        gc_syncs: 20,
    };

    /// A limit that does not hold anything back, and `concurrency` workers.
    pub fn unthrottled(gc: bool, concurrency: u32) -> Self {
        Self {
            gc,
            qps: UNTHROTTLED_QPS,
            burst: UNTHROTTLED_BURST,
            gc_syncs: concurrency,
        }
    }
}

pub const UNTHROTTLED_QPS: u32 = 1000;
pub const UNTHROTTLED_BURST: u32 = 2000;

const MONITORS_SYNCED: &str = "all resource monitors have synced";
/// What kube-controller-manager logs once its root CA publisher, which caches every ConfigMap,
/// has listed them.
const CONFIGMAPS_SYNCED: &str = "Caches are synced for crt configmap";
/// A line kube-controller-manager logs each time it starts.
const STARTED: &str = "FLAG: --enable-garbage-collector";
/// How long a collector may take to start over the scale phase's million objects.
const STARTS_WITHIN: Duration = Duration::from_secs(600);
/// How long the namespaces being deleted may take to go (a million objects among them).
const SETTLES_WITHIN: Duration = Duration::from_secs(1800);
/// How long a plain-HTTP GET (metrics, probes) may take.
const HTTP_GET_WITHIN: Duration = Duration::from_secs(10);

pub struct Plane {
    pub client: Client,
    root: PathBuf,
    cluster_dir: PathBuf,
    kubeconfig: PathBuf,
    certs: PathBuf,
    kcm: Option<Kcm>,
    /// The admin's client for kube-controller-manager's own secure port (its serving
    /// certificate is self-signed).
    kcm_client: Client,
}

impl Plane {
    /// Connects to the control plane `hack/cluster.sh` started (its kubeconfig in
    /// `SYNCGC_KUBECONFIG`) and makes certificates for the webhooks in `work`.
    pub async fn connect(work: &Path) -> Result<Self> {
        let kubeconfig = PathBuf::from(std::env::var("SYNCGC_KUBECONFIG").context(
            "SYNCGC_KUBECONFIG is not set: run hack/bench.sh, or `eval \"$(hack/cluster.sh env)\"` first",
        )?);
        let config = syncgc::api::config(Some(&kubeconfig)).await?;
        let kcm_port = std::env::var("SYNCGC_KCM_PORT").unwrap_or_else(|_| "26257".into());
        let mut kcm_config = config.clone();
        kcm_config.cluster_url = format!("https://127.0.0.1:{kcm_port}").parse()?;
        kcm_config.accept_invalid_certs = true;
        let kcm_client = syncgc::api::client(kcm_config)?;
        let client = syncgc::api::client(config)?;
        syncgc::api::server_version(&client)
            .await
            .context("the local control plane does not answer (hack/cluster.sh up)")?;
        let certs = work.join("certs");
        let status = Command::new(syncgc_binary())
            .args(["certs", "--out"])
            .arg(&certs)
            .args([
                "--dns",
                "localhost",
                "--dns",
                "syncgc-api.syncgc-system.svc",
            ])
            .args(["--ip", "127.0.0.1"])
            .stderr(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "syncgc certs failed");
        let cluster_dir = PathBuf::from(
            std::env::var("SYNCGC_CLUSTER_DIR").unwrap_or_else(|_| "/tmp/syncgc-cluster".into()),
        );
        Ok(Self {
            client,
            root: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            cluster_dir,
            kubeconfig,
            certs,
            kcm: None,
            kcm_client,
        })
    }

    pub fn certs(&self) -> &Path {
        &self.certs
    }

    /// Puts kube-controller-manager in `kcm`'s mode and limits; with its garbage collector,
    /// waits until the collector has synced its graph, so that it collects from the start;
    /// without, until every ConfigMap is in its caches, so that its memory is read complete.
    pub async fn kcm(&mut self, kcm: Kcm) -> Result<()> {
        if self.kcm == Some(kcm) {
            return Ok(());
        }
        let log = self.kcm_log();
        let status = Command::new(self.root.join("hack/cluster.sh"))
            .args(["kcm", if kcm.gc { "gc" } else { "nogc" }])
            .env("SYNCGC_KCM_QPS", kcm.qps.to_string())
            .env("SYNCGC_KCM_BURST", kcm.burst.to_string())
            .env("SYNCGC_KCM_GC_SYNCS", kcm.gc_syncs.to_string())
            .stderr(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "hack/cluster.sh kcm failed");
        // With its GC, until the GC has synced its graph; without, until the controller that
        // holds every ConfigMap has its cache (its memory is measured against the GC's).
        let synced = if kcm.gc {
            MONITORS_SYNCED
        } else {
            CONFIGMAPS_SYNCED
        };
        let deadline = Instant::now() + STARTS_WITHIN;
        // hack/cluster.sh leaves a kube-controller-manager that runs as asked alone.
        while !logged_since_start(&log, synced) {
            if Instant::now() > deadline {
                bail!("kube-controller-manager did not log \"{synced}\" in {STARTS_WITHIN:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        self.kcm = Some(kcm);
        Ok(())
    }

    /// Restarts kube-controller-manager in `kcm`'s mode and limits (even when it runs so
    /// already); with its garbage collector, how long from its start (its first log line)
    /// until its monitors synced, by its log's clock.
    pub async fn restart_kcm(&mut self, kcm: Kcm) -> Result<Option<Duration>> {
        let status = Command::new(self.root.join("hack/cluster.sh"))
            .args(["kcm", "none"])
            .stderr(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "hack/cluster.sh kcm none failed");
        self.kcm = None;
        self.kcm(kcm).await?;
        if !kcm.gc {
            return Ok(None);
        }
        let text = std::fs::read_to_string(self.kcm_log())?;
        let start = text.rfind(STARTED).context("no start in the log")?;
        let text = &text[text[..start].rfind('\n').map_or(0, |i| i + 1)..];
        let started = text
            .lines()
            .next()
            .and_then(klog_time)
            .context("no time on the start line")?;
        let synced = text
            .lines()
            .find(|l| l.contains(MONITORS_SYNCED))
            .and_then(klog_time)
            .context("no time on the synced line")?;
        Ok(Some(synced.saturating_sub(started)))
    }

    /// kube-controller-manager's resident memory, in bytes.
    pub fn kcm_rss(&self) -> Result<u64> {
        let pid =
            std::fs::read_to_string(self.cluster_dir.join("pids/kube-controller-manager.pid"))
                .context("kube-controller-manager is not running")?;
        rss(pid.trim().parse()?)
    }

    /// The bytes of kube-controller-manager's Go heap in use right after a full collection
    /// (`HeapInuse` of its heap profile with `gc=1`): what its objects hold at least, without
    /// the headroom Go's collector leaves between collections or memory not yet returned.
    /// Right after a start it may not yet trust client certificates (it reads their CA from
    /// the cluster) and take the admin for anonymous: asked again for up to 30 seconds.
    pub async fn kcm_heap_in_use(&self) -> Result<u64> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let profile = loop {
            let request = http::Request::get("/debug/pprof/heap?gc=1&debug=1").body(Vec::new())?;
            match self.kcm_client.request_text(request).await {
                Ok(profile) => break profile,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(err) => return Err(err).context("kube-controller-manager's heap profile"),
            }
        };
        heap_in_use(&profile).context("no HeapInuse in kube-controller-manager's heap profile")
    }

    fn kcm_log(&self) -> PathBuf {
        self.cluster_dir.join("logs/kube-controller-manager.log")
    }

    /// Starts `syncgc run` with `args` besides its addresses, certificates and kubeconfig, and
    /// waits until it is ready (every watch listed).
    pub async fn syncgc(&self, args: &[String]) -> Result<Syncgc> {
        self.syncgc_with_env(args, &[]).await
    }

    /// [`Plane::syncgc`] with environment variables of its own.
    pub async fn syncgc_with_env(&self, args: &[String], env: &[(&str, &str)]) -> Result<Syncgc> {
        let (metrics, webhook) = (free_port()?, free_port()?);
        let child = Command::new(syncgc_binary())
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            // Every address: the aggregation layer calls syncgc's API at the node's.
            .args(["--webhook-addr", &format!("0.0.0.0:{}", webhook.port())])
            .args(["--metrics-addr", &metrics.to_string()])
            .arg("--tls-cert")
            .arg(self.certs.join("tls.crt"))
            .arg("--tls-key")
            .arg(self.certs.join("tls.key"))
            .args(["--leader-election=false"])
            .args(args)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .context("starting syncgc run")?;
        let syncgc = Syncgc {
            child,
            metrics,
            webhook,
        };
        let deadline = Instant::now() + STARTS_WITHIN;
        while http_get(metrics, "/readyz").await.map(|(s, _)| s).ok() != Some(200) {
            if Instant::now() > deadline {
                bail!("syncgc run did not become ready in {STARTS_WITHIN:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(syncgc)
    }

    /// Registers (again) syncgc's webhook at `webhook` as `name`, for the namespaces labelled
    /// `label`, with the rules for every resource.
    pub async fn register_webhook(
        &self,
        name: &str,
        webhook: SocketAddr,
        label: (&str, &str),
        timeout_seconds: i32,
    ) -> Result<Api<MutatingWebhookConfiguration>> {
        let webhooks: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let mut registration = Registration {
            name: name.into(),
            client: WebhookClient::Url(format!("https://{webhook}/mutate")),
            ca_bundle: std::fs::read(self.certs().join("ca.crt"))?,
            timeout_seconds,
            excluded_namespaces: vec![],
            unarmed_delete: UnarmedDelete::Allow,
            guards: GuardScope::Selected,
            server: self.server().await?,
            scope: Coverage::Every,
            own_user: None,
        }
        .configuration();
        let (key, value) = label;
        for hook in registration.webhooks.iter_mut().flatten() {
            hook.namespace_selector = Some(serde_json::from_value(
                serde_json::json!({ "matchLabels": { key: value } }),
            )?);
        }
        let _ = webhooks.delete(name, &DeleteParams::default()).await;
        webhooks
            .create(&PostParams::default(), &registration)
            .await?;
        Ok(webhooks)
    }

    /// The admin kubeconfig, for the commands the benchmark runs.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Requests the apiserver has served, all verbs but WATCH, on every resource.
    pub async fn all_requests(&self) -> Result<f64> {
        self.requests("").await
    }

    /// Requests the apiserver has served on `resource` (every resource when empty), all verbs
    /// but WATCH (the benchmark's own watch is open throughout).
    pub async fn requests(&self, resource: &str) -> Result<f64> {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        let text = self.client.request_text(request).await?;
        let wanted = format!("resource=\"{resource}\"");
        Ok(text
            .lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter(|l| {
                (resource.is_empty() || l.contains(&wanted)) && !l.contains("verb=\"WATCH\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// Waits (up to five minutes) until the apiserver uses less than a fifth of a core over
    /// five seconds: the work a burst of changes brought it (a new CRD's OpenAPI, say) is
    /// done, as it is on a cluster at rest.
    pub async fn apiserver_at_rest(&self) -> Result<()> {
        let cpu = || async {
            let request = http::Request::get("/metrics").body(Vec::new())?;
            let text = self.client.request_text(request).await?;
            text.lines()
                .find(|l| l.starts_with("process_cpu_seconds_total "))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .context("the apiserver's process_cpu_seconds_total")
        };
        let window = Duration::from_secs(5);
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut before = cpu().await?;
        loop {
            tokio::time::sleep(window).await;
            let now = cpu().await?;
            let used = (now - before) / window.as_secs_f64();
            if used < 0.2 || Instant::now() > deadline {
                eprintln!("the apiserver uses {used:.2} cores");
                return Ok(());
            }
            before = now;
        }
    }

    /// The control plane's Kubernetes version, as the webhook registration depends on it.
    pub async fn server(&self) -> Result<ServerVersion> {
        syncgc::api::server_version(&self.client)
            .await?
            .parse()
            .map_err(anyhow::Error::msg)
    }

    /// A new namespace named `prefix-N`, with `labels`.
    pub async fn namespace(&self, prefix: &str, labels: &[(&str, &str)]) -> Result<String> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let namespace = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{prefix}-")),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        let created = api.create(&PostParams::default(), &namespace).await?;
        Ok(created.metadata.name.unwrap_or_default())
    }

    /// Waits until no namespace is being deleted (their objects would count in measurements of
    /// the whole cluster).
    pub async fn settle_namespaces(&self) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let deadline = Instant::now() + SETTLES_WITHIN;
        loop {
            let terminating = api
                .list(&Default::default())
                .await?
                .items
                .iter()
                .filter(|ns| ns.metadata.deletion_timestamp.is_some())
                .count();
            if terminating == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{terminating} namespaces still being deleted after {SETTLES_WITHIN:?}");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Deletes a namespace without waiting for it to go.
    pub async fn drop_namespace(&self, name: &str) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        api.delete(name, &DeleteParams::default()).await?;
        Ok(())
    }
}

/// A running `syncgc run`, stopped when dropped.
pub struct Syncgc {
    child: Child,
    pub metrics: SocketAddr,
    pub webhook: SocketAddr,
}

impl Syncgc {
    /// Its resident memory, in bytes.
    pub fn rss(&self) -> Result<u64> {
        rss(self.child.id())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The sum of a metric's series whose line starts with `series`.
    pub async fn metric(&self, series: &str) -> Result<f64> {
        metric(self.metrics, series, "").await
    }
}

impl Drop for Syncgc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process's resident memory (VmRSS), in bytes.
/// The sum of the series on the metrics port `metrics` whose line starts with `series` and
/// holds `label` (a `name="value"`, or nothing).
pub async fn metric(metrics: SocketAddr, series: &str, label: &str) -> Result<f64> {
    let (_, text) = http_get(metrics, "/metrics").await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with(series) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

pub fn rss(pid: u32) -> Result<u64> {
    status_bytes(pid, "VmRSS")
}

/// A process's peak resident memory (VmHWM), in bytes.
pub fn high_water_mark(pid: u32) -> Result<u64> {
    status_bytes(pid, "VmHWM")
}

/// The memory reading `field` of `/proc/PID/status`, in bytes.
fn status_bytes(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no {field}"))?;
    Ok(kib * 1024)
}

/// The CPU time (user and system) the threads of process `pid` whose name `thread` accepts have
/// used so far, in seconds; a thread that ended took its time with it.
pub fn cpu_seconds(pid: u32, thread: impl Fn(&str) -> bool) -> Result<f64> {
    let mut ticks = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(stat) = std::fs::read_to_string(task?.path().join("stat")) else {
            continue;
        };
        // `PID (NAME) STATE …`: the name may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !thread(&stat[open + 1..close]) {
            continue;
        }
        // utime and stime: fields 14 and 15, the 12th and 13th after the name.
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        ticks += fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    }
    // The kernel's USER_HZ: 100 on every Linux architecture syncgc is built for.
    Ok(ticks as f64 / 100.0)
}

/// The first process whose name (`/proc/PID/comm`) is `name`.
pub fn process_named(name: &str) -> Result<u32> {
    std::fs::read_dir("/proc")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
        })
        .with_context(|| format!("no process named {name}"))
}

pub fn syncgc_binary() -> &'static str {
    env!("CARGO_BIN_EXE_syncgc")
}

/// `HeapInuse` from the `runtime.MemStats` lines of a Go heap profile in text (`debug=1`).
fn heap_in_use(profile: &str) -> Option<u64> {
    profile
        .lines()
        .find_map(|line| line.strip_prefix("# HeapInuse = "))
        .and_then(|n| n.trim().parse().ok())
}

pub fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Whether kube-controller-manager has logged `line` since it last started.
fn logged_since_start(log: &Path, line: &str) -> bool {
    std::fs::read_to_string(log).is_ok_and(|text| {
        let start = text.rfind(STARTED).unwrap_or(0);
        text[start..].contains(line)
    })
}

/// The time of day of a klog line (`I1123 00:47:33.123456 …`), as a duration since midnight.
fn klog_time(line: &str) -> Option<Duration> {
    let time = line.split_whitespace().nth(1)?;
    let mut parts = time.split(':');
    let (h, m, s): (u64, u64, f64) = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    Some(Duration::from_secs(h * 3600 + m * 60) + Duration::from_secs_f64(s))
}

/// A plain-HTTP GET: the status and the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    // A process stopped (SIGSTOP) or stuck still accepts connections in its kernel backlog.
    let response = tokio::time::timeout(HTTP_GET_WITHIN, async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        anyhow::Ok(response)
    })
    .await
    .with_context(|| format!("GET {addr}{path}: no answer within {HTTP_GET_WITHIN:?}"))??;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no HTTP status")?;
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}
