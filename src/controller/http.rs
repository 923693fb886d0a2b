//! /metrics, /healthz and /readyz on `--metrics-listen` (plain HTTP).

use super::metrics::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Clone)]
pub struct HttpState {
    pub metrics: Arc<Metrics>,
    /// Set once the first leader-election round has finished (leading or standby).
    pub ready: Arc<AtomicBool>,
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

async fn readyz(State(s): State<HttpState>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no leader-election round yet\n",
        )
    }
}

/// Serve until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: HttpState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test]
    async fn endpoints_answer() {
        let state = HttpState {
            metrics: Arc::new(Metrics::new()),
            ready: Arc::new(AtomicBool::new(false)),
        };
        let call = |path: &'static str, st: HttpState| async move {
            let req = axum::http::Request::get(path)
                .body(axum::body::Body::empty())
                .unwrap();
            let resp = router(st).oneshot(req).await.unwrap();
            let code = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap();
            (code, String::from_utf8_lossy(&body).to_string())
        };
        assert_eq!(call("/healthz", state.clone()).await.0, StatusCode::OK);
        assert_eq!(
            call("/readyz", state.clone()).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        state.ready.store(true, Ordering::Relaxed);
        assert_eq!(call("/readyz", state.clone()).await.0, StatusCode::OK);
        let (code, body) = call("/metrics", state).await;
        assert_eq!(code, StatusCode::OK);
        assert!(
            body.contains("nfguard_controller_reconcile_duration_seconds"),
            "{body}"
        );
        assert!(body.contains("# EOF"), "{body}");
    }
}
