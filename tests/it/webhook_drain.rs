//! Graceful shutdown of the webhook: the real accept loop on loopback with
//! real TLS, a review held in flight by a gated registry, and a shutdown
//! triggered from the test (one test sends the real binary a real SIGTERM).
//! In-flight reviews get their full answer, readiness fails while draining,
//! the listeners close, and a request stuck past the budget is cut.

use crate::support::pki;
use crate::support::registry_lying as lying;
use crate::webhook_support as support;

use nfguard::facts::ImageProfile;
use nfguard::facts::Platform;
use nfguard::judgement::{ImageLookup, LookupError};
use nfguard::registry::Credentials;
use nfguard::webhook::server::{self, Drain, Drained, Listeners};
use nfguard::webhook::tls::{self, CertStore};
use pki::pki;
use serde_json::Value;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;
use tokio::sync::{Semaphore, mpsc, oneshot};

/// "gate/*" images: the look-up reports that it started, then waits for a
/// permit before answering as kube-router:1.8.7 (1.8.7, nft); anything else
/// goes to the support registry.
struct Gated {
    entered: mpsc::UnboundedSender<String>,
    permits: Arc<Semaphore>,
    inner: Arc<dyn ImageLookup>,
}

#[async_trait::async_trait]
impl ImageLookup for Gated {
    async fn lookup(
        &self,
        image: &str,
        platform: &Platform,
        _credentials: Option<&Credentials>,
    ) -> Result<ImageProfile, LookupError> {
        if image.starts_with("gate/") {
            let _ = self.entered.send(image.to_string());
            let permit = self
                .permits
                .acquire()
                .await
                .map_err(|e| LookupError::unavailable(e.to_string()))?;
            permit.forget();
            return self.inner.lookup("kube-router:1.8.7", platform, None).await;
        }
        self.inner.lookup(image, platform, None).await
    }
}

struct Running {
    https: SocketAddr,
    plain: SocketAddr,
    ca_pem: String,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<(Drained, Instant)>,
    entered: mpsc::UnboundedReceiver<String>,
    permits: Arc<Semaphore>,
    _fx: Fixture,
}

impl Running {
    /// Start draining; returns when the shutdown was asked for.
    fn shut_down(&mut self) -> Instant {
        let at = Instant::now();
        self.stop.take().unwrap().send(()).unwrap();
        at
    }

    fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(self.ca_pem.as_bytes()).unwrap())
            .use_rustls_tls()
            .resolve("localhost", self.https)
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    }

    fn https_url(&self) -> String {
        format!("https://localhost:{}", self.https.port())
    }

    /// POST a review on a connection of its own, in the background.
    fn review_in_background(
        &self,
        image: &str,
    ) -> tokio::task::JoinHandle<Result<(u16, Value), String>> {
        let (c, url, body) = (self.client(), self.https_url(), incident(image));
        tokio::spawn(async move {
            let r = c
                .post(format!("{url}/validate"))
                .json(&body)
                .send()
                .await
                .map_err(|e| format!("{e:?}"))?;
            let status = r.status().as_u16();
            let v = r.json::<Value>().await.map_err(|e| format!("{e:?}"))?;
            Ok((status, v))
        })
    }

    async fn readyz_https(&self) -> u16 {
        let r = self
            .client()
            .get(format!("{}/readyz", self.https_url()))
            .send();
        r.await.unwrap().status().as_u16()
    }

    async fn readyz_plain(&self) -> u16 {
        let r = reqwest::get(format!("http://{}/readyz", self.plain));
        r.await.unwrap().status().as_u16()
    }
}

