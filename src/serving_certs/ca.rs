//! The reporter-metrics CA: made once by the controller, kept in the
//! install-provided Secret, and used to sign what [`super::judge`] grants.

use super::judge::Grant;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use std::time::{Duration, SystemTime};

/// How long the CA is valid (it is not rotated yet: docs/observability.md).
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Certificates start this much before "now" (clock skew between nodes).
const BACKDATE: Duration = Duration::from_secs(300);

/// The CA's certificate and key (PEM), as stored in the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaPem {
    pub cert: String,
    pub key: String,
}

/// A CA able to sign.
pub struct Ca {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn offset(t: SystemTime) -> time::OffsetDateTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A new CA named for `namespace`'s install.
pub fn generate(namespace: &str, now: SystemTime) -> Result<CaPem, rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("nfguard-reporter-metrics-ca {namespace}"),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = offset(now - BACKDATE);
    params.not_after = offset(now + CA_VALIDITY);
    let cert = params.self_signed(&key)?;
    Ok(CaPem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

impl Ca {
    pub fn load(pem: &CaPem) -> Result<Ca, rcgen::Error> {
        let key = KeyPair::from_pem(&pem.key)?;
        Ok(Ca {
            cert_pem: pem.cert.clone(),
            issuer: Issuer::from_ca_cert_pem(&pem.cert, key)?,
        })
    }

    /// The serving certificate (PEM) for `grant`, valid from now.
    pub fn issue(&self, grant: &Grant, now: SystemTime) -> Result<String, rcgen::Error> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            format!("nfguard-reporter-metrics:{}", grant.node),
        );
        params.distinguished_name = dn;
        params.subject_alt_names = grant.ips.iter().map(|ip| SanType::IpAddress(*ip)).collect();
        for name in &grant.dns {
            params
                .subject_alt_names
                .push(SanType::DnsName(name.as_str().try_into()?));
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.not_before = offset(now - BACKDATE);
        params.not_after = offset(now + grant.lifetime);
        Ok(params.signed_by(&grant.public_key, &self.issuer)?.pem())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving_certs::judge::{Request, judge};
    use rustls::client::danger::ServerCertVerifier;

    #[test]
    fn an_issued_certificate_chains_to_the_ca_for_the_granted_names_only() {
        let now = SystemTime::now();
        let ca = Ca::load(&generate("nfguard-system", now).unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let pem = CertificateParams::new(vec!["10.0.0.1".to_string()])
            .unwrap()
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap();
        let node = vec!["node-a".to_string()];
        let usages = vec!["digital signature".to_string(), "server auth".to_string()];
        let grant = judge(
            &Request {
                pem: pem.as_bytes(),
                username: "r",
                node_extra: Some(&node),
                usages: &usages,
                expiration_seconds: Some(7200),
            },
            "r",
            |_| Some(vec!["10.0.0.1".parse().unwrap()]),
        )
        .unwrap();
        let cert = ca.issue(&grant, now).unwrap();
        // A verifying TLS client: trusts the CA, checks the address.
        let leaf = rustls_pemfile::certs(&mut cert.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let verifies = |ca_pem: &str, addr: &str| {
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
                roots.add(c.unwrap()).unwrap();
            }
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                roots.into(),
                std::sync::Arc::new(rustls::crypto::ring::default_provider()),
            )
            .build()
            .unwrap();
            let name = rustls::pki_types::ServerName::IpAddress(
                addr.parse::<std::net::IpAddr>().unwrap().into(),
            );
            let at = rustls::pki_types::UnixTime::now();
            verifier
                .verify_server_cert(&leaf, &[], &name, &[], at)
                .is_ok()
        };
        assert!(verifies(&ca.cert_pem, "10.0.0.1"));
        assert!(!verifies(&ca.cert_pem, "10.0.0.2"), "another address");
        let other = Ca::load(&generate("x", now).unwrap()).unwrap();
        assert!(!verifies(&other.cert_pem, "10.0.0.1"), "another CA");
    }
}
