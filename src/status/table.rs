//! Text rendering of a status report: kubectl-style aligned columns, then a
//! summary line. Pure.

use super::{NodeStatus, StatusReport, Summary, TaintSummary};
use crate::api::Writer;
use std::fmt::Display;

/// kubectl's table printer (cli-runtime's tabwriter): each column but the
/// last is as wide as its widest cell plus 3 spaces, and at least 6.
const PADDING: usize = 3;
const MIN_WIDTH: usize = 6;

pub const COLUMNS: [&str; 8] = [
    "NODE",
    "BACKEND",
    "IPTABLES",
    "MIN-READER",
    "HAZARDS",
    "TAINTED",
    "WRITERS",
    "HEARTBEAT",
];
pub const WIDE_COLUMNS: [&str; 6] = [
    "READY",
    "ACTIVE",
    "KERNEL",
    "OLDEST-READER",
    "NEWEST-WRITER",
    "WRITER-VERSIONS",
];

/// Aligned columns; every row must have as many cells as `headers`.
pub fn render_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let width = |col: usize| {
        let widest = rows
            .iter()
            .filter_map(|r| r.get(col))
            .map(|c| c.chars().count())
            .chain([headers[col].chars().count()])
            .max()
            .unwrap_or(0);
        (widest + PADDING).max(MIN_WIDTH)
    };
    let widths: Vec<usize> = (0..headers.len()).map(width).collect();
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                let pad = widths[i].saturating_sub(cell.chars().count());
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

/// A duration the way kubectl prints ages (apimachinery's HumanDuration):
/// "45s", "5m3s", "95m", "3h20m", "20h", "3d4h", "40d", "2y30d", "9y".
pub fn human_age(seconds: i64) -> String {
    if seconds < 0 {
        return "0s".into();
    }
    let (s, m, h) = (seconds, seconds / 60, seconds / 3600);
    let d = h / 24;
    let y = d / 365;
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        match s % 60 {
            0 => format!("{m}m"),
            rest => format!("{m}m{rest}s"),
        }
    } else if m < 3 * 60 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            rest => format!("{h}h{rest}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        match h % 24 {
            0 => format!("{d}d"),
            rest => format!("{d}d{rest}h"),
        }
    } else if h < 24 * 365 * 2 {
        format!("{d}d")
    } else if y < 8 {
        match d % 365 {
            0 => format!("{y}y"),
            rest => format!("{y}y{rest}d"),
        }
    } else {
        format!("{y}y")
    }
}

fn or_dash<T: Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn join_or_dash(items: Vec<String>) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

/// "netfilter-degraded=FirewallUnconditionalDrop": nfguard's prefix dropped.
fn taint_cell(taints: &[TaintSummary]) -> String {
    join_or_dash(
        taints
            .iter()
            .map(|t| {
                let key = t
                    .key
                    .strip_prefix(crate::wellknown::PREFIX)
                    .unwrap_or(&t.key);
                match &t.value {
                    Some(v) => format!("{key}={v}"),
                    None => key.to_string(),
                }
            })
            .collect(),
    )
}

fn heartbeat_cell(n: &NodeStatus) -> String {
    if !n.profile {
        return "no profile".into();
    }
    let age = match n.heartbeat_age_seconds {
        Some(s) => human_age(s),
        None if n.last_probe_time.is_some() => "invalid".into(),
        None => "never".into(),
    };
    if n.stale {
        format!("{age} (stale)")
    } else {
        age
    }
}

/// "kube-proxy=1.8.9/nft": the container, its image's iptables release and
/// backend ("?" where the image was not resolved or bundles none).
fn writer_version(w: &Writer) -> String {
    let version = w.version.map_or_else(|| "?".to_string(), |v| v.to_string());
    match w.backend {
        Some(b) => format!("{}={version}/{b}", w.container),
        None => format!("{}={version}", w.container),
    }
}

pub(super) fn cells(n: &NodeStatus, wide: bool) -> Vec<String> {
    let mut row = vec![
        n.name.clone(),
        or_dash(n.backend),
        or_dash(n.iptables_version),
        or_dash(n.min_reader_version),
        join_or_dash(n.hazards.iter().map(|h| h.code.to_string()).collect()),
        taint_cell(&n.taints),
        match (&n.writers, n.profile) {
            (Some(w), _) => w.len().to_string(),
            (None, true) => "?".into(),
            (None, false) => "-".into(),
        },
        heartbeat_cell(n),
    ];
    if wide {
        row.extend([
            match n.ready {
                Some(true) => "True".into(),
                Some(false) => "False".into(),
                None => "Unknown".into(),
            },
            or_dash(n.active_backend.map(|b| b.as_str())),
            or_dash(n.kernel.as_deref()),
            or_dash(n.oldest_reader_version),
            or_dash(n.newest_writer_version),
            join_or_dash(n.writers.iter().flatten().map(writer_version).collect()),
        ]);
    }
    row
}

pub fn summary_line(s: &Summary) -> String {
    format!(
        "{} node{}, {} degraded, {} stale, {} without profile",
        s.nodes,
        if s.nodes == 1 { "" } else { "s" },
        s.degraded,
        s.stale,
        s.without_profile
    )
}

/// The table (wide: with the extra columns), a blank line, the reports
/// line, the what-if section when asked for, the summary.
pub fn render(report: &StatusReport, wide: bool) -> String {
    let mut headers: Vec<&str> = COLUMNS.to_vec();
    if wide {
        headers.extend(WIDE_COLUMNS);
    }
    let rows: Vec<Vec<String>> = report.nodes.iter().map(|n| cells(n, wide)).collect();
    // The summary stays the last line (scripts read it there).
    let what_if = report
        .what_if
        .as_ref()
        .map(super::whatif::whatif_text)
        .unwrap_or_default();
    format!(
        "{}\n{}\n{what_if}{}\n",
        render_table(&headers, &rows),
        super::reports::reports_line(&report.reports),
        summary_line(&report.summary)
    )
}
