//! The webhook's serving certificate, swapped while the listener runs: reloaded when its files
//! change (cert-manager rotates them), or set from the Secret syncgc keeps (`--tls-secret`). A
//! new pair that does not load is logged and counted, and the old one kept. And the client
//! certificates the port checks: the apiserver's for admission (`--webhook-client-ca`), and
//! the aggregation layer's front proxy's (its CA set while the listener runs).

use parking_lot::{Mutex, RwLock};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// (The cause is said in the message, not chained, so that it is said once.)
    #[error("reading {}: {error}", .path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{0} holds no PEM certificate")]
    NoCertificate(String),
    #[error("parsing {origin}: {error}")]
    Pem {
        origin: String,
        error: rustls::pki_types::pem::Error,
    },
    #[error("the key does not fit the certificate: {0}")]
    Key(#[from] rustls::Error),
    #[error("the client CA {0}: {1}")]
    ClientCa(String, String),
}

/// Whether the client of a connection presented a certificate its server's client CA signed
/// (see [`ReloadingCert::with_client_ca`]): in each request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientCertified(pub bool);

/// The common name of the certificate the client of a connection presented, when the front
/// proxy's CA ([`ReloadingCert::set_front_proxy_ca`]) signed it: in each request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontProxy(pub Option<String>);

/// Whether the client of a connection presented the certificate this server serves with, and
/// proved it holds its key: another replica of syncgc (they share the serving pair), asking
/// for what its own record lacks ([`crate::aggregated::peers`]). In each request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub bool);

/// What a connection's client certificate proves ([`ReloadingCert::client_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientProof {
    pub certified: ClientCertified,
    pub front_proxy: FrontProxy,
    pub peer: Peer,
}

impl ClientProof {
    /// Puts each proof in `extensions`, where a request's handler asks for it.
    pub fn insert_into(&self, extensions: &mut http::Extensions) {
        extensions.insert(self.certified);
        extensions.insert(self.front_proxy.clone());
        extensions.insert(self.peer);
    }
}

type Verifier = Arc<dyn ClientCertVerifier>;

/// The CAs client certificates are checked against. The handshake takes any certificate
/// whose key the client proves it holds (or none), so that a client presenting one of
/// another CA — the apiserver's admission client certificate, to a syncgc not told its CA —
/// is served like one that presents none; what the certificate proves is checked for the
/// connection against each CA ([`ReloadingCert::client_of`]), and each request that needs it
/// asks [`ClientCertified`] or [`FrontProxy`].
#[derive(Default)]
struct Clients {
    admission: Option<Verifier>,
    front_proxy: RwLock<Option<Verifier>>,
}

impl fmt::Debug for Clients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clients")
            .field("admission", &self.admission.is_some())
            .field("front_proxy", &self.front_proxy.read().is_some())
            .finish()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// A verifier of client certificates signed by the CA certificates in `pem` (from `origin`).
fn verifier(pem: &[u8], origin: &str) -> Result<Verifier, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|error| TlsError::Pem {
            origin: origin.to_owned(),
            error,
        })?;
        roots.add(cert)?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoCertificate(origin.to_owned()));
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|err| TlsError::ClientCa(origin.to_owned(), err.to_string()))
}

