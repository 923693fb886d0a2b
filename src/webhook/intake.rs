//! What a `/validate` request must pass before its body is judged:
//! - with `--client-ca-file`, a connection whose client certificate the TLS
//!   layer verified ([`ClientCertificate`], set by the accept loop); else 401;
//! - a length announced up front (`Content-Length`): the API server always
//!   sends one; a chunked body could only be charged the whole cap, and
//!   lets a caller hold it by trickling; else 411, before anything is
//!   reserved or read;
//! - a share of the byte budget for bodies in flight (the body cap is
//!   19 MiB, and nothing else bounds how many are read at once), in the
//!   lane of its size, within its peer's cap ([`budget`]); else 429. The
//!   share is held until the answer is built, as the body lives that long;
//! - a body that keeps to the rate floor ([`pace`]); else 408, and its
//!   share comes back at once.
//!
//! The accept loop caps connections per peer ([`MAX_CONNECTIONS_PER_PEER`]).

pub mod budget;
pub mod pace;
pub mod peers;

pub use budget::{BodyBudget, BodyShare, SMALL_BODY_BYTES, SMALL_LANE_MIN, Shortfall};
pub use pace::{RATE_FLOOR, RateFloor};
pub use peers::{Peer, PeerHold, PeerTally};

use super::metrics::{Metrics, Refusal};
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Version, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;

/// The largest object etcd stores (its default `--max-request-bytes`).
pub const ETCD_MAX_OBJECT_BYTES: usize = 3 << 19;

/// How much longer JSON can be than the stored object: a byte the API
/// server's encoder escapes (`<`, `>`, `&`, control characters, invalid
/// UTF-8) becomes six (`\u003c`).
pub const JSON_ESCAPE_FACTOR: usize = 6;

/// Bodies above this are refused with 413. It fits the largest review the
/// API server can send: an UPDATE carries `object` and `oldObject`, each up
/// to etcd's limit and fully escaped, plus 1 MiB for the envelope
/// (userInfo, options). A smaller cap would leave the biggest legitimate
/// updates to the failure policy. 19 MiB.
pub const MAX_BODY_BYTES: usize = 2 * ETCD_MAX_OBJECT_BYTES * JSON_ESCAPE_FACTOR + (1 << 20);

/// How long a request waits for body budget before 429: long enough for a
/// burst to drain, short against the API server's 10 s.
pub const BODY_WAIT: Duration = Duration::from_secs(2);

/// TLS connections one remote address may hold open. The API server needs
/// one per instance over HTTP/2 (what it speaks to webhooks), and over
/// HTTP/1.1 one per review in flight: 256 is more than an API server keeps
/// in flight to one webhook, while an attacker's idle connections cost
/// ~50 KiB each, ~13 MiB per address at the cap.
pub const MAX_CONNECTIONS_PER_PEER: u64 = 256;

/// Marks a request whose TLS connection presented a client certificate that
/// [`super::client_auth::ClientAuth`] accepted (inserted by the accept loop).
#[derive(Clone, Copy, Debug)]
pub struct ClientCertificate;

/// What the body will cost: its announced length, which hyper holds the
/// body to (`Content-Length`, over HTTP/1.1 and HTTP/2). Chunked, or HTTP/2
/// without a length: 411. Over the cap: 413, unread.
pub fn body_charge(announced: Option<u64>) -> Result<u64, StatusCode> {
    match announced {
        None => Err(StatusCode::LENGTH_REQUIRED),
        Some(n) if n > MAX_BODY_BYTES as u64 => Err(StatusCode::PAYLOAD_TOO_LARGE),
        Some(n) => Ok(n),
    }
}

/// The checks in front of `/validate`.
pub struct Intake {
    /// `--client-ca-file` is set: a verified client certificate is required.
    pub require_client_certificate: bool,
    pub bodies: Arc<BodyBudget>,
    pub metrics: Arc<Metrics>,
}

impl Intake {
    /// No client certificate required; the body budget of the default memory plan.
    pub fn open(metrics: Arc<Metrics>) -> Arc<Self> {
        let plan = crate::registry::MemoryPlan::default();
        Arc::new(Intake {
            require_client_certificate: false,
            bodies: BodyBudget::for_memory(&plan, metrics.body_bytes_in_flight.clone()),
            metrics,
        })
    }

