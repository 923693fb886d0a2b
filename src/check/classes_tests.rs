use super::*;
use crate::check::test_data::{reason, result};

const NFT: &str = "nodes with iptables 1.8.9 nft";
const LEGACY: &str = "nodes with iptables 1.8.9 legacy";

#[test]
fn nodes_group_by_the_reasons_naming_them_and_their_description() {
    let r = result(
        "DaemonSet/kube-system/ds",
        vec![
            reason("OldReaderNewRules", "deny", Some("app"), &["a", "b"], "m0"),
            reason(
                "WrapperNoMarkerChains",
                "warn",
                Some("app"),
                &["a", "b", "d"],
                "m1",
            ),
            reason("HostNetworkWithoutNetAdmin", "allow", Some("x"), &[], "m2"),
        ],
        &[
            ("a", NFT),
            ("b", NFT),
            ("c", NFT),
            ("d", LEGACY),
            ("e", LEGACY),
        ],
    );
    let g = group(&r);
    assert_eq!(g.workload_reasons, vec![2]);
    let got: Vec<(&str, Vec<&str>, Vec<usize>)> = g
        .classes
        .iter()
        .map(|c| {
            let nodes = c.nodes.iter().map(String::as_str).collect();
            (c.class.as_str(), nodes, c.reasons.clone())
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (NFT, vec!["a", "b"], vec![0, 1]),
            (NFT, vec!["c"], vec![]),
            (LEGACY, vec!["d"], vec![1]),
            (LEGACY, vec!["e"], vec![]),
        ]
    );
    let names = case_names(&r, &g.classes);
    assert_eq!(
        names,
        vec![
            format!("DaemonSet/kube-system/ds :: {NFT} (2 nodes)"),
            format!("DaemonSet/kube-system/ds :: {NFT} (1 node)"),
            format!("DaemonSet/kube-system/ds :: {LEGACY} (1 node) [WrapperNoMarkerChains]"),
            format!("DaemonSet/kube-system/ds :: {LEGACY} (1 node) [no findings]"),
        ]
    );
}

#[test]
fn names_alike_even_by_codes_are_numbered() {
    let r = result(
        "Pod/ns/p",
        vec![
            reason("BackendMismatch", "deny", Some("app"), &["a"], "one"),
            reason("BackendMismatch", "deny", Some("app"), &["b"], "two"),
        ],
        &[("a", NFT), ("b", NFT)],
    );
    let g = group(&r);
    assert_eq!(
        case_names(&r, &g.classes),
        vec![
            format!("Pod/ns/p :: {NFT} (1 node) [BackendMismatch]"),
            format!("Pod/ns/p :: {NFT} (1 node) [BackendMismatch] #2"),
        ]
    );
}

fn profile(status: serde_json::Value) -> NodeNetfilterProfile {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
        "metadata": {"name": "n"}, "spec": {"nodeName": "n"}, "status": status,
    }))
    .expect("a profile")
}

#[test]
fn class_descriptions_from_profiles() {
    let nft = profile(serde_json::json!({
        "iptables": {"version": "1.8.9", "backend": "nft", "evidence": []},
        "activeBackend": "nft"}));
    let split = profile(serde_json::json!({
        "iptables": {"version": "1.8.7", "backend": "nft", "evidence": []},
        "activeBackend": "legacy"}));
    let bare = profile(serde_json::json!({"activeBackend": "mixed"}));
    let empty = profile(serde_json::json!({}));
    let cand = |name: &'static str, platform: &str, p: Option<&'static NodeNetfilterProfile>| {
        Candidate::new(name, platform.parse().unwrap(), p)
    };
    let leak =
        |p: NodeNetfilterProfile| -> &'static NodeNetfilterProfile { Box::leak(Box::new(p)) };
    let (nft, split, bare, empty) = (leak(nft), leak(split), leak(bare), leak(empty));
    let one_platform = [
        cand("a", "linux/amd64", Some(nft)),
        cand("b", "linux/amd64", Some(split)),
        cand("c", "linux/amd64", Some(bare)),
        cand("d", "linux/amd64", Some(empty)),
        cand("e", "linux/amd64", None),
    ];
    let classes: Vec<String> = candidate_nodes(&one_platform)
        .into_iter()
        .map(|c| c.class)
        .collect();
    assert_eq!(
        classes,
        vec![
            "nodes with iptables 1.8.9 nft",
            "nodes with iptables 1.8.7 nft, rules in legacy",
            "nodes without host iptables, rules in mixed",
            "nodes with an incomplete NodeNetfilterProfile",
            "nodes without a NodeNetfilterProfile",
        ]
    );
    let two_platforms = [
        cand("a", "linux/amd64", Some(nft)),
        cand("b", "linux/arm64", Some(nft)),
    ];
    let classes: Vec<String> = candidate_nodes(&two_platforms)
        .into_iter()
        .map(|c| c.class)
        .collect();
    assert_eq!(
        classes,
        vec![
            "linux/amd64 nodes with iptables 1.8.9 nft",
            "linux/arm64 nodes with iptables 1.8.9 nft",
        ]
    );
}