async fn start(judge_timeout: Duration, drain: Drain) -> Running {
    let fx = Fixture::new();
    let (entered_tx, entered) = mpsc::unbounded_channel();
    let permits = Arc::new(Semaphore::new(0));
    let resolver = Arc::new(Gated {
        entered: entered_tx,
        permits: permits.clone(),
        inner: fake_registry(Duration::ZERO),
    });
    let app = state(
        &fx.profiles(),
        Some(&fx.nodes()),
        None,
        resolver,
        judge_timeout,
    );
    let pki = pki();
    let store = CertStore::new(None);
    store.set(tls::load_pem(pki.cert_pem.as_bytes(), pki.key_pem.as_bytes()).unwrap());
    let https = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let plain = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (https_addr, plain_addr) = (https.local_addr().unwrap(), plain.local_addr().unwrap());
    let listeners = Listeners {
        https,
        acceptor: tokio_rustls::TlsAcceptor::from(tls::server_config(store)),
        plain: Some(plain),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    };
    let done = tokio::spawn(async move {
        let outcome = server::serve(app, listeners, shutdown, drain).await;
        (outcome, Instant::now())
    });
    Running {
        https: https_addr,
        plain: plain_addr,
        ca_pem: pki.ca_pem,
        stop: Some(stop),
        done,
        entered,
        permits,
        _fx: fx,
    }
}

/// The full answer the incident gets: a denial naming the 1.8.9 nodes.
fn assert_full_denial(status: u16, v: &Value) {
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["kind"], "AdmissionReview", "{v}");
    assert_eq!(
        v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002",
        "{v}"
    );
    assert_eq!(v["response"]["allowed"], false, "{v}");
    let msg = v["response"]["status"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("node-a"), "the verdict, not a fallback: {v}");
}

/// Whether a TCP connection to `addr` is refused within `within`.
async fn refused_within(addr: SocketAddr, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        match tokio::net::TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return true,
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    false
}

