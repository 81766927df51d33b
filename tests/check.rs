//! `syncgc check` against the real apiserver: with syncgc running (every check passes), with
//! its webhook configuration carrying a CA bundle that did not sign the served certificate
//! (the certificate and the dry-run arming fail, and the exit code says so), and with syncgc
//! stopped; `--pre` on a cluster before install.

mod support;

use std::collections::BTreeMap;
use std::process::Command;

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

    // Running: every check passes; no Deployment, since this syncgc runs outside one.
    let (code, statuses, report) = check(&args);
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
}

#[tokio::test]
async fn check_pre_looks_at_a_cluster_before_install() {
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
