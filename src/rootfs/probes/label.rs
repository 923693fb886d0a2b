//! Image config labels: an explicit declaration, used only for what the
//! filesystem does not say.

use crate::facts::{Backend, Evidence, EvidenceSource, Version};
use std::collections::BTreeMap;

pub const VERSION_LABEL: &str = "io.nfguard.iptables.version";
pub const BACKEND_LABEL: &str = "io.nfguard.iptables.backend";

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
                "label {VERSION_LABEL}={raw:?} is not an iptables version"
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
                "label {BACKEND_LABEL}={raw:?} is not nft, legacy or wrapper"
            )),
        }
    }
    p
}

fn parse_backend(raw: &str) -> Option<Backend> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "nft" | "nf_tables" => Some(Backend::Nft),
        "legacy" => Some(Backend::Legacy),
        "wrapper" => Some(Backend::Wrapper),
        _ => None,
    }
}

fn label_evidence(name: &str, value: &str) -> Evidence {
    Evidence {
        source: EvidenceSource::Label,
        path: name.to_string(),
        detail: value.to_string(),
    }
}
