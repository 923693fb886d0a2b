//! What `/validate` checks before it reads a body, over real TLS on loopback
//! (rustls on both sides, certificates made here with rcgen):
//! - `--client-ca-file`: no client certificate gets 401 before the body is
//!   read; a certificate from another CA, or naming no allowed identity,
//!   fails the handshake; the API server's certificate is answered; a rotated
//!   CA file is picked up; the health routes on the same port stay open;
//! - the byte budget for bodies in flight: many 19 MiB bodies at once never
//!   hold more than the budget, the rest get 429, and a normal review is
//!   still answered;
//! - a chunked body gets 411 unread; a trickled one 408 right after the
//!   grace, its share back at once (the attack at scale, against the
//!   binary: `webhook_trickle.rs`).

use crate::support::pki;
use crate::webhook_support as support;

use nfguard::runtime::admin::Exposition;
use nfguard::webhook::client_auth::{self, ClientAuth};
use nfguard::webhook::intake::MAX_BODY_BYTES;
use nfguard::webhook::intake::{BodyBudget, Intake, RATE_FLOOR, SMALL_LANE_MIN};
use nfguard::webhook::server::serve_tls;
use nfguard::webhook::tls::{self, CertStore};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::ServerName;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    let cert = p.self_signed(&key).unwrap();
    Ca {
        issuer: Issuer::new(p, key),
        pem: cert.pem(),
    }
}

/// A client certificate and key (one PEM, as reqwest's identity wants it).
fn client_cert(ca: &Ca, cn: &str) -> Vec<u8> {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    format!("{}{}", cert.pem(), key.serialize_pem()).into_bytes()
}

/// Where a webhook listens, and the CA its serving certificate chains to.
struct Target {
    addr: SocketAddr,
    server_ca: String,
}

/// The webhook's router (fixture facts, instant registry) with `intake`,
/// served over TLS on loopback; with `clients`, client certificates are asked for.
struct Served {
    target: Target,
    metrics: Arc<nfguard::webhook::metrics::Metrics>,
    task: tokio::task::JoinHandle<()>,
    _fx: Fixture,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    clients: Option<Arc<ClientAuth>>,
    intake: impl FnOnce(Arc<nfguard::webhook::metrics::Metrics>) -> Arc<Intake>,
    metrics: Arc<nfguard::webhook::metrics::Metrics>,
) -> Served {
    let fx = Fixture::new();
    let mut state = state(
        &fx.profiles(),
        Some(&fx.nodes()),
        None,
        fake_registry(Duration::ZERO),
        Duration::from_secs(5),
    );
    state.metrics = metrics.clone();
    state.intake = intake(metrics.clone());
    let p = pki::pki();
    let store = CertStore::new(None);
    store.set(tls::load_pem(p.cert_pem.as_bytes(), p.key_pem.as_bytes()).unwrap());
    let verifier = clients.map(|c| c as Arc<dyn rustls::server::danger::ClientCertVerifier>);
    let acceptor =
        tokio_rustls::TlsAcceptor::from(tls::server_config_with_clients(store, verifier));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(serve_tls(
        listener,
        acceptor,
        nfguard::webhook::router(state),
    ));
    Served {
        target: Target {
            addr,
            server_ca: p.ca_pem,
        },
        metrics,
        task,
        _fx: fx,
    }
}

fn requiring(bodies: u64) -> impl FnOnce(Arc<nfguard::webhook::metrics::Metrics>) -> Arc<Intake> {
    move |metrics| {
        Arc::new(Intake {
            require_client_certificate: true,
            bodies: BodyBudget::new(
                bodies,
                Duration::from_secs(2),
                metrics.body_bytes_in_flight.clone(),
            ),
            metrics,
        })
    }
}
/// A webhook requiring no client certificate, with a body budget of
/// `limit` bytes and `wait`, and that budget (to read what it holds).
async fn serve_open(limit: u64, wait: Duration) -> (Served, Arc<BodyBudget>) {
    let metrics = Arc::new(nfguard::webhook::metrics::Metrics::new());
    let budget = BodyBudget::new(limit, wait, metrics.body_bytes_in_flight.clone());
    let bodies = budget.clone();
    let open = move |metrics| {
        Arc::new(Intake {
            require_client_certificate: false,
            bodies,
            metrics,
        })
    };
    (serve(None, open, metrics).await, budget)
}

