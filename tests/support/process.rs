//! A real `syncgc run` process against the local control plane, with its webhook registered
//! for the namespaces labelled [`WEBHOOK_LABEL`] by its pid (unless it registers itself:
//! `--manage-webhook`, with `--webhook-config-name` its name). It is stopped when its handle
//! is dropped, and, for a handle that never is (a test binary's shared syncgc), when the test
//! process exits, before the next test binary starts; a watchdog shell stops it and
//! unregisters the webhook should the test process die. `/debug/graph` is on unless the
//! arguments say `--debug-graph=false`.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use syncgc::webhook::admit::UnarmedDelete;
use syncgc::webhook::registration::{Coverage, GuardScope, Registration, WebhookClient};

use super::kubeconfig_path;

/// The namespace label that selects a syncgc process's webhook; its value is the process's
/// registration name.
pub const WEBHOOK_LABEL: &str = "syncgc.io/test-webhook";

/// How long a syncgc may take to exit after SIGTERM (its shutdown delay, in-flight reviews and
/// items, the Lease's release).
const STOPS_WITHIN: Duration = Duration::from_secs(30);

pub struct Syncgc {
    pub name: String,
    pub metrics: SocketAddr,
    pub webhook: SocketAddr,
    /// The pid of `syncgc run` (the child is the watchdog shell).
    pid: String,
    /// Where its log ended before it started.
    log_from: u64,
    child: Child,
    _certs: tempfile::TempDir,
}

/// Held for its whole run by each test of a binary whose tests run one at a time: every
/// syncgc acts in every namespace, so an owner left waiting while its test's syncgc is stopped
/// (killed and restarted, or deleted before it starts) would be collected by another test's,
/// and such tests start syncgc processes of their own, or restart, install or skew what every
/// other test would see.
pub async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    ALONE.lock().await
}

/// [`alone`], for a test that is not async.
pub fn alone_blocking() -> tokio::sync::MutexGuard<'static, ()> {
    ALONE.blocking_lock()
}

static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

impl Syncgc {
    /// Starts `syncgc run` with `args` on top of the defaults, registers its webhook and waits
    /// until it is ready (every watch listed).
    pub fn start(name: &str, args: &[&str]) -> Self {
        Self::start_as(name, &kubeconfig_path(), args)
    }

