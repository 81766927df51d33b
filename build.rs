//! Puts the commit syncgc is built from into `SYNCGC_COMMIT` (for `--version` and the metric
//! `syncgc_build_info`): the variable's own value when it is set (a Docker build, which has no
//! `.git`, passes it as a build argument), else `git rev-parse`, else `unknown`.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SYNCGC_COMMIT");
    let commit = std::env::var("SYNCGC_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(from_git)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SYNCGC_COMMIT={}", commit.trim());
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The commit of HEAD, watching the files that change when HEAD moves.
fn from_git() -> Option<String> {
    let dir = git(&["rev-parse", "--git-dir"])?;
    let dir = Path::new(&dir);
    let head = dir.join("HEAD");
    let mut watched = vec![head.clone(), dir.join("packed-refs")];
    if let Ok(text) = std::fs::read_to_string(&head)
        && let Some(reference) = text.trim().strip_prefix("ref: ")
    {
        watched.push(dir.join(reference));
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}
