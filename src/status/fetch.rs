//! The I/O of `status`: paged `list` calls for profiles and nodes. Errors
//! name the API server, and say which kind of failure it was.

use crate::api::NodeNetfilterProfile;
use crate::runtime::list::ClusterKind;
use k8s_openapi::api::core::v1::Node;

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

/// Profiles and Nodes, as listed.
#[derive(Debug, Default)]
pub struct Listed {
    pub profiles: Vec<NodeNetfilterProfile>,
    pub nodes: Vec<Node>,
}

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
