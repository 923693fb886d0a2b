//! The check report: JSON (a contract for CI pipelines) and text. What only
//! the CI formats need (source lines, candidate nodes) is kept out of JSON.

use super::classes::CandidateNode;
use super::positions::ObjectSource;
use super::whatif::WhatIf;
use crate::compat::evaluate::{Decision, Reason, Verdict};
use serde::Serialize;

/// `{"verdict": ..., "results": [{"object", "verdict", "reasons": [...]}]}`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub verdict: Verdict,
    pub results: Vec<ObjectResult>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The file each note is about (same order as `notes`).
    #[serde(skip)]
    pub note_files: Vec<String>,
    /// The manifest files, in the order given.
    #[serde(skip)]
    pub files: Vec<String>,
    /// Set by `--assume`: the findings on these nodes are predictions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectResult {
    /// `Kind/namespace/name`.
    pub object: String,
    pub verdict: Verdict,
    pub reasons: Vec<Reason>,
    pub candidate_nodes: usize,
    pub containers_in_scope: usize,
    /// Where the object is; None when not loaded from a file.
    #[serde(skip)]
    pub source: Option<ObjectSource>,
    /// Every candidate node with its class label (reasons name only some).
    #[serde(skip)]
    pub nodes: Vec<CandidateNode>,
}

impl ObjectResult {
    pub fn new(object: String, d: Decision) -> Self {
        ObjectResult {
            object,
            verdict: d.verdict,
            reasons: d.reasons,
            candidate_nodes: d.candidate_nodes,
            containers_in_scope: d.containers_in_scope,
            source: None,
            nodes: Vec::new(),
        }
    }
}

impl Report {
    /// 0 allow or warn, 1 deny.
    pub fn exit_code(&self) -> u8 {
        match self.verdict {
            Verdict::Deny => 1,
            Verdict::Allow | Verdict::Warn => 0,
        }
    }

    /// Human output: one block per object, every reason on its own line.
    pub fn to_text(&self, max_nodes: usize) -> String {
        let mut s = String::new();
        for r in &self.results {
            s.push_str(&format!(
                "{:<5} {} ({} candidate node{}, {} container{} judged)\n",
                r.verdict.to_string().to_uppercase(),
                r.object,
                r.candidate_nodes,
                if r.candidate_nodes == 1 { "" } else { "s" },
                r.containers_in_scope,
                if r.containers_in_scope == 1 { "" } else { "s" },
            ));
            let d = Decision {
                verdict: r.verdict,
                reasons: r.reasons.clone(),
                candidate_nodes: r.candidate_nodes,
                containers_in_scope: r.containers_in_scope,
                // Only its lines are rendered here.
                exemptions_allowed: false,
            };
            for (reason, line) in r.reasons.iter().zip(d.lines(Verdict::Allow, max_nodes)) {
                s.push_str(&format!(
                    "  {:<8} {line}\n",
                    format!("{:?}", reason.severity).to_lowercase()
                ));
            }
        }
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        if let Some(w) = &self.what_if {
            s.push_str(&format!("what-if: {}\n", w.summary()));
        }
        s.push_str(&format!("verdict: {}\n", self.verdict));
        s
    }
}
