//! The documentation cannot drift from the binary, checked both ways: every flag and
//! environment variable of every subcommand is documented (README.md and docs/), and every flag
//! the configuration and command pages name exists; every metric syncgc registers is in
//! docs/observability.md, and every `syncgc_` name the documentation mentions is one syncgc
//! exports; every alert has its section in docs/alerts.md, where its runbook_url points; every
//! relative link and anchor resolves; and the README stays a short front door.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::samples;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The subcommands whose `--help` the documentation must cover.
const SUBCOMMANDS: [&str; 8] = [
    "run",
    "certs",
    "webhook-config",
    "explain",
    "disarm",
    "check",
    "plan",
    "completion",
];

/// Flags of other tools that the flag pages may name; everything else written `--name` there
/// must be a flag of syncgc.
const OTHER_TOOLS_FLAGS: [&str; 0] = [];

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// README.md and every docs/*.md, by path relative to the repository root.
fn documents() -> BTreeMap<String, String> {
    let mut docs = BTreeMap::new();
    docs.insert(
        "README.md".to_owned(),
        read(&Path::new(ROOT).join("README.md")),
    );
    let dir = Path::new(ROOT).join("docs");
    for entry in std::fs::read_dir(&dir).expect("docs/ exists") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
            docs.insert(name, read(&path));
        }
    }
    assert!(docs.len() > 5, "docs/ holds the documentation: {docs:?}");
    docs
}

/// All the documentation as one text.
fn all_docs() -> String {
    documents().into_values().collect::<Vec<_>>().join("\n")
}

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "syncgc {args:?} --help: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
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

/// The environment variables a `--help` text names.
fn env_vars(help: &str) -> Vec<String> {
    help.match_indices("[env: ")
        .map(|(at, _)| {
            help[at + 6..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect()
        })
        .collect()
}

/// Every `--name` written in `text` (a word of its own: not the tail of a longer dash run).
fn written_flags(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("--") {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        if before.is_some_and(|b| b == b'-' || b.is_ascii_alphanumeric()) {
            continue;
        }
        let name: String = text[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        let name = name.trim_end_matches('-');
        if name.starts_with(|c: char| c.is_ascii_lowercase()) {
            found.insert(format!("--{name}"));
        }
    }
    found
}

#[test]
fn every_flag_of_each_subcommand_is_documented() {
    let docs = all_docs();
    for subcommand in SUBCOMMANDS {
        let help = help(&[subcommand]);
        let flags = flags(&help);
        assert!(flags.len() >= 2, "{help}");
        for flag in flags
            .iter()
            .filter(|f| !["--help", "--version"].contains(&f.as_str()))
        {
            assert!(
                docs.contains(&format!("`{flag}")),
                "neither README.md nor docs/ documents `syncgc {subcommand} {flag}`"
            );
        }
        for var in env_vars(&help) {
            assert!(
                docs.contains(&format!("`{var}`")),
                "neither README.md nor docs/ documents {subcommand}'s {var}"
            );
        }
    }
}

#[test]
fn the_flag_pages_name_only_flags_syncgc_has() {
    let mut known: BTreeSet<String> = flags(&help(&[])).into_iter().collect();
    for subcommand in SUBCOMMANDS {
        known.extend(flags(&help(&[subcommand])));
    }
    known.extend(OTHER_TOOLS_FLAGS.iter().map(|f| (*f).to_owned()));
    for page in ["docs/configuration.md", "docs/commands.md"] {
        let written = written_flags(&samples::page(page));
        assert!(written.len() > 10, "{page} names flags: {written:?}");
        let unknown: Vec<&String> = written.difference(&known).collect();
        assert!(
            unknown.is_empty(),
            "{page} names flags no subcommand of syncgc has: {unknown:?}"
        );
    }
}

/// The metric names syncgc registers: the `"syncgc_…"` string literals of src/metrics.rs.
fn exported_metrics() -> BTreeSet<String> {
    let source = samples::page("src/metrics.rs");
    let names: BTreeSet<String> = source
        .split('"')
        .filter(|s| {
            s.starts_with("syncgc_") && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
        .map(str::to_owned)
        .collect();
    assert!(names.len() >= 5, "{names:?}");
    names
}

/// The metric family of a series name: without a histogram's `_bucket`, `_sum` or `_count`.
fn family(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .fold(name, |n, suffix| n.strip_suffix(suffix).unwrap_or(n))
}

/// Every `syncgc_[a-z_]+` word in `text`.
fn mentioned_metrics(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("syncgc_") {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
            continue;
        }
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        if name.len() > "syncgc_".len() {
            found.insert(name);
        }
    }
    found
}

#[test]
fn every_metric_is_documented_and_every_documented_metric_exists() {
    let exported = exported_metrics();
    let observability = samples::page("docs/observability.md");
    for name in &exported {
        assert!(
            observability.contains(name.as_str()),
            "docs/observability.md does not document the metric {name}"
        );
    }
    for (file, text) in documents() {
        for name in mentioned_metrics(&text) {
            assert!(
                exported.contains(family(&name)),
                "{file} mentions {name}, which syncgc does not export"
            );
        }
    }
}

#[test]
fn every_alert_has_its_runbook_section() {
    let rules: serde_norway::Value =
        serde_norway::from_str(&samples::page("manifests/prometheus/prometheusrule.yaml")).unwrap();
    let sections = headings(&samples::page("docs/alerts.md"));
    let mut alerts = 0;
    for group in rules["spec"]["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            assert!(
                sections
                    .iter()
                    .any(|(level, text)| *level == 2 && text == alert),
                "docs/alerts.md has no section `## {alert}`"
            );
            if let Some(url) = rule["annotations"]["runbook_url"].as_str() {
                let anchor = format!("docs/alerts.md#{}", alert.to_lowercase());
                assert!(
                    url.ends_with(&anchor),
                    "{alert}'s runbook_url {url} does not point at {anchor}"
                );
            }
        }
    }
    assert!(alerts > 5, "prometheusrule.yaml holds the alerts");
}

/// The headings of a Markdown text outside fenced code blocks: (level, text).
fn headings(text: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let level = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&level) && line[level..].starts_with(' ') {
            found.push((level, line[level..].trim().to_owned()));
        }
    }
    found
}

