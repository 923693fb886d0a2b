//! Profile conditions (pure; the clock is an argument):
//! - `Fresh`: the reporter's heartbeat (`lastProbeTime`) is within
//!   3 x `probeIntervalSeconds` (default 60) -> True, else Unknown.
//! - `Healthy`: no critical hazard -> True; a critical hazard -> False.
//! - `Consistent`: `activeBackend` nft or legacy -> True (native nf_tables
//!   tables alone make a node nft); mixed -> False.
//!
//! `lastTransitionTime` changes only when a condition's status changes.

use crate::api::{ActiveBackend, Condition, NodeNetfilterProfileStatus};
use crate::facts::Severity;
use crate::named::named_enum;
use crate::runtime::clock::rfc3339;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

named_enum! {
    /// The profile's condition types (the `type` written on the profile and
    /// the metrics' `condition` label).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ConditionType {
        Fresh,
        Healthy,
        Consistent,
    }
}

// Each type once: within the profile CRD's bound.
const _: () = assert!(ConditionType::ALL.len() <= crate::api::bounds::PROFILE_CONDITIONS);

named_enum! {
    /// A condition's status (metav1.ConditionStatus).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ConditionStatus {
        True,
        False,
        Unknown,
    }
}

/// The reporter's heartbeat when the profile does not say.
pub const DEFAULT_PROBE_INTERVAL_SECONDS: u32 = 60;
/// Missed heartbeats tolerated before `Fresh` turns Unknown.
pub const FRESH_INTERVALS: i64 = 3;

fn cond(type_: ConditionType, status: ConditionStatus, reason: &str, message: String) -> Condition {
    condition(type_.as_str(), status, reason, message)
}

/// A condition without its transition time (see [`with_transition_times`]).
pub fn condition(type_: &str, status: ConditionStatus, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.as_str().into(),
        reason: reason.into(),
        message,
        last_transition_time: String::new(),
        observed_generation: None,
    }
}

/// When the heartbeat stops counting as fresh; None without a (parsable) heartbeat.
fn interval_of(status: &NodeNetfilterProfileStatus) -> u32 {
    status
        .probe_interval_seconds
        .filter(|s| *s > 0)
        .unwrap_or(DEFAULT_PROBE_INTERVAL_SECONDS)
}

pub fn fresh_until(status: &NodeNetfilterProfileStatus) -> Option<Timestamp> {
    let last: Timestamp = status.last_probe_time.as_deref()?.trim().parse().ok()?;
    let interval = interval_of(status);
    last.checked_add(SignedDuration::from_secs(
        FRESH_INTERVALS * i64::from(interval),
    ))
    .ok()
}

fn fresh(status: &NodeNetfilterProfileStatus, now: Timestamp) -> Condition {
    let Some(raw) = status.last_probe_time.as_deref() else {
        return cond(
            ConditionType::Fresh,
            ConditionStatus::Unknown,
            "NoHeartbeat",
            "the reporter has not probed this node yet".into(),
        );
    };
    match fresh_until(status) {
        None => cond(
            ConditionType::Fresh,
            ConditionStatus::Unknown,
            "InvalidProbeTime",
            format!("lastProbeTime {raw:?} is not an RFC 3339 time"),
        ),
        // No timestamp in the message: it would change (and be written) every heartbeat.
        Some(until) if now <= until => cond(
            ConditionType::Fresh,
            ConditionStatus::True,
            "HeartbeatRecent",
            format!(
                "the reporter's heartbeat is within {FRESH_INTERVALS} probe intervals ({}s)",
                FRESH_INTERVALS * i64::from(interval_of(status))
            ),
        ),
        Some(_) => cond(
            ConditionType::Fresh,
            ConditionStatus::Unknown,
            "HeartbeatStale",
            format!(
                "last probe at {raw}, more than {FRESH_INTERVALS} probe intervals ago: is the reporter running on this node?"
            ),
        ),
    }
}

fn probed(status: &NodeNetfilterProfileStatus) -> bool {
    status.iptables.is_some() || status.backends.is_some() || status.active_backend.is_some()
}

