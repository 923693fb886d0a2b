//! The binary installed as `kubectl-nfguard` (a copy and a symlink, as
//! kubectl finds plugins): help and usage name `kubectl nfguard`, `status`
//! reads a cluster chosen with `--kubeconfig` / `--context` (a small HTTP
//! API server on loopback answers the two list calls), `check` defaults to
//! the cluster in plugin mode, and an unreachable API server is a one-line
//! error naming it, exit 2.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

fn nfguard() -> &'static str {
    env!("CARGO_BIN_EXE_nfguard")
}

/// A directory with the binary as `kubectl-nfguard`: copied, or symlinked.
fn install(dir: &Path, symlink: bool) -> PathBuf {
    let plugin = dir.join("kubectl-nfguard");
    if symlink {
        std::os::unix::fs::symlink(nfguard(), &plugin).unwrap();
    } else {
        std::fs::copy(nfguard(), &plugin).unwrap();
    }
    plugin
}

/// A command that sees nothing of the machine's own kube setup.
fn cmd(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    for var in [
        "KUBECONFIG",
        "NFGUARD_KUBECONFIG",
        "NFGUARD_CONTEXT",
        "NFGUARD_CLUSTER",
        "NFGUARD_LOG",
        "KUBERNETES_SERVICE_HOST",
    ] {
        c.env_remove(var);
    }
    c.env("HOME", "/nonexistent");
    c
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A plain-HTTP API server on loopback: GET paths answered from `routes`
/// (query ignored), anything else 404; records the paths asked for.
struct FakeApi {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

fn serve_one(mut stream: TcpStream, routes: &[(String, String)], seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
        line.clear();
    }
    let target = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    let path = target.split('?').next().unwrap_or("").to_string();
    seen.lock().unwrap().push(path.clone());
    let (status, body) = match routes.iter().find(|(p, _)| *p == path) {
        Some((_, body)) => ("200 OK", body.clone()),
        None => ("404 Not Found", r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#.to_string()),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn fake_api(routes: Vec<(String, String)>) -> FakeApi {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            serve_one(stream, &routes, &log);
        }
    });
    FakeApi { url, seen }
}

fn cluster_routes() -> Vec<(String, String)> {
    let profile = |name: &str, backend: &str| {
        serde_json::json!({"apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
            "metadata": {"name": name}, "spec": {"nodeName": name},
            "status": {"iptables": {"version": "1.8.9", "backend": backend, "evidence": []},
                       "activeBackend": backend, "lastProbeTime": "2020-01-01T00:00:00Z"}})
    };
    let node = |name: &str| serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
    vec![
        (
            "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles".into(),
            serde_json::json!({"apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfileList", "metadata": {},
                "items": [profile("e2e-nft", "nft"), profile("e2e-legacy", "legacy")]})
            .to_string(),
        ),
        (
            "/api/v1/nodes".into(),
            serde_json::json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                "items": [node("e2e-nft"), node("e2e-legacy")]})
            .to_string(),
        ),
        // For `check`, which also lists policies and namespaces.
        (
            "/apis/nfguard.io/v1alpha1/netfilterpolicies".into(),
            r#"{"apiVersion":"nfguard.io/v1alpha1","kind":"NetfilterPolicyList","metadata":{},"items":[]}"#.into(),
        ),
        (
            "/api/v1/namespaces".into(),
            r#"{"apiVersion":"v1","kind":"NamespaceList","metadata":{},"items":[]}"#.into(),
        ),
    ]
}

/// A kubeconfig whose current context `dead` points at a closed loopback
/// port and whose context `live` points at `live_url`.
fn kubeconfig(dir: &Path, live_url: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: dead\n\
             clusters:\n- name: dead\n  cluster: {{server: 'http://127.0.0.1:1'}}\n- name: live\n  cluster: {{server: '{live_url}'}}\n\
             users:\n- name: u\n  user: {{token: t}}\n\
             contexts:\n- name: dead\n  context: {{cluster: dead, user: u}}\n- name: live\n  context: {{cluster: live, user: u}}\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn help_names_kubectl_nfguard_and_hides_the_in_cluster_components() {
    let dir = tempfile::tempdir().unwrap();
    for symlink in [false, true] {
        let sub = dir.path().join(if symlink { "link" } else { "copy" });
        std::fs::create_dir(&sub).unwrap();
        let plugin = install(&sub, symlink);
        let out = run(cmd(&plugin).arg("--help"));
        let help = text(&out.stdout);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            help.contains("Usage: kubectl nfguard [OPTIONS] <COMMAND>"),
            "{help}"
        );
        for shown in ["inspect", "check", "status"] {
            assert!(
                help.contains(&format!("\n  {shown} ")),
                "{shown} missing: {help}"
            );
        }
        for hidden in ["reporter", "controller", "webhook"] {
            assert!(
                !help.contains(&format!("\n  {hidden} ")),
                "{hidden} shown: {help}"
            );
        }
        let out = run(cmd(&plugin).args(["status", "--help"]));
        assert!(text(&out.stdout).contains("Usage: kubectl nfguard status [OPTIONS]"));
        // A usage error names the plugin too.
        let out = run(cmd(&plugin).arg("nonsense"));
        assert_eq!(out.status.code(), Some(2));
        assert!(
            text(&out.stderr).contains("kubectl nfguard"),
            "{}",
            text(&out.stderr)
        );
    }
    // As itself, the binary keeps its own name and lists every component.
    let out = run(cmd(nfguard()).arg("--help"));
    let help = text(&out.stdout);
    assert!(
        help.contains("Usage: nfguard [OPTIONS] <COMMAND>") && help.contains("\n  reporter "),
        "{help}"
    );
}

