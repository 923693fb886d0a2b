//! Policy reports of what already runs: each running pod judged on its node
//! (the same `Decision` and one-line messages as the webhook) becomes
//! results in one report per workload, written as `openreports.io/v1alpha1`
//! `Report` or the older `wgpolicyk8s.io/v1alpha2` `PolicyReport`.
//! Pure (no I/O, no clock) but for [`served_apis`], the discovery both the
//! controller and `status` use: the controller gathers and judges, this
//! module says what the reports should hold and whether a stored one must
//! be rewritten. See docs/reports.md.
//!
//! 1. [`resolve_owner`]: the pod's workload (through its ReplicaSet or Job).
//! 2. [`build_reports`]: results grouped per workload, ordered, capped.
//! 3. [`DesiredReport::to_report`] / [`DesiredReport::to_policy_report`]:
//!    the object in the API the cluster serves, with its content hash.
//! 4. [`needs_write`]: only a changed content is written.
//! 5. [`NamespaceBudget`]: at most so many reports and bytes a namespace.

mod budget;
pub(crate) mod build;
mod discovery;
#[cfg(test)]
mod docs_example;
mod owner;
mod result;
mod shapes;
#[cfg(test)]
mod size_tests;
#[cfg(test)]
mod test_support;

pub use budget::{NamespaceBudget, NamespaceCaps};
pub use build::{
    ANNOTATION_CONTENT_HASH, ANNOTATION_RESULTS_LEFT_OUT, DesiredReport, LABEL_MANAGED_BY,
    MANAGED_BY, MAX_RESULTS, build_reports, hash_annotation, needs_write, report_name,
};
pub use discovery::served_apis;
pub use owner::{ObjectId, OwnerError, Parent, PodRef, resolve_owner};
pub use result::{
    DEFAULT_POLICY, JudgedPod, MAX_MESSAGE_BYTES, MAX_PROPERTY_BYTES, RULE_COMPATIBLE, SOURCE,
    category, pod_results, policy_name, result_kind, result_severity,
};
pub use shapes::{
    Limits, PolicyReport, Report, ReportApi, ReportConfiguration, ReportResult, ReportSummary,
    ResultKind, ResultSeverity,
};
