//! Shared support for the tests that run against the real local control plane
//! (`hack/cluster.sh`). The test command (`hack/test.sh`) starts it and sets `SYNCGC_KUBECONFIG`.
//! Without it these tests fail with a message that says so; they never skip.
#![allow(dead_code)]

pub mod barrier;
pub mod chart;
pub mod gc;
pub mod guards;
pub mod operator;
pub mod plan;
pub mod process;
#[path = "../../src/report/samples.rs"]
pub mod samples;
pub mod served_api;
pub mod surface;
pub mod webhook;
pub mod workload;

use std::future::Future;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ObjectMeta, Patch, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use syncgc::webhook::registration::NAMESPACE_NAME_LABEL;

/// The environment variable that names the local control plane's admin kubeconfig.
pub const KUBECONFIG_ENV: &str = "SYNCGC_KUBECONFIG";

/// The control plane's Kubernetes version, as the webhook registration depends on it.
pub fn server() -> syncgc::webhook::registration::ServerVersion {
    static VERSION: std::sync::OnceLock<syncgc::webhook::registration::ServerVersion> =
        std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = kubectl(&["version", "-o", "json"], None);
        let version: serde_json::Value = serde_json::from_str(&out).expect("kubectl version");
        version["serverVersion"]["gitVersion"]
            .as_str()
            .expect("the server's gitVersion")
            .parse()
            .expect("a Kubernetes version")
    })
}

/// The path of the control plane's kubeconfig; panics with instructions when it is not set.
pub fn kubeconfig_path() -> String {
    std::env::var(KUBECONFIG_ENV).unwrap_or_else(|_| {
        panic!(
            "{KUBECONFIG_ENV} is not set: these tests need the local control plane. \
             Run them with `hack/test.sh`, which starts it (or run `hack/cluster.sh up` and \
             `eval \"$(hack/cluster.sh env)\"` first)."
        )
    })
}

