//! The verdict engine: is running this workload safe for the networking of
//! the nodes it can land on? Pure (no I/O, no async, no clock), so the
//! admission webhook, the controller and `nfguard check` give exactly the
//! same answer for the same facts.
//!
//! Pipeline for a caller (every step pure):
//! 1. [`Workload::from_value`] / [`Workload::from_dynamic`]: identity + pod spec.
//! 2. [`EffectivePolicy::from_policies`] (or [`EffectivePolicy::default`]).
//! 3. [`select_candidates`]: the nodes the pod can be scheduled to, with platform.
//! 4. [`images_to_resolve`]: which (image, platform) pairs need a registry look-up
//!    (none for workloads that cannot touch netfilter); the caller resolves them
//!    within its own time budget into [`ImageResolutions`].
//! 5. [`evaluate`]: the [`Decision`].

mod candidate;
mod candidates;
mod finding;
mod images;
mod nft;
mod node_index;
pub(crate) mod nodeview;
mod policy;
mod reason_meta;
mod render;
mod rules;
mod selector;
mod workload;

#[cfg(test)]
mod nft_tests;
#[cfg(test)]
mod tests;

pub use candidate::{Candidate, node_platform, profile_node_name};
pub use candidates::{DEFAULT_PLATFORM, select_candidates, select_candidates_within};
pub use images::{ImageKey, ImageResolution, ImageResolutions, images_to_resolve};
pub use node_index::NodeIndex;
pub use policy::{EffectivePolicy, InvalidPolicy, PolicyError, validate_policy};
pub use reason_meta::{ReasonClass, ReasonMeta, docs_table as reason_docs_table};
pub use render::EXEMPTION_HINT;
pub use rules::unfinished;
pub use selector::{label_selector_matches, node_selector_requirement_matches};
pub use workload::{
    ContainerFacts, ContainerKind, ContainerRef, Scope, Workload, WorkloadError, WorkloadKind,
    container_refs, exempt_annotation, has_net_admin, pod_containers, pod_spec_can_write,
    pod_spec_reaches_gate, security_context_can_write,
};

use crate::facts::{Backend, NftVersion, Severity, Version};
use crate::named::named_enum;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The overall answer. Ordered: `Allow < Warn < Deny`.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize, JsonSchema, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Warn,
    Deny,
}

