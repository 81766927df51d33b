//! The Helm chart (`charts/syncgc`), with the helm and kubectl of `hack/tools.sh`: it lints, its
//! schema refuses keys it does not know and values out of range, and the release `syncgc` in
//! `syncgc-system` renders what `manifests/` builds — with default values `manifests/` (but the
//! Namespace, which the chart does not own), with cert-manager its overlay, with monitoring
//! `manifests/prometheus/`, on Kubernetes 1.20 `manifests/kubernetes-1.20/` (built by kubectl
//! 1.20), and as its pre-delete hook `manifests/uninstall/job.yaml` — its objects carrying
//! Helm's labels besides. Values change what they say, and another release name renames every
//! object and tells syncgc so.

use crate::support;

use std::collections::BTreeMap;
use std::process::{Command, Output};

use serde_json::Value;

use support::chart::{CHART, is_hook, parse, rendered, template, tool, uninstall_job};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const CHART_VERSION: &str = "0.1.0";

/// The labels Helm's charts carry besides those of `manifests/`, and their values for the
/// release `syncgc`.
fn chart_labels() -> [(&'static str, String); 4] {
    [
        ("helm.sh/chart", format!("syncgc-{CHART_VERSION}")),
        ("app.kubernetes.io/instance", "syncgc".to_owned()),
        ("app.kubernetes.io/version", CHART_VERSION.to_owned()),
        ("app.kubernetes.io/managed-by", "Helm".to_owned()),
    ]
}

fn helm(args: &[&str]) -> Output {
    let helm = tool("helm");
    Command::new(&helm)
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("{helm}: {err}"))
}

/// `helm template syncgc charts/syncgc -n syncgc-system ARGS`, which must fail: its error.
fn refused(args: &[&str]) -> String {
    let mut all = vec!["template", "syncgc", CHART, "--namespace", "syncgc-system"];
    all.extend(args);
    let out = helm(&all);
    assert!(!out.status.success(), "helm template {args:?} renders");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// kubectl 1.20, as `hack/cluster.sh install` builds it.
fn kubectl_1_20() -> String {
    let cache = std::env::var("SYNCGC_CACHE").unwrap_or_else(|_| {
        let base = std::env::var("XDG_CACHE_HOME")
            .unwrap_or_else(|_| format!("{}/.cache", std::env::var("HOME").unwrap()));
        format!("{base}/syncgc")
    });
    let path = format!("{cache}/kubernetes-1.20.2/bin/kubectl");
    assert!(
        std::path::Path::new(&path).is_file(),
        "no kubectl 1.20 at {path}: run hack/cluster.sh install"
    );
    path
}

/// `kubectl kustomize DIR` (a directory of the checkout), which may not warn.
fn kustomized(kubectl: &str, dir: &str) -> Vec<Value> {
    let out = Command::new(kubectl)
        .args(["kustomize", &format!("{ROOT}/{dir}")])
        .output()
        .unwrap_or_else(|err| panic!("{kubectl}: {err}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{kubectl} kustomize {dir}: {stderr}");
    assert!(
        stderr.is_empty(),
        "{kubectl} kustomize {dir} warns: {stderr}"
    );
    parse(&String::from_utf8(out.stdout).unwrap())
}

/// `manifests/` as a current kubectl builds it.
fn manifests() -> Vec<Value> {
    kustomized(&tool("kubectl"), "manifests")
}

/// The file `path` of the checkout, parsed.
fn file(path: &str) -> Vec<Value> {
    parse(&std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap())
}

/// The `--set` of the image `objects` run (the manifests' own: a release's).
fn image_values(objects: &[Value]) -> String {
    let image = objects
        .iter()
        .find_map(|o| o["spec"]["template"]["spec"]["containers"][0]["image"].as_str())
        .expect("an image");
    match image.split_once('@') {
        Some((repository, digest)) => {
            format!("image.repository={repository},image.digest={digest}")
        }
        None => {
            let (repository, tag) = image.rsplit_once(':').expect("an image with a tag");
            format!("image.repository={repository},image.tag={tag}")
        }
    }
}

/// `object` without what the chart adds to what `manifests/` has: Helm's labels (checked to be
/// the release's), and the hook's annotations; the order of the containers' environment, which
/// a kustomize patch changes, does not matter.
fn normalized(object: &Value) -> Value {
    let mut object = object.clone();
    let kind = object["kind"].as_str().unwrap().to_owned();
    if let Some(labels) = object
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        for (key, value) in chart_labels() {
            match labels.get(key) {
                Some(found) => {
                    assert_eq!(found, &value, "{kind}'s {key}");
                    labels.remove(key);
                }
                None => panic!("{kind} has no label {key}"),
            }
        }
        if labels.is_empty() {
            object["metadata"].as_object_mut().unwrap().remove("labels");
        }
    }
    if let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.retain(|key, _| !key.starts_with("helm.sh/hook"));
        if annotations.is_empty() {
            object["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("annotations");
        }
    }
    sort_env(&mut object);
    object
}

/// `objects` by kind, namespace and name.
fn keyed<'a>(objects: impl IntoIterator<Item = &'a Value>) -> BTreeMap<String, &'a Value> {
    let mut keyed = BTreeMap::new();
    for object in objects {
        let key = format!(
            "{} {}/{}",
            object["kind"].as_str().unwrap(),
            object["metadata"]["namespace"].as_str().unwrap_or(""),
            object["metadata"]["name"].as_str().unwrap()
        );
        assert!(keyed.insert(key.clone(), object).is_none(), "{key} twice");
    }
    keyed
}

