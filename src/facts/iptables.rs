//! What nfguard knows about one iptables installation (in an image or on a
//! host). Shared by the CLI output, the CRD status, the
//! webhook and the controller, so the JSON names here are a contract.

use super::version::Version;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which kernel interface the `iptables` command writes through.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize, JsonSchema, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// iptables-nft (`xtables-nft-multi`): nf_tables.
    Nft,
    /// iptables-legacy (`xtables-legacy-multi`): x_tables.
    Legacy,
    /// `iptables-wrapper`: picks nft or legacy at run time from kubelet's marker chains.
    Wrapper,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Nft => "nft",
            Backend::Legacy => "legacy",
            Backend::Wrapper => "wrapper",
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EvidenceSource {
    Dpkg,
    Apk,
    Rpm,
    Binary,
    Alternatives,
    Label,
}

/// One observation that supports (or contradicts) the reported facts.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Evidence {
    pub source: EvidenceSource,
    pub path: String,
    pub detail: String,
}

/// The iptables bundled in an image or installed on a host.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IptablesFacts {
    /// Upstream release ("1.8.7"), no distro suffix; None when nothing says.
    pub version: Option<Version>,
    /// The default `iptables` command's backend; None when no `iptables` command exists.
    pub backend: Option<Backend>,
    /// The package database's version string ("1.8.7-1") when one had it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package_version: Option<String>,
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    /// Disagreements between sources (e.g. dpkg says 1.8.9, the binary says 1.8.7: the binary wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
}
