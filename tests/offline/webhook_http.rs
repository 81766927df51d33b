//! The webhook's HTTPS server on its own: the wire format, HTTP/1.1 and HTTP/2, bad input,
//! limits, the apiserver's timeout, certificate rotation and graceful shutdown. No cluster is
//! needed: the API client points at addresses where no apiserver answers.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use syncgc::certs::{DevCerts, SubjectAltNames};
use syncgc::webhook::admit::Policy;
use syncgc::webhook::server::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use support::webhook::{Served, serve};

/// A client for an address where nothing listens: side effects fail at once.
fn unreachable_client() -> kube::Client {
    syncgc::api::install_crypto_provider();
    let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

/// A client for a server that accepts connections and never answers: side effects hang.
async fn hanging_client() -> kube::Client {
    hanging_client_reached().await.0
}

/// [`hanging_client`], and how many connections its apiserver has accepted.
async fn hanging_client_reached() -> (kube::Client, tokio::sync::watch::Receiver<usize>) {
    syncgc::api::install_crypto_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted, reached) = tokio::sync::watch::channel(0);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
            accepted.send_replace(held.len());
        }
    });
    let mut config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    config.read_timeout = None;
    (kube::Client::try_from(config).unwrap(), reached)
}

async fn serve_default() -> Served {
    serve(unreachable_client(), Policy::default(), Limits::default()).await
}

fn connector(ca: &std::path::Path, alpn: &[&[u8]]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(ca).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

async fn connect(served: &Served, alpn: &[&[u8]]) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(served.addr).await.unwrap();
    connector(&served.ca_file(), alpn)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// Sends raw bytes on a new HTTP/1.1 connection and returns the status and body.
async fn raw(served: &Served, request: Vec<u8>) -> (u16, String) {
    let mut tls = connect(served, &[b"http/1.1"]).await;
    let writer = tokio::spawn(async move {
        let _ = tls.write_all(&request).await;
        let mut response = Vec::new();
        let _ = tls.read_to_end(&mut response).await;
        response
    });
    let response = writer.await.unwrap();
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_owned())
}