fn client(s: &Target, identity: Option<&[u8]>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(s.server_ca.as_bytes()).unwrap())
        .use_rustls_tls()
        .resolve("localhost", s.addr)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(15));
    if let Some(pem) = identity {
        b = b.identity(reqwest::Identity::from_pem(pem).unwrap());
    }
    b.build().unwrap()
}

fn url(s: &Target, path: &str) -> String {
    format!("https://localhost:{}{path}", s.addr.port())
}

fn refused(s: &Served, cause: &str) -> u64 {
    let text = s.metrics.encode();
    let prefix = format!("nfguard_webhook_refused_requests_total{{cause=\"{cause}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{prefix} in {text}"))
}

/// The incident DaemonSet: denied on the fixture's nodes (the in-process
/// router's fake registry knows its image).
async fn post_review(c: &reqwest::Client, s: &Target) -> reqwest::Result<reqwest::Response> {
    c.post(url(s, "/validate"))
        .json(&incident("kube-router:1.8.7"))
        .send()
        .await
}

/// For the real binary: the incident with its image on a loopback registry,
/// which the webhook's default egress policy refuses without connecting
/// (no traffic leaves the machine); answered with a warning.
async fn post_review_to_binary(
    c: &reqwest::Client,
    s: &Target,
) -> reqwest::Result<reqwest::Response> {
    c.post(url(s, "/validate"))
        .json(&incident("127.0.0.1:9/kube-router:1.8.7"))
        .send()
        .await
}

/// A TLS client trusting only `server_ca`, no client certificate.
pub(crate) fn tls_client(server_ca: &str) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut server_ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// A TLS connection to `addr` from the loopback address `from` (the whole
/// of 127.0.0.0/8 is local: each address is a peer of its own).
pub(crate) async fn tls_from(
    tls: &tokio_rustls::TlsConnector,
    from: IpAddr,
    addr: SocketAddr,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(from, 0))?;
    let tcp = sock.connect(addr).await?;
    tls.connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// How a raw request sends its body.
struct Sending {
    from: IpAddr,
    /// The announced length; None: chunked, `length`-less.
    length: Option<usize>,
    /// Bytes per write, one every `pace` (None: the body is never sent).
    piece: usize,
    pace: Option<Duration>,
}

const LOOPBACK: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// A raw HTTP/1.1 request over TLS (no client certificate): the headers of a
/// POST announcing `length` body bytes, then the body trickled in 1 MiB
/// pieces every `pace` (None: never sent). Returns the response's status
/// and when it came; the reader runs beside the writer, so an answer given
/// before the body was read is seen.
async fn raw_post(
    addr: SocketAddr,
    server_ca: &str,
    length: usize,
    pace: Option<Duration>,
) -> (u16, std::time::Instant) {
    let how = Sending {
        from: LOOPBACK,
        length: Some(length),
        piece: 1 << 20,
        pace,
    };
    raw_send(addr, server_ca, how).await
}

