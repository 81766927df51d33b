//! The debug endpoints (`/debug/graph`, off by default), on the metrics port, are answered as
//! the apiserver decides, like syncgc's API: the caller's bearer token is authenticated by the
//! apiserver (a `TokenReview`, as a delegating authenticator does), and the request authorized
//! by its authorizer (a `SubjectAccessReview` of the non-resource path, `get`). Answers are
//! kept [`KEEP`](super::access::KEEP), at most [`MAX_KEPT`](super::access::MAX_KEPT), a token by
//! its HMAC under a key of the process (as the apiserver's token cache keeps them), not itself.
//!
//! `kubectl create token NAME` (1.24+), or a ServiceAccount's token Secret, gives a token;
//! RBAC grants the path with `nonResourceURLs: ["/debug/graph"]`.

use super::access::{Access, Kept, Question};
use super::front_proxy::User;
use super::status::Refusal;
use crate::api::Cluster;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};

/// Who a bearer token is, as the apiserver says, and what the user may get.
#[derive(Clone)]
pub struct Delegated {
    cluster: Cluster,
    access: Access,
    /// The users of the tokens reviewed lately (`None`: not authenticated), by the tokens'
    /// HMAC under a key of this process: the tokens themselves are not kept.
    kept: Kept<Vec<u8>, Option<User>>,
    key: ring::hmac::Key,
}

impl Delegated {
    pub fn new(cluster: Cluster, access: Access) -> Self {
        let rng = ring::rand::SystemRandom::new();
        Self {
            cluster,
            access,
            kept: Kept::default(),
            key: ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
                .expect("the system's random source gives a key"),
        }
    }

    /// The user `token` authenticates, if any.
    async fn user(&self, token: &str) -> Result<Option<User>, Refusal> {
        let kept_as = ring::hmac::sign(&self.key, token.as_bytes())
            .as_ref()
            .to_vec();
        if let Some(user) = self.kept.get(&kept_as) {
            return Ok(user);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviews = self.cluster.all::<TokenReview>();
        let answer = self
            .cluster
            .create_whole(&reviews, &review)
            .await
            .map_err(|err| {
                Refusal::unavailable(format!("the apiserver could not review the token: {err}"))
            })?;
        let user = answer
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
            .map(|u| User {
                name: u.username.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            });
        self.kept.put(kept_as, user.clone());
        Ok(user)
    }
}

/// The token of an `Authorization: Bearer` header.
fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A middleware: the request goes on when its bearer token's user may `get` its path; else 401
/// (no token, or one the apiserver does not authenticate) or 403.
pub async fn authorized(
    State(delegated): State<Delegated>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = bearer(&request) else {
        return Refusal::unauthorized(
            "a bearer token is needed: the apiserver says who it is and what it may get",
        )
        .into_response();
    };
    let user = match delegated.user(token).await {
        Ok(Some(user)) => user,
        Ok(None) => {
            return Refusal::unauthorized("the apiserver does not authenticate this token")
                .into_response();
        }
        Err(refusal) => return refusal.into_response(),
    };
    let question = Question::path(request.uri().path());
    match delegated.access.allows(&user, &question).await {
        Ok(true) => next.run(request).await,
        Ok(false) => Refusal::forbidden(format!(
            "{} may not get {}: RBAC grants it with nonResourceURLs",
            user.name,
            request.uri().path()
        ))
        .into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(authorization: Option<&str>) -> Request {
        let mut request = Request::new(axum::body::Body::empty());
        if let Some(value) = authorization {
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, value.parse().unwrap());
        }
        request
    }

    #[test]
    fn the_token_is_the_bearer_s() {
        assert_eq!(bearer(&with(Some("Bearer abc"))), Some("abc"));
        assert_eq!(bearer(&with(Some("bearer  abc "))), Some("abc"));
        assert_eq!(bearer(&with(Some("Basic abc"))), None);
        assert_eq!(bearer(&with(Some("Bearer "))), None);
        assert_eq!(bearer(&with(None)), None);
    }
}
