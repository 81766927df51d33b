//! `syncgc check` against the real apiserver: with syncgc running (every check passes), with
//! its webhook configuration carrying a CA bundle that did not sign the served certificate
//! (the certificate and the dry-run arming fail, and the exit code says so), with syncgc
//! stopped, and with a leader killed while other replicas run (a warning until they should
//! have taken its Lease over, which `--wait` waits for); `--pre` on a cluster before install.

use crate::support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use support::process::{Syncgc, WEBHOOK_LABEL};
use support::{TestNamespace, kubeconfig_path, kubectl};

/// `syncgc check ARGS -o json` as a user runs it: its exit code and each check's status by
/// name.
fn check(args: &[&str]) -> (i32, BTreeMap<String, String>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .arg("check")
        .args(args)
        .args(["-o", "json", "--kubeconfig", &kubeconfig_path()])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "syncgc check printed no JSON ({err}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let statuses = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (out.status.code().unwrap(), statuses, report)
}

fn expect(statuses: &BTreeMap<String, String>, wanted: &[(&str, &str)], report: &Value) {
    for (name, status) in wanted {
        assert_eq!(
            statuses.get(*name).map(String::as_str),
            Some(*status),
            "check {name}: {report:#}"
        );
    }
}

#[tokio::test]
async fn check_says_whether_syncgc_works_and_what_is_wrong() {
    let _alone = support::process::alone().await;
    let client = support::client().await;
    // The collector's ServiceAccount and RBAC, as every install has them.
    support::syncgc_namespace();
    kubectl(
        &[
            "apply",
            "-f",
            concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/base/rbac.yaml"),
        ],
        None,
    );
    let name = format!("check-{}", std::process::id());
    let mut syncgc = Syncgc::start_async(&name, &[]).await;
    let ns = TestNamespace::with_labels(&client, "check", &[(WEBHOOK_LABEL, &name)]).await;
    let metrics = format!("http://{}/metrics", syncgc.metrics);
    let args = [
        "--leader-election-lease",
        &name,
        "--webhook-config-name",
        &name,
        "--test-namespace",
        &ns.name,
        "--metrics-url",
        &metrics,
    ];

    // Running: every check passes; no Deployment, since this syncgc runs outside one. (It
    // leads as soon as it is ready; --wait would wait for it otherwise.)
    let (code, statuses, report) = check(&[&args[..], &["--wait", "30s"]].concat());
    expect(
        &statuses,
        &[
            ("apiserver", "pass"),
            ("deployment", "skip"),
            ("leader", "pass"),
            ("webhook", "pass"),
            ("guards", "pass"),
            ("certificate", "pass"),
            ("admission", "pass"),
            ("permissions", "pass"),
            ("metrics", "pass"),
        ],
        &report,
    );
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(code, 0);
    let guards = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "guards")
        .unwrap();
    assert!(
        guards["message"].as_str().unwrap().starts_with("active"),
        "{guards}"
    );

    // A CA bundle that did not sign the served certificate: the apiserver's calls fail, and
    // the webhook fails open, so the dry-run object comes back unarmed.
    let other = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args(["certs", "--dns", "localhost", "--out"])
        .arg(other.path())
        .status()
        .unwrap();
    assert!(status.success());
    let wrong = base64(&std::fs::read(other.path().join("ca.crt")).unwrap());
    let right = kubectl(
        &[
            "get",
            "mutatingwebhookconfiguration",
            &name,
            "-o",
            "jsonpath={.webhooks[0].clientConfig.caBundle}",
        ],
        None,
    );
    let set_ca = |bundle: &str| {
        let hooks = kubectl(
            &[
                "get",
                "mutatingwebhookconfiguration",
                &name,
                "-o",
                "jsonpath={.webhooks[*].name}",
            ],
            None,
        );
        let patch: Vec<Value> = (0..hooks.split_whitespace().count())
            .map(|i| {
                serde_json::json!({
                    "op": "replace",
                    "path": format!("/webhooks/{i}/clientConfig/caBundle"),
                    "value": bundle,
                })
            })
            .collect();
        kubectl(
            &[
                "patch",
                "mutatingwebhookconfiguration",
                &name,
                "--type=json",
                "-p",
                &Value::Array(patch).to_string(),
            ],
            None,
        );
    };
    set_ca(&wrong);
    let (code, statuses, report) = check(&args);
    expect(
        &statuses,
        &[
            ("leader", "pass"),
            ("webhook", "pass"),
            ("certificate", "fail"),
            ("admission", "fail"),
        ],
        &report,
    );
    let admission = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "admission")
        .unwrap();
    assert!(
        admission["fix"].as_str().unwrap().contains("8443"),
        "{admission}"
    );
    assert_eq!(code, 1);
    set_ca(&right);

    // Stopped: nobody leads, the webhook is gone, the metrics do not answer.
    syncgc.stop();
    let (code, statuses, report) = check(&args);
    expect(
        &statuses,
        &[
            ("apiserver", "pass"),
            ("deployment", "fail"),
            ("leader", "fail"),
            ("webhook", "fail"),
            ("admission", "fail"),
            ("metrics", "fail"),
        ],
        &report,
    );
    assert_eq!(code, 1);

    // The text form: a line per check, marked.
    let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .arg("check")
        .args(args)
        .args(["--kubeconfig", &kubeconfig_path()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("✓ apiserver"), "{text}");
    assert!(text.contains("✗ leader"), "{text}");
    assert!(text.contains("    → "), "{text}");

    // A leader killed: its Lease names it until it expires. With replicas of a Deployment
    // running (stand-ins here, retrying every 30 s), that is a warning, not a failure, until
    // they should have taken it over: the Lease's 3 s and two retry periods after they started.
    let mut killed = Syncgc::start_async(&name, &[]).await;
    killed.kill();
    let died = Instant::now();
    let _replicas = StandIns::run(&name);
    let with_deployment = [&args[..], &["--deployment", &name]].concat();
    std::thread::sleep(Duration::from_secs(4).saturating_sub(died.elapsed()));
    let (_, statuses, report) = check(&with_deployment);
    expect(
        &statuses,
        &[("deployment", "pass"), ("leader", "warn")],
        &report,
    );
    let leader = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "leader")
        .unwrap();
    let message = leader["message"].as_str().unwrap();
    assert!(
        message.contains("not renewed for") && message.contains("a replica takes it over within"),
        "{leader}"
    );
    // --wait checks again until the warning is gone or the time is up.
    let waiting = Instant::now();
    let (code, statuses, report) = check(&[&with_deployment[..], &["--wait", "3s"]].concat());
    assert!(waiting.elapsed() >= Duration::from_secs(3), "{report:#}");
    expect(
        &statuses,
        &[("leader", "warn"), ("admission", "fail")],
        &report,
    );
    assert_eq!(
        code, 1,
        "the admission's failure counts, the leader's warning does not"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .arg("check")
        .args(&with_deployment)
        .args(["--kubeconfig", &kubeconfig_path()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("! leader"), "{text}");
    assert!(text.contains(" check(s) failed, 1 warning(s)\n"), "{text}");
}

/// Stand-ins for syncgc's replicas: a Deployment named like the test's syncgc in its namespace,
/// whose Pods run (busybox) and whose replicas would retry for the Lease every 30 s. Deleted
/// when dropped.
struct StandIns(String);

impl StandIns {
    fn run(name: &str) -> Self {
        let deployment = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": name, "namespace": "syncgc-system" },
            "spec": {
                "replicas": 1,
                "selector": { "matchLabels": { "app": name } },
                "template": {
                    "metadata": { "labels": { "app": name } },
                    "spec": {
                        "tolerations": [{ "key": "syncgc.io/node", "operator": "Exists" }],
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{
                            "name": "syncgc",
                            "image": "syncgc.local/busybox:1.35",
                            "imagePullPolicy": "Never",
                            "command": ["sleep", "3600"],
                            "env": [{ "name": "SYNCGC_LEADER_ELECTION_RETRY_PERIOD",
                                      "value": "30s" }],
                        }],
                    },
                },
            },
        });
        kubectl(&["apply", "-f", "-"], Some(&deployment.to_string()));
        let this = Self(name.to_owned());
        kubectl(
            &[
                "rollout",
                "status",
                "-n",
                "syncgc-system",
                &format!("deployment/{name}"),
                "--timeout=120s",
            ],
            None,
        );
        this
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        let _ = Command::new("kubectl")
            .args([
                "delete",
                "deployment",
                &self.0,
                "-n",
                "syncgc-system",
                "--wait=false",
                "--ignore-not-found",
            ])
            .env("KUBECONFIG", kubeconfig_path())
            .output();
    }
}

#[tokio::test]
async fn check_pre_looks_at_a_cluster_before_install() {
    let _alone = support::process::alone().await;
    let (code, statuses, report) = check(&["--pre"]);
    expect(
        &statuses,
        &[("apiserver", "pass"), ("apis", "pass"), ("install", "pass")],
        &report,
    );
    assert_eq!(statuses.len(), 4, "{report:#}");
    assert_eq!(code, 0);
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::prelude::BASE64_STANDARD.encode(bytes)
}
