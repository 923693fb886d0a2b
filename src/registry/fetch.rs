//! The inspection itself: resolve the reference to one platform manifest,
//! read the config's labels, then stream layers top-down into
//! `rootfs::Layer`s until `rootfs::collect` says lower layers cannot
//! change the answer.

use super::auth::{self, DockerAuths};
use super::cache::{Caches, Resolved};
use super::manifest_get::{GetError, ManifestGetter};
use super::stream::{self, ChannelReader, Compression};
use super::{Credentials, MAX_MANIFEST_BYTES, Platform, RegistryConfig, RegistryError, TAG_TTL};
use crate::facts::{ImageProfile, IptablesFacts};
use crate::rootfs::{self, Layer, LayeredRoot};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{self as m, OciDescriptor, OciImageManifest, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use reqwest_oci::header::HeaderValue;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const ACCEPT: &[&str] = &[
    m::OCI_IMAGE_MEDIA_TYPE,
    m::OCI_IMAGE_INDEX_MEDIA_TYPE,
    m::IMAGE_MANIFEST_MEDIA_TYPE,
    m::IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];
/// An image config is small JSON; refuse anything bigger.
const MAX_CONFIG_BYTES: u64 = 8 << 20;

/// What one inspection cost.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InspectStats {
    /// The whole profile came from the cache (no network at all).
    pub from_cache: bool,
    pub layers_total: usize,
    /// Layers downloaded and parsed in this call.
    pub layers_fetched: usize,
    /// Layers taken from the layer cache.
    pub layers_from_cache: usize,
    /// Compressed blob bytes received (config + layers).
    pub bytes_fetched: u64,
    /// Sum of the config and layer sizes in the manifest.
    pub image_bytes: u64,
}

pub struct Inner {
    pub config: RegistryConfig,
    /// One client per distinct credentials: the client remembers the first
    /// credentials it used for a registry, and callers (webhook pull
    /// secrets) may bring different ones for the same registry.
    clients: std::sync::Mutex<lru::LruCache<String, Arc<Client>>>,
    /// Manifests are read through this, with a size cap.
    manifests: ManifestGetter,
    caches: Caches,
    /// Inspections that may stream layers at once (`MemoryPlan::inspections`):
    /// each holds a decompressor window and network batches outside the budget.
    streams: tokio::sync::Semaphore,
}

/// Identity of credentials, without keeping them readable in the key.
fn auth_key(auth: &RegistryAuth) -> String {
    let mut h = Sha256::new();
    match auth {
        RegistryAuth::Anonymous => h.update(b"anonymous"),
        RegistryAuth::Basic(u, p) => {
            h.update(b"basic\0");
            h.update(u.as_bytes());
            h.update(b"\0");
            h.update(p.as_bytes());
        }
        RegistryAuth::Bearer(t) => {
            h.update(b"bearer\0");
            h.update(t.as_bytes());
        }
    }
    hex::encode(h.finalize())
}

fn connect_timeout(config: &RegistryConfig) -> Duration {
    config.timeout.min(Duration::from_secs(10))
}

fn sha256_of(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let cs = c.to_string();
        if !s.contains(&cs) {
            s.push_str(": ");
            s.push_str(&cs);
        }
        cur = c.source();
    }
    s
}