#[test]
fn status_reads_the_cluster_of_the_chosen_context() {
    let api = fake_api(cluster_routes());
    let dir = tempfile::tempdir().unwrap();
    let plugin = install(dir.path(), true);
    let kc = kubeconfig(dir.path(), &api.url);

    let out = run(cmd(&plugin)
        .args(["status", "--context", "live", "--kubeconfig"])
        .arg(&kc));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][..3], ["NODE", "BACKEND", "IPTABLES"]);
    assert_eq!(rows[1][..3], ["e2e-legacy", "legacy", "1.8.9"]);
    assert_eq!(rows[2][..3], ["e2e-nft", "nft", "1.8.9"]);
    assert_eq!(
        rows[1].last(),
        Some(&"(stale)"),
        "a heartbeat from 2020 is stale"
    );
    assert_eq!(
        table.lines().last(),
        Some("2 nodes, 0 degraded, 2 stale, 0 without profile")
    );
    assert_eq!(
        *api.seen.lock().unwrap(),
        [
            "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles",
            "/api/v1/nodes",
            // Neither report API is served here: the section says so.
            "/apis/openreports.io/v1alpha1",
            "/apis/wgpolicyk8s.io/v1alpha2"
        ]
    );
    assert!(table.contains("\npolicy reports: not served"), "{table}");

    // KUBECONFIG (kubectl's variable) works the same; -o json is a document.
    let out = run(cmd(&plugin)
        .args(["status", "--context", "live", "-o", "json"])
        .env("KUBECONFIG", &kc));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let backends: Vec<(&str, &str)> = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap(), n["backend"].as_str().unwrap()))
        .collect();
    assert_eq!(backends, [("e2e-legacy", "legacy"), ("e2e-nft", "nft")]);
    assert_eq!(doc["summary"]["nodes"], 2);
}

#[test]
fn unreachable_api_server_is_one_line_naming_it_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = install(dir.path(), false);
    let kc = kubeconfig(dir.path(), "http://127.0.0.1:2");
    // The current context (`dead`), then an explicit one.
    for (args, server) in [
        (vec![], "http://127.0.0.1:1"),
        (vec!["--context", "live"], "http://127.0.0.1:2"),
    ] {
        let out = run(cmd(&plugin)
            .arg("status")
            .args(&args)
            .arg("--kubeconfig")
            .arg(&kc));
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("nfguard: cannot reach the API server {server}: ")),
            "{err}"
        );
    }
    // kubectl's duration syntax; a bad one is a usage error.
    let out = run(cmd(&plugin)
        .args(["status", "--request-timeout", "2m", "--kubeconfig"])
        .arg(&kc));
    assert!(
        text(&out.stderr).contains("cannot reach the API server"),
        "{}",
        text(&out.stderr)
    );
    let out = run(cmd(&plugin).args(["status", "--request-timeout", "soon"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a duration such as 30, 30s, 2m or 1h"));
    // An unknown context is an error too, not a fallback.
    let out = run(cmd(&plugin)
        .args(["status", "--context", "nope", "--kubeconfig"])
        .arg(&kc));
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(
        err.matches("context: nope").count(),
        1,
        "named once, not repeated by the cause chain: {err}"
    );
}

#[test]
fn plugin_check_reads_the_current_context_unless_given_profiles() {
    let api = fake_api(cluster_routes());
    let dir = tempfile::tempdir().unwrap();
    let plugin = install(dir.path(), true);
    let kc = kubeconfig(dir.path(), &api.url);
    let manifest = dir.path().join("pod.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec:\n  containers:\n  - {name: c, image: app:1}\n",
    )
    .unwrap();

    // Plugin mode, no --profiles: the current context (`dead`) is read.
    let out = run(cmd(&plugin)
        .arg("check")
        .arg("-f")
        .arg(&manifest)
        .env("KUBECONFIG", &kc));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("nodenetfilterprofiles"),
        "{}",
        text(&out.stderr)
    );

    // As `nfguard`, the same command wants file facts.
    let out = run(cmd(nfguard())
        .arg("check")
        .arg("-f")
        .arg(&manifest)
        .env("KUBECONFIG", &kc));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no node profiles"),
        "{}",
        text(&out.stderr)
    );

    // --context picks the live cluster: its facts are listed, and a pod
    // without host networking is allowed.
    let out = run(cmd(&plugin)
        .arg("check")
        .arg("-f")
        .arg(&manifest)
        .args(["--context", "live", "-o", "json"])
        .env("KUBECONFIG", &kc));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verdict"], "allow");
    let seen = api.seen.lock().unwrap().clone();
    assert!(
        seen.contains(&"/apis/nfguard.io/v1alpha1/nodenetfilterprofiles".to_string())
            && seen.contains(&"/api/v1/namespaces".to_string()),
        "{seen:?}"
    );
}

