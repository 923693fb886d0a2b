//! The controller's pod list and watch over protobuf, driven through kube's
//! mock client with the bytes a real API server sent
//! (tests/fixtures/pods-protobuf): what it asks for, the events it yields,
//! a relist after 410, and the switch to JSON where protobuf is refused.

use futures::StreamExt;
use http::{Request, Response};
use kube::client::Body;
use kube::runtime::watcher::Event;
use nfguard::kube_protobuf::pods::{self, Encoding};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower_test::mock;

const LIST_PB: &[u8] = include_bytes!("../fixtures/pods-protobuf/list.pb");
const LIST_JSON: &[u8] = include_bytes!("../fixtures/pods-protobuf/list.json");
const WATCH_PB: &[u8] = include_bytes!("../fixtures/pods-protobuf/watch.pb");
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

type H = mock::Handle<Request<Body>, Response<Body>>;

async fn next(h: &mut H) -> (Request<Body>, mock::SendResponse<Response<Body>>) {
    tokio::time::timeout(Duration::from_secs(10), h.next_request())
        .await
        .expect("a request within 10 s")
        .expect("the stream's client is alive")
}

fn answer(status: u16, content_type: &str, body: &[u8]) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Body::from(body.to_vec()))
        .unwrap()
}

fn query(r: &Request<Body>) -> String {
    r.uri().query().unwrap_or("").to_string()
}

