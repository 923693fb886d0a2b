//! The reporter's side: a key made in memory, a CertificateSigningRequest
//! for its Node's addresses and name, and the certificate nfguard's signer
//! issues swapped into the metrics listener; asked again at two thirds of
//! its lifetime. Until the first one arrives the listener keeps its
//! self-signed certificate (scrapers that verify refuse it).

use super::{SIGNER_NAME, judge::MAX_REQUEST_BYTES};
use crate::webhook::tls::{CertStore, load_pem};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use rcgen::{CertificateParams, KeyPair, SanType};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The lifetime asked for.
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Largest certificate chain accepted from the API.
pub const MAX_CERTIFICATE_BYTES: usize = 64 << 10;
/// How long one request is waited for before asking anew.
const WAIT: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("{0}")]
    Api(String),
    #[error("node {0} has no InternalIP or ExternalIP address")]
    NoAddress(String),
    #[error("making the key or request: {0}")]
    Key(String),
    #[error("request {0} was {1}: {2}")]
    Refused(String, &'static str, String),
    #[error("request {0}: no certificate within {1:?}")]
    Timeout(String, Duration),
    #[error("request {0}: the certificate is unusable: {1}")]
    Certificate(String, String),
}

/// The node's addresses (InternalIP, ExternalIP) and name, as the signer checks them.
async fn own_names(client: &kube::Client, node: &str) -> Result<Vec<SanType>, RequestError> {
    let n = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .map_err(|e| RequestError::Api(format!("reading node {node}: {e}")))?;
    let mut ips: Vec<IpAddr> = Vec::new();
    for a in n.status.and_then(|s| s.addresses).unwrap_or_default() {
        let parsed = (a.type_ == "InternalIP" || a.type_ == "ExternalIP")
            .then(|| a.address.parse::<IpAddr>().ok())
            .flatten();
        if let Some(ip) = parsed.filter(|ip| !ips.contains(ip)) {
            ips.push(ip);
        }
    }
    let mut names: Vec<SanType> = ips.into_iter().map(SanType::IpAddress).collect();
    if names.is_empty() {
        return Err(RequestError::NoAddress(node.to_string()));
    }
    names.truncate(super::judge::MAX_NAMES - 1);
    let dns = node
        .try_into()
        .map_err(|e: rcgen::Error| RequestError::Key(e.to_string()))?;
    names.push(SanType::DnsName(dns));
    Ok(names)
}

/// One request, answered: the certificate's PEM and the key's.
pub async fn request_once(
    client: &kube::Client,
    node: &str,
) -> Result<(String, String), RequestError> {
    let key = KeyPair::generate().map_err(|e| RequestError::Key(e.to_string()))?;
    let mut params = CertificateParams::default();
    params.subject_alt_names = own_names(client, node).await?;
    let pem = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| RequestError::Key(e.to_string()))?;
    debug_assert!(pem.len() < MAX_REQUEST_BYTES);
    let prefix: String = format!("nfguard-reporter-metrics-{node}")
        .chars()
        .take(200)
        .collect();
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            labels: Some(
                [
                    ("app.kubernetes.io/name", "nfguard"),
                    ("app.kubernetes.io/component", "reporter"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: SIGNER_NAME.to_string(),
            usages: Some(vec!["digital signature".into(), "server auth".into()]),
            expiration_seconds: Some(LIFETIME.as_secs() as i32),
            ..Default::default()
        },
        status: None,
    };
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let made = api
        .create(&PostParams::default(), &csr)
        .await
        .map_err(|e| RequestError::Api(format!("creating a certificate request: {e}")))?;
    let name = made.metadata.name.unwrap_or_default();
    let until = tokio::time::Instant::now() + WAIT;
    loop {
        tokio::time::sleep(POLL).await;
        let now = api
            .get(&name)
            .await
            .map_err(|e| RequestError::Api(format!("reading certificate request {name}: {e}")))?;
        let status = now.status.unwrap_or_default();
        if let Some(c) = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Denied" || c.type_ == "Failed")
        {
            let kind = if c.type_ == "Denied" {
                "denied"
            } else {
                "failed"
            };
            let why: String = c
                .message
                .unwrap_or_default()
                .chars()
                .filter(|c| !c.is_control())
                .take(256)
                .collect();
            return Err(RequestError::Refused(name, kind, why));
        }
        match status.certificate {
            Some(c) if c.0.len() > MAX_CERTIFICATE_BYTES => {
                return Err(RequestError::Certificate(
                    name,
                    format!("larger than {MAX_CERTIFICATE_BYTES} bytes"),
                ));
            }
            Some(c) if !c.0.is_empty() => {
                let cert = String::from_utf8(c.0)
                    .map_err(|_| RequestError::Certificate(name.clone(), "not PEM".into()))?;
                return Ok((cert, key.serialize_pem()));
            }
            _ => {}
        }
        if tokio::time::Instant::now() >= until {
            return Err(RequestError::Timeout(name, WAIT));
        }
    }
}

/// Keeps `store` serving a certificate nfguard's signer issued for this
/// node, until the process ends.
pub async fn keep_certified(client: kube::Client, node: String, store: Arc<CertStore>) {
    let mut retry = Duration::from_secs(10);
    loop {
        let next = match request_once(&client, &node).await.and_then(|(cert, key)| {
            load_pem(cert.as_bytes(), key.as_bytes())
                .map_err(|e| RequestError::Certificate("issued".into(), e.to_string()))
        }) {
            Ok(loaded) => {
                let left = loaded
                    .not_after
                    .and_then(|t| t.duration_since(SystemTime::now()).ok())
                    .unwrap_or(Duration::ZERO);
                store.set(loaded);
                tracing::info!(node = %node, valid_for_s = left.as_secs(), "serving a certificate from nfguard's signer on /metrics");
                retry = Duration::from_secs(10);
                (left * 2 / 3).max(Duration::from_secs(60))
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in_s = retry.as_secs(), "no metrics serving certificate from nfguard's signer yet");
                let wait = retry;
                retry = (retry * 2).min(Duration::from_secs(600));
                wait
            }
        };
        tokio::time::sleep(next).await;
    }
}
