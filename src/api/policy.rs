//! `NetfilterPolicy`: how nfguard acts on unsafe findings. Cluster-scoped;
//! with none present nfguard behaves as `action: Deny, unresolvedImages: Warn`.
//! The controller writes its status: `Valid` and `Accepted` conditions.

use super::Condition;
use super::bounds::{self, MaxItems};
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
    status = "NetfilterPolicyStatus",
    printcolumn = r#"{"name":"Action","type":"string","jsonPath":".spec.action"}"#,
    printcolumn = r#"{"name":"Unresolved","type":"string","jsonPath":".spec.unresolvedImages"}"#,
    printcolumn = r#"{"name":"Valid","type":"string","jsonPath":".status.conditions[?(@.type==\"Valid\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NetfilterPolicySpec {
    /// What to do with unsafe findings. Default Deny.
    #[serde(default)]
    pub action: PolicyAction,
    /// Only workloads in namespaces matching this selector are evaluated (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = bounds::label_selector)]
    pub namespace_selector: Option<LabelSelector>,
    /// Glob patterns of images that are never judged (e.g. "registry.k8s.io/kube-proxy:*").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = bounds::EXEMPT_IMAGES),
        inner(length(max = bounds::IMAGE_PATTERN))
    )]
    pub exempt_images: Vec<String>,
    /// Namespaces whose workloads may skip the judgement with the annotation
    /// `nfguard.io/exempt: "<reason>"`, among those this policy selects
    /// (`{}`: all of them). Absent in every policy: the annotation counts
    /// nowhere. Tenants who may create workloads but not label namespaces
    /// cannot exempt themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = bounds::label_selector)]
    pub exemption_namespace_selector: Option<LabelSelector>,
    /// What to do when an image's iptables cannot be resolved in time. Default Warn.
    #[serde(default = "default_unresolved")]
    pub unresolved_images: UnresolvedAction,
    /// Budget in seconds for registry look-ups per admission; it can only
    /// shorten the caller's own (the webhook's and `check`'s `--timeout`).
    /// Default none: the caller's budget.
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

/// Written by the controller (server-side apply, field manager
/// `nfguard-controller`); never read back to judge.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetfilterPolicyStatus {
    /// `Valid` (the spec can be used; reason names the bad field) and
    /// `Accepted` (the webhook and the controller judge with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = MaxItems(bounds::POLICY_CONDITIONS))]
    pub conditions: Option<Vec<Condition>>,
    /// The `metadata.generation` these conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
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
