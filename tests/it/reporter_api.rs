//! The reporter's API calls against kube's mock client: each expected
//! request's method, path, content type and body are asserted (not the
//! exact query string, which changes between kube releases, beyond the
//! field manager). The loop runs with paused tokio time, so back-off delays
//! are measured without waiting for them.

use http::{Method, Request, Response};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::client::Body;
use nfguard::api::{BackendFacts, BackendsFacts, NodeNetfilterProfileStatus, Writer};
use nfguard::reporter::core::Backoff;
use nfguard::reporter::metrics::Metrics;
use nfguard::reporter::nft_watch::Event;
use nfguard::reporter::prober::{PolledState, ProbeError, Prober};
use nfguard::reporter::profile_api::ProfileWriter;
use nfguard::reporter::run::{Io, LoopConfig, run_loop};
use nfguard::reporter::sink::KubeSink;
use nfguard::runtime::clock::Clock;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tower_test::mock::{self, Handle, SendResponse};

type MockHandle = Handle<Request<Body>, Response<Body>>;

const NODE: &str = "node-a";
const UID: &str = "3f1c9d2e-0000-4000-8000-00000000abcd";
const PROFILES: &str = "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles";

/// Fields the reporter may send; everything else belongs to the controller.
const REPORTER_FIELDS: &[&str] = &[
    "iptables",
    "kernel",
    "backends",
    "activeBackend",
    "minReaderVersion",
    "bridge",
    "ipForward",
    "hazards",
    "nativeFeatures",
    "wrapperBackend",
    "nativeTables",
    "nativeTablesNotListed",
    "kubeProxyMode",
    "kubeletMarkers",
    "lastProbeTime",
    "probeError",
    "probeIntervalSeconds",
];

struct Seen {
    method: Method,
    path: String,
    query: String,
    content_type: String,
    body: Value,
    at: Instant,
    reply: SendResponse<Response<Body>>,
}

async fn next(handle: &mut MockHandle) -> Seen {
    let (req, reply) = tokio::time::timeout(Duration::from_secs(600), handle.next_request())
        .await
        .expect("a request within 600 s of (paused) time")
        .expect("the client sent a request");
    let at = Instant::now();
    let (parts, body) = req.into_parts();
    let bytes = body.collect_bytes().await.expect("request body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("JSON request body")
    };
    Seen {
        method: parts.method,
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or_default().to_string(),
        content_type: parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        body,
        at,
        reply,
    }
}

fn respond(reply: SendResponse<Response<Body>>, code: u16, body: Value) {
    let resp = Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap();
    reply.send_response(resp);
}

fn api_status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("mock {reason}"), "reason": reason, "code": code})
}

fn profile_json() -> Value {
    json!({"apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
           "metadata": {"name": NODE, "uid": "p-1", "resourceVersion": "1"},
           "spec": {"nodeName": NODE}})
}

/// Expect GET node -> uid, then POST profile with the ownerReference; reply `create_code`.
async fn expect_ensure(h: &mut MockHandle, create_code: u16) {
    let get = next(h).await;
    assert_eq!(get.method, Method::GET);
    assert_eq!(get.path, format!("/api/v1/nodes/{NODE}"));
    respond(
        get.reply,
        200,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": UID}}),
    );
    let post = next(h).await;
    assert_eq!(post.method, Method::POST);
    assert_eq!(post.path, PROFILES);
    assert_eq!(post.body["metadata"]["name"], NODE);
    assert_eq!(post.body["spec"]["nodeName"], NODE);
    assert_eq!(
        post.body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": UID}])
    );
    assert!(
        post.body.get("status").is_none(),
        "create carries no status"
    );
    if create_code == 201 {
        respond(post.reply, 201, profile_json());
    } else {
        respond(
            post.reply,
            create_code,
            api_status(create_code, "AlreadyExists"),
        );
    }
}

/// Expect the status SSA; returns the status sent, replying `code`.
async fn expect_apply(h: &mut MockHandle, code: u16) -> (Value, Instant) {
    let p = next(h).await;
    assert_eq!(p.method, Method::PATCH);
    assert_eq!(p.path, format!("{PROFILES}/{NODE}/status"));
    assert_eq!(p.content_type, "application/apply-patch+yaml");
    assert!(
        p.query.contains("fieldManager=nfguard-reporter"),
        "query: {}",
        p.query
    );
    assert_eq!(p.body["apiVersion"], "nfguard.io/v1alpha1");
    assert_eq!(p.body["kind"], "NodeNetfilterProfile");
    assert_eq!(p.body["metadata"]["name"], NODE);
    assert!(p.body.get("spec").is_none(), "status apply sends no spec");
    let status = p.body["status"].clone();
    let keys: Vec<&String> = status.as_object().expect("status object").keys().collect();
    for k in &keys {
        assert!(
            REPORTER_FIELDS.contains(&k.as_str()),
            "non-reporter field {k} sent"
        );
    }
    let at = p.at;
    reply_with_status(p.reply, code, &status);
    (status, at)
}

