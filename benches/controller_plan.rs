//! The controller's pure reconcile core for 5,000 nodes with 20 pods each
//! (writer inventory, labels, conditions, taint decisions with the brake,
//! and `evaluate` of every writer pod under a `action: Taint` policy).
//! Target: under 100 ms. Reported as a ratio against a same-run baseline:
//! the least any inventory must do (group the pods by node and read every
//! container's security context).

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Node, Pod};
use nfguard::api::{NetfilterPolicy, NodeNetfilterProfile};
use nfguard::compat::evaluate::ImageResolutions;
use nfguard::controller::plan::{ClusterFacts, plan_all};
use nfguard::facts::{Backend, ImageProfile, IptablesFacts};
use serde_json::json;
use std::collections::HashMap;
use std::hint::black_box;

const NODES: usize = 5_000;
const PODS_PER_NODE: usize = 20;

fn node(i: usize) -> Node {
    let tainted = i.is_multiple_of(200);
    serde_json::from_value(json!({
        "metadata": {"name": format!("node-{i:05}"), "resourceVersion": "10",
                     "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": if i.is_multiple_of(4) {"arm64"} else {"amd64"},
                                "nfguard.io/iptables-backend": "nft", "nfguard.io/iptables-version": "1.8.9"}},
        "spec": {"taints": if tainted {
            json!([{"key": "nfguard.io/netfilter-degraded", "value": "FirewallUnconditionalDrop", "effect": "NoSchedule"}])
        } else { json!([]) }}
    }))
    .unwrap()
}

fn profile(i: usize) -> NodeNetfilterProfile {
    let hazards = if i.is_multiple_of(100) {
        json!([{"code": "FirewallUnconditionalDrop", "severity": "critical", "message": "drop",
                "backend": "nft", "table": "filter", "chain": "KUBE-FIREWALL"}])
    } else {
        json!([{"code": "BridgeNetfilterDisabled", "severity": "warning", "message": "bridge"}])
    };
    serde_json::from_value(json!({
        "metadata": {"name": format!("node-{i:05}"), "generation": 1},
        "spec": {"nodeName": format!("node-{i:05}")},
        "status": {
            "iptables": {"version": "1.8.9", "backend": "nft", "evidence": []},
            "kernel": {"release": "6.1", "nfTables": true, "ipTables": true},
            "backends": {"nft": {"tables": 3, "chains": 40, "rules": 400, "hintChain": true, "canaryChain": true},
                         "legacy": {"tables": 0, "chains": 0, "rules": 0, "hintChain": false, "canaryChain": false}},
            "activeBackend": "nft",
            "minReaderVersion": if i.is_multiple_of(2) { json!("1.8.8") } else { json!(null) },
            "hazards": hazards,
            "lastProbeTime": "2026-03-01T11:59:30Z",
            "probeIntervalSeconds": 60
        }
    }))
    .unwrap()
}

fn pods(i: usize) -> Vec<Pod> {
    let node = format!("node-{i:05}");
    (0..PODS_PER_NODE)
        .map(|k| {
            let (host, sc, image) = match k {
                0 => (true, json!({"capabilities": {"add": ["NET_ADMIN"]}}), "reg.test/kube-proxy:1.33"),
                1 => (true, json!({"privileged": true}), if i.is_multiple_of(3) { "reg.test/cni:old" } else { "reg.test/cni:2" }),
                _ => (false, json!({"runAsNonRoot": true}), "reg.test/app:1"),
            };
            serde_json::from_value(json!({
                "metadata": {"name": format!("p-{i}-{k}"), "namespace": if k < 2 { "kube-system" } else { "default" }},
                "spec": {"nodeName": node, "hostNetwork": host,
                         "containers": [{"name": "c", "image": image, "securityContext": sc},
                                        {"name": "sidecar", "image": "reg.test/sidecar:1"}]},
                "status": {"phase": "Running"}
            }))
            .unwrap()
        })
        .collect()
}

fn images() -> ImageResolutions {
    let mut r = ImageResolutions::new();
    for platform in ["linux/amd64", "linux/arm64"] {
        for (image, version, backend) in [
            ("reg.test/kube-proxy:1.33", "1.8.9", Backend::Nft),
            ("reg.test/cni:2", "1.8.11", Backend::Wrapper),
            ("reg.test/cni:old", "1.8.7", Backend::Nft),
        ] {
            r.insert_profile(
                image,
                platform,
                ImageProfile {
                    image: image.into(),
                    digest: format!("sha256:{version}"),
                    platform: platform.into(),
                    iptables: Some(IptablesFacts {
                        version: Some(version.parse().unwrap()),
                        backend: Some(backend),
                        ..Default::default()
                    }),
                },
            );
        }
    }
    r
}

fn bench(c: &mut Criterion) {
    let nodes: Vec<Node> = (0..NODES).map(node).collect();
    let profiles: Vec<NodeNetfilterProfile> = (0..NODES).map(profile).collect();
    let all_pods: Vec<Pod> = (0..NODES).flat_map(pods).collect();
    let policies: Vec<NetfilterPolicy> =
        vec![serde_json::from_value(json!({
        "apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicy",
        "metadata": {"name": "default"},
        "spec": {"action": "Taint", "taintDegradedNodes": true, "maxTaintedNodesPercent": 10}
    }))
    .unwrap()];
    let images = images();
    let facts = ClusterFacts {
        nodes: &nodes,
        profiles: &profiles,
        pods: &all_pods,
        policies: &policies,
        images: &images,
        now: "2026-03-01T12:00:00Z".parse().unwrap(),
    };
    // Sanity: the scenario exercises every part.
    let plans = plan_all(&facts);
    let writers: usize = plans
        .iter()
        .filter_map(|p| p.status.as_ref()?.writers.as_ref().map(Vec::len))
        .sum();
    let tainted = plans.iter().filter(|p| p.taints.tainted_after).count();
    let violating = plans.iter().filter(|p| !p.violations.is_empty()).count();
    eprintln!(
        "nodes={} pods={} writers={writers} nodes_with_violations={violating} tainted_after={tainted} (limit {})",
        nodes.len(),
        all_pods.len(),
        NODES / 10
    );
    assert_eq!(writers, NODES * 2);
    assert!(violating > 0 && tainted <= NODES / 10);

    let mut g = c.benchmark_group("controller_5000_nodes_20_pods");
    g.sample_size(20);
    g.bench_function("baseline_group_and_scan", |b| {
        b.iter(|| {
            let mut by: HashMap<&str, Vec<&Pod>> = HashMap::with_capacity(NODES);
            for p in &all_pods {
                if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    by.entry(n).or_default().push(p);
                }
            }
            let mut privileged = 0usize;
            for n in &nodes {
                for p in by
                    .get(n.metadata.name.as_deref().unwrap_or(""))
                    .into_iter()
                    .flatten()
                {
                    for c in &p.spec.as_ref().unwrap().containers {
                        privileged += usize::from(
                            c.security_context
                                .as_ref()
                                .and_then(|s| s.privileged)
                                .unwrap_or(false),
                        );
                    }
                }
            }
            black_box(privileged)
        })
    });
    g.bench_function("plan_all", |b| {
        b.iter(|| black_box(plan_all(black_box(&facts)).len()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
