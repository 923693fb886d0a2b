//! Hostile and broken requests through the router: garbage, truncated,
//! oversized, wrong versions, odd objects, deep nesting, a stalling registry.
//! Every one gets a well-formed answer, quickly; nothing panics or hangs.

use crate::webhook_support as support;

use axum::body::Body;
use http::Request;
use nfguard::runtime::admin::Exposition;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::*;
use tower::ServiceExt;

async fn post(app: &axum::Router, body: Vec<u8>) -> (u16, Value) {
    let fut = app.clone().oneshot(
        Request::post("/validate")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap(),
    );
    let resp = tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .expect("answered, not hung")
        .unwrap();
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, v)
}

fn app_with(fx: &Fixture, timeout: Duration, slow: Duration) -> axum::Router {
    nfguard::webhook::router(state(
        &fx.profiles(),
        Some(&fx.nodes()),
        None,
        fake_registry(slow),
        timeout,
    ))
}

#[tokio::test]
async fn malformed_envelopes_get_400_with_a_reason() {
    let fx = Fixture::new();
    let app = app_with(&fx, Duration::from_secs(2), Duration::ZERO);
    let full = incident("kube-router:1.8.7").to_string();
    let mut v1beta1 = incident("kube-router:1.8.7");
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let mut no_uid = incident("kube-router:1.8.7");
    no_uid["request"].as_object_mut().unwrap().remove("uid");
    let mut wrong_kind = incident("kube-router:1.8.7");
    wrong_kind["kind"] = json!("TokenReview");
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "not JSON"),
        ("garbage", b"\x00\xff\xfe garbage {{{".to_vec(), "not JSON"),
        (
            "truncated",
            full.as_bytes()[..full.len() / 2].to_vec(),
            "not JSON",
        ),
        ("json array", b"[1,2,3]".to_vec(), "not an AdmissionReview"),
        (
            "v1beta1",
            v1beta1.to_string().into_bytes(),
            "unsupported apiVersion \"admission.k8s.io/v1beta1\"",
        ),
        ("no uid", no_uid.to_string().into_bytes(), "no request.uid"),
        (
            "other kind",
            wrong_kind.to_string().into_bytes(),
            "not an AdmissionReview",
        ),
        ("deep nesting", deep.into_bytes(), "not JSON"),
    ];
    for (what, body, want) in cases {
        let (status, v) = post(&app, body).await;
        assert_eq!(status, 400, "{what}: {v}");
        let err = v["error"].as_str().unwrap_or_default();
        assert!(err.contains(want), "{what}: {err}");
    }
}

/// The incident DaemonSet as an UPDATE review whose object and oldObject
/// each carry an annotation of `escaped` control characters (six bytes of
/// JSON each, as the API server writes `<` or invalid UTF-8) and `plain`
/// more bytes in the object.
fn padded_update(escaped: usize, plain: usize) -> Vec<u8> {
    let spec = pod_spec(
        true,
        vec![container(
            "kube-router",
            "kube-router:1.8.7",
            &["NET_ADMIN"],
        )],
    );
    let obj = object("DaemonSet", "kube-router", "kube-system", spec, json!({}));
    let mut r = review("DaemonSet", None, "UPDATE", "kube-system", obj, false);
    let pad = "\u{1}".repeat(escaped);
    r["request"]["oldObject"]["metadata"]["annotations"] = json!({ "pad": pad });
    r["request"]["object"]["metadata"]["annotations"] =
        json!({ "pad": format!("{pad}{}", "x".repeat(plain)) });
    serde_json::to_vec(&r).unwrap()
}

