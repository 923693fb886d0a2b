//! The router called directly (no socket) with realistic AdmissionReview v1
//! JSON for every kind and operation nfguard judges, and the same manifests
//! through `nfguard check`: the webhook must give exactly check's verdicts.

use crate::webhook_support as support;

use axum::body::Body;
use http::Request;
use nfguard::check::cli::CheckFormat;
use nfguard::check::cli::{Args, Env, execute};
use serde_json::{Value, json};
use std::time::Duration;
use support::*;
use tower::ServiceExt;

async fn post(app: &axum::Router, body: Vec<u8>) -> (u16, Value) {
    let resp = app
        .clone()
        .oneshot(
            Request::post("/validate")
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, v)
}

fn app(fx: &Fixture, policy: Option<&std::path::Path>) -> axum::Router {
    nfguard::webhook::router(state(
        &fx.profiles(),
        Some(&fx.nodes()),
        policy,
        fake_registry(Duration::from_millis(10)),
        Duration::from_secs(3),
    ))
}

/// The incident DaemonSet: kube-router with iptables 1.8.7 and NET_ADMIN.
fn incident_ds() -> Value {
    object(
        "DaemonSet",
        "kube-router",
        "kube-system",
        incident_spec(),
        json!({}),
    )
}

/// [`incident_ds`] annotated `nfguard.io/exempt: <reason>`.
fn exempt_incident_ds(reason: &str) -> Value {
    object(
        "DaemonSet",
        "kube-router",
        "kube-system",
        incident_spec(),
        json!({"nfguard.io/exempt": reason}),
    )
}

/// `kubectl debug` on Pod default/app-7d9f: a `pods/ephemeralcontainers`
/// UPDATE carrying `spec`, as bytes.
fn debug_review(spec: &Value) -> Vec<u8> {
    let obj = object("Pod", "app-7d9f", "default", spec.clone(), json!({}));
    review(
        "Pod",
        Some("ephemeralcontainers"),
        "UPDATE",
        "default",
        obj,
        false,
    )
    .to_string()
    .into_bytes()
}

/// A DaemonSet CREATE review in kube-system, as bytes.
fn ds_review(obj: Value, dry_run: bool) -> Vec<u8> {
    review("DaemonSet", None, "CREATE", "kube-system", obj, dry_run)
        .to_string()
        .into_bytes()
}

fn resp(v: &Value) -> &Value {
    &v["response"]
}

fn incident_spec() -> Value {
    pod_spec(
        true,
        vec![container(
            "kube-router",
            "kube-router:1.8.7",
            &["NET_ADMIN"],
        )],
    )
}

async fn check_verdict(fx: &Fixture, obj: &Value) -> (String, Vec<String>) {
    let m = fx.write(
        &format!("m-{}.json", obj["kind"].as_str().unwrap()),
        &obj.to_string(),
    );
    let args = Args {
        files: vec![m.display().to_string()],
        profiles: Some(fx.profiles()),
        nodes: Some(fx.nodes()),
        policy: None,
        lookup: nfguard::check::cli::LookupArgs {
            registry: Default::default(),
            platform_default: "linux/amd64".into(),
            timeout: 3,
            concurrency: 4,
        },
        kubeconfig: None,
        cluster: false,
        output: CheckFormat::Json,
        max_nodes: 5,
        what_if: Default::default(),
    };
    let report = execute(
        &args,
        Env {
            lookup: Some(fake_registry(Duration::from_millis(10))),
            client: None,
        },
    )
    .await
    .unwrap();
    let r = &report.results[0];
    (
        r.verdict.to_string(),
        r.reasons.iter().map(|r| r.code.to_string()).collect(),
    )
}

