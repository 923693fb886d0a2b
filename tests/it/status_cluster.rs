//! `nfguard status` against kube's mock client: which requests it sends
//! (method and path; not the exact query string), that it follows
//! `continue` tokens, and what each kind of API failure reads like.

use http::{Method, Request, Response};
use kube::client::Body;
use nfguard::status::cli::report_from;
use nfguard::status::fetch::{FetchError, list};
use serde_json::json;
use std::time::Duration;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

const PROFILES: &str = "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles";
const NODES: &str = "/api/v1/nodes";
const SERVER: &str = "https://api.example:6443";
const OPENREPORTS: &str = "/apis/openreports.io/v1alpha1";
const WGPOLICY: &str = "/apis/wgpolicyk8s.io/v1alpha2";
const POLICYREPORTS: &str = "/apis/wgpolicyk8s.io/v1alpha2/policyreports";

fn not_found() -> serde_json::Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404})
}

fn wgpolicy_resources() -> serde_json::Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "wgpolicyk8s.io/v1alpha2",
           "resources": [{"name": "policyreports", "singularName": "policyreport", "namespaced": true,
                          "kind": "PolicyReport", "verbs": ["list"]}]})
}

fn mock() -> (kube::Client, Handle) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(svc, "default"), handle)
}

fn page(
    kind: &str,
    api_version: &str,
    items: serde_json::Value,
    cont: Option<&str>,
) -> serde_json::Value {
    json!({"apiVersion": api_version, "kind": format!("{kind}List"),
           "metadata": {"continue": cont.unwrap_or("")}, "items": items})
}

fn profile(name: &str, backend: &str) -> serde_json::Value {
    json!({"apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
           "metadata": {"name": name}, "spec": {"nodeName": name},
           "status": {"iptables": {"version": "1.8.9", "backend": backend, "evidence": []},
                      "activeBackend": backend}})
}

fn node(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
}

fn respond(
    send: tower_test::mock::SendResponse<Response<Body>>,
    status: u16,
    body: &serde_json::Value,
) {
    send.send_response(
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap(),
    );
}

/// Answer the expected requests in order: (path, expected continue token, status, body).
fn serve(
    mut handle: Handle,
    expected: Vec<(&'static str, Option<&'static str>, u16, serde_json::Value)>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for (path, token, status, body) in expected {
            let (req, send) = handle.next_request().await.expect("request expected");
            assert_eq!(req.method(), Method::GET);
            assert_eq!(req.uri().path(), path);
            let query = req.uri().query().unwrap_or_default().to_string();
            match token {
                Some(t) => assert!(query.contains(&format!("continue={t}")), "{query}"),
                None => assert!(!query.contains("continue="), "{query}"),
            }
            respond(send, status, &body);
        }
    })
}

#[tokio::test]
async fn lists_profiles_then_nodes_following_continue_tokens() {
    let (client, handle) = mock();
    let server = serve(
        handle,
        vec![
            (
                PROFILES,
                None,
                200,
                page(
                    "NodeNetfilterProfile",
                    "nfguard.io/v1alpha1",
                    json!([profile("n2", "legacy")]),
                    Some("p2"),
                ),
            ),
            (
                PROFILES,
                Some("p2"),
                200,
                page(
                    "NodeNetfilterProfile",
                    "nfguard.io/v1alpha1",
                    json!([profile("n1", "nft")]),
                    None,
                ),
            ),
            (
                NODES,
                None,
                200,
                page(
                    "Node",
                    "v1",
                    json!([node("n2"), node("n1"), node("n3")]),
                    None,
                ),
            ),
            // Then the report APIs' discovery: the first served one is read.
            (OPENREPORTS, None, 404, not_found()),
            (WGPOLICY, None, 200, wgpolicy_resources()),
            (
                POLICYREPORTS,
                None,
                200,
                page(
                    "PolicyReport",
                    "wgpolicyk8s.io/v1alpha2",
                    json!([
                        {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                         "metadata": {"name": "nfguard-daemonset-cni", "namespace": "kube-system"},
                         "summary": {"pass": 2, "fail": 1, "warn": 0, "error": 0, "skip": 0}},
                        {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                         "metadata": {"name": "nfguard-deployment-web", "namespace": "web"},
                         "summary": {"pass": 0, "fail": 0, "warn": 3, "error": 0, "skip": 0}}
                    ]),
                    None,
                ),
            ),
        ],
    );
    let report = report_from(&client, SERVER, Some(Duration::from_secs(5)))
        .await
        .unwrap();
    server.await.unwrap();
    let rows: Vec<(String, Option<String>)> = report
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.backend.map(|b| b.to_string())))
        .collect();
    assert_eq!(
        rows,
        [
            ("n1".to_string(), Some("nft".to_string())),
            ("n2".into(), Some("legacy".into())),
            ("n3".into(), None)
        ]
    );
    assert_eq!(report.summary.without_profile, 1);
    assert_eq!(
        nfguard::status::reports::reports_line(&report.reports),
        "policy reports (wgpolicyk8s.io/v1alpha2): 2 reports; kube-system 1 fail, 0 warn; web 0 fail, 3 warn"
    );
}

