//! `nfguard check --kubeconfig/--cluster`: the facts come from `list` calls.
//! kube's mock client stands in for the API server; every request's method
//! and path are asserted (not the exact query string).

use http::{Method, Request, Response};
use kube::client::Body;
use nfguard::check::cli::CheckFormat as Format;
use nfguard::check::cli::{Args, Env, execute, gather};
use nfguard::check::cluster;
use nfguard::compat::evaluate::Verdict;
use nfguard::facts::Platform;
use nfguard::facts::{Backend, ImageProfile, IptablesFacts};
use nfguard::judgement::{ImageLookup, LookupError};
use nfguard::registry::Credentials;
use serde_json::json;
use std::sync::Arc;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn list(kind: &str, api_version: &str, items: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {}, "items": items})
}

fn profiles() -> serde_json::Value {
    list(
        "NodeNetfilterProfile",
        "nfguard.io/v1alpha1",
        json!([{
            "apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
            "metadata": {"name": "node-a"}, "spec": {"nodeName": "node-a"},
            "status": {"iptables": {"version": "1.8.9", "backend": "nft", "evidence": []},
                       "activeBackend": "nft", "minReaderVersion": "1.8.8"}
        }, {
            "apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
            "metadata": {"name": "node-b"}, "spec": {"nodeName": "node-b"},
            "status": {"iptables": {"version": "1.8.7", "backend": "nft", "evidence": []},
                       "activeBackend": "nft"}
        }]),
    )
}

fn nodes() -> serde_json::Value {
    list(
        "Node",
        "v1",
        json!([
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a",
                "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "pool": "new"}}},
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-b",
                "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "pool": "old"}}}
        ]),
    )
}

fn policies() -> serde_json::Value {
    list(
        "NetfilterPolicy",
        "nfguard.io/v1alpha1",
        json!([{
            "apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicy",
            "metadata": {"name": "only-net"},
            "spec": {"action": "Deny", "namespaceSelector": {"matchLabels": {"team": "net"}}}
        }]),
    )
}

fn namespaces() -> serde_json::Value {
    list(
        "Namespace",
        "v1",
        json!([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system", "labels": {"team": "net"}}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps", "labels": {"team": "web"}}}
        ]),
    )
}

/// Serve the expected requests in order: (path, response body).
fn serve(
    mut handle: Handle,
    expected: Vec<(&'static str, serde_json::Value)>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for (path, body) in expected {
            let (req, send) = handle.next_request().await.expect("request expected");
            assert_eq!(req.method(), Method::GET);
            assert_eq!(req.uri().path(), path);
            send.send_response(
                Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );
        }
    })
}

fn mock() -> (kube::Client, Handle) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(svc, "default"), handle)
}

struct Fixed;

#[async_trait::async_trait]
impl ImageLookup for Fixed {
    async fn lookup(
        &self,
        image: &str,
        platform: &Platform,
        _credentials: Option<&Credentials>,
    ) -> Result<ImageProfile, LookupError> {
        Ok(ImageProfile {
            image: image.into(),
            digest: "sha256:1".into(),
            platform: platform.to_string(),
            iptables: Some(IptablesFacts {
                version: Some("1.8.7".parse().unwrap()),
                backend: Some(Backend::Nft),
                ..Default::default()
            }),
        })
    }
}

fn args(manifest: &std::path::Path) -> Args {
    Args {
        files: vec![manifest.display().to_string()],
        profiles: None,
        nodes: None,
        policy: None,
        registry: Default::default(),
        platform_default: "linux/amd64".into(),
        timeout: 2,
        concurrency: 2,
        kubeconfig: None,
        cluster: true,
        output: Format::Json,
        max_nodes: 10,
    }
}

fn manifest(dir: &std::path::Path, ns: &str, selector: &str) -> std::path::PathBuf {
    let p = dir.join(format!("{ns}.yaml"));
    std::fs::write(
        &p,
        format!(
            "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: kr, namespace: {ns}}}\nspec:\n  template:\n    spec:\n      hostNetwork: true\n{selector}      containers:\n      - {{name: kr, image: kr:old, securityContext: {{privileged: true}}}}\n"
        ),
    )
    .unwrap();
    p
}