/// The chart's `rendered` objects are `expected`'s, object by object, once normalized.
fn assert_same(rendered: &[&Value], expected: &[&Value]) {
    let rendered = keyed(rendered.iter().copied());
    let expected = keyed(expected.iter().copied());
    assert_eq!(
        rendered.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "the chart renders other objects"
    );
    for (key, object) in &rendered {
        let ours = normalized(object);
        let theirs = normalized_manifest(expected[key]);
        assert_eq!(
            ours,
            theirs,
            "{key} differs:\nchart: {}\nmanifests: {}",
            serde_json::to_string_pretty(&ours).unwrap(),
            serde_json::to_string_pretty(&theirs).unwrap()
        );
    }
}

/// The containers' environment of `object`, in order of name.
fn sort_env(object: &mut Value) {
    let containers = object
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut);
    for container in containers.into_iter().flatten() {
        if let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) {
            env.sort_by_key(|e| e["name"].as_str().unwrap().to_owned());
        }
    }
}

/// A manifest with its environment in order, as [`normalized`] puts the chart's, and without
/// the label that says syncgc writes it (under Helm, Helm's label stands: syncgc does not
/// fight over it).
fn normalized_manifest(object: &Value) -> Value {
    let mut object = object.clone();
    sort_env(&mut object);
    if let Some(labels) = object
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        if labels.get("app.kubernetes.io/managed-by") == Some(&Value::from("syncgc")) {
            labels.remove("app.kubernetes.io/managed-by");
        }
        if labels.is_empty() {
            object["metadata"].as_object_mut().unwrap().remove("labels");
        }
    }
    object
}

/// The installed objects (not the hooks) of `rendered`.
fn installed(rendered: &[Value]) -> Vec<&Value> {
    rendered.iter().filter(|o| !is_hook(o)).collect()
}

