//! `--self-signed` against kube's mock client: filling the install's empty
//! Secret (never creating one), the two-replicas race (409 Conflict -> read
//! and use the winner's), rotation guarded by resourceVersion, the caBundle
//! patch, and upgrades (the earlier nfguard's certificate taken over, or
//! the CA the caBundle trusts kept). Each step
//! asserts method, path and body of what the webhook sends.

use base64::Engine;
use http::{Method, Request, Response};
use kube::client::Body;
use nfguard::webhook::bootstrap::{self, Config, Material};
use nfguard::webhook::tls::Loaded;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime};
use tower_test::mock::{self, Handle};

type H = Handle<Request<Body>, Response<Body>>;

fn cfg() -> Config {
    Config {
        namespace: "nfguard-system".into(),
        secret_name: "nfguard-webhook-cert".into(),
        service_name: "nfguard-webhook".into(),
        webhook_config_name: "nfguard".into(),
        ca_validity: Duration::from_secs(2 * 90 * 86400),
        cert_validity: Duration::from_secs(90 * 86400),
        rotate_before: Duration::from_secs(30 * 86400),
        earlier_secret_name: Some("nfguard-webhook-tls".into()),
    }
}

const SECRET_PATH: &str = "/api/v1/namespaces/nfguard-system/secrets/nfguard-webhook-cert";
/// The Secret an earlier nfguard's webhook made itself.
const EARLIER_PATH: &str = "/api/v1/namespaces/nfguard-system/secrets/nfguard-webhook-tls";
const VWC_PATH: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/nfguard";

fn status(code: u16, reason: &str) -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{reason}"), "reason": reason, "code": code});
    Response::builder()
        .status(code)
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

fn ok(v: Value) -> Response<Body> {
    Response::builder()
        .status(200)
        .body(Body::from(serde_json::to_vec(&v).unwrap()))
        .unwrap()
}

/// The Secret as the install provides it: empty, Opaque, Helm's labels and
/// ownership annotations.
fn empty_secret(rv: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "nfguard-webhook-cert", "namespace": "nfguard-system", "resourceVersion": rv,
            "labels": {"app.kubernetes.io/name": "nfguard", "app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "nfguard", "meta.helm.sh/release-namespace": "nfguard-system"}}})
}

/// The Secret as the webhook leaves it: the install's, with its data.
fn secret_json(m: &Material, rv: &str) -> Value {
    let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut s = empty_secret(rv);
    s["data"] =
        json!({"ca.crt": b(&m.ca_pem), "tls.crt": b(&m.cert_pem), "tls.key": b(&m.key_pem)});
    s
}

/// Everything but the data is the install's, resourceVersion included.
fn assert_only_data_written(put: &Value, rv: &str) {
    let mut want = empty_secret(rv);
    want["data"] = put["data"].clone();
    assert_eq!(
        *put, want,
        "only data is written, guarded by resourceVersion {rv}"
    );
}

const VWC_UID: &str = "0b1c2d3e-0000-4000-8000-00000000f00d";

fn vwc_json(ca: Option<&str>) -> Value {
    let mut cc = json!({"service": {"name": "nfguard-webhook", "namespace": "nfguard-system", "path": "/validate", "port": 443}});
    if let Some(ca) = ca {
        cc["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "nfguard", "uid": VWC_UID},
    "webhooks": [
        {"name": "workloads.nfguard.io", "clientConfig": cc.clone(), "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore"},
        {"name": "pods.nfguard.io", "clientConfig": cc, "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore"}
    ]})
}

type Bootstrap = tokio::task::JoinHandle<Result<(Material, Loaded), bootstrap::BootstrapError>>;

/// One bootstrap against the mock API server, now.
fn start() -> (H, Bootstrap) {
    let (svc, h) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let c = cfg();
    let task =
        tokio::spawn(
            async move { bootstrap::bootstrap_once(&client, &c, SystemTime::now()).await },
        );
    (h, task)
}

async fn no_more_requests(h: &mut H) {
    let next = tokio::time::timeout(Duration::from_millis(200), h.next_request()).await;
    assert!(next.ok().flatten().is_none(), "no further request");
}

async fn expect(
    h: &mut H,
    method: Method,
    path: &str,
) -> (Value, mock::SendResponse<Response<Body>>) {
    let (req, send) = tokio::time::timeout(Duration::from_secs(10), h.next_request())
        .await
        .expect("request in time")
        .expect("a request");
    assert_eq!(req.method(), method, "{}", req.uri());
    assert_eq!(req.uri().path(), path);
    let body = req.into_body().collect_bytes().await.unwrap();
    let v = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap()
    };
    (v, send)
}

