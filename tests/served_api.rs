//! What syncgc knows, served as a Kubernetes API: the real apiserver's aggregation layer calls a
//! `syncgc run` process (its `APIService` at the node's address, [`support::served_api`]), as
//! an administrator and as a tenant whose certificate a RoleBinding binds to `view` in one
//! namespace (which takes syncgc's aggregated ClusterRole from its manifests). The plan and the
//! causes answer only about what the user may read and count the rest; a wider Role names
//! more; a call that did not come through the apiserver is refused; bad input gets a `Status`
//! with its code.

mod support;

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::DeleteParams;
use serde_json::{Value, json};

use support::process::{Syncgc, TEST_TIMEOUTS, WEBHOOK_LABEL};
use support::{
    TestNamespace, config_map, create, eventually, gone, kubectl, kubectl_as, opted_in, owner_ref,
};

const WAIT: Duration = Duration::from_secs(60);

/// Held by each test while the APIService stays as [`syncgc`] registered it; one that changes
/// its replicas holds it alone.
static REGISTRATION: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The syncgc of this binary, its API registered once (and removed when it stops).
async fn syncgc() -> &'static Syncgc {
    static SHARED: OnceLock<Syncgc> = OnceLock::new();
    static REGISTERED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    let syncgc = tokio::task::spawn_blocking(|| {
        SHARED.get_or_init(|| {
            Syncgc::start(
                &format!("syncgc-api-{}", std::process::id()),
                &TEST_TIMEOUTS,
            )
        })
    })
    .await
    .unwrap();
    REGISTERED
        .get_or_init(|| support::served_api::register(syncgc))
        .await;
    syncgc
}

async fn namespace(test: &str) -> TestNamespace {
    let syncgc = syncgc().await;
    let client = support::client().await;
    TestNamespace::with_labels(&client, test, &[(WEBHOOK_LABEL, &syncgc.name)]).await
}

/// A DeletionPlan of `kind/name` (of `api_version`) in `namespace`, as YAML for kubectl.
fn plan_of(namespace: &str, api_version: &str, kind: &str, name: &str) -> String {
    json!({
        "apiVersion": "syncgc.io/v1alpha1",
        "kind": "DeletionPlan",
        "metadata": {"namespace": namespace},
        "spec": {"target": {"apiVersion": api_version, "kind": kind, "name": name}},
    })
    .to_string()
}

/// The plan's status as `kubeconfig`'s user asks it (again while syncgc's graph has not seen
/// the object yet).
async fn plan_as(kubeconfig: &str, review: &str) -> Result<Value, String> {
    let mut tries = 0;
    loop {
        let (kubeconfig, review) = (kubeconfig.to_owned(), review.to_owned());
        let answer = tokio::task::spawn_blocking(move || {
            kubectl_as(
                &kubeconfig,
                &["create", "-o", "json", "-f", "-"],
                Some(&review),
            )
        })
        .await
        .unwrap();
        match answer {
            Err(said) if said.contains("ServiceUnavailable") && tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            answer => {
                return answer
                    .map(|out| serde_json::from_str::<Value>(&out).unwrap()["status"].clone());
            }
        }
    }
}

