//! `syncgc certs` writes a CA and a serving certificate that a TLS client trusting only that CA
//! accepts, for exactly the requested names.

use crate::support;

use std::net::IpAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

fn syncgc_certs(dir: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_syncgc"))
        .arg("certs")
        .arg("--out")
        .arg(dir)
        .args(extra)
        .output()
        .expect("running syncgc certs")
}

fn pem(dir: &Path, file: &str) -> Pem {
    let bytes = std::fs::read(dir.join(file)).unwrap();
    Pem::iter_from_buffer(&bytes).next().unwrap().unwrap()
}

const SANS: [&str; 8] = [
    "--dns",
    "localhost",
    "--dns",
    "syncgc.syncgc-system.svc",
    "--ip",
    "127.0.0.1",
    "--ip",
    "::1",
];

#[test]
fn the_serving_certificate_chains_to_the_ca_with_exactly_the_requested_sans() {
    let dir = tempfile::tempdir().unwrap();
    let out = syncgc_certs(dir.path(), &SANS);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let ca_pem = pem(dir.path(), "ca.crt");
    let ca = ca_pem.parse_x509().unwrap();
    let tls_pem = pem(dir.path(), "tls.crt");
    let tls = tls_pem.parse_x509().unwrap();

    assert!(ca.is_ca());
    assert!(!tls.is_ca());
    assert_eq!(tls.issuer(), ca.subject());
    tls.verify_signature(Some(ca.public_key()))
        .expect("the serving certificate is signed by the CA");
    ca.verify_signature(None).expect("the CA is self-signed");

    let sans = tls
        .subject_alternative_name()
        .unwrap()
        .expect("a SAN extension");
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    for name in &sans.value.general_names {
        match name {
            GeneralName::DNSName(name) => dns.push(name.to_string()),
            GeneralName::IPAddress(bytes) => ips.push(match bytes.len() {
                4 => IpAddr::from(<[u8; 4]>::try_from(*bytes).unwrap()),
                16 => IpAddr::from(<[u8; 16]>::try_from(*bytes).unwrap()),
                n => panic!("an IP SAN of {n} bytes"),
            }),
            other => panic!("unexpected SAN {other:?}"),
        }
    }
    assert_eq!(dns, ["localhost", "syncgc.syncgc-system.svc"]);
    assert_eq!(
        ips,
        [
            "127.0.0.1".parse::<IpAddr>().unwrap(),
            "::1".parse().unwrap()
        ]
    );
}

#[test]
fn keys_are_private_and_nothing_is_overwritten_without_force() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    assert!(syncgc_certs(dir.path(), &SANS).status.success());
    for key in ["ca.key", "tls.key"] {
        let mode = std::fs::metadata(dir.path().join(key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    let before = std::fs::read(dir.path().join("tls.crt")).unwrap();

    let refused = syncgc_certs(dir.path(), &SANS);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read(dir.path().join("tls.crt")).unwrap(), before);

    let forced = syncgc_certs(dir.path(), &[&SANS[..], &["--force"]].concat());
    assert!(forced.status.success());
    assert_ne!(std::fs::read(dir.path().join("tls.crt")).unwrap(), before);
}

#[test]
fn a_certificate_without_names_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = syncgc_certs(dir.path(), &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("subject alternative name"));
    assert!(!dir.path().join("tls.key").exists());
}

/// Serves one TLS connection with `dir`'s serving certificate and returns what a client that
/// trusts only `trusted_ca` gets when it connects as `server_name`.
async fn handshake(dir: &Path, trusted_ca: &Path, server_name: &str) -> Result<String, String> {
    syncgc::api::install_crypto_provider();
    let chain = CertificateDer::pem_file_iter(dir.join("tls.crt"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("tls.key")).unwrap();
    let server = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(server));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        if let Ok(mut tls) = acceptor.accept(tcp).await {
            let mut buf = [0; 4];
            tls.read_exact(&mut buf).await.unwrap();
            tls.write_all(b"pong").await.unwrap();
            tls.shutdown().await.unwrap();
        }
    });

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(trusted_ca.join("ca.crt")).unwrap())
        .unwrap();
    let client = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = TlsConnector::from(Arc::new(client));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(server_name.to_owned()).unwrap();
    let result = async {
        let mut tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        tls.write_all(b"ping").await.map_err(|e| e.to_string())?;
        let mut reply = String::new();
        tls.read_to_string(&mut reply)
            .await
            .map_err(|e| e.to_string())?;
        Ok(reply)
    }
    .await;
    serve.await.unwrap();
    result
}

#[tokio::test]
async fn a_client_trusting_only_the_ca_completes_a_handshake() {
    let dir = tempfile::tempdir().unwrap();
    assert!(syncgc_certs(dir.path(), &SANS).status.success());
    for name in ["localhost", "syncgc.syncgc-system.svc", "127.0.0.1"] {
        assert_eq!(
            handshake(dir.path(), dir.path(), name).await,
            Ok("pong".into()),
            "{name}"
        );
    }

    let err = handshake(dir.path(), dir.path(), "elsewhere.example")
        .await
        .unwrap_err();
    assert!(err.contains("not valid for name"), "{err}");

    let other = tempfile::tempdir().unwrap();
    assert!(syncgc_certs(other.path(), &SANS).status.success());
    let err = handshake(dir.path(), other.path(), "localhost")
        .await
        .unwrap_err();
    let lower = err.to_lowercase().replace(' ', "");
    assert!(
        lower.contains("unknownissuer") || lower.contains("badsignature"),
        "{err}"
    );
}

/// A serving certificate that cannot be read stops `syncgc run` with an error that names the
/// file, exit code 1, never a panic.
#[test]
fn syncgc_run_names_a_certificate_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.crt");
    std::fs::write(&empty, b"").unwrap();
    let missing = dir.path().join("missing.crt");
    for (cert, says) in [(&missing, "reading "), (&empty, "holds no PEM certificate")] {
        let out = Command::new(env!("CARGO_BIN_EXE_syncgc"))
            .args([
                "run",
                "--metrics-addr",
                "127.0.0.1:0",
                "--webhook-addr",
                "127.0.0.1:0",
            ])
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(cert)
            .env("SYNCGC_KUBECONFIG", support::kubeconfig_path())
            .output()
            .expect("running syncgc run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(stderr.contains(&*cert.to_string_lossy()), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
