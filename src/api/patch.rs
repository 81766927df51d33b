//! Guarded writes of an object's metadata: finalizers, arming, ownerReferences. Each is a
//! read-modify-write whose write fails when the object changed since the read, retried by one
//! helper ([`Cluster::guarded`]).

use json_patch::{
    Patch as JsonPatch, PatchOperation, RemoveOperation, ReplaceOperation, TestOperation,
};
use jsonptr::PointerBuf;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams};
use serde_json::Value;

use super::{ApiError, Cluster, Target, Verb};
use crate::names::{ARMED_LABEL, SYNCHRONOUS_FINALIZER};

/// What a finalizer-adding write sets besides the finalizer: a label (key, value) and an
/// annotation (key, value).
#[derive(Debug, Default, Clone, Copy)]
pub struct Marks<'a> {
    pub label: Option<(&'a str, &'a str)>,
    pub annotation: Option<(&'a str, &'a str)>,
}

/// What the live object must show for a write made on somebody else's word (an admission
/// review, which anyone who reaches the webhook can post): each annotation with its value, and
/// each finalizer. A write whose object does not show them is not made
/// ([`ApiError::Unconfirmed`]); the uid is checked by every write anyway.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Claims {
    pub annotations: Vec<(&'static str, String)>,
    pub finalizers: Vec<&'static str>,
}

impl Claims {
    /// The first claim `meta` does not bear out, as `key=value` or the finalizer's name.
    fn unconfirmed(&self, meta: &ObjectMeta) -> Option<String> {
        let annotations = meta.annotations.as_ref();
        let finalizers = meta.finalizers.as_deref().unwrap_or_default();
        self.annotations
            .iter()
            .find(|(key, value)| annotations.and_then(|a| a.get(*key)) != Some(value))
            .map(|(key, value)| format!("{key}={value}"))
            .or_else(|| {
                self.finalizers
                    .iter()
                    .find(|f| !finalizers.iter().any(|have| have == *f))
                    .map(|f| (*f).to_owned())
            })
    }

    /// The claims, as `key=value` and finalizer names.
    fn summary(&self) -> String {
        let annotations = self.annotations.iter().map(|(k, v)| format!("{k}={v}"));
        let finalizers = self.finalizers.iter().map(|f| (*f).to_owned());
        annotations.chain(finalizers).collect::<Vec<_>>().join(", ")
    }

    /// The claims on annotations as JSON-patch `test` ops, for a write made without a read.
    fn tests(&self) -> impl Iterator<Item = PatchOperation> + '_ {
        self.annotations.iter().map(|(key, value)| {
            test(
                PointerBuf::from_tokens(["metadata", "annotations", key]),
                value,
            )
        })
    }
}

/// Whether a finalizer change changed the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    Yes,
    AlreadySo,
}

/// Attempts at a read-modify-write before giving up on a busy object.
const ATTEMPTS: usize = 5;

/// What one attempt of a guarded read-modify-write writes.
enum Write {
    /// Nothing: the object is as asked already.
    None,
    /// A merge patch of the metadata carrying the `resourceVersion` read.
    Merge(Value),
    /// A JSON patch whose `test` ops check what was read.
    Json(JsonPatch),
}

