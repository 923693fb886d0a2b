//! /metrics (Prometheus text), /healthz (the loop is turning) and /readyz
//! (a status has been written). Labels are fixed and bounded.

use crate::runtime::admin::{self, Admin, Check, Exposition, health};
use crate::runtime::clock::{Clock, SystemClock, unix_seconds};
use axum::Router;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

pub struct Metrics {
    registry: Registry,
    pub probes: Counter,
    pub probe_failures: Counter,
    pub writes: Counter,
    pub write_failures: Counter,
    pub nft_notifications: Counter,
    pub xt_changes: Counter,
    pub last_write_timestamp: Gauge,
    ready: AtomicBool,
    /// Unix seconds of the loop's last turn.
    alive: AtomicI64,
    /// The loop is healthy while it turned within this many seconds.
    stale_after: i64,
}

impl Metrics {
    pub fn new(stale_after_seconds: i64) -> Arc<Self> {
        let mut registry = Registry::with_prefix("nfguard_reporter");
        registry.register_collector(Box::new(crate::runtime::allocator::HeapCollector));
        let m = Metrics {
            probes: Counter::default(),
            probe_failures: Counter::default(),
            writes: Counter::default(),
            write_failures: Counter::default(),
            nft_notifications: Counter::default(),
            xt_changes: Counter::default(),
            last_write_timestamp: Gauge::default(),
            ready: AtomicBool::new(false),
            alive: AtomicI64::new(0),
            stale_after: stale_after_seconds,
            registry: Registry::default(),
        };
        registry.register("probes", "Node probes run", m.probes.clone());
        registry.register(
            "probe_failures",
            "Probes that could not run at all",
            m.probe_failures.clone(),
        );
        registry.register("status_writes", "Status writes accepted", m.writes.clone());
        registry.register(
            "status_write_failures",
            "Status writes that failed (retried with back-off)",
            m.write_failures.clone(),
        );
        registry.register(
            "nft_notifications",
            "Batches of nf_tables change notifications received",
            m.nft_notifications.clone(),
        );
        registry.register(
            "xtables_changes",
            "x_tables or sysctl changes found by polling",
            m.xt_changes.clone(),
        );
        registry.register(
            "last_status_write_timestamp_seconds",
            "Unix time of the last accepted status write",
            m.last_write_timestamp.clone(),
        );
        Arc::new(Metrics { registry, ..m })
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    pub fn tick(&self, unix_now: i64) {
        self.alive.store(unix_now, Ordering::Relaxed);
    }

    pub fn healthy(&self, unix_now: i64) -> bool {
        unix_now - self.alive.load(Ordering::Relaxed) <= self.stale_after
    }
}

impl Exposition for Metrics {
    fn registry(&self) -> &Registry {
        &self.registry
    }
}

/// Live while the loop turned within `stale_after` of `clock`'s now; ready
/// once a status has been written.
pub fn admin(m: Arc<Metrics>, clock: Arc<dyn Clock>) -> Admin {
    let (live, ready) = checks(m.clone(), clock);
    Admin {
        live,
        ready,
        metrics: m,
    }
}

/// The liveness and readiness checks (the kubelet's probes).
pub fn checks(m: Arc<Metrics>, clock: Arc<dyn Clock>) -> (Check, Check) {
    let (live, ready) = (m.clone(), m);
    let live: Check = Arc::new(move || {
        let turning = live.healthy(unix_seconds(clock.now()));
        health(turning, "reporter loop stalled")
    });
    let ready: Check =
        Arc::new(move || health(ready.ready.load(Ordering::Relaxed), "no status written yet"));
    (live, ready)
}

/// The admin routes on the machine's clock.
pub fn router(m: Arc<Metrics>) -> Router {
    admin::router(admin(m, Arc::new(SystemClock)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::clock::ManualClock;
    use tower::ServiceExt;

    async fn get(m: &Arc<Metrics>, path: &str) -> (u16, String) {
        let req = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = router(m.clone()).oneshot(req).await.unwrap();
        let code = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn health_ready_and_metrics() {
        let m = Metrics::new(60);
        assert_eq!(get(&m, "/readyz").await.0, 503);
        assert_eq!(get(&m, "/healthz").await.0, 503, "loop never turned");
        m.tick(unix_seconds(SystemClock.now()));
        assert_eq!(get(&m, "/healthz").await.0, 200);
        m.set_ready();
        assert_eq!(get(&m, "/readyz").await.0, 200);
        m.probes.inc();
        let (code, text) = get(&m, "/metrics").await;
        assert_eq!(code, 200);
        assert!(text.contains("nfguard_reporter_probes_total 1"), "{text}");
    }

    #[tokio::test]
    async fn liveness_follows_the_injected_clock() {
        let m = Metrics::new(60);
        let clock = ManualClock::new("2026-03-01T12:00:00Z".parse().unwrap());
        let app = admin::router(admin(m.clone(), Arc::new(clock.clone())));
        let status = |app: Router| async move {
            let req = axum::http::Request::get("/healthz")
                .body(axum::body::Body::empty())
                .unwrap();
            app.oneshot(req).await.unwrap().status().as_u16()
        };
        m.tick(unix_seconds(clock.now()));
        clock.advance(std::time::Duration::from_secs(60));
        assert_eq!(
            status(app.clone()).await,
            200,
            "turned 60 s ago: still live"
        );
        clock.advance(std::time::Duration::from_secs(1));
        assert_eq!(status(app.clone()).await, 503, "61 s: stalled");
        m.tick(unix_seconds(clock.now()));
        assert_eq!(status(app).await, 200);
    }
}
