//! The one HTTP client every registry request goes through, with the egress
//! policy enforced where connections are made: a resolver that drops refused
//! addresses, a check of IP-literal hosts (no resolver runs for them) before
//! each request and each redirect hop, a redirect policy (few hops, never
//! https -> http), and no proxy taken from the environment.

use super::egress::{EgressPolicy, EgressRefused, Refusal};
use reqwest_oci::dns::{Addrs, Name, Resolve, Resolving};
use reqwest_oci::{Certificate, Client, RequestBuilder, Response, Url, redirect};
use std::sync::Arc;
use std::time::Duration;

/// Redirect hops followed at most (a registry sends blobs to storage: one).
pub const MAX_REDIRECTS: usize = 3;

/// Why a request failed, before any status was seen. Kept coarse on purpose:
/// what an admission client may learn is "refused" or "unreachable", never
/// the difference between a closed port and a silent one.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("{0}")]
    Refused(EgressRefused),
    #[error("redirect refused: {0}")]
    Redirect(RedirectRefused),
    #[error("unreachable")]
    Unreachable,
    /// The registry's certificate does not chain to a trusted CA (a private
    /// registry needs `--registry-ca`): a fixed text, nothing of the peer's.
    #[error("unreachable (TLS certificate not trusted; a private CA needs --registry-ca)")]
    Untrusted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RedirectRefused {
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooMany,
    #[error("https redirected to plain http")]
    Downgrade,
    #[error("redirect to an unsupported URL")]
    BadUrl,
}

/// Resolves with the system resolver, then keeps only addresses the policy
/// allows for the name; none left is a refusal.
struct PolicyResolver {
    policy: Arc<EgressPolicy>,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let refused = |refusal| {
                Box::new(EgressRefused {
                    host: host.clone(),
                    refusal,
                }) as Box<dyn std::error::Error + Send + Sync>
            };
            policy.check_name(&host).map_err(refused)?;
            let addrs: Vec<_> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut first_refusal = None;
            let allowed: Vec<_> = addrs
                .into_iter()
                .filter(|a| match policy.check_addr(&host, a.ip()) {
                    Ok(()) => true,
                    Err(r) => {
                        tracing::debug!(host, addr = %a.ip(), reason = %r, "registry address refused by the egress policy");
                        first_refusal.get_or_insert(r);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                return Err(refused(first_refusal.unwrap_or(Refusal::NoAddress)));
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

fn redirect_policy(policy: Arc<EgressPolicy>) -> redirect::Policy {
    redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(RedirectRefused::TooMany);
        }
        let from_https = attempt
            .previous()
            .last()
            .is_some_and(|u| u.scheme() == "https");
        let next = attempt.url();
        if from_https && next.scheme() != "https" {
            return attempt.error(RedirectRefused::Downgrade);
        }
        match check_url(&policy, next) {
            Ok(()) => attempt.follow(),
            Err(SendError::Refused(e)) => attempt.error(e),
            Err(_) => attempt.error(RedirectRefused::BadUrl),
        }
    })
}

/// Scheme and host of a URL we are about to request (or follow).
fn check_url(policy: &EgressPolicy, url: &Url) -> Result<(), SendError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(SendError::Redirect(RedirectRefused::BadUrl));
    }
    let host = url
        .host_str()
        .ok_or(SendError::Redirect(RedirectRefused::BadUrl))?;
    policy.check_url_host(host).map_err(|refusal| {
        SendError::Refused(EgressRefused {
            host: host.to_string(),
            refusal,
        })
    })
}

#[derive(Clone)]
pub struct Http {
    client: Client,
    policy: Arc<EgressPolicy>,
}

impl Http {
    pub fn new(
        policy: EgressPolicy,
        connect_timeout: Duration,
        read_timeout: Duration,
        extra_roots_pem: &[u8],
    ) -> Result<Self, String> {
        let policy = Arc::new(policy);
        let mut builder = Client::builder()
            .no_proxy()
            .dns_resolver(PolicyResolver {
                policy: policy.clone(),
            })
            .redirect(redirect_policy(policy.clone()))
            .referer(false)
            .connect_timeout(connect_timeout)
            .read_timeout(read_timeout);
        if !extra_roots_pem.is_empty() {
            let certs = Certificate::from_pem_bundle(extra_roots_pem)
                .map_err(|_| "extra registry CA certificates are not PEM".to_string())?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| format!("cannot build the registry HTTP client: {e}"))?;
        Ok(Self { client, policy })
    }

    pub fn get(&self, url: Url) -> RequestBuilder {
        self.client.get(url)
    }

    /// Send `req` (built by `get`) after checking its URL; errors classified.
    pub async fn send(&self, req: RequestBuilder) -> Result<Response, SendError> {
        let req = req.build().map_err(|_| SendError::Unreachable)?;
        check_url(&self.policy, req.url())?;
        self.client.execute(req).await.map_err(classify)
    }
}

/// The policy's or the redirect policy's own error if it is in the chain,
/// else "unreachable" (the details go to the debug log, never to users).
pub fn classify(e: reqwest_oci::Error) -> SendError {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<EgressRefused>() {
            return SendError::Refused(r.clone());
        }
        if let Some(r) = err.downcast_ref::<RedirectRefused>() {
            return SendError::Redirect(*r);
        }
        if is_untrusted_certificate(err) {
            tracing::debug!(error = %error_chain(&e), "registry certificate not trusted");
            return SendError::Untrusted;
        }
        cur = err.source();
    }
    tracing::debug!(error = %error_chain(&e), "registry request failed");
    SendError::Unreachable
}

/// rustls' verdict on the peer's certificate, also inside `io::Error`s
/// (nested by the connector; their `source` skips the error they wrap).
fn is_untrusted_certificate(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = err;
    // A few levels at most; bounded all the same.
    for _ in 0..8 {
        if let Some(tls) = cur.downcast_ref::<rustls::Error>() {
            return matches!(tls, rustls::Error::InvalidCertificate(_));
        }
        match cur
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => cur = inner,
            None => return false,
        }
    }
    false
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