/// 200 with the profile carrying `status`, or the error `code`.
fn reply_with_status(reply: SendResponse<Response<Body>>, code: u16, status: &Value) {
    if code == 200 {
        let mut obj = profile_json();
        obj["status"] = status.clone();
        respond(reply, 200, obj);
    } else {
        let reason = match code {
            409 => "Conflict",
            404 => "NotFound",
            _ => "InternalError",
        };
        respond(reply, code, api_status(code, reason));
    }
}

/// Expect a heartbeat: a merge patch of the status carrying only
/// `lastProbeTime`; returns it, replying `code`.
async fn expect_heartbeat(h: &mut MockHandle, code: u16) -> (Value, Instant) {
    let p = next(h).await;
    assert_eq!(p.method, Method::PATCH);
    assert_eq!(p.path, format!("{PROFILES}/{NODE}/status"));
    assert_eq!(p.content_type, "application/merge-patch+json");
    assert!(
        p.query.contains("fieldManager=nfguard-reporter"),
        "query: {}",
        p.query
    );
    let keys: Vec<&String> = p.body.as_object().expect("patch object").keys().collect();
    assert_eq!(keys, ["status"], "a heartbeat patches the status only");
    let status = p.body["status"].clone();
    let keys: Vec<&String> = status.as_object().expect("status object").keys().collect();
    assert_eq!(
        keys,
        ["lastProbeTime"],
        "a heartbeat sends the probe time alone"
    );
    let at = p.at;
    reply_with_status(p.reply, code, &status);
    (status, at)
}

