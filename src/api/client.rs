//! Connecting: the client configuration (a kubeconfig and its context, or in-cluster), the
//! client, and the apiserver's version.

use std::path::Path;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use std::sync::Arc;

use super::{ApiError, Cluster, RateLimiter, clock};
use crate::metrics::Metrics;

/// Installs the process-wide rustls crypto provider; the kube client and the webhook's TLS
/// server both need one. Idempotent.
pub fn install_crypto_provider() {
    // Err only means a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The client configuration: from `kubeconfig` when given, otherwise inferred (KUBECONFIG,
/// `~/.kube/config`, or the in-cluster service account).
pub async fn config(kubeconfig: Option<&Path>) -> Result<Config, ApiError> {
    config_in(kubeconfig, None).await
}

/// [`config`] with the kubeconfig's context `context` instead of its current one.
pub async fn config_in(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<Config, ApiError> {
    install_crypto_provider();
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    match kubeconfig {
        Some(path) => {
            let read_err = |source| ApiError::ReadKubeconfig {
                path: path.display().to_string(),
                source,
            };
            let file = Kubeconfig::read_from(path).map_err(read_err)?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(read_err)
        }
        None if context.is_some() => {
            Config::from_kubeconfig(&options)
                .await
                .map_err(|source| ApiError::ReadKubeconfig {
                    path: "KUBECONFIG or ~/.kube/config".to_owned(),
                    source,
                })
        }
        None => Ok(Config::infer().await?),
    }
}

/// Where a command run from a laptop finds its cluster: `--kubeconfig` and `--context`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Access {
    /// Kubeconfig file; without it, KUBECONFIG, ~/.kube/config or the in-cluster configuration.
    #[arg(long, env = "SYNCGC_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig's context to use instead of its current one.
    #[arg(long)]
    pub context: Option<String>,
}

impl Access {
    pub async fn config(&self) -> Result<Config, ApiError> {
        config_in(self.kubeconfig.as_deref(), self.context.as_deref()).await
    }

    pub async fn client(&self) -> Result<Client, ApiError> {
        client(self.config().await?)
    }

    /// The seam for a command: its requests at `qps` (twice that in a burst), or unlimited
    /// for a command that sends one at a time, each bounded by `timeout`.
    pub async fn cluster(&self, qps: Option<f64>, timeout: Duration) -> anyhow::Result<Cluster> {
        let config = self.config().await?;
        Ok(Cluster::new(
            client(config.clone())?,
            qps.map(|qps| Arc::new(RateLimiter::new(qps, (qps * 2.0) as u32))),
            timeout,
            Metrics::new()?,
        )
        .with_streams(streams(config)?))
    }
}

/// A client for `config`'s single calls: every request on one connection when the apiserver
/// speaks HTTP/2 (as client-go's), else on a pool of HTTP/1.1 connections. Without the client's
/// own retries of 429, 503 and 504 (up to 15, for minutes): every caller here has its own bound
/// and backoff (the work queue, the watches, discovery, the webhook's deadline), and an
/// aggregated API that answers 503 must fail fast, not hold discovery up.
pub fn client(config: Config) -> Result<Client, ApiError> {
    let (builder, connector) = http(&config)?;
    kube_client(&config, builder.build(connector))
}

/// A client for the graph's lists and watches: their requests spread over connections of their
/// own (see [`super::streams`]).
pub fn streams(config: Config) -> Result<Client, ApiError> {
    let (builder, connector) = http(&config)?;
    kube_client(&config, super::streams::Streams::new(builder, connector))
}

type Connector = hyper_timeout::TimeoutConnector<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
>;

/// How `config`'s connections are made: TLS with its credentials, HTTP/2 where the apiserver
/// offers it (a connection's liveness checked by a ping when it has been quiet, as client-go
/// does), else HTTP/1.1.
fn http(config: &Config) -> Result<(hyper_util::client::legacy::Builder, Connector), ApiError> {
    use kube::client::ConfigExt;
    let tls = config.rustls_client_config().map_err(ApiError::Client)?;
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    // As Go's connections: what is written leaves at once. Over HTTP/2 a request is several
    // small frames, and Nagle's algorithm would hold one back until the apiserver's delayed ACK.
    tcp.set_nodelay(true);
    let mut https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls::pki_types::ServerName::try_from(name.clone()).map_err(|err| {
            ApiError::Client(kube::Error::RustlsTls(
                kube::client::RustlsTlsError::InvalidServerName(err),
            ))
        })?;
        https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let mut connector =
        hyper_timeout::TimeoutConnector::new(https.enable_all_versions().wrap_connector(tcp));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let mut builder =
        hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .http1_max_buf_size(READ_BUFFER)
        .http2_keep_alive_interval(PING_AFTER)
        .http2_keep_alive_timeout(PING_TIMEOUT);
    Ok((builder, connector))
}

/// A connection that has been quiet this long is pinged (client-go: `ReadIdleTimeout`)...
const PING_AFTER: Duration = Duration::from_secs(30);
/// ...and closed when the ping is not answered within this (client-go: `PingTimeout`), so that
/// a watch on a connection that died silently fails and resumes instead of hanging.
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// A kube client over `http`, as kube's own but for the read buffer and without retries:
/// every caller retries with its own backoff. syncgc names itself, so that an apiserver's
/// audit log tells its replicas apart.
fn kube_client<S, B>(config: &Config, http: S) -> Result<Client, ApiError>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<tower::BoxError>,
    B: hyper::body::Body<Data = hyper::body::Bytes> + Send + 'static,
    B::Error: Into<tower::BoxError>,
{
    use kube::client::ConfigExt;
    let http = tower::ServiceExt::map_err(http, Into::<tower::BoxError>::into);
    // Every answer's Date header keeps the estimate of the apiserver's clock current.
    let http = tower::ServiceExt::map_response(http, |response: http::Response<B>| {
        if let Some(date) = response.headers().get(http::header::DATE) {
            clock::observe(date);
        }
        response
    });
    let agent = http::HeaderValue::from_str(&user_agent())
        .map_err(|err| ApiError::Client(kube::Error::HttpError(http::Error::from(err))))?;
    let service = tower::ServiceBuilder::new()
        .map_request(move |mut request: http::Request<kube::client::Body>| {
            request
                .headers_mut()
                .entry(http::header::USER_AGENT)
                .or_insert_with(|| agent.clone());
            request
        })
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(ApiError::Client)?)
        .layer(config.extra_headers_layer().map_err(ApiError::Client)?)
        .service(http);
    Ok(Client::new(service, config.default_namespace.clone()))
}

