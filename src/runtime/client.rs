//! A kube client the way kubectl picks one: `--kubeconfig` (else KUBECONFIG,
//! else ~/.kube/config), `--context` (else the current context), in-cluster
//! config as the fallback when there is no kubeconfig and no context asked
//! for. The server's URL is kept so errors can name it.

use std::path::{Path, PathBuf};

/// The standard kubectl flags nfguard's cluster-reading commands accept.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClusterArgs {
    /// Path to the kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, env = "NFGUARD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, env = "NFGUARD_CONTEXT")]
    pub context: Option<String>,
}

/// Each message carries its cause's text (kube's config errors already
/// repeat their own sources in it), so none is chained as a `source`.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("reading kubeconfig {path}: {error}")]
    ReadKubeconfig {
        path: PathBuf,
        error: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {origin}: {error}")]
    Kubeconfig {
        origin: String,
        error: kube::config::KubeconfigError,
    },
    #[error("no cluster configuration (no kubeconfig and not running in a pod): {0}")]
    Infer(kube::config::InferConfigError),
    #[error("client for {server}: {error}")]
    Client { server: String, error: kube::Error },
}

/// A client and the API server it talks to.
pub struct Connection {
    pub client: kube::Client,
    /// The API server's URL, without a trailing slash.
    pub server: String,
}

/// Build a client from an explicit kubeconfig and/or context, else infer one.
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<Connection, ConnectError> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|error| {
                ConnectError::ReadKubeconfig {
                    path: path.to_path_buf(),
                    error,
                }
            })?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|error| ConnectError::Kubeconfig {
                    origin: path.display().to_string(),
                    error,
                })?
        }
        // A context only exists in a kubeconfig: no in-cluster fallback.
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|error| ConnectError::Kubeconfig {
                origin: "(KUBECONFIG or ~/.kube/config)".into(),
                error,
            })?,
        (None, None) => kube::Config::infer().await.map_err(ConnectError::Infer)?,
    };
    let server = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let client = kube::Client::try_from(config).map_err(|error| ConnectError::Client {
        server: server.clone(),
        error,
    })?;
    Ok(Connection { client, server })
}

/// A cluster-scoped kind with a static type (every k8s-openapi and
/// nfguard.io kind), the kinds `list_all` reads.
pub trait ClusterKind:
    kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> ClusterKind for K where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// Every object of a cluster-scoped kind, read 500 per page so a large
/// cluster never answers one huge list.
pub async fn list_all<K: ClusterKind>(client: &kube::Client) -> Result<Vec<K>, kube::Error> {
    let api: kube::Api<K> = kube::Api::all(client.clone());
    let mut out = Vec::new();
    let mut params = kube::api::ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}