impl Cluster {
    /// Merges `patch` into `target`'s metadata.
    pub async fn merge_metadata(&self, target: &Target, patch: &Value) -> Result<(), ApiError> {
        let api = self.api(target);
        self.call(
            Verb::Patch,
            target,
            api.patch_metadata(&target.name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
        .map(drop)
    }

    /// Applies a JSON patch (RFC 6902) to `target`.
    pub async fn json_patch(&self, target: &Target, patch: &JsonPatch) -> Result<(), ApiError> {
        let url = format!("{}/{}", target.resource_url(), target.name);
        let body = serde_json::to_vec(patch).unwrap_or_default();
        let mut request = http::Request::patch(url)
            .header(http::header::CONTENT_TYPE, "application/json-patch+json")
            .body(body)
            .map_err(|err| ApiError::Call {
                verb: Verb::Patch,
                target: target.to_string(),
                source: kube::Error::HttpError(err),
            })?;
        super::client::name_cause(&mut request);
        self.call(Verb::Patch, target, self.client.request_text(request))
            .await
            .map(drop)
    }

    /// A guarded read-modify-write of `target`: `decide` says what to write from the
    /// object's metadata as read (`None`: it is gone), `first` what to write before any read.
    /// The write fails when the object changed since that read (a merge patch carrying the
    /// read `resourceVersion`: 409; a JSON patch whose `test` ops no longer hold: 409 or 422),
    /// and then the object is read again, up to [`ATTEMPTS`] times. A JSON patch's object gone
    /// (404) is [`Changed::AlreadySo`]: what it removes is gone with it.
    async fn guarded(
        &self,
        target: &Target,
        mut first: Option<Write>,
        decide: impl Fn(Option<ObjectMeta>) -> Result<Write, ApiError>,
    ) -> Result<Changed, ApiError> {
        for _ in 0..ATTEMPTS {
            let write = match first.take() {
                Some(write) => write,
                None => decide(self.get_metadata(target).await?)?,
            };
            let (written, tested) = match write {
                Write::None => return Ok(Changed::AlreadySo),
                Write::Merge(patch) => (self.merge_metadata(target, &patch).await, false),
                Write::Json(patch) => (self.json_patch(target, &patch).await, true),
            };
            match written {
                Ok(()) => return Ok(Changed::Yes),
                Err(err) if err.status() == Some(409) => {}
                Err(err) if tested && err.status() == Some(422) => {}
                Err(err) if tested && err.status() == Some(404) => return Ok(Changed::AlreadySo),
                Err(err) => return Err(err),
            }
        }
        Err(ApiError::Conflict(target.to_string()))
    }

    /// Adds `finalizer` to `target`, leaving its other finalizers alone: reads the object,
    /// checks its uid, and patches the finalizer list with the read `resourceVersion` as a
    /// precondition, retrying when someone else changed the object in between.
    pub async fn add_finalizer(
        &self,
        target: &Target,
        finalizer: &str,
    ) -> Result<Changed, ApiError> {
        self.add_finalizer_with(target, finalizer, Marks::default(), &Claims::default())
            .await
    }

    /// [`Self::add_finalizer`], setting `marks` in the same write, only while the object
    /// bears out `claims`; `AlreadySo` only when the finalizer and the label are both there.
    pub async fn add_finalizer_with(
        &self,
        target: &Target,
        finalizer: &str,
        marks: Marks<'_>,
        claims: &Claims,
    ) -> Result<Changed, ApiError> {
        self.guarded(target, None, |meta| {
            let Some(meta) = meta else {
                return Err(ApiError::Replaced(target.to_string(), target.uid.clone()));
            };
            if meta.deletion_timestamp.is_some() {
                return Err(ApiError::Terminating(target.to_string()));
            }
            if let Some(claim) = claims.unconfirmed(&meta) {
                return Err(ApiError::Unconfirmed(target.to_string(), claim));
            }
            let mut finalizers = meta.finalizers.unwrap_or_default();
            let has_finalizer = finalizers.iter().any(|f| f == finalizer);
            let has_label = marks.label.is_none_or(|(key, value)| {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(key))
                    .map(String::as_str)
                    == Some(value)
            });
            if has_finalizer && has_label {
                return Ok(Write::None);
            }
            if !has_finalizer {
                finalizers.push(finalizer.to_owned());
            }
            let mut patch = serde_json::json!({
                "metadata": { "resourceVersion": meta.resource_version, "finalizers": finalizers }
            });
            if let Some((key, value)) = marks.label {
                patch["metadata"]["labels"] = serde_json::json!({ key: value });
            }
            if let Some((key, value)) = marks.annotation {
                patch["metadata"]["annotations"] = serde_json::json!({ key: value });
            }
            Ok(Write::Merge(patch))
        })
        .await
    }

    /// Arms the opted-in object `target`: the synchronous finalizer and the armed label.
    pub async fn arm(&self, target: &Target) -> Result<Changed, ApiError> {
        let marks = Marks {
            label: Some((ARMED_LABEL, "true")),
            annotation: None,
        };
        self.add_finalizer_with(target, SYNCHRONOUS_FINALIZER, marks, &Claims::default())
            .await
    }

    /// Disarms `target`, the inverse of [`Self::arm`]: removes the synchronous finalizer and
    /// the armed label with a JSON patch whose `test` ops check the uid and each value where
    /// it was read, so nothing else is ever removed; retries when the object changed in
    /// between. Leaves the opt-in annotation alone.
    pub async fn disarm(&self, target: &Target) -> Result<Changed, ApiError> {
        self.guarded(target, None, |meta| {
            let Some(meta) = meta else {
                return Ok(Write::None);
            };
            let mut patch = vec![test_uid(target)];
            let finalizers = meta.finalizers.unwrap_or_default();
            if let Some(index) = finalizers.iter().position(|f| f == SYNCHRONOUS_FINALIZER) {
                let path = PointerBuf::from_tokens(["metadata", "finalizers", &index.to_string()]);
                patch.push(test(path.clone(), SYNCHRONOUS_FINALIZER));
                patch.push(PatchOperation::Remove(RemoveOperation { path }));
            }
            if let Some(value) = meta.labels.as_ref().and_then(|l| l.get(ARMED_LABEL)) {
                let path = PointerBuf::from_tokens(["metadata", "labels", ARMED_LABEL]);
                patch.push(test(path.clone(), value));
                patch.push(PatchOperation::Remove(RemoveOperation { path }));
            }
            if patch.len() == 1 {
                return Ok(Write::None);
            }
            Ok(Write::Json(JsonPatch(patch)))
        })
        .await
    }

    /// Removes `finalizer` from `target` with a JSON patch whose `test` ops check the uid and
    /// that the finalizer is still where it was read, so no other finalizer is ever removed;
    /// retries when the list changed in between. The first try is at index `at`, where a
    /// watch last saw it, without a read; later ones read where it is.
    pub async fn remove_finalizer(
        &self,
        target: &Target,
        finalizer: &str,
        at: Option<usize>,
    ) -> Result<Changed, ApiError> {
        let remove = |index: usize| {
            let path = PointerBuf::from_tokens(["metadata", "finalizers", &index.to_string()]);
            Write::Json(JsonPatch(vec![
                test_uid(target),
                test(path.clone(), finalizer),
                PatchOperation::Remove(RemoveOperation { path }),
            ]))
        };
        self.guarded(target, at.map(remove), |meta| {
            let finalizers = meta.and_then(|m| m.finalizers).unwrap_or_default();
            Ok(finalizers
                .iter()
                .position(|f| f == finalizer)
                .map_or(Write::None, remove))
        })
        .await
    }

    /// Removes from `target` the ownerReferences to the owners in `owners` (by uid), only
    /// while the object bears out `claims` (on annotations: the patch's `test` ops check them).
    pub async fn remove_owner_references(
        &self,
        target: &Target,
        references: &[OwnerReference],
        owners: &[String],
        claims: &Claims,
    ) -> Result<(), ApiError> {
        self.patch_owner_references(
            target,
            references,
            claims,
            |r| owners.contains(&r.uid),
            |path| PatchOperation::Remove(RemoveOperation { path }),
        )
        .await
    }

    /// Makes `target`'s blocking ownerReferences to the owners in `owners` (by uid)
    /// non-blocking.
    pub async fn unblock_owner_references(
        &self,
        target: &Target,
        references: &[OwnerReference],
        owners: &[String],
    ) -> Result<(), ApiError> {
        self.patch_owner_references(
            target,
            references,
            &Claims::default(),
            |r| owners.contains(&r.uid) && r.block_owner_deletion == Some(true),
            |path| {
                PatchOperation::Replace(ReplaceOperation {
                    path: path.with_trailing_token("blockOwnerDeletion"),
                    value: Value::Bool(false),
                })
            },
        )
        .await
    }

    /// Applies `change` to each of `target`'s ownerReferences (as read in `references`) that
    /// `pick` selects, in one JSON patch whose `test` ops check the object's uid and that each
    /// reference is still at the index it was read at; last index first, so removals do not
    /// shift the ones still to come. Nothing selected: no call.
    async fn patch_owner_references(
        &self,
        target: &Target,
        references: &[OwnerReference],
        claims: &Claims,
        pick: impl Fn(&OwnerReference) -> bool,
        change: impl Fn(PointerBuf) -> PatchOperation,
    ) -> Result<(), ApiError> {
        let mut ops = vec![test_uid(target)];
        let claimed = ops.len();
        ops.extend(claims.tests());
        let claimed = ops.len() - claimed;
        for (index, reference) in references.iter().enumerate().rev() {
            if pick(reference) {
                let path =
                    PointerBuf::from_tokens(["metadata", "ownerReferences", &index.to_string()]);
                ops.push(test(path.with_trailing_token("uid"), &reference.uid));
                ops.push(change(path));
            }
        }
        if ops.len() == 1 + claimed {
            return Ok(());
        }
        match self.json_patch(target, &JsonPatch(ops)).await {
            // A `test` op that failed: the object is not as read, or not as claimed.
            Err(err) if claimed > 0 && matches!(err.status(), Some(409 | 422)) => {
                Err(ApiError::Unconfirmed(target.to_string(), claims.summary()))
            }
            written => written,
        }
    }
}

/// A `test` op that the object still has `target`'s uid.
fn test_uid(target: &Target) -> PatchOperation {
    test(PointerBuf::from_tokens(["metadata", "uid"]), &target.uid)
}

fn test(path: PointerBuf, value: &str) -> PatchOperation {
    PatchOperation::Test(TestOperation {
        path,
        value: Value::from(value),
    })
}
