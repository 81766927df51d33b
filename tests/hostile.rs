//! Hostile input against the real apiserver and one `syncgc run`: reviews posted straight to
//! the webhook's port by someone who is not the apiserver, and annotation values written to
//! stop a worker. Each forged review is answered and changes nothing in the cluster and
//! records nothing; beside each, the apiserver's own review of the same kind still acts
//! (the control that shows the test could fail).

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use syncgc::names::{
    ARMED_LABEL, DELETION_ORDER_ANNOTATION, PROPAGATION_ANNOTATION, PROTECTED_ANNOTATION,
    SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER, TIMEOUT_ANNOTATION,
};

use support::process::{Syncgc, shared};
use support::{
    HOLD, TestNamespace, clear_finalizers, config_map, create, eventually, gone, opted_in,
    owner_ref, with_finalizer,
};

const WAIT: Duration = Duration::from_secs(60);

async fn namespace(test: &str) -> TestNamespace {
    support::process::served_namespace(test).await
}

/// Posts `review` to `syncgc`'s webhook (`/mutate`) as any client can (curl, no client
/// certificate); the answer's `response`.
fn post(syncgc: &Syncgc, review: &Value) -> Value {
    post_to(syncgc, "/mutate", review)
}

/// [`post`] to the webhook's `path` (`/mutate`, `/guard`).
fn post_to(syncgc: &Syncgc, path: &str, review: &Value) -> Value {
    let (status, answer) = post_raw(syncgc, path, review);
    assert_eq!(status, 200, "{answer}");
    answer["response"].clone()
}

/// [`post_to`]: the HTTP status and the whole answer.
fn post_raw(syncgc: &Syncgc, path: &str, review: &Value) -> (u16, Value) {
    let mut curl = Command::new("curl")
        // HTTP/1.1, as the apiserver calls webhooks.
        .args(["-skS", "--http1.1", "-H", "Content-Type: application/json"])
        .args(["--data-binary", "@-", "-w", "\n%{http_code}"])
        .arg(format!("https://{}{path}?timeout=10s", syncgc.webhook))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("curl");
    {
        use std::io::Write as _;
        let mut stdin = curl.stdin.take().unwrap();
        stdin
            .write_all(&serde_json::to_vec(review).unwrap())
            .unwrap();
    }
    let out = curl.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let out = String::from_utf8_lossy(&out.stdout);
    let (body, status) = out.rsplit_once('\n').expect("a status");
    let answer: Value =
        serde_json::from_str(body).unwrap_or_else(|err| panic!("{err}: {body} {said}"));
    (status.parse().expect("a status"), answer)
}

/// A DELETE review of the ConfigMap `name` in `ns` whose old object claims `meta`.
fn forged_delete(ns: &str, name: &str, user: &str, meta: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("forged-{name}"),
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": name,
            "namespace": ns,
            "operation": "DELETE",
            "userInfo": {"username": user},
            "oldObject": {"metadata": meta},
            "dryRun": false,
            "options": {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
}

/// Whether `cm` carries the synchronous finalizer and the armed label.
fn is_armed(cm: &ConfigMap) -> bool {
    cm.finalizers().iter().any(|f| f == SYNCHRONOUS_FINALIZER)
        && cm.labels().contains_key(ARMED_LABEL)
}

/// The entries syncgc's record holds of the object `uid` of `namespace` and its causes (empty:
/// nothing recorded), read through syncgc's API as the administrator.
async fn recorded(syncgc: &Syncgc, namespace: &str, uid: &str) -> Vec<Value> {
    static REGISTERED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    REGISTERED
        .get_or_init(|| support::served_api::register(syncgc))
        .await;
    let path = format!("/apis/syncgc.io/v1alpha1/namespaces/{namespace}/deletioncauses");
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    let list: Value = support::client().await.request(request).await.unwrap();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["object"]["uid"] == uid)
        .flat_map(|item| {
            std::iter::once(item["object"].clone())
                .chain(item["causes"].as_array().cloned().unwrap_or_default())
        })
        .collect()
}

