//! The one way every subcommand builds its kube client, the way kubectl
//! picks one: `--kubeconfig` (else KUBECONFIG, else ~/.kube/config),
//! `--context` (else the current context), in-cluster config as the
//! fallback when there is no kubeconfig and no context asked for. The
//! server's URL is kept so errors can name it.

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

/// Name ring as the process's rustls crypto provider. kube-client and
/// reqwest enable rustls with different backends (ring and aws-lc-rs), so
/// rustls cannot choose one by itself and the first TLS client would
/// panic. Idempotent: a provider already installed stays.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
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
    install_crypto_provider();
    let client = kube::Client::try_from(config).map_err(|error| ConnectError::Client {
        server: server.clone(),
        error,
    })?;
    Ok(Connection { client, server })
}

/// The client alone, for the in-cluster components (`--kubeconfig` only,
/// else in-cluster or the default kubeconfig).
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, ConnectError> {
    Ok(connect(kubeconfig, None).await?.client)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kubeconfig with contexts `a` (current) and `b`; nothing listens.
    fn kubeconfig(dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
             clusters:\n\
             - name: a\n  cluster: {server: 'http://127.0.0.1:1/'}\n\
             - name: b\n  cluster: {server: 'http://127.0.0.1:2'}\n\
             users:\n- name: u\n  user: {token: t}\n\
             contexts:\n- name: a\n  context: {cluster: a, user: u}\n\
             - name: b\n  context: {cluster: b, user: u}\n",
        )
        .unwrap();
        path
    }

    #[tokio::test]
    async fn kubeconfig_and_context_pick_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let kc = kubeconfig(dir.path());
        let current = connect(Some(&kc), None).await.unwrap();
        assert_eq!(current.server, "http://127.0.0.1:1", "trailing / trimmed");
        let chosen = connect(Some(&kc), Some("b")).await.unwrap();
        assert_eq!(chosen.server, "http://127.0.0.1:2");
        assert!(client(Some(&kc)).await.is_ok());
    }

    #[tokio::test]
    async fn failures_name_what_failed() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = connect(Some(&missing), None).await.err().unwrap();
        assert!(
            matches!(err, ConnectError::ReadKubeconfig { .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("reading kubeconfig {}: ", missing.display())),
            "{text}"
        );

        let kc = kubeconfig(dir.path());
        let err = connect(Some(&kc), Some("c")).await.err().unwrap();
        assert!(matches!(err, ConnectError::Kubeconfig { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("kubeconfig {}: ", kc.display())),
            "{text}"
        );
        assert_eq!(text.matches("context: c").count(), 1, "{text}");
    }
}
