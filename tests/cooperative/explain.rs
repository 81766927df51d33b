//! `syncgc explain` on the real apiserver, as a user runs it: a namespace stuck Terminating
//! (what is left, who holds it, what syncgc holds there) followed with `--watch` until it is
//! gone; a name that does not exist is an error; `--context` picks the kubeconfig's context.

use crate::support;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::DeleteParams;

use support::process::Following;
use support::{
    TestNamespace, being_deleted, clear_finalizers, create, eventually, held, opted_in, owner_ref,
};

const WAIT: Duration = Duration::from_secs(90);

async fn namespace(test: &str) -> TestNamespace {
    support::process::served_namespace(test).await
}

fn explain(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_syncgc"));
    command
        .arg("explain")
        .args(args)
        .env("KUBECONFIG", support::kubeconfig_path())
        .env_remove("SYNCGC_KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = explain(args).output().unwrap();
    (
        status.code(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// A namespace deleted while an object in it is held by a finalizer of another controller and
/// an armed owner waits for it: the report names the namespace's conditions and finalizer,
/// what is left by kind with each finalizer and who removes it, and what syncgc holds; it exits
/// 1 while the namespace stays. `--watch` follows it until it is gone once the object is let go.
#[tokio::test]
async fn a_terminating_namespace_says_what_holds_it() {
    let ns = namespace("explain-ns").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    create(&api, &held("held", vec![owner_ref(&owner, true)])).await;
    let namespaces = Api::<Namespace>::all(ns.client.clone());
    namespaces
        .delete(&ns.name, &DeleteParams::background())
        .await
        .unwrap();
    eventually(
        "the namespace controller deletes what is in it",
        WAIT,
        || being_deleted(&api, "held"),
    )
    .await;
    eventually("the namespace says a finalizer remains", WAIT, || async {
        let namespace = namespaces.get(&ns.name).await.ok()?;
        let conditions = namespace.status?.conditions?;
        conditions
            .iter()
            .any(|c| c.type_ == "NamespaceFinalizersRemaining" && c.status == "True")
            .then_some(())
    })
    .await;

    let object = format!("namespace/{}", ns.name);
    let (code, text, err) = run(&[&object]);
    assert_eq!(code, Some(1), "{text}{err}");
    for want in [
        format!("namespace {}: Terminating, being deleted since", ns.name),
        "NamespaceFinalizersRemaining".to_owned(),
        "finalizer kubernetes: removed by the namespace controller".to_owned(),
        "ConfigMap (v1): 2".to_owned(),
        "held (being deleted): finalizers test.syncgc.io/hold, removed by another controller"
            .to_owned(),
        "syncgc holds ConfigMap owner until its dependents are gone, at the latest until"
            .to_owned(),
    ] {
        assert!(text.contains(&want), "{want:?} in:\n{text}");
    }
    let (code, json, err) = run(&[&format!("ns/{}", ns.name), "-o", "json"]);
    assert_eq!(code, Some(1), "{err}");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["blocked"], true, "{report:#}");
    assert_eq!(report["remaining"][0]["kind"], "ConfigMap", "{report:#}");
    assert_eq!(report["remaining"][0]["count"], 2, "{report:#}");
    assert_eq!(report["syncgc"][0]["name"], "owner", "{report:#}");

    let mut follow = Following::new(explain(&[&object, "--watch"]).spawn().unwrap());
    follow.started().await;
    clear_finalizers(&api, "held").await;
    let (status, said) = follow.ended(WAIT).await;
    assert_eq!(status.code(), Some(0), "{said}");
    let lines: Vec<&str> = said.lines().collect();
    assert!(lines[0].contains("object(s) left in 1 kind(s)"), "{said}");
    assert!(
        lines
            .last()
            .unwrap()
            .ends_with(&format!("namespace {}: gone", ns.name)),
        "{said}"
    );
}

/// `--watch` on an armed owner being deleted sees a dependent of a kind served only after it
/// started (a CustomResourceDefinition created meanwhile; the dependent kept by a finalizer,
/// since syncgc deletes it at once), and follows the owner until it goes.
#[tokio::test]
async fn watch_sees_a_dependent_of_a_kind_served_later() {
    let ns = namespace("explain-new-kind").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    create(&api, &held("held", vec![owner_ref(&owner, true)])).await;
    support::delete(&api, "owner", &DeleteParams::background()).await;
    let mut follow = Following::new(
        explain(&["configmap/owner", "-n", &ns.name, "--watch"])
            .spawn()
            .unwrap(),
    );
    follow.started().await;
    follow.says("1 dependent(s) left", WAIT).await;
    let gadgets = support::create_crd(&ns, "Gadget", "gadgets").await;
    let objects = support::surface::dynamic(&ns, &gadgets);
    let reference = owner_ref(&owner, true);
    eventually("the apiserver takes the custom resource", WAIT, || async {
        let object = serde_json::json!({
            "apiVersion": gadgets.api_version, "kind": gadgets.kind,
            "metadata": { "name": "g", "ownerReferences": [reference],
                          "finalizers": [support::HOLD] } });
        let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
        objects
            .create(&kube::api::PostParams::default(), &object)
            .await
            .ok()
            .map(drop)
    })
    .await;
    // syncgc deletes it at once, as a dependent of a waiting owner; its finalizer keeps it.
    follow.says("2 dependent(s) left", WAIT).await;
    let unheld = serde_json::json!({ "metadata": { "finalizers": null } });
    objects
        .patch(
            "g",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&unheld),
        )
        .await
        .unwrap();
    clear_finalizers(&api, "held").await;
    let (status, said) = follow.ended(WAIT).await;
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(
        said.lines().last().unwrap().ends_with("owner: gone"),
        "{said}"
    );
    support::delete_crd(&ns.client, &gadgets).await;
}

/// A name, namespace or kind that does not exist is an error (exit 2) that says which.
#[tokio::test]
async fn what_does_not_exist_is_an_error() {
    let ns = namespace("explain-missing").await;
    let (code, _, err) = run(&["configmap/nothing", "-n", &ns.name]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "configmap/nothing not found in namespace {}",
            ns.name
        )),
        "{err}"
    );
    let (code, _, err) = run(&["namespace/t-no-such-namespace"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("namespace t-no-such-namespace not found"),
        "{err}"
    );
    let (code, _, err) = run(&["nokind/x", "-n", &ns.name]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no kind \"nokind\""), "{err}");
}

