//! The reporter's metrics behind authentication and authorization, as
//! kube-rbac-proxy and controller-runtime's secure metrics serve them: HTTPS
//! (a self-signed certificate made at start, so a bearer token never crosses
//! the node network in clear), a bearer token checked with a TokenReview,
//! and a SubjectAccessReview for `get` on the non-resource URL `/metrics`.
//! The token must be issued for the reporter's own audience
//! (`--metrics-audience`, a projected token the scraper's pod mounts): one
//! the API server accepts is refused, so a node that receives a scraper's
//! token cannot replay it against the API server, and a stolen API token
//! does not scrape.
//! Answers are cached (`authz_cache`), reviews in flight are bounded, a
//! token that cannot be a ServiceAccount JWT is refused before any review
//! (`token_shape`), each source address may cause only a few reviews a
//! minute (`review_quota`), and a refusal says only 401, 403, 429 or 503
//! with a fixed body. The kubelet's probes go to a separate, data-free
//! listener (`health_router`).

use super::authz_cache::{Decision, DecisionCache, Limits, token_key};
use super::review_quota::ReviewQuota;
use super::token_shape;
use crate::runtime::admin::{Check, Exposition, METRICS_CONTENT_TYPE};
use crate::webhook::intake::Peer;
use axum::Extension;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// The URL and verb a scraper must be allowed (`nonResourceURLs: ["/metrics"]`).
pub const METRICS_PATH: &str = "/metrics";
pub const METRICS_VERB: &str = "get";

/// Longest `Authorization` header value looked at: a ServiceAccount JWT is
/// ~1 KiB; anything longer is refused before any review.
pub const MAX_TOKEN_BYTES: usize = 8 << 10;

/// The audience a scraper's token must be issued for (`--metrics-audience`).
pub const DEFAULT_AUDIENCE: &str = "nfguard-reporter-metrics";

/// How `--metrics-listen` is protected.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsAuth {
    /// HTTPS; a bearer token checked with TokenReview and SubjectAccessReview.
    Kubernetes,
    /// Plain HTTP without any check: only on a loopback address (debugging).
    None,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error(
        "--metrics-auth none serves metrics without any check: only on a loopback address, not {0}"
    )]
    OpenToTheNetwork(String),
    #[error("making the metrics TLS certificate: {0}")]
    Certificate(String),
}

/// `none` is allowed only where nothing off this machine can connect.
pub fn check_listen(auth: MetricsAuth, listen: &str) -> Result<(), AuthError> {
    let listen = listen.trim();
    if auth == MetricsAuth::Kubernetes || listen.is_empty() || listen == crate::runtime::admin::OFF
    {
        return Ok(());
    }
    match listen.parse::<std::net::SocketAddr>() {
        Ok(a) if a.ip().is_loopback() => Ok(()),
        _ => Err(AuthError::OpenToTheNetwork(listen.to_string())),
    }
}

/// Why a review could not decide (not cached; answered 503).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("{0}")]
    Api(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Who decides about a token: the API server in production.
#[async_trait::async_trait]
pub trait Reviewer: Send + Sync {
    async fn review(&self, token: &str) -> Result<Decision, ReviewError>;
}

/// TokenReview (for `audience`, if set), then SubjectAccessReview for the
/// user it names.
pub struct KubeReviewer {
    pub client: kube::Client,
    pub audience: Option<String>,
}

#[async_trait::async_trait]
impl Reviewer for KubeReviewer {
    async fn review(&self, token: &str) -> Result<Decision, ReviewError> {
        let pp = kube::api::PostParams::default();
        let tr = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: self.audience.clone().map(|a| vec![a]),
            },
            ..Default::default()
        };
        let tr = kube::Api::<TokenReview>::all(self.client.clone())
            .create(&pp, &tr)
            .await
            .map_err(|e| ReviewError::Api(format!("TokenReview: {e}")))?;
        let Some(user) = authenticated_user(tr.status, self.audience.as_deref()) else {
            return Ok(Decision::Unauthenticated);
        };
        let sar = SubjectAccessReview {
            spec: access_review(user),
            ..Default::default()
        };
        let sar = kube::Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&pp, &sar)
            .await
            .map_err(|e| ReviewError::Api(format!("SubjectAccessReview: {e}")))?;
        Ok(match sar.status {
            Some(s) if s.allowed => Decision::Allowed,
            _ => Decision::Forbidden,
        })
    }
}

