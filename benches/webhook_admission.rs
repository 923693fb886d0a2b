//! Warm-cache HTTPS admission under load, against a trivial rustls handler
//! that allows everything, in the same run on the same machine.
//!
//! `cargo bench --bench webhook_admission` (or scripts/bench-webhook.sh):
//! starts a real docker-registry on loopback with three real Debian iptables
//! images, a release `nfguard webhook` with file profiles, warms its image
//! cache, starts the baseline (this binary re-executed with
//! `--serve-baseline`: same hyper + rustls stack, constant "allowed" reply),
//! then drives both with `wrk` (Debian package `wrk`; a Lua script POSTs the
//! AdmissionReview of a DaemonSet with 3 containers). Two scenarios: the
//! same object every time (the decision cache answers) and a distinct object
//! per request (judged afresh). Alternating rounds; prints p99 latency and
//! throughput and the ratios webhook/baseline.

#[path = "../tests/it/support/images.rs"]
mod images;
#[path = "../tests/it/support/registry.rs"]
mod registry;

use images::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const PROFILES: &str = r#"
apiVersion: nfguard.io/v1alpha1
kind: NodeNetfilterProfile
metadata: {name: node-a}
spec: {nodeName: node-a}
status:
  iptables: {version: "1.8.9", backend: nft, evidence: []}
  kernel: {release: "6.1.0", nfTables: true, ipTables: true}
  backends:
    nft: {tables: 3, chains: 12, rules: 40, hintChain: true, canaryChain: true}
    legacy: {tables: 0, chains: 0, rules: 0, hintChain: false, canaryChain: false}
  activeBackend: nft
  minReaderVersion: "1.8.8"
---
apiVersion: nfguard.io/v1alpha1
kind: NodeNetfilterProfile
metadata: {name: node-b}
spec: {nodeName: node-b}
status:
  iptables: {version: "1.8.11", backend: nft, evidence: []}
  kernel: {release: "6.12.0", nfTables: true, ipTables: true}
  backends:
    nft: {tables: 3, chains: 12, rules: 40, hintChain: true, canaryChain: true}
    legacy: {tables: 0, chains: 0, rules: 0, hintChain: false, canaryChain: false}
  activeBackend: nft
  minReaderVersion: "1.8.8"
"#;

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn certs(dir: &Path) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    leaf.subject_alt_names
        .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
}

/// Serve `allowed: true` for everything over the same TLS/HTTP stack.
fn serve_baseline(listen: &str, cert: &Path, key: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use axum::routing::post;
        let store = nfguard::webhook::tls::CertStore::new(None);
        store.set(nfguard::webhook::tls::load_files(cert, key).unwrap());
        let app = axum::Router::new().route(
            "/validate",
            post(|_body: axum::body::Bytes| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"","allowed":true}}"#,
                )
            }),
        );
        let l = tokio::net::TcpListener::bind(listen).await.unwrap();
        println!("baseline listening on https://{}", l.local_addr().unwrap());
        nfguard::webhook::server::serve_tls(
            l,
            tokio_rustls::TlsAcceptor::from(nfguard::webhook::tls::server_config(store)),
            app,
        )
        .await;
    });
}

fn first_line_url(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.split_whitespace()
        .find(|p| p.starts_with("https://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        // wrk sends the host as SNI; a name avoids rustls' IP-as-SNI warning per connection.
        .replace("127.0.0.1", "localhost")
}

fn review(images: &[String]) -> serde_json::Value {
    let containers: Vec<_> = images
        .iter()
        .enumerate()
        .map(|(i, img)| {
            serde_json::json!({"name": format!("c{i}"), "image": img,
            "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}})
        })
        .collect();
    serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "b1b2b3", "kind": {"group": "apps", "version": "v1", "kind": "DaemonSet"},
            "resource": {"group": "apps", "version": "v1", "resource": "daemonsets"},
            "namespace": "kube-system", "operation": "CREATE", "name": "cni", "dryRun": false,
            "userInfo": {"username": "admin"},
            "object": {"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "cni", "namespace": "kube-system"},
                "spec": {"selector": {"matchLabels": {"app": "cni"}}, "template": {
                    "metadata": {"labels": {"app": "cni"}},
                    "spec": {"hostNetwork": true, "containers": containers}}}}}})
}

struct Run {
    rps: f64,
    p99_ms: f64,
}

fn parse_ms(s: &str) -> f64 {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        _ => f64::NAN,
    }
}

