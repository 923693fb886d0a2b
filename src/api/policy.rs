//! `NetfilterPolicy`: how nfguard acts on unsafe findings. Cluster-scoped;
//! with none present nfguard behaves as `action: Deny, unresolvedImages: Warn`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "nfguard.io",
    version = "v1alpha1",
    kind = "NetfilterPolicy",
    plural = "netfilterpolicies",
    shortname = "nfpol",
    printcolumn = r#"{"name":"Action","type":"string","jsonPath":".spec.action"}"#,
    printcolumn = r#"{"name":"Unresolved","type":"string","jsonPath":".spec.unresolvedImages"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NetfilterPolicySpec {
    /// What to do with unsafe findings. Default Deny.
    #[serde(default)]
    pub action: PolicyAction,
    /// Only workloads in namespaces matching this selector are evaluated (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Glob patterns of images that are never judged (e.g. "registry.k8s.io/kube-proxy:*").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exempt_images: Vec<String>,
    /// What to do when an image's iptables cannot be resolved in time. Default Warn.
    #[serde(default = "default_unresolved")]
    pub unresolved_images: UnresolvedAction,
    /// Budget for registry look-ups per admission. Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_timeout_seconds: Option<u32>,
    /// Taint nodes with a critical hazard `nfguard.io/netfilter-degraded=<code>:NoSchedule`. Default false.
    #[serde(default)]
    pub taint_degraded_nodes: bool,
    /// Safety brake: never hold more than this share of nodes tainted by nfguard. Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub max_tainted_nodes_percent: Option<u32>,
}

fn default_unresolved() -> UnresolvedAction {
    UnresolvedAction::Warn
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PolicyAction {
    #[default]
    Deny,
    Warn,
    Taint,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum UnresolvedAction {
    Allow,
    #[default]
    Warn,
    Deny,
}