#[tokio::test]
async fn the_largest_update_review_is_judged_and_one_byte_more_is_refused() {
    use nfguard::webhook::intake::{ETCD_MAX_OBJECT_BYTES, JSON_ESCAPE_FACTOR, MAX_BODY_BYTES};
    let fx = Fixture::new();
    let app = app_with(&fx, Duration::from_secs(5), Duration::ZERO);
    // Two objects at etcd's limit, every byte escaped, and the envelope.
    let escaped = ETCD_MAX_OBJECT_BYTES - 4096;
    let bare = padded_update(escaped, 0).len();
    assert!(bare > 2 * ETCD_MAX_OBJECT_BYTES * JSON_ESCAPE_FACTOR - (64 << 10));
    assert!(bare <= MAX_BODY_BYTES, "{bare} > {MAX_BODY_BYTES}");
    let largest = padded_update(escaped, MAX_BODY_BYTES - bare);
    assert_eq!(largest.len(), MAX_BODY_BYTES);
    let start = Instant::now();
    let (status, v) = post(&app, largest).await;
    assert_eq!(status, 200);
    assert_eq!(v["response"]["allowed"], false, "judged and denied");
    let (status, _) = post(&app, padded_update(escaped, MAX_BODY_BYTES - bare + 1)).await;
    assert_eq!(status, 413);
    assert!(start.elapsed() < Duration::from_secs(10));
}

/// Objects the API server would never send: nfguard cannot read them, so
/// under the default policy (`action: Deny`) they are refused, saying why.
#[tokio::test]
async fn odd_objects_are_refused_as_unreadable() {
    let fx = Fixture::new();
    let app = app_with(&fx, Duration::from_secs(2), Duration::ZERO);
    let odd: Vec<(&str, Value)> = vec![
        ("object is a string", json!("hello")),
        ("object is a number", json!(42)),
        (
            "containers not a list",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "x"},
            "spec": {"template": {"spec": {"containers": "nope"}}}}),
        ),
        (
            "no pod template",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "x"}, "spec": {}}),
        ),
        (
            "annotations not strings",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "x", "annotations": {"a": 1}},
            "spec": {"template": {"spec": {"containers": []}}}}),
        ),
    ];
    for (what, obj) in odd {
        let mut r = incident("kube-router:1.8.7");
        r["request"]["object"] = obj;
        let (status, v) = post(&app, r.to_string().into_bytes()).await;
        assert_eq!(status, 200, "{what}: {v}");
        assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(v["response"]["allowed"], false, "{what}: {v}");
        let m = v["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(m.contains("nfguard cannot read DaemonSet/"), "{what}: {m}");
    }
    // Missing object on CREATE.
    let mut r = incident("kube-router:1.8.7");
    r["request"].as_object_mut().unwrap().remove("object");
    let (status, v) = post(&app, r.to_string().into_bytes()).await;
    assert_eq!(status, 200);
    assert_eq!(v["response"]["allowed"], false, "{v}");
    // A CRD kind nfguard does not know.
    let mut r = incident("kube-router:1.8.7");
    r["request"]["kind"] = json!({"group": "example.com", "version": "v1", "kind": "Widget"});
    let (_, v) = post(&app, r.to_string().into_bytes()).await;
    assert_eq!(v["response"]["allowed"], true);
    assert!(
        v["response"]["warnings"][0]
            .as_str()
            .unwrap()
            .contains("Widget")
    );
}

