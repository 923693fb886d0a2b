//! Evaluating a DaemonSet with 3 containers against 5,000 node profiles
//! (images already resolved). Target: under 5 ms. Reported as a ratio
//! against a same-run baseline: the minimal pass any evaluator needs (read
//! every candidate's status and compare one version per container).
//!
//! `webhook_review_pod`: the webhook's whole in-process path for one
//! AdmissionReview (parse, scope, judge against the same 5,000 profiles with
//! the shared per-generation index, render the answer), for the bench
//! cluster's pod (hostNetwork + NET_ADMIN, no node: judged against every
//! node), a new name each time so the decision cache never answers; its
//! image answer comes from the webhook's warm image cache. Compare it with
//! `select_candidates_and_evaluate_indexed`: what the webhook adds around
//! the judgement.

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Node;
use nfguard::api::{
    ActiveBackend, BackendFacts, BackendsFacts, KernelFacts, NodeNetfilterProfile,
    NodeNetfilterProfileSpec, NodeNetfilterProfileStatus, Writer,
};
use nfguard::compat::evaluate::{DEFAULT_PLATFORM, ImageResolutions, NodeIndex, Workload};
use nfguard::facts::{Backend, ImageProfile, IptablesFacts, Severity, Version};
use nfguard::judgement::FixedImages;
use nfguard::judgement::{PolicyBook, Scene, Subject};
use nfguard::webhook::admission::Judge;
use nfguard::webhook::facts::{Facts, Snapshot};
use nfguard::webhook::images::{CacheTtl, ImageCache};
use nfguard::webhook::metrics::Metrics;
use serde_json::json;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

const NODES: usize = 5_000;

fn v(s: &str) -> Version {
    s.parse().unwrap()
}

fn profiles() -> Vec<NodeNetfilterProfile> {
    (0..NODES)
        .map(|i| {
            let name = format!("node-{i:05}");
            let legacy = i % 10 == 0;
            let host = ["1.8.7", "1.8.9", "1.8.11"][i % 3];
            let mut p = NodeNetfilterProfile::new(
                &name,
                NodeNetfilterProfileSpec {
                    node_name: Some(name.clone()),
                },
            );
            let bf = |m: bool| BackendFacts {
                tables: 3,
                chains: 20,
                rules: 200,
                hint_chain: m,
                canary_chain: m,
                marker_tables: vec![],
            };
            p.status = Some(NodeNetfilterProfileStatus {
                iptables: Some(IptablesFacts {
                    version: Some(v(host)),
                    backend: Some(if legacy {
                        Backend::Legacy
                    } else {
                        Backend::Nft
                    }),
                    ..Default::default()
                }),
                kernel: Some(KernelFacts {
                    release: "6.1".into(),
                    nf_tables: true,
                    ip_tables: true,
                    modules: None,
                }),
                backends: Some(BackendsFacts {
                    nft: bf(!legacy),
                    legacy: bf(legacy),
                }),
                active_backend: Some(if legacy {
                    ActiveBackend::Legacy
                } else {
                    ActiveBackend::Nft
                }),
                min_reader_version: (host != "1.8.7" && !legacy).then(|| v("1.8.8")),
                writers: Some(vec![Writer {
                    pod: format!("kube-system/kube-proxy-{i}"),
                    container: "kube-proxy".into(),
                    image: "registry.k8s.io/kube-proxy:v1.33.0".into(),
                    version: Some(v("1.8.9")),
                    backend: Some(Backend::Wrapper),
                    ..Default::default()
                }]),
                newest_writer_version: Some(v("1.8.9")),
                oldest_reader_version: Some(v(host).min(v("1.8.9"))),
                ..Default::default()
            });
            p
        })
        .collect()
}

fn nodes() -> Vec<Node> {
    (0..NODES)
        .map(|i| {
            serde_json::from_value(json!({
                "metadata": {"name": format!("node-{i:05}"), "labels": {
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": if i % 4 == 0 { "arm64" } else { "amd64" }}},
                "spec": {"taints": if i % 50 == 0 {
                    json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}])
                } else { json!([]) }}
            }))
            .unwrap()
        })
        .collect()
}

fn daemonset() -> Workload {
    let c = |name: &str, image: &str| {
        json!({"name": name, "image": image,
               "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}})
    };
    Workload::from_value(&json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "cni", "namespace": "kube-system"},
        "spec": {"template": {"spec": {
            "hostNetwork": true,
            "initContainers": [c("install", "cni:1.8.9")],
            "containers": [c("agent", "cni-agent:wrapper"), c("proxy", "old-proxy:1.8.7")],
        }}}
    }))
    .unwrap()
    .unwrap()
}

fn resolutions(keys: &[nfguard::compat::evaluate::ImageKey]) -> ImageResolutions {
    let mut res = ImageResolutions::new();
    for k in keys {
        let (ver, backend) = match k.image.as_str() {
            "cni:1.8.9" => ("1.8.9", Backend::Nft),
            "cni-agent:wrapper" => ("1.8.11", Backend::Wrapper),
            _ => ("1.8.7", Backend::Nft),
        };
        res.insert_profile(
            &k.image,
            &k.platform,
            ImageProfile {
                image: k.image.clone(),
                digest: "sha256:0".into(),
                platform: k.platform.to_string(),
                iptables: Some(IptablesFacts {
                    version: Some(v(ver)),
                    backend: Some(backend),
                    ..Default::default()
                }),
                nftables: None,
            },
        );
    }
    res
}