impl Verdict {
    /// The lowercase name: JSON, metric labels and messages all use it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Warn => "warn",
            Verdict::Deny => "deny",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

named_enum! {
    /// Stable reason codes: users alert on them, metrics are labelled by them.
    /// Never rename one; add new ones at the end.
    #[derive(
        Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize, JsonSchema, PartialOrd, Ord,
    )]
    pub enum ReasonCode {
        /// The image's iptables is 1.8.0-1.8.3 (broken `-C`, endless duplicate rules).
        KnownBadIptables,
        /// The image writes through the other backend than the node's rules (split rule sets).
        BackendMismatch,
        /// The node's kernel does not support the backend the image writes through.
        KernelLacksBackend,
        /// The image's iptables-nft (<= 1.8.7) cannot read native expressions that the
        /// node's rules hold or its writers emit: a save/restore silently drops matches.
        OldReaderNewRules,
        /// The image (>= 1.8.8) writes native expressions that an older reader on the
        /// node (a writer pod, or the host's own tools) misreads.
        NewWriterOldReader,
        /// Both >= 1.8.8 but the image is older than the newest writer: loud failures possible.
        ReaderOlderThanWriter,
        /// `iptables-wrapper` on a node without kubelet's marker chains: it defaults to nft.
        WrapperNoMarkerChains,
        /// Containers of one pod (own network namespace) use different backends.
        PodBackendMismatch,
        /// Containers of one pod: an iptables-nft <= 1.8.7 reads what a >= 1.8.8 one writes.
        PodOldReaderNewWriter,
        /// Containers of one pod: both >= 1.8.8, one older than the other.
        PodReaderOlderThanWriter,
        /// The image could not be inspected (registry error, timeout); policy `unresolvedImages` decides.
        ImageUnresolved,
        /// The image has an iptables command whose release could not be determined.
        ImageVersionUnknown,
        /// The image has no iptables command: it does not use iptables (informational).
        NoIptables,
        /// The node's profile has no usable status (reporter not run yet, probe failed).
        NodeProfileIncomplete,
        /// A scheduling candidate (a Node) has no NodeNetfilterProfile.
        NodeProfileMissing,
        /// The node's own hazard (e.g. FirewallUnconditionalDrop); informational, not the workload's fault.
        NodeHazard,
        /// hostNetwork without NET_ADMIN/ALL/privileged: it cannot write the node's rules.
        HostNetworkWithoutNetAdmin,
        /// The workload carries `nfguard.io/exempt: "<reason>"`.
        Exempt,
        /// The container's image matches a policy `exemptImages` pattern.
        ImageExempt,
        /// No NetfilterPolicy selects the workload's namespace.
        NamespaceNotSelected,
        /// No node profile matches the pod's scheduling constraints.
        NoCandidateNodes,
        /// An invalid NetfilterPolicy that selects the namespace was left out:
        /// the workload was judged with the valid ones.
        InvalidPolicyIgnored,
        /// The workload carries `nfguard.io/exempt`, but no NetfilterPolicy's
        /// `exemptionNamespaceSelector` selects its namespace: judged anyway.
        ExemptionNotAllowed,
        /// The image's libnftables (>= 1.1.2) writes set userdata that an unfixed
        /// older `nft` on the node (a writer pod's, the host's) segfaults on.
        NftNewWriterOldReader,
        /// The image's unfixed `nft` segfaults on the node's live sets, or on what a
        /// writer pod's libnftables (>= 1.1.2) writes.
        NftOldReaderNewSets,
        /// The webhook's judgement did not finish within its answer budget;
        /// policy `unresolvedImages` decides (never a silent allow).
        JudgementTimedOut,
}
}

/// One finding, aggregated over every node where it holds identically.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reason {
    pub code: ReasonCode,
    /// The finding's own weight: critical = unsafe, warning, info.
    pub severity: Severity,
    /// What this reason does to the verdict under the effective policy.
    pub effect: Verdict,
    /// The first (often the only) node concerned; null when not node-specific.
    pub node: Option<String>,
    /// Every node concerned (sorted as the candidates were given).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    pub container: Option<String>,
    pub image: Option<String>,
    /// The digest of the platform manifest judged for `image`: what this
    /// reason is true of, however the image's tag moves afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
    /// `os/arch[/variant]` the image was resolved for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_version: Option<Version>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_backend: Option<Backend>,
    /// The backend the node's rules live in (`nft`, `legacy`, `mixed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_backend: Option<String>,
    /// The other party: the newest writer (for an old reader) or the oldest reader (for a new writer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_version: Option<Version>,
    /// The live rules' minimum safe reader on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_reader_version: Option<Version>,
    /// The image's libnftables release (nft reasons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_nft_version: Option<NftVersion>,
    /// The other party's libnftables release (nft reasons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_nft_version: Option<NftVersion>,
    /// The oldest unfixed libnftables that lists the node's live sets (nft reasons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nft_min_reader: Option<NftVersion>,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
}

impl Reason {
    /// This reason as one line, its node list capped at `max_nodes` names.
    pub fn line(&self, max_nodes: usize) -> String {
        render::one_line(self, max_nodes)
    }
}

/// The answer for one workload.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub verdict: Verdict,
    pub reasons: Vec<Reason>,
    /// Nodes the workload was judged against.
    pub candidate_nodes: usize,
    /// Containers that can write netfilter rules (the ones judged).
    pub containers_in_scope: usize,
    /// Whether `nfguard.io/exempt` would count for this workload (a
    /// NetfilterPolicy's `exemptionNamespaceSelector` selects its namespace):
    /// the override a denial may suggest.
    #[serde(default)]
    pub exemptions_allowed: bool,
}