fn accept(r: &Request<Body>) -> String {
    r.headers()
        .get("accept")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// A 200 watch stream carrying one ERROR event: Status 410 Expired, as
/// the API server sends when a resourceVersion is too old.
fn expired_frame() -> Vec<u8> {
    fn field(out: &mut Vec<u8>, n: u8, b: &[u8]) {
        out.push(n << 3 | 2);
        let mut len = b.len();
        while len >= 0x80 {
            out.push((len as u8) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(b);
    }
    let mut status = Vec::new();
    field(&mut status, 4, b"Expired");
    status.extend_from_slice(&[6 << 3, 0x9a, 0x03]); // code 410
    let mut type_meta = Vec::new();
    field(&mut type_meta, 2, b"Status");
    let mut object = b"k8s\0".to_vec();
    field(&mut object, 1, &type_meta);
    field(&mut object, 2, &status);
    let mut raw = Vec::new();
    field(&mut raw, 1, &object);
    let mut event = Vec::new();
    field(&mut event, 1, b"ERROR");
    field(&mut event, 2, &raw);
    let mut frame = (event.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&event);
    frame
}

fn told() -> (
    Arc<Mutex<Vec<Encoding>>>,
    impl Fn(Encoding) + Send + Sync + 'static,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    (seen, move |e| s.lock().unwrap().push(e))
}

fn kind(e: &Event<k8s_openapi::api::core::v1::Pod>) -> &'static str {
    match e {
        Event::Init => "Init",
        Event::InitApply(_) => "InitApply",
        Event::InitDone => "InitDone",
        Event::Apply(_) => "Apply",
        Event::Delete(_) => "Delete",
    }
}

#[tokio::test]
async fn pods_are_listed_in_one_protobuf_page_then_watched_from_its_version() {
    let (svc, mut h) = mock::pair::<Request<Body>, Response<Body>>();
    let (seen, tell) = told();
    let mut events = pods::all(kube::Client::new(svc, "default"), pods::Choice::Auto, tell);
    let server = tokio::spawn(async move {
        let (list, send) = next(&mut h).await;
        assert_eq!(list.uri().path(), "/api/v1/pods");
        // One page: no limit, no continue.
        assert_eq!(query(&list), "");
        assert_eq!(accept(&list), PROTOBUF);
        send.send_response(answer(200, PROTOBUF, LIST_PB));

        let (watch, send) = next(&mut h).await;
        let q = query(&watch);
        assert_eq!(accept(&watch), PROTOBUF);
        for part in [
            "watch=true",
            "allowWatchBookmarks=true",
            "timeoutSeconds=290",
        ] {
            assert!(q.contains(part), "{q}");
        }
        let rv = q.split("resourceVersion=").nth(1).unwrap().to_string();
        send.send_response(answer(
            200,
            "application/vnd.kubernetes.protobuf;stream=watch",
            WATCH_PB,
        ));

        // The server ended that watch: the next resumes from its last bookmark.
        let (watch, send) = next(&mut h).await;
        assert!(
            query(&watch).ends_with("resourceVersion=1081"),
            "{}",
            query(&watch)
        );
        send.send_response(answer(
            200,
            "application/vnd.kubernetes.protobuf;stream=watch",
            &expired_frame(),
        ));

        // 410 Expired: list again.
        let (relist, send) = next(&mut h).await;
        assert_eq!(
            (relist.uri().path(), query(&relist).as_str()),
            ("/api/v1/pods", "")
        );
        send.send_response(answer(200, PROTOBUF, LIST_PB));
        rv
    });
    let mut kinds = Vec::new();
    let mut errors = Vec::new();
    let mut inits = 0;
    while inits < 2 {
        let e = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap();
        match e {
            Ok(e) => {
                inits += usize::from(matches!(e, Event::InitDone));
                kinds.push(kind(&e));
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    let rv = server.await.unwrap();
    assert!(!rv.is_empty());
    let count = |k: &str| kinds.iter().filter(|x| **x == k).count();
    assert_eq!(
        (count("Init"), count("InitApply"), count("InitDone")),
        (2, 22, 2)
    );
    assert_eq!((count("Apply"), count("Delete")), (9, 4), "{kinds:?}");
    assert_eq!(errors, ["the API server answered 410 Expired"]);
    // Told once, after the first list.
    assert_eq!(*seen.lock().unwrap(), [Encoding::Protobuf]);
}

/// Refused (406), or answered in JSON by a proxy: kube's JSON watcher from
/// then on, and the same pods.
#[tokio::test]
async fn where_protobuf_is_refused_the_pods_are_listed_as_json() {
    for (status, content_type, body) in [
        (
            406,
            "application/json",
            &b"{\"kind\":\"Status\",\"code\":406}"[..],
        ),
        (200, "application/json", LIST_JSON),
    ] {
        let (svc, mut h) = mock::pair::<Request<Body>, Response<Body>>();
        let (seen, tell) = told();
        let mut events = pods::all(kube::Client::new(svc, "default"), pods::Choice::Auto, tell);
        let server = tokio::spawn(async move {
            let (first, send) = next(&mut h).await;
            assert_eq!(accept(&first), PROTOBUF);
            send.send_response(answer(status, content_type, body));
            let (json, send) = next(&mut h).await;
            assert_eq!(json.uri().path(), "/api/v1/pods");
            assert_ne!(accept(&json), PROTOBUF);
            send.send_response(answer(200, "application/json", LIST_JSON));
            h
        });
        let mut kinds = Vec::new();
        loop {
            let e = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .unwrap()
                .unwrap();
            match e {
                Ok(e) => kinds.push(kind(&e)),
                Err(e) => panic!("{status} {content_type}: {e}"),
            }
            if kinds.last() == Some(&"InitDone") {
                break;
            }
        }
        let _h = server.await.unwrap();
        assert_eq!(kinds.len(), 13, "{status}: {kinds:?}");
        assert_eq!(*seen.lock().unwrap(), [Encoding::Json], "{status}");
    }
}

/// `--pods-encoding json`: kube's paged JSON from the first request.
#[tokio::test]
async fn json_chosen_asks_for_json_from_the_start() {
    let (svc, mut h) = mock::pair::<Request<Body>, Response<Body>>();
    let (seen, tell) = told();
    let mut events = pods::all(kube::Client::new(svc, "default"), pods::Choice::Json, tell);
    let server = tokio::spawn(async move {
        let (first, send) = next(&mut h).await;
        assert_ne!(accept(&first), PROTOBUF);
        assert!(query(&first).contains("limit=500"), "{}", query(&first));
        send.send_response(answer(200, "application/json", LIST_JSON));
        h
    });
    let mut n = 0;
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        n += 1;
        if matches!(e, Event::InitDone) {
            break;
        }
    }
    let _h = server.await.unwrap();
    assert_eq!(n, 13);
    assert_eq!(*seen.lock().unwrap(), [Encoding::Json]);
}