const REVIEW_IMAGE: &str = "registry.example/compatible:1.8.11-wrapper";

/// The review's one image (iptables 1.8.11 behind iptables-wrapper), as the
/// registry would answer it for each platform the nodes run.
fn review_images() -> FixedImages {
    let mut res = ImageResolutions::new();
    for platform in ["linux/amd64", "linux/arm64"] {
        res.insert_profile(
            REVIEW_IMAGE,
            &platform.parse().unwrap(),
            ImageProfile {
                image: REVIEW_IMAGE.into(),
                digest: "sha256:0".into(),
                platform: platform.into(),
                iptables: Some(IptablesFacts {
                    version: Some(v("1.8.11")),
                    backend: Some(Backend::Wrapper),
                    ..Default::default()
                }),
                nftables: None,
            },
        );
    }
    FixedImages(res)
}

/// An AdmissionReview of the bench cluster's pod (examples/bench_cluster).
fn pod_review(name: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": name, "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "bench", "operation": "CREATE", "userInfo": {"username": "bench"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "bench"},
                "spec": {"hostNetwork": true, "containers": [{
                    "name": "agent", "image": REVIEW_IMAGE,
                    "command": ["sleep", "infinity"],
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]}}
        }
    }))
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let profiles = profiles();
    let nodes = nodes();
    let prefs: Vec<&NodeNetfilterProfile> = profiles.iter().collect();
    let nrefs: Vec<&Node> = nodes.iter().collect();
    let w = daemonset();
    let policies = PolicyBook::default();
    let default_platform = DEFAULT_PLATFORM.parse().unwrap();
    // The production path: what the webhook, the controller and check call.
    let scene = Scene {
        profiles: &prefs,
        nodes: &nrefs,
        policies: &policies,
        default_platform: &default_platform,
        index: None,
    };
    // What the webhook and `check` judge with: per-node facts built once.
    let index = NodeIndex::new(&prefs, &nrefs, &default_platform);
    let indexed = Scene {
        index: Some(&index),
        ..scene
    };
    let prepared = scene.prepare(Subject::Workload(&w));
    let images = resolutions(&prepared.images);
    let image_versions = [v("1.8.9"), v("1.8.11"), v("1.8.7")];

    let mut g = c.benchmark_group("daemonset_3_containers_5000_nodes");
    g.bench_function("baseline_min_pass", |b| {
        b.iter(|| {
            let mut unsafe_pairs = 0usize;
            for p in black_box(&prefs) {
                let min = p.status.as_ref().and_then(|s| s.min_reader_version);
                for iv in &image_versions {
                    if min.is_some_and(|m| *iv < m) {
                        unsafe_pairs += 1;
                    }
                }
            }
            black_box(unsafe_pairs)
        })
    });
    g.bench_function("evaluate", |b| {
        b.iter(|| black_box(black_box(&prepared).decide(&images, Severity::Info)))
    });
    g.bench_function("select_candidates_and_evaluate", |b| {
        b.iter(|| {
            let prepared = scene.prepare(Subject::Workload(black_box(&w)));
            black_box(prepared.decide(&images, Severity::Info))
        })
    });
    g.bench_function("select_candidates_and_evaluate_indexed", |b| {
        b.iter(|| {
            let prepared = indexed.prepare(Subject::Workload(black_box(&w)));
            black_box(prepared.decide(&images, Severity::Info))
        })
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let metrics = Arc::new(Metrics::new());
    let judge = Judge {
        facts: Arc::new(Facts::Static(Arc::new(Snapshot::new(
            profiles.iter().cloned().map(Arc::new).collect(),
            nodes.iter().cloned().map(Arc::new).collect(),
            PolicyBook::default(),
        )))),
        images: Arc::new(ImageCache::new(
            Arc::new(review_images()),
            64,
            CacheTtl::default(),
            metrics.clone(),
        )),
        pull_secrets: None,
        metrics,
        timeout: Duration::from_secs(10),
        default_platform: DEFAULT_PLATFORM.parse().unwrap(),
        max_nodes: 5,
        decisions: None,
    };
    let warm = rt.block_on(judge.review(&pod_review("warm")));
    // Judged for real: admitted (with warnings for the 1.8.7 hosts), not
    // skipped, rejected or allowed unchecked for want of an image answer.
    assert_eq!(
        warm.verdict,
        "warn",
        "{}",
        String::from_utf8_lossy(&warm.body)
    );
    let mut n = 0u64;
    g.bench_function("webhook_review_pod", |b| {
        b.iter(|| {
            n += 1;
            let body = pod_review(&format!("pod-{n}"));
            black_box(rt.block_on(judge.review(black_box(&body))))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
