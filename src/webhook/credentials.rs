//! Registry credentials for an admitted pod: its own `imagePullSecrets` and
//! its ServiceAccount's, read through the API (`kubernetes.io/dockerconfigjson`
//! and legacy `.dockercfg` Secrets). File mode has none (anonymous / docker config).

use crate::registry::Credentials;
use crate::registry::auth::DockerAuths;
use k8s_openapi::api::core::v1::{PodSpec, Secret, ServiceAccount};
use kube::Api;

/// Pull secrets of one pod, parsed; looked up per image.
#[derive(Default, Debug, Clone)]
pub struct PullSecrets {
    auths: Vec<DockerAuths>,
}

impl PullSecrets {
    /// Credentials for the registry `image` lives in (first secret that has some).
    pub fn for_image(&self, image: &str) -> Option<Credentials> {
        let host = registry_host(image);
        self.auths.iter().find_map(|a| a.for_registry(&host))
    }

    pub fn is_empty(&self) -> bool {
        self.auths.is_empty()
    }
}

/// `127.0.0.1:5000/app:v1` -> `127.0.0.1:5000`; `nginx` -> `docker.io`.
pub fn registry_host(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_ascii_lowercase()
        }
        _ => "docker.io".to_string(),
    }
}

/// Parse one Secret's docker config (`.dockerconfigjson`, else `.dockercfg`).
pub fn parse_secret(secret: &Secret) -> Result<Option<DockerAuths>, String> {
    let Some(data) = &secret.data else {
        return Ok(None);
    };
    if let Some(b) = data.get(".dockerconfigjson") {
        return DockerAuths::parse(&b.0).map(Some);
    }
    if let Some(b) = data.get(".dockercfg") {
        // Legacy format: the `auths` map itself.
        let inner: serde_json::Value =
            serde_json::from_slice(&b.0).map_err(|e| format!(".dockercfg: {e}"))?;
        let wrapped = serde_json::json!({ "auths": inner });
        return DockerAuths::parse(wrapped.to_string().as_bytes()).map(Some);
    }
    Ok(None)
}

/// Read the pod's and its ServiceAccount's pull secrets. Missing or broken
/// secrets are skipped with a log line: the image may well be public.
pub async fn pull_secrets(client: &kube::Client, namespace: &str, spec: &PodSpec) -> PullSecrets {
    let mut names: Vec<String> = spec
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|r| r.name.clone())
        .collect();
    let sa_name = spec.service_account_name.as_deref().unwrap_or("default");
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    match sas.get_opt(sa_name).await {
        Ok(Some(sa)) => names.extend(
            sa.image_pull_secrets
                .iter()
                .flatten()
                .map(|r| r.name.clone()),
        ),
        Ok(None) => {}
        Err(e) => tracing::debug!(namespace, sa_name, error = %e, "reading ServiceAccount"),
    }
    names.dedup();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut out = PullSecrets::default();
    for name in names {
        match secrets.get_opt(&name).await {
            Ok(Some(s)) => match parse_secret(&s) {
                Ok(Some(a)) => out.auths.push(a),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(namespace, secret = %name, error = %e, "unusable imagePullSecret")
                }
            },
            Ok(None) => tracing::debug!(namespace, secret = %name, "imagePullSecret not found"),
            Err(e) => {
                tracing::warn!(namespace, secret = %name, error = %e, "reading imagePullSecret")
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_hosts() {
        assert_eq!(registry_host("127.0.0.1:5000/app:v1"), "127.0.0.1:5000");
        assert_eq!(registry_host("nginx"), "docker.io");
        assert_eq!(registry_host("library/nginx:1"), "docker.io");
        assert_eq!(registry_host("localhost/x"), "localhost");
        assert_eq!(registry_host("Reg.Example/x/y@sha256:ab"), "reg.example");
    }

    #[test]
    fn dockerconfigjson_secret() {
        use base64::Engine;
        let auth = base64::engine::general_purpose::STANDARD.encode("u:p");
        let cfg = format!(r#"{{"auths":{{"127.0.0.1:5000":{{"auth":"{auth}"}}}}}}"#);
        let s = Secret {
            data: Some(
                [(
                    ".dockerconfigjson".to_string(),
                    k8s_openapi::ByteString(cfg.into_bytes()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let ps = PullSecrets {
            auths: vec![parse_secret(&s).unwrap().unwrap()],
        };
        assert_eq!(
            ps.for_image("127.0.0.1:5000/app:v1"),
            Some(Credentials::Basic {
                username: "u".into(),
                password: "p".into()
            })
        );
        assert_eq!(ps.for_image("other.example/app"), None);
    }
}
