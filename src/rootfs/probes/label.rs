//! Image config labels: an explicit declaration, used only for what the
//! filesystem does not say.

use crate::facts::{Backend, Evidence, EvidenceSource, NftVersion, Version};
use std::collections::BTreeMap;

pub const VERSION_LABEL: &str = "io.nfguard.iptables.version";
pub const BACKEND_LABEL: &str = "io.nfguard.iptables.backend";
/// The nftables release, used only when the filesystem says nothing.
pub const NFT_VERSION_LABEL: &str = "io.nfguard.nftables.version";
/// `"true"`: the image author's word that its nftables carries the fix for
/// the 2026 set-userdata crash (a vendor backport nfguard does not know).
pub const NFT_FIXED_LABEL: &str = "io.nfguard.nftables.fixed";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelProbe {
    pub version: Option<Version>,
    pub backend: Option<Backend>,
    pub evidence: Vec<Evidence>,
    /// Labels present but unusable.
    pub problems: Vec<String>,
}

pub fn probe(labels: &BTreeMap<String, String>) -> LabelProbe {
    let mut p = LabelProbe::default();
    if let Some(raw) = labels.get(VERSION_LABEL) {
        match raw.parse::<Version>() {
            Ok(v) => {
                p.version = Some(v);
                p.evidence.push(label_evidence(VERSION_LABEL, raw));
            }
            Err(_) => p.problems.push(format!(
                "label {VERSION_LABEL}={:?} is not an iptables version",
                shown(raw)
            )),
        }
    }
    if let Some(raw) = labels.get(BACKEND_LABEL) {
        match parse_backend(raw) {
            Some(b) => {
                p.backend = Some(b);
                p.evidence.push(label_evidence(BACKEND_LABEL, raw));
            }
            None => p.problems.push(format!(
                "label {BACKEND_LABEL}={:?} is not nft, legacy or wrapper",
                shown(raw)
            )),
        }
    }
    p
}

/// What the nftables labels declare.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NftLabelProbe {
    pub version: Option<NftVersion>,
    pub fixed: bool,
    pub evidence: Vec<Evidence>,
    /// Labels present but unusable.
    pub problems: Vec<String>,
}

pub fn probe_nftables(labels: &BTreeMap<String, String>) -> NftLabelProbe {
    let mut p = NftLabelProbe::default();
    if let Some(raw) = labels.get(NFT_VERSION_LABEL) {
        match raw.parse::<NftVersion>() {
            Ok(v) => {
                p.version = Some(v);
                p.evidence.push(label_evidence(NFT_VERSION_LABEL, raw));
            }
            Err(_) => p.problems.push(format!(
                "label {NFT_VERSION_LABEL}={:?} is not an nftables version",
                shown(raw)
            )),
        }
    }
    if let Some(raw) = labels.get(NFT_FIXED_LABEL) {
        match raw.trim().to_ascii_lowercase().as_str() {
            "true" => {
                p.fixed = true;
                p.evidence.push(label_evidence(NFT_FIXED_LABEL, raw));
            }
            "false" => p.evidence.push(label_evidence(NFT_FIXED_LABEL, raw)),
            _ => p.problems.push(format!(
                "label {NFT_FIXED_LABEL}={:?} is not true or false",
                shown(raw)
            )),
        }
    }
    p
}

/// A label value as quoted in a message: labels are the image author's text.
fn shown(raw: &str) -> String {
    raw.chars().take(64).collect()
}

fn parse_backend(raw: &str) -> Option<Backend> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "nft" | "nf_tables" => Some(Backend::Nft),
        "legacy" => Some(Backend::Legacy),
        "wrapper" => Some(Backend::Wrapper),
        _ => None,
    }
}

/// Evidence of a usable label, its value bounded as in messages (a version
/// parse trims, so padding could make an accepted value long).
fn label_evidence(name: &str, value: &str) -> Evidence {
    Evidence {
        source: EvidenceSource::Label,
        path: name.to_string(),
        detail: shown(value.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_values_are_bounded_in_evidence_and_problems() {
        let padded = format!("{}1.8.9{}", " ".repeat(100_000), " ".repeat(100_000));
        let huge = "x".repeat(100_000);
        let p = probe(&labels(&[(VERSION_LABEL, &padded), (BACKEND_LABEL, &huge)]));
        assert_eq!(p.version, Some("1.8.9".parse().unwrap()));
        assert_eq!(p.evidence[0].detail, "1.8.9");
        assert!(p.problems[0].len() < 200, "{}", p.problems[0].len());
        let n = probe_nftables(&labels(&[(
            NFT_VERSION_LABEL,
            &padded.replace("1.8.9", "1.0.6.1"),
        )]));
        assert_eq!(n.evidence[0].detail, "1.0.6.1");
    }

    #[test]
    fn nftables_labels() {
        let p = probe_nftables(&labels(&[
            (NFT_VERSION_LABEL, "1.0.6.1"),
            (NFT_FIXED_LABEL, "True"),
        ]));
        assert_eq!(p.version, Some("1.0.6.1".parse().unwrap()));
        assert!(p.fixed);
        assert_eq!(p.evidence.len(), 2);
        assert!(p.problems.is_empty());

        let p = probe_nftables(&labels(&[
            (NFT_VERSION_LABEL, "latest"),
            (NFT_FIXED_LABEL, "yes please"),
        ]));
        assert_eq!((p.version, p.fixed), (None, false));
        assert_eq!(p.problems.len(), 2, "{:?}", p.problems);

        let p = probe_nftables(&labels(&[(NFT_FIXED_LABEL, "false")]));
        assert!(!p.fixed && p.problems.is_empty());
        assert_eq!(probe_nftables(&BTreeMap::new()), NftLabelProbe::default());
    }
}