/// Translate the client's errors into ours; `what` names the object fetched.
fn map_oci(e: OciDistributionError, registry: &str, what: &str) -> RegistryError {
    use OciDistributionError as E;
    let not_found = || RegistryError::NotFound { what: what.into() };
    match e {
        E::RegistryError { ref envelope, .. }
            if envelope.errors.iter().any(|x| {
                matches!(
                    x.code,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                )
            }) =>
        {
            not_found()
        }
        E::RegistryError { ref envelope, .. }
            if envelope
                .errors
                .iter()
                .any(|x| matches!(x.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)) =>
        {
            RegistryError::Unauthorized {
                registry: registry.into(),
                detail: envelope.to_string(),
            }
        }
        E::ServerError { code: 404, .. } | E::ImageManifestNotFoundError(_) => not_found(),
        E::ServerError {
            code: 401 | 403,
            ref message,
            ..
        } => RegistryError::Unauthorized {
            registry: registry.into(),
            detail: message.chars().take(200).collect(),
        },
        E::UnauthorizedError { ref url } => RegistryError::Unauthorized {
            registry: registry.into(),
            detail: format!("401 from {url}"),
        },
        E::AuthenticationFailure(ref d) => RegistryError::Unauthorized {
            registry: registry.into(),
            detail: d.clone(),
        },
        E::DigestError(oci_client::errors::DigestError::VerificationError {
            ref expected,
            ref actual,
        }) => RegistryError::DigestMismatch {
            digest: expected.clone(),
            actual: actual.clone(),
        },
        E::RequestError(ref r) => RegistryError::Network {
            registry: registry.into(),
            detail: error_chain(r),
        },
        E::IoError(ref io) => RegistryError::Network {
            registry: registry.into(),
            detail: io.to_string(),
        },
        other => RegistryError::Protocol {
            reference: what.into(),
            detail: error_chain(&other),
        },
    }
}

#[derive(serde::Deserialize, Default)]
struct ImageConfig {
    #[serde(default)]
    os: Option<String>,
    #[serde(default)]
    architecture: Option<String>,
    #[serde(default)]
    variant: Option<String>,
    #[serde(default)]
    config: Option<ImageConfigInner>,
}

#[derive(serde::Deserialize, Default)]
struct ImageConfigInner {
    #[serde(default, rename = "Labels")]
    labels: Option<BTreeMap<String, String>>,
}

