//! The webhook's serving certificate, swapped while the listener runs: reloaded when its files
//! change (cert-manager rotates them), or set from the Secret syncgc keeps (`--tls-secret`). A
//! new pair that does not load is logged and counted, and the old one kept.

use parking_lot::{Mutex, RwLock};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
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
    /// asks [`ClientCertified`]).
    clients: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
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
            clients: None,
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
        let origin = ca_path.display().to_string();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|error| TlsError::Pem {
                origin: origin.clone(),
                error,
            })?;
            roots.add(cert)?;
        }
        if roots.is_empty() {
            return Err(TlsError::NoCertificate(origin));
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|err| TlsError::ClientCa(origin, err.to_string()))?;
        self.clients = Some(verifier);
        Ok(self)
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
        let builder = rustls::ServerConfig::builder();
        let builder = match &self.clients {
            Some(clients) => builder.with_client_cert_verifier(clients.clone()),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(self.clone());
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
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    Ok(CertifiedKey::from_der(chain, key, &provider)?)
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

    #[test]
    fn refuses_to_start_without_a_loadable_pair() {
        let dir = tempfile::tempdir().unwrap();
        let err = ReloadingCert::load(&dir.path().join("tls.crt"), &dir.path().join("tls.key"))
            .unwrap_err();
        assert!(err.to_string().contains("tls.crt"), "{err}");
    }
}
