//! The three components' /metrics, served on loopback by the routers and
//! registries the binaries build (`Metrics::new()` of each component), after
//! real work has filled the labelled families: the webhook judges reviews,
//! the controller plans a degraded node with the real planner.

use super::exposition::{self, Exposition};
use crate::webhook_support::{Fixture, container, fake_registry, object, pod_spec, review, state};
use k8s_openapi::api::core::v1::Node;
use nfguard::api::NodeNetfilterProfile;
use nfguard::compat::evaluate::ImageResolutions;
use nfguard::controller::http::HttpState;
use nfguard::controller::metrics::{
    Change, Metrics as ControllerMetrics, NodeObservation, Stage, StageLabel, TaintChangeLabel,
    TaintLabel,
};
use nfguard::controller::plan::taints::TaintSettings;
use nfguard::controller::plan::{NodeFacts, plan_node};
use nfguard::judgement::PolicyBook;
use nfguard::wellknown::{TAINT_DEGRADED, TAINT_INCOMPATIBLE};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub struct Scrapes {
    pub webhook: Exposition,
    pub controller: Exposition,
    pub reporter: Exposition,
}

impl Scrapes {
    /// (component, exposition) for job-specific checks.
    pub fn all(&self) -> [(&'static str, &Exposition); 3] {
        [
            ("webhook", &self.webhook),
            ("controller", &self.controller),
            ("reporter", &self.reporter),
        ]
    }
}

/// Serve `app` on 127.0.0.1 and return its /metrics text (as Prometheus scrapes it).
async fn scrape(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let resp = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    let text = resp.text().await.unwrap();
    server.abort();
    text
}

pub async fn scrape_all() -> Scrapes {
    let parse = |who: &str, text: String| {
        exposition::parse(&text).unwrap_or_else(|e| panic!("{who} /metrics: {e}\n{text}"))
    };
    Scrapes {
        webhook: parse("webhook", webhook().await),
        controller: parse("controller", controller().await),
        reporter: parse("reporter", reporter().await),
    }
}

async fn post(url: &str, body: Vec<u8>) -> u16 {
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// The webhook (file mode, fake registry) after an allowed workload, a
/// denial, a cache hit, a failed image look-up, a malformed body and an
/// unreadable object (denied under the default policy).
async fn webhook() -> String {
    let fx = Fixture::new();
    let app = nfguard::webhook::router(state(
        &fx.profiles(),
        Some(&fx.nodes()),
        None,
        fake_registry(Duration::from_millis(10)),
        Duration::from_secs(3),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn({
        let app = app.clone();
        async move { axum::serve(listener, app).await }
    });
    let url = format!("http://{addr}/validate");
    let ds = |name: &str, image: &str| {
        let spec = pod_spec(true, vec![container("main", image, &["NET_ADMIN"])]);
        let obj = object("DaemonSet", name, "kube-system", spec, json!({}));
        review("DaemonSet", None, "CREATE", "kube-system", obj, false)
            .to_string()
            .into_bytes()
    };
    for (name, image) in [
        ("kube-proxy", "kube-proxy:wrapper"),
        ("kube-router", "kube-router:1.8.7"),
        ("kube-router-2", "kube-router:1.8.7"),
        ("ghost", "unknown/ghost:1"),
    ] {
        assert_eq!(post(&url, ds(name, image)).await, 200, "{name}");
    }
    assert_eq!(post(&url, b"garbage".to_vec()).await, 400);
    let unreadable = object("Pod", "odd", "default", json!({"containers": 7}), json!({}));
    let body = review("Pod", None, "CREATE", "default", unreadable, false);
    assert_eq!(post(&url, body.to_string().into_bytes()).await, 200);
    server.abort();
    scrape(app).await
}

/// A node whose reporter found a critical hazard in both backends, planned by
/// the controller's planner and recorded as a reconcile records it.
fn degraded_node() -> (Node, NodeNetfilterProfile) {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "worker-1", "uid": "u1", "resourceVersion": "7",
                     "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
        "spec": {}
    }))
    .unwrap();
    let profile: NodeNetfilterProfile = serde_json::from_value(json!({
        "apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
        "metadata": {"name": "worker-1", "uid": "p1", "generation": 1},
        "spec": {"nodeName": "worker-1"},
        "status": {
            "iptables": {"version": "1.8.9", "backend": "nft", "evidence": []},
            "kernel": {"release": "6.1.0", "nfTables": true, "ipTables": true},
            "backends": {
                "nft": {"tables": 3, "chains": 12, "rules": 40, "hintChain": true, "canaryChain": true},
                "legacy": {"tables": 1, "chains": 2, "rules": 3, "hintChain": false, "canaryChain": false}
            },
            "activeBackend": "mixed",
            "hazards": [{"code": "FirewallUnconditionalDrop", "severity": "critical",
                         "message": "-j DROP without its -m mark match in KUBE-FIREWALL"},
                        {"code": "MixedBackends", "severity": "warning",
                         "message": "both backends hold rules"}],
            "lastProbeTime": "2026-03-01T11:59:30Z",
            "probeIntervalSeconds": 60
        }
    }))
    .unwrap();
    (node, profile)
}

async fn controller() -> String {
    let metrics = Arc::new(ControllerMetrics::new());
    let (node, profile) = degraded_node();
    let policies = PolicyBook::default();
    let images = ImageResolutions::new();
    let plan = plan_node(&NodeFacts {
        node: &nfguard::projection::SlimNode::from(node),
        profile: Some(&profile),
        pods: &[],
        policies: &policies,
        settings: TaintSettings::default(),
        images: &images,
        tainted_elsewhere: 0,
        total_nodes: 3,
        now: "2026-03-01T12:00:00Z".parse().unwrap(),
    });
    metrics.observe_node("worker-1", &NodeObservation::of(Some(&profile), &plan));
    // A node without a profile yet.
    metrics.observe_node("worker-2", &NodeObservation::default());
    // The other families as reconcile and apply record them.
    metrics.reconcile_duration.observe(0.02);
    metrics.tainted_nodes.set(1);
    metrics.leader.set(1);
    metrics.orphans_deleted.inc();
    for stage in [
        Stage::gather,
        Stage::labels,
        Stage::taints,
        Stage::status,
        Stage::orphans,
    ] {
        metrics
            .reconcile_errors
            .get_or_create(&StageLabel { stage })
            .inc();
    }
    for taint in [TAINT_DEGRADED, TAINT_INCOMPATIBLE] {
        for change in [Change::added, Change::removed] {
            metrics
                .taint_changes
                .get_or_create(&TaintChangeLabel {
                    taint: taint.into(),
                    change,
                })
                .inc();
        }
        metrics
            .taints_withheld
            .get_or_create(&TaintLabel {
                taint: taint.into(),
            })
            .inc();
    }
    scrape(nfguard::controller::http::router(HttpState {
        metrics,
        ready: Arc::new(AtomicBool::new(true)),
    }))
    .await
}

async fn reporter() -> String {
    let metrics = nfguard::reporter::metrics::Metrics::new(60);
    metrics.probes.inc();
    metrics.writes.inc();
    scrape(nfguard::reporter::metrics::router(metrics)).await
}
