//! The connections of the graph's streams: its lists and its watches, one of each per resource
//! kind, hundreds on a cluster with many CRDs.
//!
//! Over HTTP/2 every request is a stream of one connection, and the apiserver lets a connection
//! carry only so many at once (`--http2-max-streams-per-connection`, 250 by default); a request
//! past that waits until another stream closes. A watch never closes on its own, so one watch
//! too many would wait forever, unseen. [`Streams`] therefore spreads its requests over
//! connections of their own ("lanes"), each with at most [`STREAMS_PER_CONNECTION`] requests in
//! flight, a request's slot held until its answer has been read or dropped; a lane is opened
//! when every lane is full. This is what client-go's HTTP/2 transport does when a connection's
//! streams run out. A new lane's first request is a small one sent alone ([`opener`]): whether a
//! connection speaks HTTP/2 is known only once it is open, and requests sent before that would
//! each open a connection of their own.
//!
//! The lanes are apart from the connection of single calls ([`super::client`]), so that a list
//! the graph has not read yet (its flow-control window full) never holds up a delete or a lease
//! renewal behind it.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use hyper::body::{Body, Frame, SizeHint};
use hyper_util::client::legacy::connect::Connect;
use hyper_util::client::legacy::{Builder, Client};
use parking_lot::Mutex;
use tokio::sync::OnceCell;

/// The most requests a lane carries at once: well under the apiserver's default of 250
/// streams per HTTP/2 connection, and under most lower settings.
pub const STREAMS_PER_CONNECTION: usize = 100;

/// A service that sends each request on a lane with room for it (see the module's text).
pub struct Streams<C, B> {
    builder: Builder,
    connector: C,
    lanes: Arc<Mutex<Vec<Lane<C, B>>>>,
}

impl<C: Clone, B> Clone for Streams<C, B> {
    fn clone(&self) -> Self {
        Self {
            builder: self.builder.clone(),
            connector: self.connector.clone(),
            lanes: self.lanes.clone(),
        }
    }
}

struct Lane<C, B> {
    http: Client<C, B>,
    in_flight: Arc<AtomicUsize>,
    /// Set once the lane's [`opener`] has been answered (or has failed).
    opened: Arc<OnceCell<()>>,
}

impl<C, B> Streams<C, B>
where
    C: Connect + Clone + Send + Sync + 'static,
    B: Body + From<Vec<u8>> + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    /// Lanes built by `builder` over `connector`, each opened when first needed.
    pub fn new(builder: Builder, connector: C) -> Self {
        Self {
            builder,
            connector,
            lanes: Arc::default(),
        }
    }

    /// The least busy lane's client, whether it is open, and a slot on it; a new lane when
    /// every lane is full.
    fn take(&self) -> (Client<C, B>, Arc<OnceCell<()>>, Slot) {
        let mut lanes = self.lanes.lock();
        let index = pick(
            lanes
                .iter()
                .map(|lane| lane.in_flight.load(Ordering::Relaxed)),
        )
        .unwrap_or_else(|| {
            lanes.push(Lane {
                http: self.builder.build(self.connector.clone()),
                in_flight: Arc::default(),
                opened: Arc::default(),
            });
            lanes.len() - 1
        });
        let lane = &lanes[index];
        lane.in_flight.fetch_add(1, Ordering::Relaxed);
        (
            lane.http.clone(),
            lane.opened.clone(),
            Slot(lane.in_flight.clone()),
        )
    }

    /// How many lanes are open.
    #[cfg(test)]
    fn lanes(&self) -> usize {
        self.lanes.lock().len()
    }
}

/// Of lanes with `in_flight` requests each, the least busy one with room, if any.
fn pick(in_flight: impl Iterator<Item = usize>) -> Option<usize> {
    in_flight
        .enumerate()
        .filter(|&(_, n)| n < STREAMS_PER_CONNECTION)
        .min_by_key(|&(_, n)| n)
        .map(|(index, _)| index)
}

