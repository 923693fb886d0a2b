//! `-o github`: GitHub Actions workflow commands, one line per finding that
//! raises the verdict (`::error` denies, `::warning` warns), pointing at the
//! manifest file and the line naming the offending container (else the
//! line the object starts on). Informational findings are left out: they
//! would bury the ones that matter under the per-step annotation limit.
//! Notes and a final verdict line are plain text, as in the text output.

use super::{ObjectResult, Report};
use crate::compat::evaluate::{Reason, Verdict};

/// A message: `%`, CR and LF escaped as GitHub's runner expects.
pub fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A property value (`file=`, `title=`): also `:` and `,`, which end it.
pub fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// The command for one finding; None for findings that do not raise the verdict.
pub fn command(result: &ObjectResult, reason: &Reason, max_nodes: usize) -> Option<String> {
    let level = match reason.effect {
        Verdict::Deny => "error",
        Verdict::Warn => "warning",
        Verdict::Allow => return None,
    };
    let mut props = Vec::new();
    // stdin has no file to point at: no file=, and a line alone means nothing.
    if let Some(src) = &result.source
        && let Some(file) = &src.file
    {
        props.push(format!("file={}", escape_property(file)));
        if let Some(line) = src.line_for(reason.container.as_deref()) {
            props.push(format!("line={line}"));
        }
    }
    let title = format!("{} in {}", reason.code, result.object);
    props.push(format!("title={}", escape_property(&title)));
    Some(format!(
        "::{level} {}::{}",
        props.join(","),
        escape_data(&reason.line(max_nodes))
    ))
}

pub fn render(report: &Report, max_nodes: usize) -> String {
    let mut out = String::new();
    for r in &report.results {
        for reason in &r.reasons {
            if let Some(line) = command(r, reason, max_nodes) {
                out.push_str(&line);
                out.push('\n');
            }
        }
    }
    for n in &report.notes {
        out.push_str(&format!("note: {}\n", escape_data(n)));
    }
    out.push_str(&format!("verdict: {}\n", report.verdict));
    out
}

#[cfg(test)]
#[path = "github_tests.rs"]
mod tests;