/// The kubeconfig of a user outside `system:masters` (`controller.kubeconfig` beside the
/// admin's, bound to cluster-admin by `hack/cluster.sh up`): the apiserver's in-flight limits
/// refuse it with 429 as they refuse a controller's ServiceAccount, never the admin.
pub fn controller_kubeconfig_path() -> String {
    let admin = kubeconfig_path();
    let path = std::path::Path::new(&admin).with_file_name("controller.kubeconfig");
    assert!(
        path.exists(),
        "{} is missing: `hack/cluster.sh up` writes it",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

/// A client for the local control plane, checked to answer; panics with a clear message when
/// it does not.
pub async fn client() -> Client {
    let path = kubeconfig_path();
    let config = syncgc::api::config(Some(path.as_ref()))
        .await
        .unwrap_or_else(|err| panic!("{KUBECONFIG_ENV}={path}: {err}"));
    let client = syncgc::api::client(config).expect("building a client");
    if let Err(err) = syncgc::api::server_version(&client).await {
        panic!(
            "the control plane in {KUBECONFIG_ENV}={path} does not answer ({err}); \
             is it running? `hack/cluster.sh status` tells."
        );
    }
    client
}

/// Polls `check` every 100 ms until it returns `Some`, and returns that; panics naming `what`
/// once `timeout` has passed.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs kubectl on the control plane with `input` on its standard input, checks that it
/// succeeds, and returns what it printed.
pub fn kubectl(args: &[&str], input: Option<&str>) -> String {
    kubectl_as(&kubeconfig_path(), args, input)
        .unwrap_or_else(|said| panic!("kubectl {args:?}: {said}"))
}

/// kubectl with `kubeconfig` and `input` on its standard input: what it printed, or what it
/// said on failure.
pub fn kubectl_as(kubeconfig: &str, args: &[&str], input: Option<&str>) -> Result<String, String> {
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl (hack/test.sh puts it on PATH)");
    if let Some(input) = input {
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), input.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Runs `script` with bash (`-euo pipefail`) and the tests' kubeconfig; panics with what it
/// said unless it succeeds.
pub fn bash(script: &str) {
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Creates syncgc's own namespace (where its leader Lease lives) unless it exists.
pub fn syncgc_namespace() {
    let _ = Command::new("kubectl")
        .args(["create", "namespace", "syncgc-system"])
        .env("KUBECONFIG", kubeconfig_path())
        .output();
}

/// Which garbage collector kube-controller-manager runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kcm {
    /// Its own GC (for syncgc in cooperative mode, and for the native side of comparisons).
    Gc,
    /// No GC (for syncgc in standalone mode).
    NoGc,
}

/// (Re)starts kube-controller-manager in `mode` unless it runs so already
/// (`hack/cluster.sh kcm`). Test binaries run one at a time, and each asks for the mode it needs.
pub fn kcm(mode: Kcm) {
    let arg = match mode {
        Kcm::Gc => "gc",
        Kcm::NoGc => "nogc",
    };
    static SWITCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = SWITCHING.lock().unwrap_or_else(|e| e.into_inner());
    cluster_sh(&["kcm", arg], &[]);
}

/// Runs `hack/cluster.sh ARGS` with `env`, and fails the test if it fails. What it does to the
/// control plane no other test sees: test binaries run one at a time.
pub fn cluster_sh(args: &[&str], env: &[(&str, &str)]) {
    if let Err(err) = try_cluster_sh(args, env) {
        panic!("{err}");
    }
}

/// Runs `hack/cluster.sh ARGS` with `env`; what failed, if it did (for a guard's drop, which
/// must not panic while a failed test unwinds).
pub fn try_cluster_sh(args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let what = format!("hack/cluster.sh {}", args.join(" "));
    let out = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/cluster.sh"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .map_err(|err| format!("running {what}: {err}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{what}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// A namespace of a test's own, deleted when the value is dropped (also when the test fails).
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
}

impl TestNamespace {
    /// Creates a fresh namespace named after `test` with a unique suffix.
    pub async fn new(client: &Client, test: &str) -> Self {
        Self::with_labels(client, test, &[]).await
    }

    /// Creates a fresh namespace named after `test`, with `labels` besides the usual ones.
    pub async fn with_labels(client: &Client, test: &str, extra: &[(&str, &str)]) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let name = format!(
            "t-{}-{:x}{:x}{}",
            test.replace('_', "-").chars().take(40).collect::<String>(),
            std::process::id(),
            nanos,
            COUNTER.fetch_add(1, Ordering::Relaxed),
        )
        .chars()
        .take(63)
        .collect::<String>();
        let mut labels: std::collections::BTreeMap<String, String> = [
            ("syncgc.io/test".to_owned(), "true".to_owned()),
            // Set by the apiserver itself from Kubernetes 1.21 on.
            (NAMESPACE_NAME_LABEL.to_owned(), name.clone()),
        ]
        .into();
        labels.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|err| panic!("creating namespace {name}: {err}"));
        Self {
            name,
            client: client.clone(),
        }
    }

    /// An API for namespaced objects of kind `K` in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// The Events (events.k8s.io) with `reason` in this namespace.
    pub async fn events(&self, reason: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
        self.api::<k8s_openapi::api::events::v1::Event>()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        cleanup(move |client| async move {
            // Nothing may keep the namespace from going: drop the finalizers tests left.
            clear_all_finalizers(&Api::<ConfigMap>::namespaced(client.clone(), &name)).await;
            clear_all_finalizers(&Api::<Pod>::namespaced(client.clone(), &name)).await;
            clear_all_finalizers(&Api::<Secret>::namespaced(client.clone(), &name)).await;
            delete_crds_of(&client, &name).await;
            Api::<Namespace>::all(client)
                .delete(&name, &DeleteParams::background())
                .await
                .map_err(|err| anyhow::anyhow!("deleting namespace {name}: {err}"))?;
            Ok(())
        });
    }
}

/// Deletes the CustomResourceDefinitions of the group a test made for `namespace`
/// (`NAMESPACE.test.syncgc.io`, see [`create_crd`]), whether the test got to delete them or not.
async fn delete_crds_of(client: &Client, namespace: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let Ok(list) = crds.list_metadata(&Default::default()).await else {
        return;
    };
    let group = format!(".{namespace}.test.syncgc.io");
    for crd in list.items.iter().filter(|c| c.name_any().ends_with(&group)) {
        let _ = crds
            .delete(&crd.name_any(), &DeleteParams::background())
            .await;
    }
}

async fn clear_all_finalizers<K>(api: &Api<K>)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Ok(list) = api.list_metadata(&Default::default()).await else {
        return;
    };
    let clear = serde_json::json!({ "metadata": {
        "finalizers": null,
        "annotations": { syncgc::names::PROTECTED_ANNOTATION: null },
    } });
    let protected = |i: &kube::core::PartialObjectMeta<K>| {
        i.annotations()
            .contains_key(syncgc::names::PROTECTED_ANNOTATION)
    };
    for item in list
        .items
        .iter()
        .filter(|i| !i.finalizers().is_empty() || protected(i))
    {
        let _ = api
            .patch_metadata(&item.name_any(), &Default::default(), &Patch::Merge(&clear))
            .await;
    }
}

