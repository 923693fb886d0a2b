//! What nfguard knows about one image: the iptables and the nftables
//! userspace it bundles. `nfguard inspect image` prints it; the webhook
//! caches it per image. The JSON names are a contract.

use super::iptables::IptablesFacts;
use super::nftables::NftablesFacts;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `nfguard inspect image` output and the webhook's per-image cache entry.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageProfile {
    /// The reference as given.
    pub image: String,
    /// `sha256:<manifest digest>` of the platform manifest that was inspected.
    pub digest: String,
    /// `os/arch[/variant]`.
    pub platform: String,
    pub iptables: Option<IptablesFacts>,
    /// The nftables userspace it bundles (libnftables, `nft`); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nftables: Option<NftablesFacts>,
}
