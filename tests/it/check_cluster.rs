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

/// What `check --cluster` lists, in order: (path, response body).
fn cluster_facts() -> Vec<(&'static str, serde_json::Value)> {
    vec![
        (
            "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles",
            profiles(),
        ),
        ("/api/v1/nodes", nodes()),
        ("/apis/nfguard.io/v1alpha1/netfilterpolicies", policies()),
        ("/api/v1/namespaces", namespaces()),
    ]
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
            nftables: None,
        })
    }
}

fn args(manifest: &std::path::Path) -> Args {
    Args {
        files: vec![manifest.display().to_string()],
        profiles: None,
        nodes: None,
        policy: None,
        lookup: nfguard::check::cli::LookupArgs {
            registry: Default::default(),
            platform_default: "linux/amd64".into(),
            timeout: 2,
            concurrency: 2,
        },
        kubeconfig: None,
        cluster: true,
        output: Format::Json,
        max_nodes: 10,
        what_if: Default::default(),
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
    let server = serve(handle, cluster_facts());
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
    let all = cluster_facts;

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

// ---- what-if: today's workloads against nodes changed as assumed ----

fn daemonsets() -> serde_json::Value {
    list(
        "DaemonSet",
        "apps/v1",
        json!([{
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "kr", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "kr"}}, "template": {
                "metadata": {"labels": {"app": "kr"}},
                "spec": {"hostNetwork": true, "containers": [
                    {"name": "kr", "image": "kr:old", "securityContext": {"privileged": true}}]}}}
        }, {
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "logs", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "logs"}}, "template": {
                "metadata": {"labels": {"app": "logs"}},
                "spec": {"containers": [{"name": "logs", "image": "logs:1"}]}}}
        }]),
    )
}

fn pod(
    name: &str,
    node: &str,
    host_network: bool,
    phase: &str,
    owner: Option<&str>,
) -> serde_json::Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system",
            "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
        "spec": {"nodeName": node, "hostNetwork": host_network, "containers": [
            {"name": "c", "image": "kr:old", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]},
        "status": {"phase": phase}
    });
    if let Some(kind) = owner {
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind,
            "name": "kr", "uid": "u1", "controller": true}]);
    }
    p
}

fn pods() -> serde_json::Value {
    list(
        "Pod",
        "v1",
        json!([
            // Judged: a bare hostNetwork NET_ADMIN pod running on node-b.
            pod("router-debug", "node-b", true, "Running", None),
            // Left to its DaemonSet.
            pod("kr-x1", "node-b", true, "Running", Some("DaemonSet")),
            // Not running.
            pod("pending", "node-b", true, "Pending", None),
        ]),
    )
}

fn whatif_args(assume: &[&str], selector: Option<&str>) -> Args {
    let mut a = args(std::path::Path::new("unused"));
    a.files.clear();
    a.what_if.running = true;
    a.what_if.change.assume = assume.iter().map(|s| s.to_string()).collect();
    a.what_if.change.assume_nodes = selector.map(str::to_string);
    a
}

fn cluster_with_running() -> Vec<(&'static str, serde_json::Value)> {
    let mut all = cluster_facts();
    all.push(("/apis/apps/v1/daemonsets", daemonsets()));
    all.push(("/api/v1/pods", pods()));
    all
}

#[tokio::test]
async fn running_workloads_are_judged_against_assumed_nodes() {
    let env = |client| Env {
        lookup: Some(Arc::new(Fixed) as Arc<dyn ImageLookup>),
        client: Some(client),
    };
    // Today: the 1.8.7 image is unsafe on node-a (1.8.9 host) only.
    let (client, handle) = mock();
    let server = serve(handle, cluster_with_running());
    let today = execute(&whatif_args(&[], None), env(client)).await.unwrap();
    server.await.unwrap();
    let objects: Vec<&str> = today.results.iter().map(|r| r.object.as_str()).collect();
    assert_eq!(
        objects,
        vec!["DaemonSet/kube-system/kr", "Pod/kube-system/router-debug"],
        "DaemonSet-owned, pending and non-netfilter workloads are not judged"
    );
    assert_eq!(today.results[0].reasons[0].nodes, vec!["node-a"]);
    assert_eq!(
        today.results[1].verdict,
        Verdict::Allow,
        "node-b's host is 1.8.7 today"
    );
    assert!(today.what_if.is_none());

    // The old pool moves to Debian trixie: node-b's host writes with 1.8.11.
    let (client, handle) = mock();
    let server = serve(handle, cluster_with_running());
    let r = execute(
        &whatif_args(&["os=debian-13"], Some("pool=old")),
        env(client),
    )
    .await
    .unwrap();
    server.await.unwrap();
    assert_eq!(r.verdict, Verdict::Deny);
    assert_eq!(r.exit_code(), 1);
    let w = r.what_if.as_ref().unwrap();
    assert_eq!(w.nodes, vec!["node-b"]);
    assert_eq!((w.denied, w.warned), (2, 0));
    let pod = &r.results[1];
    assert_eq!(pod.verdict, Verdict::Deny);
    assert_eq!(pod.reasons[0].code.to_string(), "OldReaderNewRules");
    assert_eq!(
        pod.reasons[0].other_version,
        Some("1.8.11".parse().unwrap())
    );
    assert!(
        pod.reasons[0]
            .message
            .starts_with("what-if [pool=old: os=debian-13]: ")
    );
    // node-a's finding holds today: it is not labelled a prediction.
    let ds = &r.results[0];
    for reason in &ds.reasons {
        let predicted = reason.message.starts_with("what-if [");
        assert_eq!(
            predicted,
            reason.nodes.contains(&"node-b".to_string()),
            "{reason:?}"
        );
    }
    for format in [Format::Text, Format::Github, Format::Junit, Format::Sarif] {
        let out = nfguard::check::cli::render(&r, format, 10).unwrap();
        assert!(
            out.contains("what-if [pool=old: os=debian-13]"),
            "{format:?}: {out}"
        );
    }
    let text = nfguard::check::cli::render(&r, Format::Text, 10).unwrap();
    assert!(
        text.contains("what-if: 2 workloads would be denied, 0 warned on 1 assumed node (pool=old: os=debian-13)"),
        "{text}"
    );
}

#[tokio::test]
async fn what_if_input_errors_are_clear_and_read_nothing() {
    let env = || Env {
        lookup: Some(Arc::new(Fixed) as Arc<dyn ImageLookup>),
        client: None,
    };
    // Refused before any request: the mock client is not even given.
    let err = execute(&whatif_args(&["iptabels=1.8.11"], None), env())
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("unknown key \"iptabels\""),
        "{err:#}"
    );
    let err = execute(&whatif_args(&["os=trixie"], Some("pool in (old")), env())
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("unclosed"), "{err:#}");
    // --running needs a cluster.
    let mut a = whatif_args(&[], None);
    a.cluster = false;
    a.files = vec!["x.yaml".into()];
    let err = execute(&a, env()).await.unwrap_err();
    assert!(
        format!("{err:#}").contains("--running reads what runs in a cluster"),
        "{err:#}"
    );

    // A selector matching nothing is an error, not an empty prediction.
    let (client, handle) = mock();
    let server = serve(handle, cluster_with_running());
    let err = execute(
        &whatif_args(&["os=trixie"], Some("pool=none")),
        Env {
            lookup: Some(Arc::new(Fixed) as Arc<dyn ImageLookup>),
            client: Some(client),
        },
    )
    .await
    .unwrap_err();
    server.await.unwrap();
    assert!(format!("{err:#}").contains("matches no node"), "{err:#}");
}