/// `syncgc ARGS` with the tests' kubeconfig: its standard output read as JSON, or its exit
/// code and standard error.
pub fn syncgc_json(args: &[&str]) -> Result<serde_json::Value, (i32, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    if !out.status.success() {
        return Err((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(serde_json::from_slice(&out.stdout).expect("-o json prints JSON"))
}

/// Runs `work` with a fresh client on a runtime of its own, and waits for it: for clean-up in
/// `Drop`, where the test's runtime may be shutting down or panicking.
pub fn cleanup<F, Fut>(work: F)
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let path = kubeconfig_path();
    let joined = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async move {
            let config = syncgc::api::config(Some(path.as_ref())).await?;
            work(syncgc::api::client(config)?).await
        })
    })
    .join();
    if let Ok(Err(err)) = joined {
        eprintln!("cleanup: {err:#}");
    }
}

/// The finalizer tests put on an object to keep it until they let it go.
pub const HOLD: &str = "test.syncgc.io/hold";

/// A ConfigMap opted in to synchronous deletion, with `annotations` besides.
pub fn opted_in(
    name: &str,
    owners: Vec<OwnerReference>,
    annotations: &[(&str, &str)],
) -> ConfigMap {
    let mut cm = config_map(name, owners);
    cm.metadata.annotations = Some(
        std::iter::once((syncgc::names::SYNCHRONOUS_ANNOTATION, "true"))
            .chain(annotations.iter().copied())
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    );
    cm
}

/// A ConfigMap whose owners are `owners`, kept by [`HOLD`] until [`clear_finalizers`].
pub fn held(name: &str, owners: Vec<OwnerReference>) -> ConfigMap {
    with_finalizer(config_map(name, owners), HOLD)
}

/// `cm` in wave `wave` of its owners' deletion order.
pub fn in_wave(mut cm: ConfigMap, wave: &str) -> ConfigMap {
    cm.metadata.annotations = Some(
        [(
            syncgc::names::DELETION_ORDER_ANNOTATION.to_owned(),
            wave.to_owned(),
        )]
        .into(),
    );
    cm
}

/// `cm` with `finalizer` as its only finalizer.
pub fn with_finalizer(mut cm: ConfigMap, finalizer: &str) -> ConfigMap {
    cm.metadata.finalizers = Some(vec![finalizer.to_owned()]);
    cm
}

