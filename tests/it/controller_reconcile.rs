//! Reconcile scenarios against kube's mock client: each scenario fills the
//! controller's caches as its watches would (the Node, profile, pods,
//! policies and namespaces listed), scripts the API server's side of the
//! writes (method, path, body asserted; the query string only where it
//! carries meaning, e.g. the field manager) and checks the events. A
//! reconcile reads nothing from the API server: the scripted server fails
//! the test on any read.

use crate::support::kube_mock;

use http::{Request, Response};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use kube_mock::{Captured, capture};
use nfguard::api::NodeNetfilterProfile;
use nfguard::compat::evaluate::ImageResolutions;
use nfguard::compat::evaluate::{Decision, ReasonCode, Verdict, Workload};
use nfguard::controller::cache::stores::{self, FirstLists};
use nfguard::controller::metrics::Metrics;
use nfguard::controller::plan::NodePlan;
use nfguard::controller::reports::judge::{Scope, judge_reports};
use nfguard::controller::reports::owners::parents;
use nfguard::controller::reports::write::plan_writes;
use nfguard::controller::run::{Ctx, LIST_WAIT, reconcile_node, run_controller, sweep_orphans};
use nfguard::facts::Platform;
use nfguard::facts::{Backend, ImageProfile, IptablesFacts};
use nfguard::judgement::{Bounded, FixedImages, ImageLookup, LookupError, PolicyBook};
use nfguard::projection::SlimNode;
use nfguard::registry::Credentials;
use nfguard::reports::ReportApi;
use nfguard::runtime::admin::Exposition;
use nfguard::runtime::clock::ManualClock;
use nfguard::webhook::Judge;
use nfguard::webhook::facts::{Facts, Snapshot};
use nfguard::webhook::images::{CacheTtl, ImageCache};
use nfguard::webhook::metrics::Metrics as WebhookMetrics;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

const NOW: &str = "2026-03-01T12:00:00Z";

type Responder = Box<dyn FnOnce(&Captured) -> (u16, Value) + Send>;

struct Expect {
    method: &'static str,
    path: String,
    respond: Responder,
}

fn expect(
    method: &'static str,
    path: &str,
    respond: impl FnOnce(&Captured) -> (u16, Value) + Send + 'static,
) -> Expect {
    Expect {
        method,
        path: path.to_string(),
        respond: Box::new(respond),
    }
}

/// Serve `expects` in order; events (any path under events.k8s.io) are
/// answered and collected on the side. Ends when every client is dropped.
/// The scripted requests seen, and the events.
type Seen = tokio::task::JoinHandle<(Vec<Captured>, Vec<Captured>)>;

fn fake_api(expects: Vec<Expect>) -> (kube::Client, Seen) {
    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let task = tokio::spawn(async move {
        let mut expects: VecDeque<Expect> = expects.into();
        let mut seen = Vec::new();
        let mut events = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let captured = capture(req).await;
            let (code, out) = if captured.path.starts_with("/apis/events.k8s.io/") {
                events.push(captured.clone());
                (201, captured.body.clone())
            } else {
                // Reconcile scenarios script no read: any is a failure.
                let scripted_read = expects
                    .front()
                    .is_some_and(|e| e.method == "GET" && e.path == captured.path);
                assert!(
                    captured.method != "GET" || scripted_read,
                    "read {} {} from the API server",
                    captured.path,
                    captured.query
                );
                let e = expects.pop_front().unwrap_or_else(|| {
                    panic!("unexpected request {} {}", captured.method, captured.path)
                });
                assert_eq!(
                    (captured.method.as_str(), captured.path.as_str()),
                    (e.method, e.path.as_str()),
                    "request out of script"
                );
                seen.push(captured.clone());
                let (code, out) = (e.respond)(&captured);
                (code, as_server_answer(&captured, code, out))
            };
            let resp = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&out).unwrap()))
                .unwrap();
            send.send_response(resp);
        }
        assert!(
            expects.is_empty(),
            "requests never made: {:?}",
            expects
                .iter()
                .map(|e| format!("{} {}", e.method, e.path))
                .collect::<Vec<_>>()
        );
        (seen, events)
    });
    (client, task)
}

/// A PATCH answers with the whole object; scripts return the patch they
/// accepted, so dress it up as the object the API server would send back.
fn as_server_answer(c: &Captured, code: u16, out: Value) -> Value {
    if c.method != "PATCH" || code != 200 {
        return out;
    }
    let name = c
        .path
        .trim_end_matches("/status")
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string();
    if c.path.starts_with("/api/v1/nodes/") {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    } else {
        json!({"apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
               "metadata": {"name": name}, "spec": {}, "status": out["status"]})
    }
}

/// `n` as the controller's Node watch keeps it (the Controller hands
/// reconciles this projection).
fn kept(n: &Node) -> SlimNode {
    SlimNode::from(n.clone())
}

fn node(name: &str, labels: Value, taints: Value) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "77",
                     "labels": labels},
        "spec": {"taints": taints},
    }))
    .unwrap()
}

fn profile(name: &str, status: Value) -> NodeNetfilterProfile {
    serde_json::from_value(json!({
        "apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
        "metadata": {"name": name, "uid": format!("puid-{name}"), "generation": 1},
        "spec": {"nodeName": name},
        "status": status,
    }))
    .unwrap()
}

fn nft_status(min_reader: Option<&str>, hazards: Value) -> Value {
    json!({
        "iptables": {"version": "1.8.9", "backend": "nft", "evidence": []},
        "backends": {
            "nft": {"tables": 2, "chains": 10, "rules": 30, "hintChain": true, "canaryChain": true},
            "legacy": {"tables": 0, "chains": 0, "rules": 0, "hintChain": false, "canaryChain": false}
        },
        "activeBackend": "nft",
        "minReaderVersion": min_reader,
        "hazards": hazards,
        "lastProbeTime": "2026-03-01T11:59:30Z",
        "probeIntervalSeconds": 60,
    })
}

fn pod(ns: &str, name: &str, node: &str, image: &str, host_network: bool, caps: &[&str]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeName": node, "hostNetwork": host_network,
            "containers": [{"name": "main", "image": image,
                            "securityContext": {"capabilities": {"add": caps}}}]
        },
        "status": {"phase": "Running"}
    })
}

fn policy(spec: Value) -> Value {
    json!({"apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicy",
           "metadata": {"name": "default"}, "spec": spec})
}

fn image(images: &mut ImageResolutions, reference: &str, version: &str, backend: Backend) {
    images.insert_profile(
        reference,
        &"linux/amd64".parse().unwrap(),
        ImageProfile {
            image: reference.into(),
            digest: format!("sha256:{:0>64}", version.replace('.', "")),
            platform: "linux/amd64".into(),
            iptables: Some(IptablesFacts {
                version: Some(version.parse().unwrap()),
                backend: Some(backend),
                ..Default::default()
            }),
            nftables: None,
        },
    );
}

/// What the watches have listed when a reconcile runs: the caches it reads.
#[derive(Default)]
struct Listed {
    nodes: Vec<Node>,
    profiles: Vec<NodeNetfilterProfile>,
    pods: Vec<Value>,
    policies: Vec<Value>,
    namespaces: Vec<Value>,
}

impl Listed {
    fn nodes(nodes: &[Node]) -> Self {
        Listed {
            nodes: nodes.to_vec(),
            ..Default::default()
        }
    }
    fn profile(mut self, p: NodeNetfilterProfile) -> Self {
        self.profiles.push(p);
        self
    }
    fn pods(mut self, pods: Vec<Value>) -> Self {
        self.pods = pods;
        self
    }
    fn policy(mut self, p: Value) -> Self {
        self.policies.push(p);
        self
    }
}

fn from_json<K: serde::de::DeserializeOwned>(v: Vec<Value>) -> Vec<K> {
    v.into_iter()
        .map(|o| serde_json::from_value(o).unwrap())
        .collect()
}

