//! Process plumbing shared by the long-running subcommands (webhook,
//! controller, reporter).
//!
//! - [`shutdown`]: the one shutdown signal (SIGTERM or Ctrl-C).

pub mod shutdown;

pub use shutdown::shutdown_signal;