fn decode(v: &Value, key: &str) -> String {
    let b = v["data"][key].as_str().unwrap();
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b).unwrap()).unwrap()
}

fn leaf_dns_names(cert_pem: &str) -> Vec<String> {
    let der = rustls_pemfile::certs(&mut cert_pem.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
    let san = c.subject_alternative_name().unwrap().unwrap();
    san.value
        .general_names
        .iter()
        .map(|g| match g {
            x509_parser::extensions::GeneralName::DNSName(n) => n.to_string(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn fills_the_installs_empty_secret_and_patches_ca_bundle() {
    let (mut h, task) = start();

    let (_, send) = expect(&mut h, Method::GET, VWC_PATH).await;
    send.send_response(ok(vwc_json(None)));
    let (_, send) = expect(&mut h, Method::GET, SECRET_PATH).await;
    send.send_response(ok(empty_secret("3")));
    let (_, send) = expect(&mut h, Method::GET, EARLIER_PATH).await;
    send.send_response(status(404, "NotFound"));
    let (put, send) = expect(&mut h, Method::PUT, SECRET_PATH).await;
    assert_only_data_written(&put, "3");
    let ca = decode(&put, "ca.crt");
    assert_eq!(ca.matches("BEGIN CERTIFICATE").count(), 1);
    let cert = decode(&put, "tls.crt");
    assert!(decode(&put, "tls.key").contains("PRIVATE KEY"));
    assert_eq!(
        leaf_dns_names(&cert),
        vec![
            "nfguard-webhook",
            "nfguard-webhook.nfguard-system",
            "nfguard-webhook.nfguard-system.svc",
            "nfguard-webhook.nfguard-system.svc.cluster.local"
        ]
    );
    send.send_response(ok(put.clone()));
    let (patch, send) = expect(&mut h, Method::PATCH, VWC_PATH).await;
    let want_b64 = base64::engine::general_purpose::STANDARD.encode(&ca);
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": want_b64},
            {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": want_b64}
        ])
    );
    send.send_response(ok(vwc_json(Some(&ca))));
    let (m, loaded) = task.await.unwrap().unwrap();
    assert_eq!(m.ca_pem, ca);
    assert!(loaded.not_after.unwrap() > SystemTime::now() + Duration::from_secs(89 * 86400));
}

#[tokio::test]
async fn a_missing_secret_is_an_error_naming_the_fix_and_none_is_created() {
    let (mut h, task) = start();
    let (_, send) = expect(&mut h, Method::GET, VWC_PATH).await;
    send.send_response(ok(vwc_json(None)));
    let (_, send) = expect(&mut h, Method::GET, SECRET_PATH).await;
    send.send_response(status(404, "NotFound"));
    let err = task.await.unwrap().unwrap_err().to_string();
    assert_eq!(
        err,
        "Secret nfguard-system/nfguard-webhook-cert not found: the install provides it (empty) and \
         the webhook fills it; apply nfguard's manifests or chart again, or create it with \
         `kubectl -n nfguard-system create secret generic nfguard-webhook-cert`"
    );
    // The task has ended: no POST was sent (the mock saw no other request).
    no_more_requests(&mut h).await;
}

#[tokio::test]
async fn filling_an_empty_secret_keeps_the_ca_the_bundle_trusts() {
    // An upgrade where the earlier nfguard's Secret cannot be read: its
    // replicas serve a certificate of the CA in the caBundle; the new
    // Secret is empty.
    let earlier = bootstrap::generate(&cfg(), SystemTime::now(), None).unwrap();
    let (mut h, task) = start();
    let (_, send) = expect(&mut h, Method::GET, VWC_PATH).await;
    send.send_response(ok(vwc_json(Some(&earlier.ca_pem))));
    let (_, send) = expect(&mut h, Method::GET, SECRET_PATH).await;
    send.send_response(ok(empty_secret("4")));
    // Its Secret unreadable (an overlay removed the cluster-wide get).
    let (_, send) = expect(&mut h, Method::GET, EARLIER_PATH).await;
    send.send_response(status(403, "Forbidden"));
    let (put, send) = expect(&mut h, Method::PUT, SECRET_PATH).await;
    assert_only_data_written(&put, "4");
    let bundle = decode(&put, "ca.crt");
    assert!(bundle.ends_with(&earlier.ca_pem), "the trusted CA is kept");
    assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2);
    assert_ne!(
        decode(&put, "tls.crt"),
        earlier.cert_pem,
        "a certificate of its own"
    );
    send.send_response(ok(put.clone()));
    let (patch, send) = expect(&mut h, Method::PATCH, VWC_PATH).await;
    assert_eq!(
        patch[0]["value"],
        base64::engine::general_purpose::STANDARD.encode(&bundle)
    );
    send.send_response(ok(vwc_json(Some(&bundle))));
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn an_empty_secret_takes_over_the_earlier_nfguards_certificate() {
    // An upgrade: the earlier webhook's own Secret holds the certificate its
    // replicas serve and the caBundle trusts; the new replicas serve the
    // same, so neither version's caBundle write shuts the other out.
    let earlier = bootstrap::generate(&cfg(), SystemTime::now(), None).unwrap();
    let (mut h, task) = start();
    let (_, send) = expect(&mut h, Method::GET, VWC_PATH).await;
    send.send_response(ok(vwc_json(Some(&earlier.ca_pem))));
    let (_, send) = expect(&mut h, Method::GET, SECRET_PATH).await;
    send.send_response(ok(empty_secret("5")));
    let (_, send) = expect(&mut h, Method::GET, EARLIER_PATH).await;
    let mut theirs = secret_json(&earlier, "77");
    theirs["metadata"]["name"] = json!("nfguard-webhook-tls");
    theirs["type"] = json!("kubernetes.io/tls");
    send.send_response(ok(theirs));
    let (put, send) = expect(&mut h, Method::PUT, SECRET_PATH).await;
    assert_only_data_written(&put, "5");
    assert_eq!(decode(&put, "ca.crt"), earlier.ca_pem);
    assert_eq!(decode(&put, "tls.crt"), earlier.cert_pem);
    assert_eq!(decode(&put, "tls.key"), earlier.key_pem);
    send.send_response(ok(put.clone()));
    let (m, _) = task.await.unwrap().unwrap();
    assert_eq!(m, earlier, "the same certificate as the earlier replicas");
    // The caBundle already trusts it: no PATCH.
    no_more_requests(&mut h).await;
}

#[tokio::test]
async fn losing_the_fill_race_uses_the_winners_certificate() {
    let winner = bootstrap::generate(&cfg(), SystemTime::now(), None).unwrap();
    let (mut h, task) = start();

    let (_, send) = expect(&mut h, Method::GET, VWC_PATH).await;
    // The winner already patched webhook 0; only webhook 1 needs it.
    let mut vwc = vwc_json(Some(&winner.ca_pem));
    vwc["webhooks"][1]["clientConfig"]
        .as_object_mut()
        .unwrap()
        .remove("caBundle");
    send.send_response(ok(vwc));
    let (_, send) = expect(&mut h, Method::GET, SECRET_PATH).await;
    send.send_response(ok(empty_secret("41")));
    let (_, send) = expect(&mut h, Method::GET, EARLIER_PATH).await;
    send.send_response(status(404, "NotFound"));
    let (ours, send) = expect(&mut h, Method::PUT, SECRET_PATH).await;
    assert_ne!(decode(&ours, "tls.crt"), winner.cert_pem);
    send.send_response(status(409, "Conflict"));
    let (_, send) = expect(&mut h, Method::GET, SECRET_PATH).await;
    send.send_response(ok(secret_json(&winner, "42")));
    let (patch, send) = expect(&mut h, Method::PATCH, VWC_PATH).await;
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/webhooks/1/clientConfig/caBundle",
                "value": base64::engine::general_purpose::STANDARD.encode(&winner.ca_pem)}])
    );
    send.send_response(ok(vwc_json(Some(&winner.ca_pem))));
    let (m, _) = task.await.unwrap().unwrap();
    assert_eq!(m, winner, "the loser serves the winner's certificate");
}

