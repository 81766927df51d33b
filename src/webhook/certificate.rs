//! The Secret that holds syncgc's CA and serving certificate (`--tls-secret`), as cert-manager
//! lays one out: `ca.crt` (the CA bundle: the current CA first, then earlier ones until they
//! expire), `ca.key` (the current CA's key), `tls.crt` and `tls.key`.
//!
//! [`next`] decides, [`Keeper`] reads and writes. A missing or unusable Secret gets a new CA
//! and certificate. A CA is renewed `renew_before` its expiry; the new one goes first in the
//! bundle, the old one stays until it expires, so that certificates it signed stay trusted.
//! A serving certificate is issued again when it nears its expiry, was not signed by the
//! current CA, or lacks a name the webhook is reached by — but, while the one in place still
//! serves, only once the webhook configuration publishes the current CA: no admission call
//! meets a certificate the apiserver cannot verify. Replicas agree through the apiserver: a
//! Secret is created once (the second create fails and its replica reads the first's) and
//! replaced only with the resourceVersion it was read at.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ObjectMeta;
use time::OffsetDateTime;

use crate::api::{ApiError, Cluster};
use crate::certs::{
    Authority, CA_CERT, CA_KEY, Certificate, CertsError, SubjectAltNames, TLS_CERT, TLS_KEY,
};

/// How long certificates are valid, and how long before they expire they are renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub ca: Duration,
    pub cert: Duration,
    pub renew_before: Duration,
}

impl Validity {
    /// Renewal must leave room: a certificate shorter-lived than the margin would be renewed
    /// forever.
    pub fn check(self) -> Result<Self, String> {
        if self.renew_before.is_zero() || self.renew_before >= self.cert {
            return Err(format!(
                "--tls-renew-before ({:?}) must be positive and shorter than --tls-cert-validity ({:?})",
                self.renew_before, self.cert
            ));
        }
        if self.cert > self.ca {
            return Err(format!(
                "--tls-cert-validity ({:?}) must not exceed --tls-ca-validity ({:?})",
                self.cert, self.ca
            ));
        }
        Ok(self)
    }
}

/// The Secret's four entries, as PEM text (empty when missing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contents {
    pub ca_bundle: String,
    pub ca_key: String,
    pub tls_cert: String,
    pub tls_key: String,
}

impl Contents {
    pub fn from_data(data: Option<&BTreeMap<String, ByteString>>) -> Self {
        let entry = |key: &str| {
            data.and_then(|d| d.get(key))
                .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                .unwrap_or_default()
        };
        Self {
            ca_bundle: entry(CA_CERT),
            ca_key: entry(CA_KEY),
            tls_cert: entry(TLS_CERT),
            tls_key: entry(TLS_KEY),
        }
    }

    pub fn to_data(&self) -> BTreeMap<String, ByteString> {
        [
            (CA_CERT, &self.ca_bundle),
            (CA_KEY, &self.ca_key),
            (TLS_CERT, &self.tls_cert),
            (TLS_KEY, &self.tls_key),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), ByteString(value.clone().into_bytes())))
        .collect()
    }

    /// When the serving certificate expires, if it reads.
    pub fn serving_not_after(&self) -> Option<OffsetDateTime> {
        Certificate::parse_all(self.tls_cert.as_bytes())
            .ok()?
            .first()
            .map(|c| c.not_after)
    }
}

/// Why the Secret is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// There was no usable CA: a new CA and serving certificate.
    Created,
    /// The CA neared its expiry: a new one leads the bundle.
    CaRenewed,
    /// CAs that expired left the bundle.
    ExpiredCaDropped,
    /// A new serving certificate, from the current CA.
    ServingIssued,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::CaRenewed => "ca-renewed",
            Self::ExpiredCaDropped => "expired-ca-dropped",
            Self::ServingIssued => "serving-issued",
        }
    }
}

fn later(now: OffsetDateTime, by: Duration) -> OffsetDateTime {
    now + time::Duration::try_from(by).unwrap_or(time::Duration::MAX)
}

