//! The answers that refuse: a Kubernetes `Status` with the code and reason the apiserver would
//! give, which kubectl prints as `Error from server (Reason): message`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A request refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: StatusCode,
    pub message: String,
    /// The object a 404 names, as the apiserver's `StatusDetails` do: a client tells "no such
    /// object" from "no such API" by it.
    pub missing: Option<Missing>,
}

/// What a `NotFound` is about: the `kind` (the resource, as the apiserver says it) and `name`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Missing {
    pub kind: String,
    pub name: String,
}

impl Refusal {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// The object `name` of `kind` does not exist.
    pub fn missing(kind: &str, name: &str, message: impl Into<String>) -> Self {
        Self {
            missing: Some(Missing {
                kind: kind.to_owned(),
                name: name.to_owned(),
            }),
            ..Self::not_found(message)
        }
    }

    pub fn not_allowed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    fn new(code: StatusCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            missing: None,
        }
    }

    /// The `reason` of a `Status` with this code (`metav1.StatusReason`).
    pub fn reason(&self) -> &'static str {
        match self.code {
            StatusCode::BAD_REQUEST => "BadRequest",
            StatusCode::UNAUTHORIZED => "Unauthorized",
            StatusCode::FORBIDDEN => "Forbidden",
            StatusCode::NOT_FOUND => "NotFound",
            StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
            StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLarge",
            StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
            _ => "InternalError",
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason(),
            "code": self.code.as_u16(),
        });
        if let Some(missing) = &self.missing {
            status["details"] = json!(missing);
        }
        let mut response = (self.code, Json(status)).into_response();
        if self.code == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, 1.into());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::names_missing_object;

    #[tokio::test]
    async fn a_refusal_is_a_kubernetes_status() {
        let response = Refusal::forbidden("no").into_response();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "Forbidden");
        assert_eq!(status["code"], 403);
        assert_eq!(status["message"], "no");
    }

    #[tokio::test]
    async fn a_missing_object_is_named_in_the_details_and_told_from_a_missing_api() {
        let response = Refusal::missing("configmaps", "web", "gone").into_response();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let status: kube::core::Status = serde_json::from_slice(&body).unwrap();
        assert!(names_missing_object(&status));
        assert_eq!(status.details.unwrap().kind, "configmaps");
        let unnamed = axum::body::to_bytes(
            Refusal::not_found("no such path")
                .into_response()
                .into_body(),
            1 << 16,
        )
        .await
        .unwrap();
        let unnamed: kube::core::Status = serde_json::from_slice(&unnamed).unwrap();
        assert!(!names_missing_object(&unnamed));
        // What the 1.20 apiserver answers for a group nobody serves, as kube reads it.
        let page = kube::core::Status::failure("404 page not found", "").with_code(404);
        assert!(!names_missing_object(&page));
    }
}
