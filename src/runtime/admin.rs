//! The admin surface of every long-running component: `/healthz`
//! (liveness), `/readyz` (readiness) and `/metrics` (the component's
//! Prometheus registry), served on plain HTTP. Each component says what
//! "live" and "ready" mean for it; the routes, bodies and content type are
//! defined once here.

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What prometheus-client's text encoder writes: OpenMetrics 1.0 text
/// (ends in `# EOF`), which Prometheus negotiates for.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The value of `--metrics-listen` that turns the admin server off.
pub const OFF: &str = "off";

/// A health answer: fine, or why not (the 503 body names it).
pub type Health = Result<(), Cow<'static, str>>;

/// A liveness or readiness check, called once per probe.
pub type Check = Arc<dyn Fn() -> Health + Send + Sync>;

/// A component's metrics: the registry `/metrics` encodes.
pub trait Exposition: Send + Sync {
    fn registry(&self) -> &Registry;

    /// The text exposition format, as `/metrics` serves it.
    fn encode(&self) -> String {
        encode(self.registry())
    }
}

/// The registry in the text exposition format. Writing to a String only
/// fails on a collector's own fmt error; that scrape is then empty.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
        out.clear();
    }
    out
}

/// What the admin routes answer from.
#[derive(Clone)]
pub struct Admin {
    /// `/healthz`: a failing answer makes the kubelet restart the container.
    pub live: Check,
    /// `/readyz`: a failing answer takes the pod out of its Services.
    pub ready: Check,
    pub metrics: Arc<dyn Exposition>,
}

impl Admin {
    /// Always live and always ready until told otherwise.
    pub fn new(metrics: Arc<dyn Exposition>) -> Self {
        Self {
            live: always(),
            ready: always(),
            metrics,
        }
    }

    pub fn live(mut self, check: impl Fn() -> Health + Send + Sync + 'static) -> Self {
        self.live = Arc::new(check);
        self
    }

    pub fn ready(mut self, check: impl Fn() -> Health + Send + Sync + 'static) -> Self {
        self.ready = Arc::new(check);
        self
    }
}

/// `Ok` when `ok`, else unhealthy because of `why`.
pub fn health(ok: bool, why: &'static str) -> Health {
    if ok { Ok(()) } else { Err(Cow::Borrowed(why)) }
}

/// A check that always passes.
pub fn always() -> Check {
    Arc::new(|| Ok(()))
}

/// `GET /healthz`, `/readyz`, `/metrics`.
pub fn router(admin: Admin) -> Router {
    let Admin {
        live,
        ready,
        metrics,
    } = admin;
    Router::new()
        .route("/healthz", get(move || probe(live.clone())))
        .route("/readyz", get(move || probe(ready.clone())))
        .route("/metrics", get(move || scrape(metrics.clone())))
}

async fn probe(check: Check) -> Response {
    match check() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

async fn scrape(metrics: Arc<dyn Exposition>) -> Response {
    (
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        metrics.encode(),
    )
        .into_response()
}

#[derive(Debug, thiserror::Error)]
#[error("listening on {addr} (--metrics-listen): {source}")]
pub struct BindError {
    pub addr: String,
    #[source]
    pub source: std::io::Error,
}

/// Bind the admin address; "off" (or nothing) means no admin server.
pub async fn bind(addr: &str) -> Result<Option<TcpListener>, BindError> {
    let addr = addr.trim();
    if addr.is_empty() || addr == OFF {
        return Ok(None);
    }
    TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|source| BindError {
            addr: addr.to_string(),
            source,
        })
}

/// A running admin server: where it listens, and its task (ends after the
/// shutdown future resolves and open requests finish).
pub struct Serving {
    pub local: SocketAddr,
    pub task: JoinHandle<()>,
}

