use super::table::{human_age, render, render_table};
use super::*;
use serde_json::json;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

const NOW: &str = "2026-03-01T12:00:00Z";

fn profile(name: &str, status: serde_json::Value) -> NodeNetfilterProfile {
    serde_json::from_value(json!({
        "apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
        "metadata": {"name": name}, "spec": {"nodeName": name}, "status": status
    }))
    .unwrap()
}

fn node(name: &str, ready: &str, taints: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": ready}]}
    }))
    .unwrap()
}

/// An nft node whose rules need 1.8.8, probed 42 s ago, two writers.
fn nft_profile() -> NodeNetfilterProfile {
    profile(
        "b-nft",
        json!({
            "iptables": {"version": "1.8.9", "backend": "nft", "evidence": []},
            "kernel": {"release": "6.1.0", "nfTables": true, "ipTables": true},
            "activeBackend": "nft", "minReaderVersion": "1.8.8",
            "hazards": [],
            "lastProbeTime": "2026-03-01T11:59:18Z", "probeIntervalSeconds": 60,
            "writers": [
                {"pod": "kube-system/kube-proxy-x", "container": "kube-proxy", "image": "kp:1", "version": "1.8.9", "backend": "nft"},
                {"pod": "nfguard-system/nfguard-reporter-y", "container": "reporter", "image": "nfguard:1", "note": "image has no iptables"}
            ],
            "newestWriterVersion": "1.8.9", "oldestReaderVersion": "1.8.9"
        }),
    )
}

/// A legacy node with a warning and a critical hazard (listed twice).
fn legacy_profile(last_probe: &str) -> NodeNetfilterProfile {
    profile(
        "a-legacy",
        json!({
            "iptables": {"version": "1.8.7", "backend": "legacy", "evidence": []},
            "activeBackend": "legacy",
            "hazards": [
                {"code": "KubeletChainsMissing", "severity": "warning", "message": "m"},
                {"code": "FirewallUnconditionalDrop", "severity": "critical", "message": "m1"},
                {"code": "FirewallUnconditionalDrop", "severity": "critical", "message": "m2"}
            ],
            "lastProbeTime": last_probe, "probeIntervalSeconds": 10
        }),
    )
}

fn report() -> StatusReport {
    let profiles = [
        nft_profile(),
        legacy_profile("2026-03-01T11:59:30Z"),
        profile("gone", json!({"activeBackend": "nft"})),
    ];
    let nodes = [
        node(
            "b-nft",
            "True",
            json!([{"key": "other/taint", "effect": "NoSchedule"}]),
        ),
        node(
            "a-legacy",
            "True",
            json!([{"key": "nfguard.io/netfilter-degraded", "value": "FirewallUnconditionalDrop", "effect": "NoSchedule"}]),
        ),
        node("c-new", "False", json!([])),
    ];
    build_report(&profiles, &nodes, ts(NOW))
}

#[test]
fn one_row_per_node_sorted_with_the_profile_facts() {
    let r = report();
    let names: Vec<&str> = r.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        names,
        ["a-legacy", "b-nft", "c-new"],
        "sorted; the orphan profile `gone` left out"
    );
    let nft = &r.nodes[1];
    assert_eq!(nft.backend, Some(Backend::Nft));
    assert_eq!(nft.iptables_version, Some(Version::new(1, 8, 9)));
    assert_eq!(nft.min_reader_version, Some(Version::new(1, 8, 8)));
    assert_eq!(nft.heartbeat_age_seconds, Some(42));
    assert_eq!(nft.writers.as_ref().map(Vec::len), Some(2));
    assert_eq!(nft.kernel.as_deref(), Some("6.1.0"));
    assert!(
        nft.taints.is_empty(),
        "other controllers' taints are not nfguard's"
    );
    assert!(!nft.degraded && !nft.stale && nft.profile);
    assert_eq!(nft.ready, Some(true));

    let legacy = &r.nodes[0];
    assert_eq!(legacy.backend, Some(Backend::Legacy));
    assert_eq!(
        legacy.hazards,
        [
            HazardSummary {
                code: HazardCode::FirewallUnconditionalDrop,
                severity: Severity::Critical
            },
            HazardSummary {
                code: HazardCode::KubeletChainsMissing,
                severity: Severity::Warning
            },
        ],
        "distinct codes, critical first"
    );
    assert_eq!(legacy.taints.len(), 1);
    assert!(legacy.degraded);
    assert_eq!(legacy.writers, None, "no inventory recorded yet");

    let new = &r.nodes[2];
    assert!(!new.profile && !new.stale && !new.degraded);
    assert_eq!(new.ready, Some(false));
    assert_eq!(
        r.summary,
        Summary {
            nodes: 3,
            degraded: 1,
            stale: 0,
            without_profile: 1
        }
    );
}

