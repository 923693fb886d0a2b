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
    use serde_json::{Value, json};

    /// The error kube makes of a failed request's Status body.
    fn api_error(code: u16, reason: &str, message: &str, details: Value) -> kube::Error {
        let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "code": code, "reason": reason, "message": message, "details": details});
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
        let missing = api_error(
            404,
            "NotFound",
            "namespaces \"gone\" not found",
            json!({"name": "gone", "kind": "namespaces"}),
        );
        assert_eq!(classify(&missing), ReportFailure::NamespaceGone);
        // The API server's answer to a create in a namespace being deleted
        // (NamespaceLifecycle admission).
        let terminating = api_error(
            403,
            "Forbidden",
            "reports.openreports.io \"r\" is forbidden: unable to create new content in namespace ns because it is being terminated",
            json!({"name": "r", "group": "openreports.io", "kind": "reports",
                   "causes": [{"reason": "NamespaceTerminating",
                               "message": "namespace ns is being terminated",
                               "field": "metadata.namespace"}]}),
        );
        assert_eq!(classify(&terminating), ReportFailure::NamespaceGone);
    }

    #[test]
    fn other_failures_stay_errors() {
        let reports = json!({"group": "openreports.io", "kind": "reports"});
        for e in [
            api_error(403, "Forbidden", "User cannot patch", reports.clone()),
            api_error(
                422,
                "Invalid",
                "Report.openreports.io \"r\" is invalid",
                reports,
            ),
            api_error(503, "ServiceUnavailable", "etcd down", Value::Null),
            kube::Error::LinesCodecMaxLineLengthExceeded,
        ] {
            assert_eq!(classify(&e), ReportFailure::Error, "{e}");
        }
    }
}
