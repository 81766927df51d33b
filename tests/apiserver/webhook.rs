//! The real apiserver calls the real webhook over TLS: arming on CREATE/UPDATE, DELETE
//! interception, the unarmed-delete policy, and custom resources.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use syncgc::names::{
    ARMED_LABEL, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, PROPAGATION_ANNOTATION,
    SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER, TIMEOUT_ANNOTATION,
};
use syncgc::webhook::admit::{Policy, UnarmedDelete};

use support::webhook::RegisteredWebhook;
use support::{
    HOLD, TestNamespace, being_deleted, clear_finalizers, config_map, create, create_crd, delete,
    delete_crd, eventually, gone, held, opted_in, owner_ref, with_finalizer,
};

const WAIT: Duration = Duration::from_secs(30);

fn has(obj: &impl ResourceExt, finalizer: &str) -> bool {
    obj.finalizers().iter().any(|f| f == finalizer)
}

/// Whether `obj` carries the armed label.
fn labelled(obj: &impl ResourceExt) -> bool {
    obj.labels().get(ARMED_LABEL).map(String::as_str) == Some("true")
}

async fn merge(api: &Api<ConfigMap>, name: &str, patch: serde_json::Value) -> ConfigMap {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|err| panic!("patching {name} with {patch}: {err}"))
}

#[tokio::test]
async fn create_and_update_arm_and_disarm() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "create_and_update_arm_and_disarm").await;
    let _webhook = RegisteredWebhook::start(&ns, Policy::default()).await;
    let api = ns.api::<ConfigMap>();

    let with_other = with_finalizer(opted_in("annotated", vec![], &[]), HOLD);
    let armed = create(&api, &with_other).await;
    assert_eq!(armed.finalizers(), [HOLD, SYNCHRONOUS_FINALIZER]);
    assert!(labelled(&armed), "{:?}", armed.labels());

    let plain = create(&api, &config_map("plain", vec![])).await;
    assert!(plain.finalizers().is_empty());
    assert!(!labelled(&plain));

    // Adding the annotation on update arms.
    let armed_later = merge(
        &api,
        "plain",
        json!({ "metadata": { "annotations": { SYNCHRONOUS_ANNOTATION: "true" } } }),
    )
    .await;
    assert_eq!(armed_later.finalizers(), [SYNCHRONOUS_FINALIZER]);
    assert!(labelled(&armed_later));

    // Removing it disarms, leaving other finalizers alone.
    let disarmed = merge(
        &api,
        "annotated",
        json!({ "metadata": { "annotations": { SYNCHRONOUS_ANNOTATION: null } } }),
    )
    .await;
    assert_eq!(disarmed.finalizers(), [HOLD]);
    assert!(!labelled(&disarmed), "{:?}", disarmed.labels());

    // Any other value than "true" does not opt in.
    let mut not_true = config_map("not-true", vec![]);
    not_true.metadata.annotations =
        Some([(SYNCHRONOUS_ANNOTATION.to_owned(), "yes".to_owned())].into());
    assert!(create(&api, &not_true).await.finalizers().is_empty());

    for name in ["annotated", "plain"] {
        clear_finalizers(&api, name).await;
    }
}

#[tokio::test]
async fn objects_being_deleted_are_never_patched() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "objects_being_deleted_are_never_patched").await;
    let _webhook = RegisteredWebhook::start(&ns, Policy::default()).await;
    let api = ns.api::<ConfigMap>();

    create(&api, &held("held", vec![])).await;
    delete(&api, "held", &DeleteParams::background()).await;

    // Opting in while terminating must not try to add a finalizer (the apiserver would refuse
    // the update with 422); the update itself goes through.
    let updated = merge(
        &api,
        "held",
        json!({ "metadata": { "annotations": { SYNCHRONOUS_ANNOTATION: "true" } } }),
    )
    .await;
    assert!(updated.metadata.deletion_timestamp.is_some());
    assert_eq!(updated.finalizers(), [HOLD]);

    // Opting out while terminating keeps the finalizer: release is the controller's job.
    let armed = create(
        &api,
        &opted_in("armed", vec![], &[(PROPAGATION_ANNOTATION, "Background")]),
    )
    .await;
    assert!(has(&armed, SYNCHRONOUS_FINALIZER));
    delete(&api, "armed", &DeleteParams::background()).await;
    let opted_out = merge(
        &api,
        "armed",
        json!({ "metadata": { "annotations": { SYNCHRONOUS_ANNOTATION: null } } }),
    )
    .await;
    assert!(opted_out.metadata.deletion_timestamp.is_some());
    assert_eq!(opted_out.finalizers(), [SYNCHRONOUS_FINALIZER]);

    for name in ["held", "armed"] {
        clear_finalizers(&api, name).await;
        eventually(&format!("{name} is gone"), WAIT, || gone(&api, name)).await;
    }
}