/// What the Secret should hold next, and why, given what it holds (`stored`), the CA bundle
/// the webhook configuration publishes (`published`), the names the certificate must carry
/// and the time; `None` when it is right as it is.
pub fn next(
    stored: &Contents,
    published: &[u8],
    sans: &SubjectAltNames,
    validity: Validity,
    now: OffsetDateTime,
) -> Result<Option<(Contents, Vec<Change>)>, CertsError> {
    let renew_at = |not_after: OffsetDateTime| {
        not_after - time::Duration::try_from(validity.renew_before).unwrap_or(time::Duration::MAX)
    };
    let bundle = Certificate::parse_all(stored.ca_bundle.as_bytes()).unwrap_or_default();
    let authority = bundle
        .first()
        .and_then(|ca| Authority::from_pem(&ca.pem, &stored.ca_key).ok());
    let (Some(mut current), Some(mut authority)) = (bundle.first().cloned(), authority) else {
        let ca_not_after = later(now, validity.ca);
        let authority = Authority::generate(now, ca_not_after)?;
        let (tls_cert, tls_key) =
            authority.issue(sans, now, later(now, validity.cert).min(ca_not_after))?;
        let contents = Contents {
            ca_bundle: authority.cert_pem.clone(),
            ca_key: authority.key_pem.clone(),
            tls_cert,
            tls_key,
        };
        return Ok(Some((contents, vec![Change::Created])));
    };
    let mut changes = Vec::new();
    let mut cas: Vec<Certificate> = bundle
        .iter()
        .filter(|ca| ca.not_after > now)
        .cloned()
        .collect();
    if cas.len() != bundle.len() {
        changes.push(Change::ExpiredCaDropped);
    }
    if renew_at(current.not_after) <= now {
        authority = Authority::generate(now, later(now, validity.ca))?;
        current = Certificate::parse_all(authority.cert_pem.as_bytes())?.remove(0);
        cas.retain(|ca| ca.der != current.der);
        cas.insert(0, current.clone());
        changes.push(Change::CaRenewed);
    }
    let serving = Certificate::parse_all(stored.tls_cert.as_bytes())
        .ok()
        .and_then(|chain| chain.into_iter().next())
        .filter(|cert| cert.not_after > now && cert.key_matches(&stored.tls_key));
    let still_serves = serving
        .as_ref()
        .is_some_and(|cert| cas.iter().any(|ca| cert.signed_by(ca)));
    let fresh = serving.as_ref().is_some_and(|cert| {
        cert.signed_by(&current) && renew_at(cert.not_after) > now && cert.sans.covers(sans)
    });
    let mut next = Contents {
        ca_bundle: cas.iter().map(|ca| ca.pem.as_str()).collect(),
        ca_key: authority.key_pem.clone(),
        ..stored.clone()
    };
    if !fresh {
        let is_published = Certificate::parse_all(published)
            .unwrap_or_default()
            .iter()
            .any(|ca| ca.der == current.der);
        if !still_serves || is_published {
            let not_after = later(now, validity.cert).min(current.not_after);
            (next.tls_cert, next.tls_key) = authority.issue(sans, now, not_after)?;
            changes.push(Change::ServingIssued);
        }
    }
    Ok((!changes.is_empty()).then_some((next, changes)))
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("the certificate of Secret {secret}: {source}")]
    Certs { secret: String, source: CertsError },
    #[error("Secret {0} was written by another replica in between; reading it again")]
    Conflict(String),
}

/// Reads and writes the Secret `namespace/name`.
pub struct Keeper {
    pub api: Api<Secret>,
    pub namespace: String,
    pub name: String,
    pub sans: SubjectAltNames,
    pub validity: Validity,
}

impl Keeper {
    pub fn new(
        cluster: &Cluster,
        (namespace, name): (String, String),
        sans: SubjectAltNames,
        validity: Validity,
    ) -> Self {
        Self {
            api: cluster.namespaced(&namespace),
            namespace,
            name,
            sans,
            validity,
        }
    }

