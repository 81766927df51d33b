//! Metadata lists: paged, read consistently, decoded from protobuf a chunk at a time as it
//! arrives (JSON from servers that cannot encode it).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::Client;
use kube::api::ListParams;
use serde::Deserialize;

use super::meta::{Item, Meta};
use super::proto::{self, ListDecoder};
use super::{ApiError, Cluster, Target, Verb};

/// How many objects a page of a list holds.
pub const LIST_PAGE: u32 = 500;

/// A metadata list in JSON, as far as the collector reads it.
#[derive(Debug, Deserialize)]
struct JsonList {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default, deserialize_with = "null_is_empty")]
    items: Vec<Item>,
}

/// A metadata list being read: in protobuf, decoded a chunk at a time as it arrives; in JSON
/// (servers that cannot encode it in protobuf), at once when it has all arrived.
pub struct MetaList {
    body: kube::client::Body,
    decoder: Option<ListDecoder>,
    /// A JSON answer so far.
    json: Option<Vec<u8>>,
    /// A JSON answer's list metadata, once read.
    json_list: Option<proto::ListMeta>,
}

impl MetaList {
    /// Sends the metadata list `request`, asking for protobuf.
    pub async fn send(
        client: &Client,
        mut request: http::Request<Vec<u8>>,
    ) -> Result<Self, kube::Error> {
        request.headers_mut().insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static(proto::ACCEPT),
        );
        let response = client.send(request.map(kube::client::Body::from)).await?;
        let status = response.status();
        let protobuf = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(proto::CONTENT_TYPE));
        let body = response.into_body();
        if status.is_client_error() || status.is_server_error() {
            let bytes = http_body_util::BodyExt::collect(body).await?.to_bytes();
            let status =
                serde_json::from_slice::<kube::core::Status>(&bytes).unwrap_or_else(|_| {
                    let text = String::from_utf8_lossy(&bytes);
                    kube::core::Status::failure(text.trim(), "Failed to parse error data")
                        .with_code(status.as_u16())
                });
            return Err(kube::Error::Api(status.boxed()));
        }
        Ok(Self {
            body,
            decoder: protobuf.then(ListDecoder::default),
            json: (!protobuf).then(Vec::new),
            json_list: None,
        })
    }

    /// The next objects, `None` once the list is read.
    pub async fn next(&mut self) -> Result<Option<Vec<Meta>>, kube::Error> {
        loop {
            let Some(frame) = http_body_util::BodyExt::frame(&mut self.body).await else {
                let Some(json) = self.json.take() else {
                    return Ok(None);
                };
                let (list, objects) = json_list(&json).map_err(kube::Error::SerdeError)?;
                self.json_list = Some(list);
                return Ok(Some(objects));
            };
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            if let Some(json) = &mut self.json {
                json.extend_from_slice(&data);
            } else if let Some(decoder) = &mut self.decoder {
                let objects = decoder
                    .feed(&data)
                    .map_err(|e| kube::Error::ReadEvents(std::io::Error::other(e)))?;
                if !objects.is_empty() {
                    return Ok(Some(objects));
                }
            }
        }
    }

    /// Once [`MetaList::next`] has said the list is read: its resourceVersion and continue
    /// token.
    pub fn finish(self) -> Result<proto::ListMeta, kube::Error> {
        let malformed = |e| kube::Error::ReadEvents(std::io::Error::other(e));
        match (self.decoder, self.json_list) {
            (Some(decoder), _) => decoder.finish().map_err(malformed),
            (None, Some(list)) => Ok(list),
            (None, None) => Err(malformed(proto::Malformed(
                "the list was not read to its end",
            ))),
        }
    }
}

/// A metadata list in JSON: its resourceVersion and continue token, and its objects.
fn json_list(json: &[u8]) -> Result<(proto::ListMeta, Vec<Meta>), serde_json::Error> {
    let page: JsonList = serde_json::from_slice(json)?;
    let list = proto::ListMeta {
        resource_version: page.metadata.resource_version,
        continue_: page.metadata.continue_.filter(|c| !c.is_empty()),
    };
    Ok((list, page.items.into_iter().map(|i| i.metadata).collect()))
}

/// A list that is `null` (as an empty list's `items` is) or absent is empty.
pub fn null_is_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

impl Cluster {
    /// Every object of `collection` (see [`Target::collection`]), read consistently (from
    /// etcd, not the apiserver's watch cache), metadata only, a page at a time; each page's
    /// objects go to `each`.
    pub async fn list_metadata(
        &self,
        collection: &Target,
        mut each: impl FnMut(Vec<Meta>),
    ) -> Result<(), ApiError> {
        let request = kube::core::Request::new(collection.resource_url());
        let mut params = ListParams::default().limit(LIST_PAGE);
        loop {
            let request = request
                .list_metadata(&params)
                .map_err(kube::Error::BuildRequest);
            let list = self
                .call(Verb::List, collection, async {
                    let mut list = MetaList::send(&self.client, request?).await?;
                    while let Some(objects) = list.next().await? {
                        each(objects);
                    }
                    list.finish()
                })
                .await?;
            match list.continue_ {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_metadata_list_reads_as_the_protobuf_one() {
        let (list, objects) = json_list(
            br#"{"kind":"PartialObjectMetadataList","metadata":{"resourceVersion":"7","continue":""},
                "items":[{"metadata":{"name":"a","uid":"u"}},{"metadata":{}}]}"#,
        )
        .unwrap();
        assert_eq!(list.resource_version.as_deref(), Some("7"));
        assert_eq!(
            list.continue_, None,
            "an empty continue token ends the list"
        );
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].name, "a");
        let (list, objects) =
            json_list(br#"{"metadata":{"continue":"next"},"items":null}"#).unwrap();
        assert!(objects.is_empty(), "an empty list's items are null");
        assert_eq!(list.continue_.as_deref(), Some("next"));
    }
}
