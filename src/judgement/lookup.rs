//! One image, one platform -> the iptables it bundles. The one trait every
//! caller's look-ups go through (the registry, fixed tables, test fakes),
//! with errors typed so caches can tell a missing image from a flaky registry.

use crate::compat::evaluate::ImageResolutions;
use crate::facts::{ImageProfile, Platform};
use crate::registry::{Credentials, ImageInspector, RegistryError};

/// Why a look-up gave no profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupErrorKind {
    /// The image, tag or platform does not exist: asking again soon gives
    /// the same answer.
    NotFound,
    /// The registry could not be reached, timed out or failed: it may
    /// answer next time.
    Unavailable,
    /// The registry answered, but nfguard refuses what it got (malformed or
    /// hostile content, over a limit, credentials refused).
    Refused,
}

/// A failed look-up: its kind and the message users see.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LookupError {
    pub kind: LookupErrorKind,
    pub message: String,
}

impl LookupError {
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(LookupErrorKind::NotFound, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(LookupErrorKind::Unavailable, message)
    }

    pub fn refused(message: impl Into<String>) -> Self {
        Self::new(LookupErrorKind::Refused, message)
    }

    fn new(kind: LookupErrorKind, message: impl Into<String>) -> Self {
        LookupError {
            kind,
            message: message.into(),
        }
    }
}

impl From<RegistryError> for LookupError {
    fn from(e: RegistryError) -> Self {
        use RegistryError as E;
        let kind = match &e {
            E::NotFound { .. } | E::NoMatchingPlatform { .. } => LookupErrorKind::NotFound,
            // Other inspections hold the memory now; it frees as they finish.
            E::Layer {
                source: crate::rootfs::LayerError::Budget(_),
                ..
            } => LookupErrorKind::Unavailable,
            E::Network { .. }
            | E::Timeout { .. }
            | E::BlobStream { .. }
            | E::Truncated { .. }
            | E::Internal(_) => LookupErrorKind::Unavailable,
            E::InvalidReference { .. }
            | E::Unauthorized { .. }
            | E::Protocol { .. }
            | E::UnsupportedManifest { .. }
            | E::ManifestTooLarge { .. }
            | E::DigestMismatch { .. }
            | E::BlobTooLong { .. }
            | E::DecompressedTooLarge { .. }
            | E::Layer { .. }
            | E::Decompress { .. }
            | E::Config { .. }
            | E::DockerConfig { .. } => LookupErrorKind::Refused,
        };
        LookupError::new(kind, e.to_string())
    }
}

/// Anything that turns an image reference into its profile for a platform.
#[async_trait::async_trait]
pub trait ImageLookup: Send + Sync {
    async fn lookup(
        &self,
        image: &str,
        platform: &Platform,
        credentials: Option<&Credentials>,
    ) -> Result<ImageProfile, LookupError>;
}

/// The real thing: the registry module's (cached) inspector.
#[async_trait::async_trait]
impl ImageLookup for ImageInspector {
    async fn lookup(
        &self,
        image: &str,
        platform: &Platform,
        credentials: Option<&Credentials>,
    ) -> Result<ImageProfile, LookupError> {
        Ok(self.inspect(image, platform, credentials).await?)
    }
}

/// Answers from a fixed table (tests, benchmarks); anything else is not found.
#[derive(Clone, Debug, Default)]
pub struct FixedImages(pub ImageResolutions);

#[async_trait::async_trait]
impl ImageLookup for FixedImages {
    async fn lookup(
        &self,
        image: &str,
        platform: &Platform,
        _credentials: Option<&Credentials>,
    ) -> Result<ImageProfile, LookupError> {
        use crate::compat::evaluate::ImageResolution;
        match self.0.get(image, platform) {
            Some(ImageResolution::Resolved(p)) => Ok(p.as_ref().clone()),
            Some(ImageResolution::Unresolved { error }) => {
                Err(LookupError::unavailable(error.clone()))
            }
            None => Err(LookupError::not_found(format!(
                "{image} for {platform} is not in the fixed image table"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_errors_are_classified_for_caches() {
        let not_found = LookupError::from(RegistryError::NotFound {
            what: "manifest x:1".into(),
        });
        assert_eq!(not_found.kind, LookupErrorKind::NotFound);
        assert_eq!(not_found.to_string(), "not found: manifest x:1");
        let timeout = LookupError::from(RegistryError::Timeout {
            reference: "x:1".into(),
            after: std::time::Duration::from_secs(2),
        });
        assert_eq!(timeout.kind, LookupErrorKind::Unavailable);
        let bomb = LookupError::from(RegistryError::DecompressedTooLarge {
            digest: "sha256:ab".into(),
            limit: 1,
        });
        assert_eq!(bomb.kind, LookupErrorKind::Refused);
    }
}