#[tokio::test]
async fn stalling_registry_is_answered_within_budget_and_resolution_continues() {
    let fx = Fixture::new();
    let budget = Duration::from_millis(1500);
    // "slow/*" answers after 2.5 s: past the budget.
    let app = app_with(&fx, budget, Duration::from_millis(2500));

    for image in ["stall/kube-router:1.8.7", "slow/kube-router:1.8.7"] {
        let start = Instant::now();
        let (status, v) = post(&app, incident(image).to_string().into_bytes()).await;
        let took = start.elapsed();
        assert_eq!(status, 200);
        assert!(
            took <= budget + Duration::from_millis(300),
            "{image}: took {took:?}"
        );
        // Default policy: unresolvedImages Warn.
        assert_eq!(v["response"]["allowed"], true, "{v}");
        let w = v["response"]["warnings"].to_string();
        assert!(
            w.contains("ImageUnresolved") && w.contains("admission budget"),
            "{w}"
        );
    }
    // The slow look-up kept going in the background and warmed the cache:
    // the next admission has the real answer at once.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let start = Instant::now();
    let (_, v) = post(
        &app,
        incident("slow/kube-router:1.8.7").to_string().into_bytes(),
    )
    .await;
    assert!(start.elapsed() < Duration::from_millis(500));
    assert_eq!(v["response"]["allowed"], false, "{v}");
    assert!(
        v["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("OldReaderNewRules")
    );
}

#[tokio::test]
async fn unresolved_deny_policy_denies_in_budget() {
    let fx = Fixture::new();
    let policy = fx.write(
        "p.yaml",
        "apiVersion: nfguard.io/v1alpha1\nkind: NetfilterPolicy\nmetadata: {name: strict}\nspec: {action: Deny, unresolvedImages: Deny, registryTimeoutSeconds: 1}\n",
    );
    let app = nfguard::webhook::router(state(
        &fx.profiles(),
        Some(&fx.nodes()),
        Some(&policy),
        fake_registry(Duration::ZERO),
        Duration::from_secs(8),
    ));
    let start = Instant::now();
    let (_, v) = post(&app, incident("stall/x:1").to_string().into_bytes()).await;
    // registryTimeoutSeconds (1 s) shortens the 8 s budget.
    assert!(
        start.elapsed() < Duration::from_millis(1800),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(v["response"]["allowed"], false, "{v}");
    assert!(
        v["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("ImageUnresolved")
    );
}

#[tokio::test]
async fn many_concurrent_requests_for_one_cold_image_all_get_the_answer() {
    let fx = Fixture::new();
    let st = state(
        &fx.profiles(),
        Some(&fx.nodes()),
        None,
        fake_registry(Duration::from_millis(300)),
        Duration::from_secs(3),
    );
    let metrics = st.metrics.clone();
    let app = nfguard::webhook::router(st);
    let body = incident("slow/kube-router:1.8.7").to_string().into_bytes();
    let all = futures::future::join_all((0..50).map(|_| post(&app, body.clone()))).await;
    for (s, v) in all {
        assert_eq!(s, 200);
        assert_eq!(v["response"]["allowed"], false);
    }
    let text = metrics.encode();
    assert!(
        text.contains("nfguard_webhook_image_cache_misses_total 50"),
        "{text}"
    );
    assert!(
        text.contains("nfguard_webhook_registry_errors_total 0"),
        "{text}"
    );
}

#[tokio::test]
async fn thousands_of_distinct_images_start_a_bounded_number_of_lookups() {
    let fx = Fixture::new();
    let st = state(
        &fx.profiles(),
        Some(&fx.nodes()),
        None,
        fake_registry(Duration::ZERO),
        Duration::from_secs(2),
    );
    let metrics = st.metrics.clone();
    let app = nfguard::webhook::router(st);
    let containers: Vec<Value> = (0..2000)
        .map(|i| {
            container(
                &format!("c{i}"),
                &format!("nosuch/img-{i}:1"),
                &["NET_ADMIN"],
            )
        })
        .collect();
    let body = review(
        "DaemonSet",
        None,
        "CREATE",
        "kube-system",
        object(
            "DaemonSet",
            "many",
            "kube-system",
            pod_spec(true, containers),
            json!({}),
        ),
        false,
    );
    let start = Instant::now();
    let (status, v) = post(&app, body.to_string().into_bytes()).await;
    assert_eq!(status, 200);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(v["response"]["allowed"], true, "unresolvedImages: Warn");
    assert!(
        v["response"]["warnings"].as_array().unwrap().len() <= 10,
        "warnings capped"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = metrics.encode();
    assert!(
        text.contains("nfguard_webhook_image_cache_misses_total 2000"),
        "{text}"
    );
    let errors: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("nfguard_webhook_registry_errors_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        errors,
        nfguard::webhook::images::MAX_NEW_LOOKUPS_PER_REQUEST as u64
    );
}