#[tokio::test]
async fn current_secret_and_bundle_send_no_writes() {
    let existing = bootstrap::generate(&cfg(), SystemTime::now(), None).unwrap();
    let (mut h, task) = start();
    let (_, send) = expect(&mut h, Method::GET, VWC_PATH).await;
    send.send_response(ok(vwc_json(Some(&existing.ca_pem))));
    let (_, send) = expect(&mut h, Method::GET, SECRET_PATH).await;
    send.send_response(ok(secret_json(&existing, "7")));
    let (m, _) = task.await.unwrap().unwrap();
    assert_eq!(m, existing);
    // No further request (no PATCH, no PUT).
    drop(h);
}

#[tokio::test]
async fn rotates_before_expiry_keeping_the_old_ca_in_the_bundle() {
    // Issued 70 days ago: 20 days left < rotate_before (30 days).
    let old = bootstrap::generate(
        &cfg(),
        SystemTime::now() - Duration::from_secs(70 * 86400),
        None,
    )
    .unwrap();
    let (mut h, task) = start();
    let (_, send) = expect(&mut h, Method::GET, VWC_PATH).await;
    send.send_response(ok(vwc_json(Some(&old.ca_pem))));
    let (_, send) = expect(&mut h, Method::GET, SECRET_PATH).await;
    send.send_response(ok(secret_json(&old, "100")));
    let (put, send) = expect(&mut h, Method::PUT, SECRET_PATH).await;
    assert_only_data_written(&put, "100");
    let bundle = decode(&put, "ca.crt");
    assert!(bundle.ends_with(&old.ca_pem), "old CA kept in the bundle");
    assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2);
    assert_ne!(decode(&put, "tls.crt"), old.cert_pem);
    send.send_response(ok(put.clone()));
    let (patch, send) = expect(&mut h, Method::PATCH, VWC_PATH).await;
    assert_eq!(
        patch[0]["value"],
        base64::engine::general_purpose::STANDARD.encode(&bundle)
    );
    send.send_response(ok(vwc_json(Some(&bundle))));
    let (_, loaded) = task.await.unwrap().unwrap();
    assert!(loaded.not_after.unwrap() > SystemTime::now() + Duration::from_secs(89 * 86400));
}