fn sample_status(rules: u32) -> NodeNetfilterProfileStatus {
    NodeNetfilterProfileStatus {
        backends: Some(BackendsFacts {
            nft: BackendFacts {
                tables: 1,
                chains: 3,
                rules,
                hint_chain: true,
                canary_chain: true,
                marker_tables: vec![],
            },
            legacy: BackendFacts::default(),
        }),
        // Controller-owned: must never be sent by the reporter.
        writers: Some(vec![Writer {
            pod: "kube-system/x".into(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// Returns scripted probe results in order, then repeats the last one.
struct ScriptedProber {
    script: Mutex<VecDeque<Result<NodeNetfilterProfileStatus, ProbeError>>>,
    last: Mutex<Option<Result<NodeNetfilterProfileStatus, ProbeError>>>,
    calls: AtomicU64,
}

impl ScriptedProber {
    fn new(script: Vec<Result<NodeNetfilterProfileStatus, ProbeError>>) -> Self {
        Self {
            script: Mutex::new(script.into()),
            last: Mutex::new(None),
            calls: AtomicU64::new(0),
        }
    }
}

#[async_trait::async_trait]
impl Prober for ScriptedProber {
    async fn probe(&self) -> Result<NodeNetfilterProfileStatus, ProbeError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let next = self.script.lock().unwrap().pop_front();
        let mut last = self.last.lock().unwrap();
        if let Some(n) = next {
            *last = Some(n);
        }
        last.clone().expect("a scripted probe")
    }
    async fn polled_state(&self) -> Option<PolledState> {
        None
    }
}

/// Wall time derived from paused tokio time, so lastProbeTime moves with it:
/// `START` plus the paused time elapsed.
struct PausedClock(Instant);

const START: &str = "2026-03-01T12:00:00Z";

impl Clock for PausedClock {
    fn now(&self) -> Timestamp {
        let elapsed = SignedDuration::try_from(self.0.elapsed()).unwrap();
        START.parse::<Timestamp>().unwrap() + elapsed
    }
}

fn loop_cfg() -> LoopConfig {
    LoopConfig {
        heartbeat: Duration::from_secs(60),
        poll: Duration::from_secs(10),
        debounce_quiet: Duration::from_millis(100),
        debounce_max: Duration::from_millis(300),
        backoff: Backoff::default(),
        write_timeout: Duration::from_secs(30),
        once: false,
    }
}

/// Runs the loop against the mock API while `script` drives the server,
/// then stops the loop.
async fn with_loop<F, Fut>(
    prober: &ScriptedProber,
    events: Option<mpsc::Receiver<Event>>,
    script: F,
) where
    F: FnOnce(MockHandle) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let mut sink = KubeSink(ProfileWriter::new(client, NODE));
    let (stop_tx, stop_rx) = watch::channel(false);
    let clock = PausedClock(Instant::now());
    let mut jitter = || 0.0;
    let cfg = loop_cfg();
    let lp = run_loop(
        &cfg,
        Io {
            prober,
            sink: &mut sink,
            nft_events: events,
            clock: &clock,
            jitter: &mut jitter,
            metrics: Metrics::new(600),
            shutdown: stop_rx,
        },
    );
    let server = async move {
        script(handle).await;
        stop_tx.send(true).unwrap();
    };
    let (res, ()) = tokio::join!(lp, server);
    res.expect("loop ends cleanly on shutdown");
}

#[tokio::test]
async fn ensure_creates_profile_owned_by_node_then_applies_only_reporter_fields() {
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let mut writer = ProfileWriter::new(client, NODE);
    let server = async move {
        expect_ensure(&mut handle, 201).await;
        let (status, _) = expect_apply(&mut handle, 200).await;
        assert_eq!(status["backends"]["nft"]["rules"], 5);
        assert!(status.get("writers").is_none());
        // A second write does not re-create the profile.
        let (status, _) = expect_apply(&mut handle, 200).await;
        assert_eq!(status["backends"]["nft"]["rules"], 6);
    };
    let client_side = async move {
        writer.write(&sample_status(5)).await.expect("first write");
        writer.write(&sample_status(6)).await.expect("second write");
    };
    tokio::join!(server, client_side);
}

#[tokio::test]
async fn a_heartbeat_sends_the_probe_time_alone_and_new_facts_the_whole_status() {
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let mut writer = ProfileWriter::new(client, NODE);
    let at = |status: NodeNetfilterProfileStatus, t: &str| NodeNetfilterProfileStatus {
        last_probe_time: Some(t.into()),
        probe_interval_seconds: Some(60),
        ..status
    };
    let server = async move {
        expect_ensure(&mut handle, 201).await;
        expect_apply(&mut handle, 200).await;
        let (hb, _) = expect_heartbeat(&mut handle, 200).await;
        assert_eq!(hb["lastProbeTime"], "2026-03-01T12:01:00Z");
        let (changed, _) = expect_apply(&mut handle, 200).await;
        assert_eq!(changed["backends"]["nft"]["rules"], 6);
        assert_eq!(changed["lastProbeTime"], "2026-03-01T12:01:30Z");
        // A failed heartbeat leaves the API's copy unknown: whole again.
        expect_heartbeat(&mut handle, 500).await;
        let (again, _) = expect_apply(&mut handle, 200).await;
        assert_eq!(again["backends"]["nft"]["rules"], 6);
    };
    let client_side = async move {
        writer.write(&at(sample_status(5), START)).await.unwrap();
        let hb = at(sample_status(5), "2026-03-01T12:01:00Z");
        writer.write(&hb).await.expect("heartbeat");
        let changed = at(sample_status(6), "2026-03-01T12:01:30Z");
        writer.write(&changed).await.expect("new facts");
        let hb = at(sample_status(6), "2026-03-01T12:02:30Z");
        assert_eq!(
            writer.write(&hb).await.unwrap_err().http_status(),
            Some(500)
        );
        writer.write(&hb).await.expect("retried whole");
    };
    tokio::join!(server, client_side);
}

#[tokio::test]
async fn existing_profile_is_fine_and_deleted_profile_is_recreated() {
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let mut writer = ProfileWriter::new(client, NODE);
    let server = async move {
        expect_ensure(&mut handle, 409).await; // AlreadyExists: the reporter restarted
        expect_apply(&mut handle, 200).await;
        expect_heartbeat(&mut handle, 404).await; // someone deleted it
        expect_ensure(&mut handle, 201).await;
        expect_apply(&mut handle, 200).await; // the facts again, whole
    };
    let client_side = async move {
        writer
            .write(&sample_status(1))
            .await
            .expect("existing profile");
        let err = writer.write(&sample_status(1)).await.unwrap_err();
        assert_eq!(err.http_status(), Some(404));
        writer.write(&sample_status(1)).await.expect("re-created");
    };
    tokio::join!(server, client_side);
}

#[tokio::test(start_paused = true)]
async fn api_errors_back_off_exponentially_then_succeed_while_probing_continues() {
    let prober = ScriptedProber::new(vec![Ok(sample_status(5))]);
    // Notifications available (none arrive), so polls alone do not probe.
    let (tx, rx) = mpsc::channel::<Event>(1);
    with_loop(&prober, Some(rx), |mut h| async move {
        let _tx = tx;
        expect_ensure(&mut h, 201).await;
        let (_, t1) = expect_apply(&mut h, 500).await;
        let (_, t2) = expect_apply(&mut h, 409).await;
        let (_, t3) = expect_apply(&mut h, 500).await;
        let (status, t4) = expect_apply(&mut h, 200).await;
        // jitter 0: delays are half of 1 s, 2 s, 4 s.
        assert_eq!(t2 - t1, Duration::from_millis(500));
        assert_eq!(t3 - t2, Duration::from_secs(1));
        assert_eq!(t4 - t3, Duration::from_secs(2));
        assert_eq!(status["backends"]["nft"]["rules"], 5);
        // Next write only at the heartbeat, 60 s after the accepted one.
        let (hb, t5) = expect_heartbeat(&mut h, 200).await;
        assert_eq!(t5 - t4, Duration::from_secs(60));
        assert_eq!(hb["lastProbeTime"], "2026-03-01T12:01:03Z", "START + 63 s");
    })
    .await;
    // Start, each retry re-probes (3), heartbeat (1).
    assert_eq!(prober.calls.load(Ordering::SeqCst), 5);
}

#[tokio::test(start_paused = true)]
async fn failed_probe_is_reported_as_probe_error_and_hazard() {
    let prober = ScriptedProber::new(vec![
        Ok(sample_status(2)),
        Err(ProbeError("panicked".into())),
    ]);
    let (tx, rx) = mpsc::channel(8);
    with_loop(&prober, Some(rx), |mut h| async move {
        expect_ensure(&mut h, 201).await;
        let (first, t1) = expect_apply(&mut h, 200).await;
        assert!(first.get("probeError").is_none());
        // An nf_tables notification triggers the next probe, which fails.
        tx.send(Event::Changed).await.unwrap();
        let (failed, t2) = expect_apply(&mut h, 200).await;
        assert!(
            t2 - t1 < Duration::from_secs(1),
            "change reported within 1 s"
        );
        assert_eq!(failed["probeError"], "probe task failed: panicked");
        assert_eq!(
            failed["backends"]["nft"]["rules"], 2,
            "last good facts kept"
        );
        let codes: Vec<&str> = failed["hazards"]
            .as_array()
            .expect("hazards")
            .iter()
            .filter_map(|h| h["code"].as_str())
            .collect();
        assert_eq!(codes, ["ProbeFailed"]);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn notification_bursts_are_debounced_into_one_write_and_no_change_writes_nothing() {
    let prober = ScriptedProber::new(vec![Ok(sample_status(1)), Ok(sample_status(2))]);
    let (tx, rx) = mpsc::channel(64);
    with_loop(&prober, Some(rx), |mut h| async move {
        expect_ensure(&mut h, 201).await;
        let (_, t1) = expect_apply(&mut h, 200).await;
        for _ in 0..20 {
            tx.send(Event::Changed).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (st, t2) = expect_apply(&mut h, 200).await;
        assert_eq!(st["backends"]["nft"]["rules"], 2);
        assert!(t2 - t1 < Duration::from_millis(300), "{:?}", t2 - t1);
        // A notification that changes nothing probes but does not write;
        // the next write is the heartbeat.
        tx.send(Event::Overflow).await.unwrap();
        let (_, t3) = expect_heartbeat(&mut h, 200).await;
        assert_eq!(t3 - t2, Duration::from_secs(60));
    })
    .await;
    assert_eq!(
        prober.calls.load(Ordering::SeqCst),
        4,
        "start, burst, no-op, heartbeat"
    );
}

#[tokio::test(start_paused = true)]
async fn without_notifications_or_polled_state_every_poll_probes_fully() {
    let prober = ScriptedProber::new(vec![
        Ok(sample_status(1)),
        Ok(sample_status(1)),
        Ok(sample_status(4)),
    ]);
    with_loop(&prober, None, |mut h| async move {
        expect_ensure(&mut h, 201).await;
        let (_, t1) = expect_apply(&mut h, 200).await;
        // Poll at 10 s: unchanged, no write. Poll at 20 s: changed, written.
        let (st, t2) = expect_apply(&mut h, 200).await;
        assert_eq!(st["backends"]["nft"]["rules"], 4);
        assert_eq!(t2 - t1, Duration::from_secs(20));
    })
    .await;
    assert_eq!(prober.calls.load(Ordering::SeqCst), 3);
}
