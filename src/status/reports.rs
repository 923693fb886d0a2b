//! The status's policy report section: which report API nfguard writes in
//! (the first one served, as the controller chooses) and, per namespace,
//! how many of nfguard's reports there are and how many `fail` and `warn`
//! results they count (their summaries: every result, listed or not). Pure.

use crate::reports::{ReportApi, ReportSummary};
use serde::Serialize;
use std::collections::BTreeMap;

/// `reports` of the structured status document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportsStatus {
    /// The API nfguard's reports are in (`openreports.io/v1alpha1` or
    /// `wgpolicyk8s.io/v1alpha2`); None: neither is served.
    pub api: Option<String>,
    /// Why the reports could not be read (e.g. forbidden); None: read.
    pub error: Option<String>,
    /// Namespaces holding nfguard reports, by name.
    pub namespaces: Vec<NamespaceReports>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceReports {
    pub namespace: String,
    pub reports: usize,
    pub fail: u64,
    pub warn: u64,
}

/// The section from the API in use and its reports' (namespace, summary).
pub fn reports_status(
    api: Option<ReportApi>,
    reports: &[(String, ReportSummary)],
    error: Option<String>,
) -> ReportsStatus {
    let mut by_ns: BTreeMap<&str, NamespaceReports> = BTreeMap::new();
    for (ns, summary) in reports {
        let entry = by_ns.entry(ns).or_insert_with(|| NamespaceReports {
            namespace: ns.clone(),
            reports: 0,
            fail: 0,
            warn: 0,
        });
        entry.reports += 1;
        entry.fail += summary.fail;
        entry.warn += summary.warn;
    }
    ReportsStatus {
        api: api.map(|a| a.api_version().to_string()),
        error,
        namespaces: by_ns.into_values().collect(),
    }
}

/// One line for the table: the API and the fail/warn counts per namespace
/// (namespaces without either left out), or why there are none.
pub fn reports_line(r: &ReportsStatus) -> String {
    let Some(api) = &r.api else {
        return "policy reports: not served (neither openreports.io/v1alpha1 nor wgpolicyk8s.io/v1alpha2 is installed)".into();
    };
    if let Some(e) = &r.error {
        return format!("policy reports ({api}): not readable: {e}");
    }
    let total: usize = r.namespaces.iter().map(|n| n.reports).sum();
    let findings: Vec<String> = r
        .namespaces
        .iter()
        .filter(|n| n.fail + n.warn > 0)
        .map(|n| format!("{} {} fail, {} warn", n.namespace, n.fail, n.warn))
        .collect();
    let plural = if total == 1 { "" } else { "s" };
    if findings.is_empty() {
        format!("policy reports ({api}): {total} report{plural}, no fail or warn")
    } else {
        format!(
            "policy reports ({api}): {total} report{plural}; {}",
            findings.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(fail: u64, warn: u64) -> ReportSummary {
        ReportSummary {
            fail,
            warn,
            pass: 3,
            ..Default::default()
        }
    }

    #[test]
    fn counts_fail_and_warn_per_namespace() {
        let r = reports_status(
            Some(ReportApi::OpenReports),
            &[
                ("kube-system".into(), summary(2, 1)),
                ("apps".into(), summary(0, 0)),
                ("kube-system".into(), summary(1, 0)),
            ],
            None,
        );
        assert_eq!(r.api.as_deref(), Some("openreports.io/v1alpha1"));
        let got: Vec<_> = r
            .namespaces
            .iter()
            .map(|n| (n.namespace.as_str(), n.reports, n.fail, n.warn))
            .collect();
        assert_eq!(got, [("apps", 1, 0, 0), ("kube-system", 2, 3, 1)]);
        assert_eq!(
            reports_line(&r),
            "policy reports (openreports.io/v1alpha1): 3 reports; kube-system 3 fail, 1 warn"
        );
    }

    #[test]
    fn says_when_no_api_is_served_or_nothing_is_found() {
        let none = reports_status(None, &[], None);
        assert!(reports_line(&none).starts_with("policy reports: not served"));
        let quiet = reports_status(
            Some(ReportApi::WgPolicy),
            &[("a".into(), summary(0, 0))],
            None,
        );
        assert_eq!(
            reports_line(&quiet),
            "policy reports (wgpolicyk8s.io/v1alpha2): 1 report, no fail or warn"
        );
        let denied = reports_status(
            Some(ReportApi::OpenReports),
            &[],
            Some("403 Forbidden".into()),
        );
        assert_eq!(
            reports_line(&denied),
            "policy reports (openreports.io/v1alpha1): not readable: 403 Forbidden"
        );
    }
}
