//! A load generator for `/mutate`: a fixed number of HTTPS connections (HTTP/1.1 with
//! keep-alive, as the apiserver calls webhooks), each sending the same review again as soon as
//! the previous answer has arrived; the answers' latencies after a warm-up give throughput and
//! percentiles.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::TlsConnector;

pub struct Load {
    pub requests: usize,
    pub elapsed: Duration,
    /// Every answer's latency, sorted.
    latencies: Vec<Duration>,
}

impl Load {
    /// Several runs as one: their answers together over their time together.
    pub fn merge(loads: Vec<Load>) -> Load {
        let mut latencies: Vec<Duration> = loads.iter().flat_map(|l| l.latencies.clone()).collect();
        latencies.sort_unstable();
        Load {
            requests: latencies.len(),
            elapsed: loads.iter().map(|l| l.elapsed).sum(),
            latencies,
        }
    }

    pub fn per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// The latency `q` (0..=1) of the answers are within, in milliseconds.
    pub fn percentile_ms(&self, q: f64) -> f64 {
        let i = ((self.latencies.len() as f64 * q).ceil() as usize)
            .clamp(1, self.latencies.len().max(1))
            - 1;
        self.latencies
            .get(i)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    }
}

/// Sends `body` to `https://addr/mutate` over `connections` connections for `warmup` plus
/// `duration`, counting the answers of the second part. `ca` is the PEM of the CA that signed
/// the server's certificate.
pub async fn run(
    addr: SocketAddr,
    ca: &[u8],
    body: Bytes,
    connections: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<Load> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca).context("reading the CA")?)?;
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = TlsConnector::from(Arc::new(config));
    let start = Instant::now() + Duration::from_millis(100);
    let measured_from = start + warmup;
    let end = measured_from + duration;
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let connector = connector.clone();
            let body = body.clone();
            tokio::spawn(connection(addr, connector, body, measured_from, end))
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    latencies.sort_unstable();
    Ok(Load {
        requests: latencies.len(),
        elapsed: duration,
        latencies,
    })
}

async fn connection(
    addr: SocketAddr,
    connector: TlsConnector,
    body: Bytes,
    measured_from: Instant,
    end: Instant,
) -> Result<Vec<Duration>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let tls = connector
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(connection);
    let mut latencies = Vec::new();
    loop {
        let sent = Instant::now();
        if sent >= end {
            return Ok(latencies);
        }
        let request = http::Request::post("/mutate?timeout=10s")
            .header(http::header::HOST, addr.to_string())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body.clone()))?;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let answer = response.into_body().collect().await?.to_bytes();
        ensure!(
            status == 200 && contains(&answer, b"\"allowed\":true"),
            "/mutate answered {status}: {}",
            String::from_utf8_lossy(&answer)
        );
        if sent >= measured_from {
            latencies.push(sent.elapsed());
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
