//! The ceiling for syncgc's webhook stack: axum behind tokio-rustls and hyper, as syncgc
//! serves, answering every POST to `/mutate` with one constant AdmissionReview (the answer
//! syncgc gives the benchmark's review) after reading the body, and doing nothing else. The
//! benchmark runs it as a process of its own, like `syncgc run`: `cluster bare-webhook ADDR
//! CERT KEY [floor]`.
//!
//! As the `floor`, it answers the apiserver as little as a webhook can and still be right for
//! writes that do not concern it: the request's uid echoed, allowed, and the finalizer added
//! only when the body holds the opt-in annotation's name anywhere — what any webhook of
//! syncgc's must at least do, on the same stack.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use base64::Engine;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The argument that makes the benchmark binary this server.
pub const SUBCOMMAND: &str = "bare-webhook";

pub async fn serve(addr: SocketAddr, cert: &Path, key: &Path, floor: bool) -> Result<()> {
    syncgc::api::install_crypto_provider();
    let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("loading the serving certificate")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));

    let patch: &'static str = base64::engine::general_purpose::STANDARD
        .encode(
            serde_json::json!([{"op": "add", "path": "/metadata/finalizers",
                            "value": [syncgc::names::SYNCHRONOUS_FINALIZER]}])
            .to_string(),
        )
        .leak();
    let answer = Bytes::from(
        serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4", "allowed": true,
                         "patchType": "JSONPatch", "patch": patch}
        })
        .to_string(),
    );
    let router = if floor {
        Router::new().route(
            "/mutate",
            post(move |review: Bytes| floor_answer(review, patch)),
        )
    } else {
        Router::new().route(
            "/mutate",
            post(move |_review: Bytes| {
                let answer = answer.clone();
                async move { ([(http::header::CONTENT_TYPE, "application/json")], answer) }
            }),
        )
    };

    let listener = tokio::net::TcpListener::bind(addr).await?;
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let (tcp, _) = listener.accept().await?;
        let _ = tcp.set_nodelay(true);
        let (acceptor, builder) = (acceptor.clone(), builder.clone());
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            if let Ok(tls) = acceptor.accept(tcp).await {
                let _ = builder.serve_connection(TokioIo::new(tls), service).await;
            }
        });
    }
}

/// The floor's answer to `review`: its uid (the first in the body: the request's, as the
/// apiserver writes it first), allowed, armed when the opt-in annotation is named anywhere.
async fn floor_answer(review: Bytes, patch: &'static str) -> impl axum::response::IntoResponse {
    let find = |needle: &[u8]| review.windows(needle.len()).position(|w| w == needle);
    let uid = find(br#""uid":""#)
        .map(|at| &review[at + 7..])
        .and_then(|rest| Some(&rest[..rest.iter().position(|&b| b == b'"')?]))
        .unwrap_or_default();
    let uid = String::from_utf8_lossy(uid);
    let arm = find(syncgc::names::SYNCHRONOUS_ANNOTATION.as_bytes()).is_some();
    let patch = if arm {
        format!(r#","patchType":"JSONPatch","patch":"{patch}""#)
    } else {
        String::new()
    };
    (
        [(http::header::CONTENT_TYPE, "application/json")],
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":"{uid}","allowed":true{patch}}}}}"#
        ),
    )
}

/// Starts this server (`floor` or not) as a process of its own at a free port, serving the
/// plane's certificate; returns it and its address once it accepts connections.
pub async fn start(plane: &crate::plane::Plane, floor: bool) -> Result<(Child, SocketAddr)> {
    let addr = crate::plane::free_port()?;
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg(SUBCOMMAND)
        .arg(addr.to_string())
        .arg(plane.certs().join("tls.crt"))
        .arg(plane.certs().join("tls.key"));
    if floor {
        command.arg("floor");
    }
    let mut child = command.spawn()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        if Instant::now() > deadline {
            let _ = child.kill();
            anyhow::bail!("the bare server did not start");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((child, addr))
}