/// GitHub's anchors for the headings of a Markdown text: lower case, punctuation dropped,
/// spaces as hyphens, a repeated anchor numbered.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, heading) in headings(text) {
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// The targets of the inline links `[text](target)` of a Markdown text, outside fenced code.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut prose = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose
        .match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &prose[at + 2..];
            let end = rest.find(')')?;
            Some(rest[..end].trim().to_owned())
        })
        .collect()
}

#[test]
fn every_relative_link_resolves() {
    let root = Path::new(ROOT);
    let mut checked = 0;
    for (file, text) in documents() {
        let dir = root.join(&file).parent().unwrap().to_path_buf();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match link.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (link.as_str(), None),
            };
            let target: PathBuf = if path.is_empty() {
                root.join(&file)
            } else {
                dir.join(path)
            };
            assert!(
                target.exists(),
                "{file} links to {link}, and {} does not exist",
                target.display()
            );
            if let Some(anchor) = anchor {
                assert!(
                    target.extension().is_some_and(|e| e == "md"),
                    "{file} links to an anchor in {link}, which is not Markdown"
                );
                let anchors = anchors(&read(&target));
                assert!(
                    anchors.contains(anchor),
                    "{file} links to {link}, and {} has no heading #{anchor}: {anchors:?}",
                    target.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 50, "the documentation links its pages: {checked}");
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = samples::page("README.md");
    assert!(
        (5 * 1024..=16 * 1024).contains(&readme.len()),
        "README.md is {} bytes; keep it between 5 and 16 KB and move the rest to docs/",
        readme.len()
    );
    let first_screen: String = readme.lines().take(40).collect::<Vec<_>>().join("\n");
    for needed in ["syncgc.io/synchronous", "kubectl delete"] {
        assert!(
            first_screen.contains(needed),
            "the first 40 lines of README.md do not mention {needed}"
        );
    }
    // The two set-up commands, each a line of its own in a block to copy: the main job on the
    // local control plane, and the whole test suite (which .ci/run runs).
    for command in ["hack/run.sh", "hack/test.sh"] {
        assert!(
            first_screen
                .lines()
                .any(|line| line.split_whitespace().next() == Some(command)),
            "the first 40 lines of README.md do not give `{command}` as a command"
        );
    }
    let ci = samples::page(".ci/run");
    assert!(
        ci.lines().any(|line| line.trim() == "hack/test.sh"),
        ".ci/run does not run the README's test command, unchanged"
    );
}

#[test]
fn the_slugs_are_githubs() {
    let text = "# syncgc\n## When `syncgc check` fails\n## Kubernetes 1.20\n\
                ## The finalizer syncgc.io/synchronous\n## Limitations\n## Limitations\n\
                ```\n# not a heading\n```\n";
    let found = anchors(text);
    for anchor in [
        "syncgc",
        "when-syncgc-check-fails",
        "kubernetes-120",
        "the-finalizer-syncgciosynchronous",
        "limitations",
        "limitations-1",
    ] {
        assert!(found.contains(anchor), "{anchor} in {found:?}");
    }
    assert!(!found.contains("not-a-heading"));
    assert_eq!(
        written_flags("`--tls-cert`/`--tls-key`, a --x-y flag, |---|, a—b, -n NS"),
        ["--tls-cert", "--tls-key", "--x-y"]
            .into_iter()
            .map(str::to_owned)
            .collect()
    );
    assert_eq!(
        mentioned_metrics("`syncgc_ready{condition}`, the prefix `syncgc_`, SYNCGC_MODE"),
        BTreeSet::from(["syncgc_ready".to_owned()])
    );
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
            let family = family(&name);
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

/// The table of what each collector does names, in its last column, the tests that check each
/// row, and each is a test of tests/, in a binary of its own or a family's directory (or of the
/// tests every mode runs, tests/support/plan.rs).
#[test]
fn the_table_of_what_each_collector_does_names_tests_that_exist() {
    let page = samples::page("docs/how-it-works.md");
    let table = page
        .split("### What each collector does")
        .nth(1)
        .expect("docs/how-it-works.md has the table")
        .split("\n\n")
        .find(|block| block.starts_with("| |"))
        .expect("the table follows its heading");
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join("tests"), &mut files);
    let tests: String = files.iter().map(|p| read(p)).collect();
    let mut named = 0;
    for row in table.lines().skip(2) {
        let cell = row.trim_end_matches('|').rsplit('|').next().unwrap();
        for name in cell.split('`').skip(1).step_by(2) {
            named += 1;
            let defined = format!("async fn {name}()");
            assert!(tests.contains(&defined), "no test {name}, named by: {row}");
        }
    }
    assert!(named >= 5, "{table}");
}

/// Every `.rs` file under `dir`, in its subdirectories too.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The registration `syncgc webhook-config` prints with `guards` and `unarmed_delete`, for
/// `server`: what `syncgc run --manage-webhook` writes.
fn registration(
    guards: syncgc::webhook::registration::GuardScope,
    unarmed_delete: syncgc::webhook::admit::UnarmedDelete,
    server: syncgc::api::ServerVersion,
) -> k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration {
    use syncgc::webhook::registration::GuardScope;
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), "-----BEGIN CERTIFICATE-----\n").unwrap();
    let mut args: Vec<String> = [
        "webhook-config",
        "--webhook-url",
        "https://127.0.0.1:8443/mutate",
        "--ca-file",
        ca.path().to_str().unwrap(),
        "--server-version",
    ]
    .map(str::to_owned)
    .to_vec();
    args.push(server.to_string());
    args.push("--own-user".to_owned());
    args.push("system:serviceaccount:syncgc-system:syncgc".to_owned());
    args.push("--unarmed-delete".to_owned());
    args.push(format!("{unarmed_delete:?}").to_lowercase());
    match guards {
        GuardScope::Off => args.push("--guards=false".to_owned()),
        GuardScope::Selected => {}
        GuardScope::Every => args.extend(["--max-cascade".to_owned(), "100".to_owned()]),
    }
    let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args(&args)
        .env_remove("SYNCGC_MAX_CASCADE")
        .env_remove("SYNCGC_GUARDS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("webhook-config prints JSON")
}

