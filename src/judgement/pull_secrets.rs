//! A pod's registry credentials, read through the API: its own
//! `imagePullSecrets` and its ServiceAccount's (as kubelet uses them),
//! `kubernetes.io/dockerconfigjson` and legacy `.dockercfg` Secrets. The
//! webhook reads them for the pod it admits, the controller for the pods
//! running on a node, so both judge a private image with the same secret.

use crate::object_names::{is_dns_label, is_dns_subdomain};
pub use crate::projection::MAX_PULL_SECRETS;
use crate::projection::PullSecretRefs;
use crate::registry::PullSecrets;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::Api;
use std::sync::Arc;
use std::time::Duration;

/// The Secret names a pod's pull credentials come from: its own, then its
/// ServiceAccount's (`of_sa`), without repeats, at most `MAX_PULL_SECRETS`;
/// a name no Secret can have is never looked up (it would become a path).
fn secret_names(refs: &PullSecretRefs, of_sa: &[String]) -> Vec<String> {
    let own = refs.names.iter().map(|n| &**n);
    let of_sa = of_sa.iter().map(String::as_str);
    let mut names: Vec<String> = Vec::new();
    for name in own.chain(of_sa).filter(|n| is_dns_subdomain(n)) {
        if !names.iter().any(|n| n == name) && names.len() < MAX_PULL_SECRETS {
            names.push(name.to_string());
        }
    }
    names
}

/// Read the pod's and its ServiceAccount's pull secrets. Missing or broken
/// secrets are skipped with a log line: the image may well be public. A
/// namespace or ServiceAccount name the API server could not hold (a forged
/// review's) reads nothing.
pub async fn pull_secrets(
    client: &kube::Client,
    namespace: &str,
    refs: &PullSecretRefs,
) -> PullSecrets {
    if !valid_names(namespace, refs) {
        return PullSecrets::default();
    }
    let of_sa = service_account_secret_names(client, namespace, refs.service_account())
        .await
        .unwrap_or_default();
    read_secrets(client, namespace, &secret_names(refs, &of_sa)).await
}

/// Whether the namespace and ServiceAccount names may be looked up.
fn valid_names(namespace: &str, refs: &PullSecretRefs) -> bool {
    let sa_name = refs.service_account();
    if !is_dns_label(namespace) || !is_dns_subdomain(sa_name) {
        // Debug-escaped and cut: these names come from the request.
        let (ns, sa): (String, String) = (
            namespace.chars().take(64).collect(),
            sa_name.chars().take(64).collect(),
        );
        tracing::warn!(
            namespace = ?ns,
            service_account = ?sa,
            "no pull secrets read: the namespace or ServiceAccount is not a valid object name"
        );
        return false;
    }
    true
}

/// The `imagePullSecrets` names of ServiceAccount `sa_name` (none if it does
/// not exist); None when the API could not answer (not to be cached).
async fn service_account_secret_names(
    client: &kube::Client,
    namespace: &str,
    sa_name: &str,
) -> Option<Vec<String>> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    match sas.get_opt(sa_name).await {
        Ok(sa) => Some(
            sa.and_then(|sa| sa.image_pull_secrets)
                .unwrap_or_default()
                .into_iter()
                .map(|r| r.name)
                .filter(|n| is_dns_subdomain(n))
                .take(MAX_PULL_SECRETS)
                .collect(),
        ),
        Err(e) => {
            tracing::debug!(namespace, sa_name, error = %e, "reading ServiceAccount");
            None
        }
    }
}

