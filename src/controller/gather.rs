//! Gather (I/O): everything one node's plan needs, read from the API server,
//! the controller's Namespace store and the image inspection cache.

use super::namespaces::NamespaceMeta;
use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::compat::evaluate::{ImageKey, ImageResolutions};
use crate::registry::{ImageInspector, Platform};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;
use std::time::Duration;

/// How images are resolved to the iptables they bundle.
#[async_trait::async_trait]
pub trait ImageSource: Send + Sync {
    /// Resolve every key; failures are recorded as unresolved, never dropped.
    async fn resolve(&self, keys: &[ImageKey]) -> ImageResolutions;
}

/// The registry, through the shared inspector and its cache.
pub struct RegistryImages {
    pub inspector: ImageInspector,
    /// Look-ups in flight at once.
    pub concurrency: usize,
}

#[async_trait::async_trait]
impl ImageSource for RegistryImages {
    async fn resolve(&self, keys: &[ImageKey]) -> ImageResolutions {
        let results: Vec<_> = futures::stream::iter(keys.iter().cloned())
            .map(|key| async move {
                let platform: Result<Platform, String> = key.platform.parse();
                let outcome = match platform {
                    Err(e) => Err(e),
                    Ok(p) => self
                        .inspector
                        .inspect(&key.image, &p, None)
                        .await
                        .map_err(|e| e.to_string()),
                };
                (key, outcome)
            })
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await;
        let mut out = ImageResolutions::new();
        for (key, outcome) in results {
            match outcome {
                Ok(profile) => out.insert_profile(&key.image, &key.platform, profile),
                Err(error) => {
                    tracing::debug!(image = %key.image, platform = %key.platform, %error, "image not resolved");
                    out.insert_error(&key.image, &key.platform, error)
                }
            }
        }
        out
    }
}

/// Answers from a fixed table (tests, benchmarks, `--no-registry`).
#[derive(Clone, Debug, Default)]
pub struct FixedImages(pub ImageResolutions);

#[async_trait::async_trait]
impl ImageSource for FixedImages {
    async fn resolve(&self, keys: &[ImageKey]) -> ImageResolutions {
        let mut out = ImageResolutions::new();
        for k in keys {
            match self.0.get(&k.image, &k.platform) {
                Some(r) => out.insert(k.clone(), r.clone()),
                None => out.insert_error(&k.image, &k.platform, "not in the fixed image table"),
            }
        }
        out
    }
}

/// What the API server says about one node.
#[derive(Clone, Debug)]
pub struct Gathered {
    pub profile: Option<NodeNetfilterProfile>,
    pub pods: Vec<Pod>,
    pub policies: Vec<NetfilterPolicy>,
}

/// The node's profile (named after it), its pods and every policy.
pub async fn gather(client: &kube::Client, node: &Node) -> Result<Gathered, kube::Error> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let profiles: Api<NodeNetfilterProfile> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    let policies: Api<NetfilterPolicy> = Api::all(client.clone());
    let profile = profiles.get_opt(name).await?;
    let pods = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
        .await?
        .items;
    let policies = policies.list(&ListParams::default()).await?.items;
    Ok(Gathered {
        profile,
        pods,
        policies,
    })
}

/// Whether the Namespace store has its first full list within `wait`.
/// Judging before it would match `namespaceSelector`s against no labels and
/// lift taints that the policies ask for.
pub async fn namespaces_listed(store: &Store<NamespaceMeta>, wait: Duration) -> bool {
    matches!(
        tokio::time::timeout(wait, store.wait_until_ready()).await,
        Ok(Ok(()))
    )
}
