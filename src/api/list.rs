//! Metadata lists: paged, read consistently, decoded from protobuf a chunk at a time as it
//! arrives (JSON from servers that cannot encode it).

use futures::FutureExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::Client;
use kube::api::ListParams;
use serde::Deserialize;

use super::meta::{Item, Meta};
use super::proto::{self, ListDecoder};
use super::{ApiError, Cluster, Target, Verb};

/// How many objects a page of a list holds.
pub const LIST_PAGE: u32 = 500;

/// The most bytes of a protobuf list decoded at once: a few thousand objects.
const DECODE_BATCH: usize = 1 << 20;

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

    /// The next objects, decoded on a blocking thread and handed there to `map`; `None` once
    /// the list is read. Protobuf is decoded as it arrives, what has arrived together (up to
    /// [`DECODE_BATCH`] bytes) at once, so that the caller's thread, free meanwhile, takes in
    /// one batch while the next is decoded: on 1.20 the answer to a list from the watch cache
    /// is built whole before it is sent, and a million objects arrive within a fraction of a
    /// second. JSON is decoded whole once it has all arrived.
    pub async fn next<T: Send + 'static>(
        &mut self,
        map: impl FnOnce(Vec<Meta>) -> T + Send + 'static,
    ) -> Result<Option<T>, kube::Error> {
        if let Some(mut json) = self.json.take() {
            while let Some(data) = self.data().await? {
                json.extend_from_slice(&data);
            }
            let (list, objects) = blocking(move || {
                let (list, objects) = json_list(&json).map_err(kube::Error::SerdeError)?;
                Ok((list, map(objects)))
            })
            .await?;
            self.json_list = Some(list);
            return Ok(Some(objects));
        }
        let Some(mut decoder) = self.decoder.take() else {
            return Ok(None);
        };
        let Some(first) = self.data().await? else {
            self.decoder = Some(decoder);
            return Ok(None);
        };
        let mut size = first.len();
        let mut arrived = vec![first];
        while size < DECODE_BATCH {
            match self.data().now_or_never().transpose()? {
                Some(Some(data)) => {
                    size += data.len();
                    arrived.push(data);
                }
                // Not arrived yet, or the end (which the next call reads again).
                _ => break,
            }
        }
        let (decoder, objects) = blocking(move || {
            let mut objects = Vec::new();
            for data in &arrived {
                objects.extend(decoder.feed(data).map_err(malformed)?);
            }
            Ok((decoder, map(objects)))
        })
        .await?;
        self.decoder = Some(decoder);
        Ok(Some(objects))
    }

    /// The answer's next bytes; `None` at its end.
    async fn data(&mut self) -> Result<Option<hyper::body::Bytes>, kube::Error> {
        while let Some(frame) = http_body_util::BodyExt::frame(&mut self.body).await {
            if let Ok(data) = frame?.into_data() {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }

    /// Once [`MetaList::next`] has said the list is read: its resourceVersion and continue
    /// token.
    pub fn finish(self) -> Result<proto::ListMeta, kube::Error> {
        match (self.decoder, self.json_list) {
            (Some(decoder), _) => decoder.finish().map_err(malformed),
            (None, Some(list)) => Ok(list),
            (None, None) => Err(malformed(proto::Malformed(
                "the list was not read to its end",
            ))),
        }
    }
}

/// An answer that is not what it should be.
fn malformed(err: proto::Malformed) -> kube::Error {
    kube::Error::ReadEvents(std::io::Error::other(err))
}

/// Runs `decode` on a blocking thread.
async fn blocking<T: Send + 'static>(
    decode: impl FnOnce() -> Result<T, kube::Error> + Send + 'static,
) -> Result<T, kube::Error> {
    tokio::task::spawn_blocking(decode)
        .await
        .map_err(|e| kube::Error::ReadEvents(std::io::Error::other(e)))?
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
                    while let Some(objects) = list.next(|objects| objects).await? {
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
    use futures::StreamExt;
    use http_body_util::StreamBody;
    use hyper::body::{Bytes, Frame};

    /// A client whose every answer is `frames` of `content_type`, then (unless `ends`) nothing
    /// more for ever.
    fn answering(content_type: &'static str, frames: Vec<Vec<u8>>, ends: bool) -> Client {
        Client::new(
            tower::service_fn(move |_: http::Request<kube::client::Body>| {
                let frames = frames.clone();
                async move {
                    let data = futures::stream::iter(frames)
                        .map(|f| Ok::<_, std::io::Error>(Frame::data(Bytes::from(f))));
                    let body = if ends {
                        data.boxed()
                    } else {
                        data.chain(futures::stream::pending()).boxed()
                    };
                    let response = http::Response::builder()
                        .header(http::header::CONTENT_TYPE, content_type)
                        .body(StreamBody::new(body))
                        .unwrap();
                    Ok::<_, std::io::Error>(response)
                }
            }),
            "default",
        )
    }

    async fn listing(client: &Client) -> MetaList {
        let request = http::Request::get("/api/v1/configmaps")
            .body(Vec::new())
            .unwrap();
        MetaList::send(client, request).await.unwrap()
    }

    /// The objects of a `next` call, and whether they were mapped on another thread.
    async fn next(list: &mut MetaList) -> Option<(Vec<String>, bool)> {
        let caller = std::thread::current().id();
        let mapped = list.next(move |objects| {
            let names = objects.into_iter().map(|o| o.name).collect();
            (names, std::thread::current().id() != caller)
        });
        mapped.await.unwrap()
    }

    #[tokio::test]
    async fn what_has_arrived_is_decoded_together_on_another_thread() {
        let items: Vec<Vec<u8>> = (0..3000)
            .map(|i| proto::tests::object(&format!("cm-{i}"), &format!("uid-{i}")))
            .collect();
        let whole = proto::tests::answer(&items);
        let frames: Vec<Vec<u8>> = whole.chunks(100).map(<[u8]>::to_vec).collect();
        let mut list = listing(&answering(proto::CONTENT_TYPE, frames.clone(), true)).await;
        let (names, elsewhere) = next(&mut list).await.unwrap();
        assert!(elsewhere, "decoded on a blocking thread");
        assert_eq!(names.len(), 3000, "every frame had arrived: one batch");
        assert_eq!(names[2999], "cm-2999");
        assert_eq!(next(&mut list).await, None);
        assert_eq!(
            list.finish().unwrap().resource_version.as_deref(),
            Some("777")
        );

        // Half the answer has arrived, the rest is late: what has arrived is taken in.
        let half = frames[..frames.len() / 2].to_vec();
        let mut list = listing(&answering(proto::CONTENT_TYPE, half, false)).await;
        let (names, _) = next(&mut list).await.unwrap();
        assert!((1000..2000).contains(&names.len()), "{}", names.len());
        assert_eq!(names[0], "cm-0");
    }

    #[tokio::test]
    async fn a_list_cut_short_is_an_error_and_json_is_read_whole() {
        let whole = proto::tests::answer(&[proto::tests::object("a", "u")]);
        let cut = whole[..whole.len() - 5].to_vec();
        let mut list = listing(&answering(proto::CONTENT_TYPE, vec![cut], true)).await;
        while next(&mut list).await.is_some() {}
        assert!(list.finish().is_err(), "the answer ended inside the list");

        let json = br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#;
        let frames = json.chunks(7).map(<[u8]>::to_vec).collect();
        let mut list = listing(&answering("application/json", frames, true)).await;
        let (names, elsewhere) = next(&mut list).await.unwrap();
        assert_eq!(
            (names, elsewhere),
            (vec!["a".to_owned(), "b".to_owned()], true)
        );
        assert_eq!(next(&mut list).await, None);
        assert_eq!(
            list.finish().unwrap().resource_version.as_deref(),
            Some("9")
        );
    }

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