/// The user a TokenReview authenticated, if it did so for `audience`: the
/// API server answers with the audiences it found the token valid for, and
/// an authenticator that ignores audiences (an empty list) is not taken for
/// a yes, as the API server's own webhook authenticator does not.
pub fn authenticated_user(
    status: Option<k8s_openapi::api::authentication::v1::TokenReviewStatus>,
    audience: Option<&str>,
) -> Option<k8s_openapi::api::authentication::v1::UserInfo> {
    let status = status.filter(|s| s.authenticated == Some(true))?;
    if let Some(want) = audience {
        let granted = status.audiences.as_deref().unwrap_or_default();
        if !granted.iter().any(|a| a == want) {
            return None;
        }
    }
    status.user
}

/// The question asked for an authenticated user: may they `get /metrics`?
pub fn access_review(
    user: k8s_openapi::api::authentication::v1::UserInfo,
) -> SubjectAccessReviewSpec {
    SubjectAccessReviewSpec {
        user: user.username,
        uid: user.uid,
        groups: user.groups,
        extra: user.extra,
        non_resource_attributes: Some(NonResourceAttributes {
            path: Some(METRICS_PATH.to_string()),
            verb: Some(METRICS_VERB.to_string()),
        }),
        ..Default::default()
    }
}

/// The bearer token of a request, if it carries exactly one usable one.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next()?;
    if values.next().is_some() || value.len() > MAX_TOKEN_BYTES {
        return None;
    }
    let value = value.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
        .then_some(token)
}

/// The outcome of one request's check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// 401: no token, or the API server does not know it.
    Unauthenticated,
    /// 403: a known identity without `get /metrics`.
    Forbidden,
    /// 429: every review slot is busy.
    Busy,
    /// 503: the API server could not be asked.
    Unavailable,
}