/// An armed owner with a dependent that a foreign finalizer keeps alive, so that the cluster's
/// own GC cannot finish whatever the owner's deletion asks for.
async fn owner_with_held_dependent(api: &Api<ConfigMap>, propagation: &str) -> ConfigMap {
    let owner = create(
        api,
        &opted_in("owner", vec![], &[(PROPAGATION_ANNOTATION, propagation)]),
    )
    .await;
    assert!(has(&owner, SYNCHRONOUS_FINALIZER));
    create(api, &held("dependent", vec![owner_ref(&owner, true)])).await;
    owner
}

/// A DELETE that names no propagation policy, as `kubectl delete --raw` sends it.
async fn delete_without_options(api: &Api<ConfigMap>, ns: &TestNamespace, name: &str) {
    let request =
        http::Request::delete(format!("/api/v1/namespaces/{}/configmaps/{name}", ns.name))
            .body(Vec::new())
            .unwrap();
    ns.client.request_text(request).await.unwrap();
    assert!(
        api.get(name)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
}

#[tokio::test]
async fn delete_without_a_policy_gets_the_annotated_foreground() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "delete_gets_the_annotated_foreground").await;
    let _webhook = RegisteredWebhook::start(&ns, Policy::default()).await;
    let api = ns.api::<ConfigMap>();
    owner_with_held_dependent(&api, "Foreground").await;

    delete_without_options(&api, &ns, "owner").await;
    let owner = api.get("owner").await.unwrap();
    assert!(
        has(&owner, FOREGROUND_FINALIZER),
        "{:?}",
        owner.finalizers()
    );
    assert!(has(&owner, SYNCHRONOUS_FINALIZER));
    // The cluster's GC acts on it: it deletes the dependent in the foreground.
    eventually("the GC deletes the dependent", WAIT, || {
        being_deleted(&api, "dependent")
    })
    .await;
}

#[tokio::test]
async fn delete_without_a_policy_gets_the_annotated_orphan() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "delete_gets_the_annotated_orphan").await;
    let _webhook = RegisteredWebhook::start(&ns, Policy::default()).await;
    let api = ns.api::<ConfigMap>();
    owner_with_held_dependent(&api, "Orphan").await;

    delete_without_options(&api, &ns, "owner").await;
    // The cluster's GC orphans the dependent, then drops `orphan`; syncgc's finalizer stays.
    let dependent = eventually("the GC orphans the dependent", WAIT, || async {
        let dependent = api.get("dependent").await.unwrap();
        dependent.owner_references().is_empty().then_some(dependent)
    })
    .await;
    assert!(dependent.metadata.deletion_timestamp.is_none());
    let owner = eventually("the GC drops the orphan finalizer", WAIT, || async {
        let owner = api.get("owner").await.unwrap();
        (!has(&owner, ORPHAN_FINALIZER)).then_some(owner)
    })
    .await;
    assert_eq!(owner.finalizers(), [SYNCHRONOUS_FINALIZER]);
}

#[tokio::test]
async fn a_named_policy_or_a_dry_run_is_left_alone() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "a_named_policy_or_a_dry_run_is_left_alone").await;
    let _webhook = RegisteredWebhook::start(&ns, Policy::default()).await;
    let api = ns.api::<ConfigMap>();
    owner_with_held_dependent(&api, "Foreground").await;

    let dry_run = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    delete(&api, "owner", &dry_run).await;
    let owner = api.get("owner").await.unwrap();
    assert!(owner.metadata.deletion_timestamp.is_none());
    assert_eq!(owner.finalizers(), [SYNCHRONOUS_FINALIZER]);

    // The apiserver strips foregroundDeletion when Background is named explicitly, as
    // `kubectl delete` does.
    delete(&api, "owner", &DeleteParams::background()).await;
    let owner = api.get("owner").await.unwrap();
    assert!(owner.metadata.deletion_timestamp.is_some());
    assert_eq!(owner.finalizers(), [SYNCHRONOUS_FINALIZER]);
}

#[tokio::test]
async fn unarmed_delete_denied_arms_and_a_retry_is_synchronous() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "unarmed_delete_denied_arms").await;
    let api = ns.api::<ConfigMap>();
    // Created before the webhook is there, so not armed.
    let unarmed = create(&api, &opted_in("unarmed", vec![], &[])).await;
    assert!(unarmed.finalizers().is_empty());
    let _webhook = RegisteredWebhook::start(
        &ns,
        Policy {
            unarmed_delete: UnarmedDelete::Deny,
            ..Policy::default()
        },
    )
    .await;

    let err = api
        .delete("unarmed", &DeleteParams::background())
        .await
        .unwrap_err();
    let kube::Error::Api(status) = &err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 403, "{status:?}");
    assert!(status.message.contains("armed now"), "{}", status.message);
    let armed = api.get("unarmed").await.unwrap();
    assert_eq!(armed.finalizers(), [SYNCHRONOUS_FINALIZER]);
    assert!(labelled(&armed));
    assert!(armed.metadata.deletion_timestamp.is_none());

    delete(&api, "unarmed", &DeleteParams::background()).await;
    let terminating = api.get("unarmed").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
}