/// Which replica this process is: the pod's name in a cluster (`POD_NAME`), else the host's
/// name and the process id. The leader election's identity, and part of the User-Agent.
pub fn replica() -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "syncgc".to_owned());
        format!("{host}-{}", std::process::id())
    })
}

tokio::task_local! {
    /// Why the requests of the task are sent: added to their User-Agent.
    static CAUSE: String;
}

/// Runs `call` with the User-Agent of its cascade's requests (DELETEs and JSON patches, see
/// [`name_cause`]) naming `cause` after syncgc's own
/// (`syncgc/VERSION (REPLICA) CAUSE`): what the apiserver's audit log records of a request,
/// besides its user. Characters a header cannot carry become `?`.
pub async fn caused_by<T>(cause: &str, call: impl Future<Output = T>) -> T {
    let cause: String = cause
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    CAUSE.scope(cause, call).await
}

/// Names the cause the task runs for (see [`caused_by`]) in `request`'s User-Agent. Called
/// where a request is built, in the caller's task: the client sends it from a task of its own.
pub fn name_cause<B>(request: &mut http::Request<B>) {
    let agent = CAUSE
        .try_with(|cause| http::HeaderValue::from_str(&format!("{} {cause}", user_agent())).ok());
    if let Ok(Some(agent)) = agent {
        request
            .headers_mut()
            .insert(http::header::USER_AGENT, agent);
    }
}

/// What syncgc sends as its User-Agent: `syncgc/VERSION (REPLICA)`.
pub fn user_agent() -> String {
    format!("syncgc/{} ({})", env!("CARGO_PKG_VERSION"), replica())
}

/// The most an HTTP/1.1 connection's read buffer grows to. Over HTTP/1.1 (an apiserver or a
/// proxy without HTTP/2) each watch holds a connection of its own, and hyper's default (about
/// 400 KiB) stays allocated on every connection that once read a large answer: with hundreds
/// of kinds, each listed once in full, hundreds of MiB for buffers that are idle.
const READ_BUFFER: usize = 16 * 1024;

/// A Kubernetes version: its major and minor numbers, which say what the apiserver serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    pub major: u32,
    pub minor: u32,
}

impl std::str::FromStr for ServerVersion {
    type Err = String;

    /// `1.30`, `v1.20.2`, `v1.28.3-eks-4f4795d`, `1.29+`: major and minor, the rest ignored.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a Kubernetes version such as 1.30 or v1.20.2");
        let mut parts = s.trim_start_matches('v').split('.');
        let number = |part: Option<&str>| -> Result<u32, String> {
            let digits: String = part
                .ok_or_else(bad)?
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().map_err(|_| bad())
        };
        Ok(Self {
            major: number(parts.next())?,
            minor: number(parts.next())?,
        })
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Asks the apiserver for its version: the cheapest proof that it answers and trusts us.
pub async fn server_version(client: &Client) -> Result<String, ApiError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(ApiError::Version)?;
    Ok(info.git_version)
}

/// A plain-HTTP GET (a replica's metrics port), within 5 seconds.
pub async fn get_text(url: &str) -> anyhow::Result<String> {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<hyper::body::Bytes>>();
    let response = tokio::time::timeout(Duration::from_secs(5), client.get(url.parse()?)).await??;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    anyhow::ensure!(status.is_success(), "HTTP {status}");
    Ok(String::from_utf8_lossy(&body).into_owned())
}
