//! `hack/release.sh 0.1.0` in a copy of the checkout, with the binary these tests were built
//! with: every file a user takes from a release, each what it claims to be — the installs pin
//! the release's image, the chart packs at the version, the archive holds a syncgc that runs,
//! the checksums and the krew manifest match the files, and the CHANGELOG is cut.

use crate::support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const IMAGE: &str = "ghcr.io/syncgc/syncgc:v0.1.0";

fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|err| panic!("{command:?}: {err}"));
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The checkout's files (tracked, and new ones not ignored) copied into `to`.
fn copy_checkout(to: &Path) {
    let root = env!("CARGO_MANIFEST_DIR");
    let files = run(Command::new("git").current_dir(root).args([
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ]));
    for file in files.split('\0').filter(|f| !f.is_empty()) {
        let from = Path::new(root).join(file);
        if !from.is_file() {
            continue; // deleted in the work tree
        }
        let target = to.join(file);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&from, &target).unwrap();
    }
}

#[test]
fn a_release_holds_what_a_user_takes() {
    let tree = tempfile::tempdir().unwrap();
    copy_checkout(tree.path());
    let dist = tree.path().join("dist");
    run(Command::new(tree.path().join("hack/release.sh"))
        .current_dir(tree.path())
        .args(["0.1.0", "dist"])
        .env("SYNCGC_BINARY", env!("CARGO_BIN_EXE_syncgc")));
    let read = |name: &str| {
        std::fs::read_to_string(dist.join(name)).unwrap_or_else(|err| panic!("{name}: {err}"))
    };

    // The installs and the uninstall Job pin the release's image, and nothing else.
    for file in ["install.yaml", "install-1.20.yaml", "uninstall.yaml"] {
        let objects = support::chart::parse(&read(file));
        let images: Vec<&Value> = objects
            .iter()
            .filter_map(|o| o["spec"]["template"]["spec"]["containers"][0].get("image"))
            .collect();
        assert!(!images.is_empty(), "{file} runs syncgc");
        assert!(images.iter().all(|i| *i == IMAGE), "{file}: {images:?}");
    }
    // So do the manifests of the stamped tree, and their rendering is current.
    run(Command::new(tree.path().join("hack/install.sh"))
        .current_dir(tree.path())
        .arg("--check"));

    // The chart, at the version, with the image of the release.
    let helm = support::chart::tool("helm");
    let chart = dist.join("syncgc-0.1.0.tgz");
    let shown = run(Command::new(&helm).arg("show").arg("chart").arg(&chart));
    assert!(shown.contains("version: 0.1.0"), "{shown}");
    assert!(shown.contains("appVersion: 0.1.0"), "{shown}");
    let rendered = run(Command::new(&helm)
        .args(["template", "syncgc", "-n", "syncgc-system"])
        .arg(&chart));
    assert!(rendered.contains(&format!("image: {IMAGE}")), "{rendered}");

    // The binary, in its archive, runs.
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no release binary for {other}"),
    };
    let archive = format!("syncgc-0.1.0-linux-{arch}.tar.gz");
    let unpacked = tempfile::tempdir().unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(dist.join(&archive))
        .arg("-C")
        .arg(unpacked.path()));
    assert!(unpacked.path().join("LICENSE").is_file());
    let version = run(Command::new(unpacked.path().join("syncgc")).arg("--version"));
    assert!(version.starts_with("syncgc 0.1.0"), "{version}");

    // The checksums hold, and the krew manifest names the archive by its checksum.
    let sums = read("SHA256SUMS");
    for name in [
        "install.yaml",
        "install-1.20.yaml",
        "uninstall.yaml",
        "syncgc-0.1.0.tgz",
        archive.as_str(),
        "syncgc.krew.yaml",
    ] {
        assert!(sums.contains(&format!("  {name}\n")), "{name} in {sums}");
    }
    run(Command::new("sha256sum")
        .current_dir(&dist)
        .args(["--check", "SHA256SUMS"]));
    let krew: Value = serde_norway::from_str(&read("syncgc.krew.yaml")).unwrap();
    assert_eq!(krew["kind"], "Plugin");
    assert_eq!(krew["spec"]["version"], "v0.1.0");
    let platform = &krew["spec"]["platforms"][0];
    let sum = sums
        .lines()
        .find(|l| l.ends_with(&format!("  {archive}")))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    assert_eq!(platform["sha256"], sum);
    assert_eq!(platform["bin"], "syncgc");
    assert!(
        platform["uri"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/releases/download/v0.1.0/{archive}"))
    );

    // The CHANGELOG's Unreleased section became 0.1.0's, and its notes come with the release.
    let changelog = std::fs::read_to_string(tree.path().join("CHANGELOG.md")).unwrap();
    let unreleased = changelog.find("## Unreleased").unwrap();
    let cut = changelog.find("## 0.1.0 — ").expect("a 0.1.0 section");
    assert!(unreleased < cut);
    assert!(read("RELEASE_NOTES.md").contains("syncgc disarm"));
    let cargo = std::fs::read_to_string(tree.path().join("Cargo.toml")).unwrap();
    assert!(cargo.contains("version = \"0.1.0\""));
}