    /// [`Syncgc::start`] from async code, on a thread that may block.
    pub async fn start_async(name: &str, args: &[&str]) -> Self {
        let name = name.to_owned();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Self::start(&name, &args)
        })
        .await
        .unwrap()
    }

    /// Like [`Syncgc::start`], with syncgc's own credentials taken from `kubeconfig`.
    pub fn start_as(name: &str, kubeconfig: &str, args: &[&str]) -> Self {
        let this = Self::launch(|| Self::spawn_as(name, kubeconfig, args, "", None));
        this.wait_ready(Duration::from_secs(60));
        this
    }

    /// Like [`Syncgc::start`], on a clock `skew` off this machine's (`+120s`, `-120s`), by
    /// libfaketime (Debian's `faketime`, which `hack/cluster.sh install` installs); the
    /// monotonic clock stays true.
    pub fn start_skewed(name: &str, skew: &str, args: &[&str]) -> Self {
        let library = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
        assert!(
            std::path::Path::new(library).exists(),
            "{library}: install Debian's faketime (hack/cluster.sh install does)"
        );
        let prefix = format!("LD_PRELOAD={library} FAKETIME={skew} FAKETIME_DONT_FAKE_MONOTONIC=1");
        let this = Self::launch(|| Self::spawn_as(name, &kubeconfig_path(), args, &prefix, None));
        this.wait_ready(Duration::from_secs(60));
        this
    }

    /// Like [`Syncgc::start`], serving with `of`'s certificate and key, as the replicas of one
    /// install share theirs.
    pub fn start_replica(of: &Syncgc, name: &str, args: &[&str]) -> Self {
        let pair = Some(of._certs.path());
        let this = Self::launch(|| Self::spawn_as(name, &kubeconfig_path(), args, "", pair));
        this.wait_ready(Duration::from_secs(60));
        this
    }

    /// Like [`Syncgc::start`], without waiting until it is ready: once it serves `/readyz`.
    pub fn spawn(name: &str, args: &[&str]) -> Self {
        let this = Self::launch(|| Self::spawn_as(name, &kubeconfig_path(), args, "", None));
        this.wait_serving(Duration::from_secs(60));
        this
    }

    /// Starts syncgc with `spawn` until it has bound its addresses: again, on other ports, when
    /// one that [`free_port`] found free was taken before syncgc bound it.
    fn launch(spawn: impl Fn() -> Self) -> Self {
        const ATTEMPTS: u32 = 3;
        for attempt in 1.. {
            let mut this = spawn();
            match this.bound(Duration::from_secs(60)) {
                Ok(()) => return this,
                Err(said) if said.contains("Address already in use") && attempt < ATTEMPTS => {
                    eprintln!("syncgc {}: a port was taken; starting it again", this.name);
                }
                Err(said) => panic!("syncgc {} exited as it started:\n{said}", this.name),
            }
        }
        unreachable!()
    }

    /// Waits until syncgc says it serves its metrics address (so that what answers there is
    /// this process); `Err` with what it said if it exits first.
    fn bound(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let said = self.said();
            if said.contains("serving /metrics") {
                return Ok(());
            }
            if !self.running() {
                return Err(said);
            }
            assert!(
                Instant::now() < deadline,
                "syncgc {} did not bind its addresses within {timeout:?}; see its log in {}",
                self.name,
                self.log().display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What this process has logged so far.
    fn said(&self) -> String {
        let log = std::fs::read(self.log()).unwrap_or_default();
        let from = usize::try_from(self.log_from).unwrap_or(usize::MAX);
        String::from_utf8_lossy(log.get(from..).unwrap_or_default()).into_owned()
    }

    /// Whether `syncgc run` still runs (the watchdog reaps it within a poll once it exits).
    fn running(&mut self) -> bool {
        let pid: libc::pid_t = self.pid.parse().expect("a pid");
        // SAFETY: signal 0 only checks that the process exists.
        self.child.try_wait().unwrap().is_none() && unsafe { libc::kill(pid, 0) } == 0
    }

    /// `syncgc run` as `name`, with `kubeconfig`'s credentials, `args`, under the shell
    /// `prefix`, serving with the pair in the directory `pair_of` (else a pair of its own).
    fn spawn_as(
        name: &str,
        kubeconfig: &str,
        args: &[&str],
        prefix: &str,
        pair_of: Option<&std::path::Path>,
    ) -> Self {
        // kube-controller-manager's GC runs beside syncgc in cooperative mode, not standalone.
        let standalone = args.windows(2).any(|a| a == ["--mode", "standalone"]);
        super::kcm(if standalone {
            super::Kcm::NoGc
        } else {
            super::Kcm::Gc
        });
        let certs = tempfile::tempdir().unwrap();
        let dir = certs.path();
        let status = Command::new(env!("CARGO_BIN_EXE_syncgc"))
            .args(["certs", "--out"])
            .arg(dir)
            // The Services of syncgc's API in its namespace ([`super::served_api`]).
            .args(["--dns", "localhost", "--dns", "*.syncgc-system.svc"])
            .args(["--ip", "127.0.0.1"])
            .status()
            .unwrap();
        assert!(status.success());
        for file in ["tls.crt", "tls.key", "ca.crt"] {
            if let Some(from) = pair_of {
                std::fs::copy(from.join(file), dir.join(file)).unwrap();
            }
        }
        // The arguments may fix the webhook's address, and name the configuration it manages.
        let value_of = |flag: &str| args.windows(2).find(|w| w[0] == flag).map(|w| w[1]);
        let metrics = free_port();
        // On every address, for the apiserver's front proxy, which calls syncgc's API at the
        // node's address ([`super::served_api`]); the webhook is called on loopback.
        let (webhook, webhook_addr) = match value_of("--webhook-addr") {
            Some(addr) => (addr.parse().expect("--webhook-addr"), String::new()),
            None => {
                let addr = free_port();
                (addr, format!("--webhook-addr 0.0.0.0:{}", addr.port()))
            }
        };
        let configuration = value_of("--webhook-config-name").unwrap_or(name).to_owned();
        if !args.contains(&"--manage-webhook") {
            let mut registration = Registration {
                name: name.to_owned(),
                client: WebhookClient::Url(format!("https://{webhook}/mutate")),
                ca_bundle: std::fs::read(dir.join("ca.crt")).unwrap(),
                timeout_seconds: 10,
                excluded_namespaces: vec![],
                unarmed_delete: unarmed_delete(args),
                guards: GuardScope::of(
                    !args.contains(&"--guards=false"),
                    value_of("--max-cascade").and_then(|n| n.parse().ok()),
                ),
                server: super::server(),
                scope: Coverage::Every,
                own_user: None,
            }
            .configuration();
            for hook in registration.webhooks.iter_mut().flatten() {
                hook.namespace_selector = Some(
                    serde_json::from_value(
                        serde_json::json!({ "matchLabels": { WEBHOOK_LABEL: name } }),
                    )
                    .unwrap(),
                );
            }
            let config = dir.join("webhook.json");
            std::fs::write(&config, serde_json::to_vec(&registration).unwrap()).unwrap();
            super::kubectl(&["apply", "-f", config.to_str().unwrap()], None);
        }
        let debug_graph = if args.iter().any(|a| a.starts_with("--debug-graph")) {
            ""
        } else {
            "--debug-graph"
        };
        // Tests stop syncgc at once unless they say otherwise.
        let shutdown_delay = if args.contains(&"--shutdown-delay") {
            ""
        } else {
            "--shutdown-delay 0s"
        };
        // The leader Lease lives there.
        super::syncgc_namespace();

        // The namespace created above, wherever the tests run (in a pod, syncgc would take the
        // pod's own).
        let lease_namespace = if args.contains(&"--leader-election-namespace") {
            ""
        } else {
            "--leader-election-namespace syncgc-system"
        };
        let syncgc = format!(
            "{prefix} {bin} run --kubeconfig {kubeconfig} {webhook_addr} --metrics-addr {metrics} \
             --tls-cert {dir}/tls.crt --tls-key {dir}/tls.key \
             --leader-election-lease {name} --leader-election-lease-duration 3s \
             --leader-election-renew-deadline 2s --leader-election-retry-period 500ms {lease_namespace} {shutdown_delay} {debug_graph} {args}",
            bin = env!("CARGO_BIN_EXE_syncgc"),
            dir = dir.display(),
            args = args.join(" "),
        );
        let log_path = std::env::temp_dir().join(format!("{name}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let log_from = log.metadata().unwrap().len();
        // The watchdog: when syncgc exits, or the test process is gone (killed: one that exits
        // stops syncgc itself, see `stop_at_exit`), stop syncgc and unregister its webhook.
        let script = format!(
            "{syncgc} & child=$!; echo $child; \
             while kill -0 {test} 2>/dev/null && kill -0 $child 2>/dev/null; do sleep 0.3; done; \
             kill -TERM $child 2>/dev/null; wait $child; \
             export KUBECONFIG={kubeconfig}; \
             kubectl delete mutatingwebhookconfiguration {configuration} --ignore-not-found >/dev/null; \
             {unregister_api}",
            test = std::process::id(),
            kubeconfig = kubeconfig_path(),
            unregister_api = super::served_api::unregister_script(name),
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .env("RUST_LOG", "info,syncgc=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut pid = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().expect("stdout")),
            &mut pid,
        )
        .unwrap();
        let pid = pid.trim().to_owned();
        stop_at_exit(child.id(), pid.parse().expect("a pid"));
        Self {
            name: name.to_owned(),
            metrics,
            webhook,
            pid,
            log_from,
            child,
            _certs: certs,
        }
    }

    /// The CA certificate that signed its serving certificate.
    pub fn ca_file(&self) -> std::path::PathBuf {
        self._certs.path().join("ca.crt")
    }

    /// Its serving certificate and key.
    pub fn pair(&self) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = self._certs.path();
        (dir.join("tls.crt"), dir.join("tls.key"))
    }

    /// Its process id.
    pub fn pid(&self) -> &str {
        &self.pid
    }

    /// Waits until `/readyz` answers 200.
    pub fn wait_ready(&self, timeout: Duration) {
        self.wait_readyz("become ready", timeout, |status| status == 200);
    }

    /// Waits until `/readyz` answers at all.
    pub fn wait_serving(&self, timeout: Duration) {
        self.wait_readyz("serve /readyz", timeout, |_| true);
    }

    fn wait_readyz(&self, what: &str, timeout: Duration, done: impl Fn(u16) -> bool) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.get("/readyz").is_some_and(|(status, _)| done(status)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "syncgc {} did not {what}; see its log in {}",
            self.name,
            self.log().display()
        );
    }

    /// Where its log goes (appended to by every process of this name).
    pub fn log(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("{}.log", self.name))
    }

    /// A plain HTTP GET on the metrics address (of the debug endpoints, with a token that may
    /// get them: [`super::debug_token`]).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let token = path.starts_with("/debug/").then(super::debug_token);
        self.get_as(token, path)
    }

    /// A plain HTTP GET on the metrics address, with the bearer `token`, if any.
    pub fn get_as(&self, token: Option<&str>, path: &str) -> Option<(u16, String)> {
        use std::io::{Read, Write};
        let authorization = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let mut stream = std::net::TcpStream::connect(self.metrics).ok()?;
        stream
            .write_all(
                format!(
                    "GET {path} HTTP/1.1\r\nHost: x\r\n{authorization}Connection: close\r\n\r\n"
                )
                .as_bytes(),
            )
            .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let status = response.split(' ').nth(1)?.parse().ok()?;
        Some((status, response.split_once("\r\n\r\n")?.1.to_owned()))
    }

    /// The value of an unlabelled metric, or the sum of a labelled one's series.
    pub fn metric(&self, name: &str) -> f64 {
        self.metric_where(name, "")
    }

    /// The sum of the series of `name` whose line contains `label` (as `change="created"`).
    pub fn metric_where(&self, name: &str, label: &str) -> f64 {
        let (_, body) = self.get("/metrics").expect("metrics");
        body.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter(|l| l[name.len()..].starts_with([' ', '{']) && l.contains(label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Stops syncgc as a rollout or an uninstall does (SIGTERM: a leader releases its Lease),
    /// and waits until it has exited and the watchdog has unregistered its webhook. Fails if it
    /// has not exited, successfully, within [`STOPS_WITHIN`].
    pub fn stop(&mut self) {
        self.terminate();
        let deadline = Instant::now() + STOPS_WITHIN;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                self.kill();
                panic!("syncgc did not stop within {STOPS_WITHIN:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "syncgc stopped with {status}");
    }

    /// Sends SIGTERM, as the kubelet does to a pod being deleted, without waiting.
    pub fn terminate(&self) {
        self.signal("-TERM");
    }

    /// Stops the process where it stands (SIGSTOP), as a node that freezes does: its
    /// connections stay open and nothing it holds is let go.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused process go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([signal, &self.pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill {signal} {}", self.pid);
    }

    /// Waits until syncgc has exited (and the watchdog has unregistered its webhook).
    pub fn wait(&mut self) {
        let _ = self.child.wait();
    }

    /// Stops syncgc at once, as a crash or an eviction would (SIGKILL to the process).
    pub fn kill(&mut self) {
        self.signal("-KILL");
        let _ = self.child.wait();
    }
}

/// Dropped, syncgc stops (as [`stop_at_exit`] does). A test that fails with a syncgc running
/// shows what that syncgc said last (its log stays where [`Syncgc::log`] says), since a test
/// machine may not keep the file.
impl Drop for Syncgc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.log()).unwrap_or_default();
            let said: Vec<&str> = log.lines().filter(|l| !l.contains(" DEBUG ")).collect();
            eprintln!(
                "--- the last of syncgc {}'s log (without DEBUG; all of it in {}):",
                self.name,
                self.log().display()
            );
            for line in &said[said.len().saturating_sub(40)..] {
                eprintln!("{line}");
            }
        }
        let shell = self.child.id();
        let mut live = LIVE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = live.iter().position(|(s, _)| *s == shell) {
            let (shell, pid) = live.swap_remove(at);
            drop(live);
            halt(shell, pid);
        }
    }
}

