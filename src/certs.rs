//! Certificates: a CA ([`Authority`]) that signs serving certificates, and the reading of
//! PEM certificates back ([`Certificate`]).
//!
//! `syncgc certs` writes a development CA and serving certificate ([`DevCerts`]) for a local
//! control plane and for tests; private keys are written with mode 0600, and nothing is
//! overwritten unless asked. `syncgc run --tls-secret` keeps its own in a Secret (see
//! [`crate::webhook::certificate`]).

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
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

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
    #[error("reading a certificate: {0}")]
    Parse(String),
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

impl SubjectAltNames {
    /// Whether every name of `other` is among these.
    pub fn covers(&self, other: &Self) -> bool {
        other.dns.iter().all(|name| self.dns.contains(name))
            && other.ips.iter().all(|ip| self.ips.contains(ip))
    }
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
        let now = OffsetDateTime::now_utc();
        let ca = Authority::generate(now, now + CA_VALIDITY)?;
        let (tls_cert, tls_key) = ca.issue(sans, now, now + SERVING_VALIDITY)?;
        Ok(Self {
            ca_cert: ca.cert_pem,
            ca_key: ca.key_pem,
            tls_cert,
            tls_key,
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

/// A certificate authority: its certificate and the key it signs with, PEM-encoded.
pub struct Authority {
    pub cert_pem: String,
    pub key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

/// How long before `now` certificates become valid, for clocks slightly behind.
const BACKDATE: Duration = Duration::hours(1);

impl Authority {
    /// A new CA valid from an hour before `now` until `not_after`. Its name carries its
    /// creation time, so that a CA and the one it replaces never share a subject.
    pub fn generate(now: OffsetDateTime, not_after: OffsetDateTime) -> Result<Self, CertsError> {
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.distinguished_name.push(
            DnType::CommonName,
            format!("syncgc CA {}", now.unix_timestamp()),
        );
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = now - BACKDATE;
        params.not_after = not_after;
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA whose certificate and key are these.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, CertsError> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        Ok(Self {
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
            issuer,
        })
    }

    /// A serving certificate for `sans`, signed by this CA, valid from an hour before `now`
    /// until `not_after`; with its private key.
    pub fn issue(
        &self,
        sans: &SubjectAltNames,
        now: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<(String, String), CertsError> {
        if sans.dns.is_empty() && sans.ips.is_empty() {
            return Err(CertsError::NoSubjectAltNames);
        }
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
        params.use_authority_key_identifier_extension = true;
        params.not_before = now - BACKDATE;
        params.not_after = not_after;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// A certificate read back from PEM: what deciding about renewal needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    /// The DER encoding, which identifies it.
    pub der: Vec<u8>,
    /// Its PEM encoding, as read.
    pub pem: String,
    pub not_after: OffsetDateTime,
    pub sans: SubjectAltNames,
    /// The DER SubjectPublicKeyInfo.
    spki: Vec<u8>,
}

impl Certificate {
    /// Every certificate of a PEM bundle, in order; an error when any does not parse.
    pub fn parse_all(pem: &[u8]) -> Result<Vec<Self>, CertsError> {
        Pem::iter_from_buffer(pem)
            .map(|block| {
                let block = block.map_err(|err| CertsError::Parse(err.to_string()))?;
                if block.label != "CERTIFICATE" {
                    return Err(CertsError::Parse(format!("a {} block", block.label)));
                }
                let cert = block
                    .parse_x509()
                    .map_err(|err| CertsError::Parse(err.to_string()))?;
                let not_after = cert.validity().not_after.to_datetime();
                let mut sans = SubjectAltNames::default();
                if let Ok(Some(names)) = cert.subject_alternative_name() {
                    for name in &names.value.general_names {
                        match name {
                            GeneralName::DNSName(dns) => sans.dns.push((*dns).to_owned()),
                            GeneralName::IPAddress(ip) => {
                                if let Ok(octets) = <[u8; 4]>::try_from(*ip) {
                                    sans.ips.push(IpAddr::from(octets));
                                } else if let Ok(octets) = <[u8; 16]>::try_from(*ip) {
                                    sans.ips.push(IpAddr::from(octets));
                                }
                            }
                            _ => {}
                        }
                    }
                }
                let spki = cert.public_key().raw.to_vec();
                let der = block.contents.clone();
                Ok(Self {
                    pem: pem_of(&der),
                    der,
                    not_after,
                    sans,
                    spki,
                })
            })
            .collect()
    }

    /// Whether `key_pem` is the private key of this certificate.
    pub fn key_matches(&self, key_pem: &str) -> bool {
        use rcgen::PublicKeyData;
        KeyPair::from_pem(key_pem).is_ok_and(|key| key.subject_public_key_info() == self.spki)
    }

    /// Whether `issuer`'s key signed this certificate.
    pub fn signed_by(&self, issuer: &Self) -> bool {
        use x509_parser::prelude::{FromDer, X509Certificate};
        match (
            X509Certificate::from_der(&self.der),
            X509Certificate::from_der(&issuer.der),
        ) {
            (Ok((_, cert)), Ok((_, ca))) => cert.verify_signature(Some(ca.public_key())).is_ok(),
            _ => false,
        }
    }
}

/// The PEM block of a DER certificate.
pub(crate) fn pem_of(der: &[u8]) -> String {
    use base64::Engine;
    let text = base64::prelude::BASE64_STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in text.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
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