#[tokio::test]
async fn missing_crd_says_so_and_names_the_server() {
    let (client, handle) = mock();
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404});
    let server = serve(handle, vec![(PROFILES, None, 404, status)]);
    let err = list(&client, SERVER).await.unwrap_err();
    server.await.unwrap();
    assert!(matches!(err, FetchError::NotServed { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(SERVER)
            && text.contains("nodenetfilterprofiles.nfguard.io")
            && text.contains("CRDs"),
        "{text}"
    );
}

#[tokio::test]
async fn forbidden_carries_the_api_servers_message() {
    let (client, handle) = mock();
    let profiles = page(
        "NodeNetfilterProfile",
        "nfguard.io/v1alpha1",
        json!([]),
        None,
    );
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "nodes is forbidden: User \"dev\" cannot list resource \"nodes\"",
                        "reason": "Forbidden", "code": 403});
    let server = serve(
        handle,
        vec![(PROFILES, None, 200, profiles), (NODES, None, 403, status)],
    );
    let err = list(&client, SERVER).await.unwrap_err();
    server.await.unwrap();
    assert_eq!(
        err.to_string(),
        "listing nodes from https://api.example:6443: 403 Forbidden: nodes is forbidden: User \"dev\" cannot list resource \"nodes\""
    );
}

#[tokio::test]
async fn a_silent_server_times_out_with_a_clear_error() {
    let (client, _handle) = mock(); // never answers
    let err = report_from(&client, SERVER, Some(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "no answer from the API server https://api.example:6443 within 1s"
    );
}

/// `nfguard status ARGS...` as clap parses it (flags and their defaults).
fn status_args(extra: &[&str]) -> nfguard::status::cli::Args {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: nfguard::status::cli::Args,
    }
    let argv = std::iter::once("status").chain(extra.iter().copied());
    <Cli as clap::Parser>::try_parse_from(argv).unwrap().args
}

fn empty_report() -> nfguard::status::StatusReport {
    nfguard::status::build_report(&[], &[], k8s_openapi::jiff::Timestamp::now())
}

#[tokio::test]
async fn without_assume_the_what_if_sends_no_request() {
    let (client, mut handle) = mock();
    let mut report = empty_report();
    let args = status_args(&[]);
    // A request would wait for an answer no one sends: the timeout fails it.
    let adding = nfguard::status::cli::add_what_if(&mut report, &client, &args, None, None, None);
    tokio::time::timeout(Duration::from_secs(5), adding)
        .await
        .expect("no request waits for an answer")
        .unwrap();
    drop(client);
    assert!(handle.next_request().await.is_none(), "a request was sent");
    assert!(report.what_if.is_none());
}

/// One complete page of `items` answered at `path`.
fn whole(
    path: &'static str,
    kind: &str,
    api_version: &str,
    items: serde_json::Value,
) -> (&'static str, Option<&'static str>, u16, serde_json::Value) {
    (path, None, 200, page(kind, api_version, items, None))
}

/// A node whose host writes its nft rules with iptables 1.8.7.
fn host_187(name: &str) -> serde_json::Value {
    json!({"apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
           "metadata": {"name": name}, "spec": {"nodeName": name},
           "status": {"iptables": {"version": "1.8.7", "backend": "nft", "evidence": []},
                      "activeBackend": "nft",
                      "backends": {"nft": {"tables": 3, "chains": 9, "rules": 20, "hintChain": true, "canaryChain": true},
                                   "legacy": {"tables": 0, "chains": 0, "rules": 0, "hintChain": false, "canaryChain": false}}}})
}

