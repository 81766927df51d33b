//! The webhook's serving certificate, reloaded when its files change (cert-manager rotates
//! them). A new pair that does not load is logged and counted, and the old one kept.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} holds no PEM certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("parsing {}: {source}", .path.display())]
    Pem {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("the key does not fit the certificate: {0}")]
    Key(#[from] rustls::Error),
}

/// The bytes of a certificate and key pair, as read from disk.
#[derive(Clone, PartialEq, Eq)]
struct Pair {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// A certificate resolver whose pair can be swapped while the listener runs.
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    loaded: Mutex<Pair>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
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
        let pair = read_pair(cert_path, key_path)?;
        let key = certified_key(cert_path, key_path, &pair)?;
        Ok(Self {
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
            current: RwLock::new(Arc::new(key)),
            loaded: Mutex::new(pair),
        })
    }

    /// Reads the files again and swaps the pair in when it changed and loads.
    pub fn reload(&self) -> Result<Reload, TlsError> {
        let pair = read_pair(&self.cert_path, &self.key_path)?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if *loaded == pair {
            return Ok(Reload::Unchanged);
        }
        let key = certified_key(&self.cert_path, &self.key_path, &pair)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        *loaded = pair;
        Ok(Reload::Reloaded)
    }

    /// A rustls server configuration that serves the current pair, offering HTTP/2 and
    /// HTTP/1.1.
    pub fn server_config(self: &Arc<Self>) -> rustls::ServerConfig {
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
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
                    tracing::info!(cert = %self.cert_path.display(), "serving certificate reloaded");
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
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

fn read_pair(cert_path: &Path, key_path: &Path) -> Result<Pair, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
    };
    Ok(Pair {
        cert: read(cert_path)?,
        key: read(key_path)?,
    })
}

fn certified_key(cert_path: &Path, key_path: &Path, pair: &Pair) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(&pair.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: cert_path.to_owned(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert_path.to_owned()));
    }
    let key = PrivateKeyDer::from_pem_slice(&pair.key).map_err(|source| TlsError::Pem {
        path: key_path.to_owned(),
        source,
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
        cert.current.read().unwrap().cert[0].to_vec()
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
