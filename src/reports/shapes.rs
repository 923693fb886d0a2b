//! The two report APIs nfguard writes, as their upstream Go types define
//! them (`github.com/openreports/reports-api` v0.2.1
//! `apis/openreports.io/v1alpha1/report_types.go`, and
//! `kubernetes-sigs/wg-policy-prototypes`
//! `policy-report/apis/wgpolicyk8s.io/v1alpha2/policyreport_types.go`).
//! Their results and summaries have the same fields and JSON names; the
//! reports differ only in `source` and `configuration`, which the older
//! `PolicyReport` lacks. Field names are the JSON names of those types
//! (e.g. the Go field `Subjects` is `resources`, `Description` is `message`).
//!
//! `timestamp` is left out on purpose: it is optional in both schemas, and
//! a time in the content would make every resync a write.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which API a report is written as (the controller picks the first one
/// the cluster serves, in this order).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ReportApi {
    /// `openreports.io/v1alpha1` `Report`.
    OpenReports,
    /// `wgpolicyk8s.io/v1alpha2` `PolicyReport`.
    WgPolicy,
}

impl ReportApi {
    /// In order of preference.
    pub const ALL: [ReportApi; 2] = [ReportApi::OpenReports, ReportApi::WgPolicy];

    pub const fn group(self) -> &'static str {
        match self {
            ReportApi::OpenReports => "openreports.io",
            ReportApi::WgPolicy => "wgpolicyk8s.io",
        }
    }

    pub const fn version(self) -> &'static str {
        match self {
            ReportApi::OpenReports => "v1alpha1",
            ReportApi::WgPolicy => "v1alpha2",
        }
    }

    pub const fn api_version(self) -> &'static str {
        match self {
            ReportApi::OpenReports => "openreports.io/v1alpha1",
            ReportApi::WgPolicy => "wgpolicyk8s.io/v1alpha2",
        }
    }

    pub const fn kind(self) -> &'static str {
        match self {
            ReportApi::OpenReports => "Report",
            ReportApi::WgPolicy => "PolicyReport",
        }
    }

    /// The resource's plural (its RBAC and discovery name).
    pub const fn plural(self) -> &'static str {
        match self {
            ReportApi::OpenReports => "reports",
            ReportApi::WgPolicy => "policyreports",
        }
    }

    /// For a dynamic client (`Api<DynamicObject>`): nfguard does not own
    /// these CRDs, so it has no typed `kube::Resource` for them.
    pub fn api_resource(self) -> kube::core::ApiResource {
        kube::core::ApiResource {
            group: self.group().into(),
            version: self.version().into(),
            api_version: self.api_version().into(),
            kind: self.kind().into(),
            plural: self.plural().into(),
        }
    }
}

/// `pass`, `fail`, `warn`, `error`, `skip` (the schemas' enum).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultKind {
    // Declared worst first: the order results are kept in under the cap.
    Fail,
    Error,
    Warn,
    Pass,
    Skip,
}

impl ResultKind {
    pub const ALL: [ResultKind; 5] = [
        ResultKind::Fail,
        ResultKind::Error,
        ResultKind::Warn,
        ResultKind::Pass,
        ResultKind::Skip,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ResultKind::Fail => "fail",
            ResultKind::Error => "error",
            ResultKind::Warn => "warn",
            ResultKind::Pass => "pass",
            ResultKind::Skip => "skip",
        }
    }
}

/// `critical`, `high`, `medium`, `low`, `info` (the schemas' enum).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultSeverity {
    // Declared worst first, as ResultKind.
    Critical,
    High,
    Medium,
    Low,
    Info,
}

impl ResultSeverity {
    /// The severity in a `wgpolicyk8s.io/v1alpha2` report. The v1alpha2 CRD
    /// kubernetes-sigs/wg-policy-prototypes first published (2021, still
    /// installed by older engines) allows only `high`, `medium` and `low`
    /// and refuses the rest; today's adds `critical` and `info`. The three
    /// values both accept.
    pub const fn in_wg_policy(self) -> Self {
        match self {
            ResultSeverity::Critical | ResultSeverity::High => ResultSeverity::High,
            ResultSeverity::Medium => ResultSeverity::Medium,
            ResultSeverity::Low | ResultSeverity::Info => ResultSeverity::Low,
        }
    }
}