    /// Count `why` and answer `status` with a fixed text (never the body's).
    fn refuse(&self, why: Refusal, status: StatusCode, text: &'static str) -> Response {
        self.metrics.refuse(why);
        (status, text).into_response()
    }
}

/// HTTP/1.1: close after an answer given with the body unread, so its rest
/// is not taken for the next request. (HTTP/2 resets the stream instead.)
fn closing(version: Version, mut r: Response) -> Response {
    if version <= Version::HTTP_11 {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// The middleware: refuse before the body is read, or read it at the rate
/// floor and pass it on holding its share of the budget until the answer
/// is built.
pub async fn gate(State(intake): State<Arc<Intake>>, req: Request, next: Next) -> Response {
    let version = req.version();
    if intake.require_client_certificate && req.extensions().get::<ClientCertificate>().is_none() {
        let text = "a client certificate is required for /validate\n";
        let r = intake.refuse(Refusal::NoClientCertificate, StatusCode::UNAUTHORIZED, text);
        return closing(version, r);
    }
    let bytes = match body_charge(req.body().size_hint().exact()) {
        Ok(n) => n,
        Err(StatusCode::LENGTH_REQUIRED) => {
            let text = "a Content-Length is required for /validate\n";
            let r = intake.refuse(Refusal::LengthRequired, StatusCode::LENGTH_REQUIRED, text);
            return closing(version, r);
        }
        Err(status) => {
            let text = format!("request body over {MAX_BODY_BYTES} bytes\n");
            return closing(version, (status, text).into_response());
        }
    };
    let peer = req.extensions().get::<Peer>().copied();
    let share = match intake.bodies.reserve_for(peer, bytes).await {
        Ok(share) => share,
        Err(short) => {
            let (why, text) = match short {
                Shortfall::Peer => (
                    Refusal::PeerBodyBytes,
                    "too many request body bytes in flight from this address; retry\n",
                ),
                Shortfall::Budget => (
                    Refusal::BodyBudget,
                    "too many request bodies in flight; retry\n",
                ),
            };
            let mut r = intake.refuse(why, StatusCode::TOO_MANY_REQUESTS, text);
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return closing(version, r);
        }
    };
    let (parts, body) = req.into_parts();
    let body = match pace::read(body, bytes, &RATE_FLOOR).await {
        Ok(body) => body,
        Err(pace::Unread::TooSlow) => {
            // The share goes back now, not when the answer is written.
            drop(share);
            let text = "request body arrived too slowly\n";
            let r = intake.refuse(Refusal::SlowBody, StatusCode::REQUEST_TIMEOUT, text);
            return closing(version, r);
        }
        Err(pace::Unread::Broken) => {
            drop(share);
            let text = "request body incomplete or unreadable\n";
            return closing(version, (StatusCode::BAD_REQUEST, text).into_response());
        }
    };
    let answer = next.run(Request::from_parts(parts, Body::from(body))).await;
    drop(share);
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_must_announce_its_length_within_the_cap() {
        let max = MAX_BODY_BYTES as u64;
        assert_eq!(body_charge(None), Err(StatusCode::LENGTH_REQUIRED));
        assert_eq!(body_charge(Some(0)), Ok(0));
        assert_eq!(body_charge(Some(1234)), Ok(1234));
        assert_eq!(body_charge(Some(max)), Ok(max));
        assert_eq!(
            body_charge(Some(max + 1)),
            Err(StatusCode::PAYLOAD_TOO_LARGE)
        );
    }

    #[test]
    fn the_budget_holds_at_least_one_largest_body_and_a_small_lane() {
        let b = BodyBudget::new(1, BODY_WAIT, Default::default());
        assert_eq!(b.large_lane(), MAX_BODY_BYTES as u64);
        assert_eq!(b.small_lane(), SMALL_LANE_MIN);
        assert_eq!(b.limit(), MAX_BODY_BYTES as u64 + SMALL_LANE_MIN);
    }
}
