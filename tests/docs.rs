//! The README cannot drift from the binary: every flag of `syncgc run` and every metric syncgc
//! registers is documented there.

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
    for subcommand in ["run", "certs", "webhook-config"] {
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
