//! The reporter's decisions, free of I/O: what to send and when.
//!
//! Inputs are the last status the API (or sink) accepted, each new probe
//! result, the current instant and the heartbeat interval; outputs are "send
//! this status now", "wait until then". Time is always passed in, so tests
//! drive it with plain `Instant` arithmetic.

use crate::api::NodeNetfilterProfileStatus;
use crate::facts::{Hazard, HazardCode, Severity};
use std::time::Duration;
use tokio::time::Instant;

/// True when two statuses carry the same facts (the probe time aside).
pub fn same_facts(a: &NodeNetfilterProfileStatus, b: &NodeNetfilterProfileStatus) -> bool {
    let strip = |s: &NodeNetfilterProfileStatus| NodeNetfilterProfileStatus {
        last_probe_time: None,
        ..s.reporter_fields()
    };
    strip(a) == strip(b)
}

/// The status to report when the probe itself could not run (it panicked or
/// its task died): the last good facts, marked with the error and a
/// `ProbeFailed` hazard, so the failure is visible and nothing is lost.
pub fn failed_probe_status(
    last_good: Option<&NodeNetfilterProfileStatus>,
    error: &str,
) -> NodeNetfilterProfileStatus {
    let mut s = last_good
        .map(NodeNetfilterProfileStatus::reporter_fields)
        .unwrap_or_default();
    s.probe_error = Some(error.to_string());
    let mut hazards: Vec<Hazard> = s
        .hazards
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|h| h.code != HazardCode::ProbeFailed)
        .collect();
    hazards.push(Hazard {
        code: HazardCode::ProbeFailed,
        severity: Severity::Warning,
        message: format!("the node probe failed: {error}"),
        backend: None,
        table: None,
        chain: None,
        rule: None,
    });
    s.hazards = Some(hazards);
    s
}

/// Exponential back-off with jitter for API errors: 1 s, 2 s, 4 s ... capped,
/// each delay scaled by a factor in [0.5, 1.0) from the caller's randomness
/// so a fleet of reporters does not retry in lockstep.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// Delay before retry number `failures` (1 = after the first failure);
    /// `jitter` in [0, 1).
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        let exp = failures.saturating_sub(1).min(30);
        let raw = self.base.saturating_mul(1u32 << exp.min(31)).min(self.cap);
        let jitter = if jitter.is_finite() {
            jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        raw.mul_f64(0.5 + jitter / 2.0)
    }
}

/// The send state: what the API last accepted, what is waiting to go, and
/// when the next heartbeat or retry is due.
#[derive(Debug)]
pub struct SendState {
    heartbeat: Duration,
    backoff: Backoff,
    last_sent: Option<NodeNetfilterProfileStatus>,
    last_sent_at: Option<Instant>,
    pending: Option<NodeNetfilterProfileStatus>,
    failures: u32,
    failed_at: Option<Instant>,
    retry_at: Option<Instant>,
    started: Instant,
}

impl SendState {
    pub fn new(heartbeat: Duration, backoff: Backoff, started: Instant) -> Self {
        Self {
            heartbeat,
            backoff,
            last_sent: None,
            last_sent_at: None,
            pending: None,
            failures: 0,
            failed_at: None,
            retry_at: None,
            started,
        }
    }

    /// When the next heartbeat probe is due (heartbeat after the last
    /// accepted write, or after start when none was accepted yet).
    pub fn heartbeat_due_at(&self) -> Instant {
        self.last_sent_at.unwrap_or(self.started) + self.heartbeat
    }

    pub fn heartbeat_due(&self, now: Instant) -> bool {
        now >= self.heartbeat_due_at()
    }

    /// A new probe result arrived. Queue it when it differs from what was
    /// last sent, when nothing was sent yet, or when the heartbeat is due.
    /// Returns whether something is now pending.
    pub fn on_probe(&mut self, status: NodeNetfilterProfileStatus, now: Instant) -> bool {
        let status = status.reporter_fields();
        let changed = match &self.last_sent {
            None => true,
            Some(last) => !same_facts(last, &status),
        };
        if changed || self.heartbeat_due(now) {
            let new_facts = self
                .pending
                .as_ref()
                .is_none_or(|p| !same_facts(p, &status));
            if new_facts {
                self.hurry_retry();
            }
            self.pending = Some(status);
        } else if self
            .pending
            .as_ref()
            .is_some_and(|p| !same_facts(p, &status))
        {
            // A change that was waiting (API down) has reverted: nothing to send.
            self.pending = None;
        }
        self.pending.is_some()
    }

    /// The status to send now, if any: something is pending and no back-off
    /// is running.
    pub fn to_send(&self, now: Instant) -> Option<&NodeNetfilterProfileStatus> {
        match self.retry_at {
            Some(t) if now < t => None,
            _ => self.pending.as_ref(),
        }
    }

