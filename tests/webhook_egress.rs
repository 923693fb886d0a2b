//! The `nfguard webhook` binary with its default registry egress policy:
//! an image on a loopback registry is answered "refused by the registry
//! egress policy" and the registry's listener records zero connections;
//! `--registry-allow-cidr` lets the same webhook reach it.

#[path = "support/pki.rs"]
mod pki;
#[path = "support/scripted_http.rs"]
mod scripted;
#[path = "webhook_support.rs"]
mod support;

use pki::pki;
use scripted::{Reply, Server};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{Fixture, incident};

struct Webhook {
    child: Child,
    https: SocketAddr,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(fx: &Fixture, cert: &str, key: &str, extra: &[&str]) -> Webhook {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nfguard"))
        .args([
            "webhook",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ])
        .arg("--profiles")
        .arg(fx.profiles())
        .arg("--nodes")
        .arg(fx.nodes())
        .args(extra)
        .env("NFGUARD_LOG", "info")
        .env("HOME", "/nonexistent")
        .env_remove("DOCKER_CONFIG")
        .env_remove("NFGUARD_REGISTRY_ALLOW_CIDRS")
        .env_remove("NFGUARD_REGISTRY_ALLOW_HOSTS")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start nfguard webhook");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line
        .split_whitespace()
        .find_map(|p| p.strip_prefix("https://127.0.0.1:"))
        .and_then(|p| p.parse().ok())
        .expect(&line);
    Webhook {
        child,
        https: ([127, 0, 0, 1], port).into(),
    }
}

async fn review(wh: &Webhook, ca_pem: &str, image: &str) -> Value {
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .use_rustls_tls()
        .resolve("localhost", wh.https)
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let r = client
        .post(format!("https://localhost:{}/validate", wh.https.port()))
        .json(&incident(image))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.unwrap()["response"].clone()
}

#[test]
fn the_webhook_refuses_a_loopback_registry_by_default_and_allows_it_when_told() {
    let fx = Fixture::new();
    let pki = pki();
    let cert = fx.write("tls.crt", &pki.cert_pem);
    let key = fx.write("tls.key", &pki.key_pem);
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let registry = Server::start("127.0.0.1", |_| {
        Reply::status(404).body("SECRET-BODY from the internal endpoint")
    });
    let host = registry.host();
    let image = format!("{host}/kube-router:1.8.7");
    let rt = tokio::runtime::Runtime::new().unwrap();

    let wh = start(&fx, cert, key, &["--insecure-registry", &host]);
    let answer = rt.block_on(review(&wh, &pki.ca_pem, &image));
    let text = answer.to_string();
    assert!(
        text.contains(&format!(
            "cannot reach registry {host}: refused by the registry egress policy"
        )),
        "{answer:#}"
    );
    assert_eq!(registry.connections(), 0, "the webhook contacted it");
    drop(wh);

    // Allowed explicitly: the webhook reaches the registry, whose answer is
    // shown as a status and a reason, never its body.
    let wh = start(
        &fx,
        cert,
        key,
        &[
            "--insecure-registry",
            &host,
            "--registry-allow-cidr",
            "127.0.0.1/32",
        ],
    );
    let answer = rt.block_on(review(&wh, &pki.ca_pem, &image));
    let text = answer.to_string();
    assert!(registry.connections() > 0);
    assert!(
        text.contains(&format!("not found: manifest {image}")),
        "{answer:#}"
    );
    assert!(!text.contains("SECRET-BODY"), "{answer:#}");
}