#[tokio::test]
async fn every_kind_and_operation_matches_check() {
    let fx = Fixture::new();
    let app = app(&fx, None);
    let cases: Vec<(&str, Option<&str>, &str, Value, &str)> = vec![
        ("DaemonSet", None, "CREATE", incident_spec(), "deny"),
        ("DaemonSet", None, "UPDATE", incident_spec(), "deny"),
        ("Deployment", None, "CREATE", incident_spec(), "deny"),
        ("Deployment", None, "UPDATE", incident_spec(), "deny"),
        ("StatefulSet", None, "CREATE", incident_spec(), "deny"),
        ("StatefulSet", None, "UPDATE", incident_spec(), "deny"),
        ("ReplicaSet", None, "CREATE", incident_spec(), "deny"),
        ("ReplicaSet", None, "UPDATE", incident_spec(), "deny"),
        ("Job", None, "CREATE", incident_spec(), "deny"),
        ("Job", None, "UPDATE", incident_spec(), "deny"),
        ("CronJob", None, "CREATE", incident_spec(), "deny"),
        ("CronJob", None, "UPDATE", incident_spec(), "deny"),
        ("Pod", None, "CREATE", incident_spec(), "deny"),
        (
            "DaemonSet",
            None,
            "CREATE",
            pod_spec(
                true,
                vec![container(
                    "kube-proxy",
                    "kube-proxy:wrapper",
                    &["NET_ADMIN"],
                )],
            ),
            "allow",
        ),
        (
            "DaemonSet",
            None,
            "CREATE",
            pod_spec(
                true,
                vec![container("flannel", "flannel:legacy", &["NET_ADMIN"])],
            ),
            "deny",
        ),
        (
            "Deployment",
            None,
            "CREATE",
            pod_spec(false, vec![container("web", "kube-router:1.8.7", &[])]),
            "allow",
        ),
    ];
    for (kind, sub, op, spec, want) in cases {
        let obj = object(kind, "kube-router", "kube-system", spec, json!({}));
        let (status, v) = post(
            &app,
            review(kind, sub, op, "kube-system", obj.clone(), false)
                .to_string()
                .into_bytes(),
        )
        .await;
        assert_eq!(status, 200, "{kind} {op}: {v}");
        let r = resp(&v);
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["kind"], "AdmissionReview");
        assert_eq!(r["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        let got = r["auditAnnotations"]["verdict"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(got, want, "{kind} {op}: {v}");
        assert_eq!(r["allowed"], want != "deny", "{kind} {op}: {v}");
        // Exactly check's verdict for the same object and facts.
        let (check_v, check_codes) = check_verdict(&fx, &obj).await;
        assert_eq!(got, check_v, "{kind} {op}: webhook vs check");
        if want == "deny" {
            let msg = r["status"]["message"].as_str().unwrap();
            assert_eq!(r["status"]["code"], 403);
            for code in &check_codes {
                if msg.contains(code.as_str()) {
                    continue;
                }
                // Info-only codes are not in the denial message; deny ones are.
                assert!(
                    !["OldReaderNewRules", "BackendMismatch"].contains(&code.as_str()),
                    "{code} missing in {msg}"
                );
            }
        }
    }
}

#[tokio::test]
async fn incident_denial_names_node_image_versions_and_remedy() {
    let fx = Fixture::new();
    let app = app(&fx, None);
    let obj = incident_ds();
    let (_, v) = post(&app, ds_review(obj, false)).await;
    let msg = v["response"]["status"]["message"].as_str().unwrap();
    for needle in [
        "DaemonSet/kube-system/kube-router",
        "OldReaderNewRules",
        "node-a",
        "node-b",
        "kube-router:1.8.7",
        "1.8.7",
        "1.8.8",
        "Fix:",
        // No policy allows nfguard.io/exempt: the overrides that count.
        "Override: exempt the image with a NetfilterPolicy's exemptImages",
        "exemptionNamespaceSelector",
    ] {
        assert!(msg.contains(needle), "{needle:?} missing from: {msg}");
    }
    assert!(!msg.contains("annotate the workload"), "{msg}");
}

/// Lets `nfguard.io/exempt` count in kube-system only (from files, a
/// namespace is known by its automatic kubernetes.io/metadata.name label).
const EXEMPTIONS_IN_KUBE_SYSTEM: &str = "apiVersion: nfguard.io/v1alpha1\nkind: NetfilterPolicy\nmetadata: {name: exemptions}\nspec:\n  exemptionNamespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}\n";

#[tokio::test]
async fn a_denial_suggests_the_annotation_only_where_it_counts() {
    let fx = Fixture::new();
    let policy = fx.write("policy.yaml", EXEMPTIONS_IN_KUBE_SYSTEM);
    let app = app(&fx, Some(&policy));
    let (_, v) = post(&app, ds_review(incident_ds(), false)).await;
    assert_eq!(resp(&v)["allowed"], false, "{v}");
    let msg = v["response"]["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("(Override: annotate the workload nfguard.io/exempt: \"<reason>\".)"),
        "{msg}"
    );
}

#[tokio::test]
async fn exempt_annotation_without_an_allowing_policy_is_ignored_and_said() {
    let fx = Fixture::new();
    let app = app(&fx, None);
    let obj = exempt_incident_ds("INC-4711: rollback in progress");
    let (_, v) = post(&app, ds_review(obj, false)).await;
    let r = resp(&v);
    assert_eq!(r["allowed"], false, "{v}");
    let msg = r["status"]["message"].as_str().unwrap();
    for needle in [
        "OldReaderNewRules",
        "nfguard.io/exempt ignored: no NetfilterPolicy allows exemptions in namespace kube-system",
        "Override: exempt the image with a NetfilterPolicy's exemptImages",
    ] {
        assert!(msg.contains(needle), "{needle:?} missing from: {msg}");
    }
    assert!(!msg.contains("annotate the workload"), "{msg}");
    assert_eq!(
        msg.matches("exemptImages").count(),
        1,
        "the hint once: {msg}"
    );
    assert!(!r["warnings"].to_string().contains("[Exempt]"), "{v}");
}

#[tokio::test]
async fn ephemeral_netadmin_container_is_checked() {
    let fx = Fixture::new();
    let app = app(&fx, None);
    // A running pod without privileges; `kubectl debug --profile=netadmin` adds an
    // ephemeral container with NET_ADMIN + NET_RAW in the pod's network namespace.
    let mut spec = pod_spec(true, vec![container("app", "busybox:1", &[])]);
    spec["nodeName"] = json!("node-a");
    spec["ephemeralContainers"] = json!([{
        "name": "debugger-x7k2p",
        "image": "netshoot:1.8.7",
        "targetContainerName": "app",
        "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
    }]);
    let (status, v) = post(&app, debug_review(&spec)).await;
    assert_eq!(status, 200);
    let r = resp(&v);
    assert_eq!(r["allowed"], false, "{v}");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("debugger-x7k2p (ephemeral)") && msg.contains("node-a"),
        "{msg}"
    );
    assert!(
        !msg.contains("node-b"),
        "nodeName pins the pod to node-a: {msg}"
    );

    // The same debug container without NET_ADMIN: allowed.
    spec["ephemeralContainers"][0]["securityContext"] = json!({});
    let (_, v) = post(&app, debug_review(&spec)).await;
    assert_eq!(resp(&v)["allowed"], true, "{v}");

    // A plain Pod UPDATE (not the subresource) is not judged: pod specs are immutable there.
    spec["ephemeralContainers"][0]["securityContext"] = json!({"privileged": true});
    let obj = object("Pod", "app-7d9f", "default", spec, json!({}));
    let (_, v) = post(
        &app,
        review("Pod", None, "UPDATE", "default", obj, false)
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(resp(&v)["allowed"], true);
    assert_eq!(resp(&v)["auditAnnotations"]["verdict"], "skipped");
}

/// A Pod UPDATE review from `old` to `new` (both pod specs).
fn pod_update_review(old: Value, new: Value) -> Vec<u8> {
    let old = object("Pod", "router", "default", old, json!({}));
    let new = object("Pod", "router", "default", new, json!({}));
    let mut r = review("Pod", None, "UPDATE", "default", new, false);
    r["request"]["oldObject"] = old;
    r.to_string().into_bytes()
}

#[tokio::test]
async fn pod_update_swapping_an_image_is_judged_like_a_create() {
    let fx = Fixture::new();
    let app = app(&fx, None);
    let spec = |image: &str| {
        let mut s = pod_spec(true, vec![container("router", image, &["NET_ADMIN"])]);
        s["nodeName"] = json!("node-a");
        s
    };
    // `kubectl set image pod/router router=kube-router:1.8.7` on a running pod.
    let (status, v) = post(
        &app,
        pod_update_review(spec("kube-proxy:wrapper"), spec("kube-router:1.8.7")),
    )
    .await;
    assert_eq!(status, 200);
    let r = resp(&v);
    assert_eq!(r["allowed"], false, "{v}");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("Pod/default/router")
            && msg.contains("kube-router:1.8.7")
            && msg.contains("node-a"),
        "{msg}"
    );
    assert!(
        !msg.contains("node-b"),
        "the running pod is on node-a: {msg}"
    );
    // The same verdict as check gives the new pod.
    let new = object(
        "Pod",
        "router",
        "default",
        spec("kube-router:1.8.7"),
        json!({}),
    );
    assert_eq!(check_verdict(&fx, &new).await.0, "deny");

    // Swapping back to a compatible image is judged and allowed.
    let (_, v) = post(
        &app,
        pod_update_review(spec("kube-router:1.8.7"), spec("kube-proxy:wrapper")),
    )
    .await;
    assert_eq!(resp(&v)["allowed"], true, "{v}");
    assert_eq!(resp(&v)["auditAnnotations"]["verdict"], "allow");

    // An update that leaves every image alone (labels, finalizers) is not
    // judged, even for a pod that would be denied today.
    let mut relabelled = object(
        "Pod",
        "router",
        "default",
        spec("kube-router:1.8.7"),
        json!({}),
    );
    relabelled["metadata"]["labels"] = json!({"tier": "net"});
    let mut r = review("Pod", None, "UPDATE", "default", relabelled, false);
    r["request"]["oldObject"] = object(
        "Pod",
        "router",
        "default",
        spec("kube-router:1.8.7"),
        json!({}),
    );
    let (_, v) = post(&app, r.to_string().into_bytes()).await;
    assert_eq!(resp(&v)["allowed"], true, "{v}");
    assert_eq!(resp(&v)["auditAnnotations"]["verdict"], "skipped");
}