/// A namespace's metadata as the metadata-only watch returns it.
fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
           "metadata": {"name": name, "resourceVersion": "1", "labels": labels}})
}

/// A context whose caches hold one first list of each kind, fed through
/// the controller's own feeds (filtering and slimming as in production).
fn make_ctx(client: kube::Client, listed: Listed, images: ImageResolutions) -> (Ctx, Arc<Metrics>) {
    let (ctx, metrics, _) = make_ctx_with_feeds(client, listed, images);
    (ctx, metrics)
}

/// [`make_ctx`], and the feeds, to show the caches what the watches would.
fn make_ctx_with_feeds(
    client: kube::Client,
    listed: Listed,
    images: ImageResolutions,
) -> (Ctx, Arc<Metrics>, stores::Feeds) {
    let (caches, mut feeds) = stores::caches();
    feeds.list(FirstLists {
        nodes: listed.nodes,
        profiles: listed.profiles,
        pods: from_json(listed.pods),
        policies: from_json(listed.policies),
        namespaces: from_json(listed.namespaces),
    });
    let metrics = Arc::new(Metrics::new());
    let ctx = Ctx {
        client: client.clone(),
        images: Arc::new(Bounded::new(Arc::new(FixedImages(images)), 4)),
        clock: Arc::new(ManualClock::new(NOW.parse::<Timestamp>().unwrap())),
        metrics: metrics.clone(),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "nfguard-controller".into(),
                instance: Some("test".into()),
            },
        ),
        caches,
        reports: Default::default(),
    };
    (ctx, metrics, feeds)
}

fn profile_json(p: &NodeNetfilterProfile) -> Value {
    serde_json::to_value(p).unwrap()
}

