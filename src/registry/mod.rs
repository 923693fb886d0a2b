//! OCI registry access: reference -> platform manifest -> layers streamed
//! top-down into `rootfs::Layer`s until the answer is settled. Cached by
//! manifest digest and layer digest.
//!
//! OWNER: registry helper. Interface used by check/, webhook/, controller/.

pub mod auth;
mod cache;
pub mod cli;
mod client;
pub mod credential_source;
pub mod egress;
mod error;
mod fetch;
mod http;
mod manifest_get;
pub mod memory;
pub mod parse;
pub mod platform;
mod reference;
pub mod stale;
pub mod stream;
mod token;

pub use client::EGRESS_REFUSED;
pub use credential_source::{Anonymous, Chain, CredentialSource, DockerConfigFile, PullSecrets};
pub use egress::EgressPolicy;
pub use error::RegistryError;
pub use fetch::InspectStats;
pub use manifest_get::MAX_MANIFEST_BYTES;
pub use memory::MemoryPlan;
pub use stale::{STALE_IF_ERROR, StaleCollector, Staleness};

use crate::facts::ImageProfile;
use crate::rootfs::LayerLimits;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a tag's resolution to a manifest digest is trusted (tags move):
/// the default of `RegistryConfig::tag_ttl`.
pub const TAG_TTL: Duration = Duration::from_secs(30);

pub use crate::facts::Platform;

/// Registry credentials for one look-up (docker config, imagePullSecrets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    Anonymous,
    Basic { username: String, password: String },
}

impl Credentials {
    /// Who an answer fetched with these credentials is true for: a digest
    /// of them (the secret itself is never kept in a cache key).
    pub fn identity(credentials: Option<&Credentials>) -> CredentialId {
        use sha2::{Digest, Sha256};
        match credentials {
            None | Some(Credentials::Anonymous) => CredentialId::ANONYMOUS,
            Some(Credentials::Basic { username, password }) => {
                let mut h = Sha256::new();
                h.update(b"basic\0");
                h.update(username.as_bytes());
                h.update(b"\0");
                h.update(password.as_bytes());
                CredentialId(h.finalize().into())
            }
        }
    }
}

/// A digest of the credentials an answer was fetched with (see
/// `Credentials::identity`); caches key answers by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CredentialId([u8; 32]);

impl CredentialId {
    pub const ANONYMOUS: CredentialId = CredentialId([0; 32]);
}

#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// `HOST:PORT`s spoken to over plain HTTP; every other registry is HTTPS.
    pub insecure_registries: Vec<String>,
    /// A docker config.json (or a directory holding one) for credentials:
    /// read by `DockerConfigFile::for_config`, not by the inspector.
    pub docker_config: Option<PathBuf>,
    /// Budget for one whole inspection.
    pub timeout: Duration,
    /// Per-layer bounds; its `budget` is `memory.budget` (see `with_memory`).
    pub layer_limits: LayerLimits,
    /// Refuse a layer whose decompressed stream exceeds this many bytes.
    pub max_decompressed_layer_bytes: u64,
    /// Bounded caches of tag resolutions and profiles (entries).
    pub cache_entries: usize,
    /// How long a tag's resolution (its pin) is trusted: a moved tag is
    /// judged by its new digest at most this long after the move.
    pub tag_ttl: Duration,
    /// How long past its pin's expiry a tag's last answer stands in while
    /// its registry gives no answer (`stale`); zero: never.
    pub stale_if_error: Duration,
    /// How much memory inspections may use, in all.
    pub memory: MemoryPlan,
    /// Which hosts and addresses may be contacted (every redirect hop too).
    pub egress: EgressPolicy,
    /// PEM certificates trusted for registries besides the system's roots.
    pub extra_root_certificates_pem: Vec<u8>,
    /// Where layers are decompressed and parsed (a confined child process
    /// for every in-cluster component and the CLI; see `parse`).
    pub parser: parse::Parser,
}

impl RegistryConfig {
    /// Take `plan`'s budget for the layers and its share per inspection.
    pub fn with_memory(mut self, plan: MemoryPlan) -> Self {
        self.layer_limits.budget = plan.budget.clone();
        self.layer_limits.max_retained_bytes = plan.per_inspection_bytes;
        self.memory = plan;
        self
    }
}

impl Default for RegistryConfig {
    fn default() -> Self {
        let memory = MemoryPlan::default();
        Self {
            insecure_registries: Vec::new(),
            docker_config: None,
            timeout: Duration::from_secs(30),
            layer_limits: LayerLimits::default(),
            max_decompressed_layer_bytes: 8 << 30,
            cache_entries: 4096,
            tag_ttl: TAG_TTL,
            stale_if_error: STALE_IF_ERROR,
            memory: memory.clone(),
            egress: EgressPolicy::default(),
            extra_root_certificates_pem: Vec::new(),
            parser: parse::Parser::InProcess,
        }
        .with_memory(memory)
    }
}

/// Resolves images to `ImageProfile`s; cheap to clone and share.
#[derive(Clone)]
pub struct ImageInspector {
    inner: Arc<fetch::Inner>,
}

impl ImageInspector {
    pub fn new(config: RegistryConfig) -> Self {
        Self {
            inner: Arc::new(fetch::Inner::new(config)),
        }
    }

    /// Inspect `reference` for `platform`, from cache when possible, with
    /// `credentials` (None: anonymously); a `CredentialSource` chooses them.
    pub async fn inspect(
        &self,
        reference: &str,
        platform: &Platform,
        credentials: Option<&Credentials>,
    ) -> Result<ImageProfile, RegistryError> {
        self.inspect_with_stats(reference, platform, credentials)
            .await
            .map(|(p, _)| p)
    }

    /// Like `inspect`, also saying what it cost (layers read, bytes
    /// fetched) and whether the answer is a tag's last one, served stale
    /// because its registry gave none (`InspectStats::stale`).
    pub async fn inspect_with_stats(
        &self,
        reference: &str,
        platform: &Platform,
        credentials: Option<&Credentials>,
    ) -> Result<(ImageProfile, InspectStats), RegistryError> {
        let timeout = self.inner.config.timeout;
        let fresh = match tokio::time::timeout(
            timeout,
            self.inner.inspect(reference, platform, credentials),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(RegistryError::Timeout {
                reference: reference.into(),
                after: timeout,
            }),
        };
        // Outside the timeout: a registry too slow to answer is silence too.
        match fresh {
            Ok(answer) => Ok(answer),
            Err(e) => self.inner.stale_or(reference, platform, credentials, e),
        }
    }

    /// A cached answer only (the webhook's warm path); never touches the network.
    pub fn cached(&self, reference: &str, platform: &Platform) -> Option<ImageProfile> {
        self.inner.cached(reference, platform)
    }
}
