//! The answers nfguard gives when it does not judge a workload (past the
//! budget, an object it cannot read, no object), the bounded listing, and a
//! pod of the most containers etcd holds judged against 5,000 nodes.

use super::*;
use crate::api::{
    ActiveBackend, BackendFacts, BackendsFacts, KernelFacts, NetfilterPolicy, NodeNetfilterProfile,
    NodeNetfilterProfileSpec, NodeNetfilterProfileStatus, UnresolvedAction,
};
use crate::facts::{Backend, ImageProfile, IptablesFacts, Version};
use crate::judgement::{FixedImages, PolicyBook};
use crate::runtime::admin::Exposition;
use crate::webhook::facts::Snapshot;
use crate::webhook::images::{CacheTtl, ImageCache};
use crate::webhook::intake::ETCD_MAX_OBJECT_BYTES;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

/// iptables-nft 1.8.2: `KnownBadIptables` on every node (a denial).
const BAD: &str = "bad:1.8.2";

fn v(s: &str) -> Version {
    s.parse().unwrap()
}

/// Node `i`: nft rules needing a 1.8.8 reader, every tenth legacy.
fn profile(i: usize) -> NodeNetfilterProfile {
    let name = format!("node-{i:05}");
    let legacy = i.is_multiple_of(10);
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
    let backend = if legacy {
        Backend::Legacy
    } else {
        Backend::Nft
    };
    p.status = Some(NodeNetfilterProfileStatus {
        iptables: Some(IptablesFacts {
            version: Some(v("1.8.9")),
            backend: Some(backend),
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
        min_reader_version: (!legacy).then(|| v("1.8.8")),
        ..Default::default()
    });
    p
}

/// Node `i`: every fourth arm64.
fn node(i: usize) -> Node {
    let arch = if i.is_multiple_of(4) {
        "arm64"
    } else {
        "amd64"
    };
    serde_json::from_value(json!({"metadata": {"name": format!("node-{i:05}"),
        "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": arch}}}))
    .unwrap()
}

fn facts(nodes: usize, policies: Vec<NetfilterPolicy>) -> Arc<Facts> {
    Arc::new(Facts::Static(Arc::new(Snapshot::new(
        (0..nodes).map(|i| Arc::new(profile(i))).collect(),
        (0..nodes).map(|i| Arc::new(node(i))).collect(),
        PolicyBook::new(policies),
    ))))
}

/// A policy selecting every namespace, or only those labelled team=x.
fn policy(action: &str, unresolved: UnresolvedAction, everywhere: bool) -> NetfilterPolicy {
    let mut spec = json!({"action": action, "unresolvedImages": unresolved});
    if !everywhere {
        spec["namespaceSelector"] = json!({"matchLabels": {"team": "x"}});
    }
    serde_json::from_value(json!({"apiVersion": "nfguard.io/v1alpha1",
        "kind": "NetfilterPolicy", "metadata": {"name": "p"}, "spec": spec}))
    .unwrap()
}

/// [`BAD`] answers for both platforms; every other image is unknown.
fn images() -> FixedImages {
    let mut res = ImageResolutions::new();
    for platform in ["linux/amd64", "linux/arm64"] {
        res.insert_profile(
            BAD,
            &platform.parse().unwrap(),
            ImageProfile {
                image: BAD.into(),
                digest: format!("sha256:{}", "ab".repeat(32)),
                platform: platform.into(),
                iptables: Some(IptablesFacts {
                    version: Some(v("1.8.2")),
                    backend: Some(Backend::Nft),
                    ..Default::default()
                }),
                nftables: None,
            },
        );
    }
    FixedImages(res)
}

fn judge(facts: Arc<Facts>, timeout: Duration) -> Judge {
    let metrics = Arc::new(Metrics::new());
    let images = ImageCache::new(
        Arc::new(images()),
        1000,
        CacheTtl::default(),
        metrics.clone(),
    );
    Judge {
        facts,
        images: Arc::new(images),
        pull_secrets: None,
        metrics,
        timeout,
        default_platform: "linux/amd64".parse().unwrap(),
        max_nodes: 5,
        decisions: DecisionCache::new(64),
    }
}

/// A hostNetwork container named `c{i}` with NET_ADMIN.
fn container(i: usize, image: &str) -> Value {
    json!({"name": format!("c{i}"), "image": image,
        "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}})
}

/// A Pod CREATE in namespace "big"; `object` None: the request has none.
fn review_of(object: Option<Value>) -> Vec<u8> {
    let mut request = json!({"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": "big", "name": "many", "operation": "CREATE"});
    if let Some(o) = object {
        request["object"] = o;
    }
    serde_json::to_vec(
        &json!({"apiVersion": API_VERSION, "kind": "AdmissionReview",
        "request": request}),
    )
    .unwrap()
}

fn pod_review(containers: Vec<Value>) -> Vec<u8> {
    review_of(Some(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "many", "namespace": "big"},
        "spec": {"hostNetwork": true, "containers": containers}})))
}

