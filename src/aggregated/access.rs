//! What a user may read, as the apiserver's authorizer says: a SubjectAccessReview per
//! question, answers kept [`KEEP`] (as the apiserver's delegating authorizer keeps them), at
//! most [`MAX_KEPT`] of them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use parking_lot::Mutex;
use tokio::time::Instant;

use super::front_proxy::User;
use super::status::Refusal;
use crate::api::Cluster;

/// How long an answer is kept.
pub const KEEP: Duration = Duration::from_secs(10);
/// The most answers kept.
pub const MAX_KEPT: usize = 10_000;
/// The most questions (kinds and namespaces) asked for one answer; what any others would
/// cover is withheld.
pub const MAX_QUESTIONS: usize = 512;

/// One question: may the user `verb` the objects of `resource` (of `group`) in `namespace`
/// (every namespace, or cluster-scoped, when `None`), named `name` (any when `None`)? Or, with
/// a `path`, that non-resource path?
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Question {
    pub verb: &'static str,
    pub group: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub path: Option<String>,
}

impl Question {
    /// May the user get the objects of `resource` in `namespace`?
    pub fn read(group: &str, resource: &str, namespace: Option<&str>) -> Self {
        Self {
            verb: "get",
            group: group.to_owned(),
            resource: resource.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: None,
            path: None,
        }
    }

    /// May the user get the non-resource `path` (`/debug/graph`)?
    pub fn path(path: &str) -> Self {
        Self {
            path: Some(path.to_owned()),
            ..Self::read("", "", None)
        }
    }

    /// The same question about the object `name`.
    pub fn named(self, name: &str) -> Self {
        Self {
            name: Some(name.to_owned()),
            ..self
        }
    }

    fn review(&self, user: &User) -> SubjectAccessReview {
        SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                resource_attributes: self.path.is_none().then(|| ResourceAttributes {
                    verb: Some(self.verb.to_owned()),
                    group: Some(self.group.clone()),
                    resource: Some(self.resource.clone()),
                    namespace: self.namespace.clone(),
                    name: self.name.clone(),
                    ..ResourceAttributes::default()
                }),
                non_resource_attributes: self.path.as_ref().map(|path| NonResourceAttributes {
                    verb: Some(self.verb.to_owned()),
                    path: Some(path.clone()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        }
    }
}

/// The answers of the apiserver's authorizer, asked with syncgc's credentials (the
/// `system:auth-delegator` ClusterRole) and kept a while.
#[derive(Clone)]
pub struct Access {
    cluster: Cluster,
    kept: Kept<(User, Question), bool>,
}

/// What the apiserver answered lately: each answer for [`KEEP`], at most [`MAX_KEPT`].
pub struct Kept<K, V>(Arc<Mutex<HashMap<K, (V, Instant)>>>);

impl<K, V> Clone for Kept<K, V> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<K, V> Default for Kept<K, V> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<K: std::hash::Hash + Eq, V: Clone> Kept<K, V> {
    /// The answer to `key`, unless it is older than [`KEEP`].
    pub fn get(&self, key: &K) -> Option<V> {
        let kept = self.0.lock();
        let (value, at) = kept.get(key)?;
        (at.elapsed() < KEEP).then(|| value.clone())
    }

    /// Keeps the answer `value` to `key`, dropping the stale ones when [`MAX_KEPT`] are kept.
    pub fn put(&self, key: K, value: V) {
        let mut kept = self.0.lock();
        if kept.len() >= MAX_KEPT {
            kept.retain(|_, (_, at)| at.elapsed() < KEEP);
            if kept.len() >= MAX_KEPT {
                kept.clear();
            }
        }
        kept.insert(key, (value, Instant::now()));
    }
}

impl Access {
    pub fn new(cluster: Cluster) -> Self {
        Self {
            cluster,
            kept: Kept::default(),
        }
    }

    /// Whether `user` may do what `question` asks.
    pub async fn allows(&self, user: &User, question: &Question) -> Result<bool, Refusal> {
        let key = (user.clone(), question.clone());
        if let Some(allowed) = self.kept.get(&key) {
            return Ok(allowed);
        }
        let reviews = self.cluster.all::<SubjectAccessReview>();
        let answer = self
            .cluster
            .create_whole(&reviews, &question.review(user))
            .await
            .map_err(|err| {
                Refusal::unavailable(format!(
                    "the apiserver could not say what {} may read: {err}",
                    user.name
                ))
            })?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        self.kept.put(key, allowed);
        Ok(allowed)
    }

    /// For each question, whether `user` may do what it asks; asked side by side.
    pub async fn answers(
        &self,
        user: &User,
        questions: impl IntoIterator<Item = Question>,
    ) -> Result<HashMap<Question, bool>, Refusal> {
        let questions: Vec<Question> = questions.into_iter().collect();
        let answers =
            futures::future::try_join_all(questions.iter().map(|q| self.allows(user, q))).await?;
        Ok(questions.into_iter().zip(answers).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_becomes_a_subject_access_review_of_the_user() {
        let user = User {
            name: "alice".into(),
            groups: vec!["dev".into()],
            extra: [("scopes".to_owned(), vec!["a".to_owned()])].into(),
        };
        let review = Question::read("apps", "deployments", Some("team"))
            .named("web")
            .review(&user);
        let spec = review.spec;
        assert_eq!(spec.user.as_deref(), Some("alice"));
        assert_eq!(spec.groups, Some(vec!["dev".to_owned()]));
        assert!(spec.extra.is_some());
        let attributes = spec.resource_attributes.unwrap();
        assert_eq!(attributes.verb.as_deref(), Some("get"));
        assert_eq!(attributes.group.as_deref(), Some("apps"));
        assert_eq!(attributes.resource.as_deref(), Some("deployments"));
        assert_eq!(attributes.namespace.as_deref(), Some("team"));
        assert_eq!(attributes.name.as_deref(), Some("web"));
        assert!(spec.non_resource_attributes.is_none());

        let spec = Question::path("/debug/graph").review(&user).spec;
        assert!(spec.resource_attributes.is_none());
        let attributes = spec.non_resource_attributes.unwrap();
        assert_eq!(attributes.path.as_deref(), Some("/debug/graph"));
        assert_eq!(attributes.verb.as_deref(), Some("get"));
    }
}
