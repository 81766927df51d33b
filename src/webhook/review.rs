//! The AdmissionReview wire format (`admission.k8s.io/v1` and `v1beta1`), read leanly: only the
//! fields an admission decision needs are decoded, the rest of each object is skipped.

use std::collections::BTreeMap;

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use json_patch::Patch;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde::{Deserialize, Serialize};

use super::skim;

pub const V1: &str = "admission.k8s.io/v1";
pub const V1BETA1: &str = "admission.k8s.io/v1beta1";
const KIND: &str = "AdmissionReview";

/// Why a request body is not an AdmissionReview we can answer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReviewError {
    #[error("the body is not a valid AdmissionReview: {0}")]
    Malformed(String),
    #[error("apiVersion {0:?} is not {V1} or {V1BETA1}")]
    UnsupportedVersion(String),
    #[error("kind {0:?} is not AdmissionReview")]
    WrongKind(String),
    #[error("the AdmissionReview has no request")]
    NoRequest,
    #[error("the AdmissionReview request has no uid")]
    NoUid,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<Request>,
}

/// The part of an AdmissionRequest that syncgc reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub resource: GroupVersionResource,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(default)]
    pub object: Option<ReviewedObject>,
    #[serde(default)]
    pub old_object: Option<ReviewedObject>,
    #[serde(default)]
    pub dry_run: Option<bool>,
    #[serde(default)]
    pub options: Option<Options>,
    /// Who sent the request.
    #[serde(default)]
    pub user_info: UserInfo,
}

impl Request {
    /// The metadata of the object as it was (a DELETE's object, an UPDATE's old one).
    pub fn old_meta(&self) -> Option<&Metadata> {
        self.old_object.as_ref()?.metadata.as_ref()
    }

    /// Whether this is the CREATE of a Pod's eviction: the eviction deletes the Pod without a
    /// DELETE review of its own.
    pub fn evicts(&self) -> bool {
        self.operation == Operation::Create
            && self.resource.group.is_empty()
            && self.resource.resource == "pods"
            && self.sub_resource.as_deref() == Some("eviction")
    }

    /// The DELETE of the Pod this eviction deletes, as the live Pod `pod` is.
    pub fn eviction_as_delete(&self, pod: Metadata) -> Self {
        Self {
            uid: self.uid.clone(),
            kind: GroupVersionKind {
                group: String::new(),
                version: "v1".into(),
                kind: "Pod".into(),
            },
            resource: GroupVersionResource {
                group: String::new(),
                version: "v1".into(),
                resource: "pods".into(),
            },
            sub_resource: None,
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            operation: Operation::Delete,
            object: None,
            old_object: Some(ReviewedObject {
                metadata: Some(pod),
            }),
            dry_run: self.dry_run,
            options: None,
            user_info: self.user_info.clone(),
        }
    }
}

impl From<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> for Metadata {
    fn from(meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        Self {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            deletion_timestamp: meta.deletion_timestamp.map(|t| t.0.to_string()),
            owner_references: meta.owner_references,
        }
    }
}

/// The part of `userInfo` that syncgc reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct GroupVersionResource {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    #[default]
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
        }
    }
}

/// An object in a review: only its metadata is read. Anything that is not a JSON object is
/// rejected as malformed.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ReviewedObject {
    #[serde(default)]
    pub metadata: Option<Metadata>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default)]
    pub resource_version: Option<String>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub finalizers: Option<Vec<String>>,
    #[serde(default)]
    pub deletion_timestamp: Option<String>,
    #[serde(default)]
    pub owner_references: Option<Vec<OwnerReference>>,
}

impl Metadata {
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }

    pub fn finalizers(&self) -> &[String] {
        self.finalizers.as_deref().unwrap_or_default()
    }

    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers().iter().any(|f| f == finalizer)
    }
}

