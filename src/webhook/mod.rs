//! The validating admission webhook: AdmissionReview v1 in, the very same
//! `compat::evaluate` verdict `nfguard check` gives out, within a time budget.
//!
//! - [`facts`]: node profiles, Nodes, policies (reflectors or files).
//! - [`images`]: image look-ups with a deadline that keep going in the background.
//! - [`admission`]: AdmissionReview parsing, judging, response building.
//! - [`server`]: the axum router (`/validate`, `/healthz`, `/readyz`, `/metrics`).
//! - [`tls`]: the hot-swappable serving certificate and the directory watcher.
//! - [`bootstrap`]: `--self-signed`: CA + cert in a Secret, caBundle patch, rotation.

pub mod admission;
pub mod bootstrap;
pub mod cli;
pub mod credentials;
pub mod facts;
pub mod images;
pub mod metrics;
pub mod server;
pub mod tls;

pub use admission::{Judge, ReviewOutcome};
pub use server::{AppState, router};
