//! Bounded in-memory caches: tag+credential -> the digest it named (a pin:
//! every platform of one tag is read from the same index until it expires),
//! reference+platform+credential -> manifest
//! digest (tags expire with their pin because tags move; digest references never
//! do; a resolution is only ever served to the credential that made it, so
//! a private image's answer never reaches a caller that could not read its
//! manifest), manifest
//! digest -> profile, layer digest -> the parser's record of the layer
//! (shared base layers are read once; weighed by the bytes each keeps, so
//! the cache's memory is bounded, not its entry count; never decoded here).

use super::CredentialId;
use crate::facts::ImageProfile;
use crate::rootfs::Reservation;
use bytes::Bytes;
use moka::sync::Cache;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone)]
pub struct Resolved {
    pub digest: String,
    /// None: the reference was by digest, the mapping never changes.
    pub ttl: Option<Duration>,
}

struct ResolvedExpiry;

/// A reference, a platform, and the credential that resolved them.
pub type ResolvedKey = (String, String, CredentialId);

impl moka::Expiry<ResolvedKey, Resolved> for ResolvedExpiry {
    fn expire_after_create(
        &self,
        _key: &ResolvedKey,
        value: &Resolved,
        _now: Instant,
    ) -> Option<Duration> {
        value.ttl
    }
}

/// A tag and the credential that resolved it.
pub type PinKey = (String, CredentialId);

/// The digest a tag named when it was last asked, and when.
#[derive(Clone)]
pub struct Pin {
    pub digest: String,
    pub at: Instant,
}

/// A layer as the parser recorded it (`rootfs::Layer::write_wire`), held
/// against the inspection budget while cached.
pub struct LayerRecord {
    pub record: Bytes,
    pub held: Reservation,
}

#[derive(Clone)]
pub struct Caches {
    pub pins: Cache<PinKey, Pin>,
    pub resolved: Cache<ResolvedKey, Resolved>,
    pub profiles: Cache<String, Arc<ImageProfile>>,
    pub layers: Cache<String, Arc<LayerRecord>>,
}

impl Caches {
    pub fn new(entries: usize, layer_bytes: u64, tag_ttl: Duration) -> Self {
        let entries = entries.max(1) as u64;
        Self {
            pins: Cache::builder()
                .max_capacity(entries)
                .time_to_live(tag_ttl.max(Duration::from_millis(1)))
                .build(),
            resolved: Cache::builder()
                .max_capacity(entries)
                .expire_after(ResolvedExpiry)
                .build(),
            profiles: Cache::builder().max_capacity(entries).build(),
            layers: Cache::builder()
                .weigher(|_digest: &String, layer: &Arc<LayerRecord>| {
                    u32::try_from(layer.held.bytes()).unwrap_or(u32::MAX)
                })
                .max_capacity(layer_bytes)
                .build(),
        }
    }
}
