//! The guards' scenarios that run beside Kubernetes' collector (`tests/guards.rs`) and with
//! syncgc as the whole collector (`tests/standalone_gc.rs`), and their helpers.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use syncgc::names::PROTECTED_ANNOTATION;

use super::{TestNamespace, config_map, create, eventually, gone, owner_ref};

const WAIT: Duration = Duration::from_secs(60);

pub fn annotated(mut cm: ConfigMap, key: &str, value: &str) -> ConfigMap {
    cm.metadata
        .annotations
        .get_or_insert_default()
        .insert(key.to_owned(), value.to_owned());
    cm
}

pub async fn annotate<K>(api: &Api<K>, name: &str, key: &str, value: Option<&str>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({ "metadata": { "annotations": { key: value } } });
    api.patch_metadata(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|err| panic!("annotating {name}: {err}"));
}

/// Whether `object` carries `syncgc.io/guarded`: its DELETEs reach the guards.
pub fn labelled<K: kube::Resource>(object: &K) -> bool {
    object
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(syncgc::names::GUARDED_LABEL))
        .map(String::as_str)
        == Some("true")
}

/// The message of a DELETE refused by the webhook, or `None` when it went ahead.
pub async fn refusal<K>(api: &Api<K>, name: &str, params: &DeleteParams) -> Option<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    try_refusal(api, name, params)
        .await
        .unwrap_or_else(|err| panic!("deleting {name}: {err}"))
}

/// [`refusal`], with any other error returned.
pub async fn try_refusal<K>(
    api: &Api<K>,
    name: &str,
    params: &DeleteParams,
) -> Result<Option<String>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, params).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(Some(status.message)),
        Err(err) => Err(err),
    }
}

pub fn dry_run() -> DeleteParams {
    DeleteParams {
        dry_run: true,
        ..DeleteParams::background()
    }
}

/// Waits until syncgc's graph knows what a dry-run DELETE of `name` needs: until the dry run
/// is refused, and returns its message.
pub async fn refused_dry_run<K>(api: &Api<K>, name: &str) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(
        &format!("a dry-run DELETE of {name} is refused"),
        WAIT,
        || async { refusal(api, name, &dry_run()).await },
    )
    .await
}

/// A protected object's own DELETE is refused, and so are its owners' cascades and its
/// namespace's DELETE; orphaning reaches nothing; without the annotation the cascade goes.
pub async fn a_protected_object_is_deleted_neither_directly_nor_by_a_cascade(ns: &TestNamespace) {
    let api = ns.api::<ConfigMap>();
    let owner = create(&api, &config_map("owner", vec![])).await;
    let middle = create(&api, &config_map("middle", vec![owner_ref(&owner, false)])).await;
    let precious = config_map("precious", vec![owner_ref(&middle, false)]);
    create(&api, &annotated(precious, PROTECTED_ANNOTATION, "true")).await;

    let message = refusal(&api, "precious", &DeleteParams::background())
        .await
        .expect("the protected object's own DELETE is refused");
    assert!(message.contains("is protected"), "{message}");
    assert!(message.contains("remove the annotation"), "{message}");
    // What kubectl prints for it is docs/troubleshooting.md's sample (its namespace `shop`).
    let said = super::kubectl_as(
        &super::kubeconfig_path(),
        &["-n", &ns.name, "delete", "configmap", "precious"],
        None,
    )
    .expect_err("kubectl's DELETE is refused");
    let sample = super::samples::line(
        "docs/troubleshooting.md",
        "Error from server (Forbidden): admission webhook \"guard.syncgc.io\"",
    )
    .replace(" shop/", &format!(" {}/", ns.name));
    assert_eq!(said.trim_end(), sample);

    let message = refused_dry_run(&api, "owner").await;
    let path = format!(
        "the path is ConfigMap {0}/owner → ConfigMap {0}/middle → ConfigMap {0}/precious",
        ns.name
    );
    assert!(message.contains(&path), "{message}");
    for propagation in [DeleteParams::background(), DeleteParams::foreground()] {
        let message = refusal(&api, "owner", &propagation).await;
        assert!(message.is_some_and(|m| m.contains("which is protected")));
    }
    // The namespace's DELETE reaches it too.
    let namespaces = Api::<Namespace>::all(ns.client.clone());
    let message = refusal(&namespaces, &ns.name, &DeleteParams::background())
        .await
        .expect("the namespace's DELETE is refused");
    assert!(message.contains("it is in the namespace"), "{message}");

    // Orphaning reaches nothing.
    assert!(
        refusal(&api, "owner", &DeleteParams::orphan())
            .await
            .is_none()
    );
    eventually("the owner is gone", WAIT, || gone(&api, "owner")).await;

    // Without the annotation, the cascade goes through (the control case).
    annotate(&api, "precious", PROTECTED_ANNOTATION, None).await;
    eventually("the middle's DELETE goes ahead", WAIT, || async {
        refusal(&api, "middle", &DeleteParams::background())
            .await
            .is_none()
            .then_some(())
    })
    .await;
    eventually("the formerly protected object is collected", WAIT, || {
        gone(&api, "precious")
    })
    .await;
}

/// The garbage collector's DELETE of a protected object whose owner is gone is refused, and
/// the reference is dropped so that it does not retry forever; without the annotation the
/// object is collected.
pub async fn a_collectors_delete_of_a_protected_object_drops_the_reference_instead(
    ns: &TestNamespace,
) {
    let api = ns.api::<ConfigMap>();
    // Dependents of an owner gone before they were made, as a collector finds them.
    let owner = create(&api, &config_map("owner", vec![])).await;
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the owner is gone", WAIT, || gone(&api, "owner")).await;
    let reference = owner_ref(&owner, false);
    let precious = config_map("precious", vec![reference.clone()]);
    create(&api, &annotated(precious, PROTECTED_ANNOTATION, "true")).await;
    create(&api, &config_map("plain", vec![reference])).await;

    eventually("the unprotected dependent is collected", WAIT, || {
        gone(&api, "plain")
    })
    .await;
    eventually("the protected one loses its reference", WAIT, || async {
        let object = api.get("precious").await.unwrap();
        object.owner_references().is_empty().then_some(object)
    })
    .await;
    let object = api.get("precious").await.unwrap();
    assert!(object.metadata.deletion_timestamp.is_none());
    annotate(&api, "precious", PROTECTED_ANNOTATION, None).await;
}