/// A ConfigMap named `name` whose owners are `owners`.
pub fn config_map(name: &str, owners: Vec<OwnerReference>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            owner_references: (!owners.is_empty()).then_some(owners),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// An owner reference to `owner` (which must have been read back from the apiserver).
pub fn owner_ref<K>(owner: &K, block_owner_deletion: bool) -> OwnerReference
where
    K: Resource<DynamicType = ()>,
{
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.name_any(),
        uid: owner
            .uid()
            .expect("an owner read back from the apiserver has a uid"),
        block_owner_deletion: Some(block_owner_deletion),
        controller: None,
    }
}

/// Creates `obj` through `api` and returns what the apiserver stored.
pub async fn create<K>(api: &Api<K>, obj: &K) -> K
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.create(&PostParams::default(), obj)
        .await
        .unwrap_or_else(|err| {
            panic!(
                "creating {}: {err}",
                obj.meta().name.as_deref().unwrap_or("?")
            )
        })
}

/// The owner-with-dependents shape most scenarios delete: under `owner`, a level of
/// ConfigMaps for each of `levels` — `(name, count)`: `count` children of every object of the
/// level above, named `name` followed by the indices of their line (`d0`, `d1`; `leaf00`,
/// `leaf01`) — each referring to its parent, blocking or not. Every level, top first, as
/// read back.
pub async fn tree(
    api: &Api<ConfigMap>,
    owner: &ConfigMap,
    levels: &[(&str, usize)],
    blocking: bool,
) -> Vec<Vec<ConfigMap>> {
    let mut parents = vec![(String::new(), owner.clone())];
    let mut tree = Vec::new();
    for (name, count) in levels {
        let mut level = Vec::new();
        for (line, parent) in &parents {
            for i in 0..*count {
                let child = config_map(
                    &format!("{name}{line}{i}"),
                    vec![owner_ref(parent, blocking)],
                );
                level.push((format!("{line}{i}"), create(api, &child).await));
            }
        }
        tree.push(level.iter().map(|(_, cm)| cm.clone()).collect());
        parents = level;
    }
    tree
}

/// Creates a namespaced custom resource kind `kind` (plural `plural`, version v1, any fields) in
/// a group named after `ns`, and returns its resource.
pub async fn create_crd(ns: &TestNamespace, kind: &str, plural: &str) -> kube::api::ApiResource {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let group = format!("{}.test.syncgc.io", ns.name);
    let crd: CustomResourceDefinition =
        serde_json::from_value(surface::crd(&group, kind, plural, &[("v1", true, true)]))
            .expect("a CustomResourceDefinition");
    Api::<CustomResourceDefinition>::all(ns.client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap_or_else(|err| panic!("creating {plural}.{group}: {err}"));
    surface::resource(&group, "v1", kind, plural)
}

/// Deletes the custom resource kind `resource` made by [`create_crd`].
pub async fn delete_crd(client: &Client, resource: &kube::api::ApiResource) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let name = format!("{}.{}", resource.plural, resource.group);
    Api::<CustomResourceDefinition>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap_or_else(|err| panic!("deleting {name}: {err}"));
}

/// Deletes `name` through `api` with `params`; panics naming it when the apiserver refuses.
pub async fn delete<K>(api: &Api<K>, name: &str, params: &DeleteParams)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.delete(name, params)
        .await
        .unwrap_or_else(|err| panic!("deleting {name}: {err}"));
}

/// Creates `owner` and a dependent named `held` that blocks it and is kept by [`HOLD`] until
/// [`clear_finalizers`]: the owner that waits, as most tests need it. Returns the owner.
pub async fn owner_and_held(api: &Api<ConfigMap>, owner: &ConfigMap) -> ConfigMap {
    let owner = create(api, owner).await;
    create(api, &held("held", vec![owner_ref(&owner, true)])).await;
    owner
}