impl Verdict {
    pub fn status(self) -> StatusCode {
        match self {
            Verdict::Allowed => StatusCode::OK,
            Verdict::Unauthenticated => StatusCode::UNAUTHORIZED,
            Verdict::Forbidden => StatusCode::FORBIDDEN,
            Verdict::Busy => StatusCode::TOO_MANY_REQUESTS,
            Verdict::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// Decides requests: cache first, then at most `max_in_flight` reviews at
/// once, each bounded by `review_timeout`.
pub struct Guard {
    reviewer: Arc<dyn Reviewer>,
    cache: Mutex<DecisionCache>,
    quota: Mutex<ReviewQuota>,
    slots: Semaphore,
    review_timeout: Duration,
    audience: Option<String>,
}

impl Guard {
    pub fn new(
        reviewer: Arc<dyn Reviewer>,
        limits: Limits,
        max_in_flight: usize,
        review_timeout: Duration,
    ) -> Self {
        Self {
            reviewer,
            cache: Mutex::new(DecisionCache::new(limits)),
            quota: Mutex::new(ReviewQuota::new_default()),
            slots: Semaphore::new(max_in_flight),
            review_timeout,
            audience: None,
        }
    }

    /// Tokens whose `aud` claim does not name `audience` are refused
    /// without a review (the review itself asks for it too: `KubeReviewer`).
    pub fn with_audience(mut self, audience: Option<String>) -> Self {
        self.audience = audience;
        self
    }

    /// Another review quota per source address than the default.
    pub fn with_quota(mut self, quota: ReviewQuota) -> Self {
        self.quota = Mutex::new(quota);
        self
    }

    /// Reviews of the same token in a burst may each ask the API server
    /// (bounded by the slots); the first answer is then cached. A token
    /// that cannot be a ServiceAccount JWT is refused without a review, and
    /// `peer` (the connection's remote address) may cause only so many.
    pub async fn check(&self, headers: &HeaderMap, peer: Option<Peer>) -> Verdict {
        let Some(token) = bearer_token(headers) else {
            return Verdict::Unauthenticated;
        };
        let now_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if let Err(why) = token_shape::check(token, now_unix, self.audience.as_deref()) {
            tracing::debug!(%why, "metrics token refused without a review");
            return Verdict::Unauthenticated;
        }
        let key = token_key(token);
        let cached = self.lock().get(&key, Instant::now().into_std());
        let decision = match cached {
            Some(d) => d,
            None => {
                if let Some(Peer(ip)) = peer {
                    let mut quota = self.quota.lock().unwrap_or_else(|p| p.into_inner());
                    if !quota.take(ip, Instant::now().into_std()) {
                        tracing::debug!(%ip, "metrics review quota of the address spent");
                        return Verdict::Busy;
                    }
                }
                let Ok(_slot) = self.slots.try_acquire() else {
                    return Verdict::Busy;
                };
                let asked = tokio::time::timeout(self.review_timeout, self.reviewer.review(token));
                match asked.await {
                    Ok(Ok(d)) => {
                        self.lock().put(key, d, Instant::now().into_std());
                        d
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "metrics access review failed");
                        return Verdict::Unavailable;
                    }
                    Err(_) => {
                        let e = ReviewError::Timeout(self.review_timeout);
                        tracing::warn!(error = %e, "metrics access review failed");
                        return Verdict::Unavailable;
                    }
                }
            }
        };
        match decision {
            Decision::Allowed => Verdict::Allowed,
            Decision::Unauthenticated => Verdict::Unauthenticated,
            Decision::Forbidden => Verdict::Forbidden,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DecisionCache> {
        // A panic while holding the lock leaves a consistent cache: keep using it.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Secured {
    guard: Arc<Guard>,
    metrics: Arc<dyn Exposition>,
}

/// `GET /metrics` for allowed scrapers only; nothing else is served.
pub fn metrics_router(guard: Arc<Guard>, metrics: Arc<dyn Exposition>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(secured_scrape))
        .with_state(Arc::new(Secured { guard, metrics }))
}

async fn secured_scrape(
    State(s): State<Arc<Secured>>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
) -> Response {
    match s.guard.check(&headers, peer.map(|Extension(p)| p)).await {
        Verdict::Allowed => (
            [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
            s.metrics.encode(),
        )
            .into_response(),
        refused => refusal(refused),
    }
}

fn refusal(v: Verdict) -> Response {
    let body = match v {
        Verdict::Unauthenticated => "unauthorized\n",
        Verdict::Forbidden => "forbidden\n",
        Verdict::Busy => "too many requests\n",
        _ => "unavailable\n",
    };
    let mut resp = (v.status(), body).into_response();
    if v == Verdict::Unauthenticated {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    resp
}

/// `/healthz` and `/readyz` for the kubelet: a status code and a fixed
/// body, never a reason, a count or a metric.
pub fn health_router(live: Check, ready: Check) -> Router {
    Router::new()
        .route("/healthz", get(move || data_free(live.clone())))
        .route("/readyz", get(move || data_free(ready.clone())))
}

async fn data_free(check: Check) -> Response {
    match check() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "not ok\n").into_response(),
    }
}

/// TLS for the metrics listener: a self-signed certificate for `names`,
/// made at start and kept in memory only, and the store behind it, where
/// the certificate nfguard's signer issues (one scrapers can verify:
/// `serving_certs::request`) replaces it.
pub fn self_signed_store(
    names: Vec<String>,
) -> Result<
    (
        tokio_rustls::TlsAcceptor,
        std::sync::Arc<crate::webhook::tls::CertStore>,
    ),
    AuthError,
> {
    use crate::webhook::tls::{CertStore, load_pem, server_config};
    let cert = rcgen::generate_simple_self_signed(names)
        .map_err(|e| AuthError::Certificate(e.to_string()))?;
    let loaded = load_pem(
        cert.cert.pem().as_bytes(),
        cert.signing_key.serialize_pem().as_bytes(),
    )
    .map_err(|e| AuthError::Certificate(e.to_string()))?;
    let store = CertStore::new(None);
    store.set(loaded);
    Ok((
        tokio_rustls::TlsAcceptor::from(server_config(store.clone())),
        store,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::ServiceExt;

    /// Answers by token, counting reviews; request shapes only (the real
    /// reviews run against the API server in e2e scenario 16).
    struct Table {
        calls: AtomicUsize,
        delay: Duration,
    }

    #[async_trait::async_trait]
    impl Reviewer for Table {
        async fn review(&self, token: &str) -> Result<Decision, ReviewError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            match name_of(token).as_str() {
                "scraper" => Ok(Decision::Allowed),
                "tenant" => Ok(Decision::Forbidden),
                "broken" => Err(ReviewError::Api("connection refused".into())),
                _ => Ok(Decision::Unauthenticated),
            }
        }
    }

    fn guard(delay: Duration, slots: usize) -> (Arc<Guard>, Arc<Table>) {
        let table = Arc::new(Table {
            calls: AtomicUsize::new(0),
            delay,
        });
        let g = Guard::new(
            table.clone(),
            Limits::default(),
            slots,
            Duration::from_secs(5),
        );
        (Arc::new(g), table)
    }

    /// A ServiceAccount-shaped JWT whose subject is `name` (what the
    /// table answers by).
    fn tok(name: &str) -> String {
        use base64::Engine;
        let b = |s: String| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!(
            "{}.{}.{}",
            b(r#"{"alg":"RS256"}"#.to_string()),
            b(format!(r#"{{"sub":"{name}"}}"#)),
            b("signature".to_string())
        )
    }

    fn name_of(token: &str) -> String {
        use base64::Engine;
        let claims = token.split('.').nth(1).unwrap_or_default();
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        v["sub"].as_str().unwrap_or_default().to_string()
    }

    /// The `Authorization` header of `name`'s token.
    fn sa(name: &str) -> HeaderMap {
        bearer(&tok(name))
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        h
    }

    struct Fixture(prometheus_client::registry::Registry);
    impl Exposition for Fixture {
        fn registry(&self) -> &prometheus_client::registry::Registry {
            &self.0
        }
    }

    async fn scrape(app: &Router, headers: HeaderMap) -> (StatusCode, String) {
        let mut req = axum::http::Request::get(METRICS_PATH);
        for (k, v) in &headers {
            req = req.header(k, v);
        }
        let resp = app
            .clone()
            .oneshot(req.body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap();
        let code = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    fn app(g: Arc<Guard>) -> Router {
        let mut registry = prometheus_client::registry::Registry::with_prefix("nfguard_reporter");
        let c = prometheus_client::metrics::counter::Counter::<u64>::default();
        c.inc();
        registry.register("probes", "Node probes run", c);
        metrics_router(g, Arc::new(Fixture(registry)))
    }

    #[test]
    fn bearer_tokens_are_parsed_strictly() {
        assert_eq!(bearer_token(&bearer("abc.def")), Some("abc.def"));
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "bearer  x ".parse().unwrap());
        assert_eq!(bearer_token(&h), Some("x"), "scheme is case-insensitive");
        for bad in [
            "Basic dXNlcjpwdw==",
            "Bearer",
            "Bearer ",
            "Bearer a b",
            "token",
        ] {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, bad.parse().unwrap());
            assert_eq!(bearer_token(&h), None, "{bad}");
        }
        assert_eq!(bearer_token(&HeaderMap::new()), None);
        let mut two = bearer("a");
        two.append(header::AUTHORIZATION, "Bearer b".parse().unwrap());
        assert_eq!(bearer_token(&two), None, "two tokens: which one?");
        let long = "x".repeat(MAX_TOKEN_BYTES);
        assert_eq!(bearer_token(&bearer(&long)), None, "over the size bound");
    }

    #[tokio::test]
    async fn only_an_allowed_token_gets_the_metrics() {
        let (g, table) = guard(Duration::ZERO, 4);
        let app = app(g);
        let (code, body) = scrape(&app, HeaderMap::new()).await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::UNAUTHORIZED, "unauthorized\n")
        );
        assert_eq!(table.calls.load(Ordering::SeqCst), 0, "no token: no review");
        let (code, body) = scrape(&app, sa("stranger")).await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::UNAUTHORIZED, "unauthorized\n")
        );
        let (code, body) = scrape(&app, sa("tenant")).await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::FORBIDDEN, "forbidden\n")
        );
        let (code, body) = scrape(&app, sa("scraper")).await;
        assert_eq!(code, StatusCode::OK);
        assert!(body.contains("nfguard_reporter_probes_total 1"), "{body}");
        let (code, body) = scrape(&app, sa("broken")).await;
        assert_eq!(
            (code, body.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable\n")
        );
        assert!(
            !body.contains("refused"),
            "no error text reaches the client"
        );
    }

    #[tokio::test]
    async fn answers_are_cached_and_failures_are_not() {
        let (g, table) = guard(Duration::ZERO, 4);
        let app = app(g);
        for _ in 0..5 {
            assert_eq!(scrape(&app, sa("scraper")).await.0, StatusCode::OK);
            assert_eq!(scrape(&app, sa("tenant")).await.0, StatusCode::FORBIDDEN);
        }
        assert_eq!(
            table.calls.load(Ordering::SeqCst),
            2,
            "one review per token"
        );
        for _ in 0..3 {
            assert_eq!(
                scrape(&app, sa("broken")).await.0,
                StatusCode::SERVICE_UNAVAILABLE
            );
        }
        assert_eq!(
            table.calls.load(Ordering::SeqCst),
            5,
            "a failure is asked again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reviews_in_flight_are_bounded_and_timed_out() {
        let (g, table) = guard(Duration::from_secs(60), 2);
        let app = app(g);
        let slow: Vec<_> = (0..2)
            .map(|i| {
                let app = app.clone();
                tokio::spawn(async move { scrape(&app, sa(&format!("new-{i}"))).await.0 })
            })
            .collect();
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(table.calls.load(Ordering::SeqCst), 2);
        assert_eq!(
            scrape(&app, sa("third")).await.0,
            StatusCode::TOO_MANY_REQUESTS,
            "both slots busy: refused at once, the API server not asked"
        );
        assert_eq!(table.calls.load(Ordering::SeqCst), 2);
        for s in slow {
            assert_eq!(
                s.await.unwrap(),
                StatusCode::SERVICE_UNAVAILABLE,
                "5 s review timeout"
            );
        }
    }

    #[tokio::test]
    async fn health_is_data_free() {
        let app = health_router(
            Arc::new(|| Ok(())),
            Arc::new(|| Err("no status written yet".into())),
        );
        let get = |path: &'static str| {
            let app = app.clone();
            async move {
                let req = axum::http::Request::get(path)
                    .body(axum::body::Body::empty())
                    .unwrap();
                let resp = app.oneshot(req).await.unwrap();
                let code = resp.status();
                let body = axum::body::to_bytes(resp.into_body(), 1024).await.unwrap();
                (code, String::from_utf8_lossy(&body).into_owned())
            }
        };
        assert_eq!(get("/healthz").await, (StatusCode::OK, "ok\n".into()));
        assert_eq!(
            get("/readyz").await,
            (StatusCode::SERVICE_UNAVAILABLE, "not ok\n".into())
        );
        assert_eq!(
            get("/metrics").await.0,
            StatusCode::NOT_FOUND,
            "no metrics here"
        );
    }

    #[tokio::test]
    async fn served_over_tls_with_a_fresh_certificate() {
        let (g, _) = guard(Duration::ZERO, 4);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (acceptor, _) = self_signed_store(vec!["node-a".into(), "localhost".into()]).unwrap();
        let server = tokio::spawn(crate::webhook::server::serve_tls(
            listener,
            acceptor,
            app(g),
        ));
        let https = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()
            .unwrap();
        let url = format!("https://{addr}{METRICS_PATH}");
        let refused = https.get(&url).send().await.unwrap();
        assert_eq!(refused.status(), 401);
        assert_eq!(refused.headers()["www-authenticate"], "Bearer");
        let ok = https
            .get(&url)
            .bearer_auth(tok("scraper"))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
        assert!(
            ok.text()
                .await
                .unwrap()
                .contains("nfguard_reporter_probes_total 1")
        );
        // Plain HTTP on the TLS port gets no answer, and a verifying client
        // does not trust the self-signed certificate.
        assert!(
            reqwest::get(format!("http://{addr}{METRICS_PATH}"))
                .await
                .is_err()
        );
        assert!(reqwest::get(&url).await.is_err());
        server.abort();
    }

    #[test]
    fn unchecked_metrics_only_on_loopback() {
        use MetricsAuth::*;
        for ok in ["127.0.0.1:9090", "[::1]:9090", "off", ""] {
            assert!(check_listen(None, ok).is_ok(), "{ok}");
        }
        for bad in [
            "0.0.0.0:9090",
            "[::]:9090",
            "10.77.0.2:9090",
            "localhost:9090",
        ] {
            let e = check_listen(None, bad).unwrap_err().to_string();
            assert!(e.contains("only on a loopback address"), "{e}");
        }
        assert!(check_listen(Kubernetes, "0.0.0.0:9090").is_ok());
    }

    #[test]
    fn the_review_asks_for_get_on_the_metrics_url_as_the_token_s_user() {
        let spec = access_review(k8s_openapi::api::authentication::v1::UserInfo {
            username: Some("system:serviceaccount:monitoring:prometheus".into()),
            uid: Some("u1".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            extra: None,
        });
        assert_eq!(
            spec.user.as_deref(),
            Some("system:serviceaccount:monitoring:prometheus")
        );
        assert_eq!(spec.uid.as_deref(), Some("u1"));
        assert_eq!(
            spec.groups.as_deref(),
            Some(&["system:serviceaccounts".to_string()][..])
        );
        let nr = spec.non_resource_attributes.unwrap();
        assert_eq!(
            (nr.path.as_deref(), nr.verb.as_deref()),
            (Some("/metrics"), Some("get"))
        );
        assert!(spec.resource_attributes.is_none());
    }

    #[tokio::test]
    async fn made_up_tokens_are_refused_without_a_review() {
        let (g, table) = guard(Duration::ZERO, 4);
        let app = app(g);
        for made_up in ["random", "a.b.c", "x.y", &format!("{}.", tok("scraper"))] {
            assert_eq!(
                scrape(&app, bearer(made_up)).await,
                (StatusCode::UNAUTHORIZED, "unauthorized\n".to_string()),
                "{made_up}"
            );
        }
        assert_eq!(table.calls.load(Ordering::SeqCst), 0, "no review asked");
        assert_eq!(scrape(&app, sa("scraper")).await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn one_address_causes_only_its_quota_of_reviews() {
        let (g, table) = guard(Duration::ZERO, 4);
        let g = Arc::new(
            Arc::try_unwrap(g)
                .ok()
                .unwrap()
                .with_quota(ReviewQuota::new(3, Duration::from_secs(3600))),
        );
        let flooder = Some(Peer("10.0.0.7".parse().unwrap()));
        let scraper = Some(Peer("10.0.0.9".parse().unwrap()));
        let mut verdicts = Vec::new();
        for i in 0..10 {
            verdicts.push(g.check(&sa(&format!("made-up-{i}")), flooder).await);
        }
        assert_eq!(verdicts[..3], [Verdict::Unauthenticated; 3]);
        assert_eq!(
            verdicts[3..],
            [Verdict::Busy; 7],
            "429 once its quota is spent"
        );
        assert_eq!(table.calls.load(Ordering::SeqCst), 3, "3 reviews, not 10");
        // The scraper from another address is reviewed; its cached grant
        // then needs no review, so its own quota is never touched again.
        assert_eq!(g.check(&sa("scraper"), scraper).await, Verdict::Allowed);
        for _ in 0..10 {
            assert_eq!(g.check(&sa("scraper"), scraper).await, Verdict::Allowed);
        }
        assert_eq!(table.calls.load(Ordering::SeqCst), 4);
        // A cached refusal is answered without taking from the quota either.
        assert_eq!(
            g.check(&sa("made-up-0"), flooder).await,
            Verdict::Unauthenticated
        );
    }

    #[test]
    fn a_review_counts_only_for_the_audience_asked() {
        use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};
        let status = |auds: Option<Vec<&str>>| {
            Some(TokenReviewStatus {
                authenticated: Some(true),
                audiences: auds.map(|a| a.into_iter().map(String::from).collect()),
                user: Some(UserInfo {
                    username: Some("system:serviceaccount:monitoring:prometheus-k8s".into()),
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let ours = Some(DEFAULT_AUDIENCE);
        assert!(authenticated_user(status(Some(vec![DEFAULT_AUDIENCE])), ours).is_some());
        assert!(
            authenticated_user(status(Some(vec![])), ours).is_none(),
            "an authenticator that ignores audiences is no yes"
        );
        assert!(authenticated_user(status(None), ours).is_none());
        assert!(
            authenticated_user(status(Some(vec!["https://kubernetes.default.svc"])), ours)
                .is_none()
        );
        assert!(
            authenticated_user(status(None), None).is_some(),
            "no audience asked: the API server's own"
        );
        let mut refused = status(Some(vec![DEFAULT_AUDIENCE]));
        refused.as_mut().unwrap().authenticated = Some(false);
        assert!(authenticated_user(refused, ours).is_none());
    }

    #[tokio::test]
    async fn a_token_for_another_audience_is_refused_without_a_review() {
        use base64::Engine;
        let (g, table) = guard(Duration::ZERO, 4);
        let g = Arc::try_unwrap(g)
            .ok()
            .unwrap()
            .with_audience(Some(DEFAULT_AUDIENCE.into()));
        let app = app(Arc::new(g));
        let b = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let with_aud = |aud: &str| {
            format!(
                "{}.{}.{}",
                b(r#"{"alg":"RS256"}"#),
                b(&format!(r#"{{"sub":"scraper","aud":{aud}}}"#)),
                b("signature")
            )
        };
        for other in [
            tok("scraper"),
            with_aud(r#"["https://kubernetes.default.svc"]"#),
        ] {
            assert_eq!(
                scrape(&app, bearer(&other)).await,
                (StatusCode::UNAUTHORIZED, "unauthorized\n".to_string())
            );
        }
        assert_eq!(table.calls.load(Ordering::SeqCst), 0, "no review asked");
        let ours = with_aud(&format!(r#"["{DEFAULT_AUDIENCE}"]"#));
        assert_eq!(scrape(&app, bearer(&ours)).await.0, StatusCode::OK);
        assert_eq!(table.calls.load(Ordering::SeqCst), 1);
    }
}