#[tokio::test]
async fn exempt_workload_is_allowed_with_its_reason() {
    let fx = Fixture::new();
    let policy = fx.write("policy.yaml", EXEMPTIONS_IN_KUBE_SYSTEM);
    let app = app(&fx, Some(&policy));
    let obj = exempt_incident_ds("INC-4711: rollback in progress, approved by netops");
    let (_, v) = post(&app, ds_review(obj, false)).await;
    let r = resp(&v);
    assert_eq!(r["allowed"], true, "{v}");
    let w = r["warnings"].to_string();
    assert!(w.contains("INC-4711: rollback in progress"), "{w}");
    assert!(w.contains("Exempt"), "{w}");
}

#[tokio::test]
async fn dry_run_gets_the_same_verdict() {
    let fx = Fixture::new();
    let app = app(&fx, None);
    let obj = incident_ds();
    let (_, a) = post(&app, ds_review(obj.clone(), true)).await;
    let (_, b) = post(&app, ds_review(obj, false)).await;
    assert_eq!(a, b);
    assert_eq!(a["response"]["allowed"], false);
}

#[tokio::test]
async fn warn_policy_turns_denial_into_warnings() {
    let fx = Fixture::new();
    let policy = fx.write(
        "policy.yaml",
        "apiVersion: nfguard.io/v1alpha1\nkind: NetfilterPolicy\nmetadata: {name: soft}\nspec: {action: Warn, unresolvedImages: Warn}\n",
    );
    let app = app(&fx, Some(&policy));
    let obj = incident_ds();
    let (_, v) = post(&app, ds_review(obj, false)).await;
    let r = resp(&v);
    assert_eq!(r["allowed"], true, "{v}");
    assert_eq!(r["auditAnnotations"]["verdict"], "warn");
    let w = r["warnings"].as_array().unwrap();
    assert!(
        w.iter()
            .any(|w| w.as_str().unwrap().contains("OldReaderNewRules")),
        "{v}"
    );
}