/// Bind `addr` and serve `app` there until `shutdown`; `Ok(None)` when the
/// address is "off". A server that fails after binding is logged.
pub async fn spawn(
    addr: &str,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Option<Serving>, BindError> {
    let Some(listener) = bind(addr).await? else {
        return Ok(None);
    };
    let local = listener.local_addr().map_err(|source| BindError {
        addr: addr.to_string(),
        source,
    })?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, %local, "admin server stopped");
        }
    });
    Ok(Some(Serving { local, task }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tower::ServiceExt;

    struct Fixture {
        registry: Registry,
        hits: Counter,
    }

    impl Exposition for Fixture {
        fn registry(&self) -> &Registry {
            &self.registry
        }
    }

    fn fixture() -> Arc<Fixture> {
        let mut registry = Registry::with_prefix("nfguard_test");
        let hits = Counter::default();
        registry.register("hits", "Things that happened", hits.clone());
        Arc::new(Fixture { registry, hits })
    }

    async fn get(app: &Router, path: &str) -> (StatusCode, Option<String>, String) {
        let req = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .expect("a request");
        let resp = app.clone().oneshot(req).await.expect("an answer");
        let status = resp.status();
        let ctype = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .expect("a body");
        (status, ctype, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn checks_decide_health_and_readiness_with_their_reason() {
        let live = Arc::new(AtomicBool::new(true));
        let ready = Arc::new(AtomicBool::new(false));
        let (l, r) = (live.clone(), ready.clone());
        let app = router(
            Admin::new(fixture())
                .live(move || match l.load(Ordering::Relaxed) {
                    true => Ok(()),
                    false => Err("loop stalled".into()),
                })
                .ready(move || match r.load(Ordering::Relaxed) {
                    true => Ok(()),
                    false => Err(format!("not ready: {} caches", 2).into()),
                }),
        );
        assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);
        let (code, _, body) = get(&app, "/readyz").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "not ready: 2 caches\n");

        ready.store(true, Ordering::Relaxed);
        live.store(false, Ordering::Relaxed);
        assert_eq!(get(&app, "/readyz").await.0, StatusCode::OK);
        let (code, _, body) = get(&app, "/healthz").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "loop stalled\n");
    }

    #[tokio::test]
    async fn metrics_are_the_registry_in_openmetrics_text() {
        let metrics = fixture();
        let app = router(Admin::new(metrics.clone()));
        metrics.hits.inc();
        metrics.hits.inc();
        let (code, ctype, body) = get(&app, "/metrics").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(ctype.as_deref(), Some(METRICS_CONTENT_TYPE));
        assert!(body.contains("# TYPE nfguard_test_hits counter"), "{body}");
        assert!(body.contains("nfguard_test_hits_total 2"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
        // Encoded at each scrape, not once.
        metrics.hits.inc();
        assert!(
            get(&app, "/metrics")
                .await
                .2
                .contains("nfguard_test_hits_total 3")
        );
        assert_eq!(get(&app, "/nothing").await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn off_serves_nothing_and_a_taken_port_is_a_clear_error() {
        assert!(bind("off").await.unwrap().is_none());
        assert!(bind("").await.unwrap().is_none());
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let err = bind(&addr).await.unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("listening on {addr} (--metrics-listen): ")),
            "{err}"
        );
        assert!(bind("not an address").await.is_err());
    }

    #[tokio::test]
    async fn spawn_serves_over_tcp_until_shutdown() {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let app = router(Admin::new(fixture()));
        let serving = spawn("127.0.0.1:0", app, async {
            let _ = stop_rx.await;
        })
        .await
        .unwrap()
        .expect("an address, not off");
        let url = format!("http://{}/healthz", serving.local);
        let resp = reqwest::get(&url).await.expect("served");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await.unwrap(), "ok\n");
        stop_tx.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), serving.task)
            .await
            .expect("stops after shutdown")
            .unwrap();
        assert!(reqwest::get(&url).await.is_err(), "listener closed");
        assert!(
            spawn("off", router(Admin::new(fixture())), async {})
                .await
                .unwrap()
                .is_none()
        );
    }
}