fn response_of(out: &ReviewOutcome) -> Value {
    assert_eq!(out.status, 200);
    serde_json::from_slice::<Value>(&out.body).unwrap()["response"].clone()
}

fn warnings(r: &Value) -> String {
    r["warnings"].to_string()
}

fn metric(j: &Judge, line: &str) -> bool {
    j.metrics.encode().contains(line)
}

/// Judging stopped at once: a zero budget leaves no time at all.
#[tokio::test]
async fn past_its_budget_a_judgement_is_answered_by_the_policy() {
    use UnresolvedAction::*;
    let pod = pod_review(vec![container(0, "gone:1")]);
    let cases = [
        (vec![policy("Deny", Deny, true)], false),
        (vec![policy("Warn", Deny, true)], false),
        (vec![policy("Deny", Warn, true)], true),
        (vec![policy("Deny", Allow, true)], true),
        // No policy at all: the built-in default (unresolvedImages: Warn).
        (vec![], true),
    ];
    for (policies, allowed) in cases {
        let what = format!("{:?}", policies.first().map(|p| &p.spec));
        let j = judge(facts(100, policies), Duration::ZERO);
        let out = j.review(&pod).await;
        let r = response_of(&out);
        assert_eq!(r["allowed"], allowed, "{what}: {r}");
        assert_eq!(r["auditAnnotations"]["verdict"], "error", "{what}");
        let said = if allowed {
            assert_eq!(out.verdict, "warn", "{what}");
            warnings(&r)
        } else {
            assert_eq!(out.verdict, "deny", "{what}");
            let msg = r["status"]["message"].as_str().unwrap().to_string();
            assert!(
                msg.starts_with("nfguard denied Pod/big/many: nfguard could not judge"),
                "{msg}"
            );
            msg
        };
        for part in [
            "[JudgementTimedOut] not judged: judging Pod/big/many",
            "answer budget of 0.0s",
        ] {
            assert!(said.contains(part), "{what}: {part} in {said}");
        }
        assert!(
            metric(
                &j,
                "nfguard_webhook_reasons_total{code=\"JudgementTimedOut\"} 1"
            ),
            "{}",
            j.metrics.encode()
        );
    }
    // A namespace no policy selects costs nothing to judge: judged at once.
    let j = judge(
        facts(100, vec![policy("Deny", Deny, false)]),
        Duration::ZERO,
    );
    let r = response_of(&j.review(&pod).await);
    assert_eq!(r["auditAnnotations"]["verdict"], "allow", "{r}");
}

#[tokio::test]
async fn a_judgement_stopped_while_selecting_nodes_is_answered_by_the_policy() {
    // 10,000 affinity terms against 2,000 nodes, 20 million term checks
    // (1.4 s in a debug build): selecting candidates is the costly step,
    // which the cut-off stops too.
    let terms: Vec<Value> = (0..10_000)
        .map(|i| json!({"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": [format!("x{i}")]}]}))
        .collect();
    let pod = review_of(Some(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "many", "namespace": "big"},
        "spec": {"hostNetwork": true, "containers": [container(0, BAD)],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": terms}}}}})));
    let j = judge(
        facts(2000, vec![policy("Deny", UnresolvedAction::Deny, true)]),
        Duration::ZERO,
    );
    let started = std::time::Instant::now();
    let r = response_of(&j.review(&pod).await);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r["allowed"], false);
    assert!(
        r["status"]["message"]
            .to_string()
            .contains("[JudgementTimedOut]"),
        "{r}"
    );
}

#[test]
fn a_policy_not_known_in_time_falls_back_to_the_default() {
    let j = judge(
        facts(3, vec![policy("Deny", UnresolvedAction::Deny, true)]),
        Duration::from_secs(8),
    );
    let body = pod_review(vec![container(0, BAD)]);
    let req = parse_review(&body).unwrap();
    let w = Workload::of_kind_json(WorkloadKind::Pod, req.object.as_ref().unwrap().json()).unwrap();
    let out = j.timed_out(&req, WorkloadKind::Pod, &w, None);
    let r = response_of(&out);
    // `action: Deny, unresolvedImages: Warn`: admitted with the warning.
    assert_eq!((r["allowed"].clone(), out.verdict), (json!(true), "warn"));
    assert!(warnings(&r).contains("answer budget of 8.0s"), "{r}");
}