fn verifies(verifier: &Verifier, chain: &[CertificateDer<'_>]) -> bool {
    let Some((leaf, intermediates)) = chain.split_first() else {
        return false;
    };
    verifier
        .verify_client_cert(leaf, intermediates, UnixTime::now())
        .is_ok()
}

impl Clients {
    fn front_proxy(&self) -> Option<Verifier> {
        self.front_proxy.read().clone()
    }
}

impl ClientCertVerifier for Clients {
    /// Always: a replica's peers present the serving certificate ([`Peer`]).
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    /// No hints: a client picks its certificate without them (the apiserver's transports give
    /// theirs whatever the server names).
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    /// Any certificate: what it proves is checked per connection, against each CA.
    fn verify_client_cert(
        &self,
        _leaf: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The common name of `leaf`, a DER certificate.
fn common_name(leaf: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).ok()?;
    let name = cert.subject().iter_common_name().next()?;
    name.as_str().ok().map(str::to_owned)
}

/// The bytes of a certificate and key pair, as read from disk.
#[derive(Clone, PartialEq, Eq)]
struct Pair {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// A certificate resolver whose pair can be swapped while the listener runs. Until it has a
/// pair, TLS handshakes fail.
pub struct ReloadingCert {
    /// The files it reloads from, if any.
    files: Option<(PathBuf, PathBuf)>,
    /// Checks the certificates clients present (optional for them: a request that needs one
    /// asks [`ClientCertified`] or [`FrontProxy`]).
    clients: Arc<Clients>,
    current: RwLock<Option<Arc<CertifiedKey>>>,
    loaded: Mutex<Option<Pair>>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// Whether a reload found new files, and whether they loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    Unchanged,
    Reloaded,
}

impl ReloadingCert {
    /// Loads the pair; fails when it does not load, since there is nothing to serve with.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Self, TlsError> {
        let this = Self {
            files: Some((cert_path.to_owned(), key_path.to_owned())),
            ..Self::empty()
        };
        this.reload()?;
        Ok(this)
    }

    /// No pair yet: [`ReloadingCert::set`] gives it one.
    pub fn empty() -> Self {
        Self {
            files: None,
            clients: Arc::default(),
            current: RwLock::new(None),
            loaded: Mutex::new(None),
        }
    }

    /// Asks clients for a certificate, checked against the CA certificates (PEM) in
    /// `ca_path`; a client that presents none is served too, marked not certified.
    pub fn with_client_ca(mut self, ca_path: &Path) -> Result<Self, TlsError> {
        let pem = std::fs::read(ca_path).map_err(|error| TlsError::Read {
            path: ca_path.to_owned(),
            error,
        })?;
        let admission = verifier(&pem, &ca_path.display().to_string())?;
        self.clients = Arc::new(Clients {
            admission: Some(admission),
            front_proxy: RwLock::default(),
        });
        Ok(self)
    }

    /// Checks client certificates against the front proxy's CA certificates `pem` too (from
    /// `origin`), in place of those set before; `None` stops.
    pub fn set_front_proxy_ca(&self, pem: Option<&[u8]>, origin: &str) -> Result<(), TlsError> {
        let verifier = pem.map(|pem| verifier(pem, origin)).transpose()?;
        *self.clients.front_proxy.write() = verifier;
        Ok(())
    }

    /// What a connection's client certificate chain (as presented, leaf first) proves.
    pub fn client_of(&self, chain: &[CertificateDer<'_>]) -> ClientProof {
        let admission = self.clients.admission.as_ref();
        let certified = ClientCertified(admission.is_some_and(|v| verifies(v, chain)));
        let front_proxy = self
            .clients
            .front_proxy()
            .filter(|v| verifies(v, chain))
            .and_then(|_| common_name(chain.first()?));
        ClientProof {
            certified,
            front_proxy: FrontProxy(front_proxy),
            peer: Peer(chain.first().is_some_and(|leaf| self.serves(leaf))),
        }
    }

    /// Whether `leaf` is the certificate served now.
    fn serves(&self, leaf: &CertificateDer<'_>) -> bool {
        self.current
            .read()
            .as_ref()
            .and_then(|key| key.cert.first())
            .is_some_and(|served| served == leaf)
    }

    /// A rustls client configuration for a replica's peers: it presents the pair served now,
    /// and trusts a server only when it serves that very certificate (the replicas of one
    /// install share their pair; a peer is called at its Pod's address, which the certificate
    /// does not name).
    pub fn peer_client_config(self: &Arc<Self>) -> rustls::ClientConfig {
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SamePair(self.clone())))
            .with_client_cert_resolver(Arc::new(SamePair(self.clone())))
    }

    /// Whether it has a pair to serve.
    pub fn is_loaded(&self) -> bool {
        self.current.read().is_some()
    }

    /// Reads the files again and swaps the pair in when it changed and loads.
    pub fn reload(&self) -> Result<Reload, TlsError> {
        let Some((cert_path, key_path)) = &self.files else {
            return Ok(Reload::Unchanged);
        };
        let read = |path: &Path| {
            std::fs::read(path).map_err(|error| TlsError::Read {
                path: path.to_owned(),
                error,
            })
        };
        let (cert, key) = (read(cert_path)?, read(key_path)?);
        self.set(
            &cert,
            &key,
            &cert_path.display().to_string(),
            &key_path.display().to_string(),
        )
    }

    /// Swaps in the PEM pair `cert` and `key` (from `cert_origin` and `key_origin`, for
    /// errors) when it differs from the one served and loads.
    pub fn set(
        &self,
        cert: &[u8],
        key: &[u8],
        cert_origin: &str,
        key_origin: &str,
    ) -> Result<Reload, TlsError> {
        let pair = Pair {
            cert: cert.to_vec(),
            key: key.to_vec(),
        };
        let mut loaded = self.loaded.lock();
        if loaded.as_ref() == Some(&pair) {
            return Ok(Reload::Unchanged);
        }
        let certified = certified_key(cert_origin, key_origin, &pair)?;
        *self.current.write() = Some(Arc::new(certified));
        *loaded = Some(pair);
        Ok(Reload::Reloaded)
    }

    /// A rustls server configuration that serves the current pair, offering HTTP/2 and
    /// HTTP/1.1.
    pub fn server_config(self: &Arc<Self>) -> rustls::ServerConfig {
        let mut config = rustls::ServerConfig::builder()
            .with_client_cert_verifier(self.clients.clone())
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config
    }

    /// Checks the files every `interval` until `shutdown`, reporting each outcome to `report`.
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        shutdown: CancellationToken,
        report: impl Fn(&Result<Reload, TlsError>),
    ) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let this = self.clone();
            let outcome = tokio::task::spawn_blocking(move || this.reload())
                .await
                .unwrap_or(Ok(Reload::Unchanged));
            match &outcome {
                Ok(Reload::Reloaded) => {
                    tracing::info!(files = ?self.files, "serving certificate reloaded");
                }
                Ok(Reload::Unchanged) => {}
                Err(err) => {
                    tracing::warn!(%err, "new serving certificate not loaded; keeping the old one")
                }
            }
            report(&outcome);
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().clone()
    }
}