/// `ReportResult` (openreports) = `PolicyReportResult` (wgpolicyk8s).
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportResult {
    /// Not `omitempty` upstream: always written.
    #[serde(default)]
    pub source: String,
    pub policy: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rule: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub category: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<ResultSeverity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultKind>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scored: bool,
    /// Go: `Subjects`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ObjectReference>,
    /// Go: `Description`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Sorted by key (a BTreeMap), so the serialized content is stable.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

/// `ReportSummary` = `PolicyReportSummary`: every count always written.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct ReportSummary {
    #[serde(default)]
    pub pass: u64,
    #[serde(default)]
    pub fail: u64,
    #[serde(default)]
    pub warn: u64,
    #[serde(default)]
    pub error: u64,
    #[serde(default)]
    pub skip: u64,
}

impl ReportSummary {
    pub fn add(&mut self, kind: ResultKind) {
        let count = match kind {
            ResultKind::Pass => &mut self.pass,
            ResultKind::Fail => &mut self.fail,
            ResultKind::Warn => &mut self.warn,
            ResultKind::Error => &mut self.error,
            ResultKind::Skip => &mut self.skip,
        };
        *count += 1;
    }

    pub fn total(&self) -> u64 {
        self.pass + self.fail + self.warn + self.error + self.skip
    }
}

/// openreports `Limits`: the contract with readers that at most
/// `maxResults` results are listed.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    pub max_results: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status_filter: Vec<ResultKind>,
}

#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ReportConfiguration {
    pub limits: Limits,
}

/// `openreports.io/v1alpha1` `Report`.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<ReportConfiguration>,
    #[serde(default)]
    pub summary: ReportSummary,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ReportResult>,
}

/// `wgpolicyk8s.io/v1alpha2` `PolicyReport`.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyReport {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ObjectReference>,
    #[serde(default)]
    pub summary: ReportSummary,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ReportResult>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn api_names_are_the_upstream_ones() {
        let got: Vec<_> = ReportApi::ALL
            .iter()
            .map(|a| (a.api_version(), a.kind(), a.plural()))
            .collect();
        assert_eq!(
            got,
            [
                ("openreports.io/v1alpha1", "Report", "reports"),
                ("wgpolicyk8s.io/v1alpha2", "PolicyReport", "policyreports"),
            ]
        );
        for a in ReportApi::ALL {
            assert_eq!(a.api_version(), format!("{}/{}", a.group(), a.version()));
            let r = a.api_resource();
            assert_eq!(
                (r.group.as_str(), r.version.as_str(), r.api_version.as_str()),
                (a.group(), a.version(), a.api_version())
            );
            assert_eq!((r.kind.as_str(), r.plural.as_str()), (a.kind(), a.plural()));
        }
    }

    /// A result as the upstream samples write it reads into this type and
    /// writes back the same JSON (field names as in the Go types' tags).
    #[test]
    fn a_result_round_trips_with_the_upstream_field_names() {
        let upstream = json!({
            "source": "nfguard",
            "policy": "p",
            "rule": "BackendMismatch",
            "category": "unsafe",
            "severity": "critical",
            "result": "fail",
            "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "a", "namespace": "n"}],
            "message": "m",
            "properties": {"node": "n1"}
        });
        let r: ReportResult = serde_json::from_value(upstream.clone()).unwrap();
        assert_eq!(r.result, Some(ResultKind::Fail));
        assert_eq!(r.severity, Some(ResultSeverity::Critical));
        assert_eq!(serde_json::to_value(&r).unwrap(), upstream);
    }

    #[test]
    fn every_summary_count_is_written_even_zero() {
        let mut s = ReportSummary::default();
        s.add(ResultKind::Warn);
        s.add(ResultKind::Warn);
        assert_eq!(
            serde_json::to_value(s).unwrap(),
            json!({"pass": 0, "fail": 0, "warn": 2, "error": 0, "skip": 0})
        );
        assert_eq!(s.total(), 2);
    }

    #[test]
    fn wg_policy_severities_are_the_three_its_published_crd_allows() {
        use ResultSeverity::*;
        let got: Vec<_> = [Critical, High, Medium, Low, Info]
            .map(ResultSeverity::in_wg_policy)
            .to_vec();
        assert_eq!(got, [High, High, Medium, Low, Low]);
    }

    #[test]
    fn result_kinds_sort_worst_first_and_name_the_schema_values() {
        let mut kinds = ResultKind::ALL;
        kinds.reverse();
        kinds.sort();
        assert_eq!(kinds, ResultKind::ALL);
        for k in ResultKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), json!(k.as_str()));
        }
    }
}
