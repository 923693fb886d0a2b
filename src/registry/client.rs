//! A small OCI distribution client: manifests (size-capped) and blobs
//! (streamed) for one repository and one set of credentials, with the
//! registry token dance. Every request goes through `http::Http` (egress
//! policy, redirects); every failure becomes a `RegistryError` that names
//! the registry, the HTTP status and a fixed reason, never a response body
//! or the text of a connection error.

use super::http::{Http, SendError};
use super::manifest_get::{read_capped, url};
use super::token::{self, AuthCache, AuthKey, Challenge};
use super::{Credentials, MAX_MANIFEST_BYTES, RegistryError};
use bytes::Bytes;
use futures::Stream;
use oci_client::Reference;
use reqwest_oci::header::{ACCEPT, AUTHORIZATION, HeaderValue, WWW_AUTHENTICATE};
use reqwest_oci::{Response, StatusCode, Url};
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// Basic credentials answering a Basic challenge are reused this long.
const BASIC_TTL: Duration = Duration::from_secs(3600);
/// What users see when the egress policy refused a host or address.
pub const EGRESS_REFUSED: &str = "refused by the registry egress policy";

/// What every inspection shares: the HTTP client (or why it could not be
/// built), the Authorization cache, and which registries speak plain HTTP.
pub struct Transport {
    http: Result<Http, String>,
    auth: AuthCache,
    insecure_registries: Vec<String>,
}

impl Transport {
    pub fn new(http: Result<Http, String>, insecure_registries: Vec<String>) -> Self {
        Self {
            http,
            auth: AuthCache::default(),
            insecure_registries,
        }
    }
}

/// One repository of one registry, with one set of credentials.
pub struct Client {
    transport: Arc<Transport>,
    registry: String,
    repository: String,
    credentials: Credentials,
    key: AuthKey,
}