fn healthy(status: &NodeNetfilterProfileStatus) -> Condition {
    // The reporter's hazards and the ones the controller derives from them
    // and its writer inventory.
    let derived = crate::node::hazards::controller_hazards(status);
    let all = || status.hazards.iter().flatten().chain(&derived);
    let mut critical: Vec<String> = all()
        .filter(|h| h.severity == Severity::Critical)
        .map(|h| h.code.to_string())
        .collect();
    critical.sort();
    critical.dedup();
    if let Some(first) = critical.first() {
        let detail: Vec<&str> = all()
            .filter(|h| h.severity == Severity::Critical)
            .map(|h| h.message.as_str())
            .collect();
        return cond(
            ConditionType::Healthy,
            ConditionStatus::False,
            first,
            format!(
                "critical hazards: {}: {}",
                critical.join(", "),
                detail.join("; ")
            ),
        );
    }
    if !probed(status) && status.hazards.is_none() {
        let why = match &status.probe_error {
            Some(e) => format!("the probe failed: {e}"),
            None => "no probe results yet".into(),
        };
        return cond(
            ConditionType::Healthy,
            ConditionStatus::Unknown,
            "NotProbed",
            why,
        );
    }
    cond(
        ConditionType::Healthy,
        ConditionStatus::True,
        "NoCriticalHazard",
        "no critical netfilter hazard".into(),
    )
}