async fn wait_entered(r: &mut Running) {
    tokio::time::timeout(Duration::from_secs(10), r.entered.recv())
        .await
        .expect("the review reached the registry")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_review_gets_its_answer_and_new_connections_are_refused() {
    let drain = Drain {
        delay: Duration::ZERO,
        budget: Duration::from_secs(10),
    };
    let mut r = start(Duration::from_secs(10), drain).await;
    assert_eq!(r.readyz_plain().await, 200);
    let in_flight = r.review_in_background("gate/kube-router:1");
    wait_entered(&mut r).await;

    r.shut_down();
    assert!(
        refused_within(r.https, Duration::from_secs(2)).await,
        "HTTPS listener still accepting after shutdown"
    );
    assert!(
        refused_within(r.plain, Duration::from_secs(2)).await,
        "metrics listener still accepting after shutdown"
    );
    // Closed for new connections, yet still waiting for the open review.
    assert!(
        !r.done.is_finished(),
        "returned before the in-flight review"
    );

    let released = Instant::now();
    r.permits.add_permits(1);
    let (status, v) = in_flight
        .await
        .unwrap()
        .expect("the in-flight review is answered");
    assert_full_denial(status, &v);
    let (outcome, returned) = r.done.await.unwrap();
    assert_eq!(outcome, Drained::Complete);
    assert!(returned >= released);
    assert!(
        returned - released < Duration::from_secs(2),
        "lingered after the drain"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_at_once_while_the_delay_keeps_serving() {
    let drain = Drain {
        delay: Duration::from_secs(3),
        budget: Duration::from_secs(5),
    };
    let mut r = start(Duration::from_secs(5), drain).await;
    assert_eq!(r.readyz_https().await, 200);
    assert_eq!(r.readyz_plain().await, 200);

    let asked = r.shut_down();
    // Readiness off on both ports while new connections are still served
    // (the endpoint removal has not reached every proxy yet).
    assert_eq!(r.readyz_https().await, 503);
    assert_eq!(r.readyz_plain().await, 503);
    let late = r.review_in_background("kube-router:1.8.7");
    let (status, v) = late.await.unwrap().expect("served during the delay");
    assert_full_denial(status, &v);
    assert!(
        asked.elapsed() < drain.delay,
        "the checks above ran after the delay; nothing proven"
    );
    assert!(!r.done.is_finished());

    assert!(
        refused_within(r.https, drain.delay + Duration::from_secs(2)).await,
        "HTTPS listener still open after the delay"
    );
    let (outcome, returned) = r.done.await.unwrap();
    assert_eq!(outcome, Drained::Complete);
    let took = returned - asked;
    assert!(took >= drain.delay, "closed before the delay: {took:?}");
    assert!(took < drain.delay + Duration::from_secs(2), "{took:?}");
    assert!(r.entered.try_recv().is_err(), "no gated look-up was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_stuck_past_the_budget_is_cut_and_the_server_returns() {
    let drain = Drain {
        delay: Duration::ZERO,
        budget: Duration::from_secs(1),
    };
    // The judge would wait 20 s for the registry: far past the drain budget.
    let mut r = start(Duration::from_secs(20), drain).await;
    let stuck = r.review_in_background("gate/kube-router:never");
    wait_entered(&mut r).await;

    let asked = r.shut_down();
    let (outcome, returned) = tokio::time::timeout(Duration::from_secs(5), &mut r.done)
        .await
        .expect("the server returned")
        .unwrap();
    assert_eq!(outcome, Drained::Cut { connections: 1 });
    let took = returned - asked;
    assert!(took >= drain.budget, "gave up before the budget: {took:?}");
    assert!(took < drain.budget + Duration::from_millis(700), "{took:?}");
    // The client sees its connection end, not an answer, and not a hang.
    let got = tokio::time::timeout(Duration::from_secs(3), stuck)
        .await
        .expect("the cut connection is closed")
        .unwrap();
    assert!(got.is_err(), "a cut request got an answer: {got:?}");
}

/// The binary, a real SIGTERM: the review already in flight (its image
/// look-up stalls until the 2 s answer budget) is answered in full, and the
/// process exits 0 within the default drain budget.
#[test]
fn the_binary_drains_on_sigterm_and_exits_0() {
    let fx = Fixture::new();
    let pki = pki();
    let cert = fx.write("tls.crt", &pki.cert_pem);
    let key = fx.write("tls.key", &pki.key_pem);
    let registry = lying::StallingListener::start();
    let (profiles, nodes, host) = (fx.profiles(), fx.nodes(), registry.host());
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let (mut child, line) = spawn_webhook([
        "--metrics-listen",
        "off",
        "--tls-cert",
        &path(&cert),
        "--tls-key",
        &path(&key),
        "--profiles",
        &path(&profiles),
        "--nodes",
        &path(&nodes),
        "--insecure-registry",
        &host,
        // The webhook refuses loopback registries unless allowed.
        "--registry-allow-cidr",
        "127.0.0.1/32",
        "--timeout",
        "2",
        "--shutdown-delay-seconds",
        "0",
    ]);
    let https = https_addr(&line);
    let port = https.port();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (answer, answered_at, exit, exited_at, sent) = rt.block_on(async {
        let client = localhost_client(&pki.ca_pem, https);
        let body = incident(&format!("{}/kube-router:1.8.7", registry.host()));
        let url = format!("https://localhost:{port}/validate");
        let in_flight = tokio::spawn(async move {
            let r = client.post(url).json(&body).send().await.unwrap();
            let status = r.status().as_u16();
            let v: Value = r.json().await.unwrap();
            ((status, v), Instant::now())
        });
        // Well inside the 2 s the review waits for the stalling registry.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let sent = Instant::now();
        let kill = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let (answer, answered_at) = in_flight.await.unwrap();
        let exit = tokio::task::spawn_blocking(move || {
            let status = child.wait().unwrap();
            (status, Instant::now())
        });
        let (exit, exited_at) = tokio::time::timeout(Duration::from_secs(10), exit)
            .await
            .expect("the webhook exited after SIGTERM")
            .unwrap();
        (answer, answered_at, exit, exited_at, sent)
    });
    let (status, v) = answer;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002",
        "{v}"
    );
    assert!(v["response"]["allowed"].is_boolean(), "{v}");
    assert!(
        answered_at > sent,
        "answered before the signal: nothing was in flight"
    );
    assert_eq!(exit.code(), Some(0), "{exit:?}");
    assert!(exited_at >= answered_at);
    // Default budget: --timeout + 1 s = 3 s after the listener closed.
    assert!(
        exited_at - sent < Duration::from_secs(3),
        "{:?}",
        exited_at - sent
    );
}