/// What opens a lane for `request`: a GET of the apiserver's version with `request`'s
/// credentials, small and answered at once.
fn opener<B: From<Vec<u8>>>(request: &http::Request<B>) -> http::Request<B> {
    let mut opener = http::Request::new(B::from(Vec::new()));
    let mut uri = request.uri().clone().into_parts();
    uri.path_and_query = Some(http::uri::PathAndQuery::from_static("/version"));
    if let Ok(uri) = http::Uri::from_parts(uri) {
        *opener.uri_mut() = uri;
    }
    for name in [http::header::AUTHORIZATION, http::header::USER_AGENT] {
        if let Some(value) = request.headers().get(&name) {
            opener.headers_mut().insert(name, value.clone());
        }
    }
    opener
}

/// A request's place on its lane, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An answer's body, holding its request's slot until it is dropped.
pub struct Holding<B> {
    body: B,
    _slot: Slot,
}

impl<B: Body + Unpin> Body for Holding<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

type Reply = http::Response<Holding<hyper::body::Incoming>>;
type Error = hyper_util::client::legacy::Error;

impl<C, B> tower::Service<http::Request<B>> for Streams<C, B>
where
    C: Connect + Clone + Send + Sync + 'static,
    B: Body + From<Vec<u8>> + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Reply;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let (http, opened, slot) = self.take();
        Box::pin(async move {
            if !opened.initialized() {
                let opener = opener(&request);
                // Its answer does not matter, only that the connection is open; a lane that
                // failed to open is opened by the requests that follow, each as it can.
                opened
                    .get_or_init(|| async { drop(http.request(opener).await) })
                    .await;
            }
            let answer = http.request(request).await?;
            Ok(answer.map(|body| Holding { body, _slot: slot }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_goes_to_the_least_busy_lane_with_room() {
        assert_eq!(pick([].into_iter()), None, "no lane yet");
        assert_eq!(pick([3, 1, 2].into_iter()), Some(1));
        assert_eq!(
            pick([STREAMS_PER_CONNECTION, STREAMS_PER_CONNECTION - 1].into_iter()),
            Some(1)
        );
        assert_eq!(
            pick([STREAMS_PER_CONNECTION; 3].into_iter()),
            None,
            "every lane is full"
        );
    }

    #[test]
    fn a_lane_is_opened_by_a_get_of_the_version_with_the_same_credentials() {
        let request =
            http::Request::post("https://apiserver:6443/api/v1/namespaces/a/configmaps?watch=1")
                .header(http::header::AUTHORIZATION, "Bearer t")
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(http_body_util::Full::<hyper::body::Bytes>::from(
                    b"{}".to_vec(),
                ))
                .unwrap();
        let opener = opener(&request);
        assert_eq!(opener.method(), http::Method::GET);
        assert_eq!(opener.uri(), "https://apiserver:6443/version");
        assert_eq!(opener.headers()[http::header::AUTHORIZATION], "Bearer t");
        assert!(!opener.headers().contains_key(http::header::CONTENT_TYPE));
    }

    #[tokio::test]
    async fn a_lane_opens_when_the_others_are_full_and_slots_come_back() {
        let streams: Streams<_, http_body_util::Full<hyper::body::Bytes>> = Streams::new(
            Client::builder(hyper_util::rt::TokioExecutor::new()),
            hyper_util::client::legacy::connect::HttpConnector::new(),
        );
        let held: Vec<_> = (0..STREAMS_PER_CONNECTION + 1)
            .map(|_| streams.take().2)
            .collect();
        assert_eq!(streams.lanes(), 2);
        drop(held);
        let _again: Vec<_> = (0..STREAMS_PER_CONNECTION)
            .map(|_| streams.take().2)
            .collect();
        assert_eq!(streams.lanes(), 2, "the first lane has room again");
    }
}