fn post(path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

async fn review(served: &Served, body: &Value) -> Value {
    let (status, text) = raw(
        served,
        post(
            "/mutate?timeout=10s",
            "application/json",
            &serde_json::to_vec(body).unwrap(),
        ),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// An AdmissionReview from `tests/fixtures/admission`.
fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/admission/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The CREATE of an opted-in ConfigMap, in review version `version` with request `uid`.
fn create_review(version: &str, uid: &str) -> Value {
    let mut review = fixture("create-opted-in.json");
    review["apiVersion"] = version.into();
    review["request"]["uid"] = uid.into();
    review
}

/// The DELETE of an armed ConfigMap whose annotation asks for foreground propagation.
fn armed_delete_review() -> Value {
    fixture("delete-armed.json")
}

fn assert_arms(answer: &Value, version: &str, uid: &str) {
    assert_eq!(answer["apiVersion"], version);
    assert_eq!(answer["response"]["uid"], uid);
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(answer["response"]["patchType"], "JSONPatch");
}

#[tokio::test]
async fn answers_over_http1_in_the_version_asked() {
    let served = serve_default().await;
    for (version, uid) in [
        ("admission.k8s.io/v1", "a"),
        ("admission.k8s.io/v1beta1", "b"),
    ] {
        let answer = review(&served, &create_review(version, uid)).await;
        assert_arms(&answer, version, uid);
    }
    let counted = served
        .metrics
        .webhook_requests
        .with_label_values(&["CREATE", "arm"])
        .get();
    assert_eq!(counted, 2);
    assert_eq!(
        served.metrics.webhook_connections.get(),
        2,
        "a connection for each review sent on a connection of its own"
    );
}

#[tokio::test]
async fn answers_over_http2() {
    let served = serve_default().await;
    let tls = connect(&served, &[b"h2"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    for uid in ["h2-1", "h2-2"] {
        let body = serde_json::to_vec(&create_review("admission.k8s.io/v1", uid)).unwrap();
        let request = http::Request::post("https://localhost/mutate?timeout=5s")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        assert_arms(
            &serde_json::from_slice(&bytes).unwrap(),
            "admission.k8s.io/v1",
            uid,
        );
    }
    assert_eq!(
        served.metrics.webhook_connections.get(),
        1,
        "reviews on a kept connection count it once"
    );
}

#[tokio::test]
async fn bad_input_gets_a_precise_answer_and_the_server_keeps_serving() {
    let served = serve_default().await;
    let no_request = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#;
    let no_uid = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}"#;
    let wrong_version = br#"{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview"}"#;
    let string_object = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","object":"nope"}}"#;
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "malformed JSON",
            post("/mutate", "application/json", b"{\"apiVersion\":"),
            200,
            "EOF",
        ),
        (
            "no request",
            post("/mutate", "application/json", no_request),
            200,
            "has no request",
        ),
        (
            "no uid",
            post("/mutate", "application/json", no_uid),
            200,
            "request has no uid",
        ),
        (
            "wrong apiVersion",
            post("/mutate", "application/json", wrong_version),
            200,
            "admission.k8s.io/v2",
        ),
        (
            "non-object object",
            post("/mutate", "application/json", string_object),
            200,
            "at request.object",
        ),
        (
            "non-UTF-8",
            post(
                "/mutate",
                "application/json",
                b"{\"apiVersion\":\"\xff\xfe\"}",
            ),
            200,
            "invalid unicode",
        ),
        (
            "wrong content type",
            post("/mutate", "text/plain", b"{}"),
            415,
            "application/json",
        ),
        (
            "wrong method",
            b"GET /mutate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            405,
            "",
        ),
        (
            "unknown path",
            post("/other", "application/json", b"{}"),
            404,
            "",
        ),
        (
            "oversized",
            format!(
                "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{{",
                64 * 1024 * 1024
            )
            .into_bytes(),
            413,
            "exceeds",
        ),
    ];
    for (what, request, status, needle) in cases {
        let (got, body) = raw(&served, request).await;
        assert_eq!(got, status, "{what}: {body}");
        assert!(body.contains(needle), "{what}: {body}");
        if status == 200 {
            let answer: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(answer["response"]["allowed"], false, "{what}");
            assert_eq!(answer["response"]["status"]["code"], 400, "{what}");
        }
    }
    let answer = review(&served, &create_review("admission.k8s.io/v1", "after")).await;
    assert_arms(&answer, "admission.k8s.io/v1", "after");
}

#[tokio::test]
async fn an_oversized_body_that_is_really_sent_is_refused() {
    let served = serve_default().await;
    let mut big =
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","pad":""#.to_vec();
    big.resize(8 * 1024 * 1024, b'x');
    big.extend_from_slice(b"\"}");
    let (status, body) = raw(&served, post("/mutate", "application/json", &big)).await;
    assert_eq!(status, 413, "{body}");
}

/// Bodies held at once are bounded across connections: with the room taken by bodies that
/// never finish arriving, one more is refused with a `429` Status once its body timeout
/// passes; when they go, reviews are answered again.
#[tokio::test]
async fn bodies_held_at_once_are_bounded() {
    use syncgc::webhook::handler::{MAX_BODY_BYTES, MAX_IN_FLIGHT_BYTES};
    let served = serve_default().await;
    let mut held = Vec::new();
    for _ in 0..MAX_IN_FLIGHT_BYTES / MAX_BODY_BYTES {
        let mut tls = connect(&served, &[b"http/1.1"]).await;
        tls.write_all(
            format!(
                "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Content-Length: {MAX_BODY_BYTES}\r\n\r\n{{"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        held.push(tls);
    }
    // Each declared the largest body: the room is taken once the server has read them all.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = raw(
        &served,
        post(
            "/mutate",
            "application/json",
            &serde_json::to_vec(&create_review("admission.k8s.io/v1", "late")).unwrap(),
        ),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&status["kind"], &status["reason"], &status["code"]),
        (&json!("Status"), &json!("TooManyRequests"), &json!(429)),
        "{body}"
    );
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answer = review(&served, &create_review("admission.k8s.io/v1", "after")).await;
    assert_arms(&answer, "admission.k8s.io/v1", "after");
}

#[tokio::test]
async fn slow_clients_are_cut_off() {
    let limits = Limits {
        header_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let served = serve(unreachable_client(), Policy::default(), limits).await;

    // Headers that never end: the connection is closed.
    let mut tls = connect(&served, &[b"http/1.1"]).await;
    tls.write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut rest))
        .await
        .expect("the server closes a connection whose headers never end");
    assert!(started.elapsed() < Duration::from_secs(3));

    // A body that never arrives: 408.
    let mut tls = connect(&served, &[b"http/1.1"]).await;
    tls.write_all(
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 1000\r\n\r\n{\"apiVersion\"",
    )
    .await
    .unwrap();
    let mut response = vec![0; 64];
    let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut response))
        .await
        .expect("an answer to a body that never arrives")
        .unwrap();
    let text = String::from_utf8_lossy(&response[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
}

#[tokio::test]
async fn connections_are_bounded() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let served = serve(unreachable_client(), Policy::default(), limits).await;
    let first = connect(&served, &[b"http/1.1"]).await;
    let _second = connect(&served, &[b"http/1.1"]).await;

    let tcp = TcpStream::connect(served.addr).await.unwrap();
    let third = tokio::spawn(
        connector(&served.ca_file(), &[b"http/1.1"])
            .connect(ServerName::try_from("localhost").unwrap(), tcp),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !third.is_finished(),
        "a third connection is served beyond the bound"
    );
    drop(first);
    tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("the third connection is served once a slot frees")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn answers_before_the_apiservers_timeout_when_the_api_hangs() {
    let served = serve(hanging_client().await, Policy::default(), Limits::default()).await;
    let body = serde_json::to_vec(&armed_delete_review()).unwrap();
    let started = Instant::now();
    let (status, text) = raw(
        &served,
        post("/mutate?timeout=1s", "application/json", &body),
    )
    .await;
    let elapsed = started.elapsed();
    assert_eq!(status, 200, "{text}");
    assert!(
        elapsed < Duration::from_secs(1),
        "answered after {elapsed:?}"
    );
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["response"]["allowed"], true);
    assert!(answer["response"].get("patch").is_none());
    let warning = answer["response"]["warnings"][0].as_str().unwrap();
    assert!(warning.contains("deadline"), "{warning}");
}

#[tokio::test]
async fn a_failed_side_effect_lets_the_delete_through_with_a_warning() {
    let served = serve_default().await;
    let answer = review(&served, &armed_delete_review()).await;
    assert_eq!(answer["response"]["allowed"], true);
    let warning = answer["response"]["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("could not add foregroundDeletion"),
        "{warning}"
    );
    let errors = served
        .metrics
        .webhook_side_effects
        .with_label_values(&["error"])
        .get();
    assert_eq!(errors, 1);
}

#[tokio::test]
async fn a_rotated_certificate_is_served_to_new_connections() {
    let served = serve_default().await;
    tokio::spawn(served.cert.clone().watch(
        Duration::from_millis(100),
        served.shutdown.clone(),
        |_| {},
    ));
    let old_ca = std::fs::read(served.ca_file()).unwrap();
    DevCerts::generate(&SubjectAltNames {
        dns: vec!["localhost".into()],
        ips: vec![],
    })
    .unwrap()
    .write(served.certs_dir.path(), true)
    .unwrap();
    assert_ne!(std::fs::read(served.ca_file()).unwrap(), old_ca);

    let new_connector = connector(&served.ca_file(), &[b"http/1.1"]);
    support::eventually(
        "a new handshake sees the new certificate",
        Duration::from_secs(10),
        || {
            let new_connector = new_connector.clone();
            async move {
                let tcp = TcpStream::connect(served.addr).await.unwrap();
                new_connector
                    .connect(ServerName::try_from("localhost").unwrap(), tcp)
                    .await
                    .ok()
                    .map(|_| ())
            }
        },
    )
    .await;
}

#[tokio::test]
async fn shutdown_finishes_in_flight_reviews_and_stops_accepting() {
    let (client, mut reached) = hanging_client_reached().await;
    let served = serve(client, Policy::default(), Limits::default()).await;
    let body = serde_json::to_vec(&armed_delete_review()).unwrap();
    let request = post("/mutate?timeout=2s", "application/json", &body);
    let mut tls = connect(&served, &[b"http/1.1"]).await;
    tls.write_all(&request).await.unwrap();
    // In flight: the review's call has reached the apiserver.
    reached.wait_for(|n| *n > 0).await.unwrap();
    served.shutdown.cancel();

    let mut response = Vec::new();
    tls.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    tokio::time::timeout(Duration::from_secs(5), served.task)
        .await
        .expect("the server stops after draining")
        .unwrap();
    assert!(TcpStream::connect(served.addr).await.is_err());
}
