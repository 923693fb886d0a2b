//! The reporter (DaemonSet): keeps this node's NodeNetfilterProfile status
//! current. Probes at start, within a second of any nf_tables change
//! (netlink notifications), when polled x_tables/sysctl state changes, and
//! as a heartbeat; writes with server-side apply under `nfguard-reporter`,
//! only when something changed or the heartbeat is due. Read-only on
//! netfilter; never runs iptables.
//!
//! OWNER: reporter helper.

pub mod authz_cache;
pub mod cli;
pub mod core;
pub mod metrics;
pub mod metrics_auth;
pub mod nft_watch;
pub mod prober;
pub mod profile_api;
pub mod review_quota;
pub mod run;
pub mod sink;
pub mod token_shape;
