//! Prometheus metrics. Every label takes values from a closed set (kinds
//! nfguard judges, verdicts, reason codes, rejection causes), so the series
//! count is bounded whatever the requests contain.

use crate::compat::evaluate::{ReasonCode, Verdict};
use crate::runtime::admin::Exposition;
use crate::wellknown::WorkloadKind;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::OnceLock;

/// Fixed-size label sets: no allocation per request.
type Label = (&'static str, &'static str);
type Labels1 = [Label; 1];
type Labels2 = [Label; 2];

/// Label values with a cached handle (the rest still work, uncached).
/// Every judged kind, then "other" (a kind nfguard does not judge) and
/// "invalid" (a review that could not be read).
const KINDS: [&str; WorkloadKind::ALL.len() + 2] = {
    let mut k = ["other"; WorkloadKind::ALL.len() + 2];
    let mut i = 0;
    while i < WorkloadKind::ALL.len() {
        k[i] = WorkloadKind::ALL[i].as_str();
        i += 1;
    }
    k[i + 1] = "invalid";
    k
};
const VERDICTS: [&str; 4] = [
    Verdict::Allow.as_str(),
    Verdict::Warn.as_str(),
    Verdict::Deny.as_str(),
    "rejected",
];
/// Bounds a look-up can be refused at (`images::NotStarted`): every series
/// exists from the start, so a rate over it is 0, not absent.
pub const LOOKUP_BOUNDS: [&str; 3] = ["per_request", "per_namespace", "inflight"];
/// Why a request was refused before its body was read, or cut while it was
/// (or, for `PeerConnections`, a connection closed as it was accepted): a
/// closed set, every series exported from the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `/validate` over a connection without a client certificate (401).
    NoClientCertificate,
    /// A presented certificate that does not chain to `--client-ca-file`
    /// (the handshake fails).
    UntrustedClientCertificate,
    /// Chained to the CA, but naming no `--client-cert-name` (the handshake fails).
    ClientNameNotAllowed,
    /// The in-flight body budget stayed exhausted (429).
    BodyBudget,
    /// A body without an announced length: chunked (411).
    LengthRequired,
    /// The caller's address already held its share of the body budget (429).
    PeerBodyBytes,
    /// A body that fell below the rate floor, cut (408).
    SlowBody,
    /// A connection over the per-address cap, closed as it was accepted.
    PeerConnections,
}

impl Refusal {
    pub const ALL: [Refusal; 8] = [
        Refusal::NoClientCertificate,
        Refusal::UntrustedClientCertificate,
        Refusal::ClientNameNotAllowed,
        Refusal::BodyBudget,
        Refusal::LengthRequired,
        Refusal::PeerBodyBytes,
        Refusal::SlowBody,
        Refusal::PeerConnections,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::NoClientCertificate => "no_client_certificate",
            Refusal::UntrustedClientCertificate => "untrusted_client_certificate",
            Refusal::ClientNameNotAllowed => "client_name_not_allowed",
            Refusal::BodyBudget => "body_budget",
            Refusal::LengthRequired => "length_required",
            Refusal::PeerBodyBytes => "peer_body_bytes",
            Refusal::SlowBody => "slow_body",
            Refusal::PeerConnections => "peer_connections",
        }
    }
}

/// One per reason code.
const REASON_SLOTS: usize = ReasonCode::ALL.len();

/// Metric handles resolved once per label value: after the first request a
/// request touches only the metric's own atomics, not the family's lock
/// (which every core would otherwise write to on every request).
struct Handles<M> {
    slots: Box<[OnceLock<M>]>,
}

impl<M: Clone> Handles<M> {
    fn new(n: usize) -> Self {
        Handles {
            slots: (0..n).map(|_| OnceLock::new()).collect(),
        }
    }

    fn get(&self, i: Option<usize>, make: impl FnOnce() -> M) -> M {
        match i.and_then(|i| self.slots.get(i)) {
            Some(slot) => slot.get_or_init(make).clone(),
            None => make(),
        }
    }
}

fn index(values: &[&str], v: &str) -> Option<usize> {
    values.iter().position(|x| *x == v)
}