async fn raw_send(addr: SocketAddr, server_ca: &str, how: Sending) -> (u16, std::time::Instant) {
    let tls = tls_from(&tls_client(server_ca), how.from, addr)
        .await
        .unwrap();
    let (mut rd, mut wr) = tokio::io::split(tls);
    let framing = match how.length {
        Some(n) => format!("content-length: {n}"),
        None => "transfer-encoding: chunked".to_string(),
    };
    let head = format!(
        "POST /validate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n{framing}\r\n\r\n"
    );
    wr.write_all(head.as_bytes()).await.unwrap();
    wr.flush().await.unwrap();
    let writer = tokio::spawn(async move {
        let Some(pace) = how.pace else {
            return std::future::pending::<()>().await;
        };
        let piece = vec![b' '; how.piece];
        let mut left = how.length.unwrap_or(usize::MAX);
        while left > 0 {
            let n = left.min(piece.len());
            let wrote = match how.length {
                Some(_) => wr.write_all(&piece[..n]).await,
                None => {
                    let chunk = [format!("{n:x}\r\n").as_bytes(), &piece[..n], b"\r\n"].concat();
                    wr.write_all(&chunk).await
                }
            };
            if wrote.is_err() || wr.flush().await.is_err() {
                return;
            }
            left -= n;
            tokio::time::sleep(pace).await;
        }
        // Keep the write half open until the answer came.
        std::future::pending::<()>().await
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let status = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let n = rd.read(&mut buf).await.unwrap();
            assert!(n > 0, "connection closed without an answer");
            got.extend_from_slice(&buf[..n]);
            if let Some(line) = got
                .split(|b| *b == b'\n')
                .next()
                .filter(|_| got.contains(&b'\n'))
            {
                let line = String::from_utf8_lossy(line);
                return line
                    .split_whitespace()
                    .nth(1)
                    .unwrap()
                    .parse::<u16>()
                    .unwrap();
            }
        }
    })
    .await
    .expect("an answer within 30 s");
    let at = std::time::Instant::now();
    writer.abort();
    (status, at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_certificate_from_the_client_ca_with_an_allowed_name_may_call_validate() {
    let apiserver_ca = ca("apiserver-client-ca");
    let other_ca = ca("someone-elses-ca");
    let metrics = Arc::new(nfguard::webhook::metrics::Metrics::new());
    let auth = ClientAuth::new(
        apiserver_ca.pem.as_bytes(),
        vec!["kube-apiserver".to_string()],
        Some(metrics.clone()),
    )
    .unwrap();
    let s = serve(Some(auth), requiring(MAX_BODY_BYTES as u64), metrics).await;

    // No certificate: 401, answered while the announced megabyte was never
    // sent (so before the body was read).
    let (status, _) = raw_post(s.target.addr, &s.target.server_ca, 1 << 20, None).await;
    assert_eq!(status, 401);
    let anonymous = client(&s.target, None);
    let r = post_review(&anonymous, &s.target).await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(refused(&s, "no_client_certificate"), 2);
    // The kubelet's probe on the same port has no certificate and stays answered.
    let r = anonymous
        .get(url(&s.target, "/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Another CA's certificate, even with the right name: the handshake fails.
    let forged = client(&s.target, Some(&client_cert(&other_ca, "kube-apiserver")));
    assert!(post_review(&forged, &s.target).await.is_err());
    assert_eq!(refused(&s, "untrusted_client_certificate"), 1);

    // The right CA, a name not allowed: the handshake fails.
    let stranger = client(
        &s.target,
        Some(&client_cert(&apiserver_ca, "system:anonymous")),
    );
    assert!(post_review(&stranger, &s.target).await.is_err());
    assert_eq!(refused(&s, "client_name_not_allowed"), 1);

    // The API server's certificate: judged (the incident is denied).
    let apiserver = client(
        &s.target,
        Some(&client_cert(&apiserver_ca, "kube-apiserver")),
    );
    let r = post_review(&apiserver, &s.target).await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["response"]["allowed"], false, "{v}");
    assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(refused(&s, "no_client_certificate"), 2);
}

/// kubelet's layout of a mounted ConfigMap: dir/..data -> ..<gen>/, dir/ca.crt -> ..data/ca.crt.
fn publish_ca(dir: &Path, generation: u32, pem: &str) {
    let ts = dir.join(format!("..gen_{generation}"));
    std::fs::create_dir(&ts).unwrap();
    std::fs::write(ts.join("ca.crt"), pem).unwrap();
    let tmp = dir.join("..data_tmp");
    symlink(ts.file_name().unwrap(), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    if std::fs::symlink_metadata(dir.join("ca.crt")).is_err() {
        symlink("..data/ca.crt", dir.join("ca.crt")).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_ca_is_picked_up_and_a_broken_one_ignored() {
    let old_ca = ca("client-ca-1");
    let new_ca = ca("client-ca-2");
    let dir = tempfile::tempdir().unwrap();
    publish_ca(dir.path(), 1, &old_ca.pem);
    let path = dir.path().join("ca.crt");
    let metrics = Arc::new(nfguard::webhook::metrics::Metrics::new());
    let auth = client_auth::load_file(&path, vec![], Some(metrics.clone())).unwrap();
    let _watch = client_auth::watch_file(path, auth.clone(), Duration::from_secs(30)).unwrap();
    let s = serve(Some(auth), requiring(MAX_BODY_BYTES as u64), metrics).await;

    let old = client(&s.target, Some(&client_cert(&old_ca, "apiserver")));
    let new = client(&s.target, Some(&client_cert(&new_ca, "apiserver")));
    assert_eq!(post_review(&old, &s.target).await.unwrap().status(), 200);
    assert!(post_review(&new, &s.target).await.is_err());

    publish_ca(dir.path(), 2, &new_ca.pem);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while post_review(&new, &s.target).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the new CA was not picked up within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        post_review(&old, &s.target).await.is_err(),
        "the old CA is gone"
    );

    // A file that is no CA bundle keeps the CA in use.
    publish_ca(dir.path(), 3, "not a certificate\n");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(post_review(&new, &s.target).await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_bodies_stay_within_the_byte_budget() {
    const CLIENTS: usize = 8;
    let max = MAX_BODY_BYTES as u64;
    // Two largest bodies in the large lane, the least small lane beside it.
    let (s, budget) = serve_open(2 * max + SMALL_LANE_MIN, Duration::from_millis(300)).await;

    // Eight clients each announce a largest body and send it over ~2 s,
    // each from an address of its own (one address holds one at a time).
    let start = std::time::Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (addr, ca) = (s.target.addr, s.target.server_ca.clone());
            let how = Sending {
                from: IpAddr::from([127, 0, 0, 10 + i as u8]),
                length: Some(MAX_BODY_BYTES),
                piece: 1 << 20,
                pace: Some(Duration::from_millis(100)),
            };
            tokio::spawn(async move { raw_send(addr, &ca, how).await })
        })
        .collect();
    let mut shed = 0;
    for t in tasks {
        let (status, at) = t.await.unwrap();
        if status == 429 {
            shed += 1;
            assert!(
                at - start < Duration::from_millis(1500),
                "429 after the brief wait, not after the body: {:?}",
                at - start
            );
        } else {
            // A body of spaces: read whole, then refused as malformed.
            assert_ne!(status, 401);
        }
    }
    let peak = budget.peak();
    eprintln!(
        "peak bytes in flight {peak} of {} ({} bodies); {shed} of {CLIENTS} shed",
        budget.limit(),
        peak / max
    );
    assert!(
        peak <= budget.limit(),
        "peak {peak} over {}",
        budget.limit()
    );
    assert_eq!(budget.large_lane(), 2 * max);
    assert_eq!(peak, 2 * max, "two largest bodies were in flight at once");
    assert_eq!(shed, CLIENTS - 2, "all but the two that fit were shed");
    assert_eq!(refused(&s, "body_budget"), shed as u64);
    assert_eq!(budget.in_flight(), 0);
    let gauge = "nfguard_webhook_request_body_bytes_in_flight 0\n";
    assert!(s.metrics.encode().contains(gauge));

    // A normal review after the flood is answered.
    let r = post_review(&client(&s.target, None), &s.target)
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_gets_411_unread_and_a_trickled_one_408_after_the_grace() {
    let (s, budget) = serve_open(0, Duration::from_secs(2)).await;
    let (addr, ca) = (s.target.addr, s.target.server_ca.as_str());

    // Chunked, its first chunk never sent: 411, nothing reserved.
    let chunked = Sending {
        from: LOOPBACK,
        length: None,
        piece: 1,
        pace: None,
    };
    let start = std::time::Instant::now();
    let (status, at) = raw_send(addr, ca, chunked).await;
    assert_eq!(status, 411);
    assert!(at - start < Duration::from_secs(1), "{:?}", at - start);
    assert_eq!(refused(&s, "length_required"), 1);
    assert_eq!(budget.peak(), 0);

    // A largest body announced, one byte every 0.5 s: cut right after the
    // grace, its share back at once.
    let trickle = Sending {
        from: LOOPBACK,
        length: Some(MAX_BODY_BYTES),
        piece: 1,
        pace: Some(Duration::from_millis(500)),
    };
    let start = std::time::Instant::now();
    let (status, at) = raw_send(addr, ca, trickle).await;
    let took = at - start;
    assert_eq!(status, 408);
    assert!(
        took >= RATE_FLOOR.grace && took < RATE_FLOOR.grace + Duration::from_secs(1),
        "cut after {took:?}"
    );
    assert_eq!(budget.peak(), MAX_BODY_BYTES as u64);
    assert_eq!(budget.in_flight(), 0);
    assert_eq!(refused(&s, "slow_body"), 1);

    // The same body sent at once is read (and refused as not JSON).
    let (status, _) = raw_post(addr, ca, MAX_BODY_BYTES, Some(Duration::ZERO)).await;
    assert_eq!(status, 400);
    let r = post_review(&client(&s.target, None), &s.target)
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// The server's certificate and key in files, for the real binary.
pub(crate) fn server_files(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let p = pki::pki();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, &p.cert_pem).unwrap();
    std::fs::write(&key, &p.key_pem).unwrap();
    (cert, key, p.ca_pem)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_answers_validate_only_to_the_certificate_its_flags_name() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, server_ca) = server_files(dir.path());
    let client_ca = ca("apiserver-client-ca");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &client_ca.pem).unwrap();
    let fx = Fixture::new();
    let hook = SpawnedWebhook::start(
        &fx,
        &cert,
        &key,
        &[
            "--client-ca-file",
            ca_file.to_str().unwrap(),
            "--client-cert-name",
            "kube-apiserver,kube-apiserver-nfguard-client",
        ],
    );
    let s = Target {
        addr: hook.https,
        server_ca,
    };
    let r = post_review_to_binary(&client(&s, None), &s).await.unwrap();
    assert_eq!(r.status(), 401);
    let stranger = client(&s, Some(&client_cert(&client_ca, "someone")));
    assert!(post_review_to_binary(&stranger, &s).await.is_err());
    let apiserver = client(
        &s,
        Some(&client_cert(&client_ca, "kube-apiserver-nfguard-client")),
    );
    let r = post_review_to_binary(&apiserver, &s).await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002",
        "{v}"
    );
    let warnings = v["response"]["warnings"].to_string();
    assert!(warnings.contains("egress policy"), "{v}");
}

/// Sixteen clients send a largest (19 MiB) body each at once to the real
/// binary; returns how much its peak RSS grew over its idle peak (MiB) and
/// the statuses.
async fn sixteen_largest_bodies(extra: &[&str]) -> (u64, Vec<u16>) {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, server_ca) = server_files(dir.path());
    let fx = Fixture::new();
    let hook = SpawnedWebhook::start(&fx, &cert, &key, extra);
    // One ordinary review first, so the idle figure includes a served request.
    let s = Target {
        addr: hook.https,
        server_ca: server_ca.clone(),
    };
    assert_eq!(
        post_review_to_binary(&client(&s, None), &s)
            .await
            .unwrap()
            .status(),
        200
    );
    let idle = hook.peak_rss_kib();
    // Each from an address of its own: one address holds one at a time.
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (addr, ca) = (hook.https, server_ca.clone());
            let how = Sending {
                from: IpAddr::from([127, 0, 0, 10 + i as u8]),
                length: Some(MAX_BODY_BYTES),
                piece: 1 << 20,
                pace: Some(Duration::ZERO),
            };
            tokio::spawn(async move { raw_send(addr, &ca, how).await.0 })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    ((hook.peak_rss_kib() - idle) / 1024, statuses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_largest_bodies_at_once_stay_within_the_binarys_body_budget() {
    // The default budget at the webhook's 512 MiB limit: 64 MiB of bodies.
    let (budgeted, statuses) = sixteen_largest_bodies(&["--memory-limit", "536870912"]).await;
    let shed = statuses.iter().filter(|s| **s == 429).count();
    // For comparison (printed, not asserted: how many bodies overlap without
    // a budget depends on the machine's cores): no budget to speak of.
    let (unbounded, _) =
        sixteen_largest_bodies(&["--max-inflight-body-bytes", "1099511627776"]).await;
    eprintln!(
        "16 x 19 MiB bodies at once: peak RSS +{budgeted} MiB over idle with the 64 MiB body budget ({shed} of 16 shed with 429), +{unbounded} MiB without it"
    );
    assert!(
        statuses.iter().all(|s| *s != 401 && *s != 413),
        "{statuses:?}"
    );
    assert!(shed < 16, "some bodies were read: {statuses:?}");
    // A body is read into one buffer of its announced length (no second
    // copy while it is collected): the budget once, and 24 MiB for
    // connection buffers and the allocator's slack (+47-58 MiB measured).
    assert!(
        budgeted <= 64 + 24,
        "peak RSS grew {budgeted} MiB with a 64 MiB body budget"
    );
}