/// `objects` but their Namespace, which the chart does not own (`--create-namespace`).
fn but_namespace(objects: &[Value]) -> Vec<&Value> {
    objects
        .iter()
        .filter(|o| o["kind"] != "Namespace")
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// The Deployment's environment in `objects`, as name → value.
fn env(objects: &[Value]) -> BTreeMap<String, String> {
    find(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                e["value"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

#[test]
fn the_chart_lints_with_every_option() {
    for args in [
        &[][..],
        &[
            "--set",
            "certificates.mode=cert-manager",
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.dashboard.enabled=true",
        ][..],
    ] {
        let mut all = vec!["lint", "--strict", CHART];
        all.extend(args);
        let out = helm(&all);
        assert!(
            out.status.success(),
            "helm lint --strict {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Kubernetes 1.20 is the oldest it installs on.
    let error = refused(&["--kube-version", "1.19.7"]);
    assert!(error.contains("kubeVersion"), "{error}");
}

#[test]
fn the_schema_refuses_unknown_keys_and_invalid_values() {
    for (set, says) in [
        ("nope=1", "additional properties 'nope' not allowed"),
        ("image.nope=1", "additional properties 'nope' not allowed"),
        (
            "metrics.grafana.enabled=true",
            "additional properties 'grafana' not allowed",
        ),
        ("mode=eager", "/mode"),
        ("unarmedDelete=maybe", "/unarmedDelete"),
        ("certificates.mode=vault", "/certificates/mode"),
        ("webhook.timeoutSeconds=31", "/webhook/timeoutSeconds"),
        ("timeouts.base=soon", "/timeouts/base"),
        ("image.digest=latest", "/image/digest"),
        // An environment variable's value is a string, which --set 16 is not.
        (
            "extraEnv[0].name=SYNCGC_WORKERS,extraEnv[0].value=16",
            "/extraEnv/0/value",
        ),
        ("webhook.port=0", "/webhook/port"),
        ("metrics.port=70000", "/metrics/port"),
        ("logLevel=info debug", "/logLevel"),
        ("imagePullSecrets[0].nope=x", "/imagePullSecrets/0"),
        ("podLabels.team=1", "/podLabels/team"),
    ] {
        let error = refused(&["--set", set]);
        assert!(error.contains(says), "--set {set}: {error}");
    }
}

#[test]
fn default_values_render_the_manifests() {
    let manifests = manifests();
    let rendered = template(&["--set", &image_values(&manifests)]);
    assert_same(&installed(&rendered), &but_namespace(&manifests));
    // Helm runs the uninstall Job only as the pre-delete hook, and `syncgc check` (with a
    // ServiceAccount allowed what it reads) only as `helm test`.
    let hooks: Vec<String> = rendered
        .iter()
        .filter(|o| is_hook(o))
        .map(|o| {
            format!(
                "{} {}",
                o["metadata"]["annotations"]["helm.sh/hook"], o["kind"]
            )
        })
        .collect();
    assert_eq!(
        hooks,
        [
            r#""test" "ServiceAccount""#,
            r#""test" "ClusterRole""#,
            r#""test" "ClusterRoleBinding""#,
            r#""test" "Pod""#,
            r#""pre-delete" "Job""#,
        ]
    );
    let check = find(&rendered, "Pod");
    assert_eq!(check["spec"]["containers"][0]["args"][0], "check");
    // And the release's image, unless told otherwise: v and the appVersion.
    let release = template(&[]);
    let deployment = find(&release, "Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("ghcr.io/syncgc/syncgc:v{CHART_VERSION}")
    );
}

#[test]
fn the_hook_is_the_uninstall_job_of_the_manifests() {
    let job = file("manifests/uninstall/job.yaml");
    let rendered = template(&["--set", &image_values(&manifests())]);
    let hooks = vec![uninstall_job(&rendered)];
    let annotations = &hooks[0]["metadata"]["annotations"];
    assert_eq!(annotations["helm.sh/hook"], "pre-delete");
    assert_eq!(
        annotations["helm.sh/hook-delete-policy"],
        "before-hook-creation,hook-succeeded"
    );
    // Argo CD's word for it, in the chart and the manifests alike (assert_same).
    assert_eq!(annotations["argocd.argoproj.io/hook"], "PreDelete");
    assert_eq!(
        annotations["argocd.argoproj.io/hook-delete-policy"],
        "BeforeHookCreation,HookSucceeded"
    );
    assert_same(&hooks, &job.iter().collect::<Vec<_>>());
    // Both run the image of the Deployment.
    assert_eq!(image_values(&job), image_values(&manifests()));
}

#[test]
fn cert_manager_renders_the_cert_manager_overlay() {
    let overlay = kustomized(&tool("kubectl"), "manifests/overlays/cert-manager");
    let rendered = template(&[
        "--set",
        "certificates.mode=cert-manager",
        "--set",
        &image_values(&overlay),
    ]);
    assert_same(&installed(&rendered), &but_namespace(&overlay));

    // An issuer of one's own instead of the self-signed one.
    let rendered = template(&[
        "--set",
        "certificates.mode=cert-manager",
        "--set",
        "certificates.certManager.issuerRef.name=corp-ca",
        "--set",
        "certificates.certManager.issuerRef.kind=ClusterIssuer",
    ]);
    assert!(!rendered.iter().any(|o| o["kind"] == "Issuer"));
    let issuer = &find(&rendered, "Certificate")["spec"]["issuerRef"];
    assert_eq!(
        *issuer,
        serde_json::json!({ "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io" })
    );
}

#[test]
fn monitoring_renders_the_prometheus_manifests_and_the_dashboard() {
    let manifests = manifests();
    let prometheus = kustomized(&tool("kubectl"), "manifests/prometheus");
    let plain = template(&["--set", &image_values(&manifests)]);
    let rendered = template(&[
        "--set",
        &image_values(&manifests),
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.dashboard.enabled=true",
    ]);
    let added: Vec<&Value> = installed(&rendered)
        .into_iter()
        .filter(|o| !plain.contains(o))
        .collect();
    let (dashboards, added): (Vec<&Value>, Vec<&Value>) =
        added.into_iter().partition(|o| o["kind"] == "ConfigMap");
    assert_same(&added, &prometheus.iter().collect::<Vec<_>>());

    assert_eq!(dashboards.len(), 1);
    let dashboard = dashboards[0];
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json = std::fs::read_to_string(format!(
        "{ROOT}/manifests/prometheus/grafana-dashboard.json"
    ))
    .unwrap();
    assert_eq!(
        dashboard["data"]["syncgc.json"].as_str().unwrap(),
        json.trim_end()
    );

    // The labels a Prometheus selects by.
    let rendered = template(&[
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.labels.release=prometheus",
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.labels.release=prometheus",
    ]);
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert_eq!(
            find(&rendered, kind)["metadata"]["labels"]["release"],
            "prometheus"
        );
    }
}

#[test]
fn the_chart_copies_the_dashboard_and_the_alerts_of_the_manifests() {
    for name in ["grafana-dashboard.json", "prometheusrule.yaml"] {
        let chart = std::fs::read(format!("{CHART}/files/{name}")).unwrap();
        let manifest = std::fs::read(format!("{ROOT}/manifests/prometheus/{name}")).unwrap();
        assert!(
            chart == manifest,
            "charts/syncgc/files/{name} is not manifests/prometheus/{name}: copy it"
        );
    }
}

/// On Kubernetes 1.20 the chart renders `manifests/kubernetes-1.20` (policy/v1beta1), as
/// kubectl 1.20 builds it.
#[test]
fn kubernetes_1_20_gets_the_install_for_1_20() {
    let mut manifests = kustomized(&kubectl_1_20(), "manifests/kubernetes-1.20");
    // kustomize v2 gives the cluster-scoped webhook configuration the kustomization's
    // namespace, which the apiserver ignores.
    for object in &mut manifests {
        if object["kind"] == "MutatingWebhookConfiguration" {
            object["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("namespace");
        }
    }
    // The chart leaves the APIService out on 1.20, whose apiserver cannot apply one
    // server-side (as Helm 4 does); the manifests, applied client-side, have it.
    let api_service = manifests.iter().position(|o| o["kind"] == "APIService");
    manifests.remove(api_service.expect("the manifests for 1.20 have the APIService"));
    let rendered = template(&[
        "--kube-version",
        "1.20.2",
        "--set",
        &image_values(&manifests),
    ]);
    assert!(!rendered.iter().any(|o| o["kind"] == "APIService"));
    assert_same(&installed(&rendered), &but_namespace(&manifests));
    assert_eq!(
        find(&rendered, "PodDisruptionBudget")["apiVersion"],
        "policy/v1beta1"
    );
    let current = template(&["--kube-version", "1.21.0"]);
    assert_eq!(
        find(&current, "PodDisruptionBudget")["apiVersion"],
        "policy/v1"
    );
}

#[test]
fn values_change_what_they_say() {
    let defaults = env(&template(&[]));
    for absent in [
        "SYNCGC_UNARMED_DELETE",
        "SYNCGC_TIMEOUT_BASE",
        "SYNCGC_WEBHOOK_TIMEOUT_SECONDS",
        "SYNCGC_EXCLUDE_NAMESPACES",
        "SYNCGC_WEBHOOK_CONFIG_NAME",
        "SYNCGC_LEADER_ELECTION_LEASE",
    ] {
        assert!(!defaults.contains_key(absent), "{absent} in {defaults:?}");
    }

    let rendered = template(&[
        "--set",
        "mode=standalone",
        "--set",
        "unarmedDelete=deny",
        "--set",
        "timeouts.base=90s,timeouts.perDependent=1s,timeouts.max=2h",
        "--set",
        "webhook.timeoutSeconds=10",
        "--set",
        "excludedNamespaces={kube-system,monitoring}",
        "--set",
        "logFormat=text",
        "--set-string",
        "extraEnv[0].name=SYNCGC_WORKERS,extraEnv[0].value=16",
    ]);
    let env = env(&rendered);
    for (name, value) in [
        ("SYNCGC_MODE", "standalone"),
        ("SYNCGC_UNARMED_DELETE", "deny"),
        ("SYNCGC_TIMEOUT_BASE", "90s"),
        ("SYNCGC_TIMEOUT_PER_DEPENDENT", "1s"),
        ("SYNCGC_TIMEOUT_MAX", "2h"),
        ("SYNCGC_WEBHOOK_TIMEOUT_SECONDS", "10"),
        // The release's own namespace is always excluded.
        (
            "SYNCGC_EXCLUDE_NAMESPACES",
            "kube-system,monitoring,syncgc-system",
        ),
        ("SYNCGC_LOG_FORMAT", "text"),
        ("SYNCGC_WORKERS", "16"),
    ] {
        assert_eq!(
            env.get(name).map(String::as_str),
            Some(value),
            "{name}: {env:?}"
        );
    }

    let digest = format!("sha256:{}", "ab".repeat(32));
    let rendered = template(&[
        "--set",
        &format!("image.digest={digest}"),
        "--set",
        "image.pullPolicy=Always",
        "--set",
        "replicas=3",
        "--set",
        "priorityClassName=",
        "--set",
        "podDisruptionBudget.minAvailable=2",
    ]);
    let deployment = find(&rendered, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        format!("ghcr.io/syncgc/syncgc@{digest}")
    );
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert!(pod.get("priorityClassName").is_none(), "{pod:#}");
    // No system class, no quota for it.
    assert!(!rendered.iter().any(|o| o["kind"] == "ResourceQuota"));
    assert_eq!(
        find(&rendered, "PodDisruptionBudget")["spec"]["minAvailable"],
        2
    );
    let job = uninstall_job(&rendered);
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["image"],
        pod["containers"][0]["image"]
    );

    let rendered = template(&[
        "--set",
        "networkPolicy.enabled=false",
        "--set",
        "podDisruptionBudget.enabled=false",
        "--set",
        "uninstall.enabled=false",
    ]);
    for kind in ["NetworkPolicy", "PodDisruptionBudget", "Job"] {
        assert!(!rendered.iter().any(|o| o["kind"] == kind), "a {kind}");
    }
}

/// The values a platform team sets: each lands where it says, in the Deployment and (for the
/// Pods' settings) the uninstall Job and the test Pod too.
#[test]
fn platform_values_render_where_they_say() {
    let defaults = template(&[]);
    let pods = |rendered: &[Value]| -> Vec<Value> {
        let deployment = find(rendered, "Deployment")["spec"]["template"].clone();
        let job = uninstall_job(rendered)["spec"]["template"].clone();
        let check = find(rendered, "Pod").clone();
        vec![deployment, job, check]
    };
    for pod in pods(&defaults) {
        assert_eq!(pod["spec"]["nodeSelector"]["kubernetes.io/os"], "linux");
        assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 65532);
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
        assert!(pod["spec"].get("imagePullSecrets").is_none(), "{pod:#}");
    }
    assert!(!env(&defaults).contains_key("RUST_LOG"));

    let rendered = template(&[
        "--set",
        "imagePullSecrets[0].name=regcred",
        "--set",
        "podLabels.team=platform,podAnnotations.owner=sre",
        // OpenShift: no fixed uid or gid.
        "--set",
        "podSecurityContext.runAsUser=null,podSecurityContext.runAsGroup=null",
        "--set",
        "securityContext.readOnlyRootFilesystem=false",
        "--set",
        "nodeSelector=null",
        "--set",
        "webhook.port=9443,metrics.port=9090,webhook.hostNetwork=true",
        "--set",
        "networkPolicy.metricsFrom[0].ipBlock.cidr=10.0.0.0/8",
        "--set",
        "logLevel=info\\,syncgc::gc=debug",
        // One of the chart's own variables, given again: it takes the chart's place.
        "--set-string",
        "extraEnv[0].name=SYNCGC_MODE,extraEnv[0].value=standalone",
    ]);
    for pod in pods(&rendered) {
        let spec = &pod["spec"];
        assert_eq!(spec["imagePullSecrets"][0]["name"], "regcred", "{pod:#}");
        assert!(
            spec["securityContext"].get("runAsUser").is_none(),
            "{pod:#}"
        );
        assert!(
            spec["securityContext"].get("runAsGroup").is_none(),
            "{pod:#}"
        );
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"],
            false
        );
        assert!(spec.get("nodeSelector").is_none(), "{pod:#}");
    }
    let deployment = find(&rendered, "Deployment");
    let template_ = &deployment["spec"]["template"];
    assert_eq!(template_["metadata"]["labels"]["team"], "platform");
    assert_eq!(
        template_["metadata"]["labels"]["app.kubernetes.io/name"],
        "syncgc"
    );
    assert_eq!(template_["metadata"]["annotations"]["owner"], "sre");
    // The selector stays: an upgrade cannot change it.
    assert_eq!(
        deployment["spec"]["selector"],
        find(&defaults, "Deployment")["spec"]["selector"]
    );
    let spec = &template_["spec"];
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["dnsPolicy"], "ClusterFirstWithHostNet");
    let ports = &spec["containers"][0]["ports"];
    assert_eq!(ports[0]["name"], "webhook");
    assert_eq!(ports[0]["containerPort"], 9443);
    assert_eq!(ports[1]["name"], "metrics");
    assert_eq!(ports[1]["containerPort"], 9090);
    let env_list = spec["containers"][0]["env"].as_array().unwrap();
    let modes = env_list
        .iter()
        .filter(|e| e["name"] == "SYNCGC_MODE")
        .count();
    assert_eq!(modes, 1, "SYNCGC_MODE once: {env_list:?}");
    let env = env(&rendered);
    for (name, value) in [
        ("SYNCGC_WEBHOOK_ADDR", "0.0.0.0:9443"),
        ("SYNCGC_METRICS_ADDR", "0.0.0.0:9090"),
        ("RUST_LOG", "info,syncgc::gc=debug"),
        ("SYNCGC_MODE", "standalone"),
    ] {
        assert_eq!(
            env.get(name).map(String::as_str),
            Some(value),
            "{name}: {env:?}"
        );
    }
    let policy = find(&rendered, "NetworkPolicy");
    assert_eq!(
        policy["spec"]["ingress"][1]["from"][0]["ipBlock"]["cidr"],
        "10.0.0.0/8"
    );
    // The Service still sends to the ports by name.
    let service = rendered
        .iter()
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "syncgc-webhook")
        .unwrap();
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "webhook");
}

