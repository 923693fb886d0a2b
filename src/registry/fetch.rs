//! The inspection itself: resolve the reference to one platform manifest,
//! read the config's labels, then stream layers top-down into
//! `rootfs::Layer`s until `rootfs::collect` says lower layers cannot
//! change the answer.

use super::cache::LayerRecord;
use super::cache::{Caches, Pin, PinKey, Resolved, ResolvedKey};
use super::client::{Client, Transport, is_sha256_digest};
use super::error::{json_problem, remote_words};
use super::http::Http;
use super::parse::{Feed, Session};
use super::stale::{self, StaleStore, Staleness};
use super::stream::{self, ChannelReader, Compression};
use super::{CredentialId, Credentials, Platform, RegistryConfig, RegistryError};
use crate::facts::ImageProfile;
use crate::rootfs;
use bytes::Bytes;
use oci_client::Reference;
use oci_client::manifest::{self as m, OciDescriptor, OciImageManifest, OciManifest};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    /// Set when the answer is a tag's last one, served because its
    /// registry gave none (`from_cache` is then true too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<Staleness>,
}

pub struct Inner {
    pub config: RegistryConfig,
    /// The egress-checked HTTP client and the token cache, shared by all
    /// inspections (each gets a `Client` for its repository and credentials).
    transport: Arc<Transport>,
    caches: Caches,
    /// Each tag's last answer, for when its registry gives none.
    stale: Arc<StaleStore>,
    /// Inspections that may stream layers at once (`MemoryPlan::inspections`):
    /// each holds a decompressor window and network batches outside the budget.
    streams: tokio::sync::Semaphore,
    /// A sandboxed parser started ahead, confined and idle: the next
    /// inspection does not wait for a process to start. It has read
    /// nothing, and is used for one inspection only, like any other.
    spare: std::sync::Mutex<Option<Session>>,
}

fn connect_timeout(config: &RegistryConfig) -> Duration {
    config.timeout.min(Duration::from_secs(10))
}

/// A read that stalls past the inspection's own timeout is that timeout
/// ("did not finish within"), never the HTTP client's read timeout firing
/// in the same timer tick and winning the race as "unreachable" (the
/// inspection's timeout polls the inspection first). The race showed once
/// the reference parse stopped compiling a regex before the request.
fn read_timeout(config: &RegistryConfig) -> Duration {
    config.timeout + Duration::from_secs(1)
}

/// The shared transport; a client that cannot be built (bad extra CA
/// certificates) fails every inspection with the reason.
fn transport(config: &RegistryConfig) -> Transport {
    let http = Http::new(
        config.egress.clone(),
        connect_timeout(config),
        read_timeout(config),
        &config.extra_root_certificates_pem,
    );
    if let Err(e) = &http {
        tracing::error!(error = %e, "registry HTTP client not usable");
    }
    Transport::new(http, config.insecure_registries.clone())
}

