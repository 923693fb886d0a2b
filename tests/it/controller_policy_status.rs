//! The NetfilterPolicy status controller against kube's mock client: it lists
//! and watches the policies, applies the status of the one whose spec changed
//! validity (server-side apply under the controller's field manager), leaves
//! the one already in sync alone, records an event and counts the invalid one.

use crate::support::kube_mock;

use http::{Request, Response};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use kube_mock::{Captured as Seen, capture};
use nfguard::controller::apply::policy_status::run_policy_status;
use nfguard::controller::metrics::Metrics;
use nfguard::runtime::admin::Exposition;
use nfguard::runtime::clock::ManualClock;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const NOW: &str = "2026-03-01T12:00:00Z";
const POLICIES: &str = "/apis/nfguard.io/v1alpha1/netfilterpolicies";

fn policy(name: &str, exempt: &[&str], status: Value) -> Value {
    json!({
        "apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicy",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 2,
                     "resourceVersion": "5"},
        "spec": {"action": "Warn", "exemptImages": exempt},
        "status": status,
    })
}

/// The status a valid policy at generation 2 already carries.
fn in_sync() -> Value {
    let cond = |t: &str, reason: &str, message: &str| {
        json!({"type": t, "status": "True", "reason": reason, "message": message,
               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 2})
    };
    json!({"observedGeneration": 2, "conditions": [
        cond("Valid", "SpecValid", "every field can be used"),
        cond("Accepted", "Judging", "the webhook and the controller judge the namespaces it selects with it"),
    ]})
}

/// Lists `items`, holds every watch open, answers status patches with the
/// patched object and events with themselves; records everything. A policy
/// sent on the returned channel is deleted: the held watch answers its
/// DELETED event.
type Deletions = tokio::sync::mpsc::UnboundedSender<Value>;
fn fake_api(items: Vec<Value>) -> (kube::Client, Arc<Mutex<Vec<Seen>>>, Deletions) {
    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let (delete_tx, mut deletions) = tokio::sync::mpsc::unbounded_channel::<Value>();
    tokio::spawn(async move {
        let mut watches = Vec::new();
        let reply = |code: u16, body: &Value| {
            Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(body).unwrap()))
                .unwrap()
        };
        loop {
            let (req, send) = tokio::select! {
                r = handle.next_request() => match r {
                    Some(r) => r,
                    None => break,
                },
                Some(object) = deletions.recv() => {
                    let send: tower_test::mock::SendResponse<Response<Body>> =
                        watches.pop().expect("a watch is open");
                    let mut line =
                        serde_json::to_vec(&json!({"type": "DELETED", "object": object})).unwrap();
                    line.push(b'\n');
                    send.send_response(
                        Response::builder()
                            .status(200)
                            .header("content-type", "application/json")
                            .body(Body::from(line))
                            .unwrap(),
                    );
                    continue;
                }
            };
            let s = capture(req).await;
            log.lock().unwrap().push(s.clone());
            if s.query.contains("watch=true") {
                watches.push(send);
            } else if s.path.starts_with("/apis/events.k8s.io/") {
                send.send_response(reply(201, &s.body));
            } else if s.method == "PATCH" {
                let name = s
                    .path
                    .trim_end_matches("/status")
                    .rsplit('/')
                    .next()
                    .unwrap();
                let mut out = items
                    .iter()
                    .find(|p| p["metadata"]["name"] == name)
                    .cloned()
                    .unwrap_or_else(|| panic!("patch of an unknown policy {name}"));
                out["status"] = s.body["status"].clone();
                send.send_response(reply(200, &out));
            } else if s.method == "GET" && s.path == POLICIES {
                let list = json!({"apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicyList",
                                  "metadata": {"resourceVersion": "5"}, "items": items});
                send.send_response(reply(200, &list));
            } else {
                panic!("unexpected request {} {}", s.method, s.path);
            }
        }
        drop(watches);
    });
    (client, seen, delete_tx)
}

/// run_policy_status against `client`: its metrics, the stop signal, the task.
fn spawn_policy_status(
    client: kube::Client,
) -> (
    Arc<Metrics>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "nfguard-controller".into(),
            instance: Some("test".into()),
        },
    );
    let metrics = Arc::new(Metrics::new());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(run_policy_status(
        client,
        Arc::new(ManualClock::new(NOW.parse::<Timestamp>().unwrap())),
        metrics.clone(),
        recorder,
        async move {
            let _ = stop_rx.await;
        },
    ));
    (metrics, stop_tx, run)
}

