//! Manifests and image indexes read with a size cap. The client's
//! `pull_manifest_raw` reads a body whole, so a lying registry (no or a
//! false Content-Length, chunked without end) could make us allocate
//! without bound. Authentication still goes through the client:
//! `Client::auth` runs the anonymous / basic / bearer-token dance and keeps
//! the token for the blob pulls that follow.

use oci_client::errors::{OciDistributionError, OciEnvelope};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use reqwest_oci::StatusCode;
use reqwest_oci::header::{ACCEPT, AUTHORIZATION, HeaderValue};
use std::time::Duration;

/// The OCI distribution spec has registries accept manifests up to 4 MiB.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// An error body is read only this far (enough for any error envelope).
const MAX_ERROR_BODY_BYTES: u64 = 64 << 10;

/// Why a manifest GET failed.
pub enum GetError {
    /// The client's own error (network, auth, registry status).
    Oci(OciDistributionError),
    /// The body is (or announces to be) longer than `MAX_MANIFEST_BYTES`.
    TooLarge,
}

impl From<OciDistributionError> for GetError {
    fn from(e: OciDistributionError) -> Self {
        GetError::Oci(e)
    }
}

impl From<reqwest_oci::Error> for GetError {
    fn from(e: reqwest_oci::Error) -> Self {
        GetError::Oci(OciDistributionError::RequestError(e))
    }
}

pub struct ManifestGetter {
    http: reqwest_oci::Client,
    insecure_registries: Vec<String>,
}

impl ManifestGetter {
    /// Same timeouts and scheme choice as the oci-client built beside it.
    pub fn new(insecure_registries: Vec<String>, read: Duration, connect: Duration) -> Self {
        let http = reqwest_oci::Client::builder()
            .read_timeout(read)
            .connect_timeout(connect)
            .build()
            .unwrap_or_default();
        Self {
            http,
            insecure_registries,
        }
    }

    fn url(&self, r: &Reference) -> String {
        let registry = r.resolve_registry();
        let scheme = if self.insecure_registries.iter().any(|h| h == registry) {
            "http"
        } else {
            "https"
        };
        let ns = r
            .namespace()
            .map(|ns| format!("?ns={ns}"))
            .unwrap_or_default();
        let target = r.digest().or(r.tag()).unwrap_or("latest");
        format!(
            "{scheme}://{registry}/v2/{}/manifests/{target}{ns}",
            r.repository()
        )
    }

    /// The Authorization header for pulls from `r`'s repository, if any.
    pub async fn authorization(
        client: &Client,
        r: &Reference,
        auth: &RegistryAuth,
    ) -> Result<Option<HeaderValue>, OciDistributionError> {
        let value = match client.auth(r, auth, RegistryOperation::Pull).await? {
            Some(token) => Some(format!("Bearer {token}")),
            None => match auth {
                RegistryAuth::Basic(user, password) => {
                    use base64::Engine;
                    let pair = format!("{user}:{password}");
                    Some(format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD.encode(pair)
                    ))
                }
                RegistryAuth::Bearer(token) => Some(format!("Bearer {token}")),
                RegistryAuth::Anonymous => None,
            },
        };
        Ok(value.and_then(|v| {
            let mut h = HeaderValue::from_str(&v).ok()?;
            h.set_sensitive(true);
            Some(h)
        }))
    }

    /// GET the manifest: its bytes and the Docker-Content-Digest header.
    pub async fn get(
        &self,
        r: &Reference,
        authorization: Option<&HeaderValue>,
        accept: &[&str],
    ) -> Result<(Vec<u8>, Option<String>), GetError> {
        let url = self.url(r);
        let mut req = self.http.get(&url).header(ACCEPT, accept.join(", "));
        if let Some(h) = authorization {
            req = req.header(AUTHORIZATION, h.clone());
        }
        let mut res = req.send().await?;
        let status = res.status();
        if status != StatusCode::OK {
            let body = read_capped(&mut res, MAX_ERROR_BODY_BYTES)
                .await?
                .unwrap_or_default();
            return Err(status_error(status, &body, &url).into());
        }
        let digest = res
            .headers()
            .get("Docker-Content-Digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match read_capped(&mut res, MAX_MANIFEST_BYTES).await? {
            Some(body) => Ok((body, digest)),
            None => Err(GetError::TooLarge),
        }
    }
}

/// The body, or None as soon as it announces or reaches more than `cap` bytes.
/// An error body cut at the cap is returned cut (`cap` only bounds memory).
async fn read_capped(
    res: &mut reqwest_oci::Response,
    cap: u64,
) -> Result<Option<Vec<u8>>, reqwest_oci::Error> {
    if res.content_length().is_some_and(|n| n > cap) {
        return Ok(None);
    }
    let hint = res.content_length().unwrap_or(0).min(cap) as usize;
    let mut body = Vec::with_capacity(hint);
    while let Some(chunk) = res.chunk().await? {
        if (body.len() + chunk.len()) as u64 > cap {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// The error oci-client itself gives for a non-200 answer, so that the
/// caller's mapping (not found, unauthorized, ...) stays the same.
fn status_error(status: StatusCode, body: &[u8], url: &str) -> OciDistributionError {
    let url = url.to_string();
    if status == StatusCode::UNAUTHORIZED {
        return OciDistributionError::UnauthorizedError { url };
    }
    if status.is_success() {
        return OciDistributionError::SpecViolationError(format!(
            "expected HTTP status 200, got {status}"
        ));
    }
    if status.is_client_error()
        && let Ok(envelope) = serde_json::from_slice::<OciEnvelope>(body)
    {
        return OciDistributionError::RegistryError { envelope, url };
    }
    OciDistributionError::ServerError {
        code: status.as_u16(),
        url,
        message: String::from_utf8_lossy(body).chars().take(200).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn getter() -> ManifestGetter {
        ManifestGetter::new(
            vec!["127.0.0.1:5000".into()],
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
    }

    #[test]
    fn url_uses_tag_or_digest_and_the_configured_scheme() {
        let g = getter();
        let r: Reference = "127.0.0.1:5000/team/app:v1".parse().unwrap();
        assert_eq!(g.url(&r), "http://127.0.0.1:5000/v2/team/app/manifests/v1");
        let d = format!("sha256:{}", "a".repeat(64));
        let r: Reference = format!("registry.example:443/app@{d}").parse().unwrap();
        assert_eq!(
            g.url(&r),
            format!("https://registry.example:443/v2/app/manifests/{d}")
        );
    }

    #[test]
    fn status_errors_match_the_clients_own() {
        let url = "http://h/v2/a/manifests/v1";
        let env = br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"x"}]}"#;
        assert!(matches!(
            status_error(StatusCode::NOT_FOUND, env, url),
            OciDistributionError::RegistryError { .. }
        ));
        assert!(matches!(
            status_error(StatusCode::NOT_FOUND, b"nope", url),
            OciDistributionError::ServerError { code: 404, .. }
        ));
        assert!(matches!(
            status_error(StatusCode::UNAUTHORIZED, b"", url),
            OciDistributionError::UnauthorizedError { .. }
        ));
        assert!(matches!(
            status_error(StatusCode::BAD_GATEWAY, &[b'x'; 1000], url),
            OciDistributionError::ServerError { code: 502, ref message, .. } if message.len() == 200
        ));
    }
}