pub struct Metrics {
    registry: Registry,
    /// Seconds from body received to response built, by kind and verdict.
    pub admission_duration: Family<Labels2, Histogram>,
    /// Admission answers by verdict.
    pub verdicts: Family<Labels1, Counter>,
    /// Reasons reported, by stable reason code.
    pub reasons: Family<Labels1, Counter>,
    pub image_cache_hits: Counter,
    pub image_cache_misses: Counter,
    pub registry_errors: Counter,
    /// Image look-ups not started (counted as unresolved), by which bound
    /// refused them: `per_request`, `per_namespace`, `inflight`.
    pub lookups_not_started: Family<Labels1, Counter>,
    /// Reviews answered from the decision cache (same object, same facts).
    pub decision_cache_hits: Counter,
    pub decision_cache_misses: Counter,
    /// Requests answered without judging (malformed, unsupported, ...), by cause.
    pub rejected: Family<Labels1, Counter>,
    /// Seconds until the serving certificate expires.
    pub cert_expiry: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub cert_reloads: Counter,
    /// Requests refused before their body was read or cut while it was
    /// (and connections over the per-address cap), by [`Refusal`].
    pub refused: Family<Labels1, Counter>,
    /// Bytes reserved by request bodies being read or judged.
    pub body_bytes_in_flight: Gauge,
    duration_handles: Handles<Histogram>,
    verdict_handles: Handles<Counter>,
    reason_handles: Handles<Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nfguard_webhook");
        registry.register_collector(Box::new(crate::runtime::allocator::HeapCollector));
        // Answers the registry module served stale (tags whose registry gave none).
        registry.register_collector(Box::new(crate::registry::StaleCollector));
        let admission_duration = Family::<Labels2, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                8.0, 10.0,
            ])
        });
        registry.register(
            "admission_duration_seconds",
            "Time to answer an AdmissionReview",
            admission_duration.clone(),
        );
        let verdicts = Family::<Labels1, Counter>::default();
        registry.register("verdicts", "Admission verdicts", verdicts.clone());
        let reasons = Family::<Labels1, Counter>::default();
        registry.register(
            "reasons",
            "Reasons in admission decisions by code",
            reasons.clone(),
        );
        let image_cache_hits = Counter::default();
        registry.register(
            "image_cache_hits",
            "Image look-ups answered from cache",
            image_cache_hits.clone(),
        );
        let image_cache_misses = Counter::default();
        registry.register(
            "image_cache_misses",
            "Image look-ups that went to the registry",
            image_cache_misses.clone(),
        );
        let registry_errors = Counter::default();
        registry.register(
            "registry_errors",
            "Image look-ups that failed",
            registry_errors.clone(),
        );
        let lookups_not_started = Family::<Labels1, Counter>::default();
        for bound in LOOKUP_BOUNDS {
            drop(lookups_not_started.get_or_create(&[("bound", bound)]));
        }
        registry.register(
            "image_lookups_not_started",
            "Image look-ups not started because a bound was reached (the image counts as unresolved), by bound",
            lookups_not_started.clone(),
        );
        let decision_cache_hits = Counter::default();
        registry.register(
            "decision_cache_hits",
            "Reviews answered from the decision cache",
            decision_cache_hits.clone(),
        );
        let decision_cache_misses = Counter::default();
        registry.register(
            "decision_cache_misses",
            "Reviews judged afresh",
            decision_cache_misses.clone(),
        );
        let rejected = Family::<Labels1, Counter>::default();
        registry.register(
            "rejected_requests",
            "Requests not judged, by cause",
            rejected.clone(),
        );
        let cert_expiry = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "certificate_expiry_seconds",
            "Seconds until the serving certificate expires",
            cert_expiry.clone(),
        );
        let cert_reloads = Counter::default();
        registry.register(
            "certificate_reloads",
            "Serving certificate (re)loads",
            cert_reloads.clone(),
        );
        let refused = Family::<Labels1, Counter>::default();
        for r in Refusal::ALL {
            drop(refused.get_or_create(&[("cause", r.as_str())]));
        }
        registry.register(
            "refused_requests",
            "Requests refused before their body was read or cut while it was (client certificate, length, body budget, per-address caps, rate floor), by cause",
            refused.clone(),
        );
        let body_bytes_in_flight = Gauge::default();
        registry.register(
            "request_body_bytes_in_flight",
            "Bytes reserved by request bodies being read or judged",
            body_bytes_in_flight.clone(),
        );
        Metrics {
            registry,
            admission_duration,
            verdicts,
            reasons,
            image_cache_hits,
            image_cache_misses,
            registry_errors,
            lookups_not_started,
            decision_cache_hits,
            decision_cache_misses,
            rejected,
            cert_expiry,
            cert_reloads,
            refused,
            body_bytes_in_flight,
            duration_handles: Handles::new(KINDS.len() * VERDICTS.len()),
            verdict_handles: Handles::new(VERDICTS.len()),
            reason_handles: Handles::new(REASON_SLOTS),
        }
    }

    /// One answered review: its latency and verdict.
    pub fn observe_review(&self, kind: &'static str, verdict: &'static str, seconds: f64) {
        let slot = index(&KINDS, kind)
            .zip(index(&VERDICTS, verdict))
            .map(|(k, v)| k * VERDICTS.len() + v);
        self.duration_handles
            .get(slot, || {
                self.admission_duration
                    .get_or_create(&[("kind", kind), ("verdict", verdict)])
                    .clone()
            })
            .observe(seconds);
        self.verdict_handles
            .get(index(&VERDICTS, verdict), || {
                self.verdicts.get_or_create(&[("verdict", verdict)]).clone()
            })
            .inc();
    }

    /// A look-up refused by `bound` (a `NotStarted` name: a closed set).
    pub fn lookup_not_started(&self, bound: &'static str) {
        self.lookups_not_started
            .get_or_create(&[("bound", bound)])
            .inc();
    }

    /// A request refused before its body was read (or cut, see [`Refusal`]).
    pub fn refuse(&self, why: Refusal) {
        self.refused.get_or_create(&[("cause", why.as_str())]).inc();
    }

    /// One reason of a decision.
    pub fn count_reason(&self, code: ReasonCode) {
        self.reason_handles
            .get(Some(code as usize), || {
                self.reasons
                    .get_or_create(&[("code", code.as_str())])
                    .clone()
            })
            .inc();
    }
}

impl Exposition for Metrics {
    fn registry(&self) -> &Registry {
        &self.registry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_code_is_its_own_series_named_by_the_code() {
        let m = Metrics::new();
        for (i, code) in ReasonCode::ALL.into_iter().enumerate() {
            for _ in 0..=i {
                m.count_reason(code);
            }
        }
        let text = m.encode();
        for (i, code) in ReasonCode::ALL.into_iter().enumerate() {
            let line = format!(
                "nfguard_webhook_reasons_total{{code=\"{code}\"}} {}\n",
                i + 1
            );
            assert!(text.contains(&line), "{line} in {text}");
        }
    }

    #[test]
    fn verdict_labels_are_the_verdicts_names() {
        let m = Metrics::new();
        m.observe_review("Pod", Verdict::Deny.as_str(), 0.01);
        assert!(
            m.encode()
                .contains("nfguard_webhook_verdicts_total{verdict=\"deny\"} 1\n"),
            "{}",
            m.encode()
        );
    }
}