#[tokio::test]
async fn an_invalid_policy_gets_its_status_an_event_and_is_counted() {
    let (client, seen, _) = fake_api(vec![
        policy("broken", &["ok:*", "a["], Value::Null),
        policy("fine", &["ok:*"], in_sync()),
    ]);
    let (metrics, stop_tx, run) = spawn_policy_status(client);
    let counted = async {
        while !metrics
            .encode()
            .contains("nfguard_controller_invalid_policies 1\n")
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), counted)
        .await
        .unwrap_or_else(|_| panic!("never counted: {}", metrics.encode()));
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the controller stops when told")
        .unwrap();

    let seen = seen.lock().unwrap().clone();
    let patches: Vec<&Seen> = seen.iter().filter(|s| s.method == "PATCH").collect();
    assert_eq!(
        patches.len(),
        1,
        "only the changed policy is written: {patches:?}"
    );
    let p = patches[0];
    assert_eq!(p.path, format!("{POLICIES}/broken/status"));
    assert!(
        p.query.contains("fieldManager=nfguard-controller"),
        "{}",
        p.query
    );
    assert!(p.query.contains("force=true"), "{}", p.query);
    assert_eq!(p.content_type, "application/apply-patch+yaml");
    assert_eq!(p.body["apiVersion"], "nfguard.io/v1alpha1");
    assert_eq!(p.body["kind"], "NetfilterPolicy");
    assert_eq!(p.body["metadata"], json!({"name": "broken"}));
    assert!(p.body.get("spec").is_none(), "status only: {}", p.body);
    assert_eq!(p.body["status"]["observedGeneration"], 2);
    let conditions = p.body["status"]["conditions"].as_array().unwrap();
    let valid = conditions.iter().find(|c| c["type"] == "Valid").unwrap();
    assert_eq!(
        (&valid["status"], &valid["reason"]),
        (&json!("False"), &json!("InvalidExemptImages"))
    );
    assert!(
        valid["message"]
            .as_str()
            .unwrap()
            .contains("exemptImages[1] \"a[\" is not a valid glob"),
        "{valid}"
    );
    assert_eq!(valid["lastTransitionTime"], NOW);
    let accepted = conditions.iter().find(|c| c["type"] == "Accepted").unwrap();
    assert_eq!(accepted["status"], "False");

    let events: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.path.starts_with("/apis/events.k8s.io/"))
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0].body;
    assert_eq!(
        (&e["reason"], &e["type"]),
        (&json!("PolicyInvalid"), &json!("Warning"))
    );
    assert_eq!(e["regarding"]["kind"], "NetfilterPolicy");
    assert_eq!(e["regarding"]["name"], "broken");
    assert!(e["note"].as_str().unwrap().contains("a["), "{e}");
    assert!(
        seen.iter()
            .any(|s| s.path == POLICIES && s.query.contains("watch=true")),
        "the policies are watched: {seen:?}"
    );
}

/// Deleting a policy triggers no reconcile in kube's Controller: the gauge
/// (and the NfguardPolicyInvalid alert) must still stop counting it.
#[tokio::test]
async fn a_deleted_invalid_policy_is_no_longer_counted() {
    let broken = policy("broken", &["a["], Value::Null);
    let (client, _seen, delete) =
        fake_api(vec![broken.clone(), policy("fine", &["ok:*"], in_sync())]);
    let (metrics, stop_tx, run) = spawn_policy_status(client);
    let counts = |n: u32| {
        let metrics = metrics.clone();
        async move {
            let want = format!("nfguard_controller_invalid_policies {n}\n");
            while !metrics.encode().contains(&want) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), counts(1))
        .await
        .unwrap_or_else(|_| panic!("never counted: {}", metrics.encode()));
    // Only now, with the reconcile done, the deletion arrives on the watch.
    delete.send(broken).unwrap();
    tokio::time::timeout(Duration::from_secs(30), counts(0))
        .await
        .unwrap_or_else(|_| panic!("the deleted policy is still counted: {}", metrics.encode()));
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the controller stops when told")
        .unwrap();
}
