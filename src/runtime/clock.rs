//! Wall-clock time, passed in so conditions, leases and the reporter's
//! `lastProbeTime` test without a real clock. One time library: jiff, the
//! one k8s-openapi already speaks (`Time` wraps a `jiff::Timestamp`).

use k8s_openapi::jiff::{SignedDuration, Timestamp};
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

    /// Moves forward by `by`, stopping at jiff's last representable instant.
    pub fn advance(&self, by: std::time::Duration) {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let d = SignedDuration::try_from(by).unwrap_or_default();
        *t = t.saturating_add(d).unwrap_or(*t);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// RFC 3339 in UTC at whole seconds, as Kubernetes writes condition times
/// and the reporter writes `lastProbeTime`.
pub fn rfc3339(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// Seconds since the Unix epoch (metrics' timestamps, liveness ages).
pub fn unix_seconds(t: Timestamp) -> i64 {
    t.as_second()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    #[test]
    fn rfc3339_drops_fractions_and_says_utc() {
        assert_eq!(
            rfc3339(at("2026-03-01T12:00:07.987654Z")),
            "2026-03-01T12:00:07Z"
        );
        assert_eq!(
            rfc3339(at("2026-03-01T13:00:07+01:00")),
            "2026-03-01T12:00:07Z"
        );
        assert_eq!(unix_seconds(at("1970-01-01T00:01:03.9Z")), 63);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(at("2026-03-01T12:00:00Z"));
        assert_eq!(rfc3339(clock.now()), "2026-03-01T12:00:00Z");
        clock.advance(Duration::from_secs(90));
        assert_eq!(rfc3339(clock.now()), "2026-03-01T12:01:30Z");
        // Clones share the time: the test and the code under test see one clock.
        let shared = clock.clone();
        shared.set(at("2027-01-01T00:00:00Z"));
        assert_eq!(rfc3339(clock.now()), "2027-01-01T00:00:00Z");
        // Far past jiff's range: the clock stops at its end, never panics.
        clock.advance(Duration::from_secs(i64::MAX as u64));
        assert_eq!(clock.now(), Timestamp::MAX);
    }

    #[test]
    fn system_clock_is_now() {
        let before = Timestamp::now();
        let t = SystemClock.now();
        assert!(t >= before && t <= Timestamp::now());
    }
}