fn wrk(url: &str, lua: &Path, secs: u32, conns: u32) -> Run {
    let out = Command::new("wrk")
        .args([
            "-t2",
            &format!("-c{conns}"),
            &format!("-d{secs}s"),
            "--latency",
            "-s",
        ])
        .arg(lua)
        .arg(format!("{url}/validate"))
        .output()
        .expect("run wrk (apt-get install wrk)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "wrk failed: {text}");
    assert!(
        !text.contains("Non-2xx"),
        "non-2xx answers under load:\n{text}"
    );
    let mut run = Run {
        rps: f64::NAN,
        p99_ms: f64::NAN,
    };
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["99%", v] => run.p99_ms = parse_ms(v),
            ["Requests/sec:", v] => run.rps = v.parse().unwrap_or(f64::NAN),
            _ => {}
        }
    }
    run
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn nfguard_bin() -> PathBuf {
    if let Ok(p) = std::env::var("NFGUARD_BIN") {
        return p.into();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let p = root.join("target/release/nfguard");
    assert!(
        p.exists(),
        "build it first: cargo build --release (or set NFGUARD_BIN)"
    );
    p
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve-baseline") {
        serve_baseline(
            &args[i + 1],
            Path::new(&args[i + 2]),
            Path::new(&args[i + 3]),
        );
        return;
    }
    let secs: u32 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let conns: u32 = std::env::var("BENCH_CONNECTIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    certs(dir.path());
    std::fs::write(dir.path().join("profiles.yaml"), PROFILES).unwrap();

    let reg = registry::Registry::start();
    let work = tempfile::tempdir().unwrap();
    let mut refs = Vec::new();
    for (repo, version, alt) in [
        ("kube-proxy", "1.8.9", Alt::Wrapper),
        ("cni", "1.8.11", Alt::Nft),
        ("agent", "1.8.9", Alt::Nft),
    ] {
        let l = build_layer(
            work.path(),
            &debian_iptables(version, alt),
            Compression::Gzip,
        );
        refs.push(push_image(&reg.host(), repo, version, &[l], &ImageConfig::default()).reference);
    }
    let body = review(&refs);
    std::fs::write(dir.path().join("review.json"), body.to_string()).unwrap();
    // Two drivers: the same DaemonSet every time (what a retrying API server
    // or a GitOps re-apply sends: answered from the decision cache), and a
    // distinct object per request (its name carries a counter: judged afresh).
    let review_path = dir.path().join("review.json");
    let load = format!(
        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nlocal f = io.open(\"{}\", \"r\")\nwrk.body = f:read(\"*a\")\nf:close()\n",
        review_path.display()
    );
    let same = dir.path().join("same.lua");
    std::fs::write(&same, &load).unwrap();
    let distinct = dir.path().join("distinct.lua");
    std::fs::write(
        &distinct,
        format!(
            "{load}local n = 0\nrequest = function()\n  n = n + 1\n  local b = string.gsub(wrk.body, '\"name\":\"cni\"', '\"name\":\"cni-' .. n .. '\"')\n  return wrk.format(nil, nil, nil, b)\nend\n"
        ),
    )
    .unwrap();

    let p = |n: &str| dir.path().join(n);
    let mut wh = Command::new(nfguard_bin())
        .args([
            "webhook",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
            "--tls-cert",
        ])
        .arg(p("tls.crt"))
        .arg("--tls-key")
        .arg(p("tls.key"))
        .arg("--profiles")
        .arg(p("profiles.yaml"))
        .args(["--insecure-registry", &reg.host(), "--log", "warn"])
        // The webhook refuses loopback registries unless allowed.
        .args(["--registry-allow-cidr", "127.0.0.1/32"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let wh_url = first_line_url(&mut wh);
    let _wh = Proc(wh);
    let mut base = Command::new(std::env::current_exe().unwrap())
        .arg("--serve-baseline")
        .arg("127.0.0.1:0")
        .arg(p("tls.crt"))
        .arg(p("tls.key"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let base_url = first_line_url(&mut base);
    let _base = Proc(base);

    // Warm the cache: admit until every image is resolved (no ImageUnresolved).
    let rt = tokio::runtime::Runtime::new().unwrap();
    let verdict = rt.block_on(async {
        let c = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()
            .unwrap();
        for _ in 0..120 {
            let v: serde_json::Value = c
                .post(format!("{wh_url}/validate"))
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if !v.to_string().contains("ImageUnresolved") {
                return v["response"]["auditAnnotations"]["nfguard.io/verdict"].clone();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("images never resolved");
    });
    println!("warm verdict for the 3-container DaemonSet: {verdict}");

    for (scenario, lua) in [
        ("same DaemonSet every request", &same),
        ("a distinct DaemonSet per request", &distinct),
    ] {
        println!("# {scenario}");
        let (mut b_rps, mut b_p99, mut w_rps, mut w_p99) = (vec![], vec![], vec![], vec![]);
        for round in 0..rounds {
            let b = wrk(&base_url, lua, secs, conns);
            let w = wrk(&wh_url, lua, secs, conns);
            println!(
                "round {round}: baseline {:.0} req/s p99 {:.3} ms | webhook {:.0} req/s p99 {:.3} ms",
                b.rps, b.p99_ms, w.rps, w.p99_ms
            );
            b_rps.push(b.rps);
            b_p99.push(b.p99_ms);
            w_rps.push(w.rps);
            w_p99.push(w.p99_ms);
        }
        let (br, bp, wr, wp) = (median(b_rps), median(b_p99), median(w_rps), median(w_p99));
        println!("median over {rounds} rounds ({secs}s each, {conns} connections, wrk -t2):");
        println!("  baseline: {br:.0} req/s, p99 {bp:.3} ms");
        println!("  webhook:  {wr:.0} req/s, p99 {wp:.3} ms");
        println!(
            "  ratio p99 webhook/baseline = {:.2} (target <= 1.5); throughput webhook/baseline = {:.2} (target >= 0.7)",
            wp / bp,
            wr / br
        );
    }
}