#[test]
fn stale_after_three_probe_intervals_as_the_controller_judges() {
    // interval 10 s: fresh up to 30 s after the probe, stale after.
    let at = |probe: &str| {
        build_report(
            &[legacy_profile(probe)],
            &[node("a-legacy", "True", json!([]))],
            ts(NOW),
        )
        .nodes[0]
            .stale
    };
    assert!(!at("2026-03-01T11:59:30Z"));
    assert!(at("2026-03-01T11:59:29Z"));
    assert!(at("not a time"), "an unreadable heartbeat is stale");
    let never = profile("n", json!({"activeBackend": "nft"}));
    let r = build_report(&[never], &[node("n", "True", json!([]))], ts(NOW));
    assert!(r.nodes[0].stale, "never probed is stale");
    assert_eq!(r.summary.stale, 1);
}

#[test]
fn degraded_by_critical_hazard_mixed_backends_or_taint_not_by_warnings() {
    let now = ts(NOW);
    let fresh = "2026-03-01T11:59:59Z";
    let cases = [
        (
            json!({"activeBackend": "nft", "hazards": [{"code": "KubeletChainsMissing", "severity": "warning", "message": ""}]}),
            json!([]),
            false,
        ),
        (
            json!({"activeBackend": "nft", "hazards": [{"code": "OldReaderNewRules", "severity": "critical", "message": ""}]}),
            json!([]),
            true,
        ),
        (json!({"activeBackend": "mixed"}), json!([]), true),
        (
            json!({"activeBackend": "nft"}),
            json!([{"key": "nfguard.io/iptables-incompatible", "effect": "NoSchedule"}]),
            true,
        ),
    ];
    for (mut status, taints, want) in cases {
        status["lastProbeTime"] = json!(fresh);
        let r = build_report(
            &[profile("n", status.clone())],
            &[node("n", "True", taints)],
            now,
        );
        assert_eq!(r.nodes[0].degraded, want, "{status}");
    }
}

#[test]
fn table_is_aligned_like_kubectl_with_a_summary() {
    let text = render(&report(), false);
    let lines: Vec<&str> = text.lines().collect();
    // Each column: its widest cell + 3 (HAZARDS: 46, TAINTED: 44 characters).
    let row = |c: [&str; 8]| {
        format!(
            "{:<11}{:<10}{:<11}{:<13}{:<49}{:<47}{:<10}{}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
        )
    };
    assert_eq!(
        lines[..4],
        [
            row([
                "NODE",
                "BACKEND",
                "IPTABLES",
                "MIN-READER",
                "HAZARDS",
                "TAINTED",
                "WRITERS",
                "HEARTBEAT"
            ]),
            row([
                "a-legacy",
                "legacy",
                "1.8.7",
                "-",
                "FirewallUnconditionalDrop,KubeletChainsMissing",
                "netfilter-degraded=FirewallUnconditionalDrop",
                "?",
                "30s"
            ]),
            row(["b-nft", "nft", "1.8.9", "1.8.8", "-", "-", "2", "42s"]),
            row(["c-new", "-", "-", "-", "-", "-", "-", "no profile"]),
        ]
    );
    assert_eq!(lines[4], "");
    assert!(
        lines[5].starts_with("policy reports: not served"),
        "{}",
        lines[5]
    );
    assert_eq!(lines[6], "3 nodes, 1 degraded, 0 stale, 1 without profile");
    assert_eq!(lines.len(), 7);
}

