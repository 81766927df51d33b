//! Prometheus integration: the alert rules of `manifests/prometheus/prometheusrule.yaml` pass
//! `promtool check rules` and their unit tests (`rules_test.yaml`), and a real Prometheus
//! scrapes a running syncgc (`promtool` and `prometheus` come from Debian's `prometheus`
//! package, which `hack/cluster.sh install` installs).

use crate::support;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use support::process::Syncgc;

const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/manifests/prometheus/prometheusrule.yaml"
);
const RULES_TEST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/manifests/prometheus/rules_test.yaml"
);

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .output()
        .expect("promtool (Debian's prometheus package; hack/cluster.sh install installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alert_rules_are_valid_and_pass_their_unit_tests() {
    let _alone = support::process::alone_blocking();
    let rule: Value = Value::deserialize(serde_norway::Deserializer::from_str(
        &std::fs::read_to_string(RULES).unwrap(),
    ))
    .unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, serde_norway::to_string(&rule["spec"]).unwrap()).unwrap();
    std::fs::copy(RULES_TEST, dir.path().join("rules_test.yaml")).unwrap();
    let checked = promtool(&["check", "rules", rules.to_str().unwrap()]);
    assert!(checked.contains("SUCCESS: 9 rules found"), "{checked}");
    promtool(&[
        "test",
        "rules",
        dir.path().join("rules_test.yaml").to_str().unwrap(),
    ]);
}

/// Stops the Prometheus server when the test ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn prometheus_scrapes_syncgc() {
    let _alone = support::process::alone().await;
    let syncgc = tokio::task::spawn_blocking(|| {
        Syncgc::start(&format!("syncgc-prometheus-{}", std::process::id()), &[])
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: syncgc\n    static_configs:\n      - targets: ['{}']\n",
            syncgc.metrics
        ),
    )
    .unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _server = Server(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian's prometheus package)"),
    );
    let query = |q: &'static str| async move {
        let url = format!("http://127.0.0.1:{port}/api/v1/query?query={q}");
        let body = tokio::task::spawn_blocking(move || {
            let out = Command::new("curl").args(["-sf", &url]).output().ok()?;
            serde_json::from_slice::<Value>(&out.stdout).ok()
        })
        .await
        .unwrap()?;
        body["data"]["result"].as_array().cloned()
    };
    support::eventually(
        "Prometheus says syncgc is up",
        Duration::from_secs(60),
        || async {
            let up = query("up").await?;
            (up.first()?["value"][1] == "1").then_some(())
        },
    )
    .await;
    let series = query("syncgc_build_info").await.expect("a syncgc_ series");
    assert_eq!(series.len(), 1, "{series:?}");
}
