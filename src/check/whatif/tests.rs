//! `assume` and `annotate` on real profiles, judged by the real `check`.
//! The fixtures are shared with status's what-if tests.

use super::*;
use crate::api::NodeNetfilterProfile;
use crate::check::{ResolveOptions, check};
use crate::compat::evaluate::{ImageResolutions, Workload};
use crate::facts::{Backend, ImageProfile, IptablesFacts, Platform};
use crate::judgement::FixedImages;
use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub(crate) fn profile(name: &str, host: &str) -> NodeNetfilterProfile {
    serde_json::from_value(json!({
        "apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
        "metadata": {"name": name}, "spec": {"nodeName": name},
        "status": {"iptables": {"version": host, "backend": "nft", "evidence": []},
                   "activeBackend": "nft",
                   "backends": {"nft": {"tables": 3, "chains": 9, "rules": 20, "hintChain": true, "canaryChain": true},
                                "legacy": {"tables": 0, "chains": 0, "rules": 0, "hintChain": false, "canaryChain": false}}}
    }))
    .unwrap()
}

pub(crate) fn node(name: &str, pool: &str) -> Node {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": pool, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}}}))
    .unwrap()
}

/// A kube-router-like DaemonSet whose image bundles iptables-nft 1.8.7.
pub(crate) fn daemonset() -> Workload {
    Workload::from_value(&json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kr", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"hostNetwork": true,
            "containers": [{"name": "kr", "image": "kr:1.8.7", "securityContext": {"privileged": true}}]}}}}))
    .unwrap()
    .unwrap()
}

pub(crate) fn inputs() -> Inputs {
    // Both nodes' hosts run 1.8.7 today: the 1.8.7 image is safe everywhere.
    Inputs {
        workloads: vec![daemonset()],
        profiles: vec![profile("node-a", "1.8.7"), profile("node-b", "1.8.7")],
        nodes: vec![node("node-a", "old"), node("node-b", "new")],
        ..Default::default()
    }
}

pub(crate) fn images() -> ResolveOptions {
    let facts = IptablesFacts {
        version: Some("1.8.7".parse().unwrap()),
        backend: Some(Backend::Nft),
        ..Default::default()
    };
    let profile = ImageProfile {
        image: "kr:1.8.7".into(),
        digest: "sha256:0f".into(),
        platform: "linux/amd64".into(),
        iptables: Some(facts),
        nftables: None,
    };
    let mut known = ImageResolutions::new();
    known.insert_profile("kr:1.8.7", &Platform::linux_amd64(), profile);
    ResolveOptions {
        lookup: Arc::new(FixedImages(known)),
        credentials: Arc::new(crate::registry::Anonymous),
        timeout: Duration::from_secs(5),
        concurrency: 2,
    }
}

