//! Hot reload of rotated certificate files while requests flow: the files
//! live behind a `..data` symlink as in a mounted Secret volume, each
//! rotation swaps the symlink atomically; a client keeps posting
//! AdmissionReviews on fresh TLS connections and no request may fail. Also:
//! TLS 1.2 and 1.3 clients both connect; a half-written pair is ignored.

use crate::webhook_support as support;

use nfguard::webhook::tls::{self, CertStore};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::*;

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn ca() -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = p.self_signed(&key).unwrap();
    Ca {
        issuer: Issuer::new(p, key),
        pem: cert.pem(),
    }
}

fn leaf(ca: &Ca, serial: u64) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    p.serial_number = Some(serial.into());
    let c = p.signed_by(&key, &ca.issuer).unwrap();
    (c.pem(), key.serialize_pem())
}

/// kubelet's layout: dir/..data -> ..<ts>/, dir/tls.crt -> ..data/tls.crt.
fn publish(dir: &Path, generation: u64, cert: &str, key: &str) {
    let ts = dir.join(format!("..2026_11_22_{generation}"));
    std::fs::create_dir(&ts).unwrap();
    std::fs::write(ts.join("tls.crt"), cert).unwrap();
    std::fs::write(ts.join("tls.key"), key).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(ts.file_name().unwrap(), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for f in ["tls.crt", "tls.key"] {
        if std::fs::symlink_metadata(dir.join(f)).is_err() {
            symlink(format!("..data/{f}"), dir.join(f)).unwrap();
        }
    }
}

fn client_config(
    ca_pem: &str,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    // A resumed session reports the certificate of the original handshake.
    cfg.resumption = rustls::client::Resumption::disabled();
    Arc::new(cfg)
}

/// The leaf certificate the server presents on a fresh handshake.
async fn served_cert(
    addr: std::net::SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
) -> CertificateDer<'static> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned()
}

fn der_of(pem: &str) -> CertificateDer<'static> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotated_files_are_served_without_a_failed_request() {
    let ca = ca();
    let dir = tempfile::tempdir().unwrap();
    let (c0, k0) = leaf(&ca, 1);
    publish(dir.path(), 0, &c0, &k0);
    let cert_path = dir.path().join("tls.crt");
    let key_path = dir.path().join("tls.key");

    let store = CertStore::new(None);
    store.set(tls::load_files(&cert_path, &key_path).unwrap());
    let _watch = tls::watch_files(
        cert_path.clone(),
        key_path.clone(),
        store.clone(),
        Duration::from_secs(30),
    )
    .unwrap();

    let fx = Fixture::new();
    let app = nfguard::webhook::router(state(
        &fx.profiles(),
        Some(&fx.nodes()),
        None,
        fake_registry(Duration::ZERO),
        Duration::from_secs(3),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(nfguard::webhook::server::serve_tls(
        listener,
        tokio_rustls::TlsAcceptor::from(tls::server_config(store.clone())),
        app,
    ));

    let body = review(
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
                vec![container(
                    "kube-router",
                    "kube-router:1.8.7",
                    &["NET_ADMIN"],
                )],
            ),
            json!({}),
        ),
        false,
    );
    let url = format!("https://localhost:{}/validate", addr.port());
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (ok, failed, stop, url, body) = (
            ok.clone(),
            failed.clone(),
            stop.clone(),
            url.clone(),
            body.clone(),
        );
        let ca_pem = ca.pem.clone();
        clients.push(tokio::spawn(async move {
            // No connection reuse: every request is a new handshake.
            let c = reqwest::Client::builder()
                .tls_built_in_root_certs(false)
                .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
                .use_rustls_tls()
                .pool_max_idle_per_host(0)
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            while !stop.load(Ordering::Relaxed) {
                match c.post(&url).json(&body).send().await {
                    Ok(r) if r.status() == 200 => {
                        let v: serde_json::Value = r.json().await.unwrap();
                        assert_eq!(v["response"]["allowed"], false);
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => panic!("status {}", r.status()),
                    Err(e) => {
                        eprintln!("request failed: {e:?}");
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }

    let tls13 = client_config(&ca.pem, &[&rustls::version::TLS13]);
    let tls12 = client_config(&ca.pem, &[&rustls::version::TLS12]);
    assert_eq!(served_cert(addr, tls12.clone()).await, der_of(&c0));
    for generation in 1..=5u64 {
        let (c, k) = leaf(&ca, generation + 1);
        publish(dir.path(), generation, &c, &k);
        let want = der_of(&c);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if served_cert(addr, tls13.clone()).await == want {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "generation {generation} not picked up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(served_cert(addr, tls12.clone()).await, want);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A half-rotated pair (new cert, old key) is refused; the last good pair stays.
    let (c_bad, _) = leaf(&ca, 99);
    let last = store.get().unwrap();
    let ts = dir.path().join("..2026_11_22_bad");
    std::fs::create_dir(&ts).unwrap();
    std::fs::write(ts.join("tls.crt"), &c_bad).unwrap();
    std::fs::copy(dir.path().join("tls.key"), ts.join("tls.key")).unwrap();
    let tmp = dir.path().join("..data_tmp");
    symlink(ts.file_name().unwrap(), &tmp).unwrap();
    std::fs::rename(&tmp, dir.path().join("..data")).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        Arc::ptr_eq(&last, &store.get().unwrap()),
        "mismatched pair must not be loaded"
    );

    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    server.abort();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("requests: {ok} ok, {failed} failed");
    assert!(ok > 20, "requests flowed during the rotations: {ok}");
    assert_eq!(failed, 0);
}

#[test]
fn key_and_certificate_must_match() {
    let ca = ca();
    let (c1, _k1) = leaf(&ca, 1);
    let (_c2, k2) = leaf(&ca, 2);
    let e = tls::load_pem(c1.as_bytes(), k2.as_bytes()).unwrap_err();
    assert!(e.to_string().contains("do not belong together"), "{e}");
    assert!(
        tls::load_pem(b"junk", k2.as_bytes())
            .unwrap_err()
            .to_string()
            .contains("no certificate")
    );
    assert!(
        tls::load_pem(c1.as_bytes(), b"")
            .unwrap_err()
            .to_string()
            .contains("no private key")
    );
}