#[tokio::test]
async fn rotation_conflict_reads_the_other_replicas_rotation() {
    let old = bootstrap::generate(
        &cfg(),
        SystemTime::now() - Duration::from_secs(80 * 86400),
        None,
    )
    .unwrap();
    let theirs = bootstrap::generate(&cfg(), SystemTime::now(), Some(&old.ca_pem)).unwrap();
    let (mut h, task) = start();
    let (_, send) = expect(&mut h, Method::GET, VWC_PATH).await;
    send.send_response(ok(vwc_json(Some(&theirs.ca_pem))));
    let (_, send) = expect(&mut h, Method::GET, SECRET_PATH).await;
    send.send_response(ok(secret_json(&old, "5")));
    let (_, send) = expect(&mut h, Method::PUT, SECRET_PATH).await;
    send.send_response(status(409, "Conflict"));
    let (_, send) = expect(&mut h, Method::GET, SECRET_PATH).await;
    send.send_response(ok(secret_json(&theirs, "6")));
    let (m, _) = task.await.unwrap().unwrap();
    assert_eq!(m, theirs);
}

#[tokio::test]
async fn garbage_in_the_secret_is_replaced() {
    let (mut h, task) = start();
    let (_, send) = expect(&mut h, Method::GET, VWC_PATH).await;
    send.send_response(ok(vwc_json(None)));
    let (_, send) = expect(&mut h, Method::GET, SECRET_PATH).await;
    let mut garbage = empty_secret("9");
    garbage["data"] =
        json!({"tls.crt": "bm90IGEgY2VydA==", "tls.key": "bm9wZQ==", "ca.crt": "bm9wZQ=="});
    send.send_response(ok(garbage));
    let (_, send) = expect(&mut h, Method::GET, EARLIER_PATH).await;
    send.send_response(status(404, "NotFound"));
    let (put, send) = expect(&mut h, Method::PUT, SECRET_PATH).await;
    assert_only_data_written(&put, "9");
    assert_eq!(
        decode(&put, "ca.crt").matches("BEGIN CERTIFICATE").count(),
        1
    );
    send.send_response(ok(put.clone()));
    let (patch, send) = expect(&mut h, Method::PATCH, VWC_PATH).await;
    assert_eq!(
        patch[0]["value"],
        base64::engine::general_purpose::STANDARD.encode(decode(&put, "ca.crt"))
    );
    send.send_response(ok(vwc_json(Some(&decode(&put, "ca.crt")))));
    task.await.unwrap().unwrap();
}