/// How the table of docs/how-it-works.md words a webhook: its operations, the objects it
/// selects, and whether a condition narrows it.
fn worded(
    webhook: &k8s_openapi::api::admissionregistration::v1::MutatingWebhook,
) -> (String, String, bool) {
    let rules = webhook.rules.clone().unwrap_or_default();
    let operations: Vec<String> = rules
        .iter()
        .flat_map(|r| r.operations.clone().unwrap_or_default())
        .collect();
    let resources: Vec<String> = rules
        .iter()
        .flat_map(|r| r.resources.clone().unwrap_or_default())
        .collect();
    let operations = match resources.iter().find(|r| r.contains('/')) {
        Some(subresource) => format!("{} of `{subresource}`", operations.join(", ")),
        None => operations.join(", "),
    };
    let selector = serde_json::to_value(&webhook.object_selector).unwrap();
    let label = selector["matchLabels"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .or_else(|| {
            selector["matchExpressions"][0]["key"]
                .as_str()
                .map(str::to_owned)
        });
    let selected = match label {
        Some(label) => format!("labelled `{label}`"),
        None => "every".to_owned(),
    };
    let narrowed = webhook
        .match_conditions
        .as_ref()
        .is_some_and(|c| !c.is_empty());
    (operations, selected, narrowed)
}

/// The table of which operations reach syncgc is the registration syncgc writes: each row's
/// webhook, with the row's setting, has the row's operations, selection and (from 1.28)
/// condition; and every webhook of every setting has its row.
#[test]
fn the_table_of_what_reaches_syncgc_is_the_registration() {
    use syncgc::api::ServerVersion;
    use syncgc::webhook::admit::UnarmedDelete::{Allow, Deny};
    use syncgc::webhook::registration::GuardScope::{Every, Off, Selected};
    let text = samples::page("docs/how-it-works.md");
    let table = text
        .split("<!-- reaches-syncgc -->")
        .nth(1)
        .expect("docs/how-it-works.md marks the table with <!-- reaches-syncgc -->");
    let rows: Vec<Vec<String>> = table
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect();
    assert!(rows.len() >= 5, "{rows:?}");
    let settings = |setting: &str| match setting {
        "always" => [Off, Selected, Every]
            .into_iter()
            .flat_map(|g| [(g, Allow), (g, Deny)])
            .collect(),
        "`--guards` (the default)" => vec![(Selected, Allow), (Selected, Deny)],
        "`--guards` with `--max-cascade`" => vec![(Every, Allow), (Every, Deny)],
        "`--guards`, with or without `--max-cascade`" => [Selected, Every]
            .into_iter()
            .flat_map(|g| [(g, Allow), (g, Deny)])
            .collect(),
        "`--unarmed-delete allow` (the default)" => {
            vec![(Off, Allow), (Selected, Allow), (Every, Allow)]
        }
        "`--unarmed-delete deny`" => vec![(Off, Deny), (Selected, Deny), (Every, Deny)],
        other => panic!("a setting the test does not know: {other}"),
    };
    let old = ServerVersion {
        major: 1,
        minor: 20,
    };
    let new = ServerVersion {
        major: 1,
        minor: 30,
    };
    let mut covered = BTreeSet::new();
    for row in &rows {
        let [name, operations, selected, condition, setting] = &row[..] else {
            panic!("a row of five cells: {row:?}");
        };
        let name = name.trim_matches('`');
        for (guards, unarmed_delete) in settings(setting) {
            for server in [old, new] {
                let configuration = registration(guards, unarmed_delete, server);
                let webhook = configuration
                    .webhooks
                    .iter()
                    .flatten()
                    .find(|w| w.name == name)
                    .unwrap_or_else(|| panic!("{name} is registered with {setting}"));
                let (ops, sel, narrowed) = worded(webhook);
                assert_eq!(&ops, operations, "{name} with {setting}");
                assert!(selected.starts_with(&sel), "{name} with {setting}: {sel}");
                assert_eq!(
                    narrowed,
                    server == new && condition != "—",
                    "{name} with {setting} on {server}"
                );
                covered.insert((name.to_owned(), format!("{guards:?}{unarmed_delete:?}")));
            }
        }
    }
    for guards in [Off, Selected, Every] {
        for unarmed_delete in [Allow, Deny] {
            let configuration = registration(guards, unarmed_delete, new);
            for webhook in configuration.webhooks.iter().flatten() {
                assert!(
                    covered.contains(&(
                        webhook.name.clone(),
                        format!("{guards:?}{unarmed_delete:?}")
                    )),
                    "{} with {guards:?} and {unarmed_delete:?} has no row",
                    webhook.name
                );
            }
        }
    }
}

/// `--log-format json` writes one object per line with the message and the fields at the top
/// level, where log pipelines look; the first line of `syncgc run` says what runs.
#[test]
fn the_first_log_line_says_what_runs_at_the_top_level() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.crt");
    let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args([
            "--log-format",
            "json",
            "run",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args(["--webhook-addr", "127.0.0.1:0", "--guards=false"])
        .arg("--tls-cert")
        .arg(&missing)
        .arg("--tls-key")
        .arg(&missing)
        .env("SYNCGC_KUBECONFIG", dir.path().join("no-kubeconfig"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let first = &lines[0];
    assert_eq!(first["message"], "syncgc starting", "{stderr}");
    assert_eq!(first["level"], "INFO", "{stderr}");
    assert!(first.get("fields").is_none(), "{stderr}");
    assert_eq!(
        first["version"].as_str().unwrap(),
        syncgc::names::VERSION,
        "{stderr}"
    );
    assert_eq!(first["mode"], "Cooperative", "{stderr}");
    assert_eq!(first["guards"], false, "{stderr}");
    assert_eq!(first["webhook_timeout_seconds"], 3, "{stderr}");
    assert!(
        first["excluded_namespaces"]
            .as_str()
            .is_some_and(|n| n.contains("kube-system")),
        "{stderr}"
    );
    // And the error it stops on, the same way.
    let last = lines.last().unwrap();
    assert_eq!(last["level"], "ERROR", "{stderr}");
    assert!(last["message"].is_string(), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
}

/// The possible values `--help` gives for `flag` (`--output`: `text`, `json`, `yaml`).
fn possible_values(help: &str, flag: &str) -> Option<BTreeSet<String>> {
    let entry = help
        .split("\n  -")
        .chain(help.split("\n      --"))
        .find(|entry| {
            let entry = entry.trim_start_matches('-');
            let named = format!("{} ", &flag[2..]);
            let valued = format!("{}=", &flag[2..]);
            entry.starts_with(&named)
                || entry.starts_with(&valued)
                || entry.contains(&format!(", {flag} "))
        })?;
    if let Some(values) = entry.split("[possible values: ").nth(1) {
        let values = values.split(']').next()?;
        return Some(values.split(", ").map(str::to_owned).collect());
    }
    // The long form: a line `- VALUE: what it means` each.
    let (_, listed) = entry.split_once("Possible values:\n")?;
    Some(
        listed
            .lines()
            .map_while(|l| l.trim_start().strip_prefix("- "))
            .filter_map(|l| l.split(':').next())
            .map(str::to_owned)
            .collect(),
    )
}

/// The flags every command has, said once (docs/commands.md's first section).
const GLOBAL_FLAGS: [&str; 4] = ["--help", "--version", "--log-level", "--log-format"];

/// The flags a `--help` text declares (each entry's first words, not the flags its text
/// names), the global ones aside.
fn declared_flags(help: &str) -> BTreeSet<String> {
    let declared: String = help
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("--") || (l.starts_with('-') && l.get(2..4) == Some(", ")))
        .map(|l| format!("{}\n", l.split(' ').take(2).collect::<Vec<_>>().join(" ")))
        .collect();
    flags(&declared)
        .into_iter()
        .filter(|f| !GLOBAL_FLAGS.contains(&f.as_str()))
        .collect()
}

/// Fails unless `text` names the flags `has`, and no other (the global ones aside).
fn same_flags(has: &BTreeSet<String>, text: &str, what: &str) {
    let written: BTreeSet<String> = written_flags(text)
        .into_iter()
        .filter(|f| !GLOBAL_FLAGS.contains(&f.as_str()))
        .collect();
    let left_out: Vec<&String> = has.difference(&written).collect();
    let unknown: Vec<&String> = written.difference(has).collect();
    assert!(
        left_out.is_empty(),
        "{what} leaves out flags it has: {left_out:?}"
    );
    assert!(
        unknown.is_empty(),
        "{what} names flags it does not have: {unknown:?}"
    );
}

/// Each command's flag tables (the rows of its section in commands.md; `run`'s in
/// configuration.md) list every flag it has and no other.
#[test]
fn every_command_s_flag_table_lists_its_flags() {
    for subcommand in SUBCOMMANDS {
        let has = declared_flags(&help(&[subcommand]));
        let section = if subcommand == "run" {
            samples::page("docs/configuration.md")
        } else {
            let page = samples::page("docs/commands.md");
            let heading = format!("\n## syncgc {subcommand}\n");
            let (_, section) = page
                .split_once(&heading)
                .unwrap_or_else(|| panic!("docs/commands.md has {heading:?}"));
            section.split("\n## ").next().unwrap().to_owned()
        };
        let rows: String = section
            .lines()
            .filter(|l| l.starts_with("| `--"))
            .map(|l| format!("{}\n", l.split(" | ").next().unwrap()))
            .collect();
        same_flags(
            &has,
            &rows,
            &format!("the flag tables of syncgc {subcommand}"),
        );
    }
}

/// Each command's synopsis (a `text` block of commands.md or configuration.md starting
/// `syncgc COMMAND`) names every flag of the command and no other (the log flags, the same
/// for every command, are said once), and a flag's alternatives (`--output text|json|yaml`)
/// are the values the command takes.
#[test]
fn every_synopsis_names_the_flags_of_its_command() {
    let mut seen = BTreeSet::new();
    for page in ["docs/commands.md", "docs/configuration.md"] {
        for block in samples::page(page).split("```text\n").skip(1) {
            let block = block.split("```").next().unwrap();
            let Some(subcommand) = SUBCOMMANDS.iter().find(|s| {
                block.starts_with(&format!("syncgc {s} "))
                    || block.starts_with(&format!("syncgc {s}\n"))
            }) else {
                continue;
            };
            if block.contains("[FLAGS]") {
                continue; // the whole synopsis is elsewhere
            }
            seen.insert(*subcommand);
            let help = help(&[subcommand]);
            let has = declared_flags(&help);
            same_flags(
                &has,
                block,
                &format!("{page}: the synopsis of syncgc {subcommand}"),
            );
            for word in block.split(['[', ']', '(', ')', '\n']) {
                let mut words = word.split_whitespace();
                let (Some(flag), Some(values)) = (words.next(), words.next()) else {
                    continue;
                };
                if !flag.starts_with("--")
                    || !values.contains('|')
                    || values.split('|').any(str::is_empty)
                {
                    continue;
                }
                let written: BTreeSet<String> = values.split('|').map(str::to_owned).collect();
                let takes = possible_values(&help, flag)
                    .unwrap_or_else(|| panic!("syncgc {subcommand} {flag} lists no values"));
                assert_eq!(written, takes, "{page}: syncgc {subcommand} {flag}");
            }
        }
    }
    let all: BTreeSet<&str> = SUBCOMMANDS.into_iter().collect();
    assert_eq!(seen, all, "each command has its synopsis");
}
