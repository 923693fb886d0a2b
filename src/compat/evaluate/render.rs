//! Findings -> human messages and remedies (built once per aggregated group).

use super::finding::{Finding, Other};
use super::nodeview::{Party, RulesBackend};
use super::workload::{ContainerFacts, ContainerKind};
use super::{Reason, ReasonCode};
use crate::facts::version::FIRST_NATIVE_WRITER;
use crate::facts::{Backend, Platform, Version};

/// Where `nfguard.io/exempt` does not count: the overrides that do.
pub const EXEMPTION_HINT: &str = "exempt the image with a NetfilterPolicy's exemptImages, or have a cluster admin select the namespace with a NetfilterPolicy's exemptionNamespaceSelector";

fn party(p: Party<'_>) -> String {
    match p {
        Party::Host => "the host's iptables".into(),
        Party::Pod {
            pod,
            container,
            image,
        } => format!("writer container {container} ({image}, e.g. pod {pod})"),
        Party::Summary => "a writer pod (status.newestWriterVersion/oldestReaderVersion)".into(),
    }
}

fn opt_v(v: Option<Version>) -> String {
    v.map_or_else(|| "unknown".into(), |v| v.to_string())
}

fn opt_b(b: Option<Backend>) -> String {
    b.map_or_else(|| "none".into(), |b| b.to_string())
}

fn nodes_phrase(nodes: &[String], max: usize) -> String {
    match nodes.len() {
        0 => String::new(),
        1 => format!("node {}", nodes[0]),
        n if n <= max => format!("nodes {}", nodes.join(", ")),
        n => format!("{n} nodes ({}, +{} more)", nodes[..max].join(", "), n - max),
    }
}

/// `sha256:` and the first 12 hex digits (as `docker images` shows them):
/// enough to tell digests apart in a message; the JSON output has it whole.
fn short_digest(d: &str) -> &str {
    d.get(..("sha256:".len() + 12)).unwrap_or(d)
}

/// One line for admission messages, warnings and the CLI's text output.
pub(super) fn one_line(r: &Reason, max_nodes: usize) -> String {
    let mut s = format!("[{}] ", r.code);
    if let Some(c) = &r.container {
        s.push_str(&format!("container {c}"));
        match (&r.image, &r.image_digest) {
            (Some(i), Some(d)) => s.push_str(&format!(" ({i}, {})", short_digest(d))),
            (Some(i), None) => s.push_str(&format!(" ({i})")),
            _ => {}
        }
        s.push_str(": ");
    }
    s.push_str(&r.message);
    if !r.nodes.is_empty() {
        s.push_str(&format!(" [{}]", nodes_phrase(&r.nodes, max_nodes)));
    }
    if let Some(rem) = &r.remedy {
        s.push_str(&format!(" Fix: {rem}"));
    }
    s
}