/// A peer's side of [`ReloadingCert::peer_client_config`]: the pair served now, both ways.
#[derive(Debug)]
struct SamePair(Arc<ReloadingCert>);

impl rustls::client::ResolvesClientCert for SamePair {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.0.current.read().clone()
    }

    fn has_certs(&self) -> bool {
        self.0.is_loaded()
    }
}

impl rustls::client::danger::ServerCertVerifier for SamePair {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if self.0.serves(end_entity) {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "not a replica of this syncgc: it serves another certificate".to_owned(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.clients.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.clients.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.clients.supported_verify_schemes()
    }
}

fn certified_key(
    cert_origin: &str,
    key_origin: &str,
    pair: &Pair,
) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(&pair.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::Pem {
            origin: cert_origin.to_owned(),
            error,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert_origin.to_owned()));
    }
    let key = PrivateKeyDer::from_pem_slice(&pair.key).map_err(|error| TlsError::Pem {
        origin: key_origin.to_owned(),
        error,
    })?;
    Ok(CertifiedKey::from_der(chain, key, &provider())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::{DevCerts, SubjectAltNames};

    fn write(dir: &Path) -> DevCerts {
        let certs = DevCerts::generate(&SubjectAltNames {
            dns: vec!["localhost".into()],
            ips: vec![],
        })
        .unwrap();
        certs.write(dir, true).unwrap();
        certs
    }

    fn serving(cert: &ReloadingCert) -> Vec<u8> {
        cert.current.read().as_ref().unwrap().cert[0].to_vec()
    }

    #[test]
    fn reloads_a_new_pair_and_keeps_the_old_one_when_the_new_one_is_broken() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path());
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let cert = ReloadingCert::load(&crt, &key).unwrap();
        let first = serving(&cert);
        assert_eq!(cert.reload().unwrap(), Reload::Unchanged);

        write(dir.path());
        assert_eq!(cert.reload().unwrap(), Reload::Reloaded);
        let second = serving(&cert);
        assert_ne!(first, second);

        // A key that does not match the certificate.
        let other = tempfile::tempdir().unwrap();
        let stranger = write(other.path());
        std::fs::write(&key, stranger.tls_key).unwrap();
        assert!(matches!(cert.reload(), Err(TlsError::Key(_))));
        std::fs::write(&crt, "not a certificate").unwrap();
        assert!(cert.reload().is_err());
        std::fs::remove_file(&crt).unwrap();
        assert!(matches!(cert.reload(), Err(TlsError::Read { .. })));
        assert_eq!(serving(&cert), second);
    }

    /// A CA (its PEM) and a client certificate (DER) it signed, named `name`.
    fn client_of_ca(name: &str) -> (String, CertificateDer<'static>) {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "a CA");
        let ca_key = KeyPair::generate().unwrap();
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca, ca_key);
        let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
        client.distinguished_name.push(DnType::CommonName, name);
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = client
            .signed_by(&KeyPair::generate().unwrap(), &issuer)
            .unwrap();
        (ca_pem, cert.der().clone())
    }

    #[test]
    fn a_client_certificate_proves_what_its_ca_vouches_for() {
        let (front_ca, proxy) = client_of_ca("front-proxy-client");
        let (_, stranger) = client_of_ca("front-proxy-client");
        let cert = ReloadingCert::empty();
        let front_proxy = |chain: &[CertificateDer<'_>]| cert.client_of(chain).front_proxy;
        assert_eq!(
            cert.client_of(std::slice::from_ref(&proxy)),
            ClientProof {
                certified: ClientCertified(false),
                front_proxy: FrontProxy(None),
                peer: Peer(false)
            },
            "no front proxy CA yet"
        );
        cert.set_front_proxy_ca(Some(front_ca.as_bytes()), "test")
            .unwrap();
        assert_eq!(
            front_proxy(std::slice::from_ref(&proxy)),
            FrontProxy(Some("front-proxy-client".into()))
        );
        // The same name from another CA proves nothing, and neither does no certificate.
        assert_eq!(front_proxy(&[stranger]), FrontProxy(None));
        assert_eq!(front_proxy(&[]), FrontProxy(None));
        cert.set_front_proxy_ca(None, "test").unwrap();
        assert_eq!(front_proxy(std::slice::from_ref(&proxy)), FrontProxy(None));
    }

    #[test]
    fn a_peer_is_a_client_that_presents_the_certificate_served() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path());
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let cert = ReloadingCert::load(&crt, &key).unwrap();
        let served = CertificateDer::from(serving(&cert));
        assert_eq!(
            cert.client_of(std::slice::from_ref(&served)).peer,
            Peer(true)
        );
        let (_, other) = client_of_ca("syncgc");
        assert_eq!(cert.client_of(&[other]).peer, Peer(false));
        assert_eq!(cert.client_of(&[]).peer, Peer(false));
        // Once the pair rotates, the old certificate is no peer's.
        write(dir.path());
        cert.reload().unwrap();
        assert_eq!(cert.client_of(&[served]).peer, Peer(false));
    }

    #[test]
    fn refuses_to_start_without_a_loadable_pair() {
        let dir = tempfile::tempdir().unwrap();
        let err = ReloadingCert::load(&dir.path().join("tls.crt"), &dir.path().join("tls.key"))
            .unwrap_err();
        assert!(err.to_string().contains("tls.crt"), "{err}");
    }
}