/// The native tables, when nf_tables holds rules only there (kube-proxy in
/// nftables mode on a host without iptables).
fn native_only(status: &NodeNetfilterProfileStatus) -> Option<String> {
    let b = status.backends.as_ref()?;
    let tables = status.native_tables.as_ref()?;
    if b.nft.chains > 0 || b.legacy.chains > 0 || tables.is_empty() {
        return None;
    }
    Some(
        tables
            .iter()
            .map(|t| format!("{}/{}", t.family, t.name))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

fn consistent(status: &NodeNetfilterProfileStatus) -> Condition {
    match status.active_backend {
        Some(b @ (ActiveBackend::Nft | ActiveBackend::Legacy)) => cond(
            ConditionType::Consistent,
            ConditionStatus::True,
            "SingleBackend",
            format!(
                "only the {} backend holds rules{}",
                b.as_str(),
                native_only(status).map_or(String::new(), |t| format!(
                    ", all in native nf_tables tables ({t})"
                ))
            ),
        ),
        Some(ActiveBackend::Mixed) => cond(
            ConditionType::Consistent,
            ConditionStatus::False,
            "MixedBackends",
            "both the nft and the legacy backend hold rules: they are evaluated separately".into(),
        ),
        Some(ActiveBackend::None) => cond(
            ConditionType::Consistent,
            ConditionStatus::Unknown,
            "NoActiveBackend",
            "neither backend holds rules yet".into(),
        ),
        None => cond(
            ConditionType::Consistent,
            ConditionStatus::Unknown,
            "NotProbed",
            "no backend facts yet".into(),
        ),
    }
}

/// The three conditions for `status` at `now`, keeping each previous
/// `lastTransitionTime` whose status did not change.
pub fn conditions(
    status: &NodeNetfilterProfileStatus,
    previous: &[Condition],
    now: Timestamp,
    observed_generation: Option<i64>,
) -> Vec<Condition> {
    with_transition_times(
        vec![fresh(status, now), healthy(status), consistent(status)],
        previous,
        now,
        observed_generation,
    )
}

/// Stamps `observedGeneration` and `lastTransitionTime`: a condition whose
/// status did not change keeps its previous time, the others get `now`.
pub fn with_transition_times(
    conditions: Vec<Condition>,
    previous: &[Condition],
    now: Timestamp,
    observed_generation: Option<i64>,
) -> Vec<Condition> {
    let stamp = rfc3339(now);
    conditions
        .into_iter()
        .map(|mut c| {
            c.observed_generation = observed_generation;
            c.last_transition_time = previous
                .iter()
                .find(|p| {
                    p.type_ == c.type_ && p.status == c.status && !p.last_transition_time.is_empty()
                })
                .map(|p| p.last_transition_time.clone())
                .unwrap_or_else(|| stamp.clone());
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::{Hazard, HazardCode, IptablesFacts};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn base() -> NodeNetfilterProfileStatus {
        NodeNetfilterProfileStatus {
            iptables: Some(IptablesFacts::default()),
            active_backend: Some(ActiveBackend::Nft),
            hazards: Some(vec![]),
            last_probe_time: Some("2026-01-01T00:00:00Z".into()),
            probe_interval_seconds: Some(60),
            ..Default::default()
        }
    }

    fn get(cs: &[Condition], t: ConditionType) -> &Condition {
        cs.iter().find(|c| c.type_ == t.as_str()).unwrap()
    }

    #[test]
    fn types_and_statuses_parse_back_from_their_strings() {
        for t in ConditionType::ALL {
            assert_eq!(ConditionType::parse(t.as_str()), Some(t));
        }
        for s in ConditionStatus::ALL {
            assert_eq!(ConditionStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(ConditionType::parse("Ready"), None);
        assert_eq!(ConditionStatus::parse("true"), None);
    }

    #[test]
    fn fresh_within_three_intervals_else_unknown() {
        let s = base();
        let c = conditions(&s, &[], ts("2026-01-01T00:03:00Z"), None);
        assert_eq!(get(&c, ConditionType::Fresh).status, "True");
        let c = conditions(&s, &[], ts("2026-01-01T00:03:01Z"), None);
        assert_eq!(get(&c, ConditionType::Fresh).status, "Unknown");
        assert_eq!(get(&c, ConditionType::Fresh).reason, "HeartbeatStale");
    }

    #[test]
    fn fresh_uses_default_interval_and_reports_bad_times() {
        let mut s = base();
        s.probe_interval_seconds = None;
        assert_eq!(
            fresh_until(&s),
            Some(ts("2026-01-01T00:03:00Z")),
            "default interval is 60 s"
        );
        s.last_probe_time = Some("yesterday".into());
        let c = conditions(&s, &[], ts("2026-01-01T00:00:00Z"), None);
        assert_eq!(get(&c, ConditionType::Fresh).reason, "InvalidProbeTime");
        s.last_probe_time = None;
        let c = conditions(&s, &[], ts("2026-01-01T00:00:00Z"), None);
        assert_eq!(get(&c, ConditionType::Fresh).reason, "NoHeartbeat");
    }

    #[test]
    fn healthy_false_on_critical_hazard_only() {
        let mut s = base();
        let hazard = |code, severity| Hazard {
            code,
            severity,
            message: format!("{code:?} here"),
            backend: None,
            table: None,
            chain: None,
            rule: None,
        };
        s.hazards = Some(vec![hazard(
            HazardCode::KubeletChainsMissing,
            Severity::Warning,
        )]);
        let c = conditions(&s, &[], ts("2026-01-01T00:00:10Z"), None);
        assert_eq!(get(&c, ConditionType::Healthy).status, "True");
        s.hazards.as_mut().unwrap().push(hazard(
            HazardCode::FirewallUnconditionalDrop,
            Severity::Critical,
        ));
        let c = conditions(&s, &[], ts("2026-01-01T00:00:10Z"), None);
        let h = get(&c, ConditionType::Healthy);
        assert_eq!(
            (h.status.as_str(), h.reason.as_str()),
            ("False", "FirewallUnconditionalDrop")
        );
        assert!(h.message.contains("FirewallUnconditionalDrop here"));
    }

    #[test]
    fn healthy_false_when_the_live_sets_crash_a_writer_pods_nft() {
        use crate::api::{NodeNftables, Writer};
        use crate::facts::UserdataReader;
        let mut s = base();
        s.nftables = Some(NodeNftables {
            min_reader: Some("1.1.2".parse().unwrap()),
            crashing_sets: Some(1),
            crashing_examples: vec!["ip/t/s".into()],
            ..Default::default()
        });
        let now = ts("2026-01-01T00:00:10Z");
        assert_eq!(
            get(&conditions(&s, &[], now, None), ConditionType::Healthy).status,
            "True"
        );
        s.writers = Some(vec![Writer {
            pod: "kube-system/kube-proxy-1".into(),
            container: "kube-proxy".into(),
            nft_version: Some("1.0.6".parse().unwrap()),
            nft_userdata_reader: Some(UserdataReader::Crashes),
            ..Default::default()
        }]);
        let c = conditions(&s, &[], now, None);
        let h = get(&c, ConditionType::Healthy);
        assert_eq!(
            (h.status.as_str(), h.reason.as_str()),
            ("False", "NftSetsCrashWriterNft")
        );
        assert!(
            h.message
                .contains("kube-proxy in kube-system/kube-proxy-1 (nft 1.0.6)"),
            "{}",
            h.message
        );
    }

    #[test]
    fn consistent_by_active_backend() {
        let now = ts("2026-01-01T00:00:10Z");
        for (b, want) in [
            (Some(ActiveBackend::Nft), "True"),
            (Some(ActiveBackend::Legacy), "True"),
            (Some(ActiveBackend::Mixed), "False"),
            (Some(ActiveBackend::None), "Unknown"),
            (None, "Unknown"),
        ] {
            let mut s = base();
            s.active_backend = b;
            assert_eq!(
                get(&conditions(&s, &[], now, None), ConditionType::Consistent).status,
                want,
                "{b:?}"
            );
        }
    }

    #[test]
    fn native_only_node_is_consistent() {
        use crate::kernel::{Chain, Family, Rule, RuleSet, Table};
        // What the reporter makes of a node holding only kube-proxy's
        // nftables table, on a host without iptables.
        let nft = RuleSet {
            tables: vec![Table {
                family: Family::Ip,
                name: "kube-proxy".into(),
                chains: vec![Chain {
                    name: "services".into(),
                    builtin: false,
                    rules: vec![Rule::default()],
                }],
                sets: vec![],
            }],
        };
        let facts = crate::node::NodeFacts {
            iptables: None,
            nftables: None,
            host_error: None,
            kernel_release: "6.12".into(),
            nf_tables_supported: true,
            ip_tables_supported: false,
            kernel_modules: Default::default(),
            nft: Ok(nft),
            legacy: Ok(RuleSet::default()),
            bridge: Default::default(),
            ip_forward: Some(true),
        };
        let mut s = crate::node::status_from_facts(&facts);
        s.last_probe_time = Some("2026-01-01T00:00:00Z".into());
        assert_eq!(s.active_backend, Some(ActiveBackend::Nft));
        let c = conditions(&s, &[], ts("2026-01-01T00:00:10Z"), None);
        let c = get(&c, ConditionType::Consistent);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "SingleBackend")
        );
        assert!(
            c.message
                .contains("native nf_tables tables (ip/kube-proxy)"),
            "{}",
            c.message
        );
    }

    #[test]
    fn unprobed_profile_is_unknown_not_healthy() {
        let s = NodeNetfilterProfileStatus {
            probe_error: Some("permission denied".into()),
            ..Default::default()
        };
        let c = conditions(&s, &[], ts("2026-01-01T00:00:10Z"), None);
        assert_eq!(get(&c, ConditionType::Healthy).status, "Unknown");
        assert!(
            get(&c, ConditionType::Healthy)
                .message
                .contains("permission denied")
        );
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let s = base();
        let t0 = ts("2026-01-01T00:01:00.750Z");
        let first = conditions(&s, &[], t0, Some(3));
        assert!(
            first
                .iter()
                .all(|c| c.last_transition_time == "2026-01-01T00:01:00Z")
        );
        assert!(first.iter().all(|c| c.observed_generation == Some(3)));
        // Same facts later: times kept.
        let second = conditions(&s, &first, ts("2026-01-01T00:02:00Z"), Some(3));
        assert_eq!(first, second);
        // Heartbeat goes stale: only Fresh moves.
        let third = conditions(&s, &second, ts("2026-01-01T00:10:00Z"), Some(3));
        assert_eq!(
            get(&third, ConditionType::Fresh).last_transition_time,
            "2026-01-01T00:10:00Z"
        );
        assert_eq!(
            get(&third, ConditionType::Healthy).last_transition_time,
            "2026-01-01T00:01:00Z"
        );
    }
}
