//! What a failed policy-report request says (pure). Two failures are part
//! of a cluster's normal life and are not the controller's errors: the
//! report CRD uninstalled between two discoveries (the API answers 404 until
//! the next one notices), and a workload's namespace being deleted with it.
//! Counting them as reconcile errors raised `NfguardControllerReconcileErrors`
//! each time an admin removed the OpenReports CRDs.

/// How a failed report request is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFailure {
    /// The report API is not served any more: discover again now.
    ApiGone,
    /// The report's namespace is gone or being deleted: its workload and
    /// its report go with it, nothing to write.
    NamespaceGone,
    /// Anything else: logged and counted as an error of the reports stage.
    Error,
}

/// The `StatusCause` reason the API server gives when a namespace being
/// deleted refuses new objects.
const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";

/// Classify a failed list or apply of policy reports. A 404 is about the
/// namespace when its details say so (an apply creates a missing report, so
/// it is never about the report itself); any other 404 means the resource
/// is not served (the API server's plain "404 page not found").
pub fn classify(error: &kube::Error) -> ReportFailure {
    let kube::Error::Api(status) = error else {
        return ReportFailure::Error;
    };
    let details = status.details.as_ref();
    match status.code {
        404 if details.is_some_and(|d| d.kind == "namespaces") => ReportFailure::NamespaceGone,
        404 => ReportFailure::ApiGone,
        403 if details
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == NAMESPACE_TERMINATING)) =>
        {
            ReportFailure::NamespaceGone
        }
        _ => ReportFailure::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    /// An error as kube parses the API server's answer body.
    fn api_error(body: serde_json::Value) -> kube::Error {
        kube::Error::Api(Box::new(serde_json::from_value::<Status>(body).unwrap()))
    }

    #[test]
    fn a_removed_crd_is_an_api_gone_not_an_error() {
        // What kube makes of the API server's plain-text "404 page not
        // found" for a resource no CRD serves (seen in the e2e).
        let e = kube::Error::Api(
            Status::failure("404 page not found", "Failed to parse error data")
                .with_code(404)
                .boxed(),
        );
        assert_eq!(classify(&e), ReportFailure::ApiGone);
    }

    #[test]
    fn a_missing_or_terminating_namespace_is_the_workloads_end() {
        let missing = api_error(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "namespaces \"gone\" not found", "reason": "NotFound",
            "details": {"name": "gone", "kind": "namespaces"}, "code": 404
        }));
        assert_eq!(classify(&missing), ReportFailure::NamespaceGone);
        // The API server's answer to a create in a namespace being deleted
        // (NamespaceLifecycle admission).
        let terminating = api_error(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "reports.openreports.io \"r\" is forbidden: unable to create new content in namespace ns because it is being terminated",
            "reason": "Forbidden",
            "details": {"name": "r", "group": "openreports.io", "kind": "reports",
                        "causes": [{"reason": "NamespaceTerminating",
                                    "message": "namespace ns is being terminated",
                                    "field": "metadata.namespace"}]},
            "code": 403
        }));
        assert_eq!(classify(&terminating), ReportFailure::NamespaceGone);
    }

    #[test]
    fn other_failures_stay_errors() {
        let rbac = api_error(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "reports.openreports.io is forbidden: User cannot patch", "reason": "Forbidden",
            "details": {"group": "openreports.io", "kind": "reports"}, "code": 403
        }));
        assert_eq!(classify(&rbac), ReportFailure::Error);
        let invalid = api_error(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "Report.openreports.io \"r\" is invalid", "reason": "Invalid", "code": 422
        }));
        assert_eq!(classify(&invalid), ReportFailure::Error);
        let unavailable = api_error(serde_json::json!({"code": 503, "message": "etcd down"}));
        assert_eq!(classify(&unavailable), ReportFailure::Error);
        assert_eq!(
            classify(&kube::Error::LinesCodecMaxLineLengthExceeded),
            ReportFailure::Error
        );
    }
}