/// What the chart renders, with its defaults, every option and the platform values, is what
/// Kubernetes 1.20 and 1.30 accept: each object validated, unknown fields refused, against that
/// version's OpenAPI schemas (`hack/tools.sh kubernetes-validate`).
#[test]
fn every_variant_validates_against_the_kubernetes_schemas() {
    let validate = tool("kubernetes-validate");
    let variants: [&[&str]; 3] = [
        &[],
        &[
            "--set",
            "certificates.mode=cert-manager",
            "--set",
            "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.dashboard.enabled=true,unarmedDelete=deny,guards=false,maxCascade=100",
            "--set",
            "timeouts.base=90s,webhook.timeoutSeconds=10,mode=standalone",
        ],
        &[
            "--set",
            "imagePullSecrets[0].name=regcred,podLabels.team=a,podAnnotations.b=c",
            "--set",
            "podSecurityContext.runAsUser=null,webhook.hostNetwork=true,webhook.port=9443",
            "--set",
            "metrics.port=9090,networkPolicy.metricsFrom[0].ipBlock.cidr=10.0.0.0/8",
            "--set",
            "logLevel=debug,nodeSelector=null",
        ],
    ];
    let dir = tempfile::tempdir().unwrap();
    for (kubernetes, minor) in [("1.20.2", "1.20"), ("1.30.0", "1.30")] {
        for (i, args) in variants.iter().enumerate() {
            let yaml = rendered(&[&["--kube-version", kubernetes][..], args].concat());
            let file = dir.path().join(format!("{minor}-{i}.yaml"));
            std::fs::write(&file, yaml).unwrap();
            let checked = Command::new(&validate)
                .arg(minor)
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                checked.status.success(),
                "Kubernetes {minor} refuses what {args:?} renders:\n{}{}",
                String::from_utf8_lossy(&checked.stdout),
                String::from_utf8_lossy(&checked.stderr)
            );
        }
    }
}

