//! `status` across several kubeconfig contexts (`--context` repeated,
//! `--all-contexts`): one table with a CLUSTER column, a cluster that did
//! not answer as a row saying so. Pure: the reports in, text out; `cli`
//! reads the clusters, in parallel and each bounded in time.

use super::table::{COLUMNS, WIDE_COLUMNS, cells, render_table, summary_line};
use super::{StatusReport, Summary};
use serde::Serialize;

/// What `-o json|yaml` prints for several clusters.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClustersReport {
    pub clusters: Vec<ClusterStatus>,
    /// Over the clusters that answered.
    pub summary: Summary,
    /// Clusters that gave no status (their `error` says why).
    pub failed: usize,
}

/// One context's status, or why there is none. Exactly one of `status`
/// and `error` is set.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    pub context: String,
    /// The API server, when the context names one.
    pub server: Option<String>,
    pub status: Option<StatusReport>,
    pub error: Option<String>,
}

impl ClustersReport {
    pub fn new(clusters: Vec<ClusterStatus>) -> Self {
        let mut summary = Summary::default();
        for s in clusters.iter().filter_map(|c| c.status.as_ref()) {
            summary.nodes += s.summary.nodes;
            summary.degraded += s.summary.degraded;
            summary.stale += s.summary.stale;
            summary.without_profile += s.summary.without_profile;
        }
        let failed = clusters.iter().filter(|c| c.status.is_none()).count();
        ClustersReport {
            clusters,
            summary,
            failed,
        }
    }
}

/// The table (a CLUSTER column first), each cluster's reports line, then
/// the summary over all of them, last (scripts read it there).
pub fn render(report: &ClustersReport, wide: bool) -> String {
    let mut headers: Vec<&str> = vec!["CLUSTER"];
    headers.extend(COLUMNS);
    if wide {
        headers.extend(WIDE_COLUMNS);
    }
    let mut rows = Vec::new();
    let mut lines = String::new();
    for c in &report.clusters {
        match (&c.status, &c.error) {
            (Some(s), _) => {
                for n in &s.nodes {
                    let mut row = vec![c.context.clone()];
                    row.extend(cells(n, wide));
                    rows.push(row);
                }
                lines.push_str(&format!(
                    "{}: {}; {}\n",
                    c.context,
                    summary_line(&s.summary),
                    super::reports::reports_line(&s.reports)
                ));
            }
            (None, error) => {
                // The error goes in the last column, which is not padded.
                let mut row = vec![c.context.clone()];
                row.extend(std::iter::repeat_n("-".to_string(), headers.len() - 2));
                row.push(format!(
                    "no status: {}",
                    error.as_deref().unwrap_or("unknown")
                ));
                rows.push(row);
            }
        }
    }
    let answered = report.clusters.len() - report.failed;
    format!(
        "{}\n{lines}{} cluster{} ({answered} answered, {} without status): {}\n",
        render_table(&headers, &rows),
        report.clusters.len(),
        if report.clusters.len() == 1 { "" } else { "s" },
        report.failed,
        summary_line(&report.summary)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::build_report;
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::jiff::Timestamp;

    fn node(name: &str) -> Node {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap()
    }

    #[test]
    fn one_table_with_a_cluster_column_and_a_row_for_a_cluster_without_status() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let a = build_report(&[], &[node("a-1"), node("a-2")], now);
        let b = build_report(&[], &[node("b-1")], now);
        let report = ClustersReport::new(vec![
            ClusterStatus {
                context: "prod-a".into(),
                server: Some("https://a:6443".into()),
                status: Some(a),
                error: None,
            },
            ClusterStatus {
                context: "dark".into(),
                server: Some("https://dark:6443".into()),
                status: None,
                error: Some("no answer from the API server https://dark:6443 within 5s".into()),
            },
            ClusterStatus {
                context: "prod-b".into(),
                server: None,
                status: Some(b),
                error: None,
            },
        ]);
        assert_eq!((report.summary.nodes, report.failed), (3, 1));
        let text = render(&report, false);
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0][..3], ["CLUSTER", "NODE", "BACKEND"]);
        assert_eq!(rows[1][..2], ["prod-a", "a-1"]);
        assert_eq!(rows[2][..2], ["prod-a", "a-2"]);
        assert_eq!(rows[3][..2], ["dark", "-"]);
        assert!(
            text.lines()
                .nth(3)
                .unwrap()
                .ends_with("no status: no answer from the API server https://dark:6443 within 5s"),
            "{text}"
        );
        assert_eq!(rows[4][..2], ["prod-b", "b-1"]);
        assert_eq!(
            text.lines().last(),
            Some(
                "3 clusters (2 answered, 1 without status): 3 nodes, 0 degraded, 0 stale, 3 without profile"
            )
        );
        assert!(
            text.contains("\nprod-a: 2 nodes, 0 degraded, 0 stale, 2 without profile; "),
            "{text}"
        );
        // Every row has as many cells as the header (the error's last).
        let wide = render(&report, true);
        let header_cells = wide.lines().next().unwrap().split_whitespace().count();
        assert_eq!(header_cells, 1 + COLUMNS.len() + WIDE_COLUMNS.len());
    }
}
