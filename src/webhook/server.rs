//! HTTP surface: the axum router (tests call it without a socket) and the
//! accept loop for HTTPS (rustls) and the plain metrics listener, with its
//! graceful drain on shutdown.

use super::admission::Judge;
use super::intake::{
    self, ClientCertificate, Intake, MAX_CONNECTIONS_PER_PEER, Peer, PeerHold, PeerTally,
};
use super::metrics::{Metrics, Refusal};
use crate::runtime::admin::{self, Admin, health};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

#[derive(Clone)]
pub struct AppState {
    pub judge: Arc<Judge>,
    pub metrics: Arc<Metrics>,
    /// Caches/reflectors synced (and, with TLS, a certificate loaded);
    /// [`serve`] adds "not draining".
    pub ready: Arc<dyn Fn() -> bool + Send + Sync>,
    /// Checks before a review's body is judged (client certificate, length,
    /// body budget, rate floor).
    pub intake: Arc<Intake>,
}

/// The router's hard cut for one request: the answer budget plus a second
/// to write the answer.
pub fn request_deadline(answer_budget: Duration) -> Duration {
    answer_budget + Duration::from_secs(1)
}

/// `POST /validate`, `GET /healthz`, `/readyz`, `/metrics`.
pub fn router(state: AppState) -> Router {
    let timeout = request_deadline(state.judge.timeout);
    let admin = admin_router(&state);
    let gate = axum::middleware::from_fn_with_state(state.intake.clone(), intake::gate);
    // One Arc for the handlers: axum clones the state per request, and one
    // shared counter bounces between cores less than three.
    Router::new()
        .route("/validate", post(validate).layer(gate))
        .with_state(Arc::new(state))
        .merge(admin)
        .layer(DefaultBodyLimit::max(intake::MAX_BODY_BYTES))
        // The last word on a slow request: the intake's rate floor cuts a
        // trickled body sooner, this cuts anything past the budget.
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
}

/// `/healthz`, `/readyz`, `/metrics` (also alone on the plain `--metrics-listen` port).
pub fn admin_router(state: &AppState) -> Router {
    let ready = state.ready.clone();
    // Before the caches sync, and from the moment a shutdown starts draining.
    let why = "not ready: caches not synced yet, or shutting down";
    admin::router(Admin::new(state.metrics.clone()).ready(move || health(ready(), why)))
}

async fn validate(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    let start = std::time::Instant::now();
    let out = s.judge.review(&body).await;
    s.metrics
        .observe_review(out.kind, out.verdict, start.elapsed().as_secs_f64());
    let status = StatusCode::from_u16(out.status).unwrap_or(StatusCode::OK);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        out.body,
    )
        .into_response()
}

/// How the webhook stops once asked to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drain {
    /// Keep accepting (with `/readyz` failing) this long, so the pod's
    /// removal from the Service reaches every proxy before the listeners close.
    pub delay: Duration,
    /// Then, with the listeners closed, what in-flight requests get to finish.
    pub budget: Duration,
}

/// How a drain ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// Every connection finished its requests within the budget.
    Complete,
    /// The budget ran out; this many connections were cut.
    Cut { connections: usize },
}

/// The sockets the webhook serves on.
pub struct Listeners {
    /// HTTPS: `/validate` and the health routes.
    pub https: TcpListener,
    pub acceptor: TlsAcceptor,
    /// Plain HTTP: the health routes and `/metrics` only.
    pub plain: Option<TcpListener>,
}

/// Serve until `shutdown` resolves, then drain: `/readyz` answers 503 at
/// once, new connections are still accepted for `drain.delay`, then the
/// listeners close and open connections are told to finish (HTTP/1 closes
/// after the current response, HTTP/2 sends GOAWAY); whatever is still
/// running after `drain.budget` is cut.
pub async fn serve(
    mut state: AppState,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
    drain: Drain,
) -> Drained {
    let draining = Arc::new(AtomicBool::new(false));
    let synced = state.ready.clone();
    let flag = draining.clone();
    state.ready = Arc::new(move || !flag.load(Ordering::Relaxed) && synced());
    let stop = async {
        shutdown.await;
        draining.store(true, Ordering::Relaxed);
        tracing::info!(delay = ?drain.delay, budget = ?drain.budget, "draining: readiness off");
        tokio::time::sleep(drain.delay).await;
    };
    let Listeners {
        https,
        acceptor,
        plain,
    } = listeners;
    let plain = plain.map(|l| (l, admin_router(&state)));
    let metrics = Some(state.metrics.clone());
    let app = router(state);
    serve_until(https, acceptor, app, plain, stop, drain.budget, metrics).await
}