/// The syncgc processes started and not dropped: each watchdog shell's pid, and syncgc's.
static LIVE: Mutex<Vec<(u32, libc::pid_t)>> = Mutex::new(Vec::new());

/// Has syncgc `pid`, under the watchdog `shell`, stopped when the test process exits, if its
/// handle has not stopped it by then: a handle in a `static` never drops, and a syncgc left
/// running would act on the next test binary's objects.
fn stop_at_exit(shell: u32, pid: libc::pid_t) {
    static AT_EXIT: Once = Once::new();
    extern "C" fn stop_all() {
        let live = std::mem::take(
            &mut *LIVE
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for (shell, pid) in live {
            halt(shell, pid);
        }
    }
    AT_EXIT.call_once(|| {
        // SAFETY: registers a function that takes no arguments and does not unwind.
        assert_eq!(unsafe { libc::atexit(stop_all) }, 0, "atexit");
    });
    LIVE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push((shell, pid));
}

/// Stops syncgc `pid` with SIGTERM (going on first, should it be paused) and waits until its
/// watchdog `shell` has unregistered the webhook and exited; kills both after
/// [`STOPS_WITHIN`].
fn halt(shell: u32, pid: libc::pid_t) {
    let shell = libc::pid_t::try_from(shell).expect("a pid");
    // SAFETY: plain system calls on processes this test process started; a shell already
    // reaped makes `waitpid` fail, and then nothing is signalled.
    unsafe {
        let reaped = || libc::waitpid(shell, std::ptr::null_mut(), libc::WNOHANG) != 0;
        if reaped() {
            return;
        }
        libc::kill(pid, libc::SIGTERM);
        libc::kill(pid, libc::SIGCONT);
        let deadline = Instant::now() + STOPS_WITHIN;
        while Instant::now() < deadline {
            if reaped() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        libc::kill(pid, libc::SIGKILL);
        libc::kill(shell, libc::SIGKILL);
        libc::waitpid(shell, std::ptr::null_mut(), 0);
    }
}

/// The timeouts the tests' syncgc runs with: a minute, and 100 ms per dependent.
pub const TEST_TIMEOUTS: [&str; 4] = ["--timeout-base", "60s", "--timeout-per-dependent", "100ms"];

/// The one syncgc process the tests of this test binary share.
pub fn shared() -> &'static Syncgc {
    static SHARED: OnceLock<Syncgc> = OnceLock::new();
    SHARED.get_or_init(|| {
        Syncgc::start(
            &format!("syncgc-tests-{}", std::process::id()),
            &TEST_TIMEOUTS,
        )
    })
}

/// A fresh namespace for `test`, served by the test binary's [`shared`] syncgc (cooperative,
/// beside kube-controller-manager's collector).
pub async fn served_namespace(test: &str) -> super::TestNamespace {
    super::kcm(super::Kcm::Gc);
    let syncgc = tokio::task::spawn_blocking(shared).await.unwrap();
    let client = super::client().await;
    super::TestNamespace::with_labels(&client, test, &[(WEBHOOK_LABEL, &syncgc.name)]).await
}

/// The `--unarmed-delete` policy in syncgc's arguments `args`.
fn unarmed_delete(args: &[&str]) -> UnarmedDelete {
    if args.windows(2).any(|w| w == ["--unarmed-delete", "deny"]) {
        UnarmedDelete::Deny
    } else {
        UnarmedDelete::Allow
    }
}

/// A command that follows something until it ends (`explain --watch`), its output read as it
/// comes, so that a test can wait for it to have started instead of sleeping.
pub struct Following {
    started: Option<tokio::sync::oneshot::Receiver<()>>,
    /// What it printed so far.
    said: std::sync::Arc<std::sync::Mutex<String>>,
    ended: tokio::task::JoinHandle<(std::process::ExitStatus, String)>,
}

impl Following {
    /// Follows `child`, spawned with its standard output piped.
    pub fn new(mut child: std::process::Child) -> Self {
        use std::io::BufRead as _;
        let stdout = child.stdout.take().expect("stdout piped");
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let out = said.clone();
        let ended = tokio::task::spawn_blocking(move || {
            let mut started_tx = Some(started_tx);
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut out = out.lock().unwrap();
                out.push_str(&line);
                out.push('\n');
                if let Some(tx) = started_tx.take() {
                    let _ = tx.send(());
                }
            }
            let out = out.lock().unwrap().clone();
            (child.wait().expect("the command ends"), out)
        });
        Self {
            started: Some(started),
            said,
            ended,
        }
    }

    /// Waits until it has printed `what` (within `within`).
    pub async fn says(&self, what: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while !self.said.lock().unwrap().contains(what) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "it did not say {what:?} within {within:?}; it said:\n{}",
                self.said.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until it has printed its first line: it has read what it follows.
    pub async fn started(&mut self) {
        if let Some(started) = self.started.take() {
            tokio::time::timeout(Duration::from_secs(60), started)
                .await
                .expect("it prints within a minute")
                .expect("it prints before it ends");
        }
    }

    /// Its exit status and everything it printed, once it ends (within `within`).
    pub async fn ended(self, within: Duration) -> (std::process::ExitStatus, String) {
        tokio::time::timeout(within, self.ended)
            .await
            .expect("it ends in time")
            .unwrap()
    }
}