#[tokio::test]
async fn lists_profiles_nodes_policies_and_namespaces() {
    let (client, handle) = mock();
    let server = serve(
        handle,
        vec![
            (
                "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles",
                profiles(),
            ),
            ("/api/v1/nodes", nodes()),
            ("/apis/nfguard.io/v1alpha1/netfilterpolicies", policies()),
            ("/api/v1/namespaces", namespaces()),
        ],
    );
    let facts = cluster::load(client, true, true).await.unwrap();
    server.await.unwrap();
    assert_eq!(facts.profiles.len(), 2);
    assert_eq!(facts.nodes.len(), 2);
    assert_eq!(facts.policies.len(), 1);
    assert_eq!(facts.namespace_labels["kube-system"]["team"], "net");
}

#[tokio::test]
async fn cluster_facts_drive_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let env = |client| Env {
        lookup: Some(Arc::new(Fixed) as Arc<dyn ImageLookup>),
        client: Some(client),
    };
    let all = || {
        vec![
            (
                "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles",
                profiles(),
            ),
            ("/api/v1/nodes", nodes()),
            ("/apis/nfguard.io/v1alpha1/netfilterpolicies", policies()),
            ("/api/v1/namespaces", namespaces()),
        ]
    };

    // kube-system is selected by the policy: 1.8.7 on node-a (1.8.9 rules) -> deny.
    let (client, handle) = mock();
    let server = serve(handle, all());
    let r = execute(&args(&manifest(dir.path(), "kube-system", "")), env(client))
        .await
        .unwrap();
    server.await.unwrap();
    assert_eq!(r.verdict, Verdict::Deny);
    assert_eq!(r.results[0].reasons[0].nodes, vec!["node-a"]);

    // Node labels from the cluster steer it to the old pool: allow.
    let (client, handle) = mock();
    let server = serve(handle, all());
    let sel = "      nodeSelector: {pool: old}\n";
    let r = execute(
        &args(&manifest(dir.path(), "kube-system", sel)),
        env(client),
    )
    .await
    .unwrap();
    server.await.unwrap();
    assert_eq!(r.verdict, Verdict::Allow, "{:#?}", r.results);

    // "apps" is not selected by the only policy: not judged.
    let (client, handle) = mock();
    let server = serve(handle, all());
    let r = execute(&args(&manifest(dir.path(), "apps", "")), env(client))
        .await
        .unwrap();
    server.await.unwrap();
    assert_eq!(r.verdict, Verdict::Allow);
    assert_eq!(
        r.results[0].reasons[0].code.to_string(),
        "NamespaceNotSelected"
    );
}

#[tokio::test]
async fn files_given_are_not_listed_and_api_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), "kube-system", "");
    let nodes_file = dir.path().join("nodes.json");
    std::fs::write(&nodes_file, nodes().to_string()).unwrap();
    let mut a = args(&m);
    a.nodes = Some(nodes_file);
    // Only profiles, policies and namespaces are listed.
    let (client, handle) = mock();
    let server = serve(
        handle,
        vec![
            (
                "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles",
                profiles(),
            ),
            ("/apis/nfguard.io/v1alpha1/netfilterpolicies", policies()),
            ("/api/v1/namespaces", namespaces()),
        ],
    );
    let inputs = gather(&a, Some(client)).await.unwrap();
    server.await.unwrap();
    assert_eq!(inputs.nodes.len(), 2);
    assert_eq!(inputs.profiles.len(), 2);

    // A 403 on the profiles list is an error naming what failed.
    let (client, mut handle) = mock();
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.unwrap();
        assert_eq!(
            req.uri().path(),
            "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles"
        );
        let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": "forbidden", "reason": "Forbidden", "code": 403});
        send.send_response(
            Response::builder()
                .status(403)
                .body(Body::from(serde_json::to_vec(&status).unwrap()))
                .unwrap(),
        );
    });
    let err = gather(&args(&m), Some(client)).await.unwrap_err();
    server.await.unwrap();
    let msg = format!("{err:#}");
    assert!(msg.contains("listing nodenetfilterprofiles"), "{msg}");
    assert!(msg.contains("forbidden"), "{msg}");
}