#[test]
fn wide_adds_columns_and_names_the_writers() {
    let text = render(&report(), true);
    let header = text.lines().next().unwrap();
    assert!(
        header.ends_with(
            "HEARTBEAT    READY   ACTIVE   KERNEL   OLDEST-READER   NEWEST-WRITER   WRITER-VERSIONS"
        ),
        "{header}"
    );
    let nft = text.lines().find(|l| l.starts_with("b-nft")).unwrap();
    assert!(
        nft.ends_with("True    nft      6.1.0    1.8.9           1.8.9           kube-proxy=1.8.9/nft,reporter=?"),
        "{nft}"
    );
}

#[test]
fn stale_and_never_probed_heartbeats_are_flagged() {
    let r = build_report(
        &[
            legacy_profile("2026-03-01T11:50:00Z"),
            profile("n", json!({})),
        ],
        &[
            node("a-legacy", "True", json!([])),
            node("n", "True", json!([])),
        ],
        ts(NOW),
    );
    let text = render(&r, false);
    assert!(
        text.lines().nth(1).unwrap().ends_with("10m (stale)"),
        "{text}"
    );
    assert!(
        text.lines().nth(2).unwrap().ends_with("never (stale)"),
        "{text}"
    );
    assert!(text.ends_with("2 nodes, 1 degraded, 2 stale, 0 without profile\n"));
}

#[test]
fn render_table_pads_to_the_widest_cell_plus_three_min_six() {
    let t = render_table(
        &["A", "LONGER", "Z"],
        &[
            vec!["x".into(), "y".into(), "last cell not padded".into()],
            vec!["wide-cell".into(), "".into(), "z".into()],
        ],
    );
    assert_eq!(
        t,
        "A           LONGER   Z\nx           y        last cell not padded\nwide-cell            z\n"
    );
    assert_eq!(render_table(&["A", "B"], &[]), "A     B\n", "min width 6");
}

#[test]
fn ages_read_like_kubectl() {
    // apimachinery's HumanDuration test table.
    let h = 3600;
    for (secs, want) in [
        (-5, "0s"),
        (1, "1s"),
        (70, "70s"),
        (190, "3m10s"),
        (300, "5m"),
        (70 * 60, "70m"),
        (3 * h + 20 * 60, "3h20m"),
        (47 * h, "47h"),
        (49 * h, "2d1h"),
        ((8 * 24 + 2) * h, "8d"),
        (367 * 24 * h, "367d"),
        ((365 * 2 * 24 + 25) * h, "2y1d"),
        ((365 * 8 * 24 + 2) * h, "8y"),
    ] {
        assert_eq!(human_age(secs), want, "{secs}s");
    }
}

#[test]
fn json_document_has_every_field_even_when_unknown() {
    let v = serde_json::to_value(report()).unwrap();
    let keys = |i: usize| -> Vec<String> {
        let mut k: Vec<String> = v["nodes"][i].as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(1),
        keys(2),
        "a node without profile has the same fields"
    );
    assert_eq!(
        keys(2),
        [
            "activeBackend",
            "backend",
            "degraded",
            "hazards",
            "heartbeatAgeSeconds",
            "iptablesVersion",
            "kernel",
            "lastProbeTime",
            "minReaderVersion",
            "name",
            "newestWriterVersion",
            "oldestReaderVersion",
            "probeError",
            "profile",
            "ready",
            "stale",
            "taints",
            "writers"
        ]
    );
    assert_eq!(v["nodes"][1]["backend"], "nft");
    assert_eq!(v["nodes"][1]["minReaderVersion"], "1.8.8");
    assert_eq!(
        v["nodes"][0]["hazards"][0],
        json!({"code": "FirewallUnconditionalDrop", "severity": "critical"})
    );
    assert_eq!(
        v["nodes"][0]["taints"][0],
        json!({"key": "nfguard.io/netfilter-degraded", "value": "FirewallUnconditionalDrop", "effect": "NoSchedule"})
    );
    assert_eq!(v["nodes"][2]["backend"], serde_json::Value::Null);
    assert_eq!(
        v["summary"],
        json!({"nodes": 3, "degraded": 1, "stale": 0, "withoutProfile": 1})
    );
    assert_eq!(
        v["reports"],
        json!({"api": null, "error": null, "namespaces": []})
    );
}