/// The request's options: CreateOptions, UpdateOptions or DeleteOptions; only the
/// DeleteOptions fields are read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Options {
    #[serde(default)]
    pub propagation_policy: Option<String>,
    #[serde(default)]
    pub orphan_dependents: Option<bool>,
    #[serde(default)]
    pub dry_run: Option<Vec<String>>,
}

/// A parsed review: the version to answer in and the request.
#[derive(Debug)]
pub struct Review {
    pub api_version: &'static str,
    pub request: Request,
}

impl Review {
    /// Parses a request body, naming the JSON path of the first problem. The body is skimmed
    /// first ([`skim::prune`]) so that the objects' unread parts are not parsed; a body that
    /// does not parse that way is read again as it is, tracking the path, to say where it is
    /// wrong.
    pub fn parse(body: &[u8]) -> Result<Self, ReviewError> {
        let pruned = skim::prune(body);
        let review = match serde_json::from_slice(pruned.as_deref().unwrap_or(body)) {
            Ok(review) => review,
            Err(_) => Self::read_tracked(body)?,
        };
        let api_version = match review.api_version.as_str() {
            V1 => V1,
            V1BETA1 => V1BETA1,
            other => return Err(ReviewError::UnsupportedVersion(other.to_owned())),
        };
        if review.kind != KIND {
            return Err(ReviewError::WrongKind(review.kind));
        }
        let request = review.request.ok_or(ReviewError::NoRequest)?;
        if request.uid.is_empty() {
            return Err(ReviewError::NoUid);
        }
        Ok(Self {
            api_version,
            request,
        })
    }

    /// Reads `body` as it is, naming the JSON path of the first problem.
    fn read_tracked(body: &[u8]) -> Result<ReviewIn, ReviewError> {
        let de = &mut serde_json::Deserializer::from_slice(body);
        serde_path_to_error::deserialize(de).map_err(|err| {
            let path = err.path().to_string();
            let inner = err.into_inner();
            ReviewError::Malformed(if path == "." {
                inner.to_string()
            } else {
                format!("at {path}: {inner}")
            })
        })
    }
}

/// Checks, for any `body`, what skimming promises, and panics where it breaks it: pruning
/// never panics; a body that is JSON stays JSON; a body that parses as a review parses to the
/// same review once pruned; [`Review::parse`] never panics. For the fuzz target
/// (`fuzz/fuzz_targets/skim.rs`, `hack/fuzz.sh`) and the tests.
#[doc(hidden)]
pub fn check_skim(body: &[u8]) {
    let pruned = skim::prune(body);
    if let Some(pruned) = &pruned {
        if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
            && let Err(err) = serde_json::from_slice::<serde::de::IgnoredAny>(pruned)
        {
            panic!(
                "pruning made JSON invalid ({err}): {}",
                String::from_utf8_lossy(pruned)
            );
        }
        if let Ok(whole) = serde_json::from_slice::<ReviewIn>(body) {
            match serde_json::from_slice::<ReviewIn>(pruned) {
                Ok(skimmed) => assert_eq!(
                    format!("{skimmed:?}"),
                    format!("{whole:?}"),
                    "pruning changed what is read"
                ),
                Err(err) => panic!("pruning made a review unreadable: {err}"),
            }
        }
    }
    let _ = Review::parse(body);
}

