//! The I/O of `status`: paged `list` calls for profiles and nodes. Errors
//! name the API server, and say which kind of failure it was.

use crate::reports::{LABEL_MANAGED_BY, MANAGED_BY, ReportApi, ReportSummary};
use crate::runtime::list::ClusterKind;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("cannot reach the API server {server}: {detail}")]
    Unreachable { server: String, detail: String },
    #[error(
        "the API server {server} does not serve {what} (are nfguard's CRDs installed? kubectl apply --server-side -k crds/)"
    )]
    NotServed { server: String, what: &'static str },
    #[error("listing {what} from {server}: {code} {reason}: {message}")]
    Api {
        server: String,
        what: &'static str,
        code: u16,
        reason: String,
        message: String,
    },
}

/// Profiles and Nodes, as listed (the what-if of `status --assume` judges
/// the same snapshot).
pub use crate::check::cluster::Listed;

/// The error and its sources on one line ("client error (Connect): tcp
/// connect error: Connection refused (os error 111)"), repeats dropped.
fn chain(error: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![error.to_string()];
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ")
}

fn classify(server: &str, what: &'static str, error: kube::Error) -> FetchError {
    match error {
        kube::Error::Api(status) if status.code == 404 => FetchError::NotServed {
            server: server.into(),
            what,
        },
        kube::Error::Api(status) => FetchError::Api {
            server: server.into(),
            what,
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        },
        other => FetchError::Unreachable {
            server: server.into(),
            detail: chain(&other),
        },
    }
}

async fn list_all<K: ClusterKind>(
    client: &kube::Client,
    server: &str,
    what: &'static str,
) -> Result<Vec<K>, FetchError> {
    crate::runtime::list::list_all(client)
        .await
        .map_err(|e| classify(server, what, e))
}

/// Every NodeNetfilterProfile, then every Node.
pub async fn list(client: &kube::Client, server: &str) -> Result<Listed, FetchError> {
    let profiles = list_all(client, server, "nodenetfilterprofiles.nfguard.io").await?;
    let nodes = list_all(client, server, "nodes").await?;
    Ok(Listed { profiles, nodes })
}

/// nfguard's policy reports as `status` shows them: the API in use (the
/// first served, as the controller chooses) and each report's namespace and
/// summary. Never fails the status: an error reading them is returned as text.
pub async fn reports(
    client: &kube::Client,
) -> (
    Option<ReportApi>,
    Vec<(String, ReportSummary)>,
    Option<String>,
) {
    let api = match crate::reports::served_apis(client).await {
        Ok(served) => served.into_iter().next(),
        Err(e) => return (None, Vec::new(), Some(chain(&e))),
    };
    let Some(api) = api else {
        return (None, Vec::new(), None);
    };
    let all: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(client.clone(), &api.api_resource());
    let selector = format!("{LABEL_MANAGED_BY}={MANAGED_BY}");
    let mut params = kube::api::ListParams::default()
        .labels(&selector)
        .limit(500);
    let mut out = Vec::new();
    loop {
        let page = match all.list(&params).await {
            Ok(p) => p,
            Err(kube::Error::Api(s)) => {
                return (Some(api), out, Some(format!("{} {}", s.code, s.reason)));
            }
            Err(e) => return (Some(api), out, Some(chain(&e))),
        };
        for o in page.items {
            let ns = o.metadata.namespace.clone().unwrap_or_default();
            // A summary that does not parse counts as empty (not nfguard's shape).
            let summary = o
                .data
                .get("summary")
                .and_then(|s| serde_json::from_value::<ReportSummary>(s.clone()).ok())
                .unwrap_or_default();
            out.push((ns, summary));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => {
                params = kube::api::ListParams::default()
                    .labels(&selector)
                    .limit(500)
                    .continue_token(&token)
            }
            None => return (Some(api), out, None),
        }
    }
}