#[tokio::test]
async fn a_forged_review_changes_nothing_and_records_nothing() {
    let ns = namespace("forged").await;
    let syncgc = tokio::task::spawn_blocking(shared).await.unwrap();
    let api = ns.api::<ConfigMap>();
    let victim = create(&api, &config_map("victim", vec![])).await;
    let uid = victim.uid().unwrap();

    // Propagation by annotation, claimed for an object that never opted in: allowed, and
    // neither `orphan` nor `foregroundDeletion` is added; nor is it armed.
    for propagation in ["Orphan", "Foreground"] {
        let answer = post(
            syncgc,
            &forged_delete(
                &ns.name,
                "victim",
                "mallory",
                json!({
                    "name": "victim", "namespace": ns.name, "uid": uid,
                    "annotations": {
                        SYNCHRONOUS_ANNOTATION: "true",
                        PROPAGATION_ANNOTATION: propagation,
                    },
                    "finalizers": [SYNCHRONOUS_FINALIZER],
                }),
            ),
        );
        assert_eq!(answer["allowed"], true, "{answer}");
        let warnings = answer["warnings"].to_string();
        assert!(warnings.contains("does not bear out"), "{answer}");
    }
    // Opted in without the finalizer (what `--unarmed-delete deny` arms): not armed either.
    let live = api.get("victim").await.unwrap();
    assert!(live.finalizers().is_empty(), "{:?}", live.finalizers());
    assert!(!live.labels().contains_key(ARMED_LABEL));
    assert_eq!(
        live.resource_version(),
        victim.resource_version(),
        "not written"
    );

    // A protected object's refusal drops references to owners going, only if it is protected:
    // `v` is not. Its owner waits for its dependents: `h`, held by a finalizer, goes in the
    // first wave, and `v` waits for it.
    let owner = create(&api, &opted_in("owner", vec![], &[])).await;
    let held = with_finalizer(config_map("h", vec![owner_ref(&owner, false)]), HOLD);
    create(&api, &held).await;
    let mut v = config_map("v", vec![owner_ref(&owner, false)]);
    v.annotations_mut()
        .insert(DELETION_ORDER_ANNOTATION.to_owned(), "-1".to_owned());
    let v = create(&api, &v).await;
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("h is being deleted", WAIT, || {
        support::being_deleted(&api, "h")
    })
    .await;
    let answer = post_to(
        syncgc,
        "/guard",
        &forged_delete(
            &ns.name,
            "v",
            "mallory",
            json!({
                "name": "v", "namespace": ns.name, "uid": v.uid().unwrap(),
                "annotations": {PROTECTED_ANNOTATION: "true"},
                "ownerReferences": [owner_ref(&owner, false)],
            }),
        ),
    );
    assert_eq!(answer["allowed"], false, "refused as it claims: {answer}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let live = api.get("v").await.unwrap();
    assert_eq!(
        live.owner_references().len(),
        1,
        "v keeps its reference: it is not protected"
    );

    // A "deleted by" for a live object nobody deletes, posted to either path: never recorded.
    // The apiserver's own DELETE of the same (armed) object is, with its user (the control).
    let recorded_one = create(&api, &opted_in("recorded", vec![], &[])).await;
    let recorded_uid = recorded_one.uid().unwrap();
    for path in ["/mutate", "/guard"] {
        let answer = post_to(
            syncgc,
            path,
            &forged_delete(
                &ns.name,
                "recorded",
                &"mallory".repeat(1_000),
                json!({"name": "recorded", "namespace": ns.name, "uid": recorded_uid}),
            ),
        );
        assert_eq!(answer["allowed"], true, "{answer}");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        recorded(syncgc, &ns.name, &recorded_uid).await.is_empty(),
        "a forged cause recorded"
    );
    api.delete("recorded", &DeleteParams::default())
        .await
        .unwrap();
    let chain = eventually("the real DELETE recorded", WAIT, || async {
        let chain = recorded(syncgc, &ns.name, &recorded_uid).await;
        (!chain.is_empty()).then_some(chain)
    })
    .await;
    let by = chain[0]["by"].as_str().unwrap();
    assert!(!by.contains("mallory"), "{chain:?}");

    clear_finalizers(&api, "h").await;
    eventually("the owner goes", WAIT, || gone(&api, "owner")).await;
}

#[tokio::test]
async fn the_apiserver_s_own_reviews_still_arm_and_guard() {
    let ns = namespace("unforged").await;
    let api = ns.api::<ConfigMap>();
    let armed = create(&api, &opted_in("armed", vec![], &[])).await;
    assert!(is_armed(&armed));

    // A DELETE with no options of an armed object that asks for Orphan: the webhook adds
    // `orphan` through the API, the live object bearing out what the review says.
    let owner = create(
        &api,
        &opted_in("orphaner", vec![], &[(PROPAGATION_ANNOTATION, "Orphan")]),
    )
    .await;
    let dependent = create(&api, &config_map("kept", vec![owner_ref(&owner, false)])).await;
    support::kubectl(
        &[
            "delete",
            "--raw",
            &format!("/api/v1/namespaces/{}/configmaps/orphaner", ns.name),
        ],
        None,
    );
    eventually("the owner goes", WAIT, || gone(&api, "orphaner")).await;
    let kept = api.get("kept").await.unwrap();
    assert_eq!(kept.uid(), dependent.uid());
    assert!(kept.owner_references().is_empty(), "orphaned");

    // Protected: refused.
    let mut protected = config_map("guarded", vec![]);
    protected
        .annotations_mut()
        .insert(PROTECTED_ANNOTATION.to_owned(), "true".to_owned());
    create(&api, &protected).await;
    let refused = api.delete("guarded", &DeleteParams::default()).await;
    assert!(refused.is_err(), "a protected object is refused");
    api.patch(
        "guarded",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {PROTECTED_ANNOTATION: null}}})),
    )
    .await
    .unwrap();
    api.delete("guarded", &DeleteParams::default())
        .await
        .unwrap();
}