/// An answer: allowed or denied, with an optional JSON patch and warnings.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Allow {
        patch: Option<Patch>,
        warnings: Vec<String>,
    },
    Deny {
        message: String,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'a str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut>,
    /// Base64 of the JSON patch, as the apiserver expects.
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

#[derive(Serialize)]
struct StatusOut {
    code: u16,
    reason: &'static str,
    message: String,
}

/// The response review for `uid`, in `api_version`, serialized.
pub fn respond(api_version: &str, uid: &str, answer: Answer) -> Vec<u8> {
    let response = match answer {
        Answer::Allow { patch, warnings } => ResponseOut {
            uid,
            allowed: true,
            status: None,
            patch_type: patch.is_some().then_some("JSONPatch"),
            patch: patch
                .map(|p| BASE64_STANDARD.encode(serde_json::to_vec(&p).unwrap_or_default())),
            warnings,
        },
        Answer::Deny { message } => ResponseOut {
            uid,
            allowed: false,
            status: Some(StatusOut {
                code: 403,
                reason: "Forbidden",
                message,
            }),
            patch: None,
            patch_type: None,
            warnings: Vec::new(),
        },
    };
    to_json(api_version, response)
}

/// The answer to a body that is not a review we can read: a v1 review that disallows the
/// request and says why.
pub fn respond_invalid(error: &ReviewError) -> Vec<u8> {
    let response = ResponseOut {
        uid: "",
        allowed: false,
        status: Some(StatusOut {
            code: 400,
            reason: "BadRequest",
            message: error.to_string(),
        }),
        patch: None,
        patch_type: None,
        warnings: Vec::new(),
    };
    to_json(V1, response)
}

fn to_json(api_version: &str, response: ResponseOut<'_>) -> Vec<u8> {
    let review = ReviewOut {
        api_version,
        kind: KIND,
        response,
    };
    // Serializing these plain structs into a Vec cannot fail.
    serde_json::to_vec(&review).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn parse(value: Value) -> Result<Review, ReviewError> {
        Review::parse(&serde_json::to_vec(&value).unwrap())
    }

    fn review(request: Value) -> Value {
        json!({ "apiVersion": V1, "kind": "AdmissionReview", "request": request })
    }

    #[test]
    fn reads_only_what_it_needs_and_skips_the_rest() {
        let parsed = parse(review(json!({
            "uid": "u1",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cm", "namespace": "ns", "operation": "DELETE",
            "userInfo": {"username": "admin"},
            "oldObject": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "uid": "x", "finalizers": ["a"],
                             "annotations": {"k": "v"}, "managedFields": [{"manager": "m"}]},
                "data": {"big": "value"}
            },
            "dryRun": false,
            "options": {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1",
                        "propagationPolicy": "Foreground"}
        })))
        .unwrap();
        assert_eq!(parsed.api_version, V1);
        let request = parsed.request;
        assert_eq!(request.operation, Operation::Delete);
        assert_eq!(request.resource.resource, "configmaps");
        let meta = request.old_object.unwrap().metadata.unwrap();
        assert!(meta.has_finalizer("a"));
        assert_eq!(meta.annotation("k"), Some("v"));
        assert_eq!(
            request.options.unwrap().propagation_policy.as_deref(),
            Some("Foreground")
        );
    }

    #[test]
    fn names_what_is_wrong() {
        let cases = [
            (json!([1]), "invalid type"),
            (
                json!({"apiVersion": "v1", "kind": "AdmissionReview"}),
                "apiVersion \"v1\"",
            ),
            (json!({"apiVersion": V1, "kind": "Pod"}), "kind \"Pod\""),
            (
                json!({"apiVersion": V1, "kind": "AdmissionReview"}),
                "no request",
            ),
            (review(json!({"operation": "CREATE"})), "no uid"),
            (
                review(json!({"uid": "u", "operation": "PATCH"})),
                "at request.operation",
            ),
            (
                review(json!({"uid": "u", "operation": "CREATE", "object": "x"})),
                "at request.object",
            ),
            (
                review(json!({"uid": "u", "operation": "CREATE",
                              "object": {"metadata": {"finalizers": "f"}}})),
                "at request.object.metadata.finalizers",
            ),
            (
                review(json!({"uid": "u", "operation": "CREATE",
                              "object": {"metadata": 5, "spec": {}}})),
                "at request.object.metadata",
            ),
        ];
        for (body, expected) in cases {
            let err = parse(body.clone()).unwrap_err().to_string();
            assert!(err.contains(expected), "{body}: {err}");
        }
        for body in [
            &b"{not json"[..],
            b"",
            b"\xff\xfe{}",
            b"{\"apiVersion\":\"\xc3\x28\"}",
        ] {
            assert!(
                matches!(Review::parse(body), Err(ReviewError::Malformed(_))),
                "{body:?}"
            );
        }
    }

    #[test]
    fn answers_in_the_version_asked_and_echoes_the_uid() {
        let patch: Patch = serde_json::from_value(
            json!([{"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]),
        )
        .unwrap();
        for version in [V1, V1BETA1] {
            let body = respond(
                version,
                "abc",
                Answer::Allow {
                    patch: Some(patch.clone()),
                    warnings: vec![],
                },
            );
            let value: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(value["apiVersion"], version);
            assert_eq!(value["kind"], "AdmissionReview");
            assert_eq!(value["response"]["uid"], "abc");
            assert_eq!(value["response"]["allowed"], true);
            assert_eq!(value["response"]["patchType"], "JSONPatch");
            let decoded = BASE64_STANDARD
                .decode(value["response"]["patch"].as_str().unwrap())
                .unwrap();
            assert_eq!(serde_json::from_slice::<Patch>(&decoded).unwrap(), patch);
            assert!(value.get("request").is_none());
        }
        let denied: Value = serde_json::from_slice(&respond(
            V1,
            "u",
            Answer::Deny {
                message: "no".into(),
            },
        ))
        .unwrap();
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(denied["response"]["status"]["message"], "no");
        assert_eq!(denied["response"]["status"]["code"], 403);
    }

    #[test]
    fn skimming_changes_nothing_that_is_read() {
        let tricky = json!({"a]": "}\\\"{[", "b": [1.5e3, -0, true, null, {"\\": "é"}]});
        let metadata = json!({
            "name": "x", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
            "annotations": {"syncgc.io/synchronous": "true", "odd\"key": "{]"},
            "finalizers": ["a", "syncgc.io/synchronous"],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "m", "fieldsV1": tricky.clone()}]
        });
        let object = json!({"apiVersion": "v1", "kind": "Thing", "metadata": metadata,
                            "spec": tricky.clone(), "status": [tricky.clone()]});
        for (operation, object, old) in [
            ("CREATE", object.clone(), Value::Null),
            ("UPDATE", object.clone(), object.clone()),
            ("DELETE", Value::Null, object.clone()),
            ("CREATE", json!({"spec": 1, "metadata": null}), Value::Null),
        ] {
            let body = serde_json::to_vec_pretty(&review(json!({
                "uid": "u", "operation": operation, "name": "x", "namespace": "ns",
                "object": object, "oldObject": old, "dryRun": true,
                "options": {"propagationPolicy": "Orphan", "dryRun": ["All"]}
            })))
            .unwrap();
            let pruned =
                skim::prune(&body).unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&body)));
            let skimmed: ReviewIn = serde_json::from_slice(&pruned).unwrap();
            let whole = Review::read_tracked(&body).unwrap();
            assert_eq!(format!("{skimmed:?}"), format!("{whole:?}"), "{operation}");
            check_skim(&body);
            // Every prefix: unfinished bodies are neither pruned wrongly nor a panic.
            for end in (0..body.len()).step_by(7) {
                check_skim(&body[..end]);
            }
        }
    }

    /// The AdmissionReview fixtures (the fuzz target's seeds) are reviews, and pass its check.
    #[test]
    fn the_fixtures_pass_the_fuzz_check() {
        let seeds = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/admission");
        let mut count = 0;
        for entry in std::fs::read_dir(seeds).unwrap() {
            let body = std::fs::read(entry.unwrap().path()).unwrap();
            assert!(Review::parse(&body).is_ok());
            check_skim(&body);
            count += 1;
        }
        assert!(count >= 3, "{count} seeds");
    }

    #[test]
    fn an_invalid_body_gets_a_review_that_says_why() {
        let body = respond_invalid(&ReviewError::NoUid);
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["apiVersion"], V1);
        assert_eq!(value["response"]["allowed"], false);
        assert_eq!(value["response"]["status"]["code"], 400);
        assert!(
            value["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .contains("no uid")
        );
    }
}