pub(super) fn reason(f: &Finding<'_>, nodes: Vec<&str>, containers: &[ContainerFacts]) -> Reason {
    let c = f.container.and_then(|i| containers.get(i));
    let cname = c.map(|c| match c.kind {
        ContainerKind::Init => format!("{} (init)", c.name),
        ContainerKind::Ephemeral => format!("{} (ephemeral)", c.name),
        ContainerKind::App => c.name.clone(),
    });
    let img = c.and_then(|c| c.image.clone());
    let iv = opt_v(f.image_version);
    let ib = opt_b(f.image_backend);
    let eb = opt_b(f.effective_backend);
    let nb = f
        .node_backend
        .map(RulesBackend::as_str)
        .unwrap_or("unknown");
    let (other, other_version) = match f.other {
        Some(Other::Node(v)) => (Some(party(v.party)), Some(v.version)),
        Some(Other::Container { index, version, .. }) => (
            containers
                .get(index)
                .map(|c| format!("container {}", c.name)),
            version,
        ),
        Some(Other::Nft(p)) => (Some(super::nft::party(&p)), None),
        None => (None, None),
    };
    let other_nft_version = match f.other {
        Some(Other::Nft(p)) => p.version,
        _ => None,
    };
    let other_s = other.clone().unwrap_or_else(|| "another writer".into());
    let ov = opt_v(other_version);
    let min_reader = f.min_reader;
    let target_label = |b: Backend| format!("add nodeSelector nfguard.io/iptables-backend={b}");
    let (message, remedy): (String, Option<String>) = match f.code {
        ReasonCode::KnownBadIptables => (
            format!(
                "iptables {iv} has the broken -C of 1.8.0-1.8.3 and duplicates rules endlessly"
            ),
            Some("use an image with iptables >= 1.8.4".into()),
        ),
        ReasonCode::BackendMismatch => (
            format!(
                "image writes through iptables-{eb} but the node's rules live in {nb}: two rule sets, \
                 neither tool sees the other's chains and a DROP in either wins"
            ),
            Some(format!(
                "{} (nodes whose rules are {eb}), or use an image with iptables-wrapper or the {} backend",
                target_label(f.effective_backend.unwrap_or(Backend::Nft)),
                f.node_backend
                    .and_then(RulesBackend::target)
                    .map_or("node's".into(), |b| b.to_string())
            )),
        ),
        ReasonCode::KernelLacksBackend => (
            format!(
                "image writes through iptables-{eb} but the node's kernel does not offer {}: not loaded, not built in, and no module for it is installed",
                if eb == "legacy" { "ip_tables" } else { "nf_tables" }
            ),
            Some(
                "use an image with the other backend or iptables-wrapper, or keep it off these nodes"
                    .into(),
            ),
        ),
        ReasonCode::OldReaderNewRules => {
            let need = min_reader
                .into_iter()
                .chain(other_version)
                .max()
                .unwrap_or(FIRST_NATIVE_WRITER);
            let why = match (min_reader, &other) {
                (Some(m), Some(o)) => format!(
                    "the node's live rules need a reader >= {m} and {o} writes with {ov}"
                ),
                (Some(m), None) => format!("the node's live rules need a reader >= {m}"),
                (None, Some(o)) => format!("{o} writes native nftables expressions with {ov}"),
                (None, None) => "the node's rules hold native nftables expressions".into(),
            };
            (
                format!(
                    "iptables-nft {iv} in the image cannot read native nftables expressions: {why}; \
                     its iptables-save drops those matches (mark, ports, NFLOG) and a restore \
                     writes the rules back without them (e.g. an unconditional DROP)"
                ),
                Some(format!(
                    "use an image with iptables >= {need} (or iptables-wrapper on >= {need}); \
                     or keep it off nodes holding native rules: node affinity nfguard.io/min-reader DoesNotExist"
                )),
            )
        }
        ReasonCode::NewWriterOldReader => (
            format!(
                "iptables-nft {iv} in the image writes native nftables expressions that {other_s} \
                 (iptables {ov}) cannot read: its save/restore would silently drop matches"
            ),
            Some(format!(
                "upgrade {other_s} to iptables >= {}, or use an image with the same iptables \
                 release as the node ({ov})",
                FIRST_NATIVE_WRITER
            )),
        ),
        ReasonCode::ReaderOlderThanWriter => (
            format!(
                "iptables-nft {iv} in the image is older than {} ({}): it may fail loudly on \
                 expressions it cannot decode (no known silent corruption)",
                other.clone().unwrap_or_else(|| "the node's live rules".into()),
                other_version
                    .or(min_reader)
                    .map_or_else(|| "newer".into(), |v| v.to_string())
            ),
            Some(format!(
                "use an image with iptables >= {}",
                opt_v(other_version.into_iter().chain(min_reader).max())
            )),
        ),
        ReasonCode::WrapperNoMarkerChains => (
            "iptables-wrapper finds none of kubelet's marker chains (KUBE-IPTABLES-HINT, \
             KUBE-KUBELET-CANARY) on the node and will default to nft"
                .into(),
            Some("restart kubelet so it recreates its marker chains".into()),
        ),
        ReasonCode::PodBackendMismatch => (
            format!(
                "uses iptables-legacy while {other_s} of the same pod uses iptables-nft: \
                 the pod's rules split across two rule sets"
            ),
            Some("use one backend (or iptables-wrapper) in every container of the pod".into()),
        ),
        ReasonCode::PodOldReaderNewWriter => (
            format!(
                "iptables-nft {iv} reads rules that {other_s} writes with {ov} in the same pod: \
                 native expressions are silently dropped on save/restore"
            ),
            Some(format!("use iptables >= {ov} in every container of the pod")),
        ),
        ReasonCode::PodReaderOlderThanWriter => (
            format!("iptables-nft {iv} is older than {other_s}'s {ov} in the same pod"),
            Some(format!("use iptables {ov} in every container of the pod")),
        ),
        ReasonCode::ImageUnresolved => (
            format!(
                "image could not be inspected for {}: {}",
                f.platform.map_or_else(|| "?".to_string(), Platform::to_string),
                f.detail.unwrap_or("not resolved")
            ),
            Some(
                "make the image readable to nfguard (registry access; imagePullSecrets; a private \
                 registry allowed by its egress policy, registryEgress.allowHosts) or exempt it by policy"
                    .into(),
            ),
        ),
        ReasonCode::ImageVersionUnknown => (
            format!("the image has iptables ({ib}) but its release could not be determined"),
            Some("use an image whose package database records iptables".into()),
        ),
        ReasonCode::NoIptables => (
            format!(
                "the image has no iptables command for {}: it does not use iptables",
                f.platform.map_or_else(|| "?".to_string(), Platform::to_string)
            ),
            None,
        ),
        ReasonCode::NodeProfileIncomplete => (
            format!(
                "the node's NodeNetfilterProfile has no usable status{}",
                f.detail
                    .map(|d| format!(" (probe error: {d})"))
                    .unwrap_or_default()
            ),
            Some("check that nfguard's reporter runs on the node".into()),
        ),
        ReasonCode::NodeProfileMissing => (
            "the node has no NodeNetfilterProfile".into(),
            Some("check that nfguard's reporter runs on the node".into()),
        ),
        ReasonCode::NodeHazard => (
            format!(
                "the node itself has the critical hazard {} (not caused by this workload)",
                f.hazard.map_or_else(|| "?".into(), |h| h.to_string())
            ),
            Some("see the node's NodeNetfilterProfile status.hazards".into()),
        ),
        ReasonCode::HostNetworkWithoutNetAdmin => (
            "hostNetwork without NET_ADMIN/ALL/privileged: cannot write the node's rules".into(),
            None,
        ),
        ReasonCode::Exempt => (
            format!(
                "exempt by annotation nfguard.io/exempt: {}",
                f.detail.unwrap_or("")
            ),
            None,
        ),
        ReasonCode::ImageExempt => (
            format!(
                "image exempt by policy pattern {:?}",
                f.detail.unwrap_or("")
            ),
            None,
        ),
        ReasonCode::ExemptionNotAllowed => (
            format!(
                "nfguard.io/exempt ignored: no NetfilterPolicy allows exemptions in namespace {}",
                f.detail.filter(|ns| !ns.is_empty()).unwrap_or("?")
            ),
            Some(EXEMPTION_HINT.into()),
        ),
        ReasonCode::NamespaceNotSelected => (
            "no NetfilterPolicy selects this namespace: not judged".into(),
            None,
        ),
        ReasonCode::NoCandidateNodes => (
            "no profiled node matches the pod's scheduling constraints: nothing to judge against"
                .into(),
            Some("check nodeSelector/affinity/tolerations and that profiles exist".into()),
        ),
        ReasonCode::NftNewWriterOldReader | ReasonCode::NftOldReaderNewSets => {
            super::nft::message(f).unwrap_or_default()
        }
        ReasonCode::JudgementTimedOut => (
            format!(
                "not judged: judging {} did not finish; the NetfilterPolicy's unresolvedImages decides, as for an image not inspected in time",
                f.detail.unwrap_or("the workload")
            ),
            Some(
                "retry (image answers are cached meanwhile); if it persists, see the webhook's admission_duration_seconds"
                    .into(),
            ),
        ),
        ReasonCode::InvalidPolicyIgnored => (
            format!(
                "{} (ignored: judged with the valid policies only)",
                f.detail.unwrap_or("a NetfilterPolicy is invalid")
            ),
            Some("fix the policy; its Valid condition names the field".into()),
        ),
    };
    let nodes: Vec<String> = nodes.into_iter().map(str::to_string).collect();
    Reason {
        code: f.code,
        severity: f.severity,
        effect: f.effect,
        node: nodes.first().cloned(),
        nodes,
        container: cname,
        image: img,
        image_digest: f.image_digest.map(str::to_string),
        platform: f.platform.map(Platform::to_string),
        image_version: f.image_version,
        image_backend: f.image_backend,
        node_backend: f.node_backend.map(|b| b.as_str().to_string()),
        other,
        other_version,
        min_reader_version: f.min_reader,
        image_nft_version: f.image_nft,
        other_nft_version,
        nft_min_reader: f.nft_live.and_then(|l| l.min_reader),
        message,
        remedy,
    }
}
