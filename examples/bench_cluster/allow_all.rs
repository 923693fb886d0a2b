//! The floor of any webhook: a validating webhook that allows every review
//! at once, served by nfguard's own HTTPS stack (`webhook::server`: rustls,
//! hyper, axum) but judging nothing. `bench-cluster.sh` runs it in the
//! network namespace and CPU cgroup of a webhook pod, so the API server
//! reaches it over the same path and it competes for the CPU as nfguard's
//! webhook does: what it adds to a pod creation is what calling a webhook
//! costs on that machine, whatever the webhook does.

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use nfguard::webhook::server::serve_tls;
use nfguard::webhook::tls::{CertStore, load_pem, server_config};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

#[derive(Deserialize)]
struct Review<'a> {
    #[serde(borrow)]
    request: Request<'a>,
}

#[derive(Deserialize)]
struct Request<'a> {
    uid: &'a str,
}

/// The answer to one review: allowed, echoing its uid; None for a body
/// that is not a review.
fn answer(body: &[u8]) -> Option<String> {
    let review = serde_json::from_slice::<Review>(body).ok()?;
    let answer = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review.request.uid, "allowed": true},
    });
    Some(answer.to_string())
}

fn allow(body: &[u8]) -> axum::response::Response {
    match answer(body) {
        Some(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        None => (
            axum::http::StatusCode::BAD_REQUEST,
            "not an AdmissionReview",
        )
            .into_response(),
    }
}

/// A CA and a serving certificate for `listen`'s IP address; the CA's PEM
/// is written to `ca_out` (the configuration's caBundle).
fn certificate(listen: SocketAddr, ca_out: &Path) -> anyhow::Result<(String, String)> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "nfguard-bench allow-all CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(vec![listen.ip().to_string()])?;
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = leaf.signed_by(&key, &issuer)?;
    std::fs::write(ca_out, ca_cert.pem())?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Serve `POST /validate` on `listen` until killed.
pub async fn run(listen: SocketAddr, ca_out: &Path) -> anyhow::Result<()> {
    let (cert, key) = certificate(listen, ca_out)?;
    let store = CertStore::new(None);
    store.set(load_pem(cert.as_bytes(), key.as_bytes())?);
    let acceptor = TlsAcceptor::from(server_config(store));
    let app = Router::new().route("/validate", post(|body: Bytes| async move { allow(&body) }));
    let listener = TcpListener::bind(listen).await?;
    eprintln!("allow-all: serving https://{listen}/validate");
    serve_tls(listener, acceptor, app).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_is_allowed_with_its_uid_and_anything_else_is_refused() {
        let ok = answer(br#"{"request":{"uid":"u-1","object":{}}}"#).unwrap();
        let v: serde_json::Value = serde_json::from_str(&ok).unwrap();
        assert_eq!(v["response"]["uid"], "u-1");
        assert_eq!(v["response"]["allowed"], true);
        assert_eq!(allow(b"{}").status(), 400);
    }
}