fn sha256_of(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
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
        let caches = Caches::new(
            config.cache_entries,
            config.memory.layer_cache_bytes,
            config.tag_ttl,
        );
        let transport = Arc::new(transport(&config));
        let stale = StaleStore::new(config.cache_entries, config.tag_ttl, config.stale_if_error);
        Self {
            transport,
            caches,
            stale,
            streams: tokio::sync::Semaphore::new(config.memory.inspections.max(1)),
            spare: std::sync::Mutex::new(None),
            config,
        }
    }

    /// A client for `r`'s repository with the caller's credentials (None:
    /// anonymous; the caller's `CredentialSource` chose them), and who it
    /// reads as.
    fn client_for(
        &self,
        r: &Reference,
        credentials: Option<&Credentials>,
    ) -> (Client, CredentialId) {
        let identity = Credentials::identity(credentials);
        let client = Client::new(
            self.transport.clone(),
            r,
            credentials.cloned().unwrap_or(Credentials::Anonymous),
        );
        (client, identity)
    }

    fn parse_reference(reference: &str) -> Result<Reference, RegistryError> {
        super::reference::parse(reference).map_err(|e| RegistryError::InvalidReference {
            reference: reference.into(),
            reason: e.to_string(),
        })
    }

    fn key(r: &Reference, platform: &Platform, credential: CredentialId) -> ResolvedKey {
        (r.whole(), platform.to_string(), credential)
    }

    /// A cached answer for anonymous callers only.
    pub fn cached(&self, reference: &str, platform: &Platform) -> Option<ImageProfile> {
        self.cached_for(reference, platform, CredentialId::ANONYMOUS)
    }

    /// A cached answer for `credential`: only a resolution it made itself
    /// (a profile is found by the digest that resolution proved readable).
    fn cached_for(
        &self,
        reference: &str,
        platform: &Platform,
        credential: CredentialId,
    ) -> Option<ImageProfile> {
        let r = Self::parse_reference(reference).ok()?;
        let resolved = self
            .caches
            .resolved
            .get(&Self::key(&r, platform, credential))?;
        let profile = self.caches.profiles.get(&resolved.digest)?;
        let mut p = (*profile).clone();
        p.image = reference.into();
        Some(p)
    }

    /// Fetch a manifest (at most `MAX_MANIFEST_BYTES`) and check its bytes
    /// against `expect` (a digest) and the registry's digest header.
    async fn manifest(
        &self,
        client: &Client,
        r: &Reference,
        expect: Option<&str>,
    ) -> Result<(OciManifest, String), RegistryError> {
        // The header counts only when it is a well-formed sha256 digest.
        let (body, header_digest) = client.manifest(r, ACCEPT).await?;
        let digest = sha256_of(&body);
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
                detail: format!("manifest is not JSON ({})", json_problem(&e)),
            })?;
        if let Some(mt) = &versioned.media_type
            && !ACCEPT.contains(&mt.as_str())
        {
            return Err(RegistryError::UnsupportedManifest {
                reference: r.whole(),
                media_type: remote_words(mt, 128),
            });
        }
        let manifest: OciManifest =
            serde_json::from_slice(&body).map_err(|e| RegistryError::Protocol {
                reference: r.whole(),
                detail: format!("manifest does not parse ({})", json_problem(&e)),
            })?;
        Ok((manifest, digest))
    }

    /// The top manifest `r` names: by its digest, or for a tag by the digest
    /// the tag was pinned to (asked once per `tag_ttl` and credential, so
    /// every platform of one admission reads the same index); with the pin
    /// (None: a digest reference, the answer holds forever).
    async fn top_manifest(
        &self,
        client: &Client,
        r: &Reference,
        platform: &Platform,
        credential: CredentialId,
    ) -> Result<(OciManifest, String, Option<Pin>), RegistryError> {
        if let Some(d) = r.digest() {
            let (m, digest) = self.manifest(client, r, Some(d)).await?;
            return Ok((m, digest, None));
        }
        let key = (r.whole(), credential);
        if let Some(pin) = self.caches.pins.get(&key) {
            let pinned = r.clone_with_digest(pin.digest.clone());
            let (m, digest) = self.manifest(client, &pinned, Some(&pin.digest)).await?;
            return Ok((m, digest, Some(pin)));
        }
        let (m, digest) = self.repin(client, r, &key, platform).await?;
        let pin = Pin {
            digest: digest.clone(),
            at: Instant::now(),
        };
        self.caches.pins.insert(key.clone(), pin.clone());
        self.stale.pinned(&key, &digest, pin.at);
        Ok((m, digest, Some(pin)))
    }

    /// Ask the registry what the tag names now. With a last answer to fall
    /// back to, a registry that takes longer than `stale::PROBE` is taken
    /// as down (a blackhole would otherwise cost the connect timeout).
    async fn repin(
        &self,
        client: &Client,
        r: &Reference,
        key: &PinKey,
        platform: &Platform,
    ) -> Result<(OciManifest, String), RegistryError> {
        let fetch = self.manifest(client, r, None);
        let fallback = self
            .stale
            .servable_age(key, &platform.to_string(), Instant::now());
        if fallback.is_none() {
            return fetch.await;
        }
        let probe = stale::PROBE.min(self.config.timeout);
        tokio::time::timeout(probe, fetch)
            .await
            .unwrap_or_else(|_| {
                Err(RegistryError::Network {
                    registry: r.resolve_registry().to_string(),
                    detail: format!("no answer within {:.1}s", probe.as_secs_f64()),
                    outage: true,
                })
            })
    }

    /// Reference -> (platform manifest, its digest, the tag's pin),
    /// following an index.
    async fn resolve(
        &self,
        client: &Client,
        r: &Reference,
        platform: &Platform,
        credential: CredentialId,
    ) -> Result<(OciImageManifest, String, Option<Pin>), RegistryError> {
        let (top, digest, pin) = self.top_manifest(client, r, platform, credential).await?;
        let img = match top {
            OciManifest::Image(img) => (img, digest),
            OciManifest::ImageIndex(index) => {
                let chosen =
                    super::platform::select(&index.manifests, platform).map_err(|available| {
                        RegistryError::NoMatchingPlatform {
                            reference: r.whole(),
                            platform: platform.to_string(),
                            available: if available.is_empty() {
                                "none".into()
                            } else {
                                remote_words(&available.join(", "), 256)
                            },
                        }
                    })?;
                if !is_sha256_digest(&chosen) {
                    return Err(RegistryError::Protocol {
                        reference: r.whole(),
                        detail: "the index names a digest that is not sha256 and 64 hex digits"
                            .into(),
                    });
                }
                let by_digest = r.clone_with_digest(chosen.clone());
                match self.manifest(client, &by_digest, Some(&chosen)).await? {
                    (OciManifest::Image(img), d) => (img, d),
                    (OciManifest::ImageIndex(_), _) => {
                        return Err(RegistryError::Protocol {
                            reference: r.whole(),
                            detail: format!("index entry {chosen} is itself an index"),
                        });
                    }
                }
            }
        };
        // Every digest later fetched or named in a message is well-formed.
        let (manifest, _) = &img;
        if !std::iter::once(&manifest.config)
            .chain(&manifest.layers)
            .all(|d| is_sha256_digest(&d.digest))
        {
            return Err(RegistryError::Protocol {
                reference: r.whole(),
                detail: "the manifest names a digest that is not sha256 and 64 hex digits".into(),
            });
        }
        Ok((img.0, img.1, pin))
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
        // `stream::pump` verifies size and digest on the way.
        let blob = client.blob(r, &desc.digest).await?;
        let (tx, mut reader) = stream::channel();
        let parsing = tokio::task::spawn_blocking(move || parse(&mut reader));
        let size = u64::try_from(desc.size).ok().filter(|s| *s > 0);
        let pumped = stream::pump(blob, tx, &desc.digest, size, fetched).await;
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
            detail: json_problem(&e),
        })
    }

    /// Stream one layer blob into the parser, which returns its record;
    /// the pump verifies size and digest on the way (END only after that).
    async fn read_layer(
        &self,
        session: &mut Session,
        client: &Client,
        r: &Reference,
        desc: &OciDescriptor,
        fetched: &Arc<AtomicU64>,
    ) -> Result<Bytes, RegistryError> {
        let blob = client.blob(r, &desc.digest).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(stream::CHANNEL_CHUNKS);
        let size = u64::try_from(desc.size).ok().filter(|s| *s > 0);
        let (digest, fetched) = (desc.digest.clone(), fetched.clone());
        let pump =
            tokio::spawn(async move { stream::pump(blob, tx, &digest, size, &fetched).await });
        let mut feed = Feed::new(rx, pump);
        let hint = Compression::from_media_type(&desc.media_type);
        let limit = self.config.max_decompressed_layer_bytes;
        match session.push_blob(hint, limit, &mut feed).await {
            Ok(record) => Ok(record),
            Err(failure) => Err(match feed.failed_upstream().await {
                Some(e) => e,
                None => failure.into_error(&desc.digest),
            }),
        }
    }

    /// Keep a layer's record for other images that share it, if the
    /// budget has room (an uncached layer is only read again).
    fn cache_layer(&self, digest: &str, record: Bytes) {
        let mut held = self.config.layer_limits.budget.reservation();
        if held.grow(record.len() as u64).is_ok() {
            self.caches
                .layers
                .insert(digest.to_string(), Arc::new(LayerRecord { record, held }));
        }
    }

    pub async fn inspect(
        &self,
        reference: &str,
        platform: &Platform,
        credentials: Option<&Credentials>,
    ) -> Result<(ImageProfile, InspectStats), RegistryError> {
        let r = Self::parse_reference(reference)?;
        let (client, credential) = self.client_for(&r, credentials);
        if let Some(p) = self.cached_for(reference, platform, credential) {
            let stats = InspectStats {
                from_cache: true,
                ..Default::default()
            };
            return Ok((p, stats));
        }
        let (manifest, digest, pin) = self.resolve(&client, &r, platform, credential).await?;
        // A tag's platform resolution expires with its pin, not after it.
        let ttl = pin
            .as_ref()
            .map(|p| self.config.tag_ttl.saturating_sub(p.at.elapsed()));
        if ttl != Some(Duration::ZERO) {
            self.caches.resolved.insert(
                Self::key(&r, platform, credential),
                Resolved {
                    digest: digest.clone(),
                    ttl,
                },
            );
        }
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
            self.remember(&r, credential, pin.as_ref(), platform, &p);
            let mut p = (*p).clone();
            p.image = reference.into();
            stats.from_cache = true;
            return Ok((p, stats));
        }

        let fetched = Arc::new(AtomicU64::new(0));
        let config = self
            .read_config(&client, &r, &manifest.config, &fetched)
            .await?;
        let labels = config
            .config
            .as_ref()
            .and_then(|c| c.labels.clone())
            .unwrap_or_default();
        let collected = self
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
            iptables: collected.facts,
            nftables: collected.nftables,
        };
        let shared = Arc::new(profile.clone());
        self.remember(&r, credential, pin.as_ref(), platform, &shared);
        self.caches.profiles.insert(digest, shared);
        Ok((profile, stats))
    }

    /// Keep a tag's fresh answer as its last one (see `stale`).
    fn remember(
        &self,
        r: &Reference,
        credential: CredentialId,
        pin: Option<&Pin>,
        platform: &Platform,
        profile: &Arc<ImageProfile>,
    ) {
        if let Some(pin) = pin {
            let key = (r.whole(), credential);
            let platform = platform.to_string();
            self.stale
                .answered(&key, &pin.digest, pin.at, &platform, profile.clone());
        }
    }

    /// After a failed inspection: the tag's last answer, marked stale, if
    /// the registry gave no answer and it is within the bound; else `e`
    /// (an answer the registry gave forgets the last one).
    pub fn stale_or(
        &self,
        reference: &str,
        platform: &Platform,
        credentials: Option<&Credentials>,
        e: RegistryError,
    ) -> Result<(ImageProfile, InspectStats), RegistryError> {
        let Ok(r) = Self::parse_reference(reference) else {
            return Err(e);
        };
        if r.digest().is_some() {
            return Err(e);
        }
        let key = (r.whole(), Credentials::identity(credentials));
        let served = self
            .stale
            .on_error(&key, &platform.to_string(), e, Instant::now())?;
        tracing::warn!(image = reference, %platform, note = %served.staleness.note, "registry gave no answer: the tag's last answer stands in");
        let mut profile = (*served.profile).clone();
        profile.image = reference.into();
        let stats = InspectStats {
            from_cache: true,
            stale: Some(served.staleness),
            ..Default::default()
        };
        Ok((profile, stats))
    }

    /// A parser for one inspection: the spare if it is still there, and a
    /// new spare started for the next one (sandbox only).
    fn parser_session(&self) -> Result<Session, RegistryError> {
        let cpu_seconds = self.config.timeout.as_secs() + 2;
        let start = || Session::start(&self.config.parser, &self.config.layer_limits, cpu_seconds);
        let lock = || self.spare.lock().unwrap_or_else(|p| p.into_inner());
        let spare = lock().take().and_then(|mut s| s.alive().then_some(s));
        let session = match spare {
            Some(s) => s,
            None => start()?,
        };
        if matches!(self.config.parser, super::parse::Parser::Sandbox(_))
            && let Ok(next) = start()
        {
            *lock() = Some(next);
        }
        Ok(session)
    }

    /// Top layer first; stop as soon as the unread layers cannot change the
    /// iptables or the nftables answer. All parsing happens in the
    /// inspection's parser session (`parse`), never here.
    async fn scan_layers(
        &self,
        client: &Client,
        r: &Reference,
        layers: &[OciDescriptor],
        labels: &BTreeMap<String, String>,
        fetched: &Arc<AtomicU64>,
        stats: &mut InspectStats,
    ) -> Result<rootfs::Collected, RegistryError> {
        let _slot = self
            .streams
            .acquire()
            .await
            .map_err(|_| RegistryError::Internal("inspection slots closed".into()))?;
        let mut session = self.parser_session()?;
        let collect = async |session: &mut Session, complete: bool, digest: &str| {
            session
                .collect(complete, labels)
                .await
                .map_err(|f| f.into_error(digest))
        };
        for (read, desc) in layers.iter().rev().enumerate() {
            match self.caches.layers.get(&desc.digest) {
                Some(cached) => {
                    stats.layers_from_cache += 1;
                    session
                        .push_cached(&cached.record)
                        .await
                        .map_err(|f| f.into_error(&desc.digest))?;
                }
                None => {
                    let record = self
                        .read_layer(&mut session, client, r, desc, fetched)
                        .await?;
                    stats.layers_fetched += 1;
                    self.cache_layer(&desc.digest, record);
                }
            }
            let complete = read + 1 == layers.len();
            let collected = collect(&mut session, complete, &desc.digest).await?;
            if collected.settled || complete {
                tracing::debug!(read = read + 1, total = layers.len(), "layer scan settled");
                return Ok(collected);
            }
        }
        collect(&mut session, true, "").await
    }
}
