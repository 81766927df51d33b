//! The replicas of one install, each keeping the causes its own webhook saw: the apiserver
//! sends each DELETE, the collector's too, to any replica. A replica answering for the causes
//! asks the others (`POST /replicas/causes`) and joins what they say, so that every replica
//! answers the same, and a chain that goes up through another replica's record reaches its
//! root.
//!
//! The replicas are the endpoints of the Service the `APIService` names, ready or not (the one
//! the aggregation layer calls, and one it does not call yet still keeps what its webhook
//! saw), but the replica's own pod, whose record it reads in place. They share the serving
//! pair, so each proves it is a replica by presenting that certificate, and trusts only a
//! server that serves it ([`ReloadingCert::peer_client_config`]).
//! A replica that does not answer within [`ASK_WITHIN`] is named in the answer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;

use super::status::Refusal;
use super::{Aggregated, answer};
use crate::api::Cluster;
use crate::gc::causes::{Asked, Causes, Entry, Gathered, Scope};
use crate::webhook::managed::API_SERVICE;
use crate::webhook::tls::{Peer, ReloadingCert};

/// How long a replica's answer is waited for.
pub const ASK_WITHIN: Duration = Duration::from_secs(3);
/// How many times the replicas are asked for the causes their chains end at: chains that go
/// from one record to another and back this many times end there, marked incomplete.
const ROUNDS: usize = 8;
/// The most causes asked for at once.
const MAX_ASKED: usize = 10_000;
/// The largest answer read from a replica (its whole record, at most).
const MAX_ANSWER: usize = 64 << 20;

/// The path a replica asks its peers at.
pub const PATH: &str = "/replicas/causes";

/// The other replicas, and how to ask them.
pub struct Peers {
    cluster: Cluster,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

/// What the replicas said, joined, and the replicas that said nothing.
pub struct Joined {
    pub causes: Gathered,
    pub unanswered: Vec<String>,
}

impl Peers {
    pub fn new(cert: &Arc<ReloadingCert>, cluster: Cluster) -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(ASK_WITHIN));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(cert.peer_client_config())
            .https_only()
            .enable_http1()
            .wrap_connector(http);
        Self {
            cluster,
            client: Client::builder(TokioExecutor::new()).build(https),
        }
    }

    /// The causes of `scope` in `local` and every replica's record, with the chains of each
    /// followed across the records.
    pub async fn join(&self, local: &Causes, scope: Scope) -> Joined {
        let mut asked = Asked {
            scope: Some(scope),
            uids: Vec::new(),
        };
        let mut causes = Gathered::default();
        let (mut replicas, mut unanswered) = match self.replicas().await {
            Ok(replicas) => (replicas, Vec::new()),
            Err(err) => (Vec::new(), vec![format!("the replicas: {err:#}")]),
        };
        for _ in 0..ROUNDS {
            let mut added = causes.add(local.gather(&asked));
            let answers = futures::future::join_all(replicas.iter().map(|r| self.ask(*r, &asked)));
            let mut answered = Vec::new();
            for (replica, answer) in replicas.iter().zip(answers.await) {
                match answer {
                    Ok(entries) => {
                        added += causes.add(entries);
                        answered.push(*replica);
                    }
                    Err(err) => unanswered.push(format!("{replica}: {err:#}")),
                }
            }
            replicas = answered;
            let mut missing = causes.missing();
            missing.truncate(MAX_ASKED);
            if added == 0 || missing.is_empty() {
                break;
            }
            asked = Asked {
                scope: None,
                uids: missing,
            };
        }
        Joined { causes, unanswered }
    }

    /// The addresses of the Service the `APIService` names: none when it is not registered.
    async fn replicas(&self) -> anyhow::Result<Vec<SocketAddr>> {
        let apiservices = self.cluster.all::<APIService>();
        let Some(reference) = self
            .cluster
            .get_whole(&apiservices, API_SERVICE)
            .await?
            .and_then(|a| a.spec?.service)
        else {
            return Ok(Vec::new());
        };
        let namespace = reference.namespace.as_deref().unwrap_or("default");
        let name = reference.name.as_deref().unwrap_or_default();
        let services = self.cluster.namespaced::<Service>(namespace);
        let endpoints = self.cluster.namespaced::<Endpoints>(namespace);
        let (Some(service), Some(endpoints)) = (
            self.cluster.get_whole(&services, name).await?,
            self.cluster.get_whole(&endpoints, name).await?,
        ) else {
            return Ok(Vec::new());
        };
        let port = reference.port.unwrap_or(443);
        let port_name = service
            .spec
            .and_then(|s| s.ports)
            .unwrap_or_default()
            .into_iter()
            .find(|p| p.port == port)
            .and_then(|p| p.name);
        Ok(addresses(
            &endpoints,
            port_name.as_deref(),
            &crate::api::client::replica(),
        ))
    }

    async fn ask(&self, replica: SocketAddr, asked: &Asked) -> anyhow::Result<Vec<Entry>> {
        let request = http::Request::post(format!("https://{replica}{PATH}"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(serde_json::to_vec(asked)?)))?;
        let read = async {
            let response = self.client.request(request).await?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|err| anyhow::anyhow!("reading its answer: {err}"))?
                .to_bytes();
            anyhow::ensure!(
                status.is_success(),
                "{status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(512)])
            );
            Ok(serde_json::from_slice(&body)?)
        };
        tokio::time::timeout(ASK_WITHIN, read)
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {ASK_WITHIN:?}"))?
    }
}