fn event_reasons(events: &[Captured]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e.body["reason"].as_str().unwrap_or("").to_string(),
                e.body["regarding"]["kind"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

async fn finish(task: Seen) -> (Vec<Captured>, Vec<Captured>) {
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("fake API server did not finish")
        .expect("fake API server assertion failed")
}

const PROFILES_PATH: &str = "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles";
const STATUS_PATH: &str = "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles/n1/status";
const PODS_PATH: &str = "/api/v1/pods";
const POLICIES_PATH: &str = "/apis/nfguard.io/v1alpha1/netfilterpolicies";
const NODE_PATH: &str = "/api/v1/nodes/n1";

#[tokio::test]
async fn labels_conditions_and_writers_applied() {
    let n1 = node(
        "n1",
        json!({"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}),
        json!([]),
    );
    let p1 = profile("n1", nft_status(Some("1.8.8"), json!([])));
    let pods = vec![
        pod(
            "kube-system",
            "kube-proxy-x",
            "n1",
            "reg.test/kube-proxy:1.33",
            true,
            &["NET_ADMIN"],
        ),
        pod("default", "web", "n1", "reg.test/web:1", false, &[]),
        pod(
            "kube-system",
            "cni-y",
            "n1",
            "reg.test/cni:2",
            true,
            &["ALL"],
        ),
        // Another node's writer: never part of n1's inventory.
        pod(
            "kube-system",
            "kube-proxy-elsewhere",
            "n2",
            "reg.test/kube-proxy:1.33",
            true,
            &["NET_ADMIN"],
        ),
    ];
    let mut images = ImageResolutions::new();
    image(
        &mut images,
        "reg.test/kube-proxy:1.33",
        "1.8.9",
        Backend::Nft,
    );
    image(&mut images, "reg.test/cni:2", "1.8.11", Backend::Wrapper);
    let (client, task) = fake_api(vec![
        expect("PATCH", NODE_PATH, |c| {
            assert_eq!(c.content_type, "application/merge-patch+json");
            assert_eq!(
                c.body,
                json!({"metadata": {"labels": {
                    "nfguard.io/iptables-backend": "nft",
                    "nfguard.io/iptables-version": "1.8.9",
                    "nfguard.io/min-reader": "1.8.8"
                }}})
            );
            (200, c.body.clone())
        }),
        expect("PATCH", STATUS_PATH, |c| {
            assert_eq!(c.content_type, "application/apply-patch+yaml");
            assert!(
                c.query.contains("fieldManager=nfguard-controller"),
                "{}",
                c.query
            );
            assert!(c.query.contains("force=true"), "{}", c.query);
            let status = c.body["status"].as_object().unwrap();
            let mut keys: Vec<&str> = status.keys().map(String::as_str).collect();
            keys.sort();
            // Only the controller's own fields: never the reporter's.
            assert_eq!(
                keys,
                [
                    "conditions",
                    "newestWriterVersion",
                    "oldestReaderVersion",
                    "writers"
                ]
            );
            assert_eq!(c.body["metadata"]["name"], "n1");
            let conds = &c.body["status"]["conditions"];
            let by_type = |t: &str| {
                conds
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|x| x["type"] == t)
                    .unwrap()
                    .clone()
            };
            assert_eq!(by_type("Fresh")["status"], "True");
            assert_eq!(by_type("Healthy")["status"], "True");
            assert_eq!(by_type("Consistent")["status"], "True");
            assert_eq!(by_type("Fresh")["lastTransitionTime"], NOW);
            assert_eq!(
                c.body["status"]["writers"],
                json!([
                    {"pod": "kube-system/cni-y", "container": "main", "image": "reg.test/cni:2",
                     "digest": format!("sha256:{:0>64}", "1811"), "version": "1.8.11", "backend": "wrapper"},
                    {"pod": "kube-system/kube-proxy-x", "container": "main", "image": "reg.test/kube-proxy:1.33",
                     "digest": format!("sha256:{:0>64}", "189"), "version": "1.8.9", "backend": "nft"},
                ])
            );
            // Wrapper follows the nft markers: host 1.8.9, writers 1.8.9 and 1.8.11.
            assert_eq!(c.body["status"]["newestWriterVersion"], "1.8.11");
            assert_eq!(c.body["status"]["oldestReaderVersion"], "1.8.9");
            (200, c.body.clone())
        }),
    ]);
    let listed = Listed::nodes(std::slice::from_ref(&n1))
        .profile(p1)
        .pods(pods);
    let (ctx, metrics) = make_ctx(client, listed, images);
    let plan = reconcile_node(&kept(&n1), &ctx).await.unwrap();
    assert!(
        plan.requeue_after.is_some(),
        "requeued before the heartbeat turns stale"
    );
    drop(ctx);
    let (_, events) = finish(task).await;
    // A healthy node's first labels and conditions are routine: no event
    // (a fresh install must not write events for every node).
    let reasons = event_reasons(&events);
    assert!(reasons.is_empty(), "{reasons:?}");
    let text = metrics.encode();
    assert!(
        text.contains("nfguard_controller_nodes{backend=\"nft\"} 1"),
        "{text}"
    );
    // The conditions just written, per node (alerts name the node).
    assert!(
        text.contains(
            "nfguard_controller_node_condition{node=\"n1\",condition=\"Healthy\",status=\"True\"} 1"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn in_sync_node_costs_no_request() {
    let n1 = node(
        "n1",
        json!({"nfguard.io/iptables-backend": "nft", "nfguard.io/iptables-version": "1.8.9"}),
        json!([]),
    );
    // Conditions and (empty) writers already as the controller would write them.
    let mut status = nft_status(None, json!([]));
    status["writers"] = json!([]);
    status["newestWriterVersion"] = json!("1.8.9");
    status["oldestReaderVersion"] = json!("1.8.9");
    status["conditions"] = json!([
        {"type": "Fresh", "status": "True", "reason": "HeartbeatRecent", "message": "the reporter's heartbeat is within 3 probe intervals (180s)", "lastTransitionTime": "2026-03-01T10:00:00Z", "observedGeneration": 1},
        {"type": "Healthy", "status": "True", "reason": "NoCriticalHazard", "message": "no critical netfilter hazard", "lastTransitionTime": "2026-03-01T10:00:00Z", "observedGeneration": 1},
        {"type": "Consistent", "status": "True", "reason": "SingleBackend", "message": "only the nft backend holds rules", "lastTransitionTime": "2026-03-01T10:00:00Z", "observedGeneration": 1},
    ]);
    let (client, task) = fake_api(vec![]);
    let listed = Listed::nodes(std::slice::from_ref(&n1)).profile(profile("n1", status));
    let (ctx, metrics) = make_ctx(client, listed, ImageResolutions::new());
    let plan = reconcile_node(&kept(&n1), &ctx).await.unwrap();
    assert!(plan.status.is_none() && plan.label_patch.is_none());
    drop(ctx);
    let (seen, events) = finish(task).await;
    assert!(seen.is_empty(), "{seen:?}");
    assert!(events.is_empty(), "{:?}", event_reasons(&events));
    // Nothing written: the metrics take the profile's (in-sync) conditions.
    let text = metrics.encode();
    for line in [
        "nfguard_controller_node_condition{node=\"n1\",condition=\"Fresh\",status=\"True\"} 1",
        "nfguard_controller_node_condition{node=\"n1\",condition=\"Fresh\",status=\"Unknown\"} 0",
        "nfguard_controller_node_last_probe_timestamp_seconds{node=\"n1\"} 1772366370",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}

#[tokio::test]
async fn labels_removed_when_the_profile_goes_away() {
    let n1 = node(
        "n1",
        json!({"nfguard.io/iptables-backend": "nft", "nfguard.io/iptables-version": "1.8.9",
               "nfguard.io/min-reader": "1.8.8", "team": "a"}),
        json!([{"key": "nfguard.io/netfilter-degraded", "value": "MixedBackends", "effect": "NoSchedule"}]),
    );
    let (client, task) = fake_api(vec![
        expect("PATCH", NODE_PATH, |c| {
            assert_eq!(
                c.body,
                json!({"metadata": {"labels": {
                    "nfguard.io/iptables-backend": null,
                    "nfguard.io/iptables-version": null,
                    "nfguard.io/min-reader": null
                }}})
            );
            (200, c.body.clone())
        }),
        // No profile, no hazard: the degraded taint goes too.
        expect("PATCH", NODE_PATH, |c| {
            assert_eq!(
                c.body,
                json!({"metadata": {"resourceVersion": "77"}, "spec": {"taints": []}})
            );
            (200, c.body.clone())
        }),
    ]);
    // No profile listed.
    let listed = Listed::nodes(std::slice::from_ref(&n1))
        .policy(policy(json!({"taintDegradedNodes": true})));
    let (ctx, metrics) = make_ctx(client, listed, ImageResolutions::new());
    reconcile_node(&kept(&n1), &ctx).await.unwrap();
    drop(ctx);
    let (_, events) = finish(task).await;
    let reasons = event_reasons(&events);
    assert_eq!(
        reasons,
        vec![
            ("LabelsUpdated".to_string(), "Node".to_string()),
            ("Untainted".into(), "Node".into())
        ]
    );
    let text = metrics.encode();
    assert!(
        text.contains("nfguard_controller_nodes_without_profile 1\n"),
        "{text}"
    );
    assert!(
        !text.contains("node=\"n1\""),
        "no per-node series without a profile: {text}"
    );
}

fn drop_hazard() -> Value {
    json!([{"code": "FirewallUnconditionalDrop", "severity": "critical",
            "message": "DROP in KUBE-FIREWALL with no match", "backend": "nft",
            "table": "filter", "chain": "KUBE-FIREWALL"}])
}

fn synced_labels() -> Value {
    json!({"nfguard.io/iptables-backend": "nft", "nfguard.io/iptables-version": "1.8.9"})
}

fn many_nodes(n: usize, tainted: usize) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let taints = if i < tainted {
                json!([{"key": "nfguard.io/netfilter-degraded", "value": "MixedBackends", "effect": "NoSchedule"}])
            } else {
                json!([])
            };
            node(&format!("other-{i}"), json!({}), taints)
        })
        .collect()
}

#[tokio::test]
async fn degraded_taint_applied_then_cleared() {
    let n1 = node(
        "n1",
        synced_labels(),
        json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
    );
    let mut all = many_nodes(9, 0);
    all.push(n1.clone());
    let p1 = profile("n1", nft_status(None, drop_hazard()));
    let pol = policy(json!({"taintDegradedNodes": true, "maxTaintedNodesPercent": 10}));
    let pol2 = pol.clone();
    let (client, task) = fake_api(vec![
        expect("PATCH", NODE_PATH, |c| {
            assert_eq!(c.content_type, "application/merge-patch+json");
            assert_eq!(
                c.body,
                json!({"metadata": {"resourceVersion": "77"}, "spec": {"taints": [
                    {"key": "dedicated", "value": "infra", "effect": "NoSchedule"},
                    {"key": "nfguard.io/netfilter-degraded", "value": "FirewallUnconditionalDrop", "effect": "NoSchedule"}
                ]}})
            );
            (200, c.body.clone())
        }),
        expect("PATCH", STATUS_PATH, |c| {
            let conds = c.body["status"]["conditions"].as_array().unwrap();
            let healthy = conds.iter().find(|x| x["type"] == "Healthy").unwrap();
            assert_eq!(healthy["status"], "False");
            assert_eq!(healthy["reason"], "FirewallUnconditionalDrop");
            (200, c.body.clone())
        }),
    ]);
    let (ctx, metrics) = make_ctx(
        client,
        Listed::nodes(&all).profile(p1).policy(pol),
        ImageResolutions::new(),
    );
    let plan = reconcile_node(&kept(&n1), &ctx).await.unwrap();
    assert!(plan.taints.tainted_after);
    drop(ctx);
    let (_, events) = finish(task).await;
    let reasons = event_reasons(&events);
    assert!(
        reasons.contains(&("Tainted".into(), "Node".into())),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&("Tainted".into(), "NodeNetfilterProfile".into())),
        "{reasons:?}"
    );
    assert!(
        metrics
            .encode()
            .contains("nfguard_controller_tainted_nodes 1")
    );

    // The hazard clears: the taint goes, the other taint stays.
    let n1 = node(
        "n1",
        synced_labels(),
        json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"},
               {"key": "nfguard.io/netfilter-degraded", "value": "FirewallUnconditionalDrop", "effect": "NoSchedule"}]),
    );
    let healed = profile("n1", nft_status(None, json!([])));
    let (client, task) = fake_api(vec![
        expect("PATCH", NODE_PATH, |c| {
            assert_eq!(
                c.body,
                json!({"metadata": {"resourceVersion": "77"}, "spec": {"taints": [
                    {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
                ]}})
            );
            (200, c.body.clone())
        }),
        expect("PATCH", STATUS_PATH, |c| (200, c.body.clone())),
    ]);
    *all.last_mut().unwrap() = n1.clone();
    let listed = Listed::nodes(&all).profile(healed).policy(pol2);
    let (ctx, _) = make_ctx(client, listed, ImageResolutions::new());
    reconcile_node(&kept(&n1), &ctx).await.unwrap();
    drop(ctx);
    let (_, events) = finish(task).await;
    assert!(event_reasons(&events).contains(&("Untainted".into(), "Node".into())));
}

#[tokio::test]
async fn safety_brake_withholds_the_taint_and_reports() {
    let n1 = node("n1", synced_labels(), json!([]));
    // 20 nodes at 10%: at most 2 tainted; 2 already are.
    let mut all = many_nodes(19, 2);
    all.push(n1.clone());
    let (client, task) = fake_api(vec![
        // No taint patch: straight to the status.
        expect("PATCH", STATUS_PATH, |c| (200, c.body.clone())),
    ]);
    let listed = Listed::nodes(&all)
        .profile(profile("n1", nft_status(None, drop_hazard())))
        .policy(policy(json!({"taintDegradedNodes": true})));
    let (ctx, metrics) = make_ctx(client, listed, ImageResolutions::new());
    let plan = reconcile_node(&kept(&n1), &ctx).await.unwrap();
    assert!(plan.taints.taints.is_none() && !plan.taints.tainted_after);
    drop(ctx);
    let (_, events) = finish(task).await;
    let withheld: Vec<&Captured> = events
        .iter()
        .filter(|e| e.body["reason"] == "TaintWithheld")
        .collect();
    assert_eq!(withheld.len(), 2, "on the Node and on the profile");
    assert_eq!(withheld[0].body["type"], "Warning");
    let note = withheld[0].body["note"].as_str().unwrap();
    assert!(
        note.contains("already taints 2 node(s), the most allowed is 2 (10% of 20 nodes)"),
        "{note}"
    );
    let text = metrics.encode();
    assert!(
        text.contains(
            "nfguard_controller_taints_withheld_total{taint=\"nfguard.io/netfilter-degraded\"} 1"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn incompatible_workload_taints_under_action_taint_and_clears_when_it_leaves() {
    let n1 = node(
        "n1",
        json!({"nfguard.io/iptables-backend": "nft", "nfguard.io/iptables-version": "1.8.9", "nfguard.io/min-reader": "1.8.8"}),
        json!([]),
    );
    let mut all = many_nodes(9, 0);
    all.push(n1.clone());
    let pol = policy(json!({"action": "Taint"}));
    let (pol_a, pol_b) = (pol.clone(), pol);
    // A kube-router-like pod bundling iptables-nft 1.8.7 on a node whose rules need >= 1.8.8.
    let router = pod(
        "kube-system",
        "kube-router-z",
        "n1",
        "reg.test/kube-router:old",
        true,
        &["NET_ADMIN"],
    );
    let mut images = ImageResolutions::new();
    image(
        &mut images,
        "reg.test/kube-router:old",
        "1.8.7",
        Backend::Nft,
    );
    let p1 = profile("n1", nft_status(Some("1.8.8"), json!([])));
    let p1_again = p1.clone();
    let (client, task) = fake_api(vec![
        expect("PATCH", NODE_PATH, |c| {
            assert_eq!(
                c.body["spec"]["taints"],
                json!([{"key": "nfguard.io/iptables-incompatible", "effect": "NoSchedule"}])
            );
            (200, c.body.clone())
        }),
        expect("PATCH", STATUS_PATH, |c| {
            assert_eq!(c.body["status"]["writers"][0]["version"], "1.8.7");
            assert_eq!(c.body["status"]["oldestReaderVersion"], "1.8.7");
            (200, c.body.clone())
        }),
    ]);
    let listed = Listed::nodes(&all)
        .profile(p1)
        .pods(vec![router])
        .policy(pol_a);
    let (ctx, _) = make_ctx(client, listed, images.clone());
    let plan = reconcile_node(&kept(&n1), &ctx).await.unwrap();
    assert_eq!(plan.violations.len(), 1);
    assert_eq!(plan.violations[0].pod, "kube-system/kube-router-z");
    drop(ctx);
    let (_, events) = finish(task).await;
    let tainted: Vec<&Captured> = events
        .iter()
        .filter(|e| e.body["reason"] == "Tainted")
        .collect();
    assert_eq!(tainted.len(), 2);
    let note = tainted[0].body["note"].as_str().unwrap();
    assert!(
        note.contains("kube-system/kube-router-z") && note.contains("OldReaderNewRules"),
        "{note}"
    );
    // The pod is the events' related object, so a taint for another pod
    // soon after is an event of its own, not a fold into this one's series.
    for e in &tainted {
        let related = &e.body["related"];
        assert_eq!(
            (&related["kind"], &related["namespace"], &related["name"]),
            (
                &json!("Pod"),
                &json!("kube-system"),
                &json!("kube-router-z")
            ),
            "{}",
            e.body
        );
    }

    // The pod leaves: the taint is cleared.
    let n1 = node(
        "n1",
        json!({"nfguard.io/iptables-backend": "nft", "nfguard.io/iptables-version": "1.8.9", "nfguard.io/min-reader": "1.8.8"}),
        json!([{"key": "nfguard.io/iptables-incompatible", "effect": "NoSchedule"}]),
    );
    let (client, task) = fake_api(vec![
        expect("PATCH", NODE_PATH, |c| {
            assert_eq!(c.body["spec"]["taints"], json!([]));
            (200, c.body.clone())
        }),
        expect("PATCH", STATUS_PATH, |c| {
            assert_eq!(c.body["status"]["writers"], json!([]));
            (200, c.body.clone())
        }),
    ]);
    *all.last_mut().unwrap() = n1.clone();
    // No pod listed any more.
    let listed = Listed::nodes(&all).profile(p1_again).policy(pol_b);
    let (ctx, _) = make_ctx(client, listed, images);
    let plan = reconcile_node(&kept(&n1), &ctx).await.unwrap();
    assert!(plan.violations.is_empty());
    drop(ctx);
    let (_, events) = finish(task).await;
    assert!(event_reasons(&events).contains(&("Untainted".into(), "Node".into())));
}

#[tokio::test]
async fn taint_conflict_is_an_error_to_retry() {
    let n1 = node("n1", synced_labels(), json!([]));
    let mut all = many_nodes(9, 0);
    all.push(n1.clone());
    let (client, task) = fake_api(vec![expect("PATCH", NODE_PATH, |_| {
        (
            409,
            json!({"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,"message":"the object has been modified"}),
        )
    })]);
    let listed = Listed::nodes(&all)
        .profile(profile("n1", nft_status(None, drop_hazard())))
        .policy(policy(json!({"taintDegradedNodes": true})));
    let (ctx, metrics) = make_ctx(client, listed, ImageResolutions::new());
    let err = reconcile_node(&kept(&n1), &ctx).await.unwrap_err();
    assert!(err.to_string().contains("taints"), "{err}");
    drop(ctx);
    finish(task).await;
    assert!(
        metrics
            .encode()
            .contains("nfguard_controller_reconcile_errors_total{stage=\"taints\"} 1")
    );
}

#[tokio::test]
async fn orphaned_profiles_are_confirmed_then_deleted_with_a_uid_precondition() {
    // The caches hold Node n1 and three profiles: n1's, one of a node that
    // is gone, and one of a node the Node store has not seen yet (the
    // watches lag each other) but the API server has.
    let n1 = node("n1", synced_labels(), json!([]));
    let listed = Listed::nodes(std::slice::from_ref(&n1))
        .profile(profile("n1", json!({})))
        .profile(profile("gone", json!({})))
        .profile(profile("new", json!({})));
    let by_name = |name: &'static str, found: bool| {
        expect("GET", "/api/v1/nodes", move |c| {
            // One Node's metadata, asked for by name: never a whole list.
            assert!(
                c.query
                    .contains(&format!("fieldSelector=metadata.name%3D{name}")),
                "{}",
                c.query
            );
            let items = if found {
                vec![
                    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                            "metadata": {"name": name}}),
                ]
            } else {
                vec![]
            };
            (
                200,
                json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                       "metadata": {"resourceVersion": "5"}, "items": items}),
            )
        })
    };
    let (client, task) = fake_api(vec![
        by_name("gone", false),
        expect(
            "DELETE",
            "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles/gone",
            |c| {
                assert_eq!(c.body["preconditions"]["uid"], "puid-gone");
                (
                    200,
                    json!({"kind":"Status","apiVersion":"v1","status":"Success","code":200}),
                )
            },
        ),
        by_name("new", true),
    ]);
    let (ctx, _) = make_ctx(client.clone(), listed, ImageResolutions::new());
    let metrics = Metrics::new();
    let deleted = sweep_orphans(&client, &ctx.caches, &metrics).await.unwrap();
    assert_eq!(deleted, 1);
    drop((client, ctx));
    let (seen, _) = finish(task).await;
    assert!(
        !seen.iter().any(|c| c.path.ends_with("/new")),
        "the profile of a node the API server has was deleted"
    );
    assert!(
        metrics
            .encode()
            .contains("nfguard_controller_orphans_deleted_total 1")
    );
}

// ---- namespaceSelector: the controller reads namespace labels ----

const ROUTER_IMAGE: &str = "reg.test/router:old";

/// A router bundling iptables-nft 1.8.7 (rules on n1 need >= 1.8.8).
fn router_image() -> ImageProfile {
    ImageProfile {
        image: ROUTER_IMAGE.into(),
        digest: format!("sha256:{:0>64}", 187),
        platform: "linux/amd64".into(),
        iptables: Some(IptablesFacts {
            version: Some("1.8.7".parse().unwrap()),
            backend: Some(Backend::Nft),
            ..Default::default()
        }),
        nftables: None,
    }
}

/// The webhook's image look-ups, answered from the same table.
struct OneImage(ImageProfile);

#[async_trait::async_trait]
impl ImageLookup for OneImage {
    async fn lookup(
        &self,
        image: &str,
        _platform: &Platform,
        _credentials: Option<&Credentials>,
    ) -> Result<ImageProfile, LookupError> {
        (image == self.0.image)
            .then(|| self.0.clone())
            .ok_or_else(|| LookupError::not_found(format!("{image} not in the table")))
    }
}

/// The same facts for both: node n1 whose rules need iptables >= 1.8.8, a
/// NET_ADMIN host-network pod `payments/router` on it bundling 1.8.7, and a
/// Taint policy selecting namespaces labelled `team=net`.
struct SharedFacts {
    node: Node,
    profile: NodeNetfilterProfile,
    pod: Value,
    policy: Value,
    namespace: Value,
}

fn shared_facts(payments_labels: Value) -> SharedFacts {
    SharedFacts {
        node: node(
            "n1",
            json!({"nfguard.io/iptables-backend": "nft", "nfguard.io/iptables-version": "1.8.9",
                   "nfguard.io/min-reader": "1.8.8",
                   "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}),
            json!([]),
        ),
        profile: profile("n1", nft_status(Some("1.8.8"), json!([]))),
        pod: pod(
            "payments",
            "router",
            "n1",
            ROUTER_IMAGE,
            true,
            &["NET_ADMIN"],
        ),
        policy: policy(
            json!({"action": "Taint", "namespaceSelector": {"matchLabels": {"team": "net"}}}),
        ),
        namespace: namespace("payments", payments_labels),
    }
}

/// What the controller plans for n1 (its facts from its caches, the
/// namespace's labels from its Namespace store; writes scripted).
async fn controller_plan(f: &SharedFacts, expect_taint: bool) -> NodePlan {
    let mut script = Vec::new();
    if expect_taint {
        script.push(expect("PATCH", NODE_PATH, |c| {
            assert_eq!(
                c.body["spec"]["taints"],
                json!([{"key": "nfguard.io/iptables-incompatible", "effect": "NoSchedule"}])
            );
            (200, c.body.clone())
        }));
    }
    script.push(expect("PATCH", STATUS_PATH, |c| (200, c.body.clone())));
    let (client, task) = fake_api(script);
    let mut all = many_nodes(9, 0);
    all.push(f.node.clone());
    let mut images = ImageResolutions::new();
    images.insert_profile(
        ROUTER_IMAGE,
        &"linux/amd64".parse().unwrap(),
        router_image(),
    );
    let listed = Listed {
        namespaces: vec![f.namespace.clone()],
        ..Listed::nodes(&all)
            .profile(f.profile.clone())
            .pods(vec![f.pod.clone()])
            .policy(f.policy.clone())
    };
    let (ctx, _) = make_ctx(client, listed, images);
    let plan = reconcile_node(&kept(&f.node), &ctx).await.unwrap();
    drop(ctx);
    finish(task).await;
    plan
}

/// What the webhook decides for the same pod, its facts from the same objects.
async fn webhook_decision(f: &SharedFacts) -> Decision {
    let labels: BTreeMap<String, String> =
        serde_json::from_value(f.namespace["metadata"]["labels"].clone()).unwrap();
    let ns_name = f.namespace["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let snapshot = Snapshot::new(
        vec![Arc::new(f.profile.clone())],
        vec![Arc::new(f.node.clone())],
        PolicyBook::shared(vec![Arc::new(
            serde_json::from_value(f.policy.clone()).unwrap(),
        )])
        .with_namespace_labels(Arc::new(move |ns: &str| {
            (ns == ns_name).then(|| labels.clone())
        })),
    );
    let metrics = Arc::new(WebhookMetrics::new());
    let judge = Judge {
        facts: Arc::new(Facts::Static(Arc::new(snapshot))),
        images: Arc::new(ImageCache::new(
            Arc::new(OneImage(router_image())),
            16,
            CacheTtl::default(),
            metrics.clone(),
        )),
        pull_secrets: None,
        metrics,
        timeout: Duration::from_secs(5),
        default_platform: "linux/amd64".parse().unwrap(),
        max_nodes: 5,
        decisions: None,
    };
    let workload = Workload::from_value(&f.pod)
        .unwrap()
        .expect("a pod is a workload");
    judge
        .judge(
            &workload,
            tokio::time::Instant::now() + Duration::from_secs(5),
        )
        .await
}

#[tokio::test]
async fn namespace_selector_on_any_label_taints_and_agrees_with_the_webhook() {
    // Selected by its label team=net: the webhook warns (Taint acts as warn
    // at admission) for the very reasons the controller taints n1.
    let selected = shared_facts(json!({"team": "net"}));
    let plan = controller_plan(&selected, true).await;
    let decision = webhook_decision(&selected).await;
    assert!(plan.taints.tainted_after);
    assert_eq!(plan.violations.len(), 1, "{:?}", plan.violations);
    assert_eq!(plan.violations[0].pod, "payments/router");
    assert_eq!(decision.verdict, Verdict::Warn, "{:?}", decision.reasons);
    assert_eq!(decision.unsafe_codes(), [ReasonCode::OldReaderNewRules]);
    assert_eq!(plan.violations[0].codes, decision.unsafe_codes());

    // Another team's namespace: no policy selects it, on either side.
    for labels in [json!({"team": "web"}), json!({})] {
        let other = shared_facts(labels.clone());
        let plan = controller_plan(&other, false).await;
        let decision = webhook_decision(&other).await;
        assert!(!plan.taints.tainted_after, "{labels}");
        assert!(
            plan.violations.is_empty(),
            "{labels}: {:?}",
            plan.violations
        );
        assert_eq!(decision.verdict, Verdict::Allow, "{labels}");
        assert!(decision.unsafe_codes().is_empty(), "{labels}");
        assert!(
            decision
                .reasons
                .iter()
                .any(|r| r.code == ReasonCode::NamespaceNotSelected),
            "{labels}: {:?}",
            decision.reasons
        );
    }
}

#[tokio::test]
async fn a_reconcile_waits_for_the_namespace_list_and_fails_clearly_without_it() {
    let n1 = node("n1", synced_labels(), json!([]));
    let p1 = profile("n1", nft_status(None, json!([])));
    let (client, task) = fake_api(vec![]);
    let (mut ctx, metrics) = make_ctx(client, Listed::default(), ImageResolutions::new());
    tokio::time::pause();
    // Every kind's first list but the Namespaces'.
    let (caches, mut feeds) = stores::caches();
    stores::listed([kept(&n1)]).for_each(|e| {
        let _ = feeds.nodes.feed(e);
    });
    stores::listed([p1]).for_each(|e| {
        let _ = feeds.profiles.feed(e);
    });
    stores::listed(Vec::<k8s_openapi::api::core::v1::Pod>::new()).for_each(|e| {
        let _ = feeds.pods.feed(e);
    });
    stores::listed(Vec::<nfguard::api::NetfilterPolicy>::new()).for_each(|e| {
        let _ = feeds.policies.feed(e);
    });
    ctx.caches = caches;
    // Until the lists are due, the node gets its labels only (in sync
    // here: nothing written), and is looked at again when they are due.
    let plan = reconcile_node(&kept(&n1), &ctx).await.unwrap();
    assert!(plan.status.is_none() && plan.label_patch.is_none());
    assert!(plan.requeue_after.is_some_and(|d| d <= LIST_WAIT));
    tokio::time::advance(LIST_WAIT).await;
    let err = reconcile_node(&kept(&n1), &ctx).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("Namespaces not listed") && text.contains("list and watch on namespaces"),
        "{text}"
    );
    let out = metrics.encode();
    assert!(out.contains("stage=\"gather\"} 1"), "{out}");
    drop((ctx, feeds));
    let (seen, _) = finish(task).await;
    assert!(seen.is_empty(), "no reads before the namespaces are known");
}

/// The cold start at 5,000 nodes: the first list of 100,000 pods took over
/// 20 s, and no node was written before it. A node's labels read its
/// profile alone, so they go first; the rest of its plan (status, taints)
/// follows the lists, and nothing is written twice.
#[tokio::test]
async fn while_the_pods_are_listed_a_node_gets_its_labels_then_its_whole_plan() {
    let (n1, listed, images) = cold_start_cluster();
    let p1 = listed.profiles[0].clone();
    let answered_node = Arc::new(std::sync::Mutex::new(None::<Node>));
    let node_out = answered_node.clone();
    let listed_node = n1.clone();
    let (client, task) = fake_api(vec![
        labels_answered(listed_node, node_out),
        expect("PATCH", STATUS_PATH, |c| (200, c.body.clone())),
    ]);
    let (mut ctx, _) = make_ctx(client, Listed::default(), images);
    // Only the Nodes and the profiles are listed.
    let (caches, mut feeds) = stores::caches();
    stores::listed([kept(&n1)]).for_each(|e| {
        let _ = feeds.nodes.feed(e);
    });
    stores::listed([p1]).for_each(|e| {
        let _ = feeds.profiles.feed(e);
    });
    ctx.caches = caches;
    let plan = reconcile_node(&kept(&n1), &ctx).await.unwrap();
    assert!(plan.label_patch.is_some(), "{plan:?}");
    assert!(plan.status.is_none() && plan.taints.taints.is_none() && plan.violations.is_empty());
    assert!(
        !ctx.caches.first_rounds.is_done("n1"),
        "the round waits for the whole plan"
    );
    // The watch shows the label write; the other lists come in.
    let node_event = answered_node
        .lock()
        .unwrap()
        .take()
        .expect("labels written");
    let _ = feeds.nodes.feed(Event::Apply(kept(&node_event)));
    stores::listed(from_json::<k8s_openapi::api::core::v1::Pod>(listed.pods)).for_each(|e| {
        let _ = feeds.pods.feed(e);
    });
    stores::listed(Vec::<nfguard::api::NetfilterPolicy>::new()).for_each(|e| {
        let _ = feeds.policies.feed(e);
    });
    stores::listed(Vec::<nfguard::controller::cache::namespaces::NamespaceMeta>::new()).for_each(
        |e| {
            let _ = feeds.namespaces.feed(e);
        },
    );
    let cached = ctx.caches.nodes.get(&ObjectRef::new("n1")).unwrap();
    let plan = reconcile_node(&cached, &ctx).await.unwrap();
    assert!(
        plan.label_patch.is_none(),
        "the labels are not written again"
    );
    let writers = plan.status.as_ref().and_then(|s| s.writers.as_ref());
    assert_eq!(writers.map(Vec::len), Some(2), "{plan:?}");
    drop((ctx, feeds));
    let (seen, _) = finish(task).await;
    assert_eq!(seen.len(), 2, "one label patch, one status apply");
}

type BoxBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, std::convert::Infallible>;

/// An API server for the running controller: lists answer from `lists` by
/// path (empty otherwise), watches stay open and stream what the test
/// pushes ([`WatchApi::push`]), PATCHes are accepted and reported, events
/// accepted. `task` returns every request seen (events aside), each with
/// its Accept header, once the controller dropped its client.
struct WatchApi {
    /// (collection path, the watch's stream) as each watch is opened.
    watches: tokio::sync::mpsc::UnboundedReceiver<(
        String,
        futures::channel::mpsc::UnboundedSender<bytes::Bytes>,
    )>,
    open: HashMap<String, futures::channel::mpsc::UnboundedSender<bytes::Bytes>>,
    patches: tokio::sync::mpsc::UnboundedReceiver<Captured>,
    task: tokio::task::JoinHandle<Vec<(Captured, String)>>,
}

fn watch_api(lists: HashMap<&'static str, Vec<Value>>) -> (kube::Client, WatchApi) {
    use futures::StreamExt;
    use http_body_util::{Full, StreamBody};
    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<BoxBody>>();
    let client = kube::Client::new(svc, "default");
    let (watch_tx, watches) = tokio::sync::mpsc::unbounded_channel();
    let (patch_tx, patches) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut seen = Vec::new();
        let reply = |code: u16, body: BoxBody| {
            Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(body)
                .unwrap()
        };
        let full = |bytes: Vec<u8>| Full::new(bytes::Bytes::from(bytes)).boxed_unsync();
        while let Some((req, send)) = handle.next_request().await {
            let accept = req
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let c = Captured {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or("").to_string(),
                content_type: String::new(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            if c.path.starts_with("/apis/events.k8s.io/") {
                send.send_response(reply(201, full(bytes.to_vec())));
                continue;
            }
            seen.push((c.clone(), accept));
            if c.query.contains("watch=true") {
                let (tx, rx) = futures::channel::mpsc::unbounded::<bytes::Bytes>();
                let stream = rx.map(|b| Ok(hyper::body::Frame::data(b)));
                send.send_response(reply(200, StreamBody::new(stream).boxed_unsync()));
                let _ = watch_tx.send((c.path.clone(), tx));
            } else if c.method == "PATCH" {
                let out = as_server_answer(&c, 200, c.body.clone());
                send.send_response(reply(200, full(serde_json::to_vec(&out).unwrap())));
                let _ = patch_tx.send(c);
            } else {
                let items = lists.get(c.path.as_str()).cloned().unwrap_or_default();
                let out = json!({"apiVersion": "v1", "kind": "List",
                                 "metadata": {"resourceVersion": "1"}, "items": items});
                send.send_response(reply(200, full(serde_json::to_vec(&out).unwrap())));
            }
        }
        seen
    });
    let api = WatchApi {
        watches,
        open: HashMap::new(),
        patches,
        task,
    };
    (client, api)
}

impl WatchApi {
    /// Stream `event` ({"type": ..., "object": ...}) on the watch of `path`,
    /// waiting for the controller to open it.
    async fn push(&mut self, path: &str, event: Value) {
        while !self.open.contains_key(path) {
            let (p, tx) = tokio::time::timeout(Duration::from_secs(10), self.watches.recv())
                .await
                .unwrap_or_else(|_| panic!("no watch of {path}"))
                .expect("the API server stopped");
            self.open.insert(p, tx);
        }
        let mut line = serde_json::to_vec(&event).unwrap();
        line.push(b'\n');
        self.open[path].unbounded_send(line.into()).unwrap();
    }

    /// The next PATCH the controller makes.
    async fn next_patch(&mut self) -> Captured {
        tokio::time::timeout(Duration::from_secs(10), self.patches.recv())
            .await
            .expect("no write within 10 s")
            .expect("the API server stopped")
    }
}

/// The running controller on `client` until `stop` fires.
fn start_controller(
    client: kube::Client,
    metrics: Arc<Metrics>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "nfguard-controller".into(),
            instance: Some("test".into()),
        },
    );
    let run = run_controller(
        client,
        Arc::new(Bounded::new(
            Arc::new(FixedImages(ImageResolutions::new())),
            4,
        )),
        Arc::new(ManualClock::new(NOW.parse::<Timestamp>().unwrap())),
        metrics,
        recorder,
        nfguard::controller::run::RunOptions {
            concurrency: nfguard::controller::run::CONCURRENCY,
            orphan_interval: Duration::from_secs(600),
            report_caps: nfguard::reports::NamespaceCaps::default(),
            pods_encoding: nfguard::kube_protobuf::pods::Choice::Json,
        },
        async move {
            let _ = stop_rx.await;
        },
    );
    (stop_tx, tokio::spawn(run))
}

/// Stop the controller, then the API server; every request it saw.
async fn stop_controller(
    stop: tokio::sync::oneshot::Sender<()>,
    run: tokio::task::JoinHandle<()>,
    api: WatchApi,
) -> Vec<(Captured, String)> {
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the controller did not stop")
        .unwrap();
    drop(api.open);
    tokio::time::timeout(Duration::from_secs(10), api.task)
        .await
        .expect("the controller kept its client")
        .unwrap()
}

const COLLECTIONS: [&str; 7] = [
    "/api/v1/nodes",
    PROFILES_PATH,
    PODS_PATH,
    POLICIES_PATH,
    "/api/v1/namespaces",
    // The policy reports' owner resolution (metadata only).
    "/apis/apps/v1/replicasets",
    "/apis/batch/v1/jobs",
];

/// The policy reports' API discovery (neither is served here).
const REPORT_DISCOVERY: [&str; 2] = [
    "/apis/openreports.io/v1alpha1",
    "/apis/wgpolicyk8s.io/v1alpha2",
];

/// The running controller only lists and watches (and asks discovery
/// which report API is served): no GET of one object.
fn assert_only_lists_and_watches(seen: &[(Captured, String)]) {
    for (c, accept) in seen.iter().filter(|(c, _)| c.method == "GET") {
        assert!(
            COLLECTIONS.contains(&c.path.as_str()) || REPORT_DISCOVERY.contains(&c.path.as_str()),
            "read {} {}",
            c.path,
            c.query
        );
        if COLLECTIONS[5..].contains(&c.path.as_str()) {
            assert!(
                accept.contains("as=PartialObjectMetadata"),
                "{} {} {accept}",
                c.path,
                c.query
            );
        }
    }
}

#[tokio::test]
async fn the_controller_watches_namespace_metadata_and_relabelling_re_reconciles() {
    let n1 = node("n1", synced_labels(), json!([]));
    let lists = HashMap::from([
        ("/api/v1/nodes", vec![serde_json::to_value(&n1).unwrap()]),
        (
            "/api/v1/namespaces",
            vec![namespace("payments", json!({"team": "web"}))],
        ),
    ]);
    let (client, mut api) = watch_api(lists);
    let (stop, run) = start_controller(client, Arc::new(Metrics::new()));
    // No profile: each reconcile removes n1's nfguard labels (the store
    // never sees the patch, so every reconcile writes it).
    assert_eq!(
        api.next_patch().await.path,
        NODE_PATH,
        "the first reconcile"
    );
    let mut relabelled = namespace("payments", json!({"team": "net"}));
    relabelled["metadata"]["resourceVersion"] = json!("2");
    api.push(
        "/api/v1/namespaces",
        json!({"type": "MODIFIED", "object": relabelled}),
    )
    .await;
    assert_eq!(
        api.next_patch().await.path,
        NODE_PATH,
        "the namespace label change never re-reconciled n1"
    );
    let seen = stop_controller(stop, run, api).await;
    let ns: Vec<&(Captured, String)> = seen
        .iter()
        .filter(|(c, _)| c.method == "GET" && c.path == "/api/v1/namespaces")
        .collect();
    assert!(
        ns.iter().any(|(c, _)| !c.query.contains("watch=true")),
        "no namespace list: {seen:?}"
    );
    assert!(
        ns.iter().any(|(c, _)| c.query.contains("watch=true")),
        "no namespace watch: {seen:?}"
    );
    // Metadata only: labels are all a policy selects on.
    for (c, accept) in &ns {
        assert!(
            accept.contains("as=PartialObjectMetadata"),
            "{} {accept}",
            c.query
        );
    }
    assert_only_lists_and_watches(&seen);
    let node_patches = seen
        .iter()
        .filter(|(c, _)| c.method == "PATCH" && c.path == NODE_PATH)
        .count();
    assert_eq!(
        node_patches, 2,
        "one reconcile at start, one for the new labels"
    );
}

/// Reconciles finished so far (the duration histogram's count).
fn reconciles(metrics: &Metrics) -> u64 {
    let text = metrics.encode();
    text.lines()
        .find_map(|l| l.strip_prefix("nfguard_controller_reconcile_duration_seconds_count "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Wait until `done` holds (10 s at most).
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The reconcile count once it stopped moving for half a second.
async fn settled_reconciles(metrics: &Metrics) -> u64 {
    let mut last = reconciles(metrics);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = reconciles(metrics);
        if now == last {
            return now;
        }
        last = now;
    }
}

/// n1's profile, in sync, probed at `probe` (11:59:MM:SS), its Fresh
/// condition as the controller last wrote it.
fn heartbeat(probe: &str, fresh: &str, rv: &str) -> Value {
    let mut status = nft_status(None, json!([]));
    status["lastProbeTime"] = json!(format!("2026-03-01T{probe}Z"));
    status["writers"] = json!([]);
    status["newestWriterVersion"] = json!("1.8.9");
    status["oldestReaderVersion"] = json!("1.8.9");
    status["conditions"] = json!([
        {"type": "Fresh", "status": fresh, "reason": "R", "message": "", "lastTransitionTime": "2026-03-01T10:00:00Z", "observedGeneration": 1},
        {"type": "Healthy", "status": "True", "reason": "NoCriticalHazard", "message": "no critical netfilter hazard", "lastTransitionTime": "2026-03-01T10:00:00Z", "observedGeneration": 1},
        {"type": "Consistent", "status": "True", "reason": "SingleBackend", "message": "only the nft backend holds rules", "lastTransitionTime": "2026-03-01T10:00:00Z", "observedGeneration": 1},
    ]);
    let mut p = profile_json(&profile("n1", status));
    p["metadata"]["resourceVersion"] = json!(rv);
    json!({"type": "MODIFIED", "object": p})
}

#[tokio::test]
async fn a_heartbeat_reconciles_only_when_the_node_is_not_fresh() {
    let n1 = node("n1", synced_labels(), json!([]));
    let first = heartbeat("11:59:30", "True", "1")["object"].clone();
    let lists = HashMap::from([
        ("/api/v1/nodes", vec![serde_json::to_value(&n1).unwrap()]),
        (PROFILES_PATH, vec![first]),
    ]);
    let (client, mut api) = watch_api(lists);
    let metrics = Arc::new(Metrics::new());
    let (stop, run) = start_controller(client, metrics.clone());
    eventually("no first reconcile", || reconciles(&metrics) > 0).await;
    let at_start = settled_reconciles(&metrics).await;

    // A heartbeat while Fresh: stored (the probe-time gauge follows it),
    // but no reconcile.
    api.push(PROFILES_PATH, heartbeat("11:59:45", "True", "2"))
        .await;
    let probed = "nfguard_controller_node_last_probe_timestamp_seconds{node=\"n1\"} 1772366385";
    eventually("the heartbeat never arrived", || {
        metrics.encode().contains(probed)
    })
    .await;
    assert_eq!(
        settled_reconciles(&metrics).await,
        at_start,
        "a heartbeat while Fresh reconciled"
    );

    // Stale (as the controller marks it when the heartbeat is late): the
    // next heartbeat must reconcile, it makes the node Fresh again.
    api.push(PROFILES_PATH, heartbeat("11:59:45", "Unknown", "3"))
        .await;
    eventually("marking it stale did not reconcile", || {
        reconciles(&metrics) > at_start
    })
    .await;
    let stale = settled_reconciles(&metrics).await;
    api.push(PROFILES_PATH, heartbeat("11:59:55", "Unknown", "4"))
        .await;
    eventually("a heartbeat after staleness did not reconcile", || {
        reconciles(&metrics) > stale
    })
    .await;
    let seen = stop_controller(stop, run, api).await;
    assert_only_lists_and_watches(&seen);
    // That reconcile made the node Fresh again.
    let last_status = seen
        .iter()
        .rev()
        .find(|(c, _)| c.method == "PATCH" && c.path == STATUS_PATH)
        .expect("no status written");
    let fresh = last_status.0.body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Fresh")
        .unwrap()
        .clone();
    assert_eq!(fresh["status"], "True", "{fresh}");
}

/// One report writer's pass over every workload (`judge_reports`, then
/// `plan_writes`), its applies recorded in `stored` as the writer records
/// them. Returns the names of the reports it applied.
async fn report_pass(
    ctx: &Ctx,
    stored: &mut BTreeMap<(String, String), Option<Box<str>>>,
) -> Vec<String> {
    let (parents, mut owner_feeds) = parents();
    owner_feeds.list(Vec::new(), Vec::new());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let judged = judge_reports(&ctx.caches, &parents, &ctx.images, &Scope::All, deadline).await;
    let api = ReportApi::OpenReports;
    let writes = plan_writes(
        judged.reports,
        &judged.deferred,
        &Scope::All,
        stored,
        api,
        nfguard::reports::NamespaceCaps::default(),
    );
    assert!(writes.delete.is_empty(), "{:?}", writes.delete);
    writes
        .apply
        .into_iter()
        .map(|(key, object)| {
            let hash = nfguard::reports::hash_annotation(object.metadata()).map(Box::from);
            stored.insert(key.clone(), hash);
            key.1
        })
        .collect()
}

/// A cold start (issue #24): the report writer's first pass runs as soon
/// as the caches have listed, before the node's first reconcile wrote its
/// writer inventory. Judged then, the 1.8.7 pod reads rules only the host's
/// 1.8.7 writes; with the inventory it also reads the 1.8.11 pod's, and its
/// report changes (`scripts/bench-cluster.sh 1000 20` wrote 469 of 2,000
/// reports twice). Each report is written once, after the node's round.
/// The cold start's cluster: n1 (host iptables 1.8.7, nft) as the caches
/// list it, before any controller wrote its inventory, with two bare writer
/// pods (1.8.7 and 1.8.11); their images.
fn cold_start_cluster() -> (Node, Listed, ImageResolutions) {
    let n1 = node(
        "n1",
        json!({"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}),
        json!([]),
    );
    let mut status = nft_status(None, json!([]));
    status["iptables"]["version"] = json!("1.8.7");
    let mut p1 = profile("n1", status);
    p1.metadata.resource_version = Some("1".into());
    let listed = Listed::nodes(std::slice::from_ref(&n1))
        .profile(p1)
        .pods(vec![
            pod("ns", "old", "n1", "reg.test/old:1", true, &["NET_ADMIN"]),
            pod("ns", "new", "n1", "reg.test/new:1", true, &["NET_ADMIN"]),
        ]);
    let mut images = ImageResolutions::new();
    image(&mut images, "reg.test/old:1", "1.8.7", Backend::Nft);
    image(&mut images, "reg.test/new:1", "1.8.11", Backend::Nft);
    (n1, listed, images)
}

/// The label patch of n1, answered as the API server would: `listed` with
/// the patched labels at resourceVersion 78, also put in `out` (the watch
/// then delivers it).
fn labels_answered(listed: Node, out: Arc<std::sync::Mutex<Option<Node>>>) -> Expect {
    expect("PATCH", NODE_PATH, move |c| {
        let mut n = serde_json::to_value(&listed).unwrap();
        for (k, v) in c.body["metadata"]["labels"].as_object().unwrap() {
            n["metadata"]["labels"][k] = v.clone();
        }
        n["metadata"]["resourceVersion"] = json!("78");
        *out.lock().unwrap() = Some(serde_json::from_value(n.clone()).unwrap());
        (201, n)
    })
}

#[tokio::test]
async fn a_cold_start_writes_each_policy_report_once() {
    let (n1, listed, images) = cold_start_cluster();
    let p1 = listed.profiles[0].clone();
    // The API server's answers (new resourceVersions), which the watches
    // then deliver.
    let answered_node = Arc::new(std::sync::Mutex::new(None::<Node>));
    let answered_profile = Arc::new(std::sync::Mutex::new(None::<NodeNetfilterProfile>));
    let (node_out, profile_out) = (answered_node.clone(), answered_profile.clone());
    let (listed_node, listed_profile) = (n1.clone(), p1.clone());
    let (client, task) = fake_api(vec![
        labels_answered(listed_node, node_out),
        expect("PATCH", STATUS_PATH, move |c| {
            let mut p = serde_json::to_value(&listed_profile).unwrap();
            for (k, v) in c.body["status"].as_object().unwrap() {
                p["status"][k] = v.clone();
            }
            p["metadata"]["resourceVersion"] = json!("2");
            *profile_out.lock().unwrap() = Some(serde_json::from_value(p.clone()).unwrap());
            (201, p)
        }),
    ]);
    let (ctx, _, mut feeds) = make_ctx_with_feeds(client, listed, images);
    let mut stored = BTreeMap::new();
    let mut applied = Vec::new();

    // The writer's first full pass, as the caches list: n1's round is not over.
    applied.extend(report_pass(&ctx, &mut stored).await);
    assert_eq!(applied, Vec::<String>::new(), "written before n1's round");
    reconcile_node(&kept(&n1), &ctx).await.unwrap();
    // Its writes are not in the caches yet: still nothing to judge.
    assert!(
        ctx.reports.take().is_empty(),
        "marked before the writes were seen"
    );
    applied.extend(report_pass(&ctx, &mut stored).await);
    assert_eq!(
        applied,
        Vec::<String>::new(),
        "written before the watches showed n1's writes"
    );
    // The watches deliver both writes; the last one triggers n1 again
    // (`in_flight`), and that reconcile writes nothing and ends the round.
    let node_event = answered_node
        .lock()
        .unwrap()
        .take()
        .expect("labels written");
    let profile_event = answered_profile
        .lock()
        .unwrap()
        .take()
        .expect("status written");
    assert!(
        feeds
            .nodes
            .feed(Event::Apply(kept(&node_event)))
            .contains(&"n1".to_string())
    );
    assert_eq!(feeds.profiles.feed(Event::Apply(profile_event)), ["n1"]);
    // The Controller hands the reconcile the Node as its store holds it.
    let cached = ctx.caches.nodes.get(&ObjectRef::new("n1")).unwrap();
    reconcile_node(&cached, &ctx).await.unwrap();
    assert_eq!(
        ctx.reports.take().len(),
        2,
        "the round's end marks both pods' reports"
    );
    applied.extend(report_pass(&ctx, &mut stored).await);
    // The resync: nothing changed, nothing written.
    applied.extend(report_pass(&ctx, &mut stored).await);
    drop(ctx);
    let (seen, _) = finish(task).await;
    assert_eq!(seen.len(), 2, "one label patch, one status apply");
    // Names end with a hash of their owner: compared without it.
    let mut readable: Vec<&str> = applied.iter().map(|n| &n[..n.len() - 17]).collect();
    readable.sort();
    assert_eq!(
        readable,
        ["nfguard-pod-new", "nfguard-pod-old"],
        "each report once"
    );

    // Why it matters: judged from the profile as listed (before n1's
    // round), the old pod's report would differ from the one written.
    let (client, _task) = fake_api(Vec::new());
    let (_, listed, images) = cold_start_cluster();
    let (early, _) = make_ctx(client, listed, images);
    early.caches.first_rounds.done("n1");
    let mut early_stored = stored.clone();
    assert!(
        report_pass(&early, &mut early_stored)
            .await
            .iter()
            .any(|n| n.starts_with("nfguard-pod-old-")),
        "the inventory changed nothing: the scenario shows no double write"
    );
}