    /// `NAMESPACE/NAME`, for messages.
    pub fn secret(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Brings the Secret to what [`next`] says and returns what it holds then, with the
    /// changes written (by this replica).
    pub async fn reconcile(
        &self,
        cluster: &Cluster,
        published: &[u8],
    ) -> Result<(Contents, Vec<Change>), SecretError> {
        let existing: Option<Secret> = cluster.get_whole(&self.api, &self.name).await?;
        let stored = Contents::from_data(existing.as_ref().and_then(|s| s.data.as_ref()));
        let planned = next(
            &stored,
            published,
            &self.sans,
            self.validity,
            OffsetDateTime::now_utc(),
        )
        .map_err(|source| SecretError::Certs {
            secret: self.secret(),
            source,
        })?;
        let Some((contents, changes)) = planned else {
            return Ok((stored, Vec::new()));
        };
        let written = match existing {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.namespace.clone()),
                        labels: Some(managed_by()),
                        ..Default::default()
                    },
                    type_: Some("Opaque".to_owned()),
                    data: Some(contents.to_data()),
                    ..Default::default()
                };
                cluster.create_whole(&self.api, &secret).await
            }
            Some(mut secret) => {
                secret.data = Some(contents.to_data());
                secret.string_data = None;
                cluster.replace_whole(&self.api, &secret).await
            }
        };
        match written {
            Ok(_) => Ok((contents, changes)),
            Err(err) if matches!(err.status(), Some(409)) => {
                Err(SecretError::Conflict(self.secret()))
            }
            Err(err) => Err(err.into()),
        }
    }
}

