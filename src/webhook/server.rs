//! The HTTPS server: tokio-rustls in front of hyper (HTTP/1.1 and HTTP/2), with a bound on
//! connections, handshake and header timeouts, and graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use prometheus::IntCounter;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::tls::ReloadingCert;

/// How long the apiserver keeps an idle connection to a webhook (Go's `http.Transport`, as
/// client-go sets it up: 90 s); it closes it itself after that.
pub const CLIENT_IDLE: Duration = Duration::from_secs(90);

/// The bounds that keep slow or numerous clients from hurting the server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more wait in the listen queue.
    pub max_connections: usize,
    /// Time for a client to complete the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time for a client to send a request's headers (HTTP/1.1), counted from the end of the
    /// last response on the connection, so the idle time between requests is part of it. It
    /// must outlast [`CLIENT_IDLE`]: a server that closes an idle connection while the
    /// apiserver sends a review on it fails that call (a POST is not sent again), and the
    /// webhook fails open.
    pub header_timeout: Duration,
    /// Time for in-flight requests to finish after shutdown is asked.
    pub drain_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: CLIENT_IDLE + Duration::from_secs(30),
            drain_timeout: Duration::from_secs(25),
        }
    }
}

/// Serves `router` over TLS on `listener` until `shutdown`, then stops accepting and lets
/// in-flight requests finish (up to `limits.drain_timeout`); counts the connections in
/// `connections`.
pub async fn serve(
    listener: TcpListener,
    cert: Arc<ReloadingCert>,
    router: Router,
    limits: Limits,
    connections: IntCounter,
    shutdown: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(Arc::new(cert.server_config()));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let builder = Arc::new(builder);

    loop {
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let (tcp, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%err, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let builder = builder.clone();
        let router = router.clone();
        let watcher = graceful.watcher();
        let connections = connections.clone();
        let cert = cert.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let tls =
                match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        connections.inc();
                        tls
                    }
                    Ok(Err(err)) => {
                        tracing::debug!(%peer, %err, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let proof = cert.client_of(tls.get_ref().1.peer_certificates().unwrap_or_default());
            let service = TowerToHyperService::new(tower::ServiceExt::map_request(
                router,
                move |mut request: http::Request<hyper::body::Incoming>| {
                    proof.insert_into(request.extensions_mut());
                    request
                },
            ));
            let connection = builder.serve_connection(TokioIo::new(tls), service);
            if let Err(err) = watcher.watch(connection.into_owned()).await {
                tracing::debug!(%peer, %err, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight webhook requests did not finish in time");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_connection_is_kept_longer_than_the_apiserver_keeps_it() {
        assert!(Limits::default().header_timeout > CLIENT_IDLE);
    }
}