/// Accept TLS connections on `listener` for `app` forever (no drain). The
/// per-peer connection cap holds; connections over it are not counted.
pub async fn serve_tls(listener: TcpListener, acceptor: TlsAcceptor, app: Router) {
    let forever = std::future::pending::<()>();
    serve_until(listener, acceptor, app, None, forever, Duration::ZERO, None).await;
}

/// The accept loop: each connection on its own task, watched for the drain.
/// One remote address holds at most [`MAX_CONNECTIONS_PER_PEER`] TLS
/// connections (handshaking or open); one more is closed as it is
/// accepted, before any handshake work, and counted in `refused`.
async fn serve_until(
    https: TcpListener,
    acceptor: TlsAcceptor,
    https_app: Router,
    plain: Option<(TcpListener, Router)>,
    stop: impl Future<Output = ()>,
    budget: Duration,
    refused: Option<Arc<Metrics>>,
) -> Drained {
    let per_peer = PeerTally::new(MAX_CONNECTIONS_PER_PEER);
    let graceful = GracefulShutdown::new();
    let mut conns = JoinSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            r = https.accept() => {
                if let Some((tcp, peer)) = accepted(r).await {
                    let Some(hold) = per_peer.take(Peer::of(peer.ip()), 1) else {
                        tracing::debug!(%peer, "connection over the per-address cap closed");
                        if let Some(m) = &refused {
                            m.refuse(Refusal::PeerConnections);
                        }
                        continue;
                    };
                    let (acceptor, app, watcher) = (acceptor.clone(), https_app.clone(), graceful.watcher());
                    conns.spawn(serve_tls_conn(tcp, peer, hold, acceptor, app, watcher));
                }
            }
            r = accept_or_never(plain.as_ref().map(|(l, _)| l)) => {
                if let (Some((tcp, _)), Some((_, app))) = (accepted(r).await, &plain) {
                    let (app, watcher) = (app.clone(), graceful.watcher());
                    conns.spawn(async move { serve_conn(TokioIo::new(tcp), app, watcher).await });
                }
            }
            // Reap finished connections so the set stays as small as the open ones.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    // Closing the sockets refuses new connections from here on.
    drop(https);
    drop(plain);
    tracing::info!(
        open = conns.len(),
        "listeners closed; finishing in-flight requests"
    );
    let outcome = match tokio::time::timeout(budget, graceful.shutdown()).await {
        Ok(()) => Drained::Complete,
        Err(_) => {
            while conns.try_join_next().is_some() {}
            Drained::Cut {
                connections: conns.len(),
            }
        }
    };
    // Aborts every connection task still running (those past the budget).
    conns.shutdown().await;
    outcome
}

async fn accept_or_never(
    listener: Option<&TcpListener>,
) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// A failed accept (out of file descriptors, a connection reset before
/// accept) is logged and paced, never fatal.
async fn accepted(r: std::io::Result<(TcpStream, SocketAddr)>) -> Option<(TcpStream, SocketAddr)> {
    match r {
        Ok(x) => Some(x),
        Err(e) => {
            tracing::warn!(error = %e, "accept");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// The handshake is bounded so a silent client cannot pin a task. A client
/// certificate that survived the handshake was verified (a bad one ends it):
/// its requests are marked for the `/validate` gate, as is the peer's
/// address (for its share of the body budget). `_slot` is the connection's
/// place under the per-peer cap, held until it closes.
async fn serve_tls_conn(
    tcp: TcpStream,
    peer: SocketAddr,
    _slot: PeerHold,
    acceptor: TlsAcceptor,
    app: Router,
    watcher: Watcher,
) {
    let _ = tcp.set_nodelay(true);
    let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let certified = tls
        .get_ref()
        .1
        .peer_certificates()
        .is_some_and(|c| !c.is_empty());
    let from = Peer::of(peer.ip());
    let app = app.map_request(move |mut req: axum::extract::Request<Incoming>| {
        if certified {
            req.extensions_mut().insert(ClientCertificate);
        }
        req.extensions_mut().insert(from);
        req
    });
    serve_conn(TokioIo::new(tls), app, watcher).await;
}

async fn serve_conn<I, S>(io: I, app: S, watcher: Watcher)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: tower::Service<
            axum::extract::Request<Incoming>,
            Response = Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let svc = TowerToHyperService::new(app);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    if let Err(e) = watcher.watch(builder.serve_connection(io, svc)).await {
        tracing::debug!(error = %e, "connection ended");
    }
}
