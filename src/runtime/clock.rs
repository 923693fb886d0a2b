//! Time is passed in, so conditions and leases test without a real clock.

use k8s_openapi::jiff::Timestamp;
use std::sync::{Arc, Mutex};

pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// The machine's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told (tests, benchmarks).
#[derive(Clone, Debug)]
pub struct ManualClock(Arc<Mutex<Timestamp>>);

impl ManualClock {
    pub fn new(at: Timestamp) -> Self {
        Self(Arc::new(Mutex::new(at)))
    }

    pub fn set(&self, at: Timestamp) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }

    pub fn advance(&self, by: std::time::Duration) {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let d = k8s_openapi::jiff::SignedDuration::try_from(by).unwrap_or_default();
        *t = t.saturating_add(d).unwrap_or(*t);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// RFC 3339 at whole seconds, as Kubernetes condition times are written.
pub fn rfc3339(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}