#[tokio::test]
async fn assume_reads_what_check_running_reads_and_adds_the_section() {
    use nfguard::compat::evaluate::ImageResolutions;
    use nfguard::facts::{Backend, ImageProfile, IptablesFacts, Platform};
    // An iptables-nft 1.8.7 image (the DaemonSet's); every other is unknown.
    let mut known = ImageResolutions::new();
    known.insert_profile(
        "kr:1.8.7",
        &Platform::linux_amd64(),
        ImageProfile {
            image: "kr:1.8.7".into(),
            digest: "sha256:0f".into(),
            platform: "linux/amd64".into(),
            iptables: Some(IptablesFacts {
                version: Some("1.8.7".parse().unwrap()),
                backend: Some(Backend::Nft),
                ..Default::default()
            }),
            nftables: None,
        },
    );
    let images = std::sync::Arc::new(nfguard::judgement::FixedImages(known));
    let labelled = |name: &str, pool: &str| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
               "labels": {"pool": pool, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}})
    };
    let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kr", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "kr"}}, "template": {
            "metadata": {"labels": {"app": "kr"}},
            "spec": {"hostNetwork": true, "containers": [{"name": "kr", "image": "kr:1.8.7",
                     "securityContext": {"privileged": true}}]}}}});
    let (client, handle) = mock();
    let server = serve(
        handle,
        vec![
            whole(
                PROFILES,
                "NodeNetfilterProfile",
                "nfguard.io/v1alpha1",
                json!([host_187("node-a"), host_187("node-b")]),
            ),
            whole(
                NODES,
                "Node",
                "v1",
                json!([labelled("node-a", "old"), labelled("node-b", "new")]),
            ),
            whole(
                "/apis/nfguard.io/v1alpha1/netfilterpolicies",
                "NetfilterPolicy",
                "nfguard.io/v1alpha1",
                json!([]),
            ),
            whole("/api/v1/namespaces", "Namespace", "v1", json!([])),
            whole(
                "/apis/apps/v1/daemonsets",
                "DaemonSet",
                "apps/v1",
                json!([ds]),
            ),
            whole("/api/v1/pods", "Pod", "v1", json!([])),
        ],
    );
    let mut report = empty_report();
    // Today both hosts run 1.8.7, as the DaemonSet's image; the old pool
    // moved to Debian trixie writes with 1.8.11, beyond the 1.8.7 writer.
    let args = status_args(&["--assume-nodes", "pool=old", "--assume", "os=debian-13"]);
    nfguard::status::cli::add_what_if(
        &mut report,
        &client,
        &args,
        Some(Duration::from_secs(10)),
        Some(images),
        None,
    )
    .await
    .unwrap();
    server.await.unwrap();
    let w = report.what_if.as_ref().expect("a what-if section");
    assert_eq!(w.assumption.nodes, ["node-a"]);
    assert_eq!(w.judged, 1);
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(
        v["whatIf"]["workloads"],
        json!([{"object": "DaemonSet/kube-system/kr", "today": "allow", "assumed": "deny",
                "codes": ["OldReaderNewRules"], "nodes": ["node-a"], "moreNodes": 0}]),
        "{v}"
    );
    assert_eq!(v["whatIf"]["selector"], "pool=old");
}

/// `status --assume`: the table and the what-if judge one snapshot, so
/// profiles and nodes are listed once (then the reports' discovery, then
/// what only the what-if reads), and nothing after that.
#[tokio::test]
async fn status_with_assume_lists_profiles_and_nodes_once() {
    let images = std::sync::Arc::new(nfguard::judgement::FixedImages(
        nfguard::compat::evaluate::ImageResolutions::new(),
    ));
    let (client, mut handle) = mock();
    let server = tokio::spawn(async move {
        let answers: Vec<(&str, serde_json::Value)> = vec![
            (
                PROFILES,
                page(
                    "NodeNetfilterProfile",
                    "nfguard.io/v1alpha1",
                    json!([host_187("node-a")]),
                    None,
                ),
            ),
            (NODES, page("Node", "v1", json!([node("node-a")]), None)),
            (OPENREPORTS, not_found()),
            (WGPOLICY, not_found()),
            (
                "/apis/nfguard.io/v1alpha1/netfilterpolicies",
                page("NetfilterPolicy", "nfguard.io/v1alpha1", json!([]), None),
            ),
            (
                "/api/v1/namespaces",
                page("Namespace", "v1", json!([]), None),
            ),
            (
                "/apis/apps/v1/daemonsets",
                page("DaemonSet", "apps/v1", json!([]), None),
            ),
            ("/api/v1/pods", page("Pod", "v1", json!([]), None)),
        ];
        for (path, body) in answers {
            let (req, send) = handle.next_request().await.expect("request expected");
            assert_eq!(req.uri().path(), path, "requests out of order or repeated");
            let status = if body["code"] == 404 { 404 } else { 200 };
            respond(send, status, &body);
        }
        handle
    });
    let args = status_args(&["--assume", "os=debian-13"]);
    let (mut report, listed) =
        nfguard::status::cli::listed_report_from(&client, SERVER, Some(Duration::from_secs(10)))
            .await
            .unwrap();
    nfguard::status::cli::add_what_if(
        &mut report,
        &client,
        &args,
        Some(Duration::from_secs(10)),
        Some(images),
        Some(listed),
    )
    .await
    .unwrap();
    let mut handle = server.await.unwrap();
    drop(client);
    assert!(
        handle.next_request().await.is_none(),
        "a request after the what-if's own lists"
    );
    assert_eq!(report.summary.nodes, 1);
    assert!(report.what_if.is_some());
}
