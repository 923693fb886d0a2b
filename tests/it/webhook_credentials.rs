//! Registry credentials for an admitted pod come from its own
//! imagePullSecrets and its ServiceAccount's, read through the API
//! (kube's mock client: method + path asserted).

use base64::Engine;
use http::{Method, Request, Response};
use k8s_openapi::api::core::v1::PodSpec;
use kube::client::Body;
use nfguard::judgement::pull_secrets::pull_secrets;
use nfguard::projection::PullSecretRefs;
use nfguard::registry::Credentials;
use serde_json::json;
use std::time::Duration;
use tower_test::mock;

fn ok(v: serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(200)
        .body(Body::from(serde_json::to_vec(&v).unwrap()))
        .unwrap()
}

fn dockercfg_secret(name: &str, host: &str, user: &str) -> serde_json::Value {
    let b = base64::engine::general_purpose::STANDARD;
    let cfg = json!({"auths": {host: {"auth": b.encode(format!("{user}:pw-{user}"))}}});
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": name, "namespace": "apps"},
        "data": {".dockerconfigjson": b.encode(cfg.to_string())}})
}

type H = mock::Handle<Request<Body>, Response<Body>>;

async fn next(h: &mut H) -> (Method, String, mock::SendResponse<Response<Body>>) {
    let (req, send) = tokio::time::timeout(Duration::from_secs(10), h.next_request())
        .await
        .unwrap()
        .unwrap();
    (req.method().clone(), req.uri().path().to_string(), send)
}

#[tokio::test]
async fn pod_and_service_account_pull_secrets() {
    let (svc, mut h) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let spec: PodSpec = serde_json::from_value(json!({
        "serviceAccountName": "builder",
        "imagePullSecrets": [{"name": "pod-secret"}],
        "containers": [{"name": "c", "image": "127.0.0.1:5000/a:1"}]
    }))
    .unwrap();
    let refs = PullSecretRefs::of(&spec);
    let task = tokio::spawn(async move { pull_secrets(&client, "apps", &refs).await });

    let (m, p, send) = next(&mut h).await;
    assert_eq!(
        (m, p.as_str()),
        (
            Method::GET,
            "/api/v1/namespaces/apps/serviceaccounts/builder"
        )
    );
    send.send_response(ok(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "builder", "namespace": "apps"},
        "imagePullSecrets": [{"name": "sa-secret"}, {"name": "missing"}]})));
    let (m, p, send) = next(&mut h).await;
    assert_eq!(
        (m, p.as_str()),
        (Method::GET, "/api/v1/namespaces/apps/secrets/pod-secret")
    );
    send.send_response(ok(dockercfg_secret(
        "pod-secret",
        "127.0.0.1:5000",
        "alice",
    )));
    let (m, p, send) = next(&mut h).await;
    assert_eq!(
        (m, p.as_str()),
        (Method::GET, "/api/v1/namespaces/apps/secrets/sa-secret")
    );
    send.send_response(ok(dockercfg_secret("sa-secret", "reg.example:443", "bob")));
    let (m, p, send) = next(&mut h).await;
    assert_eq!(
        (m, p.as_str()),
        (Method::GET, "/api/v1/namespaces/apps/secrets/missing")
    );
    send.send_response(
        Response::builder()
            .status(404)
            .body(Body::from(serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"})).unwrap()))
            .unwrap(),
    );
    let secrets = task.await.unwrap();
    assert_eq!(
        secrets.credentials_for("127.0.0.1:5000/a:1"),
        Some(Credentials::Basic {
            username: "alice".into(),
            password: "pw-alice".into()
        })
    );
    assert_eq!(
        secrets.credentials_for("reg.example:443/team/b@sha256:00"),
        Some(Credentials::Basic {
            username: "bob".into(),
            password: "pw-bob".into()
        })
    );
    assert_eq!(secrets.credentials_for("nginx:1"), None);
}

/// The webhook's reads: the ServiceAccount's names come from a cache, the
/// Secrets are read at every review (a revoked one counts at once); an API
/// error is not cached.
#[tokio::test]
async fn the_service_account_is_read_once_and_its_secrets_every_time() {
    use nfguard::judgement::pull_secrets::PodPullSecrets;
    let (svc, mut h) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let reads = PodPullSecrets::new(client, Duration::from_secs(3600), 16);
    let spec: PodSpec = serde_json::from_value(json!({
        "serviceAccountName": "builder",
        "containers": [{"name": "c", "image": "reg.example:443/team/b:1"}]
    }))
    .unwrap();
    let refs = PullSecretRefs::of(&spec);
    let sa = || {
        ok(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "builder", "namespace": "apps"},
            "imagePullSecrets": [{"name": "sa-secret"}]}))
    };
    let failure = || {
        Response::builder()
            .status(500)
            .body(Body::from(serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "InternalError", "code": 500, "message": "etcd"})).unwrap()))
            .unwrap()
    };
    // First review: the account fails to answer; nothing is cached.
    let task = {
        let (reads, refs) = (reads.clone(), refs.clone());
        tokio::spawn(async move { reads.read("apps", &refs).await })
    };
    let (_, p, send) = next(&mut h).await;
    assert_eq!(p, "/api/v1/namespaces/apps/serviceaccounts/builder");
    send.send_response(failure());
    assert_eq!(
        task.await
            .unwrap()
            .credentials_for("reg.example:443/team/b:1"),
        None
    );
    // Three reviews: one GET of the account, three of its Secret.
    for review in 0..3 {
        let task = {
            let (reads, refs) = (reads.clone(), refs.clone());
            tokio::spawn(async move { reads.read("apps", &refs).await })
        };
        let (m, p, send) = next(&mut h).await;
        if review == 0 {
            assert_eq!(
                (m.clone(), p.as_str()),
                (
                    Method::GET,
                    "/api/v1/namespaces/apps/serviceaccounts/builder"
                )
            );
            send.send_response(sa());
            let (m, p, send) = next(&mut h).await;
            assert_eq!(
                (m, p.as_str()),
                (Method::GET, "/api/v1/namespaces/apps/secrets/sa-secret")
            );
            send.send_response(ok(dockercfg_secret("sa-secret", "reg.example:443", "bob")));
        } else {
            assert_eq!(
                (m, p.as_str()),
                (Method::GET, "/api/v1/namespaces/apps/secrets/sa-secret"),
                "review {review}: the account's names come from the cache"
            );
            send.send_response(ok(dockercfg_secret("sa-secret", "reg.example:443", "bob")));
        }
        assert!(
            task.await
                .unwrap()
                .credentials_for("reg.example:443/team/b:1")
                .is_some(),
            "review {review}"
        );
    }
    // Another namespace's account of the same name is its own entry.
    let task = tokio::spawn(async move { reads.read("other", &refs).await });
    let (_, p, send) = next(&mut h).await;
    assert_eq!(p, "/api/v1/namespaces/other/serviceaccounts/builder");
    send.send_response(ok(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "builder", "namespace": "other"}})));
    task.await.unwrap();
    // Every client is gone with the task: the handle ends without another request.
    assert!(
        !matches!(
            tokio::time::timeout(Duration::from_millis(200), h.next_request()).await,
            Ok(Some(_))
        ),
        "no further request"
    );
}
