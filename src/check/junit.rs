//! `-o junit`: a JUnit XML report for CI test-report views (GitLab's
//! `artifacts:reports:junit`, Jenkins, ...). One `<testsuite>` per manifest
//! file (where a change under review lives), one `<testcase>` per workload
//! and node class, plus one for findings about no node in particular.
//!
//! Outcomes, chosen for what GitLab shows (the text of `<failure>`,
//! `<error>` and `<skipped>`; nothing else):
//! - a finding that denies -> `<failure type="CODE">`;
//! - "cannot evaluate" (image or node profile unknown) that warns or
//!   denies -> `<error type="CODE">`;
//! - only warnings -> `<skipped>` (passes the job, stays visible);
//! - otherwise passed, details in `<system-out>`.
//!
//! One outcome element per test case (GitLab reads only one); its text
//! lists every finding of the case.

use super::classes::{self, NodeClass};
use super::{ObjectResult, Report};
use crate::compat::evaluate::{Reason, ReasonClass, ReasonCode, Verdict};
use std::fmt::Write;

/// Codes meaning "could not judge", reported as errors rather than failures.
pub fn cannot_evaluate(code: ReasonCode) -> bool {
    code.meta().class == ReasonClass::CannotEvaluate
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Skipped { message: String },
    Error { code: ReasonCode, message: String },
    Failure { code: ReasonCode, message: String },
}

/// One test case before it is written out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub classname: String,
    pub name: String,
    pub outcome: Outcome,
    /// Every finding, the location and the nodes, one per line.
    pub details: String,
}

/// One suite: a manifest file (or "stdin") and its cases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suite {
    pub name: String,
    pub file: Option<String>,
    pub cases: Vec<Case>,
    pub notes: Vec<String>,
}

/// A finding's line without its node list (the case names its own nodes).
fn finding_line(r: &Reason, max_nodes: usize) -> String {
    let bare = Reason {
        nodes: Vec::new(),
        ..r.clone()
    };
    bare.line(max_nodes)
}

fn outcome(reasons: &[&Reason], max_nodes: usize) -> Outcome {
    let first = |pick: &dyn Fn(&Reason) -> bool| reasons.iter().copied().find(|r| pick(r));
    if let Some(r) = first(&|r| r.effect == Verdict::Deny && !cannot_evaluate(r.code)) {
        return Outcome::Failure {
            code: r.code,
            message: finding_line(r, max_nodes),
        };
    }
    if let Some(r) = first(&|r| r.effect >= Verdict::Warn && cannot_evaluate(r.code)) {
        return Outcome::Error {
            code: r.code,
            message: finding_line(r, max_nodes),
        };
    }
    if let Some(r) = first(&|r| r.effect == Verdict::Warn) {
        return Outcome::Skipped {
            message: format!("warning: {}", finding_line(r, max_nodes)),
        };
    }
    Outcome::Passed
}

fn nodes_line(nodes: &[String], max: usize) -> String {
    let shown = nodes.iter().take(max.max(1)).cloned().collect::<Vec<_>>();
    let more = nodes.len().saturating_sub(shown.len());
    let mut s = format!("nodes ({}): {}", nodes.len(), shown.join(", "));
    if more > 0 {
        let _ = write!(s, ", +{more} more");
    }
    s
}

fn details(
    result: &ObjectResult,
    container_of: Option<&Reason>,
    nodes: &[String],
    reasons: &[&Reason],
    max_nodes: usize,
) -> String {
    let mut s = result.object.clone();
    if let Some(src) = &result.source {
        let file = src.file.as_deref().unwrap_or("stdin");
        let line = src.line_for(container_of.and_then(|r| r.container.as_deref()));
        match line {
            Some(l) => {
                let _ = write!(s, " at {file}:{l}");
            }
            None => {
                let _ = write!(s, " in {file}");
            }
        }
    }
    s.push('\n');
    if !nodes.is_empty() {
        s.push_str(&nodes_line(nodes, max_nodes));
        s.push('\n');
    }
    for r in reasons {
        let _ = writeln!(
            s,
            "{:<5} {:<8} {}",
            r.effect.to_string(),
            format!("{:?}", r.severity).to_lowercase(),
            finding_line(r, max_nodes)
        );
    }
    s
}

fn case(
    result: &ObjectResult,
    name: String,
    nodes: &[String],
    reason_ids: &[usize],
    max_nodes: usize,
) -> Case {
    let reasons: Vec<&Reason> = reason_ids
        .iter()
        .filter_map(|&i| result.reasons.get(i))
        .collect();
    let outcome = outcome(&reasons, max_nodes);
    // Point at the container of the finding that decided the outcome.
    let decisive = reasons.iter().copied().max_by_key(|r| r.effect);
    Case {
        classname: result.object.clone(),
        name,
        outcome,
        details: details(result, decisive, nodes, &reasons, max_nodes),
    }
}

/// The cases of one workload: one per node class, and one for the findings
/// about no node (or when there is no candidate node at all).
pub fn cases(result: &ObjectResult, max_nodes: usize) -> Vec<Case> {
    let grouping = classes::group(result);
    let names = classes::case_names(result, &grouping.classes);
    let mut out: Vec<Case> = grouping
        .classes
        .iter()
        .zip(names)
        .map(|(c, name): (&NodeClass, String)| case(result, name, &c.nodes, &c.reasons, max_nodes))
        .collect();
    if !grouping.workload_reasons.is_empty() || out.is_empty() {
        let what = if grouping.classes.is_empty() {
            "no candidate nodes"
        } else {
            "workload"
        };
        let name = format!("{} :: {what}", result.object);
        out.push(case(
            result,
            name,
            &[],
            &grouping.workload_reasons,
            max_nodes,
        ));
    }
    out
}