/// Only DELETEs of armed objects reach the webhook: an unannotated object's and an
/// unarmed opted-in object's DELETE do not (the request counter does not move; the unarmed
/// one goes at once), an armed object's does.
#[tokio::test]
async fn only_deletes_of_armed_objects_reach_the_webhook() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "only_armed_deletes_reach_the_webhook").await;
    let api = ns.api::<ConfigMap>();
    create(&api, &opted_in("unarmed", vec![], &[])).await;
    create(&api, &config_map("plain", vec![])).await;
    let webhook = RegisteredWebhook::start(&ns, Policy::default()).await;
    let deletes = || {
        [
            "ignored",
            "untouched",
            "terminating",
            "delete_armed",
            "delete_default_propagation",
            "delete_unarmed_allowed",
            "delete_unarmed_denied",
        ]
        .map(|reason| {
            webhook
                .served
                .metrics
                .webhook_requests
                .with_label_values(&["DELETE", reason])
                .get()
        })
        .iter()
        .sum::<u64>()
    };

    for name in ["unarmed", "plain"] {
        delete(&api, name, &DeleteParams::background()).await;
        assert!(gone(&api, name).await.is_some());
    }
    assert_eq!(
        deletes(),
        0,
        "the webhook saw a DELETE it has no business with"
    );

    let armed = create(&api, &opted_in("armed", vec![], &[])).await;
    assert!(labelled(&armed));
    delete(&api, "armed", &DeleteParams::background()).await;
    assert!(being_deleted(&api, "armed").await.is_some());
    let counted = webhook
        .served
        .metrics
        .webhook_requests
        .with_label_values(&["DELETE", "delete_armed"])
        .get();
    assert_eq!(counted, 1);
}

#[tokio::test]
async fn a_custom_resource_is_armed_like_a_built_in_kind() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "a_custom_resource_is_armed").await;
    let resource = create_crd(&ns, "Widget", "widgets").await;
    let widgets = Api::<DynamicObject>::namespaced_with(client.clone(), &ns.name, &resource);
    let _webhook = RegisteredWebhook::start(&ns, Policy::default()).await;

    let mut widget = DynamicObject::new("w", &resource).data(json!({ "spec": { "size": 3 } }));
    widget.metadata.annotations =
        Some([(SYNCHRONOUS_ANNOTATION.to_owned(), "true".to_owned())].into());
    let created = eventually("the CRD serves widgets", WAIT, || async {
        widgets.create(&PostParams::default(), &widget).await.ok()
    })
    .await;
    assert_eq!(created.finalizers(), [SYNCHRONOUS_FINALIZER]);

    // Opted out in the same patch, or the webhook arms it again and the CRD cannot go.
    let opt_out = json!({ "metadata": { "annotations": null, "finalizers": null } });
    let released = widgets
        .patch("w", &PatchParams::default(), &Patch::Merge(&opt_out))
        .await
        .unwrap();
    assert!(released.finalizers().is_empty());
    delete_crd(&client, &resource).await;
}

/// A mistake in a `syncgc.io/` annotation is answered with a warning, which kubectl prints.
#[tokio::test]
async fn misconfigured_annotations_are_warned_about() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "misconfigured_annotations_are_warned_about").await;
    let _webhook = RegisteredWebhook::start(&ns, Policy::default()).await;
    let manifest = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "typo", "namespace": ns.name, "annotations": {
            SYNCHRONOUS_ANNOTATION: "True", "syncgc.io/timout": "5m",
            TIMEOUT_ANNOTATION: "banana" } }
    });
    // On a thread of its own: the webhook answers on this test's runtime.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .args(["create", "-f", "-"])
            .env("KUBECONFIG", support::kubeconfig_path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                std::io::Write::write_all(
                    child.stdin.as_mut().unwrap(),
                    manifest.to_string().as_bytes(),
                )?;
                drop(child.stdin.take());
                child.wait_with_output()
            })
            .expect("kubectl")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(
        warnings.contains("syncgc.io/synchronous: \"True\" is neither \"true\" nor \"false\""),
        "{warnings}"
    );
    assert!(
        warnings.contains("syncgc.io/timout is not an annotation syncgc knows"),
        "{warnings}"
    );
    assert!(
        warnings.contains("syncgc.io/timeout: \"banana\" is not a duration"),
        "{warnings}"
    );
    let created = ns.api::<ConfigMap>().get("typo").await.unwrap();
    assert!(created.finalizers().is_empty(), "not opted in");
}
