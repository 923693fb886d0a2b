//! Which images must be inspected for which platforms, and the table of
//! answers the caller fills in (within its own time budget) for `evaluate`.

use super::candidate::Candidate;
use super::policy::EffectivePolicy;
use super::workload::ContainerFacts;
use crate::facts::{ImageProfile, Platform};
use std::collections::BTreeSet;
use std::sync::Arc;

/// One (image reference, platform) pair.
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct ImageKey {
    pub image: String,
    pub platform: Platform,
}

impl ImageKey {
    pub fn new(image: &str, platform: &Platform) -> Self {
        ImageKey {
            image: image.to_string(),
            platform: platform.clone(),
        }
    }
}

/// The outcome of inspecting one image for one platform.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ImageResolution {
    /// Shared: caches hand the same profile to every request without copying.
    Resolved(Arc<ImageProfile>),
    /// Registry error, timeout, no such platform, ...: the message is shown.
    Unresolved { error: String },
}

/// Resolutions by image then platform (two levels so look-ups need no allocation).
/// Seeded fast hashing: the controller looks up every writer of every node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageResolutions {
    by_image: foldhash::HashMap<String, foldhash::HashMap<Platform, ImageResolution>>,
}

impl ImageResolutions {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, key: ImageKey, resolution: ImageResolution) {
        self.by_image
            .entry(key.image)
            .or_default()
            .insert(key.platform, resolution);
    }

    pub fn insert_profile(&mut self, image: &str, platform: &Platform, profile: ImageProfile) {
        self.insert_shared(image, platform, Arc::new(profile));
    }

    pub fn insert_shared(&mut self, image: &str, platform: &Platform, profile: Arc<ImageProfile>) {
        self.insert(
            ImageKey::new(image, platform),
            ImageResolution::Resolved(profile),
        );
    }

    pub fn insert_error(&mut self, image: &str, platform: &Platform, error: impl Into<String>) {
        self.insert(
            ImageKey::new(image, platform),
            ImageResolution::Unresolved {
                error: error.into(),
            },
        );
    }

    pub fn get(&self, image: &str, platform: &Platform) -> Option<&ImageResolution> {
        self.by_image.get(image)?.get(platform)
    }

    pub fn len(&self) -> usize {
        self.by_image.values().map(|m| m.len()).sum()
    }

    /// (image, platform, digest) of every image that was read.
    pub fn digests(&self) -> impl Iterator<Item = (&str, &Platform, &str)> {
        self.by_image.iter().flat_map(|(image, by_platform)| {
            by_platform.iter().filter_map(move |(platform, r)| match r {
                ImageResolution::Resolved(p) => Some((image.as_str(), platform, p.digest.as_str())),
                ImageResolution::Unresolved { .. } => None,
            })
        })
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The pairs `evaluate` will look at: images of containers that can write
/// netfilter rules (not exempt by policy or annotation), for the platform of
/// every candidate. Empty for ordinary workloads, so they cost no registry
/// look-up. Sorted and deduplicated.
pub fn images_to_resolve(
    containers: &[ContainerFacts],
    exempt_reason: Option<&str>,
    candidates: &[Candidate<'_>],
    policy: &EffectivePolicy,
) -> Vec<ImageKey> {
    if !policy.applies() || policy.honoured_exemption(exempt_reason).is_some() {
        return Vec::new();
    }
    let images: BTreeSet<&str> = containers
        .iter()
        .filter(|c| c.can_write())
        .filter_map(|c| c.image.as_deref())
        .filter(|i| policy.exempt_image_pattern(i).is_none())
        .collect();
    // Few distinct platforms among thousands of candidates: compare, not sort.
    let mut platforms: Vec<&Platform> = Vec::new();
    for c in candidates {
        let p: &Platform = &c.platform;
        if !platforms.iter().any(|q| std::ptr::eq(*q, p) || *q == p) {
            platforms.push(p);
        }
    }
    platforms.sort();
    let mut out = Vec::with_capacity(images.len() * platforms.len());
    for image in &images {
        for platform in &platforms {
            out.push(ImageKey::new(image, platform));
        }
    }
    out
}
