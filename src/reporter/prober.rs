//! What the loop asks of the node: a full probe, and a cheap-to-compare
//! snapshot of the state that sends no notifications (x_tables rules and
//! the bridge/forwarding sysctls), polled to notice changes there.

use crate::api::{BridgeFacts, NodeNetfilterProfileStatus};
use crate::kernel::{self, RuleSet};
use crate::node::{self, HostFacts, ProbeConfig, gather_with_host, host_facts};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// State without change notifications. Compared for equality on each poll;
/// the x_tables reader leaves out packet counters, so traffic alone never
/// looks like a change.
#[derive(Clone, Debug, PartialEq)]
pub struct PolledState {
    /// nf_tables generation id: a safety net for missed notifications and
    /// the change detector when notifications are unavailable.
    pub nft_generation: Option<u32>,
    pub legacy: Result<RuleSet, String>,
    pub bridge: BridgeFacts,
    pub ip_forward: Option<bool>,
}

/// A probe that could not run at all (partial failures are inside the
/// status as probeError/hazards).
#[derive(Clone, Debug, thiserror::Error)]
#[error("probe task failed: {0}")]
pub struct ProbeError(pub String);

#[async_trait::async_trait]
pub trait Prober: Send + Sync {
    /// The full probe.
    async fn probe(&self) -> Result<NodeNetfilterProfileStatus, ProbeError>;
    /// The polled snapshot; None when it could not be taken.
    async fn polled_state(&self) -> Option<PolledState>;
}

/// The real node: the node helper's kernel readers and pure judgement
/// (`node::status_from_facts`) on a blocking thread (netlink and getsockopt
/// calls block). The host's files (its iptables package, a walk of the node
/// root that reads binaries, and the kernel's module lists) change only on
/// upgrades, so they are re-read at most every
/// `host_refresh` instead of on every rule change; this keeps a burst of
/// kube-proxy syncs cheap.
pub struct NodeProber {
    pub cfg: ProbeConfig,
    pub host_refresh: Duration,
    host: Arc<Mutex<Option<(Instant, HostFacts)>>>,
}

impl NodeProber {
    pub fn new(cfg: ProbeConfig, host_refresh: Duration) -> Self {
        Self {
            cfg,
            host_refresh,
            host: Arc::new(Mutex::new(None)),
        }
    }
}

#[async_trait::async_trait]
impl Prober for NodeProber {
    async fn probe(&self) -> Result<NodeNetfilterProfileStatus, ProbeError> {
        let cfg = self.cfg.clone();
        let cache = self.host.clone();
        let refresh = self.host_refresh;
        tokio::task::spawn_blocking(move || {
            let host = {
                let mut guard = cache.lock().unwrap_or_else(|p| p.into_inner());
                match &*guard {
                    Some((at, facts)) if at.elapsed() < refresh => facts.clone(),
                    _ => {
                        let facts = host_facts(&cfg);
                        *guard = Some((Instant::now(), facts.clone()));
                        facts
                    }
                }
            };
            node::status_from_facts(&gather_with_host(&cfg, host))
        })
        .await
        .map_err(|e| ProbeError(e.to_string()))
    }

    async fn polled_state(&self) -> Option<PolledState> {
        let cfg = self.cfg.clone();
        tokio::task::spawn_blocking(move || PolledState {
            nft_generation: kernel::nftables::generation_id().ok(),
            legacy: kernel::xtables::read().map_err(|e| e.to_string()),
            bridge: node::system::bridge(&cfg.proc_dir, &cfg.sys_dir),
            ip_forward: node::system::ip_forward(&cfg.proc_dir),
        })
        .await
        .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cached-host gather must judge exactly like `node::probe` (run in
    /// the test's own namespace, whatever it holds, and this machine's root).
    #[test]
    fn gather_matches_node_gather() {
        let cfg = ProbeConfig::new("/");
        let ours = node::status_from_facts(&gather_with_host(&cfg, host_facts(&cfg)));
        let theirs = node::probe(&cfg);
        assert_eq!(ours.iptables, theirs.iptables);
        assert_eq!(ours.native_features, theirs.native_features);
        assert_eq!(ours.kernel, theirs.kernel);
        assert_eq!(ours.bridge, theirs.bridge);
        assert_eq!(ours.ip_forward, theirs.ip_forward);
        assert_eq!(
            ours.probe_error.is_some(),
            theirs.probe_error.is_some(),
            "{:?} vs {:?}",
            ours.probe_error,
            theirs.probe_error
        );
    }
}