/// Another release name and namespace: every object is named after the release, RBAC grants
/// those names, and syncgc and the uninstall Job are told them.
#[test]
fn another_release_names_everything_after_it() {
    let helm = tool("helm");
    let out = Command::new(&helm)
        .args(["template", "gc", CHART, "--namespace", "tools"])
        .args(["--set", "certificates.mode=self-managed"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = parse(&String::from_utf8(out.stdout).unwrap());
    for object in &rendered {
        let name = object["metadata"]["name"].as_str().unwrap();
        // An APIService is named by its group and version, whatever the release.
        let group_version = object["kind"] == "APIService" && name == "v1alpha1.syncgc.io";
        assert!(name.starts_with("gc-syncgc") || group_version, "{name}");
        if let Some(namespace) = object["metadata"]["namespace"].as_str() {
            assert_eq!(namespace, "tools", "{name}");
        }
        assert_eq!(
            object["metadata"]["labels"]["app.kubernetes.io/instance"],
            "gc"
        );
    }
    let env = env(&rendered);
    for (name, value) in [
        ("SYNCGC_WEBHOOK_SERVICE", "tools/gc-syncgc-webhook"),
        ("SYNCGC_TLS_SECRET", "tools/gc-syncgc-webhook-tls"),
        ("SYNCGC_WEBHOOK_CONFIG_NAME", "gc-syncgc"),
        ("SYNCGC_LEADER_ELECTION_LEASE", "gc-syncgc"),
        (
            "SYNCGC_EXCLUDE_NAMESPACES",
            "kube-system,kube-node-lease,syncgc-system,tools",
        ),
    ] {
        assert_eq!(
            env.get(name).map(String::as_str),
            Some(value),
            "{name}: {env:?}"
        );
    }
    let role = find(&rendered, "ClusterRole");
    assert!(role["rules"].as_array().unwrap().iter().any(|r| {
        r["resources"][0] == "mutatingwebhookconfigurations" && r["resourceNames"][0] == "gc-syncgc"
    }));
    let secret_role = rendered
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "gc-syncgc-webhook-tls")
        .expect("the Secret's Role");
    assert_eq!(
        secret_role["rules"][0]["resourceNames"][0],
        "gc-syncgc-webhook-tls"
    );
    let binding = find(&rendered, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["namespace"], "tools");
    let job = uninstall_job(&rendered);
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["args"],
        serde_json::json!([
            "disarm",
            "--stop-deployment",
            "tools/gc-syncgc",
            "--leader-election-namespace",
            "tools",
            "--leader-election-lease",
            "gc-syncgc",
            "--webhook-config-name",
            "gc-syncgc"
        ])
    );
}

/// One replica gets no PodDisruptionBudget: a budget of one would keep a drain of its node from
/// ever finishing.
#[test]
fn one_replica_has_no_disruption_budget() {
    let one = template(&["--set", "replicas=1"]);
    assert!(!one.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
    let two = template(&["--set", "replicas=2"]);
    assert_eq!(find(&two, "PodDisruptionBudget")["spec"]["minAvailable"], 1);
}
