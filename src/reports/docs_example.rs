//! docs/reports.md's example is a real report: three pods of one DaemonSet
//! judged on their nodes through `crate::judgement` (the path the controller
//! will call), turned into the `Report` the controller would write.

use super::*;
use crate::api::{
    ActiveBackend, BackendFacts, BackendsFacts, NodeNetfilterProfile, NodeNetfilterProfileSpec,
    NodeNetfilterProfileStatus,
};
use crate::compat::evaluate::{Candidate, ImageResolutions};
use crate::facts::{Backend, ImageProfile, IptablesFacts, Platform, Severity};
use crate::judgement::{PolicyBook, Scene, Subject};
use crate::projection::PodFacts;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

const IMAGE: &str = "registry.example/kube-router:v1.2";

/// An nft node whose host iptables is `host` and wrote its rules.
fn nft_node(name: &str, host: &str) -> NodeNetfilterProfile {
    let mut p = NodeNetfilterProfile::new(
        name,
        NodeNetfilterProfileSpec {
            node_name: Some(name.into()),
        },
    );
    let facts = |markers: bool| BackendFacts {
        tables: 1,
        chains: 1,
        rules: 1,
        hint_chain: markers,
        canary_chain: markers,
        marker_tables: vec![],
    };
    p.status = Some(NodeNetfilterProfileStatus {
        iptables: Some(IptablesFacts {
            version: Some(host.parse().unwrap()),
            backend: Some(Backend::Nft),
            ..Default::default()
        }),
        active_backend: Some(ActiveBackend::Nft),
        backends: Some(BackendsFacts {
            nft: facts(true),
            legacy: facts(false),
        }),
        ..Default::default()
    });
    p
}

fn kube_router_pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": "kube-system", "uid": format!("uid-{name}"),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": "kube-router", "uid": "0c3e6a3b-5f55-4d1e-9d0e-7b1f1a2c3d4e",
                "controller": true}]
        },
        "spec": {
            "nodeName": node, "hostNetwork": true,
            "containers": [{"name": "kube-router", "image": IMAGE,
                "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]
        }
    }))
    .unwrap()
}

fn example_report() -> DesiredReport {
    let platform: Platform = "linux/amd64".parse().unwrap();
    let node_a = nft_node("node-a", "1.8.9");
    let node_b = nft_node("node-b", "1.8.7");
    // node-c has no NodeNetfilterProfile yet.
    let nodes: [(&str, Option<&NodeNetfilterProfile>); 3] = [
        ("node-a", Some(&node_a)),
        ("node-b", Some(&node_b)),
        ("node-c", None),
    ];
    let mut images = ImageResolutions::new();
    images.insert_profile(
        IMAGE,
        &platform,
        ImageProfile {
            image: IMAGE.into(),
            digest: format!("sha256:{}", "4dac5559e9d7".repeat(5) + "0f3a"),
            platform: platform.to_string(),
            iptables: Some(IptablesFacts {
                version: Some("1.8.7".parse().unwrap()),
                backend: Some(Backend::Nft),
                ..Default::default()
            }),
            nftables: None,
        },
    );
    let policies = PolicyBook::new(Vec::new());
    let scene = Scene {
        profiles: &[],
        nodes: &[],
        policies: &policies,
        default_platform: &platform,
        index: None,
    };
    let pods: Vec<PodFacts> = nodes
        .iter()
        .enumerate()
        .map(|(i, (node, _))| PodFacts::of(&kube_router_pod(&format!("kube-router-{i}"), node)))
        .collect();
    let mut refs = Vec::new();
    let mut decisions = Vec::new();
    let mut sources = Vec::new();
    for (pod, (node, profile)) in pods.iter().zip(nodes) {
        let subject = Subject::RunningPod {
            pod,
            node: Candidate::new(node, platform.clone(), profile),
        };
        let prepared = scene.prepare(subject);
        decisions.push(prepared.decide(&images, Severity::Info));
        sources.push(prepared.policy.sources.clone());
        refs.push(PodRef {
            namespace: pod.namespace.to_string(),
            name: pod.name.to_string(),
            uid: pod.uid.to_string(),
            controller: pod.controller.clone(),
        });
    }
    // A DaemonSet's pods: no store look-up is needed.
    let owners: Vec<ObjectId> = refs
        .iter()
        .map(|p| resolve_owner(p, |_| Parent::Unknown).unwrap())
        .collect();
    let judged: Vec<JudgedPod<'_>> = (0..pods.len())
        .map(|i| JudgedPod {
            pod: &refs[i],
            owner: &owners[i],
            node: nodes[i].0,
            policies: &sources[i],
            decision: &decisions[i],
        })
        .collect();
    let reports = build_reports(&judged);
    assert_eq!(reports.len(), 1);
    reports.into_iter().next().unwrap()
}

fn example() -> Report {
    example_report().to_report()
}

#[test]
fn the_example_judges_one_pod_unsafe_one_compatible_and_one_unknown() {
    let r = example();
    let got: Vec<(&str, Option<ResultKind>)> = r
        .results
        .iter()
        .map(|x| (x.rule.as_str(), x.result))
        .collect();
    assert_eq!(
        got,
        [
            ("OldReaderNewRules", Some(ResultKind::Fail)),
            ("NodeProfileMissing", Some(ResultKind::Warn)),
            (RULE_COMPATIBLE, Some(ResultKind::Pass)),
        ]
    );
    let name = r.metadata.name.as_deref().unwrap();
    assert_eq!(
        crate::reports::build::without_hash(name),
        "nfguard-daemonset-kube-router"
    );
}

#[test]
fn the_docs_example_is_this_report() {
    let yaml = serde_yaml::to_string(&example()).unwrap();
    crate::docs_block::check_generated_block(
        "docs/reports.md",
        "<!-- report-example:begin",
        "<!-- report-example:end -->",
        &format!("```yaml\n{yaml}```\n"),
        "cargo test --lib reports::docs_example",
    );
}
