//! `-o sarif`: SARIF 2.1.0 for code-scanning views. Rules are nfguard's
//! reason codes; results are the findings that raise the verdict (error:
//! deny, warning: warn), located like `-o github` (file and the line naming
//! the container) plus the object as a logical location.

use super::{ObjectResult, Report};
use crate::compat::evaluate::{Reason, ReasonCode, Verdict};
use serde_json::{Value, json};
use std::collections::BTreeSet;

const SCHEMA: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// One sentence per code, shown by code-scanning views.
fn describe(code: ReasonCode) -> &'static str {
    code.meta().summary
}

/// A path as a relative URI reference: bytes outside RFC 3986's unreserved
/// set and `/` percent-encoded; absolute paths become `file://` URIs.
pub fn path_uri(path: &str) -> String {
    let mut s = String::new();
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    if path.starts_with('/') {
        format!("file://{s}")
    } else {
        s
    }
}

fn level(effect: Verdict) -> Option<&'static str> {
    match effect {
        Verdict::Deny => Some("error"),
        Verdict::Warn => Some("warning"),
        Verdict::Allow => None,
    }
}

fn location(result: &ObjectResult, reason: &Reason) -> Value {
    let mut loc = json!({
        "logicalLocations": [{"fullyQualifiedName": result.object, "kind": "object"}]
    });
    if let Some(src) = &result.source
        && let Some(file) = &src.file
    {
        let mut physical = json!({"artifactLocation": {"uri": path_uri(file)}});
        if let Some(line) = src.line_for(reason.container.as_deref()) {
            physical["region"] = json!({"startLine": line});
        }
        loc["physicalLocation"] = physical;
    }
    loc
}

pub fn render(report: &Report, max_nodes: usize) -> anyhow::Result<String> {
    let findings: Vec<(&ObjectResult, &Reason, &str)> = report
        .results
        .iter()
        .flat_map(|r| r.reasons.iter().map(move |reason| (r, reason)))
        .filter_map(|(r, reason)| level(reason.effect).map(|l| (r, reason, l)))
        .collect();
    let codes: Vec<ReasonCode> = findings
        .iter()
        .map(|(_, reason, _)| reason.code)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let rules: Vec<Value> = codes
        .iter()
        .map(|c| {
            json!({"id": c.to_string(), "name": c.to_string(),
                   "shortDescription": {"text": describe(*c)}})
        })
        .collect();
    let results: Vec<Value> = findings
        .iter()
        .map(|(r, reason, level)| {
            json!({
                "ruleId": reason.code.to_string(),
                "ruleIndex": codes.iter().position(|c| *c == reason.code),
                "level": level,
                "message": {"text": reason.line(max_nodes)},
                "locations": [location(r, reason)],
            })
        })
        .collect();
    let log = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "nfguard",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
    });
    Ok(serde_json::to_string_pretty(&log)? + "\n")
}

#[cfg(test)]
#[path = "sarif_tests.rs"]
mod tests;
