//! Who may call `/validate` (`--client-ca-file`): a TLS client certificate
//! chained to the given CA, and, with `--client-cert-name`, naming one of the
//! allowed identities (subject CN or a DNS SAN). The API server presents one
//! when its AdmissionConfiguration gives it a kubeconfig for the webhook's
//! host (docs/webhook.md).
//!
//! The TLS layer asks every client for a certificate and refuses a presented
//! one that does not chain to the CA or names no allowed identity; a client
//! without one still completes the handshake (the kubelet's readiness probe
//! has none), and the router refuses its `/validate` with 401 before reading
//! the body. The CA file is read with a size cap and re-read when it changes;
//! a bad new file keeps the CA that was loaded.

use super::metrics::{Metrics, Refusal};
use super::tls::{FileWatch, TlsError, watch_paths};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// A CA bundle is a few KiB; anything near this is not one.
pub const MAX_CA_FILE_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ClientAuthError {
    #[error("{path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path}: larger than {MAX_CA_FILE_BYTES} bytes, not a CA bundle")]
    TooLarge { path: String },
    #[error("client CA: malformed PEM: {0}")]
    Pem(std::io::Error),
    #[error("client CA: unusable certificate: {0}")]
    Certificate(rustls::Error),
    #[error("client CA: the PEM holds no certificate")]
    Empty,
    #[error("client CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("client CA: {0}")]
    Watch(#[from] TlsError),
}

/// The verifier for one CA bundle (PEM): presented certificates must chain to it.
pub fn verifier_for_pem(pem: &[u8]) -> Result<Arc<dyn ClientCertVerifier>, ClientAuthError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut &pem[..]) {
        roots
            .add(cert.map_err(ClientAuthError::Pem)?)
            .map_err(ClientAuthError::Certificate)?;
    }
    if roots.is_empty() {
        return Err(ClientAuthError::Empty);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()?,
    )
}

/// The file's bytes, refusing more than [`MAX_CA_FILE_BYTES`].
pub fn read_capped(path: &Path) -> Result<Vec<u8>, ClientAuthError> {
    crate::capped::read_file_capped(path, MAX_CA_FILE_BYTES)
        .map_err(|error| ClientAuthError::Read {
            path: path.display().to_string(),
            error,
        })?
        .ok_or_else(|| ClientAuthError::TooLarge {
            path: path.display().to_string(),
        })
}

/// The client-certificate check rustls asks on every handshake; the CA
/// behind it can be swapped (affects new handshakes only).
pub struct ClientAuth {
    current: RwLock<Arc<dyn ClientCertVerifier>>,
    /// Allowed identities; empty: any certificate the CA signed.
    names: Vec<String>,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAuth")
            .field("names", &self.names)
            .finish()
    }
}

impl ClientAuth {
    pub fn new(
        ca_pem: &[u8],
        names: Vec<String>,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<Arc<Self>, ClientAuthError> {
        Ok(Arc::new(ClientAuth {
            current: RwLock::new(verifier_for_pem(ca_pem)?),
            names,
            metrics,
        }))
    }

    /// Trust `ca_pem` from the next handshake on.
    pub fn set_ca(&self, ca_pem: &[u8]) -> Result<(), ClientAuthError> {
        let v = verifier_for_pem(ca_pem)?;
        match self.current.write() {
            Ok(mut g) => *g = v,
            Err(p) => *p.into_inner() = v,
        }
        Ok(())
    }

    fn inner(&self) -> Arc<dyn ClientCertVerifier> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn refused(&self, why: Refusal) {
        if let Some(m) = &self.metrics {
            m.refuse(why);
        }
    }
}

/// Subject CN and DNS SANs of a DER certificate (empty if unparsable).
pub fn identities(der: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
        return Vec::new();
    };
    let mut out: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                out.push((*d).to_string());
            }
        }
    }
    out
}

impl ClientCertVerifier for ClientAuth {
    /// Optional at the TLS layer: health routes on the same port stay open
    /// to the kubelet; `/validate` refuses a connection without one.
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    /// No hints: the CA can change under a running server, and clients send
    /// their certificate when the list is empty (RFC 8446 4.2.4).
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner()
            .verify_client_cert(end_entity, intermediates, now)
            .inspect_err(|_| self.refused(Refusal::UntrustedClientCertificate))?;
        if self.names.is_empty() {
            return Ok(verified);
        }
        let names = identities(end_entity);
        if names.iter().any(|n| self.names.contains(n)) {
            Ok(verified)
        } else {
            self.refused(Refusal::ClientNameNotAllowed);
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner().supported_verify_schemes()
    }
}

/// Load `path` into a new [`ClientAuth`].
pub fn load_file(
    path: &Path,
    names: Vec<String>,
    metrics: Option<Arc<Metrics>>,
) -> Result<Arc<ClientAuth>, ClientAuthError> {
    ClientAuth::new(&read_capped(path)?, names, metrics)
}

/// Re-read `path` whenever its directory changes (a mounted ConfigMap or
/// Secret swaps a `..data` symlink) and every `poll`; a file that fails to
/// load keeps the CA in use.
pub fn watch_file(
    path: PathBuf,
    auth: Arc<ClientAuth>,
    poll: Duration,
) -> Result<FileWatch, ClientAuthError> {
    let mut last: Option<Vec<u8>> = None;
    let paths = [path.clone()];
    Ok(watch_paths(&paths, poll, move || {
        let pem = match read_capped(&path) {
            Ok(p) => p,
            Err(e) => return tracing::warn!(error = %e, "client CA not re-read"),
        };
        if last.as_ref() == Some(&pem) {
            return;
        }
        match auth.set_ca(&pem) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "client CA reloaded");
                last = Some(pem);
            }
            Err(e) => {
                tracing::warn!(error = %e, "client CA reload failed; keeping the current one")
            }
        }
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_or_empty_ca_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let big = d.path().join("big.crt");
        std::fs::write(&big, vec![b'A'; MAX_CA_FILE_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            load_file(&big, vec![], None),
            Err(ClientAuthError::TooLarge { .. })
        ));
        let empty = d.path().join("empty.crt");
        std::fs::write(&empty, "no PEM here\n").unwrap();
        assert!(matches!(
            load_file(&empty, vec![], None),
            Err(ClientAuthError::Empty)
        ));
    }

    #[test]
    fn identities_are_the_common_name_and_dns_names() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["hook.example".to_string()]).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver");
        let der = p.self_signed(&key).unwrap().der().clone();
        assert_eq!(identities(&der), ["kube-apiserver", "hook.example"]);
        assert!(identities(&CertificateDer::from(vec![1, 2, 3])).is_empty());
    }
}