/// A loopback listener that accepts connections and never answers: an API
/// server that hangs. Its connections are kept open until the test ends.
fn silent_api() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    url
}

#[test]
fn status_over_several_contexts_is_one_table_and_a_silent_cluster_is_a_row() {
    let api = fake_api(cluster_routes());
    let silent = silent_api();
    let dir = tempfile::tempdir().unwrap();
    let plugin = install(dir.path(), true);
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: live\n\
             clusters:\n- name: live\n  cluster: {{server: '{}'}}\n\
             - name: silent\n  cluster: {{server: '{silent}'}}\n\
             - name: dead\n  cluster: {{server: 'http://127.0.0.1:1'}}\n\
             users:\n- name: u\n  user: {{token: t}}\n\
             contexts:\n- name: live\n  context: {{cluster: live, user: u}}\n\
             - name: silent\n  context: {{cluster: silent, user: u}}\n\
             - name: dead\n  context: {{cluster: dead, user: u}}\n",
            api.url
        ),
    )
    .unwrap();

    // --all-contexts: every context, in the kubeconfig's order; the silent
    // one is cut at the request timeout and shown, exit 2.
    let out = run(cmd(&plugin)
        .args([
            "status",
            "--all-contexts",
            "--request-timeout",
            "2s",
            "--kubeconfig",
        ])
        .arg(&kc));
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{table}{}", text(&out.stderr));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][..3], ["CLUSTER", "NODE", "BACKEND"]);
    assert_eq!(rows[1][..3], ["live", "e2e-legacy", "legacy"]);
    assert_eq!(rows[2][..3], ["live", "e2e-nft", "nft"]);
    assert_eq!(rows[3][..2], ["silent", "-"]);
    assert!(
        table
            .lines()
            .nth(3)
            .unwrap()
            .ends_with("no status: no answer within 2s"),
        "{table}"
    );
    assert_eq!(rows[4][..2], ["dead", "-"]);
    assert!(
        table
            .lines()
            .nth(4)
            .unwrap()
            .contains("no status: cannot reach the API server http://127.0.0.1:1"),
        "{table}"
    );
    assert_eq!(
        table.lines().last(),
        Some(
            "3 clusters (1 answered, 2 without status): 2 nodes, 0 degraded, 2 stale, 0 without profile"
        )
    );

    // --context repeated, as JSON: the clusters asked for, in that order.
    let out = run(cmd(&plugin)
        .args([
            "status",
            "--context",
            "dead",
            "--context",
            "live",
            "-o",
            "json",
        ])
        .env("KUBECONFIG", &kc));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let clusters = doc["clusters"].as_array().unwrap();
    assert_eq!(clusters[0]["context"], "dead");
    assert!(clusters[0]["status"].is_null() && clusters[0]["error"].is_string());
    assert_eq!(clusters[1]["context"], "live");
    assert_eq!(clusters[1]["status"]["summary"]["nodes"], 2);
    assert_eq!(
        (doc["summary"]["nodes"].clone(), doc["failed"].clone()),
        (2.into(), 1.into())
    );

    // The what-if reads one cluster.
    let out = run(cmd(&plugin)
        .args([
            "status",
            "--context",
            "dead,live",
            "--assume",
            "iptables=1.8.11/nft",
        ])
        .env("KUBECONFIG", &kc));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("the what-if (--assume-nodes, --assume) reads one cluster"),
        "{}",
        text(&out.stderr)
    );
}