/// `Some(())` once `name` in `api` has a deletionTimestamp.
pub async fn being_deleted<K>(api: &Api<K>, name: &str) -> Option<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let object = api
        .get(name)
        .await
        .unwrap_or_else(|err| panic!("reading {name}: {err}"));
    object.meta().deletion_timestamp.as_ref().map(|_| ())
}

/// Removes every finalizer of `name`, so that it can go.
pub async fn clear_finalizers<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({ "metadata": { "finalizers": null } });
    api.patch(name, &Default::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|err| panic!("clearing the finalizers of {name}: {err}"));
}

/// Whether `name` exists in `api`.
pub async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    gone(api, name).await.is_none()
}

/// `api`'s resourceVersion now, read consistently: where a watch that misses nothing after
/// this moment starts.
pub async fn resource_version<K>(api: &Api<K>) -> String
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list_metadata(&kube::api::ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

/// `Some(())` once `name` is gone from `api`.
pub async fn gone<K>(api: &Api<K>, name: &str) -> Option<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(None) => Some(()),
        Ok(Some(_)) => None,
        Err(err) => panic!("reading {name}: {err}"),
    }
}

/// A kubeconfig (written into `dir`) for the ServiceAccount `namespace/name`, with the token
/// the control plane's token controller gives it: to run syncgc with an install's RBAC instead
/// of the admin's.
pub async fn service_account_kubeconfig(
    namespace: &str,
    name: &str,
    dir: &std::path::Path,
) -> String {
    let (ns, account) = (namespace.to_owned(), name.to_owned());
    let token = tokio::task::spawn_blocking(move || service_account_token(&ns, &account))
        .await
        .unwrap();
    user_kubeconfig(name, serde_json::json!({ "token": token }), dir)
}

/// The token the control plane's token controller gives the ServiceAccount `namespace/name`
/// (in a Secret, as 1.20 does), once it has.
pub fn service_account_token(namespace: &str, name: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let secret = kubectl(
            &[
                "-n",
                namespace,
                "get",
                "serviceaccount",
                name,
                "-o",
                "jsonpath={.secrets[0].name}",
            ],
            None,
        );
        if !secret.is_empty() {
            let token = kubectl(
                &[
                    "-n",
                    namespace,
                    "get",
                    "secret",
                    &secret,
                    "-o",
                    "jsonpath={.data.token}",
                ],
                None,
            );
            let token = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, token)
                .expect("a token in base64");
            return String::from_utf8(token).unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the ServiceAccount {namespace}/{name} has no token after 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A token that may get syncgc's debug endpoints (`/debug/graph`), which answer only the bearer
/// tokens the apiserver authenticates and authorizes: a ServiceAccount's, granted the path.
pub fn debug_token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        syncgc_namespace();
        let grant = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "debug", "namespace": "syncgc-system"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "syncgc-test-debug"},
             "rules": [{"nonResourceURLs": ["/debug/graph"], "verbs": ["get"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "syncgc-test-debug"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "syncgc-test-debug"},
             "subjects": [{"kind": "ServiceAccount", "name": "debug",
                           "namespace": "syncgc-system"}]},
        ]});
        kubectl(&["apply", "-f", "-"], Some(&grant.to_string()));
        service_account_token("syncgc-system", "debug")
    })
}

/// A kubeconfig (written into `dir`) for the user `name` with the credentials `user` (a
/// kubeconfig's `user` entry), on the local control plane.
pub fn user_kubeconfig(name: &str, user: serde_json::Value, dir: &std::path::Path) -> String {
    let admin = kube::config::Kubeconfig::read_from(kubeconfig_path()).unwrap();
    let cluster = admin.clusters[0].cluster.clone().unwrap();
    let config = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{ "name": "local", "cluster": {
            "server": cluster.server,
            "certificate-authority-data": cluster.certificate_authority_data,
        }}],
        "users": [{ "name": name, "user": user }],
        "contexts": [{ "name": name, "context": { "cluster": "local", "user": name } }],
    });
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, config.to_string()).unwrap();
    path.display().to_string()
}
