//! `nfguard check` with real parts only: node profiles captured by
//! `nfguard inspect node --as-profile` from network namespaces whose rules
//! the real Debian iptables releases wrote, and images holding the real
//! releases in a real registry (Debian's docker-registry) on loopback.
//! Needs root (the tests are `#[ignore]`d with that reason; scripts/test.sh
//! runs them) and the fixture releases.

use crate::support::images;
use crate::support::netns;
use crate::support::registry;

use images::{Alt, Compression, ImageConfig, build_layer, debian_iptables, push_image};
use netns::Netns;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use netns::{kube_firewall, kubelet_chains};

/// `nfguard inspect node --as-profile NAME` inside `ns` (YAML) into `dir/NAME.yaml`.
fn capture(ns: &Netns, host_root: &Path, name: &str, dir: &Path) {
    let out = netns::check(
        ns.nfguard(&[
            "inspect",
            "node",
            "--host-root",
            host_root.to_str().unwrap(),
            "--as-profile",
            name,
        ]),
        "inspect node --as-profile",
    );
    std::fs::write(dir.join(format!("{name}.yaml")), &out.stdout).unwrap();
}

struct World {
    dir: tempfile::TempDir,
    profiles: PathBuf,
    nodes: PathBuf,
    registry: registry::Registry,
    old_nft: String,
    wrapper: String,
    legacy: String,
    new_nft: String,
}

/// node-a: nft rules written by the real 1.8.9 (kubelet chains + the mark
/// rule), host iptables 1.8.9 nft. node-b: legacy rules by 1.8.9 legacy,
/// host iptables 1.8.9 legacy. Images: 1.8.7 nft (the incident), 1.8.9
/// wrapper, 1.8.9 legacy, 1.8.11 nft.
fn world(test: &str) -> World {
    let ns_a = Netns::new(&format!("{test}a"));
    let ns_b = Netns::new(&format!("{test}b"));
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("profiles");
    std::fs::create_dir(&profiles).unwrap();

    kubelet_chains(&ns_a, "1.8.9", "iptables-nft");
    kube_firewall(&ns_a, "1.8.9", "iptables-nft");
    let root_a = netns::installed_host_root("1.8.9", "nft");
    capture(&ns_a, root_a.path(), "node-a", &profiles);

    kubelet_chains(&ns_b, "1.8.9", "iptables-legacy");
    kube_firewall(&ns_b, "1.8.9", "iptables-legacy");
    let root_b = netns::installed_host_root("1.8.9", "legacy");
    capture(&ns_b, root_b.path(), "node-b", &profiles);
    drop((ns_a, ns_b));

    let nodes = dir.path().join("nodes.yaml");
    std::fs::write(
        &nodes,
        "apiVersion: v1\nkind: List\nitems:\n\
         - {apiVersion: v1, kind: Node, metadata: {name: node-a, labels: {kubernetes.io/os: linux, kubernetes.io/arch: amd64, nfguard.io/iptables-backend: nft}}}\n\
         - {apiVersion: v1, kind: Node, metadata: {name: node-b, labels: {kubernetes.io/os: linux, kubernetes.io/arch: amd64, nfguard.io/iptables-backend: legacy}}}\n",
    )
    .unwrap();

    let registry = registry::Registry::start();
    let host = registry.host();
    let work = dir.path().join("layers");
    std::fs::create_dir(&work).unwrap();
    let push = |repo: &str, version: &str, alt: Alt| {
        let layer = build_layer(&work, &debian_iptables(version, alt), Compression::Gzip);
        push_image(&host, repo, "v1", &[layer], &ImageConfig::default()).reference
    };
    World {
        old_nft: push("kube-router-old", "1.8.7", Alt::Nft),
        wrapper: push("kube-proxy-wrapper", "1.8.9", Alt::Wrapper),
        legacy: push("flannel-legacy", "1.8.9", Alt::Legacy),
        new_nft: push("kube-router-new", "1.8.11", Alt::Nft),
        registry,
        profiles,
        nodes,
        dir,
    }
}

fn daemonset(name: &str, image: &str, host_network: bool, caps: &str, extra: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: {name}\n  namespace: kube-system\n{extra}spec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      hostNetwork: {host_network}\n      containers:\n      - name: {name}\n        image: \"{image}\"\n        securityContext: {{capabilities: {{add: [{caps}]}}}}\n"
    )
}