#[tokio::test]
async fn an_object_nfguard_cannot_read_is_refused_where_the_policy_denies() {
    // `containers` is not a list: the API server never sends this.
    let odd = review_of(Some(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "many"}, "spec": {"containers": "nope"}})));
    let cases = [
        // No policy: `action: Deny`.
        (vec![], false),
        (vec![policy("Deny", UnresolvedAction::Warn, true)], false),
        (vec![policy("Warn", UnresolvedAction::Deny, true)], true),
        (vec![policy("Taint", UnresolvedAction::Deny, true)], true),
        (vec![policy("Deny", UnresolvedAction::Deny, false)], true),
    ];
    for (policies, allowed) in cases {
        let what = format!("{:?}", policies.first().map(|p| &p.spec));
        let j = judge(facts(3, policies), Duration::from_secs(8));
        let out = j.review(&odd).await;
        let r = response_of(&out);
        assert_eq!(r["allowed"], allowed, "{what}: {r}");
        assert_eq!(r["auditAnnotations"]["verdict"], "error", "{what}");
        let said = if allowed {
            assert_eq!(out.verdict, "warn");
            warnings(&r)
        } else {
            assert_eq!(out.verdict, "deny");
            r["status"]["message"].to_string()
        };
        assert!(
            said.contains("nfguard cannot read Pod/big/many (")
                && said.contains("invalid type: string"),
            "{what}: {said}"
        );
        assert!(
            metric(
                &j,
                "nfguard_webhook_rejected_requests_total{cause=\"unreadable_object\"} 1"
            ),
            "{what}"
        );
    }
}

#[tokio::test]
async fn a_request_without_an_object_is_refused_where_the_policy_denies() {
    let j = judge(facts(3, vec![]), Duration::from_secs(8));
    let out = j.review(&review_of(None)).await;
    let r = response_of(&out);
    assert_eq!((r["allowed"].clone(), out.verdict), (json!(false), "deny"));
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("nfguard cannot read Pod/big/many (the request has no object)"),
        "{msg}"
    );
    assert!(metric(
        &j,
        "nfguard_webhook_rejected_requests_total{cause=\"incomplete\"} 1"
    ));
    let j = judge(
        facts(3, vec![policy("Warn", UnresolvedAction::Deny, true)]),
        Duration::from_secs(8),
    );
    let r = response_of(&j.review(&review_of(None)).await);
    assert_eq!(r["allowed"], true);
    assert!(warnings(&r).contains("not judged"), "{r}");
}

#[tokio::test]
async fn a_denial_names_ten_reasons_counts_the_rest_and_is_not_kept() {
    let j = judge(facts(8, vec![]), Duration::from_secs(8));
    // 40 containers x 2 platforms: 80 denying reasons, 32 listed.
    let pod = pod_review((0..40).map(|i| container(i, BAD)).collect());
    for _ in 0..2 {
        let r = response_of(&j.review(&pod).await);
        assert_eq!(r["allowed"], false);
        let msg = r["status"]["message"].as_str().unwrap();
        assert!(msg.contains("would break the networking"), "{msg}");
        let lines: Vec<&str> = msg.split(" | ").collect();
        assert_eq!(lines.len(), MAX_DENY_LINES + 1, "{msg}");
        assert!(lines[MAX_DENY_LINES].starts_with("(+"), "{msg}");
        assert!(
            msg.contains(" more reasons; `nfguard check` lists them)"),
            "{msg}"
        );
    }
    // Not kept: a listing that leaves reasons out is judged again.
    assert!(metric(&j, "nfguard_webhook_decision_cache_misses_total 2"));
}

#[tokio::test]
async fn a_denial_of_what_could_not_be_judged_says_so() {
    let j = judge(
        facts(3, vec![policy("Deny", UnresolvedAction::Deny, true)]),
        Duration::from_secs(8),
    );
    let r = response_of(&j.review(&pod_review(vec![container(0, "gone:1")])).await);
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "nfguard denied Pod/big/many: nfguard could not judge whether its netfilter tools"
        ),
        "{msg}"
    );
    assert!(msg.contains("[ImageUnresolved]"), "{msg}");
}