pub(crate) fn patches(values: &[&str]) -> Vec<Patch> {
    patch::parse_all(&values.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
}

#[tokio::test]
async fn the_upgrade_is_predicted_on_the_assumed_nodes_only() {
    let today = check(&inputs(), &images()).await.unwrap();
    assert_eq!(today.verdict, Verdict::Allow, "{:#?}", today.results);

    let mut i = inputs();
    let w = assume(&mut i, "pool=old", &patches(&["os=debian-13"])).unwrap();
    assert_eq!(w.nodes, vec!["node-a"]);
    let mut report = check(&i, &images()).await.unwrap();
    annotate(&mut report, &today, w);
    assert_eq!(report.verdict, Verdict::Deny);
    let r = &report.results[0].reasons[0];
    assert_eq!(r.code.to_string(), "OldReaderNewRules");
    assert_eq!(r.nodes, vec!["node-a"], "node-b keeps 1.8.7");
    assert!(
        r.message.starts_with("what-if [pool=old: os=debian-13]: "),
        "{}",
        r.message
    );
    let w = report.what_if.as_ref().unwrap();
    assert_eq!((w.denied, w.warned), (1, 0));
    let text = report.to_text(10);
    assert!(
        text.contains("what-if: 1 workload would be denied, 0 warned on 1 assumed node (pool=old: os=debian-13)"),
        "{text}"
    );
    assert_eq!(report.exit_code(), 1);
    let json: serde_json::Value = serde_json::to_value(&report).unwrap();
    assert_eq!(json["whatIf"]["nodes"], json!(["node-a"]));
    assert_eq!(json["whatIf"]["assume"], json!(["os=debian-13"]));
}

#[tokio::test]
async fn a_legacy_move_is_judged_as_a_backend_mismatch() {
    let today = check(&inputs(), &images()).await.unwrap();
    let mut i = inputs();
    let w = assume(&mut i, "", &patches(&["iptables=1.8.11/legacy"])).unwrap();
    assert_eq!(
        w.nodes,
        vec!["node-a", "node-b"],
        "empty selector: every node"
    );
    let mut report = check(&i, &images()).await.unwrap();
    annotate(&mut report, &today, w);
    let codes: Vec<String> = report.results[0]
        .reasons
        .iter()
        .map(|r| r.code.to_string())
        .collect();
    assert!(codes.contains(&"BackendMismatch".to_string()), "{codes:?}");
    assert!(
        report
            .to_text(10)
            .contains("(all nodes: iptables=1.8.11/legacy)")
    );
}

#[test]
fn selectors_that_cannot_or_do_not_match_are_errors() {
    let mut i = inputs();
    let e = assume(&mut i, "pool=none", &patches(&["os=trixie"])).unwrap_err();
    assert!(e.to_string().contains("matches no node"), "{e}");

    let mut i = inputs();
    i.nodes.clear();
    let e = assume(&mut i, "pool=old", &patches(&["os=trixie"])).unwrap_err();
    assert!(e.to_string().contains("no Node objects"), "{e}");

    let mut i = inputs();
    let e = assume(&mut i, "pool in (old", &patches(&["os=trixie"])).unwrap_err();
    assert!(e.to_string().contains("unclosed"), "{e}");

    // A matched node without a profile is named, the others are patched.
    let mut i = inputs();
    i.nodes.push(node("node-c", "old"));
    let w = assume(&mut i, "pool=old", &patches(&["os=trixie"])).unwrap();
    assert_eq!(w.nodes, vec!["node-a"]);
    assert!(
        i.notes
            .iter()
            .any(|n| n.contains("node-c") && n.contains("no NodeNetfilterProfile"))
    );
    assert_eq!(i.notes.len(), i.note_files.len());
}

#[tokio::test]
async fn findings_that_hold_today_are_labelled_and_not_counted() {
    // node-a's host is 1.8.9 today: the 1.8.7 image is denied there already.
    let mut base = inputs();
    base.profiles[0] = profile("node-a", "1.8.9");
    let today = check(&base, &images()).await.unwrap();
    assert_eq!(today.results[0].reasons[0].nodes, vec!["node-a"]);
    let mut i = base;
    let w = assume(&mut i, "", &patches(&["os=debian-13"])).unwrap();
    let mut report = check(&i, &images()).await.unwrap();
    annotate(&mut report, &today, w);
    // Both nodes now: node-b is new, so the finding is a new prediction.
    let r = &report.results[0].reasons[0];
    assert_eq!(r.nodes, vec!["node-a", "node-b"]);
    assert!(
        r.message.starts_with("what-if [all nodes: os=debian-13]: "),
        "{}",
        r.message
    );
    assert_eq!(report.what_if.as_ref().unwrap().denied, 1);

    // Only node-a assumed: the same finding as today there, not counted.
    let mut i = inputs();
    i.profiles[0] = profile("node-a", "1.8.9");
    let w = assume(&mut i, "pool=old", &patches(&["os=debian-13"])).unwrap();
    let mut report = check(&i, &images()).await.unwrap();
    annotate(&mut report, &today, w);
    let r = &report.results[0].reasons[0];
    assert!(
        r.message
            .starts_with("what-if [pool=old: os=debian-13], as today: "),
        "{}",
        r.message
    );
    let w = report.what_if.as_ref().unwrap();
    assert_eq!((w.denied, w.warned), (0, 0));
}