    /// New facts arrived while a write backs off: the back-off protects the
    /// API from retrying the same write, but a node that just changed (often
    /// one recovering from an outage it caused itself) should not wait up to
    /// a minute to say so. Retry one base delay after the last failure.
    fn hurry_retry(&mut self) {
        if let (Some(failed), Some(retry)) = (self.failed_at, self.retry_at) {
            self.retry_at = Some(retry.min(failed + self.backoff.base));
        }
    }

    /// The write of `to_send` succeeded.
    pub fn on_sent(&mut self, now: Instant) {
        if let Some(p) = self.pending.take() {
            self.last_sent = Some(p);
        }
        self.last_sent_at = Some(now);
        self.failures = 0;
        self.failed_at = None;
        self.retry_at = None;
    }

    /// The write failed; returns the back-off delay before the next attempt.
    pub fn on_failed(&mut self, now: Instant, jitter: f64) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let d = self.backoff.delay(self.failures, jitter);
        self.failed_at = Some(now);
        self.retry_at = Some(now + d);
        d
    }

    /// When the loop must wake up next for sending: the retry time while a
    /// write is backing off (the heartbeat waits behind it), else the heartbeat.
    pub fn next_wake(&self) -> Instant {
        match (&self.pending, self.retry_at) {
            (Some(_), Some(t)) => t,
            _ => self.heartbeat_due_at(),
        }
    }

    /// A backed-off write is due again (the caller re-probes first, so the
    /// retried status is current).
    pub fn retry_due(&self, now: Instant) -> bool {
        self.pending.is_some() && self.retry_at.is_some_and(|t| now >= t)
    }

    /// Something waits to be sent (perhaps behind a back-off).
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn last_sent(&self) -> Option<&NodeNetfilterProfileStatus> {
        self.last_sent.as_ref()
    }
}

