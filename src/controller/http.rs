//! The controller's admin surface on `--metrics-listen`: always live, ready
//! once the first leader-election round has finished (leading or standby).

use crate::controller::metrics::Metrics;
use crate::runtime::admin::{self, Admin, health};
use axum::Router;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Clone)]
pub struct HttpState {
    pub metrics: Arc<Metrics>,
    /// Set once the first leader-election round has finished (leading or standby).
    pub ready: Arc<AtomicBool>,
}

pub fn admin(state: HttpState) -> Admin {
    let ready = state.ready;
    Admin::new(state.metrics).ready(move || {
        let done = ready.load(Ordering::Relaxed);
        health(done, "not ready: no leader-election round yet")
    })
}

pub fn router(state: HttpState) -> Router {
    admin::router(admin(state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
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
