//! Objects syncgc reads and writes whole by name: its leader Lease, its webhook configuration
//! and the Secret of its serving certificate.

use kube::Api;
use kube::api::{ApiResource, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{ApiError, Changed, Cluster, Target, Verb};

/// A typed object [`Cluster`] reads and writes whole.
pub trait Whole:
    kube::Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug
{
}

impl<K> Whole for K where
    K: kube::Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug
{
}

/// Objects syncgc reads and writes whole, each by name: its leader Lease (`get`, `create`,
/// `update`), and with `--manage-webhook` its MutatingWebhookConfiguration and the Secret of its
/// serving certificate. A replacement carries the resourceVersion the object was read with, so
/// it is a compare-and-swap (409 when someone wrote it in between).
impl Cluster {
    fn whole<K>(api: &Api<K>, name: &str) -> Target
    where
        K: kube::Resource<DynamicType = ()>,
    {
        Target {
            resource: ApiResource::erase::<K>(&()),
            namespace: api.namespace().map(str::to_owned),
            name: name.to_owned(),
            uid: String::new(),
        }
    }

    /// The object `name` of `api`, if it exists.
    pub async fn get_whole<K: Whole>(
        &self,
        api: &Api<K>,
        name: &str,
    ) -> Result<Option<K>, ApiError> {
        let target = Self::whole(api, name);
        self.call(Verb::Get, &target, api.get_opt(name)).await
    }

    /// Creates `object` (named by its metadata) with `api`.
    pub async fn create_whole<K: Whole>(&self, api: &Api<K>, object: &K) -> Result<K, ApiError> {
        let name = object.meta().name.as_deref().unwrap_or_default();
        let target = Self::whole(api, name);
        self.call(
            Verb::Create,
            &target,
            api.create(&PostParams::default(), object),
        )
        .await
    }

    /// What the apiserver would make of creating `object` with `api`, admission included
    /// (`dryRun=All`): nothing is stored.
    pub async fn create_whole_dry_run<K: Whole>(
        &self,
        api: &Api<K>,
        object: &K,
    ) -> Result<K, ApiError> {
        let name = object.meta().name.as_deref().unwrap_or_default();
        let target = Self::whole(api, name);
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        self.call(Verb::Create, &target, api.create(&params, object))
            .await
    }

    /// Merges `patch` (a JSON merge patch) into the object `name` of `api`.
    pub async fn merge_whole<K: Whole>(
        &self,
        api: &Api<K>,
        name: &str,
        patch: &Value,
    ) -> Result<K, ApiError> {
        let target = Self::whole(api, name);
        self.call(
            Verb::Patch,
            &target,
            api.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
    }

    /// The objects of `api` that `labels` (a label selector) selects.
    pub async fn list_whole<K: Whole>(
        &self,
        api: &Api<K>,
        labels: &str,
    ) -> Result<Vec<K>, ApiError> {
        let target = Self::whole(api, "");
        let params = ListParams::default().labels(labels);
        let list = self.call(Verb::List, &target, api.list(&params)).await?;
        Ok(list.items)
    }

    /// Deletes the object `name` of `api`; [`Changed::AlreadySo`] when there was none.
    pub async fn delete_whole<K: Whole>(
        &self,
        api: &Api<K>,
        name: &str,
    ) -> Result<Changed, ApiError> {
        let target = Self::whole(api, name);
        match self
            .call(
                Verb::Delete,
                &target,
                api.delete(name, &DeleteParams::default()),
            )
            .await
        {
            Ok(_) => Ok(Changed::Yes),
            Err(err) if err.status() == Some(404) => Ok(Changed::AlreadySo),
            Err(err) => Err(err),
        }
    }

    /// Replaces the object named by `object`'s metadata with `object`.
    pub async fn replace_whole<K: Whole>(&self, api: &Api<K>, object: &K) -> Result<K, ApiError> {
        let name = object.meta().name.as_deref().unwrap_or_default();
        let target = Self::whole(api, name);
        self.call(
            Verb::Update,
            &target,
            api.replace(name, &PostParams::default(), object),
        )
        .await
    }
}
