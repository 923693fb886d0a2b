//! What the reports of a large cluster cost in etcd: the serialized bytes of
//! every report (etcd stores custom resources as JSON), in the worst case
//! where every judged pod has a critical finding with the incident's full
//! message. The full 5,000-node shape is `#[ignore]`d (10 s in a debug build):
//! `cargo test --lib reports::size_tests -- --ignored --nocapture`.

use super::*;
use crate::compat::evaluate::{Decision, Reason, ReasonCode, Verdict};
use crate::facts::{Backend, Severity, Version};

/// The incident's message and remedy as the engine renders them (docs/check.md).
const MESSAGE: &str = "iptables-nft 1.8.7 in the image cannot read native nftables expressions: \
the node's live rules need a reader >= 1.8.8 and the host's iptables writes with 1.8.9; its \
iptables-save drops those matches (mark, ports, NFLOG) and a restore writes the rules back \
without them (e.g. an unconditional DROP)";
const REMEDY: &str = "use an image with iptables >= 1.8.9 (or iptables-wrapper on >= 1.8.9); or \
keep it off nodes holding native rules: node affinity nfguard.io/min-reader DoesNotExist";

fn failing(node: &str, image: &str) -> Decision {
    let reason = Reason {
        code: ReasonCode::OldReaderNewRules,
        severity: Severity::Critical,
        effect: Verdict::Deny,
        node: Some(node.into()),
        nodes: vec![node.into()],
        container: Some("agent".into()),
        image: Some(image.into()),
        image_digest: Some(format!("sha256:{}", "4dac5559e9d7".repeat(5) + "abcd")),
        platform: Some("linux/amd64".into()),
        image_version: Some(Version::new(1, 8, 7)),
        image_backend: Some(Backend::Nft),
        node_backend: Some("nft".into()),
        other: Some("the host's iptables".into()),
        other_version: Some(Version::new(1, 8, 9)),
        min_reader_version: Some(Version::new(1, 8, 8)),
        image_nft_version: None,
        other_nft_version: None,
        nft_min_reader: None,
        message: MESSAGE.into(),
        remedy: Some(REMEDY.into()),
    };
    super::test_support::decision(vec![reason], 1)
}

/// The cost of one cluster shape's reports.
#[derive(Debug)]
struct Cost {
    pods: usize,
    reports: usize,
    /// Serialized `Report`s, all of them.
    report_bytes: usize,
    /// Serialized `PolicyReport`s, all of them.
    policy_report_bytes: usize,
    largest: usize,
}

/// `daemonsets` DaemonSets on `nodes` nodes (one pod each per node) in
/// `namespaces` namespaces, and `deployments` Deployments of `replicas`.
fn cost(daemonsets: usize, nodes: usize, deployments: usize, replicas: usize) -> Cost {
    let node_names: Vec<String> = (0..nodes)
        .map(|i| {
            format!(
                "ip-10-{:03}-{:03}-{:03}.eu-west-1.compute.internal",
                i / 65536,
                (i / 256) % 256,
                i % 256
            )
        })
        .collect();
    let mut pods = Vec::new();
    let mut owners = Vec::new();
    let mut on_node = Vec::new();
    for d in 0..daemonsets {
        let owner = ObjectId {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            name: format!("node-agent-{d:02}"),
            uid: format!("6f1c2a9e-0000-4000-8000-{d:012}"),
        };
        for (n, _) in node_names.iter().enumerate() {
            pods.push(PodRef {
                namespace: format!("system-{}", d % 5),
                name: format!("node-agent-{d:02}-{n:05x}"),
                uid: format!("9b2d7c1e-{d:04}-4000-8000-{n:012}"),
                controller: Some(owner.clone()),
            });
            owners.push(owner.clone());
            on_node.push(n);
        }
    }
    for d in 0..deployments {
        let owner = ObjectId {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: format!("gateway-{d:04}"),
            uid: format!("3a7e9f20-0000-4000-8000-{d:012}"),
        };
        for r in 0..replicas {
            pods.push(PodRef {
                namespace: format!("team-{}", d % 200),
                name: format!("gateway-{d:04}-7d9f8c6b5d-{r:05}"),
                uid: format!("c4e8a2b6-{d:04}-4000-8000-{r:012}"),
                controller: Some(owner.clone()),
            });
            owners.push(owner.clone());
            on_node.push((d * replicas + r) % nodes);
        }
    }
    let image = "registry.example.com/platform/node-agent:v2.31.4";
    let decisions: Vec<Decision> = on_node
        .iter()
        .map(|&n| failing(&node_names[n], image))
        .collect();
    let policies = vec!["cluster-default".to_string()];
    let judged: Vec<JudgedPod<'_>> = pods
        .iter()
        .zip(&owners)
        .zip(&decisions)
        .zip(&on_node)
        .map(|(((pod, owner), decision), &n)| JudgedPod {
            pod,
            owner,
            node: &node_names[n],
            policies: &policies,
            decision,
        })
        .collect();
    let reports = build_reports(&judged);
    let mut c = Cost {
        pods: pods.len(),
        reports: reports.len(),
        report_bytes: 0,
        policy_report_bytes: 0,
        largest: 0,
    };
    for r in &reports {
        let new = serde_json::to_vec(&r.to_report()).unwrap().len();
        let old = serde_json::to_vec(&r.to_policy_report()).unwrap().len();
        c.report_bytes += new;
        c.policy_report_bytes += old;
        c.largest = c.largest.max(new).max(old);
    }
    c
}

/// The cap makes a DaemonSet's report cost independent of the node count:
/// at 200 and at 2,000 nodes (names of fixed length) only the digits of the
/// counts differ (summary, left-out annotation).
#[test]
fn a_daemonsets_report_costs_the_same_on_200_and_on_2000_nodes() {
    let small = cost(2, 200, 0, 0);
    let large = cost(2, 2000, 0, 0);
    assert_eq!((small.reports, large.reports), (2, 2));
    for (s, l) in [
        (small.report_bytes, large.report_bytes),
        (small.policy_report_bytes, large.policy_report_bytes),
    ] {
        // Per report: summary.fail 200 -> 2000, left out 100 -> 1900.
        assert!(l >= s && l - s <= 2 * 2, "{s} -> {l}");
    }
}

/// The figure: 5,000 nodes x 20 DaemonSets (100,000 pods), then
/// with 2,000 Deployments of 5 replicas added. Every report stays under
/// etcd's 1.5 MiB request limit with a wide margin, and the total within
/// the budget docs/reports.md states.
#[test]
#[ignore = "builds 110,000 judged pods (10 s in debug): run with -- --ignored --nocapture for the figure"]
fn the_reports_of_a_5000_node_cluster_fit_the_budget() {
    for (what, c) in [
        ("5,000 nodes x 20 DaemonSets", cost(20, 5000, 0, 0)),
        (
            "5,000 nodes x 20 DaemonSets + 2,000 Deployments x 5",
            cost(20, 5000, 2000, 5),
        ),
    ] {
        println!(
            "{what}: {} pods, {} reports, Report {} bytes, PolicyReport {} bytes, largest {} bytes",
            c.pods, c.reports, c.report_bytes, c.policy_report_bytes, c.largest
        );
        assert!(c.largest < 256 * 1024, "{what}: largest {}", c.largest);
        assert!(
            c.report_bytes < 64 * 1024 * 1024,
            "{what}: {}",
            c.report_bytes
        );
    }
}
