//! Real TLS end to end: the `nfguard webhook` binary with a certificate
//! generated here (rcgen), node profiles captured by `nfguard inspect node
//! --as-profile` from network namespaces holding rules the real iptables
//! 1.8.9 wrote, images built from the real Debian iptables releases in a
//! real docker-registry on loopback, and a client that verifies the CA.

use crate::support::images;
use crate::support::netns;
use crate::support::pki;
use crate::support::registry;
use crate::webhook_support as support;

use images::*;
use pki::pki;
use serde_json::{Value, json};
use std::process::Child;
use std::time::{Duration, Instant};
use support::{container, object, pod_spec, review};

struct Webhook {
    child: Child,
    url: String,
    metrics_url: String,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_webhook(args: &[&str]) -> Webhook {
    let (child, line) =
        support::spawn_webhook(["--metrics-listen", "127.0.0.1:0"].iter().chain(args));
    // "nfguard webhook listening on https://127.0.0.1:PORT metrics=http://127.0.0.1:PORT"
    let mut parts = line.split_whitespace();
    let url = parts
        .find(|p| p.starts_with("https://"))
        .expect(&line)
        .replace("127.0.0.1", "localhost");
    let metrics_url = line
        .split_whitespace()
        .find_map(|p| p.strip_prefix("metrics="))
        .expect(&line)
        .to_string();
    Webhook {
        child,
        url,
        metrics_url,
    }
}

/// Capture node-a's profile: 1.8.9 wrote kubelet's marker chains and a
/// native mark match (so minReaderVersion is 1.8.8), host tools 1.8.9 nft.
fn capture_profile(ns: &netns::Netns, node: &str) -> String {
    let rules = "*mangle\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n\
*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -m mark --mark 0x4000/0x4000 -j ACCEPT\n-A INPUT -p tcp --dport 10250 -j ACCEPT\nCOMMIT\n";
    let out = ns.iptables_stdin("1.8.9", "iptables-nft-restore", &[], rules);
    netns::check(out, "1.8.9 iptables-nft-restore");
    let root = netns::installed_host_root("1.8.9", "nft");
    let out = netns::check(
        ns.nfguard(&[
            "inspect",
            "node",
            "--host-root",
            root.path().to_str().unwrap(),
            "--as-profile",
            node,
        ]),
        "inspect node --as-profile",
    );
    String::from_utf8(out.stdout).unwrap()
}

fn client(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .use_rustls_tls()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap()
}

async fn admit(c: &reqwest::Client, url: &str, body: &Value) -> (Value, Duration) {
    let start = Instant::now();
    let r = c
        .post(format!("{url}/validate"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    (
        r.json::<Value>().await.unwrap()["response"].clone(),
        start.elapsed(),
    )
}

/// Admit until the images are inspected (the first, cold look-up may exceed
/// the budget and then finishes in the background); returns the final answer.
async fn admit_resolved(c: &reqwest::Client, url: &str, body: &Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (r, took) = admit(c, url, body).await;
        assert!(
            took < Duration::from_secs(9),
            "answered within the 8 s budget: {took:?}"
        );
        let unresolved = r.to_string().contains("ImageUnresolved");
        if !unresolved || Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn webhook_over_real_tls_with_real_images_and_captured_profiles() {
    let ns = netns::Netns::new("webhooktls");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("profiles")).unwrap();
    std::fs::write(
        dir.path().join("profiles/node-a.yaml"),
        capture_profile(&ns, "node-a"),
    )
    .unwrap();
    drop(ns);

    let reg = registry::Registry::start();
    let work = tempfile::tempdir().unwrap();
    let incident = build_layer(
        work.path(),
        &debian_iptables("1.8.7", Alt::Nft),
        Compression::Gzip,
    );
    let incident = push_image(
        &reg.host(),
        "kube-router",
        "v1.8.7",
        &[incident],
        &ImageConfig::default(),
    );
    let wrapper = build_layer(
        work.path(),
        &debian_iptables("1.8.9", Alt::Wrapper),
        Compression::Gzip,
    );
    let wrapper = push_image(
        &reg.host(),
        "kube-proxy",
        "wrapper",
        &[wrapper],
        &ImageConfig::default(),
    );
    let debug = build_layer(
        work.path(),
        &debian_iptables("1.8.7", Alt::Nft),
        Compression::Zstd,
    );
    let debug = push_image(
        &reg.host(),
        "netshoot",
        "1.8.7",
        &[debug],
        &ImageConfig::default(),
    );

    let pki = pki();
    for (name, text) in [
        ("ca.pem", &pki.ca_pem),
        ("tls.crt", &pki.cert_pem),
        ("tls.key", &pki.key_pem),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    // nfguard.io/exempt counts only where a NetfilterPolicy allows it.
    std::fs::write(
        dir.path().join("policy.yaml"),
        "apiVersion: nfguard.io/v1alpha1\nkind: NetfilterPolicy\nmetadata: {name: exemptions}\nspec:\n  exemptionNamespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}\n",
    )
    .unwrap();
    let p = |n: &str| dir.path().join(n).display().to_string();
    let wh = start_webhook(&[
        "--policy",
        &p("policy.yaml"),
        "--tls-cert",
        &p("tls.crt"),
        "--tls-key",
        &p("tls.key"),
        "--profiles",
        &p("profiles"),
        "--insecure-registry",
        &reg.host(),
        // The webhook refuses loopback registries unless allowed.
        "--registry-allow-cidr",
        "127.0.0.1/32",
        "--timeout",
        "8",
    ]);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = client(&pki.ca_pem);
        // The incident: a kube-router-like DaemonSet bundling iptables 1.8.7 (nft)
        // against a node whose rules 1.8.9 wrote.
        let ds = |img: &str, ann: Value| {
            review(
                "DaemonSet",
                None,
                "CREATE",
                "kube-system",
                object(
                    "DaemonSet",
                    "kube-router",
                    "kube-system",
                    pod_spec(
                        true,
                        vec![container("kube-router", img, &["NET_ADMIN", "NET_RAW"])],
                    ),
                    ann,
                ),
                false,
            )
        };
        let r = admit_resolved(&c, &wh.url, &ds(&incident.reference, json!({}))).await;
        assert_eq!(r["allowed"], false, "{r}");
        let msg = r["status"]["message"].as_str().unwrap();
        for needle in [
            "OldReaderNewRules",
            "node-a",
            &incident.reference,
            "1.8.7",
            "1.8.8",
            "Fix:",
        ] {
            assert!(msg.contains(needle), "{needle:?} missing: {msg}");
        }
        // Warm now: answered from cache.
        let (r2, took) = admit(&c, &wh.url, &ds(&incident.reference, json!({}))).await;
        assert_eq!(r2["allowed"], false);
        assert!(took < Duration::from_secs(1), "{took:?}");

        // The wrapper image (kubelet's marker chains are on the node): allowed.
        let r = admit_resolved(&c, &wh.url, &ds(&wrapper.reference, json!({}))).await;
        assert_eq!(r["allowed"], true, "{r}");
        assert!(!r.to_string().contains("ImageUnresolved"), "{r}");

        // kubectl debug --profile=netadmin: the ephemeral container is checked.
        let mut spec = pod_spec(true, vec![container("app", &wrapper.reference, &[])]);
        spec["nodeName"] = json!("node-a");
        spec["ephemeralContainers"] = json!([{"name": "debugger-abcde", "image": debug.reference,
            "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}}}]);
        let body = review(
            "Pod",
            Some("ephemeralcontainers"),
            "UPDATE",
            "default",
            object("Pod", "app", "default", spec, json!({})),
            false,
        );
        let r = admit_resolved(&c, &wh.url, &body).await;
        assert_eq!(r["allowed"], false, "{r}");
        assert!(
            r["status"]["message"]
                .as_str()
                .unwrap()
                .contains("debugger-abcde (ephemeral)"),
            "{r}"
        );

        // Exempt: allowed, the reason shown.
        let r = admit_resolved(
            &c,
            &wh.url,
            &ds(
                &incident.reference,
                json!({"nfguard.io/exempt": "CNI migration window CHG-99"}),
            ),
        )
        .await;
        assert_eq!(r["allowed"], true, "{r}");
        assert!(
            r["warnings"]
                .to_string()
                .contains("CNI migration window CHG-99"),
            "{r}"
        );

        // A client that does not trust the CA is refused by TLS itself.
        let untrusting = client(&self::pki().ca_pem);
        assert!(
            untrusting
                .get(format!("{}/healthz", wh.url))
                .send()
                .await
                .is_err()
        );

        // Health and metrics on both ports.
        for base in [wh.url.as_str(), wh.metrics_url.as_str()] {
            let r = if base.starts_with("https") {
                c.get(format!("{base}/readyz"))
            } else {
                reqwest::Client::new().get(format!("{base}/readyz"))
            };
            assert_eq!(r.send().await.unwrap().status(), 200, "{base}");
        }
        let m = reqwest::Client::new()
            .get(format!("{}/metrics", wh.metrics_url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            m.contains("nfguard_webhook_verdicts_total{verdict=\"deny\"}"),
            "{m}"
        );
        assert!(m.contains("nfguard_webhook_image_cache_hits_total"), "{m}");
    });
}