/// The most in-scope containers one Pod can have: etcd refuses a request
/// over 1.5 MiB, and a container stored (protobuf, as the API server
/// defaults it: name, image, empty workingDir and resources,
/// terminationMessagePath `/dev/termination-log`, imagePullPolicy
/// `IfNotPresent`, terminationMessagePolicy `File`, three false bools, a
/// NET_ADMIN securityContext) takes at least 81 bytes with a six-character
/// name: 19,418 at most, fewer with distinct images.
const MOST_CONTAINERS: usize = ETCD_MAX_OBJECT_BYTES / 81;

/// Half of them [`BAD`] (denied on every node), half distinct images nobody
/// inspected (unresolved on every node): every container has findings on
/// all 5,000 nodes.
fn largest_pod() -> Vec<u8> {
    let containers = (0..MOST_CONTAINERS)
        .map(|i| match i % 2 {
            0 => container(i, BAD),
            _ => container(i, &format!("r/i{i}:1")),
        })
        .collect();
    pod_review(containers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_pod_on_5000_nodes_is_judged_within_the_budget() {
    const BUDGET: Duration = Duration::from_secs(8);
    let facts = facts(5000, vec![]);
    let body = largest_pod();
    let j = judge(facts.clone(), BUDGET);
    let started = std::time::Instant::now();
    let out = j.review(&body).await;
    let took = started.elapsed();
    let r = response_of(&out);
    println!(
        "figure: a Pod of {MOST_CONTAINERS} containers ({} KiB review) against 5,000 nodes judged in {took:?} ({} build), {} bytes answered",
        body.len() >> 10,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        out.body.len(),
    );
    assert!(took < BUDGET, "{took:?}");
    assert_eq!(r["allowed"], false, "judged, not timed out");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("[KnownBadIptables]") && !msg.contains("JudgementTimedOut"),
        "{msg}"
    );
    assert!(out.body.len() < 64 << 10, "{} bytes", out.body.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_pod_past_a_1ms_budget_is_answered_by_the_policy_never_silently() {
    let body = largest_pod();
    for (unresolved, allowed) in [
        (UnresolvedAction::Deny, false),
        (UnresolvedAction::Warn, true),
        (UnresolvedAction::Allow, true),
    ] {
        let facts = facts(5000, vec![policy("Deny", unresolved, true)]);
        let j = judge(facts, Duration::from_millis(1));
        let started = std::time::Instant::now();
        let out = j.review(&body).await;
        let took = started.elapsed();
        let r = response_of(&out);
        println!(
            "figure: the same Pod past a 1 ms budget under unresolvedImages {unresolved:?}: answered in {took:?}"
        );
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert_eq!(r["allowed"], allowed, "{unresolved:?}: {r}");
        let said = if allowed {
            warnings(&r)
        } else {
            r["status"]["message"].to_string()
        };
        assert!(
            said.contains("[JudgementTimedOut] not judged"),
            "{unresolved:?}: {said}"
        );
    }
}

/// The API server validates an object's namespace against the request's: a
/// review where they differ is forged, refused under any policy, its names
/// escaped; one that agrees (or whose object names none) is judged there.
#[tokio::test]
async fn an_object_in_another_namespace_than_the_request_is_refused() {
    let j = judge(
        facts(10, vec![policy("Warn", UnresolvedAction::Allow, true)]),
        Duration::from_secs(8),
    );
    let forged = review_of(Some(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "many", "namespace": "kube-system\n"},
        "spec": {"hostNetwork": true, "containers": [container(0, "kube-proxy:1.8.9")]}})));
    let out = j.review(&forged).await;
    let r = response_of(&out);
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(out.verdict, "deny");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains(r#"its object's namespace "kube-system\n" is not the request's "big""#),
        "{msg}"
    );
    assert!(metric(
        &j,
        "nfguard_webhook_rejected_requests_total{cause=\"namespace_mismatch\"} 1"
    ));
    for namespace in [json!("big"), Value::Null] {
        let mut meta = json!({"name": "many"});
        if !namespace.is_null() {
            meta["namespace"] = namespace.clone();
        }
        let same = review_of(Some(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"hostNetwork": true, "containers": [container(0, "kube-proxy:1.8.9")]}}),
        ));
        let r = response_of(&j.review(&same).await);
        assert_eq!(r["allowed"], true, "namespace {namespace}: {r}");
    }
}
