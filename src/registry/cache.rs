//! Bounded in-memory caches: reference+platform -> manifest digest (tags
//! expire quickly because tags move; digest references never do), manifest
//! digest -> profile, layer digest -> parsed layer (shared base layers are
//! read once).

use crate::facts::ImageProfile;
use crate::rootfs::Layer;
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

impl moka::Expiry<(String, String), Resolved> for ResolvedExpiry {
    fn expire_after_create(
        &self,
        _key: &(String, String),
        value: &Resolved,
        _now: Instant,
    ) -> Option<Duration> {
        value.ttl
    }
}

#[derive(Clone)]
pub struct Caches {
    pub resolved: Cache<(String, String), Resolved>,
    pub profiles: Cache<String, Arc<ImageProfile>>,
    pub layers: Cache<String, Arc<Layer>>,
}

impl Caches {
    pub fn new(entries: usize, layer_entries: usize) -> Self {
        let entries = entries.max(1) as u64;
        Self {
            resolved: Cache::builder()
                .max_capacity(entries)
                .expire_after(ResolvedExpiry)
                .build(),
            profiles: Cache::builder().max_capacity(entries).build(),
            layers: Cache::builder()
                .max_capacity(layer_entries.max(1) as u64)
                .build(),
        }
    }
}
