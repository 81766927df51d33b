//! The ceiling for syncgc's webhook stack: axum behind tokio-rustls and hyper, as syncgc
//! serves, answering every POST to `/mutate` with one constant AdmissionReview (the answer
//! syncgc gives the benchmark's review) after reading the body, and doing nothing else. The
//! benchmark runs it as a process of its own, like `syncgc run`: `cluster bare-webhook ADDR
//! CERT KEY`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

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

pub async fn serve(addr: SocketAddr, cert: &Path, key: &Path) -> Result<()> {
    syncgc::api::install_crypto_provider();
    let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("loading the serving certificate")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));

    let patch = base64::engine::general_purpose::STANDARD.encode(
        serde_json::json!([{"op": "add", "path": "/metadata/finalizers",
                            "value": [syncgc::names::SYNCHRONOUS_FINALIZER]}])
        .to_string(),
    );
    let answer = Bytes::from(
        serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4", "allowed": true,
                         "patchType": "JSONPatch", "patch": patch}
        })
        .to_string(),
    );
    let router = Router::new().route(
        "/mutate",
        post(move |_review: Bytes| {
            let answer = answer.clone();
            async move { ([(http::header::CONTENT_TYPE, "application/json")], answer) }
        }),
    );

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
