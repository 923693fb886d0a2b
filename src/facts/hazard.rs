//! The hazard vocabulary: fixed codes that users alert on, taint by and grep for.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::iptables::Backend;

#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize, JsonSchema, PartialOrd, Ord,
)]
pub enum HazardCode {
    /// A DROP/REJECT in a KUBE-* chain with no condition but a comment: the 1.25 incident.
    FirewallUnconditionalDrop,
    /// Both backends hold non-built-in chains or rules.
    MixedBackends,
    /// Neither backend has KUBE-IPTABLES-HINT nor KUBE-KUBELET-CANARY on a host with an iptables command.
    KubeletChainsMissing,
    /// kube-proxy's native nftables table and iptables-mode KUBE-SERVICES/KUBE-NODEPORTS at once
    /// (a mode switch left the old mode's rules behind).
    KubeProxyModeLeftovers,
    /// br_netfilter absent or bridge-nf-call-iptables = 0.
    BridgeNetfilterDisabled,
    /// The host's iptables is 1.8.0 to 1.8.3.
    KnownBadIptables,
    /// The host's own iptables-nft is older than the live rules' minimum safe reader.
    OldReaderNewRules,
    /// The probe itself failed (reported, never a crash).
    ProbeFailed,
    /// Live named sets carry userdata (libnftables >= 1.1.2) that the host's
    /// own unfixed `nft` segfaults on: every command that lists them fails.
    NftSetsCrashHostNft,
    /// The kernel lacks x_tables extensions Kubernetes' writers load (xt_CT,
    /// xt_TPROXY, xt_statistic, ...): rules that need one fail to load.
    XtModulesAbsent,
    /// Live named sets carry userdata that a writer pod's unfixed `nft`
    /// (kube-proxy's in nftables mode, a CNI agent's) segfaults on: derived by
    /// the controller from the reporter's sets and its writer inventory.
    NftSetsCrashWriterNft,
}

impl std::fmt::Display for HazardCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize, JsonSchema, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

/// The backend a hazard was seen in. `Wrapper` never appears here.
pub type HazardBackend = Backend;

#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hazard {
    pub code: HazardCode,
    pub severity: Severity,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<HazardBackend>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<String>,
    /// The offending rule as iptables would print it, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}