/// The label on what syncgc writes for itself.
pub fn managed_by() -> BTreeMap<String, String> {
    [(
        "app.kubernetes.io/managed-by".to_owned(),
        "syncgc".to_owned(),
    )]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn validity() -> Validity {
        Validity {
            ca: 100 * HOUR,
            cert: 10 * HOUR,
            renew_before: 2 * HOUR,
        }
    }

    fn sans() -> SubjectAltNames {
        SubjectAltNames {
            dns: vec!["syncgc-webhook.syncgc-system.svc".into()],
            ips: vec![],
        }
    }

    fn at(hours: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap() + time::Duration::hours(hours)
    }

    fn certs(pem: &str) -> Vec<Certificate> {
        Certificate::parse_all(pem.as_bytes()).unwrap()
    }

    /// Runs [`next`] as the loop does, publishing the bundle after each pass.
    fn settle(stored: &mut Contents, published: &mut String, now: OffsetDateTime) -> Vec<Change> {
        let mut all = Vec::new();
        for _ in 0..4 {
            match next(stored, published.as_bytes(), &sans(), validity(), now).unwrap() {
                Some((contents, changes)) => {
                    *stored = contents;
                    all.extend(changes);
                }
                None => break,
            }
            published.clone_from(&stored.ca_bundle);
        }
        all
    }

    #[test]
    fn a_missing_or_broken_secret_gets_a_ca_and_a_certificate_signed_by_it() {
        for stored in [
            Contents::default(),
            Contents {
                ca_bundle: "garbage".into(),
                ..Default::default()
            },
        ] {
            let (made, changes) = next(&stored, b"", &sans(), validity(), at(0))
                .unwrap()
                .unwrap();
            assert_eq!(changes, [Change::Created]);
            let (ca, serving) = (&certs(&made.ca_bundle)[0], &certs(&made.tls_cert)[0]);
            assert!(serving.signed_by(ca));
            assert!(serving.key_matches(&made.tls_key));
            assert_eq!(serving.sans, sans());
            assert_eq!(serving.not_after, at(10));
            assert_eq!(ca.not_after, at(100));
            // Nothing to do until renewal.
            assert_eq!(
                next(&made, made.ca_bundle.as_bytes(), &sans(), validity(), at(7)).unwrap(),
                None
            );
        }
    }

    #[test]
    fn a_serving_certificate_is_renewed_before_it_expires() {
        let (mut stored, _) = next(&Contents::default(), b"", &sans(), validity(), at(0))
            .unwrap()
            .unwrap();
        let mut published = stored.ca_bundle.clone();
        let before = stored.tls_cert.clone();
        assert_eq!(
            settle(
                &mut stored,
                &mut published,
                at(8) + time::Duration::seconds(1)
            ),
            [Change::ServingIssued]
        );
        assert_ne!(stored.tls_cert, before);
        assert_eq!(
            certs(&stored.tls_cert)[0].not_after,
            at(18) + time::Duration::seconds(1)
        );
    }

    #[test]
    fn a_new_ca_is_published_before_a_certificate_it_signed_is_served() {
        let (created, _) = next(&Contents::default(), b"", &sans(), validity(), at(0))
            .unwrap()
            .unwrap();
        let published = created.ca_bundle.clone();
        // A serving certificate valid until an hour before the CA's end.
        let (mut stored, _) = next(&created, published.as_bytes(), &sans(), validity(), at(89))
            .unwrap()
            .unwrap();
        assert_eq!(certs(&stored.tls_cert)[0].not_after, at(99));
        let old_ca = certs(&stored.ca_bundle)[0].clone();
        // The CA nears its end: a new CA leads the bundle; the certificate in place is kept
        // while the configuration publishes only the old CA.
        let now = at(98) + time::Duration::seconds(1);
        let (renewed, changes) = next(&stored, published.as_bytes(), &sans(), validity(), now)
            .unwrap()
            .unwrap();
        assert_eq!(changes, [Change::CaRenewed]);
        let bundle = certs(&renewed.ca_bundle);
        assert_eq!(bundle.len(), 2);
        assert_eq!(bundle[1], old_ca);
        assert_eq!(renewed.tls_cert, stored.tls_cert);
        // Still not published: still waiting.
        assert_eq!(
            next(&renewed, published.as_bytes(), &sans(), validity(), now).unwrap(),
            None
        );
        // Published: a certificate from the new CA, which both CAs' bundle verifies.
        let (issued, changes) = next(
            &renewed,
            renewed.ca_bundle.as_bytes(),
            &sans(),
            validity(),
            now,
        )
        .unwrap()
        .unwrap();
        assert_eq!(changes, [Change::ServingIssued]);
        let serving = &certs(&issued.tls_cert)[0];
        assert!(serving.signed_by(&bundle[0]));
        assert!(serving.not_after <= bundle[0].not_after);
        stored = issued;
        // Once the old CA has expired it leaves the bundle.
        let mut published = stored.ca_bundle.clone();
        let later = at(100) + time::Duration::seconds(1);
        let changes = settle(&mut stored, &mut published, later);
        assert!(changes.contains(&Change::ExpiredCaDropped), "{changes:?}");
        assert_eq!(certs(&stored.ca_bundle).len(), 1);
    }

    #[test]
    fn an_expired_or_mismatched_certificate_is_replaced_at_once() {
        let (stored, _) = next(&Contents::default(), b"", &sans(), validity(), at(0))
            .unwrap()
            .unwrap();
        // Expired: nothing serves, so no waiting for the bundle.
        let (renewed, changes) = next(&stored, b"", &sans(), validity(), at(11))
            .unwrap()
            .unwrap();
        assert_eq!(changes, [Change::ServingIssued]);
        assert!(certs(&renewed.tls_cert)[0].not_after > at(11));
        // A key that is not the certificate's.
        let (other, _) = next(&Contents::default(), b"", &sans(), validity(), at(0))
            .unwrap()
            .unwrap();
        let mismatched = Contents {
            tls_key: other.tls_key,
            ..stored.clone()
        };
        let (_, changes) = next(&mismatched, b"", &sans(), validity(), at(1))
            .unwrap()
            .unwrap();
        assert_eq!(changes, [Change::ServingIssued]);
        // A name the webhook is now reached by.
        let more = SubjectAltNames {
            dns: vec!["syncgc.example.com".into()],
            ips: vec!["127.0.0.1".parse().unwrap()],
        };
        let (issued, changes) = next(
            &stored,
            stored.ca_bundle.as_bytes(),
            &more,
            validity(),
            at(1),
        )
        .unwrap()
        .unwrap();
        assert_eq!(changes, [Change::ServingIssued]);
        assert!(certs(&issued.tls_cert)[0].sans.covers(&more));
    }

    #[test]
    fn renewal_must_leave_room() {
        let mut bad = validity();
        bad.renew_before = bad.cert;
        assert!(bad.check().is_err());
        bad = validity();
        bad.cert = bad.ca + HOUR;
        assert!(bad.check().is_err());
        assert!(validity().check().is_ok());
    }
}