async fn read_secrets(client: &kube::Client, namespace: &str, names: &[String]) -> PullSecrets {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut out = PullSecrets::default();
    for name in names {
        match secrets.get_opt(name).await {
            Ok(Some(s)) => match s.data.as_ref().map(PullSecrets::parse_secret_data) {
                Some(Ok(Some(a))) => out.push(a),
                None | Some(Ok(None)) => {}
                Some(Err(e)) => {
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

/// How long a ServiceAccount's `imagePullSecrets` names are reused: a
/// secret added to the account is used within this time.
pub const SERVICE_ACCOUNT_NAMES_TTL: Duration = Duration::from_secs(30);
/// ServiceAccounts whose names are kept at once.
pub const SERVICE_ACCOUNT_NAMES_ENTRIES: u64 = 4096;

/// The webhook's reads: a pod's pull secrets for each review (Secrets are
/// read every time, so a revoked or rotated one counts at once and no
/// secret data is kept), its ServiceAccount's `imagePullSecrets` names from
/// a cache. The replicas of one workload share an account: one GET of it
/// per [`SERVICE_ACCOUNT_NAMES_TTL`], not one per pod.
#[derive(Clone)]
pub struct PodPullSecrets {
    client: kube::Client,
    service_accounts: moka::future::Cache<(String, String), Arc<Vec<String>>>,
}

impl PodPullSecrets {
    pub fn new(client: kube::Client, ttl: Duration, entries: u64) -> Self {
        PodPullSecrets {
            client,
            service_accounts: ttl_cache(ttl, entries),
        }
    }

    pub async fn read(&self, namespace: &str, refs: &PullSecretRefs) -> PullSecrets {
        if !valid_names(namespace, refs) {
            return PullSecrets::default();
        }
        let sa_name = refs.service_account();
        let key = (namespace.to_string(), sa_name.to_string());
        let of_sa = self
            .service_accounts
            .optionally_get_with(key, async {
                service_account_secret_names(&self.client, namespace, sa_name)
                    .await
                    .map(Arc::new)
            })
            .await
            .unwrap_or_default();
        read_secrets(&self.client, namespace, &secret_names(refs, &of_sa)).await
    }
}

/// At most `entries` answers, each kept for `ttl`.
fn ttl_cache<K, V>(ttl: Duration, entries: u64) -> moka::future::Cache<K, V>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    moka::future::Cache::builder()
        .max_capacity(entries.max(1))
        .time_to_live(ttl.max(Duration::from_millis(1)))
        .build()
}

/// What a pod's pull secrets depend on: its namespace, ServiceAccount and
/// own secret names (pods of one DaemonSet share one).
type PodSecretsKey = (String, String, Vec<String>);

/// `pull_secrets` for many pods (the controller judges every writer on a
/// node at each reconcile): pods with the same namespace, ServiceAccount and
/// secret names share one read, kept for `ttl` (a rotated or revoked secret
/// is seen within it), at most `entries` of them.
#[derive(Clone)]
pub struct PullSecretReader {
    client: kube::Client,
    cache: moka::future::Cache<PodSecretsKey, Arc<PullSecrets>>,
}

impl PullSecretReader {
    pub fn new(client: kube::Client, ttl: Duration, entries: u64) -> Self {
        PullSecretReader {
            client,
            cache: ttl_cache(ttl, entries),
        }
    }

    pub async fn for_pod(&self, namespace: &str, refs: &PullSecretRefs) -> Arc<PullSecrets> {
        let key = (
            namespace.to_string(),
            refs.service_account().to_string(),
            secret_names(refs, &[]),
        );
        self.cache
            .get_with(key, async {
                Arc::new(pull_secrets(&self.client, namespace, refs).await)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use serde_json::json;

    #[test]
    fn the_pods_own_secrets_come_first_without_repeats_and_bounded() {
        let spec: PodSpec = serde_json::from_value(json!({
            "imagePullSecrets": [{"name": "a"}, {"name": "b"}, {"name": "a"}],
            "containers": []
        }))
        .unwrap();
        let sa = ["b".to_string(), "c".to_string()];
        assert_eq!(
            secret_names(&PullSecretRefs::of(&spec), &sa),
            ["a", "b", "c"]
        );
        let many: PodSpec = serde_json::from_value(json!({
            "imagePullSecrets": (0..40).map(|i| json!({"name": format!("s{i}")})).collect::<Vec<_>>(),
            "containers": []
        }))
        .unwrap();
        assert_eq!(
            secret_names(&PullSecretRefs::of(&many), &sa).len(),
            MAX_PULL_SECRETS
        );
    }

    #[test]
    fn names_no_secret_can_have_are_never_looked_up() {
        let spec: PodSpec = serde_json::from_value(json!({
            "imagePullSecrets": [{"name": "../configmaps/x"}, {"name": "ok"}, {"name": "a/b"}, {"name": "UPPER"}],
            "containers": []
        }))
        .unwrap();
        let sa = ["..%2fsecrets".to_string(), "fine.v2".to_string()];
        assert_eq!(
            secret_names(&PullSecretRefs::of(&spec), &sa),
            ["ok", "fine.v2"]
        );
    }
}
