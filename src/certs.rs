//! Development certificates: a CA and a serving certificate signed by it.
//!
//! Production clusters get their certificates from cert-manager; these are for a local control
//! plane and for tests. Private keys are written with mode 0600, and nothing is overwritten
//! unless asked.

use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

/// The file names written by [`DevCerts::write`].
pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";

const CA_VALIDITY: Duration = Duration::days(3650);
const SERVING_VALIDITY: Duration = Duration::days(365);

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("a certificate needs at least one subject alternative name (--dns or --ip)")]
    NoSubjectAltNames,
    #[error("invalid DNS name {0:?}")]
    InvalidDnsName(String),
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{} already exist in {}; pass --force to overwrite", .existing.join(", "), .dir.display())]
    WouldOverwrite {
        dir: PathBuf,
        existing: Vec<&'static str>,
    },
    #[error("writing {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The subject alternative names of a serving certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubjectAltNames {
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
}

/// A CA and a serving certificate signed by it, PEM-encoded.
#[derive(Debug)]
pub struct DevCerts {
    pub ca_cert: String,
    pub ca_key: String,
    pub tls_cert: String,
    pub tls_key: String,
}

impl DevCerts {
    /// Generates a fresh CA and a serving certificate for `sans`, valid from an hour ago.
    pub fn generate(sans: &SubjectAltNames) -> Result<Self, CertsError> {
        if sans.dns.is_empty() && sans.ips.is_empty() {
            return Err(CertsError::NoSubjectAltNames);
        }
        let now = OffsetDateTime::now_utc();

        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "syncgc development CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca_params.not_before = now - Duration::hours(1);
        ca_params.not_after = now + CA_VALIDITY;
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca_key_pem = ca_key.serialize_pem();
        let issuer = Issuer::new(ca_params, ca_key);

        let mut params = CertificateParams::default();
        params.distinguished_name.push(
            DnType::CommonName,
            sans.dns.first().map_or("syncgc", String::as_str),
        );
        params.subject_alt_names = sans
            .dns
            .iter()
            .map(|name| {
                name.clone()
                    .try_into()
                    .map(SanType::DnsName)
                    .map_err(|_| CertsError::InvalidDnsName(name.clone()))
            })
            .chain(sans.ips.iter().map(|ip| Ok(SanType::IpAddress(*ip))))
            .collect::<Result<_, _>>()?;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = now - Duration::hours(1);
        params.not_after = now + SERVING_VALIDITY;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &issuer)?;

        Ok(Self {
            ca_cert: ca_cert.pem(),
            ca_key: ca_key_pem,
            tls_cert: cert.pem(),
            tls_key: key.serialize_pem(),
        })
    }

    /// Writes the four files into `dir` (created if missing). Without `force`, refuses when any
    /// of them exists, before writing anything.
    pub fn write(&self, dir: &Path, force: bool) -> Result<(), CertsError> {
        let files: [(&'static str, &str, u32); 4] = [
            (CA_CERT, &self.ca_cert, 0o644),
            (CA_KEY, &self.ca_key, 0o600),
            (TLS_CERT, &self.tls_cert, 0o644),
            (TLS_KEY, &self.tls_key, 0o600),
        ];
        if !force {
            let existing: Vec<_> = files
                .iter()
                .map(|(name, ..)| *name)
                .filter(|name| dir.join(name).symlink_metadata().is_ok())
                .collect();
            if !existing.is_empty() {
                return Err(CertsError::WouldOverwrite {
                    dir: dir.to_owned(),
                    existing,
                });
            }
        }
        fs::create_dir_all(dir).map_err(|source| CertsError::Write {
            path: dir.to_owned(),
            source,
        })?;
        for (name, contents, mode) in files {
            write_file(&dir.join(name), contents, mode)?;
        }
        Ok(())
    }
}

/// Writes `contents` to a temporary file created with `mode`, then renames it over `path`, so a
/// private key is never readable by others, not even for a moment.
fn write_file(path: &Path, contents: &str, mode: u32) -> Result<(), CertsError> {
    let tmp = path.with_extension("tmp");
    let err = |source| CertsError::Write {
        path: path.to_owned(),
        source,
    };
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(err)?;
    file.write_all(contents.as_bytes()).map_err(err)?;
    file.sync_all().map_err(err)?;
    fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn sans() -> SubjectAltNames {
        SubjectAltNames {
            dns: vec!["localhost".into()],
            ips: vec!["127.0.0.1".parse().unwrap()],
        }
    }

    #[test]
    fn refuses_an_empty_san_list() {
        assert!(matches!(
            DevCerts::generate(&SubjectAltNames::default()),
            Err(CertsError::NoSubjectAltNames)
        ));
    }

    #[test]
    fn rejects_an_invalid_dns_name() {
        let sans = SubjectAltNames {
            dns: vec!["bad\u{e9}name".into()],
            ips: vec![],
        };
        assert!(matches!(
            DevCerts::generate(&sans),
            Err(CertsError::InvalidDnsName(name)) if name == "bad\u{e9}name"
        ));
    }

    #[test]
    fn writes_keys_private_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let certs = DevCerts::generate(&sans()).unwrap();
        certs.write(dir.path(), false).unwrap();
        for name in [CA_KEY, TLS_KEY] {
            let meta = fs::metadata(dir.path().join(name)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
        }
        let before = fs::read_to_string(dir.path().join(TLS_KEY)).unwrap();

        let again = DevCerts::generate(&sans()).unwrap();
        let err = again.write(dir.path(), false).unwrap_err();
        assert!(matches!(&err, CertsError::WouldOverwrite { existing, .. } if existing.len() == 4));
        assert_eq!(
            fs::read_to_string(dir.path().join(TLS_KEY)).unwrap(),
            before
        );

        again.write(dir.path(), true).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join(TLS_KEY)).unwrap(),
            again.tls_key
        );
    }
}