/// Collapses a burst of nf_tables notifications (one iptables-restore sends
/// hundreds) into one probe: fire once the burst has been quiet for `quiet`,
/// but never later than `max_delay` after its first message.
#[derive(Clone, Copy, Debug)]
pub struct Debounce {
    quiet: Duration,
    max_delay: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Debounce {
    pub fn new(quiet: Duration, max_delay: Duration) -> Self {
        Self {
            quiet,
            max_delay: max_delay.max(quiet),
            first: None,
            last: None,
        }
    }

    pub fn record(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// When the pending burst should be probed, if one is pending.
    pub fn deadline(&self) -> Option<Instant> {
        let (first, last) = (self.first?, self.last?);
        Some((last + self.quiet).min(first + self.max_delay))
    }

    /// True (and reset) when the deadline has passed.
    pub fn take_due(&mut self, now: Instant) -> bool {
        match self.deadline() {
            Some(d) if now >= d => {
                self.first = None;
                self.last = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BackendFacts, BackendsFacts, Writer};

    fn status(rules: u32, time: &str) -> NodeNetfilterProfileStatus {
        NodeNetfilterProfileStatus {
            backends: Some(BackendsFacts {
                nft: BackendFacts {
                    rules,
                    ..Default::default()
                },
                legacy: BackendFacts::default(),
            }),
            last_probe_time: Some(time.into()),
            probe_interval_seconds: Some(60),
            ..Default::default()
        }
    }

    const HB: Duration = Duration::from_secs(60);

    #[test]
    fn first_probe_is_sent_then_unchanged_probes_are_not() {
        let t0 = Instant::now();
        let mut s = SendState::new(HB, Backoff::default(), t0);
        assert!(s.on_probe(status(1, "a"), t0));
        assert_eq!(
            s.to_send(t0).map(|p| p.last_probe_time.as_deref()),
            Some(Some("a"))
        );
        s.on_sent(t0);
        // Same facts, new time, heartbeat not due: nothing to send.
        assert!(!s.on_probe(status(1, "b"), t0 + Duration::from_secs(10)));
        assert!(s.to_send(t0 + Duration::from_secs(10)).is_none());
        // A change is sent at once.
        assert!(s.on_probe(status(2, "c"), t0 + Duration::from_secs(11)));
        assert!(s.to_send(t0 + Duration::from_secs(11)).is_some());
    }

    #[test]
    fn heartbeat_sends_unchanged_facts_with_new_probe_time() {
        let t0 = Instant::now();
        let mut s = SendState::new(HB, Backoff::default(), t0);
        s.on_probe(status(1, "a"), t0);
        s.on_sent(t0);
        assert_eq!(s.next_wake(), t0 + HB);
        let later = t0 + HB;
        assert!(s.heartbeat_due(later));
        assert!(s.on_probe(status(1, "b"), later));
        assert_eq!(
            s.to_send(later).and_then(|p| p.last_probe_time.clone()),
            Some("b".into())
        );
        s.on_sent(later);
        assert_eq!(s.next_wake(), later + HB);
    }

    #[test]
    fn failures_back_off_exponentially_and_keep_the_newest_pending() {
        let t0 = Instant::now();
        let mut s = SendState::new(HB, Backoff::default(), t0);
        s.on_probe(status(1, "a"), t0);
        assert_eq!(
            s.on_failed(t0, 0.999_999),
            Duration::from_secs(1).mul_f64(0.5 + 0.999_999 / 2.0)
        );
        assert!(
            s.to_send(t0 + Duration::from_millis(100)).is_none(),
            "backing off"
        );
        let d2 = s.on_failed(t0, 0.0);
        assert_eq!(d2, Duration::from_secs(1), "2 s * 0.5");
        // Newer probe replaces the pending one while backing off.
        s.on_probe(status(3, "c"), t0 + Duration::from_millis(200));
        let t = t0 + Duration::from_secs(5);
        assert_eq!(
            s.to_send(t).unwrap().backends.as_ref().unwrap().nft.rules,
            3
        );
        s.on_sent(t);
        assert_eq!(s.failures(), 0);
        assert_eq!(s.next_wake(), t + HB);
    }

    #[test]
    fn new_facts_during_a_long_back_off_retry_one_base_after_the_failure() {
        let t0 = Instant::now();
        let mut s = SendState::new(HB, Backoff::default(), t0);
        s.on_probe(status(1, "a"), t0);
        for _ in 0..6 {
            s.on_failed(t0, 0.0);
        }
        assert_eq!(
            s.next_wake(),
            t0 + Duration::from_secs(16),
            "6th failure: 32 s * 0.5"
        );
        // The same facts again (a heartbeat or poll) keep the back-off.
        s.on_probe(status(1, "b"), t0 + Duration::from_millis(300));
        assert_eq!(s.next_wake(), t0 + Duration::from_secs(16));
        // A changed ruleset brings the retry forward to failure + base.
        s.on_probe(status(2, "c"), t0 + Duration::from_millis(400));
        assert_eq!(s.next_wake(), t0 + Duration::from_secs(1));
        assert!(s.to_send(t0 + Duration::from_millis(900)).is_none());
        assert!(s.to_send(t0 + Duration::from_secs(1)).is_some());
        // A change noticed later than that retries at once, never earlier
        // than now.
        let t1 = t0 + Duration::from_secs(3);
        s.on_failed(t1, 0.0);
        s.on_probe(status(3, "d"), t1 + Duration::from_secs(2));
        assert!(s.retry_due(t1 + Duration::from_secs(2)));
    }

    #[test]
    fn backoff_is_capped() {
        let b = Backoff::default();
        assert_eq!(b.delay(1, 0.0), Duration::from_millis(500));
        assert_eq!(b.delay(3, 0.0), Duration::from_secs(2));
        assert_eq!(b.delay(50, 0.0), Duration::from_secs(30));
        assert!(b.delay(50, 0.99) <= Duration::from_secs(60));
        assert_eq!(b.delay(7, f64::NAN), Duration::from_secs(30));
    }

    #[test]
    fn reverted_change_while_api_down_is_dropped() {
        let t0 = Instant::now();
        let mut s = SendState::new(HB, Backoff::default(), t0);
        s.on_probe(status(1, "a"), t0);
        s.on_sent(t0);
        let t1 = t0 + Duration::from_secs(1);
        assert!(s.on_probe(status(2, "b"), t1));
        s.on_failed(t1, 0.0);
        assert!(!s.on_probe(status(1, "c"), t1 + Duration::from_secs(2)));
    }

    #[test]
    fn controller_fields_are_never_sent() {
        let mut st = status(1, "a");
        st.writers = Some(vec![Writer::default()]);
        st.conditions = Some(vec![]);
        let t0 = Instant::now();
        let mut s = SendState::new(HB, Backoff::default(), t0);
        s.on_probe(st, t0);
        let sent = s.to_send(t0).unwrap();
        assert!(sent.writers.is_none() && sent.conditions.is_none());
    }

    #[test]
    fn failed_probe_keeps_last_good_facts_and_adds_probe_failed() {
        let good = status(7, "a");
        let f = failed_probe_status(Some(&good), "task panicked");
        assert_eq!(f.backends.unwrap().nft.rules, 7);
        assert_eq!(f.probe_error.as_deref(), Some("task panicked"));
        let hz = f.hazards.unwrap();
        assert_eq!(hz.len(), 1);
        assert_eq!(hz[0].code, HazardCode::ProbeFailed);
        let again = failed_probe_status(None, "x");
        assert!(again.backends.is_none());
    }

    #[test]
    fn debounce_waits_for_quiet_but_not_forever() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Debounce::new(ms(100), ms(300));
        assert_eq!(d.deadline(), None);
        d.record(t0);
        assert_eq!(d.deadline(), Some(t0 + ms(100)));
        d.record(t0 + ms(50));
        assert_eq!(d.deadline(), Some(t0 + ms(150)));
        assert!(!d.take_due(t0 + ms(120)));
        // A steady stream: capped at first + max_delay.
        for i in 0..40 {
            d.record(t0 + ms(50 + i * 10));
        }
        assert_eq!(d.deadline(), Some(t0 + ms(300)));
        assert!(d.take_due(t0 + ms(300)));
        assert_eq!(d.deadline(), None);
    }
}
