//! The controller's reconcile path for 5,000 nodes with 20 pods each,
//! exactly as the controller runs it minus the API writes: each node's
//! facts from the caches the watches fill (profile by node, writer pods
//! from the node index, policies, namespace labels), image look-ups through
//! the look-up strategy, the pure plan (writer inventory, labels,
//! conditions, taint decisions with the brake, the judgement of every
//! writer pod under an `action: Taint` policy), and the brake's count.
//! Target: under 100 ms. Reported as a ratio against a same-run baseline:
//! the least any inventory must do (group the pods by node and read every
//! container's security context). Filling the caches from 100,000 pod
//! events (filter, slim, store, index) is measured on its own: the
//! controller pays it as events arrive, not per reconcile.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Node, Pod};
use nfguard::api::{NetfilterPolicy, NodeNetfilterProfile};
use nfguard::compat::evaluate::ImageResolutions;
use nfguard::controller::apply::gather::plan_from_caches;
use nfguard::controller::cache::namespaces::NamespaceMeta;
use nfguard::controller::cache::stores::{self, Caches, FirstLists, listed};
use nfguard::controller::plan::NodePlan;
use nfguard::facts::{Backend, ImageProfile, IptablesFacts};
use nfguard::judgement::{Bounded, FixedImages};
use nfguard::projection::SlimNode;
use serde_json::json;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

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
                &platform.parse().unwrap(),
                ImageProfile {
                    image: image.into(),
                    digest: format!("sha256:{version}"),
                    platform: platform.into(),
                    iptables: Some(IptablesFacts {
                        version: Some(version.parse().unwrap()),
                        backend: Some(backend),
                        ..Default::default()
                    }),
                    nftables: None,
                },
            );
        }
    }
    r
}

fn namespaces() -> Vec<NamespaceMeta> {
    ["default", "kube-system"]
        .into_iter()
        .map(|name| {
            serde_json::from_value(json!({
                "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, "team": "platform"}}
            }))
            .unwrap()
        })
        .collect()
}

/// Caches after the watches' first lists.
fn fill(
    nodes: &[Node],
    profiles: &[NodeNetfilterProfile],
    pods: &[Pod],
    policies: &[NetfilterPolicy],
) -> Caches {
    let (caches, mut feeds) = stores::caches();
    feeds.list(FirstLists {
        nodes: nodes.to_vec(),
        profiles: profiles.to_vec(),
        pods: pods.to_vec(),
        policies: policies.to_vec(),
        namespaces: namespaces(),
    });
    caches
}

/// Reconcile every node in order as the controller does (one at a time,
/// the brake counting the taints already decided), without the writes.
async fn plan_every_node(
    caches: &Caches,
    nodes: &[Arc<SlimNode>],
    images: &Bounded,
) -> Vec<NodePlan> {
    let now = "2026-03-01T12:00:00Z".parse().unwrap();
    let mut plans = Vec::with_capacity(nodes.len());
    for node in nodes {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let plan = plan_from_caches(node, caches, images, deadline, now).await;
        let name = node.metadata.name.as_deref().unwrap_or_default();
        caches.tainted().wrote(name, plan.taints.tainted_after);
        plans.push(plan);
    }
    plans
}

fn bench(c: &mut Criterion) {
    let nodes: Vec<Node> = (0..NODES).map(node).collect();
    let profiles: Vec<NodeNetfilterProfile> = (0..NODES).map(profile).collect();
    let all_pods: Vec<Pod> = (0..NODES).flat_map(pods).collect();
    let policies: Vec<NetfilterPolicy> =
        vec![serde_json::from_value(json!({
        "apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicy",
        "metadata": {"name": "default"},
        "spec": {"action": "Taint", "taintDegradedNodes": true, "maxTaintedNodesPercent": 10,
                 "namespaceSelector": {"matchLabels": {"team": "platform"}}}
    }))
    .unwrap()];
    let images = Bounded::new(Arc::new(FixedImages(images())), 4);
    let caches = fill(&nodes, &profiles, &all_pods, &policies);
    // The Controller hands each reconcile the Node from its store.
    let stored: Vec<Arc<SlimNode>> = nodes
        .iter()
        .map(|n| {
            let name = n.metadata.name.as_deref().unwrap_or_default();
            caches
                .nodes
                .get(&kube::runtime::reflector::ObjectRef::new(name))
                .unwrap()
        })
        .collect();
    let brake_before = caches.tainted().clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();

    // Sanity: the scenario exercises every part.
    let plans = rt.block_on(plan_every_node(&caches, &stored, &images));
    let writers: usize = plans
        .iter()
        .filter_map(|p| p.status.as_ref()?.writers.as_ref().map(Vec::len))
        .sum();
    let tainted = plans.iter().filter(|p| p.taints.tainted_after).count();
    let violating = plans.iter().filter(|p| !p.violations.is_empty()).count();
    eprintln!(
        "nodes={} pods={} kept={} writers={writers} nodes_with_violations={violating} tainted_after={tainted} (limit {})",
        nodes.len(),
        all_pods.len(),
        caches.pods().len(),
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
    g.bench_function("reconcile_path_from_caches", |b| {
        b.iter_batched(
            // Each run starts from the same taints.
            || *caches.tainted() = brake_before.clone(),
            |()| {
                black_box(
                    rt.block_on(plan_every_node(&caches, &stored, &images))
                        .len(),
                )
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("fill_caches_from_100000_pod_events", |b| {
        b.iter_batched(
            || all_pods.clone(),
            |pods| {
                let (caches, mut feeds) = stores::caches();
                for e in listed(pods) {
                    feeds.pods.feed(e);
                }
                black_box(caches.pods().len())
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
