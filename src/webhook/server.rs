//! HTTP surface: the axum router (tests call it without a socket) and the
//! accept loops for HTTPS (rustls) and the plain metrics listener.

use super::admission::Judge;
use super::metrics::Metrics;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// Bodies above this are refused with 413 (a real AdmissionReview of a big
/// pod is well below 1 MiB; the API server's own object limit is 1.5 MiB).
pub const MAX_BODY_BYTES: usize = 3 << 20;

#[derive(Clone)]
pub struct AppState {
    pub judge: Arc<Judge>,
    pub metrics: Arc<Metrics>,
    /// Caches/reflectors synced (and, with TLS, a certificate loaded).
    pub ready: Arc<dyn Fn() -> bool + Send + Sync>,
}

/// `POST /validate`, `GET /healthz`, `/readyz`, `/metrics`.
pub fn router(state: AppState) -> Router {
    let timeout = state.judge.timeout + Duration::from_secs(1);
    // One Arc for the handlers: axum clones the state per request, and one
    // shared counter bounces between cores less than three.
    let state = Arc::new(state);
    Router::new()
        .route("/validate", post(validate))
        .merge(health_router())
        .with_state(state)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // A client trickling its body cannot hold a request open past the budget.
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
}

/// `/healthz`, `/readyz`, `/metrics` (also alone on the plain `--metrics-listen` port).
fn health_router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

pub fn metrics_router(state: AppState) -> Router {
    health_router().with_state(Arc::new(state))
}

async fn validate(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    let start = std::time::Instant::now();
    let out = s.judge.review(&body).await;
    s.metrics
        .observe_review(out.kind, out.verdict, start.elapsed().as_secs_f64());
    let status = StatusCode::from_u16(out.status).unwrap_or(StatusCode::OK);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        out.body,
    )
        .into_response()
}

async fn readyz(State(s): State<Arc<AppState>>) -> Response {
    if (s.ready)() {
        (StatusCode::OK, "ready").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet").into_response()
    }
}

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.render(),
    )
        .into_response()
}

/// Accept TLS connections forever; each connection on its own task, the
/// handshake bounded so a silent client cannot pin a task.
pub async fn serve_tls(listener: TcpListener, acceptor: TlsAcceptor, app: Router) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            let tls =
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
            serve_conn(TokioIo::new(tls), app).await;
        });
    }
}

/// Plain HTTP (metrics/health port).
pub async fn serve_plain(listener: TcpListener, app: Router) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let app = app.clone();
        tokio::spawn(async move { serve_conn(TokioIo::new(tcp), app).await });
    }
}

async fn serve_conn<I>(io: I, app: Router)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = TowerToHyperService::new(app);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    if let Err(e) = builder.serve_connection(io, svc).await {
        tracing::debug!(error = %e, "connection ended");
    }
}