/// The names of the objects of `kind` in the entries `list` of a plan.
fn named(list: &Value, kind: &str) -> Vec<String> {
    let mut names: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == kind)
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn the_group_is_discovered_with_its_resources_and_schemas() {
    let _registered = REGISTRATION.read().await;
    syncgc().await;
    let names = kubectl(
        &["api-resources", "--api-group", "syncgc.io", "-o", "name"],
        None,
    );
    for resource in [
        "deletionplans.syncgc.io",
        "clusterdeletionplans.syncgc.io",
        "deletioncauses.syncgc.io",
    ] {
        assert!(names.lines().any(|l| l == resource), "{names}");
    }
    // The aggregator merges syncgc's OpenAPI into the apiserver's.
    eventually(
        "the OpenAPI has syncgc's kinds",
        Duration::from_secs(120),
        || async {
            let spec =
                tokio::task::spawn_blocking(|| kubectl(&["get", "--raw", "/openapi/v2"], None))
                    .await
                    .unwrap();
            spec.contains("io.syncgc.v1alpha1.DeletionPlan")
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn the_plan_served_is_the_plan_the_client_makes() {
    let _registered = REGISTRATION.read().await;
    let ns = namespace("api-plan").await;
    let api = ns.api::<ConfigMap>();
    let root = create(&api, &config_map("root", vec![])).await;
    let a = create(&api, &config_map("a", vec![owner_ref(&root, true)])).await;
    create(&api, &config_map("b", vec![owner_ref(&root, false)])).await;
    create(&api, &config_map("c", vec![owner_ref(&a, true)])).await;
    let other = create(&api, &config_map("other", vec![])).await;
    create(
        &api,
        &config_map(
            "kept",
            vec![owner_ref(&root, true), owner_ref(&other, true)],
        ),
    )
    .await;

    let admin = support::kubeconfig_path();
    let served = plan_as(&admin, &plan_of(&ns.name, "v1", "ConfigMap", "root"))
        .await
        .unwrap();
    assert_eq!(served["modeFrom"], "server", "{served}");
    assert_eq!(
        named(&served["delete"], "ConfigMap"),
        ["a", "b", "c"],
        "{served}"
    );
    assert_eq!(named(&served["keep"], "ConfigMap"), ["kept"], "{served}");
    // The client's plan of the same DELETE, listed by the client (--mode makes it one).
    let client = support::syncgc_json(&[
        "plan",
        "configmap/root",
        "-n",
        &ns.name,
        "--mode",
        "cooperative",
        "-o",
        "json",
    ])
    .unwrap();
    for field in [
        "delete",
        "keep",
        "orphan",
        "wait",
        "goes",
        "waves",
        "requests",
        "synchronous",
    ] {
        assert_eq!(
            served[field], client[field],
            "{field}: {served} vs {client}"
        );
    }
    // And `syncgc plan` asks the API where it is served.
    let asked =
        support::syncgc_json(&["plan", "configmap/root", "-n", &ns.name, "-o", "json"]).unwrap();
    assert_eq!(asked["modeFrom"], "server", "{asked}");
    assert_eq!(asked["delete"], served["delete"]);
}

#[tokio::test]
async fn a_tenant_is_told_only_what_the_tenant_may_read() {
    let _registered = REGISTRATION.read().await;
    let ns = namespace("api-tenant").await;
    let elsewhere = namespace("api-elsewhere").await;
    let syncgc_view: String = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/base/rbac.yaml"
    ))
    .unwrap()
    .split("\n---\n")
    .find(|doc| doc.contains("name: syncgc-view"))
    .expect("the aggregated ClusterRole in manifests/base/rbac.yaml")
    .to_owned();
    kubectl(&["apply", "-f", "-"], Some(&syncgc_view));
    let dir = tempfile::tempdir().unwrap();
    let tenant = support::served_api::certificate_kubeconfig("tenant", &["tenants"], dir.path());
    kubectl(
        &[
            "-n",
            &ns.name,
            "create",
            "rolebinding",
            "tenant-view",
            "--clusterrole=view",
            "--user=tenant",
        ],
        None,
    );

    // Armed, so that its DELETE reaches syncgc, which records it and follows its cascade.
    let api = ns.api::<ConfigMap>();
    let root = create(&api, &opted_in("root", vec![], &[])).await;
    create(&api, &config_map("child", vec![owner_ref(&root, true)])).await;
    let secrets: Api<Secret> = ns.api();
    let mut secret = Secret::default();
    secret.metadata.name = Some("token".into());
    secret.metadata.owner_references = Some(vec![owner_ref(&root, true)]);
    create(&secrets, &secret).await;

    // Through view, once the aggregation controller has given it syncgc's rules: the
    // ConfigMap is named, the Secret (which view does not read) counted.
    let review = plan_of(&ns.name, "v1", "ConfigMap", "root");
    let restricted = eventually("the tenant's plan", WAIT, || async {
        plan_as(&tenant, &review).await.ok()
    })
    .await;
    assert_eq!(
        named(&restricted["delete"], "ConfigMap"),
        ["child"],
        "{restricted}"
    );
    assert_eq!(
        named(&restricted["delete"], "Secret"),
        Vec::<String>::new(),
        "{restricted}"
    );
    assert_eq!(restricted["withheld"], 1, "{restricted}");
    // Not the plan of an object the tenant may not get, nor of another namespace.
    let refused = plan_as(&tenant, &plan_of(&ns.name, "v1", "Secret", "token"))
        .await
        .unwrap_err();
    assert!(
        refused.contains("Forbidden") && refused.contains("may not get"),
        "{refused}"
    );
    let refused = plan_as(&tenant, &plan_of(&elsewhere.name, "v1", "ConfigMap", "x"))
        .await
        .unwrap_err();
    assert!(refused.contains("Forbidden"), "{refused}");

    // The control: a Role that reads Secrets too, and the Secret is named.
    let widen = |on: bool| {
        let verb = if on { "create" } else { "delete" };
        let mut role = vec!["-n", ns.name.as_str(), verb, "role", "secrets"];
        if on {
            role.extend(["--verb=get,list", "--resource=secrets"]);
        }
        kubectl(&role, None);
        let mut binding = vec!["-n", ns.name.as_str(), verb, "rolebinding", "secrets"];
        if on {
            binding.extend(["--role=secrets", "--user=tenant"]);
        }
        kubectl(&binding, None);
    };
    widen(true);
    let wider = eventually("the wider plan", WAIT, || async {
        let plan = plan_as(&tenant, &review).await.ok()?;
        (plan["withheld"].as_u64().unwrap_or(0) == 0).then_some(plan)
    })
    .await;
    assert_eq!(named(&wider["delete"], "Secret"), ["token"], "{wider}");
    widen(false);

    // The causes, once the tree is gone: the same rule.
    api.delete("root", &DeleteParams::default()).await.unwrap();
    eventually("the tree is gone", WAIT, || gone(&api, "child")).await;
    eventually("the Secret is gone", WAIT, || gone(&secrets, "token")).await;
    let causes = |kubeconfig: String| {
        let ns = ns.name.clone();
        async move {
            // The list as syncgc answers it (`kubectl get -o json` makes a List of its own,
            // without the count withheld).
            let path = format!("/apis/syncgc.io/v1alpha1/namespaces/{ns}/deletioncauses");
            tokio::task::spawn_blocking(move || {
                kubectl_as(&kubeconfig, &["get", "--raw", &path], None)
            })
            .await
            .unwrap()
            .map(|out| serde_json::from_str::<Value>(&out).unwrap())
        }
    };
    let restricted = eventually("the tenant's causes", WAIT, || async {
        let list = causes(tenant.clone()).await.ok()?;
        let objects = named_causes(&list);
        (objects.contains(&"ConfigMap/child".to_owned()) && list["withheld"] == 1).then_some(list)
    })
    .await;
    let objects = named_causes(&restricted);
    assert!(
        !objects.iter().any(|o| o.starts_with("Secret/")),
        "{restricted}"
    );
    let child = restricted["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["object"]["name"] == "child")
        .unwrap();
    assert_eq!(child["causes"][0]["name"], "root", "{child}");
    // kubectl prints them as a table.
    let table = kubectl_as(&tenant, &["-n", &ns.name, "get", "deletioncauses"], None).unwrap();
    assert!(
        table.starts_with("NAME") && table.contains("configmap.child"),
        "{table}"
    );
    widen(true);
    eventually("the wider causes", WAIT, || async {
        let list = causes(tenant.clone()).await.ok()?;
        named_causes(&list)
            .contains(&"Secret/token".to_owned())
            .then_some(())
    })
    .await;
}

/// `Kind/name` of each cause of a list.
fn named_causes(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            format!(
                "{}/{}",
                i["object"]["kind"].as_str().unwrap(),
                i["object"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn bad_input_gets_a_status_with_its_code() {
    let _registered = REGISTRATION.read().await;
    let ns = namespace("api-bad-input").await;
    let admin = support::kubeconfig_path();
    let refused = |review: String| {
        let admin = admin.clone();
        async move { plan_as(&admin, &review).await.unwrap_err() }
    };
    let missing = refused(plan_of(&ns.name, "v1", "ConfigMap", "missing")).await;
    assert!(
        missing.contains("NotFound") && missing.contains("does not exist"),
        "{missing}"
    );
    let unknown = refused(plan_of(&ns.name, "example.com/v1", "Widget", "w")).await;
    assert!(unknown.contains("BadRequest"), "{unknown}");
    let scope = refused(plan_of(&ns.name, "v1", "Namespace", &ns.name)).await;
    assert!(
        scope.contains("BadRequest") && scope.contains("cluster-scoped"),
        "{scope}"
    );
    let path = format!(
        "/apis/syncgc.io/v1alpha1/namespaces/{}/deletionplans",
        ns.name
    );
    let malformed = kubectl_as(
        &admin,
        &["create", "--raw", &path, "-f", "-"],
        Some("{\"spec\":"),
    )
    .unwrap_err();
    assert!(
        malformed.contains("BadRequest") && malformed.contains("does not parse"),
        "{malformed}"
    );
    let unknown_field = kubectl_as(
        &admin,
        &["create", "--raw", &path, "-f", "-"],
        Some(r#"{"spec": {"target": {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}, "force": true}}"#),
    )
    .unwrap_err();
    assert!(unknown_field.contains("BadRequest"), "{unknown_field}");
    let cause = kubectl_as(
        &admin,
        &["-n", &ns.name, "get", "deletioncauses", "configmap.never"],
        None,
    )
    .unwrap_err();
    assert!(cause.contains("NotFound"), "{cause}");
    // A plan is created, not read.
    let read = kubectl_as(&admin, &["get", "--raw", &path], None).unwrap_err();
    assert!(
        read.contains("MethodNotAllowed") || read.contains("405"),
        "{read}"
    );
}

/// `curl` of `path` at syncgc's own address, with `args` (certificates, headers): the status
/// code and the body.
fn curl(syncgc: &Syncgc, path: &str, args: &[&str]) -> (u16, Value) {
    let url = format!("https://127.0.0.1:{}{path}", syncgc.webhook.port());
    let out = Command::new("curl")
        .args(["-sk", "-o", "-", "-w", "\n%{http_code}", &url])
        .args(args)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn a_call_that_did_not_come_through_the_apiserver_is_refused() {
    let _registered = REGISTRATION.read().await;
    let syncgc = syncgc().await;
    let pki = std::path::Path::new(&support::kubeconfig_path()).with_file_name("pki");
    let file = |name: &str| pki.join(name).display().to_string();
    let (proxy_crt, proxy_key) = (
        file("front-proxy-client.crt"),
        file("front-proxy-client.key"),
    );
    let (admin_crt, admin_key) = (file("admin.crt"), file("admin.key"));
    let forged = [
        "-H",
        "X-Remote-User: system:admin",
        "-H",
        "X-Remote-Group: system:masters",
    ];
    let refused = [
        ("no certificate", vec![]),
        ("forged headers", forged.to_vec()),
        (
            "the cluster CA's certificate, not the front proxy's",
            [&["--cert", &admin_crt, "--key", &admin_key][..], &forged].concat(),
        ),
        (
            "the front proxy naming no user",
            vec!["--cert", &proxy_crt, "--key", &proxy_key],
        ),
    ];
    let causes = "/apis/syncgc.io/v1alpha1/namespaces/default/deletioncauses";
    for (what, args) in &refused {
        let (code, status) = curl(syncgc, causes, args);
        assert_eq!(code, 401, "{what}: {status}");
        assert_eq!(status["kind"], "Status", "{what}: {status}");
        assert_eq!(status["reason"], "Unauthorized", "{what}: {status}");
    }
    // The control: the front proxy's certificate, naming an administrator.
    let (code, list) = curl(
        syncgc,
        causes,
        &[&["--cert", &proxy_crt, "--key", &proxy_key][..], &forged].concat(),
    );
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["kind"], "DeletionCauseList", "{list}");

    // What one replica asks another: only with the serving certificate they share.
    let ask = ["-X", "POST", "-d", r#"{"scope":"every"}"#];
    let front_proxy = [&["--cert", &proxy_crt, "--key", &proxy_key][..], &forged].concat();
    for (what, args) in refused.iter().chain([&("the front proxy's", front_proxy)]) {
        let (code, status) = curl(syncgc, "/replicas/causes", &[&ask[..], args].concat());
        assert_eq!(code, 401, "a replica's question, {what}: {status}");
        assert_eq!(status["reason"], "Unauthorized", "{what}: {status}");
    }
    let (crt, key) = syncgc.pair();
    let (crt, key) = (crt.display().to_string(), key.display().to_string());
    let (code, entries) = curl(
        syncgc,
        "/replicas/causes",
        &[&ask[..], &["--cert", &crt, "--key", &key]].concat(),
    );
    assert_eq!(code, 200, "{entries}");
    assert!(entries.is_array(), "{entries}");
}

/// Each replica keeps the causes its own webhook saw, and the apiserver sends a DELETE to any
/// of them: the replica the aggregation layer calls answers with what another saw. Here the
/// one that saw the DELETE is an endpoint not ready, which the aggregation layer does not
/// call, and the one it calls saw nothing of the namespace (its webhook serves another).
#[tokio::test]
async fn every_replica_answers_the_causes_another_replica_saw() {
    let _alone = REGISTRATION.write().await;
    let saw = syncgc().await;
    let ns = namespace("api-replicas").await;
    let api = ns.api::<ConfigMap>();
    // Armed, so that its DELETE reaches syncgc's webhook.
    create(&api, &opted_in("gone", vec![], &[])).await;
    api.delete("gone", &DeleteParams::default()).await.unwrap();
    let path = format!(
        "/apis/syncgc.io/v1alpha1/namespaces/{}/deletioncauses",
        ns.name
    );
    let listed = || {
        let path = path.clone();
        async move {
            let out = tokio::task::spawn_blocking(move || kubectl(&["get", "--raw", &path], None))
                .await
                .unwrap();
            serde_json::from_str::<Value>(&out).unwrap()
        }
    };
    eventually(
        "the replica whose webhook saw it records it",
        WAIT,
        || async {
            named_causes(&listed().await)
                .contains(&"ConfigMap/gone".to_owned())
                .then_some(())
        },
    )
    .await;

    let name = format!("syncgc-api-other-{}", std::process::id());
    let other =
        tokio::task::spawn_blocking(move || Syncgc::start_replica(saw, &name, &TEST_TIMEOUTS))
            .await
            .unwrap();
    support::served_api::register_replicas(saw, &[&other], &[saw]).await;
    let list = eventually(
        "the other replica answers, with what the first saw",
        WAIT,
        || async {
            let list = listed().await;
            let log = std::fs::read_to_string(other.log()).unwrap_or_default();
            let answered = log
                .lines()
                .filter(|l| l.contains("answered the deletion causes") && l.contains(&ns.name))
                .any(|l| l.contains("causes=1"));
            answered.then_some(list)
        },
    )
    .await;
    assert_eq!(named_causes(&list), ["ConfigMap/gone"], "{list}");
    assert!(list.get("unanswered").is_none(), "{list}");
    support::served_api::register(saw).await;
}
