//! Test fixtures shared by the reports' unit tests: pods, reasons and
//! decisions as the verdict engine shapes them.

use super::owner::PodRef;
use crate::compat::evaluate::{Decision, Reason, ReasonCode, Verdict};
use crate::facts::{Backend, Severity, Version};

/// A pod of `ns` without controller; its uid is `uid-<name>`.
pub(crate) fn pod(ns: &str, name: &str) -> PodRef {
    PodRef {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        controller: None,
    }
}

/// A reason about container `c` (image `img:1`, iptables-nft 1.8.7) on `node`.
pub(crate) fn reason(code: ReasonCode, severity: Severity, effect: Verdict, node: &str) -> Reason {
    Reason {
        code,
        severity,
        effect,
        node: Some(node.into()),
        nodes: vec![node.into()],
        container: Some("c".into()),
        image: Some("img:1".into()),
        image_digest: Some(format!("sha256:{}", "a".repeat(64))),
        platform: Some("linux/amd64".into()),
        image_version: Some(Version::new(1, 8, 7)),
        image_backend: Some(Backend::Nft),
        node_backend: Some("nft".into()),
        other: None,
        other_version: Some(Version::new(1, 8, 10)),
        min_reader_version: None,
        image_nft_version: None,
        other_nft_version: None,
        nft_min_reader: None,
        message: format!("{code} on {node}"),
        remedy: None,
    }
}

/// The decision of `reasons` (the verdict their worst effect) with
/// `in_scope` containers judged.
pub(crate) fn decision(reasons: Vec<Reason>, in_scope: usize) -> Decision {
    Decision {
        verdict: reasons
            .iter()
            .map(|r| r.effect)
            .max()
            .unwrap_or(Verdict::Allow),
        reasons,
        candidate_nodes: 1,
        containers_in_scope: in_scope,
        exemptions_allowed: false,
    }
}