impl Decision {
    /// Reasons that raise the verdict to `at_least` or above.
    pub fn reasons_at_least(&self, at_least: Verdict) -> impl Iterator<Item = &Reason> {
        self.reasons.iter().filter(move |r| r.effect >= at_least)
    }

    /// The reasons that make the workload unsafe where it runs: critical
    /// findings of the [`ReasonClass::Unsafe`] class (what the controller
    /// taints for; a node's own hazard is never the workload's).
    pub fn unsafe_reasons(&self) -> impl Iterator<Item = &Reason> {
        self.reasons.iter().filter(|r| {
            r.severity == Severity::Critical && r.code.meta().class == ReasonClass::Unsafe
        })
    }

    /// The codes of [`Decision::unsafe_reasons`], sorted, each once.
    pub fn unsafe_codes(&self) -> Vec<ReasonCode> {
        let mut codes: Vec<ReasonCode> = self.unsafe_reasons().map(|r| r.code).collect();
        codes.sort();
        codes.dedup();
        codes
    }

    /// One line per reason with `effect >= at_least`, node lists capped at
    /// `max_nodes` names (admission messages and warnings must stay short).
    pub fn lines(&self, at_least: Verdict, max_nodes: usize) -> Vec<String> {
        self.reasons_at_least(at_least)
            .map(|r| render::one_line(r, max_nodes))
            .collect()
    }
}

/// What `evaluate` reads of a workload, borrowed: its containers and the
/// `nfguard.io/exempt` reason. The controller judges running pods through it
/// without cloning each pod's spec into a [`Workload`].
#[derive(Clone, Copy, Debug)]
pub struct SubjectInput<'a> {
    /// From [`Workload::containers`] or [`pod_containers`].
    pub containers: &'a [ContainerFacts],
    /// The `nfguard.io/exempt` annotation's value, if any (it counts only
    /// where the policy allows exemptions).
    pub exempt_reason: Option<&'a str>,
    pub candidates: &'a [Candidate<'a>],
    pub images: &'a ImageResolutions,
    pub policy: &'a EffectivePolicy,
    /// Reasons of lower severity are left out of [`Decision::reasons`]
    /// (never rendered); the verdict still counts them. `Info` keeps all.
    pub min_severity: Severity,
}

/// What a caller answering within a deadline (the webhook) asks of
/// [`evaluate_within`]: a judgement it can stop, whose rendering it can bound.
#[derive(Clone, Copy)]
pub struct Bounds<'a> {
    /// Reasons listed at most (each lists every node it holds on: a
    /// workload of thousands of containers on thousands of nodes would list
    /// millions of names); the verdict counts every reason.
    pub max_reasons: usize,
    /// Asked before each distinct node class is judged (the step that costs
    /// containers x findings): true stops the judgement.
    pub stop: &'a (dyn Fn() -> bool + Sync),
}

/// A decision listing at most [`Bounds::max_reasons`] reasons.
#[derive(Clone, Debug)]
pub struct Listed {
    pub decision: Decision,
    /// Reasons left out of `decision.reasons` (its verdict counts them).
    pub unlisted: usize,
}

/// The judgement. See the shared doc §2 and `rules.rs` for the table.
/// Callers go through `crate::judgement`, which prepares the input.
pub fn evaluate(input: &SubjectInput<'_>) -> Decision {
    let all = Bounds {
        max_reasons: usize::MAX,
        stop: &|| false,
    };
    match rules::evaluate(input, all) {
        Some(listed) => listed.decision,
        None => unreachable!("a judgement that never stops finishes"),
    }
}

/// [`evaluate`] within `bounds`: None when `bounds.stop` stopped it.
pub fn evaluate_within(input: &SubjectInput<'_>, bounds: Bounds<'_>) -> Option<Listed> {
    rules::evaluate(input, bounds)
}
