//! The `nfguard webhook` binary with its default registry egress policy:
//! an image on a loopback registry is answered "refused by the registry
//! egress policy" and the registry's listener records zero connections;
//! `--registry-allow-cidr` lets the same webhook reach it.

use crate::support::pki;
use crate::support::scripted_http as scripted;
use crate::webhook_support as support;

use pki::pki;
use scripted::{Reply, Server};
use serde_json::Value;
use support::{Fixture, SpawnedWebhook, incident, localhost_client};

async fn review(wh: &SpawnedWebhook, ca_pem: &str, image: &str) -> Value {
    let r = localhost_client(ca_pem, wh.https)
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

    let wh = SpawnedWebhook::start(&fx, cert, key, &["--insecure-registry", &host]);
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
    let wh = SpawnedWebhook::start(
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
