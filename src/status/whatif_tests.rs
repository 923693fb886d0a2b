//! The what-if section built from real predictions: the check fixtures'
//! profiles and images, judged by `check::whatif::predict` (the real
//! `check`), then rendered as text and JSON.

use super::*;
use crate::check::Inputs;
use crate::check::whatif::predict::predict;
use crate::check::whatif::tests::{images, inputs, patches, profile};
use crate::compat::evaluate::Workload;
use crate::status::{StatusReport, build_report};
use serde_json::json;

/// A DaemonSet like the fixtures' kube-router (image iptables-nft 1.8.7).
fn daemonset(name: &str) -> Workload {
    Workload::from_value(&json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"template": {"spec": {"hostNetwork": true,
            "containers": [{"name": "kr", "image": "kr:1.8.7", "securityContext": {"privileged": true}}]}}}}))
    .unwrap()
    .unwrap()
}

async fn section(i: Inputs, selector: &str, assume: &[&str]) -> WhatIfStatus {
    let p = predict(i, selector, &patches(assume), images())
        .await
        .unwrap();
    whatif_status(&p).expect("a prediction has a what-if")
}

fn status_with(w: Option<WhatIfStatus>) -> StatusReport {
    let now = "2026-03-01T12:00:00Z".parse().unwrap();
    StatusReport {
        what_if: w,
        ..build_report(&[], &[], now)
    }
}

#[tokio::test]
async fn an_upgrade_that_breaks_a_daemonset_is_listed_with_its_codes_and_nodes() {
    let mut i = inputs();
    // Today's host 1.8.7 on both nodes: the 1.8.7 image is allowed.
    i.workloads.push(daemonset("calm"));
    let w = section(i, "pool=old", &["os=debian-13"]).await;
    assert_eq!(w.assumption.nodes, ["node-a"]);
    assert_eq!((w.judged, w.changed, w.more), (2, 2, 0));
    let listed: Vec<_> = w
        .workloads
        .iter()
        .map(|c| (c.object.as_str(), c.today, c.assumed))
        .collect();
    assert_eq!(
        listed,
        [
            ("DaemonSet/kube-system/calm", Verdict::Allow, Verdict::Deny),
            ("DaemonSet/kube-system/kr", Verdict::Allow, Verdict::Deny),
        ]
    );
    let first = &w.workloads[0];
    assert_eq!(first.codes, [ReasonCode::OldReaderNewRules]);
    assert_eq!(first.nodes, ["node-a"], "node-b is not assumed");
    assert_eq!(
        w.transitions,
        [Transition {
            today: Verdict::Allow,
            assumed: Verdict::Deny,
            workloads: 2
        }]
    );

    let text = whatif_text(&w);
    assert_eq!(
        text,
        "what-if [pool=old: os=debian-13] on 1 assumed node: 2 of 2 running workloads judged differently (allow -> deny 2)\n\
         \x20 allow -> deny  DaemonSet/kube-system/calm [OldReaderNewRules] on node-a\n\
         \x20 allow -> deny  DaemonSet/kube-system/kr [OldReaderNewRules] on node-a\n\
         \x20 every detail: nfguard check --cluster --running --assume-nodes pool=old --assume os=debian-13\n"
    );

    // In the status: the section before the summary, which stays last;
    // `whatIf` in JSON with the same content.
    let report = status_with(Some(w));
    let table = crate::status::table::render(&report, false);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines.last().unwrap().starts_with("0 nodes"), "{table}");
    assert!(table.contains(&text), "{table}");
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(
        v["whatIf"]["workloads"][1],
        json!({"object": "DaemonSet/kube-system/kr", "today": "allow", "assumed": "deny",
               "codes": ["OldReaderNewRules"], "nodes": ["node-a"], "moreNodes": 0})
    );
    assert_eq!(v["whatIf"]["selector"], "pool=old");
    assert_eq!(v["whatIf"]["assume"], json!(["os=debian-13"]));
    assert_eq!(
        v["whatIf"]["transitions"],
        json!([{"today": "allow", "assumed": "deny", "workloads": 2}])
    );
    assert_eq!(v["whatIf"]["changed"], 2);
    assert_eq!(
        (&v["whatIf"]["denied"], &v["whatIf"]["warned"]),
        (&json!(2), &json!(0))
    );
}

#[tokio::test]
async fn the_list_is_bounded_and_says_how_many_more() {
    let mut i = inputs();
    i.workloads = (0..MAX_LISTED + 3)
        .map(|n| daemonset(&format!("ds-{n:02}")))
        .collect();
    let w = section(i, "", &["os=debian-13"]).await;
    assert_eq!((w.changed, w.workloads.len(), w.more), (13, MAX_LISTED, 3));
    assert_eq!(w.workloads[0].nodes, ["node-a", "node-b"]);
    let text = whatif_text(&w);
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("allow -> deny  "))
            .count(),
        10
    );
    assert!(text.contains("\n  and 3 more\n"), "{text}");
    assert!(text.contains("on 2 assumed nodes: 13 of 13"), "{text}");
}

#[tokio::test]
async fn a_change_that_clears_a_denial_is_listed_with_what_it_clears() {
    // node-a's host is 1.8.9 today: the 1.8.7 writer is denied there; node-b
    // runs 1.8.7. Moving node-a to 1.8.7 clears it.
    let mut i = inputs();
    i.profiles[0] = profile("node-a", "1.8.9");
    let w = section(i, "pool=old", &["iptables=1.8.7/nft"]).await;
    assert_eq!(w.changed, 1);
    let c = &w.workloads[0];
    assert_eq!((c.today, c.assumed), (Verdict::Deny, Verdict::Allow));
    assert_eq!(c.codes, [ReasonCode::OldReaderNewRules]);
    assert_eq!(c.nodes, ["node-a"]);
}

#[tokio::test]
async fn no_change_says_so_and_keeps_the_hint() {
    let w = section(inputs(), "", &["iptables=1.8.7/nft"]).await;
    assert_eq!((w.judged, w.changed), (1, 0));
    assert!(w.workloads.is_empty() && w.transitions.is_empty());
    assert_eq!(
        whatif_text(&w),
        "what-if [all nodes: iptables=1.8.7/nft] on 2 assumed nodes: no change for the 1 running workload judged\n\
         \x20 every detail: nfguard check --cluster --running --assume iptables=1.8.7/nft\n"
    );
}

#[test]
fn without_the_flags_status_has_no_section() {
    let report = status_with(None);
    let v = serde_json::to_value(&report).unwrap();
    assert!(v.get("whatIf").is_none(), "{v}");
    assert!(!crate::status::table::render(&report, true).contains("what-if"));
}

#[test]
fn the_hint_quotes_what_a_shell_would_split() {
    assert_eq!(
        hint(
            "kubernetes.io/hostname in (a,b)",
            &["os=debian-13".into(), "kubeProxyMode=nftables".into()]
        ),
        "nfguard check --cluster --running --assume-nodes 'kubernetes.io/hostname in (a,b)' --assume os=debian-13 --assume kubeProxyMode=nftables"
    );
    assert_eq!(shell_word("it's"), r"'it'\''s'");
    assert_eq!(shell_word(""), "''");
}