/// `--context` picks a context of the kubeconfig; one it does not have is an error.
#[tokio::test]
async fn the_context_is_the_one_asked_for() {
    let ns = namespace("explain-context").await;
    let api = ns.api::<ConfigMap>();
    create(&api, &support::config_map("here", vec![])).await;
    let (code, text, err) = run(&["cm/here", "-n", &ns.name, "--context", "syncgc-local"]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(
        text.contains(&format!("ConfigMap {}/here", ns.name)),
        "{text}"
    );
    let (code, _, err) = run(&["cm/here", "-n", &ns.name, "--context", "elsewhere"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("elsewhere"), "{err}");
}

/// An object's owners are shown with whether each is there: what it depends on. (An absent
/// owner would not stay: a collector removes the reference, or the dependent.)
#[tokio::test]
async fn the_owners_of_an_object_are_shown() {
    let ns = namespace("explain-owners").await;
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &held("owner", vec![])).await;
    let mut unknown = owner_ref(&owner, false);
    unknown.api_version = "nothing.example.com/v1".into();
    unknown.kind = "Nothing".into();
    unknown.name = "elsewhere".into();
    unknown.uid = "00000000-0000-0000-0000-00000000beef".into();
    create(
        &api,
        &support::config_map("child", vec![owner_ref(&owner, false), unknown]),
    )
    .await;
    support::delete(&api, "owner", &DeleteParams::background()).await;
    let (code, text, err) = run(&["cm/child", "-n", &ns.name]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(
        text.contains(
            "owners (what it depends on):\n    ConfigMap owner: being deleted\n    \
             Nothing elsewhere: cannot be looked up\n"
        ),
        "{text}"
    );
    let (_, json, _) = run(&["cm/child", "-n", &ns.name, "-o", "json"]);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["owners"][0]["state"], "being deleted", "{report:#}");
    clear_finalizers(&api, "owner").await;
}

/// The README's block that starts with `first`, its namespace `demo` made `ns`.
fn readme_block(first: &str, ns: &str) -> String {
    support::samples::block("README.md", first)
        .replace("-n demo", &format!("-n {ns}"))
        .replace(" demo/", &format!(" {ns}/"))
        .replace(" demo namespace", &format!(" {ns} namespace"))
}

/// A line as the README may show it for any run: its timestamp (`explain --watch` starts each
/// line with one), the kinds it could not list (the README's cluster has none that come and go,
/// as the CRDs of other tests do) and the owner's longest wait (the tests' syncgc runs with
/// shorter timeouts; the webhook's unit test holds the README's) left out.
fn any_run(line: &str) -> String {
    let line = match line.split_once(' ') {
        Some((first, rest)) if first.parse::<jiff::Timestamp>().is_ok() => rest,
        _ => line,
    };
    let line = line.split("; could not list ").next().unwrap_or(line);
    match line.split_once(", for at most ") {
        Some((before, _)) => format!("{before}, for at most …"),
        None => line.to_owned(),
    }
}

/// The README's first synchronous delete, run as it is written (in the test's namespace for
/// `demo`): its commands set it up, kubectl 1.34 (`hack/tools.sh`) prints the README's warning
/// and waits, `explain --watch` prints the README's line, the README's `patch` lets the held
/// dependent go, and only then does the delete return, printing the README's last line.
#[tokio::test]
async fn the_readmes_first_synchronous_delete_prints_what_the_readme_shows() {
    let ns = namespace("readme").await;
    let api = ns.api::<ConfigMap>();
    let set_up = readme_block("kubectl create namespace demo\n", &ns.name);
    let set_up = set_up.split_once('\n').unwrap().1; // the namespace is the test's
    support::bash(set_up);

    let deleted = readme_block("$ kubectl -n demo delete configmap shop\n", &ns.name);
    let mut deleted = deleted.lines();
    let command = deleted.next().unwrap().strip_prefix("$ kubectl ").unwrap();
    let kubectl = support::chart::tool("kubectl");
    let delete = tokio::process::Command::new(&kubectl)
        .args(command.split(' '))
        .env("KUBECONFIG", support::kubeconfig_path())
        .output();
    let delete = tokio::spawn(delete);
    // `settings` has no finalizer: syncgc deletes it at once, and `held` is left.
    eventually("the owner waits on held alone", WAIT, || async {
        being_deleted(&api, "shop").await?;
        support::gone(&api, "settings").await
    })
    .await;

    let watched = readme_block(
        "$ syncgc explain configmap/shop -n demo --watch\n",
        &ns.name,
    );
    let mut watched = watched.lines();
    let args: Vec<&str> = watched.next().unwrap().split(' ').skip(3).collect();
    let mut follow = Following::new(explain(&args).spawn().unwrap());
    follow.started().await;
    assert!(
        !delete.is_finished(),
        "kubectl delete waits while held stays"
    );
    let patch = readme_block("$ kubectl -n demo patch configmap held", &ns.name);
    let patch = patch.trim_end().strip_prefix("$ ").unwrap();
    support::bash(patch);

    let (status, said) = follow.ended(WAIT).await;
    assert_eq!(status.code(), Some(0), "{said}");
    let said: Vec<String> = said.lines().map(any_run).collect();
    let shown: Vec<String> = watched.map(any_run).collect();
    assert_eq!(
        said.get(..shown.len()),
        Some(shown.as_slice()),
        "explain --watch printed:\n{said:#?}"
    );
    let readme = support::samples::page("README.md");
    let ends = readme
        .split_once("the second prints `")
        .and_then(|(_, after)| after.split('`').next())
        .expect("the README says how the watch ends");
    assert_eq!(
        said.last().unwrap(),
        &ends.replace(" demo/", &format!(" {}/", ns.name)),
        "the README says the watch ends so"
    );

    let out = tokio::time::timeout(WAIT, delete)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<String> = [out.stderr, out.stdout]
        .iter()
        .flat_map(|o| {
            String::from_utf8_lossy(o)
                .lines()
                .map(any_run)
                .collect::<Vec<_>>()
        })
        .collect();
    let shown: Vec<String> = deleted.map(any_run).collect();
    assert_eq!(printed, shown, "kubectl delete printed:\n{printed:#?}");
}