/// `sha256:` and 64 lower-case hex digits: the only digests we fetch by,
/// so that a digest a registry names can neither shape a URL nor put its
/// own text into a message.
pub fn is_sha256_digest(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

impl Client {
    pub fn new(transport: Arc<Transport>, r: &Reference, credentials: Credentials) -> Self {
        let registry = r.resolve_registry().to_string();
        let repository = r.repository().to_string();
        let key = (
            registry.clone(),
            repository.clone(),
            token::credential_identity(&credentials),
        );
        Self {
            transport,
            registry,
            repository,
            credentials,
            key,
        }
    }

    fn http(&self) -> Result<&Http, RegistryError> {
        self.transport
            .http
            .as_ref()
            .map_err(|e| RegistryError::Internal(e.clone()))
    }

    fn insecure(&self) -> bool {
        self.transport.insecure_registries.contains(&self.registry)
    }

    /// The registry did not answer: unreachable, 429, 5xx.
    fn outage(&self, detail: impl Into<String>) -> RegistryError {
        self.network(detail, true)
    }

    fn network(&self, detail: impl Into<String>, outage: bool) -> RegistryError {
        RegistryError::Network {
            registry: self.registry.clone(),
            detail: detail.into(),
            outage,
        }
    }

    fn unauthorized(&self, detail: impl Into<String>) -> RegistryError {
        RegistryError::Unauthorized {
            registry: self.registry.clone(),
            detail: detail.into(),
        }
    }

    fn send_error(&self, e: SendError) -> RegistryError {
        match e {
            SendError::Refused(r) => {
                tracing::debug!(registry = %self.registry, host = %r.host, reason = %r.refusal, "registry request refused by the egress policy");
                self.network(EGRESS_REFUSED, false)
            }
            SendError::Redirect(r) => self.network(format!("redirect refused ({r})"), false),
            SendError::Unreachable => self.outage(SendError::Unreachable.to_string()),
            // Someone answered, with a certificate nfguard does not trust.
            e @ SendError::Untrusted => self.network(e.to_string(), false),
        }
    }

    /// A non-success status as the registry host, the status and a reason.
    fn status_error(&self, status: StatusCode, what: &str) -> RegistryError {
        let code = status.as_u16();
        match code {
            404 => RegistryError::NotFound { what: what.into() },
            401 | 403 => self.unauthorized(format!("HTTP {code}")),
            429 | 500..=599 => self.outage(format!("HTTP {code}")),
            _ => RegistryError::Protocol {
                reference: what.into(),
                detail: format!("unexpected HTTP {code} from {}", self.registry),
            },
        }
    }

    fn url(&self, r: &Reference, kind: &str, target: &str) -> Result<Url, RegistryError> {
        url(self.insecure(), r, kind, target).ok_or_else(|| RegistryError::InvalidReference {
            reference: r.whole(),
            reason: "does not make a valid registry URL".into(),
        })
    }

    async fn send(
        &self,
        url: &Url,
        accept: Option<&str>,
        authorization: Option<&HeaderValue>,
    ) -> Result<Response, RegistryError> {
        let http = self.http()?;
        let mut req = http.get(url.clone());
        if let Some(a) = accept {
            req = req.header(ACCEPT, a);
        }
        if let Some(h) = authorization {
            req = req.header(AUTHORIZATION, h.clone());
        }
        http.send(req).await.map_err(|e| self.send_error(e))
    }

    /// GET `url`, authenticating once if the registry asks to; a 200 or an error.
    async fn get(
        &self,
        url: &Url,
        accept: Option<&str>,
        what: &str,
    ) -> Result<Response, RegistryError> {
        let cached = self.transport.auth.get(&self.key);
        let res = self.send(url, accept, cached.as_ref()).await?;
        if res.status() != StatusCode::UNAUTHORIZED {
            return self.ok_or_error(res, what);
        }
        self.transport.auth.remove(&self.key);
        let challenge = res
            .headers()
            .get(WWW_AUTHENTICATE)
            .ok_or_else(|| self.unauthorized("HTTP 401 without an authentication challenge"))
            .and_then(|h| {
                token::parse_challenge(h.as_bytes()).map_err(|reason| self.unauthorized(reason))
            })?;
        drop(res);
        let (authorization, ttl) = self.authorize(url, challenge).await?;
        self.transport
            .auth
            .insert(self.key.clone(), authorization.clone(), ttl);
        let res = self.send(url, accept, Some(&authorization)).await?;
        if res.status() == StatusCode::UNAUTHORIZED {
            return Err(self.unauthorized(match self.credentials {
                Credentials::Anonymous => "HTTP 401 (credentials needed)",
                Credentials::Basic { .. } => "HTTP 401 with the credentials given",
            }));
        }
        self.ok_or_error(res, what)
    }

    fn ok_or_error(&self, res: Response, what: &str) -> Result<Response, RegistryError> {
        if res.status() == StatusCode::OK {
            Ok(res)
        } else {
            Err(self.status_error(res.status(), what))
        }
    }

    /// What to send as Authorization after `challenge` (and for how long).
    async fn authorize(
        &self,
        resource: &Url,
        challenge: Challenge,
    ) -> Result<(HeaderValue, Duration), RegistryError> {
        let basic = match &self.credentials {
            Credentials::Basic { username, password } => Some(
                token::basic_header(username, password)
                    .ok_or_else(|| self.unauthorized("credentials do not fit in a header"))?,
            ),
            Credentials::Anonymous => None,
        };
        let realm = match challenge {
            Challenge::Basic => {
                return basic
                    .map(|b| (b, BASIC_TTL))
                    .ok_or_else(|| self.unauthorized("HTTP 401 (credentials needed)"));
            }
            Challenge::Bearer { realm, service } => {
                let mut realm = Url::parse(&realm)
                    .map_err(|_| self.unauthorized("token realm is not a URL"))?;
                if !matches!(realm.scheme(), "http" | "https") {
                    return Err(self.unauthorized("token realm is not an http(s) URL"));
                }
                if resource.scheme() == "https" && realm.scheme() != "https" {
                    return Err(self.unauthorized("token realm downgrades https to http"));
                }
                {
                    let mut q = realm.query_pairs_mut();
                    if let Some(s) = service {
                        q.append_pair("service", &s);
                    }
                    q.append_pair("scope", &format!("repository:{}:pull", self.repository));
                }
                realm
            }
        };
        let mut res = self.send(&realm, None, basic.as_ref()).await?;
        match res.status() {
            StatusCode::OK => {}
            s @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                return Err(self.unauthorized(format!(
                    "the token service refused the credentials (HTTP {})",
                    s.as_u16()
                )));
            }
            s => {
                let code = s.as_u16();
                let detail = format!("token service answered HTTP {code}");
                return Err(self.network(detail, matches!(code, 429 | 500..=599)));
            }
        }
        let body = read_capped(&mut res, token::MAX_TOKEN_RESPONSE_BYTES)
            .await
            .map_err(|_| self.outage("unreachable"))?
            .ok_or_else(|| self.unauthorized("token response is too large"))?;
        token::parse_token_response(&body).map_err(|reason| self.unauthorized(reason))
    }

    /// The manifest `r` names (at most `MAX_MANIFEST_BYTES`) and the
    /// Docker-Content-Digest header when it is a well-formed sha256 digest.
    pub async fn manifest(
        &self,
        r: &Reference,
        accept: &[&str],
    ) -> Result<(Vec<u8>, Option<String>), RegistryError> {
        let target = r.digest().or(r.tag()).unwrap_or("latest");
        let url = self.url(r, "manifests", target)?;
        let what = format!("manifest {}", r.whole());
        let mut res = self.get(&url, Some(&accept.join(", ")), &what).await?;
        let digest = res
            .headers()
            .get("Docker-Content-Digest")
            .and_then(|v| v.to_str().ok())
            .filter(|d| is_sha256_digest(d))
            .map(str::to_string);
        match read_capped(&mut res, MAX_MANIFEST_BYTES)
            .await
            .map_err(|_| self.outage("unreachable"))?
        {
            Some(body) => Ok((body, digest)),
            None => Err(RegistryError::ManifestTooLarge {
                reference: r.whole(),
                limit: MAX_MANIFEST_BYTES,
            }),
        }
    }

    /// The blob `digest` of `r`'s repository as a stream of chunks; a
    /// broken connection ends it with an I/O error in our words.
    pub async fn blob(
        &self,
        r: &Reference,
        digest: &str,
    ) -> Result<impl Stream<Item = io::Result<Bytes>> + Unpin + use<>, RegistryError> {
        if !is_sha256_digest(digest) {
            return Err(RegistryError::Protocol {
                reference: r.whole(),
                detail: "a blob digest is not sha256 and 64 hex digits".into(),
            });
        }
        let url = self.url(r, "blobs", digest)?;
        let res = self
            .get(&url, None, &format!("blob {digest} of {}", r.whole()))
            .await?;
        Ok(Box::pin(futures::stream::unfold(Some(res), |res| async {
            let mut res = res?;
            match res.chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk), Some(res))),
                Ok(None) => None,
                Err(e) => {
                    tracing::debug!(error = %e, "registry blob stream failed");
                    Some((
                        Err(io::Error::other("connection to the registry failed")),
                        None,
                    ))
                }
            }
        })))
    }
}