/// Suites in the order the files were given; results without a file
/// (library callers) go to a suite of their own.
pub fn suites(report: &Report, max_nodes: usize) -> Vec<Suite> {
    let mut suites: Vec<Suite> = Vec::new();
    let key_of = |r: &ObjectResult| -> Option<String> {
        r.source
            .as_ref()
            .map(|s| s.file.clone().unwrap_or_else(|| "-".into()))
    };
    let mut keys: Vec<Option<String>> = Vec::new();
    for f in &report.files {
        if !keys.contains(&Some(f.clone())) {
            keys.push(Some(f.clone()));
        }
    }
    for r in &report.results {
        let k = key_of(r);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for k in keys {
        let cases = report
            .results
            .iter()
            .filter(|r| key_of(r) == k)
            .flat_map(|r| cases(r, max_nodes))
            .collect();
        let notes = report
            .notes
            .iter()
            .zip(&report.note_files)
            .filter(|(_, f)| Some((*f).clone()) == k)
            .map(|(n, _)| n.clone())
            .collect();
        let (name, file) = match &k {
            Some(f) if f == "-" => ("stdin".to_string(), None),
            Some(f) => (f.clone(), Some(f.clone())),
            None => ("nfguard check".to_string(), None),
        };
        suites.push(Suite {
            name,
            file,
            cases,
            notes,
        });
    }
    suites
}

// ---- XML ----

/// Text safe for XML 1.0 content and attribute values: markup characters
/// escaped, characters XML cannot carry at all (most C0 controls,
/// U+FFFE/U+FFFF) written as visible `\u{..}` text instead.
pub fn escape(text: &str, attribute: bool) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => s.push_str("&amp;"),
            '<' => s.push_str("&lt;"),
            '>' => s.push_str("&gt;"),
            '"' if attribute => s.push_str("&quot;"),
            '\'' if attribute => s.push_str("&apos;"),
            // Attribute values normalize white space: keep it as written.
            '\n' if attribute => s.push_str("&#10;"),
            '\r' => s.push_str("&#13;"),
            '\t' if attribute => s.push_str("&#9;"),
            '\t' | '\n' => s.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(s, "\\u{{{:x}}}", c as u32);
            }
            c => s.push(c),
        }
    }
    s
}

fn attr(name: &str, value: &str) -> String {
    format!(" {name}=\"{}\"", escape(value, true))
}

fn write_case(out: &mut String, c: &Case) {
    let _ = writeln!(
        out,
        "    <testcase{}{}>",
        attr("classname", &c.classname),
        attr("name", &c.name)
    );
    let body = escape(&c.details, false);
    match &c.outcome {
        Outcome::Failure { code, message } => {
            let _ = writeln!(
                out,
                "      <failure{}{}>{body}</failure>",
                attr("type", &code.to_string()),
                attr("message", message)
            );
        }
        Outcome::Error { code, message } => {
            let _ = writeln!(
                out,
                "      <error{}{}>{body}</error>",
                attr("type", &code.to_string()),
                attr("message", message)
            );
        }
        Outcome::Skipped { message } => {
            let _ = writeln!(
                out,
                "      <skipped{}>{body}</skipped>",
                attr("message", message)
            );
        }
        Outcome::Passed => {
            let _ = writeln!(out, "      <system-out>{body}</system-out>");
        }
    }
    out.push_str("    </testcase>\n");
}

fn count(cases: &[Case], pick: fn(&Outcome) -> bool) -> usize {
    cases.iter().filter(|c| pick(&c.outcome)).count()
}

fn is_failure(o: &Outcome) -> bool {
    matches!(o, Outcome::Failure { .. })
}

fn is_error(o: &Outcome) -> bool {
    matches!(o, Outcome::Error { .. })
}

fn is_skipped(o: &Outcome) -> bool {
    matches!(o, Outcome::Skipped { .. })
}

/// The whole report as JUnit XML.
pub fn render(report: &Report, max_nodes: usize) -> String {
    let suites = suites(report, max_nodes);
    let all: Vec<&Case> = suites.iter().flat_map(|s| &s.cases).collect();
    let total = |pick: fn(&Outcome) -> bool| all.iter().filter(|c| pick(&c.outcome)).count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites{}{}{}{}>",
        attr("name", "nfguard check"),
        attr("tests", &all.len().to_string()),
        attr("failures", &total(is_failure).to_string()),
        attr("errors", &total(is_error).to_string()),
    );
    for s in &suites {
        let _ = write!(
            out,
            "  <testsuite{}{}{}{}{}",
            attr("name", &s.name),
            attr("tests", &s.cases.len().to_string()),
            attr("failures", &count(&s.cases, is_failure).to_string()),
            attr("errors", &count(&s.cases, is_error).to_string()),
            attr("skipped", &count(&s.cases, is_skipped).to_string()),
        );
        if let Some(f) = &s.file {
            out.push_str(&attr("file", f));
        }
        out.push_str(">\n");
        for c in &s.cases {
            write_case(&mut out, c);
        }
        if !s.notes.is_empty() {
            let notes: String = s.notes.iter().map(|n| format!("note: {n}\n")).collect();
            let _ = writeln!(
                out,
                "    <system-out>{}</system-out>",
                escape(&notes, false)
            );
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

#[cfg(test)]
#[path = "junit_tests.rs"]
mod tests;