/// The addresses of `endpoints`, ready or not, at the port named `port_name` (or the only
/// port of a subset, when the Service's port is unnamed), but the pod `own`'s: this replica's
/// record is read in place.
fn addresses(endpoints: &Endpoints, port_name: Option<&str>, own: &str) -> Vec<SocketAddr> {
    let mut found = Vec::new();
    for subset in endpoints.subsets.iter().flatten() {
        let ports = subset.ports.as_deref().unwrap_or_default();
        let port = match port_name {
            Some(name) => ports.iter().find(|p| p.name.as_deref() == Some(name)),
            None if ports.len() == 1 => ports.first(),
            None => None,
        };
        let Some(port) = port.and_then(|p| u16::try_from(p.port).ok()) else {
            continue;
        };
        let ips = subset.addresses.iter().flatten();
        for address in ips.chain(subset.not_ready_addresses.iter().flatten()) {
            let pod = address
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref() == Some("Pod"))
                .and_then(|r| r.name.as_deref());
            if pod == Some(own) {
                continue;
            }
            if let Ok(ip) = address.ip.parse() {
                found.push(SocketAddr::new(ip, port));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// `POST /replicas/causes`: what this replica's record holds of what another asks, answered
/// only to a replica ([`Peer`]).
pub async fn answer_peer(
    State(api): State<Arc<Aggregated>>,
    peer: Option<Extension<Peer>>,
    body: Bytes,
) -> Response {
    if peer.is_none_or(|Extension(Peer(peer))| !peer) {
        return Refusal::unauthorized(
            "only a replica of this syncgc, presenting its serving certificate, may ask",
        )
        .into_response();
    }
    let asked: Asked = match serde_json::from_slice(&body) {
        Ok(asked) => asked,
        Err(err) => return Refusal::bad_request(format!("the question: {err}")).into_response(),
    };
    if asked.uids.len() > MAX_ASKED {
        return Refusal::bad_request(format!("more than {MAX_ASKED} causes asked at once"))
            .into_response();
    }
    let entries = api
        .causes
        .as_ref()
        .map(|causes| {
            causes.confirm(&api.graph.read(), tokio::time::Instant::now());
            causes.gather(&asked)
        })
        .unwrap_or_default();
    answer(http::StatusCode::OK, &entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(json: serde_json::Value) -> Endpoints {
        serde_json::from_value(json).unwrap()
    }

    /// The other replicas: every endpoint, ready or not, at the Service's port, but this
    /// replica's own pod (its record is read in place).
    #[test]
    fn the_replicas_are_the_endpoints_ready_or_not_at_the_service_s_port() {
        let e = endpoints(serde_json::json!({
            "metadata": {"name": "syncgc-webhook"},
            "subsets": [
                {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.9", "targetRef": {"kind": "Pod", "name": "syncgc-own"}}],
                 "notReadyAddresses": [{"ip": "10.0.0.2", "targetRef": {"kind": "Pod", "name": "syncgc-other"}}],
                 "ports": [{"name": "metrics", "port": 9090}, {"name": "https", "port": 8443}]},
                {"addresses": [{"ip": "10.0.0.3"}], "ports": [{"name": "https", "port": 9443}]},
                {"addresses": [{"ip": "not an address"}], "ports": [{"name": "https", "port": 1}]},
            ]
        }));
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            addresses(&e, Some("https"), "syncgc-own"),
            vec![
                at("10.0.0.1:8443"),
                at("10.0.0.2:8443"),
                at("10.0.0.3:9443")
            ]
        );
        // An unnamed port is the subset's only one.
        assert_eq!(
            addresses(&e, None, "syncgc-own"),
            vec![at("10.0.0.3:9443")],
            "a subset of two ports names neither"
        );
    }
}
