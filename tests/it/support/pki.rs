//! Test support: a throw-away CA and a serving certificate for localhost and
//! 127.0.0.1, for tests that run the webhook over real TLS.
//!
//! ```ignore
//! use crate::support::pki;
//! let pki = pki::pki();
//! ```

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};

/// PEM texts: the CA to trust, and the leaf certificate and key to serve.
pub struct Pki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

pub fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    leaf.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}
