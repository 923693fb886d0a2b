//! What a `/validate` request must pass before its body is read:
//! - with `--client-ca-file`, a connection whose client certificate the TLS
//!   layer verified ([`ClientCertificate`], set by the accept loop); else 401;
//! - a share of the byte budget for request bodies in flight (the body cap
//!   is 19 MiB, and nothing else bounds how many are read at once); waited
//!   for briefly, else 429. The share is held until the answer is built, as
//!   the body lives that long.

use super::metrics::{Metrics, Refusal};
use super::server::MAX_BODY_BYTES;
use axum::body::HttpBody;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::metrics::gauge::Gauge;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a request waits for body budget before 429: long enough for a
/// burst to drain, short against the API server's 10 s.
pub const BODY_WAIT: Duration = Duration::from_secs(2);

/// Marks a request whose TLS connection presented a client certificate that
/// [`super::client_auth::ClientAuth`] accepted (inserted by the accept loop).
#[derive(Clone, Copy, Debug)]
pub struct ClientCertificate;

/// Bytes of request bodies that may be in flight at once.
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    limit: u64,
    wait: Duration,
    in_flight: AtomicU64,
    peak: AtomicU64,
    gauge: Gauge,
}

impl std::fmt::Debug for BodyBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyBudget")
            .field("limit", &self.limit)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// A body's share of the budget; given back on drop.
pub struct BodyShare {
    _permit: OwnedSemaphorePermit,
    bytes: u64,
    budget: Arc<BodyBudget>,
}

impl Drop for BodyShare {
    fn drop(&mut self) {
        let now = self
            .budget
            .in_flight
            .fetch_sub(self.bytes, Ordering::AcqRel)
            - self.bytes;
        self.budget.gauge.set(now as i64);
    }
}

impl BodyBudget {
    /// `limit` is raised to one largest body, so every admissible body can
    /// be read; `gauge` shows the bytes in flight.
    pub fn new(limit: u64, wait: Duration, gauge: Gauge) -> Arc<Self> {
        let limit = limit.max(MAX_BODY_BYTES as u64);
        Arc::new(BodyBudget {
            permits: Arc::new(Semaphore::new(limit as usize)),
            limit,
            wait,
            in_flight: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            gauge,
        })
    }

    /// The budget: an eighth of the memory limit (see `MemoryPlan`).
    pub fn for_memory(plan: &crate::registry::MemoryPlan, gauge: Gauge) -> Arc<Self> {
        Self::new(plan.request_body_bytes, BODY_WAIT, gauge)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// The most bytes ever in flight at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }

    /// Reserve `bytes` (at most one largest body), waiting up to the
    /// budget's wait; None when it stayed exhausted. First come, first
    /// served: a large body waiting is not overtaken by small ones.
    pub async fn reserve(self: &Arc<Self>, bytes: u64) -> Option<BodyShare> {
        let bytes = bytes.min(MAX_BODY_BYTES as u64);
        let acquire = self.permits.clone().acquire_many_owned(bytes as u32);
        let permit = tokio::time::timeout(self.wait, acquire).await.ok()?.ok()?;
        let now = self.in_flight.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(now, Ordering::AcqRel);
        self.gauge.set(now as i64);
        Some(BodyShare {
            _permit: permit,
            bytes,
            budget: self.clone(),
        })
    }
}

/// What the body will cost: its announced length (Content-Length, which
/// hyper holds the body to), or the cap when it announces none (chunked);
/// None when it announces more than the cap (refused unread).
pub fn body_charge(announced: Option<u64>) -> Option<u64> {
    let cap = MAX_BODY_BYTES as u64;
    match announced {
        Some(n) if n > cap => None,
        Some(n) => Some(n),
        None => Some(cap),
    }
}

/// The checks in front of `/validate`.
pub struct Intake {
    /// `--client-ca-file` is set: a verified client certificate is required.
    pub require_client_certificate: bool,
    pub bodies: Arc<BodyBudget>,
    pub metrics: Arc<Metrics>,
}

impl Intake {
    /// No client certificate required; the body budget of the default memory plan.
    pub fn open(metrics: Arc<Metrics>) -> Arc<Self> {
        let plan = crate::registry::MemoryPlan::default();
        Arc::new(Intake {
            require_client_certificate: false,
            bodies: BodyBudget::for_memory(&plan, metrics.body_bytes_in_flight.clone()),
            metrics,
        })
    }
}

/// The middleware: refuse before the body is read, or pass it on holding
/// its share of the budget until the answer is built.
pub async fn gate(State(intake): State<Arc<Intake>>, req: Request, next: Next) -> Response {
    if intake.require_client_certificate && req.extensions().get::<ClientCertificate>().is_none() {
        intake.metrics.refuse(Refusal::NoClientCertificate);
        return (
            StatusCode::UNAUTHORIZED,
            "a client certificate is required for /validate\n",
        )
            .into_response();
    }
    let Some(bytes) = body_charge(req.body().size_hint().upper()) else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body over {MAX_BODY_BYTES} bytes\n"),
        )
            .into_response();
    };
    let Some(_share) = intake.bodies.reserve(bytes).await else {
        intake.metrics.refuse(Refusal::BodyBudget);
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            "too many request bodies in flight; retry\n",
        )
            .into_response();
    };
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(limit: u64, wait: Duration) -> Arc<BodyBudget> {
        BodyBudget::new(limit, wait, Gauge::default())
    }

    #[test]
    fn charge_is_the_announced_length_or_the_cap() {
        assert_eq!(body_charge(None), Some(MAX_BODY_BYTES as u64));
        assert_eq!(body_charge(Some(1234)), Some(1234));
        assert_eq!(body_charge(Some(MAX_BODY_BYTES as u64 + 1)), None);
    }

    #[test]
    fn the_budget_holds_at_least_one_largest_body() {
        assert_eq!(budget(1, BODY_WAIT).limit(), MAX_BODY_BYTES as u64);
    }

    #[tokio::test]
    async fn a_share_waits_then_is_refused_and_is_given_back_on_drop() {
        let max = MAX_BODY_BYTES as u64;
        let b = budget(2 * max, Duration::from_millis(50));
        let one = b.reserve(max).await.unwrap();
        let two = b.reserve(max).await.unwrap();
        assert_eq!(b.in_flight(), 2 * max);
        assert!(b.reserve(1).await.is_none(), "over the budget");
        drop(one);
        assert_eq!(b.in_flight(), max);
        let three = b.reserve(max).await.unwrap();
        assert_eq!(b.peak(), 2 * max);
        drop((two, three));
        assert_eq!(b.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_waiting_share_gets_in_when_one_is_given_back() {
        let max = MAX_BODY_BYTES as u64;
        let b = budget(max, Duration::from_secs(5));
        let one = b.reserve(max).await.unwrap();
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.reserve(1000).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(one);
        assert!(waiter.await.unwrap().is_some());
    }
}
