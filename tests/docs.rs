//! The README cannot drift from the binary: every flag and environment variable of every
//! subcommand and every metric syncgc registers is documented there.

use std::process::Command;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The long flags a `--help` text lists.
fn flags(help: &str) -> Vec<String> {
    help.lines()
        .filter_map(|line| {
            let flag = line.trim_start().split_once("--")?.1;
            let name: String = flag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty()).then(|| format!("--{name}"))
        })
        .collect()
}

#[test]
fn every_flag_of_each_subcommand_is_in_the_readme() {
    let readme = readme();
    for subcommand in ["run", "certs", "webhook-config", "explain", "disarm"] {
        let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
            .args([subcommand, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let help = String::from_utf8(out.stdout).unwrap();
        let flags = flags(&help);
        assert!(flags.len() >= 2, "{help}");
        for flag in flags
            .iter()
            .filter(|f| !["--help", "--version"].contains(&f.as_str()))
        {
            assert!(
                readme.contains(flag.as_str()),
                "README.md does not mention {subcommand} {flag}"
            );
        }
        // And every environment variable a flag is read from.
        for (at, _) in help.match_indices("[env: ") {
            let var: String = help[at + 6..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            assert!(
                readme.contains(&format!("`{var}`")),
                "README.md does not mention {subcommand}'s {var}"
            );
        }
    }
}

#[test]
fn every_metric_is_in_the_readme() {
    let readme = readme();
    let source =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/metrics.rs")).unwrap();
    let names: Vec<&str> = source
        .split('"')
        .filter(|s| {
            s.starts_with("syncgc_") && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
        .collect();
    assert!(names.len() >= 5, "{names:?}");
    for name in names {
        assert!(
            readme.contains(name),
            "README.md does not mention the metric {name}"
        );
    }
}

/// Every syncgc series the Grafana dashboard and the alert rules query is one syncgc exports.
#[test]
fn dashboards_and_alerts_query_only_exported_metrics() {
    // The names syncgc registers, as string literals of src/metrics.rs.
    let exported =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/metrics.rs")).unwrap();
    for file in [
        "manifests/prometheus/grafana-dashboard.json",
        "manifests/prometheus/prometheusrule.yaml",
    ] {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/").to_owned() + file)
                .unwrap();
        let mut queried = 0;
        for (at, _) in text.match_indices("syncgc_") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .fold(name.as_str(), |n, suffix| {
                    n.strip_suffix(suffix).unwrap_or(n)
                });
            assert!(
                exported.contains(&format!("\"{family}\"")),
                "{file} queries {name}, which syncgc does not export"
            );
            queried += 1;
        }
        assert!(queried > 5, "{file} queries syncgc's metrics");
    }
}

#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8(out.stdout).unwrap();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git (the tests run in a checkout)");
    let head = String::from_utf8(head.stdout).unwrap();
    let commit = std::env::var("SYNCGC_COMMIT").unwrap_or(head);
    assert_eq!(
        version.trim(),
        format!(
            "syncgc {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            commit.trim()
        )
    );
}
