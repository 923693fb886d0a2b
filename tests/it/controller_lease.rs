//! Leader election against a fake Lease API (kube's mock client): acquire,
//! renewal, hand-over after expiry, a lost race (409), renewal loss ->
//! leadership ends, and release on shutdown. The clock is a ManualClock.

use http::{Request, Response};
use http_body_util::BodyExt;
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use nfguard::controller::lease::{LeaderElector, LeaseConfig};
use nfguard::runtime::clock::ManualClock;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/nfguard-system/leases";
const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/nfguard-system/leases/nfguard-controller";

#[derive(Default)]
struct FakeLeases {
    lease: Option<Value>,
    rv: u64,
    /// Answer everything with 500 (API server unreachable for us).
    failing: bool,
    /// After the next GET, someone else writes the Lease (a lost race).
    interloper: bool,
    /// (method, path, holderIdentity written).
    log: Vec<(String, String, Option<String>)>,
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind":"Status","apiVersion":"v1","status":"Failure","reason":reason,"code":code,"message":reason})
}

fn serve(state: Arc<Mutex<FakeLeases>>) -> (kube::Client, tokio::task::JoinHandle<()>) {
    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let task = tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (method, path) = (parts.method.to_string(), parts.uri.path().to_string());
            let (code, out) = {
                let mut s = state.lock().unwrap();
                let holder = body["spec"]["holderIdentity"].as_str().map(str::to_string);
                s.log.push((method.clone(), path.clone(), holder));
                if s.failing {
                    (500, status(500, "InternalError"))
                } else {
                    match (method.as_str(), path.as_str()) {
                        ("GET", LEASE) => match s.lease.clone() {
                            None => (404, status(404, "NotFound")),
                            Some(l) => {
                                if s.interloper {
                                    s.interloper = false;
                                    s.rv += 1;
                                    let rv = s.rv.to_string();
                                    s.lease.as_mut().unwrap()["metadata"]["resourceVersion"] =
                                        json!(rv);
                                }
                                (200, l)
                            }
                        },
                        ("POST", LEASES) if s.lease.is_some() => {
                            (409, status(409, "AlreadyExists"))
                        }
                        ("POST", LEASES) => {
                            s.rv += 1;
                            let mut l = body.clone();
                            l["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                            s.lease = Some(l.clone());
                            (201, l)
                        }
                        ("PUT", LEASE) => {
                            let current = s
                                .lease
                                .as_ref()
                                .map(|l| l["metadata"]["resourceVersion"].clone());
                            if current != Some(body["metadata"]["resourceVersion"].clone()) {
                                (409, status(409, "Conflict"))
                            } else {
                                s.rv += 1;
                                let mut l = body.clone();
                                l["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                                s.lease = Some(l.clone());
                                (200, l)
                            }
                        }
                        _ => panic!("unexpected {method} {path}"),
                    }
                }
            };
            send.send_response(
                Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&out).unwrap()))
                    .unwrap(),
            );
        }
    });
    (client, task)
}

fn elector(client: &kube::Client, who: &str, clock: &ManualClock) -> LeaderElector {
    LeaderElector::new(
        client.clone(),
        LeaseConfig::new("nfguard-controller", "nfguard-system", who),
        Arc::new(clock.clone()),
    )
}

fn holder(state: &Arc<Mutex<FakeLeases>>) -> Option<String> {
    let s = state.lock().unwrap();
    s.lease.as_ref()?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_string)
}

fn writes_since(state: &Arc<Mutex<FakeLeases>>, from: usize) -> Vec<(String, Option<String>)> {
    state.lock().unwrap().log[from..]
        .iter()
        .filter(|(m, _, _)| m != "GET")
        .map(|(m, _, h)| (m.clone(), h.clone()))
        .collect()
}

fn log_len(state: &Arc<Mutex<FakeLeases>>) -> usize {
    state.lock().unwrap().log.len()
}

#[tokio::test]
async fn hand_over_renewal_loss_race_and_release() {
    let state = Arc::new(Mutex::new(FakeLeases::default()));
    let (client, server) = serve(state.clone());
    let clock = ManualClock::new("2026-03-01T12:00:00Z".parse::<Timestamp>().unwrap());
    let mut a = elector(&client, "controller-a", &clock);
    let mut b = elector(&client, "controller-b", &clock);

    // A creates the Lease and leads; B waits without writing.
    assert!(a.round().await);
    assert_eq!(holder(&state), Some("controller-a".into()));
    let mark = log_len(&state);
    assert!(!b.round().await);
    assert!(
        writes_since(&state, mark).is_empty(),
        "a standby never writes a held lease"
    );

    // A renews.
    clock.advance(Duration::from_secs(5));
    let mark = log_len(&state);
    assert!(a.round().await);
    assert_eq!(
        writes_since(&state, mark),
        vec![("PUT".into(), Some("controller-a".into()))]
    );
    let renewed = state.lock().unwrap().lease.clone().unwrap();
    assert_eq!(renewed["spec"]["renewTime"], "2026-03-01T12:00:05.000000Z");
    assert_eq!(renewed["spec"]["leaseDurationSeconds"], 15);

    // A stops renewing (crashed): before expiry B still waits, after it takes over.
    clock.advance(Duration::from_secs(14));
    assert!(!b.round().await);
    clock.advance(Duration::from_secs(2));
    assert!(b.round().await);
    let taken = state.lock().unwrap().lease.clone().unwrap();
    assert_eq!(taken["spec"]["holderIdentity"], "controller-b");
    assert_eq!(taken["spec"]["leaseTransitions"], 1);
    // A comes back: it sees B's fresh lease and does not lead.
    assert!(!a.round().await);

    // B loses the API server: it keeps leading within its renew deadline (10 s), then stops.
    state.lock().unwrap().failing = true;
    clock.advance(Duration::from_secs(3));
    assert!(b.round().await, "within the renew deadline");
    clock.advance(Duration::from_secs(7));
    assert!(
        !b.round().await,
        "renewal lost past the deadline: stop reconciling"
    );
    state.lock().unwrap().failing = false;

    // B's lease has expired for A too; A tries, but someone writes between its GET and PUT.
    clock.advance(Duration::from_secs(10));
    state.lock().unwrap().interloper = true;
    assert!(!a.round().await, "a lost race (409) is not leadership");
    assert!(a.round().await, "the next round takes the expired lease");
    assert_eq!(holder(&state), Some("controller-a".into()));

    // Graceful shutdown: A releases, B takes over at once (no expiry wait).
    a.release().await.unwrap();
    assert_eq!(holder(&state), None);
    assert!(b.round().await);
    assert_eq!(holder(&state), Some("controller-b".into()));

    drop((a, b, client));
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn run_publishes_leadership_and_releases_on_stop() {
    let state = Arc::new(Mutex::new(FakeLeases::default()));
    let (client, server) = serve(state.clone());
    let clock = ManualClock::new("2026-03-01T12:00:00Z".parse::<Timestamp>().unwrap());
    let mut cfg = LeaseConfig::new("nfguard-controller", "nfguard-system", "controller-a");
    cfg.retry_period = Duration::from_millis(20);
    let a = LeaderElector::new(client.clone(), cfg, Arc::new(clock.clone()));
    let (tx, mut rx) = tokio::sync::watch::channel(false);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(a.run(tx, stop_rx));
    tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|l| *l))
        .await
        .expect("leadership published")
        .unwrap();
    stop_tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(holder(&state), None, "released on stop");
    assert!(!*rx.borrow());
    drop(client);
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap();
}
