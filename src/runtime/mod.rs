//! Process plumbing shared by the subcommands, written once:
//!
//! - [`client`]: the kube client every subcommand connects with.
//! - [`list`]: paged lists of cluster-scoped kinds (`status`, `check`).
//! - [`shutdown`]: the one shutdown signal (SIGTERM or Ctrl-C) and the stop
//!   flag tasks wait on ([`flag_raised`]).
//! - [`allocator`]: glibc returns large frees to the kernel (bounded RSS).
//! - [`admin`]: `/healthz`, `/readyz`, `/metrics` on plain HTTP.
//! - [`clock`]: wall-clock time on jiff, injectable for tests.
//! - [`status_apply`]: the server-side apply body of a status subresource.
//! - [`watch`]: hashing what of an object counts, telling which objects a
//!   watch event changed, and whether a store has its first list.

pub mod admin;
pub mod allocator;
pub mod client;
pub mod clock;
pub mod list;
pub mod shutdown;
pub mod status_apply;
pub mod watch;

pub use shutdown::{flag_raised, shutdown_signal};