#[tokio::test]
async fn unknown_kinds_delete_and_namespace_defaulting() {
    let fx = Fixture::new();
    let app = app(&fx, None);
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}});
    let (s, v) = post(
        &app,
        review("ConfigMap", None, "CREATE", "default", cm, false)
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(resp(&v)["allowed"], true);
    assert!(
        resp(&v)["warnings"][0]
            .as_str()
            .unwrap()
            .contains("does not judge kind \"ConfigMap\"")
    );

    let obj = incident_ds();
    let mut del = review(
        "DaemonSet",
        None,
        "DELETE",
        "kube-system",
        Value::Null,
        false,
    );
    del["request"]["oldObject"] = obj;
    let (_, v) = post(&app, del.to_string().into_bytes()).await;
    assert_eq!(resp(&v)["allowed"], true);
    assert!(resp(&v).get("warnings").is_none());

    // generateName pod without metadata.namespace: the request's namespace is used.
    let mut pod = object("Pod", "x", "ignored", incident_spec(), json!({}));
    pod["metadata"] = json!({"generateName": "kube-router-"});
    let (_, v) = post(
        &app,
        review("Pod", None, "CREATE", "kube-system", pod, false)
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(resp(&v)["allowed"], false);
    assert!(
        resp(&v)["status"]["message"]
            .as_str()
            .unwrap()
            .contains("Pod/kube-system/kube-router-"),
        "{v}"
    );
}

#[tokio::test]
async fn health_ready_and_metrics() {
    let fx = Fixture::new();
    let app = app(&fx, None);
    let obj = incident_ds();
    post(&app, ds_review(obj.clone(), false)).await;
    // Another object with the same image: judged afresh, image from cache.
    let mut other = obj;
    other["metadata"]["name"] = json!("kube-router-2");
    post(&app, ds_review(other, false)).await;
    post(&app, b"garbage".to_vec()).await;
    for path in ["/healthz", "/readyz"] {
        let r = app
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let r = app
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let text = String::from_utf8(
        axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    for needle in [
        "nfguard_webhook_admission_duration_seconds_count{kind=\"DaemonSet\",verdict=\"deny\"} 2",
        "nfguard_webhook_verdicts_total{verdict=\"deny\"} 2",
        "nfguard_webhook_reasons_total{code=\"OldReaderNewRules\"}",
        "nfguard_webhook_image_cache_hits_total 1",
        "nfguard_webhook_image_cache_misses_total 1",
        "nfguard_webhook_rejected_requests_total{cause=\"malformed\"} 1",
    ] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
}

#[tokio::test]
async fn identical_objects_are_answered_from_the_decision_cache() {
    let fx = Fixture::new();
    let app = app(&fx, None);
    let obj = incident_ds();
    let mut answers = Vec::new();
    for (uid, dry_run) in [("uid-1", false), ("uid-2", true), ("uid-3", false)] {
        let mut r = review(
            "DaemonSet",
            None,
            "CREATE",
            "kube-system",
            obj.clone(),
            dry_run,
        );
        r["request"]["uid"] = json!(uid);
        let (status, mut a) = post(&app, r.to_string().into_bytes()).await;
        assert_eq!(status, 200);
        // Each answer names its own request.
        assert_eq!(a["response"]["uid"], uid);
        a["response"]["uid"] = Value::Null;
        answers.push(a);
    }
    assert_eq!(answers[0]["response"]["allowed"], false);
    assert!(answers.iter().all(|a| *a == answers[0]));

    // Another object (one byte differs) is judged afresh.
    let mut other = obj.clone();
    other["metadata"]["name"] = json!("kube-router2");
    let (_, b) = post(&app, ds_review(other, false)).await;
    let msg = b["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("DaemonSet/kube-system/kube-router2"), "{msg}");

    let text = metrics_text(&app).await;
    for needle in [
        "nfguard_webhook_decision_cache_hits_total 2",
        "nfguard_webhook_decision_cache_misses_total 2",
        // Every answer, cached or not, counts its reasons and verdict.
        "nfguard_webhook_verdicts_total{verdict=\"deny\"} 4",
        "nfguard_webhook_reasons_total{code=\"OldReaderNewRules\"} 4",
    ] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
}

#[tokio::test]
async fn answers_waiting_on_an_image_are_not_cached() {
    let fx = Fixture::new();
    // The registry answers after the admission budget: the first answer is
    // "unresolved", later ones use the resolved image.
    let app = nfguard::webhook::router(state(
        &fx.profiles(),
        Some(&fx.nodes()),
        None,
        fake_registry(Duration::from_millis(1500)),
        Duration::from_secs(1),
    ));
    let spec = pod_spec(
        true,
        vec![container(
            "kube-router",
            "slow/kube-router:1.8.7",
            &["NET_ADMIN"],
        )],
    );
    let obj = object("DaemonSet", "kube-router", "kube-system", spec, json!({}));
    let body = ds_review(obj, false);
    let (_, first) = post(&app, body.clone()).await;
    assert!(first.to_string().contains("ImageUnresolved"), "{first}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, second) = post(&app, body).await;
    assert_eq!(second["response"]["allowed"], false, "{second}");
    assert!(!second.to_string().contains("ImageUnresolved"), "{second}");
}

async fn metrics_text(app: &axum::Router) -> String {
    let r = app
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    String::from_utf8(
        axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap()
}