/// A `syncgc.io/timeout` whose parts add up past the largest duration: the owner is collected
/// like any other (its timeout is the default), no worker stops, and an owner armed after it
/// is released as fast.
#[tokio::test]
async fn a_timeout_past_the_largest_duration_stops_no_worker() {
    let ns = namespace("overflow").await;
    let syncgc = tokio::task::spawn_blocking(shared).await.unwrap();
    let api = ns.api::<ConfigMap>();
    let huge = "10000000000000000000s10000000000000000000s";
    // More poisoned owners than the collector has workers.
    for n in 0..10 {
        let name = format!("poison-{n}");
        let owner = create(
            &api,
            &opted_in(&name, vec![], &[(TIMEOUT_ANNOTATION, huge)]),
        )
        .await;
        create(
            &api,
            &config_map(&format!("{name}-d"), vec![owner_ref(&owner, true)]),
        )
        .await;
    }
    for n in 0..10 {
        api.delete(&format!("poison-{n}"), &DeleteParams::background())
            .await
            .unwrap();
    }
    for n in 0..10 {
        let name = format!("poison-{n}");
        eventually(&format!("{name} goes"), WAIT, || gone(&api, &name)).await;
    }
    let good = create(&api, &opted_in("good", vec![], &[])).await;
    create(&api, &config_map("good-d", vec![owner_ref(&good, true)])).await;
    api.delete("good", &DeleteParams::background())
        .await
        .unwrap();
    eventually("good goes", WAIT, || gone(&api, "good")).await;
    assert_eq!(syncgc.metric("syncgc_worker_panics_total"), 0.0);
    let (status, body) = syncgc.get("/readyz").unwrap();
    assert_eq!(status, 200, "{body}");
}

/// With `--webhook-client-ca`, the webhook answers the apiserver (which presents the client
/// certificate its admission configuration names, `hack/cluster.sh`) and refuses anyone else.
#[tokio::test]
async fn with_a_client_ca_only_the_apiserver_is_answered() {
    let ca = std::path::Path::new(&support::kubeconfig_path())
        .with_file_name("pki/webhook-client-ca.crt");
    let ca = ca.to_str().unwrap().to_owned();
    let syncgc = Syncgc::start_async(
        &format!("syncgc-client-ca-{}", std::process::id()),
        &["--webhook-client-ca", &ca],
    )
    .await;
    let client = support::client().await;
    let ns = TestNamespace::with_labels(
        &client,
        "client_ca",
        &[(support::process::WEBHOOK_LABEL, &syncgc.name)],
    )
    .await;
    let api = ns.api::<ConfigMap>();
    let armed = create(&api, &opted_in("armed", vec![], &[])).await;
    assert!(is_armed(&armed), "the apiserver's review is answered");
    let uid = armed.uid().unwrap();
    let (status, answer) = post_raw(
        &syncgc,
        "/mutate",
        &forged_delete(
            &ns.name,
            "armed",
            "mallory",
            json!({"name": "armed", "namespace": ns.name, "uid": uid}),
        ),
    );
    assert_eq!(status, 401, "{answer}");
    assert_eq!(answer["kind"], "Status", "{answer}");
    assert_eq!(answer["reason"], "Unauthorized", "{answer}");
}
