//! A fake API server for pull secrets behind a real `kube::Client`: it
//! answers GET of the Secrets and ServiceAccounts it holds and 404 for
//! anything else, and records every path asked (what nfguard read).

use base64::Engine;
use http::{Method, Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A `kubernetes.io/dockerconfigjson` Secret granting `user:password` on `host`.
pub fn dockerconfigjson_secret(
    namespace: &str,
    name: &str,
    host: &str,
    user: &str,
    password: &str,
) -> Value {
    let b = base64::engine::general_purpose::STANDARD;
    let cfg = json!({"auths": {host: {"auth": b.encode(format!("{user}:{password}"))}}});
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": name, "namespace": namespace},
        "data": {".dockerconfigjson": b.encode(cfg.to_string())}})
}

/// A ServiceAccount naming `secrets` as its imagePullSecrets.
pub fn service_account(namespace: &str, name: &str, secrets: &[&str]) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace},
        "imagePullSecrets": secrets.iter().map(|s| json!({"name": s})).collect::<Vec<_>>()})
}

/// The objects served, and the paths of the GETs received.
#[derive(Clone, Default)]
pub struct SecretsApi {
    by_path: Arc<BTreeMap<String, Value>>,
    pub asked: Arc<Mutex<Vec<String>>>,
}

impl SecretsApi {
    /// Serve `objects` (Secrets and ServiceAccounts) at their API paths.
    pub fn new(objects: impl IntoIterator<Item = Value>) -> Self {
        let by_path = objects
            .into_iter()
            .map(|o| {
                let kind = match o["kind"].as_str() {
                    Some("Secret") => "secrets",
                    Some("ServiceAccount") => "serviceaccounts",
                    other => panic!("not served: {other:?}"),
                };
                let path = format!(
                    "/api/v1/namespaces/{}/{kind}/{}",
                    o["metadata"]["namespace"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                );
                (path, o)
            })
            .collect();
        SecretsApi {
            by_path: Arc::new(by_path),
            asked: Arc::default(),
        }
    }

    /// The paths asked so far.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }

    /// A client whose every request this API answers.
    pub fn client(&self) -> kube::Client {
        let api = self.clone();
        let svc = tower::service_fn(move |req: Request<Body>| {
            let api = api.clone();
            async move {
                let path = req.uri().path().to_string();
                api.asked.lock().unwrap().push(path.clone());
                let found = (req.method() == Method::GET)
                    .then(|| api.by_path.get(&path))
                    .flatten();
                let (status, body) = match found {
                    Some(o) => (200, o.clone()),
                    None => (
                        404,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "NotFound", "code": 404, "message": "not found"}),
                    ),
                };
                Ok::<_, std::convert::Infallible>(
                    Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                )
            }
        });
        kube::Client::new(svc, "default")
    }
}