/// Run `nfguard check` (outside any namespace) and return (exit code, JSON).
fn check(w: &World, manifest: &str, extra: &[&str]) -> (i32, Value) {
    let m = w.dir.path().join("m.yaml");
    std::fs::write(&m, manifest).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nfguard"))
        .args(["check", "-o", "json", "-f"])
        .arg(&m)
        .arg("--profiles")
        .arg(&w.profiles)
        .arg("--insecure-registry")
        .arg(w.registry.host())
        .args(extra)
        .args(if extra.contains(&"--timeout") {
            &[][..]
        } else {
            &["--timeout", "20"][..]
        })
        .env_remove("NFGUARD_INSECURE_REGISTRIES")
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}), exit {code}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, v)
}

fn reasons(v: &Value) -> Vec<Value> {
    v["results"][0]["reasons"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn find(v: &Value, code: &str) -> Value {
    reasons(v)
        .into_iter()
        .find(|r| r["code"] == code)
        .unwrap_or_else(|| panic!("no {code} in {v:#}"))
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn real_profiles_and_images_give_the_scenario_verdicts() {
    let w = world("chk");

    // The captured profiles carry what the decision needs.
    let a: nfguard::api::NodeNetfilterProfile =
        serde_yaml::from_slice(&std::fs::read(w.profiles.join("node-a.yaml")).unwrap()).unwrap();
    let sa = a.status.unwrap();
    assert_eq!(
        sa.min_reader_version.map(|v| v.to_string()).as_deref(),
        Some("1.8.8")
    );
    assert_eq!(
        sa.iptables
            .unwrap()
            .version
            .map(|v| v.to_string())
            .as_deref(),
        Some("1.8.9")
    );

    // 1. The incident: a kube-router bundling 1.8.7 nft against node-a's 1.8.9 rules.
    let (code, v) = check(
        &w,
        &daemonset("kube-router", &w.old_nft, true, "NET_ADMIN", ""),
        &[],
    );
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["verdict"], "deny");
    assert_eq!(
        v["results"][0]["object"],
        "DaemonSet/kube-system/kube-router"
    );
    let r = find(&v, "OldReaderNewRules");
    assert_eq!(r["node"], "node-a");
    assert_eq!(r["imageVersion"], "1.8.7");
    assert_eq!(r["minReaderVersion"], "1.8.8");
    assert!(r["message"].as_str().unwrap().contains("mark"), "{r:#}");
    // And the nft image on the legacy node-b splits the rule sets.
    assert_eq!(find(&v, "BackendMismatch")["node"], "node-b");

    // The same as a human reads it in a CI log.
    let m = w.dir.path().join("incident.yaml");
    std::fs::write(
        &m,
        daemonset("kube-router", &w.old_nft, true, "NET_ADMIN", ""),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nfguard"))
        .args(["check", "--timeout", "20", "-f"])
        .arg(&m)
        .arg("--profiles")
        .arg(&w.profiles)
        .arg("--insecure-registry")
        .arg(w.registry.host())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text.starts_with("DENY  DaemonSet/kube-system/kube-router (2 candidate nodes"),
        "{text}"
    );
    assert!(text.contains("critical [OldReaderNewRules]"), "{text}");
    assert!(text.trim_end().ends_with("verdict: deny"), "{text}");

    // 2. A wrapper image follows each node's marker chains: allow.
    let (code, v) = check(
        &w,
        &daemonset("kube-proxy", &w.wrapper, true, "NET_ADMIN", ""),
        &[],
    );
    assert_eq!((code, v["verdict"].as_str()), (0, Some("allow")), "{v:#}");

    // 3. A legacy image on the nft node: deny naming node-a and the remedy label.
    let (code, v) = check(
        &w,
        &daemonset("flannel", &w.legacy, true, "NET_ADMIN", ""),
        &[],
    );
    assert_eq!(code, 1, "{v:#}");
    let r = find(&v, "BackendMismatch");
    assert_eq!(r["nodes"], serde_json::json!(["node-a"]));
    assert!(
        r["remedy"]
            .as_str()
            .unwrap()
            .contains("nfguard.io/iptables-backend=legacy")
    );

    // 4. A nodeSelector that keeps it on the legacy node: allow.
    let m = daemonset("flannel", &w.legacy, true, "NET_ADMIN", "").replace(
        "      hostNetwork",
        "      nodeSelector: {nfguard.io/iptables-backend: legacy}\n      hostNetwork",
    );
    let (code, v) = check(&w, &m, &["--nodes", w.nodes.to_str().unwrap()]);
    assert_eq!((code, v["verdict"].as_str()), (0, Some("allow")), "{v:#}");
    assert_eq!(v["results"][0]["candidateNodes"], 1);

    // 5. No hostNetwork, no NET_ADMIN: allow, nothing judged.
    let (code, v) = check(&w, &daemonset("app", &w.old_nft, false, "", ""), &[]);
    assert_eq!((code, v["verdict"].as_str()), (0, Some("allow")), "{v:#}");
    assert_eq!(v["results"][0]["containersInScope"], 0);

    // A newer nft image than every writer on node-a: safe there (node-b still legacy).
    let (_, v) = check(
        &w,
        &daemonset("kr-new", &w.new_nft, true, "NET_ADMIN", ""),
        &[],
    );
    assert!(reasons(&v).iter().all(|r| r["node"] != "node-a"), "{v:#}");

    // 6. An exempt annotation counts only where a policy allows it: ignored
    // (and said) without one; allowed with the reason shown under a policy
    // whose exemptionNamespaceSelector selects kube-system.
    let ann = "  annotations: {nfguard.io/exempt: \"pinned until NET-42\"}\n";
    let exempt_ds = daemonset("kube-router", &w.old_nft, true, "NET_ADMIN", ann);
    let (code, v) = check(&w, &exempt_ds, &[]);
    assert_eq!((code, v["verdict"].as_str()), (1, Some("deny")), "{v:#}");
    assert!(
        find(&v, "ExemptionNotAllowed")["message"]
            .as_str()
            .unwrap()
            .contains("no NetfilterPolicy allows exemptions in namespace kube-system"),
        "{v:#}"
    );
    let policy = w.dir.path().join("exemptions.yaml");
    std::fs::write(
        &policy,
        "apiVersion: nfguard.io/v1alpha1\nkind: NetfilterPolicy\nmetadata: {name: exemptions}\nspec:\n  exemptionNamespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}\n",
    )
    .unwrap();
    let (code, v) = check(&w, &exempt_ds, &["--policy", policy.to_str().unwrap()]);
    assert_eq!((code, v["verdict"].as_str()), (0, Some("allow")), "{v:#}");
    assert!(
        find(&v, "Exempt")["message"]
            .as_str()
            .unwrap()
            .contains("pinned until NET-42")
    );
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn unreachable_and_stalling_registries_warn_within_the_timeout() {
    let w = world("unreach");
    // A closed loopback port: refused at once.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let image = format!("127.0.0.1:{closed}/kube-router:v1");
    let start = Instant::now();
    let (code, v) = check(
        &w,
        &daemonset("kube-router", &image, true, "NET_ADMIN", ""),
        &[
            "--insecure-registry",
            &format!("127.0.0.1:{closed}"),
            "--timeout",
            "5",
        ],
    );
    assert!(start.elapsed() < Duration::from_secs(15));
    assert_eq!((code, v["verdict"].as_str()), (0, Some("warn")), "{v:#}");
    assert_eq!(find(&v, "ImageUnresolved")["effect"], "warn");

    // A listener that accepts and never answers: the budget decides.
    let stall = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = stall.local_addr().unwrap().port();
    let image = format!("127.0.0.1:{port}/kube-router:v1");
    let start = Instant::now();
    let (code, v) = check(
        &w,
        &daemonset("kube-router", &image, true, "NET_ADMIN", ""),
        &[
            "--insecure-registry",
            &format!("127.0.0.1:{port}"),
            "--timeout",
            "2",
        ],
    );
    let took = start.elapsed();
    drop(stall);
    assert!(
        took < Duration::from_secs(8),
        "took {took:?} with --timeout 2"
    );
    assert_eq!((code, v["verdict"].as_str()), (0, Some("warn")), "{v:#}");
    find(&v, "ImageUnresolved");
}
