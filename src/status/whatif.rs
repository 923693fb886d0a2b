//! The status's what-if section (`--assume-nodes SELECTOR --assume PATCH`):
//! which running workloads and DaemonSets the assumed node change would
//! judge differently, worst first and bounded, from the very judgement
//! `check --running` makes (`check::whatif::predict`). Pure.

use crate::check::whatif::predict::Prediction;
use crate::check::whatif::{Touched, WhatIf, classify};
use crate::compat::evaluate::{ReasonCode, Verdict};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Workloads listed (the rest counted in `more`).
pub const MAX_LISTED: usize = 10;
/// Nodes named per workload (the rest counted in `moreNodes`).
pub const MAX_NODES: usize = 10;
/// Notes kept (the rest counted in `moreNotes`).
pub const MAX_NOTES: usize = 10;

/// `whatIf` of the structured status document.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIfStatus {
    /// The assumption and `check`'s own counts of it (`selector`, `assume`,
    /// `nodes`, `denied`, `warned`: check.md#output).
    #[serde(flatten)]
    pub assumption: WhatIf,
    /// Running workloads and DaemonSets judged.
    pub judged: usize,
    /// Of them, those the change judges differently: another verdict, or a
    /// finding on an assumed node that today's nodes do not give.
    pub changed: usize,
    /// How many go from which verdict today to which as assumed, worst first.
    pub transitions: Vec<Transition>,
    /// The worst `MAX_LISTED` of the changed workloads.
    pub workloads: Vec<ChangedWorkload>,
    /// Changed workloads not listed.
    pub more: usize,
    pub notes: Vec<String>,
    pub more_notes: usize,
    /// The command that shows every finding in full.
    pub hint: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    pub today: Verdict,
    pub assumed: Verdict,
    pub workloads: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangedWorkload {
    /// `Kind/namespace/name`.
    pub object: String,
    pub today: Verdict,
    pub assumed: Verdict,
    /// The new findings' codes (a workload the change clears: the codes
    /// it no longer gets on the assumed nodes).
    pub codes: Vec<ReasonCode>,
    /// The assumed nodes those findings are about, at most `MAX_NODES`.
    pub nodes: Vec<String>,
    pub more_nodes: usize,
}

/// Codes and assumed nodes of `reasons` (sorted, distinct).
fn codes_and_nodes<'a>(
    reasons: impl Iterator<Item = &'a crate::compat::evaluate::Reason>,
    assumed: &BTreeSet<&str>,
) -> (Vec<ReasonCode>, BTreeSet<String>) {
    let mut codes = BTreeSet::new();
    let mut nodes = BTreeSet::new();
    for r in reasons {
        let on_assumed: Vec<&String> = r
            .nodes
            .iter()
            .filter(|n| assumed.contains(n.as_str()))
            .collect();
        if on_assumed.is_empty() {
            continue;
        }
        codes.insert(r.code);
        nodes.extend(on_assumed.into_iter().cloned());
    }
    (codes.into_iter().collect(), nodes)
}

/// `'...'` unless the word needs no quoting in a POSIX shell.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn hint(selector: &str, assume: &[String]) -> String {
    let mut cmd = String::from("nfguard check --cluster --running");
    if !selector.is_empty() {
        cmd.push_str(&format!(" --assume-nodes {}", shell_word(selector)));
    }
    for a in assume {
        cmd.push_str(&format!(" --assume {}", shell_word(a)));
    }
    cmd
}

/// The section from `check`'s prediction of what runs today.
pub fn whatif_status(p: &Prediction) -> Option<WhatIfStatus> {
    let w = p.assumed.what_if.as_ref()?;
    let assumed: BTreeSet<&str> = w.nodes.iter().map(String::as_str).collect();
    let touched: Vec<Touched> = classify(&p.assumed, &p.today, &assumed);
    let mut changed = Vec::new();
    for ((r, t), before) in p.assumed.results.iter().zip(&touched).zip(&p.today.results) {
        if t.new.is_empty() && r.verdict == before.verdict {
            continue;
        }
        let (codes, nodes) = if t.new.is_empty() {
            codes_and_nodes(before.reasons.iter(), &assumed)
        } else {
            codes_and_nodes(t.new.iter().map(|&k| &r.reasons[k]), &assumed)
        };
        let more_nodes = nodes.len().saturating_sub(MAX_NODES);
        changed.push(ChangedWorkload {
            object: r.object.clone(),
            today: before.verdict,
            assumed: r.verdict,
            codes,
            nodes: nodes.into_iter().take(MAX_NODES).collect(),
            more_nodes,
        });
    }
    // Worst first: the verdict as assumed, then the larger fall, then name.
    changed.sort_by(|a, b| {
        b.assumed
            .cmp(&a.assumed)
            .then(a.today.cmp(&b.today))
            .then(a.object.cmp(&b.object))
    });
    let mut counts: BTreeMap<(Verdict, Verdict), usize> = BTreeMap::new();
    for c in &changed {
        *counts.entry((c.today, c.assumed)).or_default() += 1;
    }
    let mut transitions: Vec<Transition> = counts
        .into_iter()
        .map(|((today, assumed), workloads)| Transition {
            today,
            assumed,
            workloads,
        })
        .collect();
    transitions.sort_by(|a, b| b.assumed.cmp(&a.assumed).then(a.today.cmp(&b.today)));
    let total = changed.len();
    changed.truncate(MAX_LISTED);
    let notes = &p.assumed.notes;
    Some(WhatIfStatus {
        assumption: w.clone(),
        judged: p.assumed.results.len(),
        changed: total,
        transitions,
        more: total - changed.len(),
        workloads: changed,
        notes: notes.iter().take(MAX_NOTES).cloned().collect(),
        more_notes: notes.len().saturating_sub(MAX_NOTES),
        hint: hint(&w.selector, &w.assume),
    })
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The section as text: a headline, one line per listed workload, the
/// hint. Ends with a newline.
pub fn whatif_text(w: &WhatIfStatus) -> String {
    let mut s = format!(
        "what-if [{}] on {}: ",
        w.assumption.describe(),
        plural(w.assumption.nodes.len(), "assumed node", "assumed nodes")
    );
    if w.changed == 0 {
        s.push_str(&format!(
            "no change for the {} judged\n",
            plural(w.judged, "running workload", "running workloads")
        ));
    } else {
        let moves: Vec<String> = w
            .transitions
            .iter()
            .map(|t| format!("{} -> {} {}", t.today, t.assumed, t.workloads))
            .collect();
        s.push_str(&format!(
            "{} of {} judged differently ({})\n",
            w.changed,
            plural(w.judged, "running workload", "running workloads"),
            moves.join(", ")
        ));
    }
    for c in &w.workloads {
        let codes: Vec<String> = c.codes.iter().map(ToString::to_string).collect();
        let mut nodes = c.nodes.join(", ");
        if c.more_nodes > 0 {
            nodes.push_str(&format!(" and {} more", c.more_nodes));
        }
        s.push_str(&format!(
            "  {:<5} -> {:<5} {} [{}] on {}\n",
            c.today.as_str(),
            c.assumed.as_str(),
            c.object,
            codes.join(", "),
            nodes
        ));
    }
    if w.more > 0 {
        s.push_str(&format!("  and {} more\n", w.more));
    }
    for n in &w.notes {
        s.push_str(&format!("  note: {n}\n"));
    }
    if w.more_notes > 0 {
        s.push_str(&format!("  and {} more notes\n", w.more_notes));
    }
    s.push_str(&format!("  every detail: {}\n", w.hint));
    s
}

#[cfg(test)]
#[path = "whatif_tests.rs"]
mod tests;