impl Inner {
    pub fn new(config: RegistryConfig) -> Self {
        let caches = Caches::new(config.cache_entries, config.memory.layer_cache_bytes);
        let manifests = ManifestGetter::new(
            config.insecure_registries.clone(),
            config.timeout,
            connect_timeout(&config),
        );
        Self {
            manifests,
            clients: std::sync::Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(64).expect("nonzero"),
            )),
            caches,
            streams: tokio::sync::Semaphore::new(config.memory.inspections.max(1)),
            config,
        }
    }

    fn client_for(&self, auth: &RegistryAuth) -> Arc<Client> {
        let key = auth_key(auth);
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(&key) {
            return c.clone();
        }
        let client = Arc::new(Client::new(ClientConfig {
            protocol: ClientProtocol::HttpsExcept(self.config.insecure_registries.clone()),
            // Index platform choice is ours (`platform::select`), not the client's.
            platform_resolver: None,
            read_timeout: Some(self.config.timeout),
            connect_timeout: Some(connect_timeout(&self.config)),
            ..Default::default()
        }));
        clients.put(key, client.clone());
        client
    }

    fn parse_reference(reference: &str) -> Result<Reference, RegistryError> {
        reference
            .parse::<Reference>()
            .map_err(|e| RegistryError::InvalidReference {
                reference: reference.into(),
                reason: e.to_string(),
            })
    }

    fn key(r: &Reference, platform: &Platform) -> (String, String) {
        (r.whole(), platform.to_string())
    }

    pub fn cached(&self, reference: &str, platform: &Platform) -> Option<ImageProfile> {
        let r = Self::parse_reference(reference).ok()?;
        let resolved = self.caches.resolved.get(&Self::key(&r, platform))?;
        let profile = self.caches.profiles.get(&resolved.digest)?;
        let mut p = (*profile).clone();
        p.image = reference.into();
        Some(p)
    }

    fn auth_for(
        &self,
        r: &Reference,
        credentials: Option<&Credentials>,
    ) -> Result<RegistryAuth, RegistryError> {
        let creds = match credentials {
            Some(c) => Some(c.clone()),
            None => match auth::config_path(self.config.docker_config.as_deref(), |k| {
                std::env::var(k).ok()
            }) {
                Some((path, required)) => {
                    DockerAuths::load(&path, required)?.for_registry(r.resolve_registry())
                }
                None => None,
            },
        };
        Ok(match creds {
            None | Some(Credentials::Anonymous) => RegistryAuth::Anonymous,
            Some(Credentials::Basic { username, password }) => {
                RegistryAuth::Basic(username, password)
            }
        })
    }

    /// Fetch a manifest (at most `MAX_MANIFEST_BYTES`) and check its bytes
    /// against `expect` (a digest) and the registry's digest header.
    async fn manifest(
        &self,
        r: &Reference,
        authorization: Option<&HeaderValue>,
        expect: Option<&str>,
    ) -> Result<(OciManifest, String), RegistryError> {
        let registry = r.resolve_registry().to_string();
        let (body, header_digest) =
            self.manifests
                .get(r, authorization, ACCEPT)
                .await
                .map_err(|e| match e {
                    GetError::TooLarge => RegistryError::ManifestTooLarge {
                        reference: r.whole(),
                        limit: MAX_MANIFEST_BYTES,
                    },
                    GetError::Oci(e) => map_oci(e, &registry, &format!("manifest {}", r.whole())),
                })?;
        let digest = sha256_of(&body);
        // The header counts only when it uses our algorithm.
        let header_digest = header_digest.filter(|d| d.starts_with("sha256:"));
        if let Some(expect) = expect.or(header_digest.as_deref())
            && expect != digest
        {
            return Err(RegistryError::DigestMismatch {
                digest: expect.into(),
                actual: digest,
            });
        }
        let versioned: m::Versioned =
            serde_json::from_slice(&body).map_err(|e| RegistryError::Protocol {
                reference: r.whole(),
                detail: format!("manifest is not JSON: {e}"),
            })?;
        if let Some(mt) = &versioned.media_type
            && !ACCEPT.contains(&mt.as_str())
        {
            return Err(RegistryError::UnsupportedManifest {
                reference: r.whole(),
                media_type: mt.clone(),
            });
        }
        let manifest: OciManifest =
            serde_json::from_slice(&body).map_err(|e| RegistryError::Protocol {
                reference: r.whole(),
                detail: format!("manifest does not parse: {e}"),
            })?;
        Ok((manifest, digest))
    }

    /// Reference -> (platform manifest, its digest), following an index.
    async fn resolve(
        &self,
        client: &Client,
        r: &Reference,
        platform: &Platform,
        auth: &RegistryAuth,
    ) -> Result<(OciImageManifest, String), RegistryError> {
        let registry = r.resolve_registry().to_string();
        let authorization = ManifestGetter::authorization(client, r, auth)
            .await
            .map_err(|e| map_oci(e, &registry, &format!("manifest {}", r.whole())))?;
        let authorization = authorization.as_ref();
        let (top, digest) = self.manifest(r, authorization, r.digest()).await?;
        match top {
            OciManifest::Image(img) => Ok((img, digest)),
            OciManifest::ImageIndex(index) => {
                let chosen =
                    super::platform::select(&index.manifests, platform).map_err(|available| {
                        RegistryError::NoMatchingPlatform {
                            reference: r.whole(),
                            platform: platform.to_string(),
                            available: if available.is_empty() {
                                "none".into()
                            } else {
                                available.join(", ")
                            },
                        }
                    })?;
                let by_digest = r.clone_with_digest(chosen.clone());
                match self
                    .manifest(&by_digest, authorization, Some(&chosen))
                    .await?
                {
                    (OciManifest::Image(img), d) => Ok((img, d)),
                    (OciManifest::ImageIndex(_), _) => Err(RegistryError::Protocol {
                        reference: r.whole(),
                        detail: format!("index entry {chosen} is itself an index"),
                    }),
                }
            }
        }
    }

    /// Stream one blob through `parse` on a blocking thread, verifying it.
    async fn read_blob<T: Send + 'static>(
        &self,
        client: &Client,
        r: &Reference,
        desc: &OciDescriptor,
        fetched: &AtomicU64,
        parse: impl FnOnce(&mut ChannelReader) -> Result<T, RegistryError> + Send + 'static,
    ) -> Result<T, RegistryError> {
        let registry = r.resolve_registry().to_string();
        // A ranged request from 0 gets the whole blob; the client then leaves
        // verification to us (`stream::pump` hashes it) instead of hashing it
        // a second time. A registry that ignores Range answers 200 and the
        // client verifies too.
        let sized = match client
            .pull_blob_stream_partial(r, desc, 0, None)
            .await
            .map_err(|e| map_oci(e, &registry, &format!("blob {}", desc.digest)))?
        {
            oci_client::client::BlobResponse::Full(s)
            | oci_client::client::BlobResponse::Partial(s) => s,
        };
        let (tx, mut reader) = stream::channel();
        let parsing = tokio::task::spawn_blocking(move || parse(&mut reader));
        let size = u64::try_from(desc.size).ok().filter(|s| *s > 0);
        let pumped = stream::pump(sized.stream, tx, &desc.digest, size, fetched).await;
        let parsed = parsing.await;
        pumped?; // a network or digest failure explains any parse failure
        parsed.map_err(|e| RegistryError::Internal(format!("parser task: {e}")))?
    }

    async fn read_config(
        &self,
        client: &Client,
        r: &Reference,
        desc: &OciDescriptor,
        fetched: &AtomicU64,
    ) -> Result<ImageConfig, RegistryError> {
        let digest = desc.digest.clone();
        let bytes = self
            .read_blob(client, r, desc, fetched, move |reader| {
                let mut buf = Vec::new();
                let res = reader.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut buf);
                let too_big = buf.len() as u64 > MAX_CONFIG_BYTES;
                if res.is_ok() && !too_big {
                    let _ = reader.drain();
                }
                match res {
                    Err(e) => Err(RegistryError::BlobStream {
                        digest: digest.clone(),
                        got: buf.len() as u64,
                        detail: e.to_string(),
                    }),
                    Ok(_) if too_big => Err(RegistryError::Config {
                        digest,
                        detail: format!("larger than {MAX_CONFIG_BYTES} bytes"),
                    }),
                    Ok(_) => Ok(buf),
                }
            })
            .await?;
        serde_json::from_slice(&bytes).map_err(|e| RegistryError::Config {
            digest: desc.digest.clone(),
            detail: e.to_string(),
        })
    }

    async fn read_layer(
        &self,
        client: &Client,
        r: &Reference,
        desc: &OciDescriptor,
        fetched: &AtomicU64,
    ) -> Result<Layer, RegistryError> {
        let digest = desc.digest.clone();
        let limits = self.config.layer_limits.clone();
        let limit = self.config.max_decompressed_layer_bytes;
        let hint = Compression::from_media_type(&desc.media_type);
        self.read_blob(client, r, desc, fetched, move |reader| {
            let parsed = stream::decompress_into(reader, hint, limit, &digest, |tar| {
                Layer::from_tar(tar, &limits)
            })?;
            let layer = parsed.map_err(|source| RegistryError::Layer {
                digest: digest.clone(),
                source,
            })?;
            // Finish the blob so its digest is verified before the layer is used.
            reader.drain().map_err(|e| RegistryError::BlobStream {
                digest: digest.clone(),
                got: 0,
                detail: e.to_string(),
            })?;
            Ok(layer)
        })
        .await
    }

    pub async fn inspect(
        &self,
        reference: &str,
        platform: &Platform,
        credentials: Option<&Credentials>,
    ) -> Result<(ImageProfile, InspectStats), RegistryError> {
        if let Some(p) = self.cached(reference, platform) {
            let stats = InspectStats {
                from_cache: true,
                ..Default::default()
            };
            return Ok((p, stats));
        }
        let r = Self::parse_reference(reference)?;
        let auth = self.auth_for(&r, credentials)?;
        let client = self.client_for(&auth);
        let (manifest, digest) = self.resolve(&client, &r, platform, &auth).await?;
        let ttl = if r.digest().is_some() {
            None
        } else {
            Some(TAG_TTL)
        };
        self.caches.resolved.insert(
            Self::key(&r, platform),
            Resolved {
                digest: digest.clone(),
                ttl,
            },
        );
        let mut stats = InspectStats {
            layers_total: manifest.layers.len(),
            image_bytes: manifest
                .layers
                .iter()
                .chain(std::iter::once(&manifest.config))
                .map(|d| d.size.max(0) as u64)
                .sum(),
            ..Default::default()
        };
        if let Some(p) = self.caches.profiles.get(&digest) {
            let mut p = (*p).clone();
            p.image = reference.into();
            stats.from_cache = true;
            return Ok((p, stats));
        }

        let fetched = Arc::new(AtomicU64::new(0));
        let config = self
            .read_config(&client, &r, &manifest.config, &fetched)
            .await?;
        let labels = Arc::new(
            config
                .config
                .as_ref()
                .and_then(|c| c.labels.clone())
                .unwrap_or_default(),
        );
        let facts = self
            .scan_layers(&client, &r, &manifest.layers, &labels, &fetched, &mut stats)
            .await?;
        stats.bytes_fetched = fetched.load(Ordering::Relaxed);

        let platform_string = match (&config.os, &config.architecture) {
            (Some(os), Some(arch)) if !os.is_empty() && !arch.is_empty() => Platform {
                os: os.clone(),
                architecture: arch.clone(),
                variant: config.variant.clone().filter(|v| !v.is_empty()),
            }
            .to_string(),
            _ => platform.to_string(),
        };
        let profile = ImageProfile {
            image: reference.into(),
            digest: digest.clone(),
            platform: platform_string,
            iptables: facts,
        };
        self.caches
            .profiles
            .insert(digest, Arc::new(profile.clone()));
        Ok((profile, stats))
    }

    /// Top layer first; stop as soon as the unread layers cannot matter.
    async fn scan_layers(
        &self,
        client: &Client,
        r: &Reference,
        layers: &[OciDescriptor],
        labels: &Arc<BTreeMap<String, String>>,
        fetched: &Arc<AtomicU64>,
        stats: &mut InspectStats,
    ) -> Result<Option<IptablesFacts>, RegistryError> {
        let mut root = LayeredRoot {
            layers: Vec::with_capacity(layers.len()),
            complete: layers.is_empty(),
        };
        let mut retained = 0u64;
        for desc in layers.iter().rev() {
            let layer = match self.caches.layers.get(&desc.digest) {
                Some(l) => {
                    stats.layers_from_cache += 1;
                    l
                }
                None => {
                    let _stream =
                        self.streams.acquire().await.map_err(|_| {
                            RegistryError::Internal("inspection slots closed".into())
                        })?;
                    let l = Arc::new(self.read_layer(client, r, desc, fetched).await?);
                    stats.layers_fetched += 1;
                    self.caches.layers.insert(desc.digest.clone(), l.clone());
                    l
                }
            };
            // Each layer is capped alone; so is what one image holds at once.
            retained += layer.retained_bytes();
            let cap = self.config.layer_limits.max_retained_bytes;
            if retained > cap {
                return Err(RegistryError::Layer {
                    digest: desc.digest.clone(),
                    source: rootfs::LayerError::Limit(format!(
                        "the image's layers retain more than {cap} bytes of probe files"
                    )),
                });
            }
            root.layers.push(layer);
            root.complete = root.layers.len() == layers.len();
            let (back, collected) = collect_blocking(root, labels.clone()).await?;
            root = back;
            if collected.settled || root.complete {
                tracing::debug!(
                    read = root.layers.len(),
                    total = layers.len(),
                    "layer scan settled"
                );
                return Ok(collected.facts);
            }
        }
        root.complete = true;
        Ok(collect_blocking(root, labels.clone()).await?.1.facts)
    }
}

async fn collect_blocking(
    root: LayeredRoot,
    labels: Arc<BTreeMap<String, String>>,
) -> Result<(LayeredRoot, rootfs::Collected), RegistryError> {
    tokio::task::spawn_blocking(move || {
        let c = rootfs::collect(&root, &labels);
        (root, c)
    })
    .await
    .map_err(|e| RegistryError::Internal(format!("probe task: {e}")))
}
