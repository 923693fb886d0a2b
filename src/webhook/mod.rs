//! The validating admission webhook: AdmissionReview v1 in, the very same
//! `compat::evaluate` verdict `nfguard check` gives out, within a time budget.
//!
//! - [`facts`]: node profiles, Nodes, policies (reflectors or files).
//! - [`images`]: image look-ups with a deadline that keep going in the background.
//! - [`review`]: the AdmissionReview v1 envelope in and out.
//! - [`admission`]: which objects to judge, judging, the answer.
//! - [`pod_update`]: which Pod UPDATEs change what runs (image swaps).
//! - [`decisions`]: answers remembered for identical objects under the same facts.
//! - [`server`]: the axum router (`/validate`, `/healthz`, `/readyz`, `/metrics`)
//!   and the accept loop with its graceful drain on shutdown.
//! - [`intake`]: what `/validate` checks before reading a body (client
//!   certificate, a length, the byte budget for bodies in flight in two
//!   lanes, a share per address) and while reading it (a minimum rate).
//! - [`tls`]: the hot-swappable serving certificate and the directory watcher.
//! - [`client_auth`]: `--client-ca-file`: only the API server's certificate may call `/validate`.
//! - [`bootstrap`]: `--self-signed`: CA + cert in a Secret, caBundle patch, rotation.

pub mod admission;
pub mod bootstrap;
pub mod cli;
pub mod client_auth;
pub mod decisions;
pub mod facts;
pub mod fingerprint;
pub mod images;
pub mod intake;
pub mod metrics;
pub mod pod_update;
pub mod review;
pub mod server;
pub mod tls;

pub use admission::{Judge, ReviewOutcome};
pub use server::{AppState, router};
