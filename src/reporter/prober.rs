//! What the loop asks of the node: a full probe, and a cheap-to-compare
//! snapshot of the state that sends no notifications (x_tables rules and
//! the bridge/forwarding sysctls), polled to notice changes there.

use crate::api::{BridgeFacts, NodeNetfilterProfileStatus};
use crate::kernel::{self, RuleSet};
use crate::node::{self, ProbeConfig};

/// State without change notifications. Compared for equality on each poll;
/// the x_tables reader leaves out packet counters, so traffic alone never
/// looks like a change.
#[derive(Clone, Debug, PartialEq)]
pub struct PolledState {
    pub legacy: Result<RuleSet, String>,
    pub bridge: BridgeFacts,
    pub ip_forward: Option<bool>,
}

#[async_trait::async_trait]
pub trait Prober: Send + Sync {
    /// The full probe. `Err` only when the probe could not run at all
    /// (partial failures are inside the status as probeError/hazards).
    async fn probe(&self) -> Result<NodeNetfilterProfileStatus, String>;
    /// The polled snapshot; None when it could not be taken.
    async fn polled_state(&self) -> Option<PolledState>;
}

/// The real node: `node::probe` on a blocking thread (netlink and
/// getsockopt calls block).
pub struct NodeProber {
    pub cfg: ProbeConfig,
}

#[async_trait::async_trait]
impl Prober for NodeProber {
    async fn probe(&self) -> Result<NodeNetfilterProfileStatus, String> {
        let cfg = self.cfg.clone();
        tokio::task::spawn_blocking(move || node::probe(&cfg))
            .await
            .map_err(|e| format!("probe task failed: {e}"))
    }

    async fn polled_state(&self) -> Option<PolledState> {
        let cfg = self.cfg.clone();
        tokio::task::spawn_blocking(move || PolledState {
            legacy: kernel::xtables::read().map_err(|e| e.to_string()),
            bridge: node::system::bridge(&cfg.proc_dir, &cfg.sys_dir),
            ip_forward: node::system::ip_forward(&cfg.proc_dir),
        })
        .await
        .ok()
    }
}
