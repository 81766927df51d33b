//! The Helm chart (`charts/syncgc`), rendered by the helm that `hack/tools.sh` installs.

use std::process::Command;

use serde_json::Value;

/// The chart's directory.
pub const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/syncgc");

/// The path of a tool `hack/tools.sh` installs (`helm`, `kubectl`), installing it first.
pub fn tool(name: &str) -> String {
    hack("tools.sh", &[name], &[])
}

/// What `hack/SCRIPT ARGS` printed, run with `env`; panics with what it said unless it succeeds.
pub fn hack(script: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let path = format!("{}/hack/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(&path)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|err| panic!("running {path}: {err}"));
    assert!(
        out.status.success(),
        "hack/{script} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `helm ARGS` on the local cluster; panics with what it said unless it succeeds.
pub fn helm(args: &[&str]) -> String {
    let out = Command::new(tool("helm"))
        .args(args)
        .env("KUBECONFIG", super::kubeconfig_path())
        .output()
        .expect("running helm");
    assert!(
        out.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `helm template syncgc charts/syncgc -n syncgc-system ARGS`, as JSON objects.
pub fn template(args: &[&str]) -> Vec<Value> {
    parse(&rendered(args))
}

/// What [`template`] renders, as helm prints it.
pub fn rendered(args: &[&str]) -> String {
    let helm = tool("helm");
    let out = Command::new(&helm)
        .args(["template", "syncgc", CHART, "--namespace", "syncgc-system"])
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("{helm}: {err}"));
    assert!(
        out.status.success(),
        "helm template {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The objects of a multi-document YAML stream.
pub fn parse(yaml: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Whether `object` is a Helm hook (run around an install or uninstall, or by `helm test`;
/// not installed).
pub fn is_hook(object: &Value) -> bool {
    object["metadata"]["annotations"]["helm.sh/hook"].is_string()
}

/// The uninstall Job: the one pre-delete hook.
pub fn uninstall_job(rendered: &[Value]) -> &Value {
    rendered
        .iter()
        .find(|o| o["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete")
        .expect("the uninstall Job")
}
