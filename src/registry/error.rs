//! Every way an image inspection can fail, each naming what failed.

use crate::rootfs::LayerError;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidReference { reference: String, reason: String },
    #[error("not found: {what}")]
    NotFound { what: String },
    #[error("registry {registry} refused the credentials (or needs some): {detail}")]
    Unauthorized { registry: String, detail: String },
    #[error("cannot reach registry {registry}: {detail}")]
    Network { registry: String, detail: String },
    #[error("registry protocol error for {reference}: {detail}")]
    Protocol { reference: String, detail: String },
    #[error("{reference} has no manifest for platform {platform} (available: {available})")]
    NoMatchingPlatform {
        reference: String,
        platform: String,
        available: String,
    },
    #[error("unsupported manifest media type {media_type:?} for {reference}")]
    UnsupportedManifest {
        reference: String,
        media_type: String,
    },
    #[error("manifest {reference} is larger than the {limit}-byte limit for manifests and indexes")]
    ManifestTooLarge { reference: String, limit: u64 },
    #[error("digest mismatch for {digest}: content hashes to {actual}")]
    DigestMismatch { digest: String, actual: String },
    #[error("blob {digest} is truncated: got {got} of {expected} bytes")]
    Truncated {
        digest: String,
        expected: u64,
        got: u64,
    },
    #[error("blob {digest} is longer than its descriptor's {expected} bytes")]
    BlobTooLong { digest: String, expected: u64 },
    #[error("blob {digest} stream failed after {got} bytes: {detail}")]
    BlobStream {
        digest: String,
        got: u64,
        detail: String,
    },
    #[error("layer {digest} decompresses to more than {limit} bytes (compression bomb?)")]
    DecompressedTooLarge { digest: String, limit: u64 },
    #[error("layer {digest}: {source}")]
    Layer {
        digest: String,
        #[source]
        source: LayerError,
    },
    #[error("layer {digest}: cannot decompress ({detail})")]
    Decompress { digest: String, detail: String },
    #[error("image config {digest} is not usable: {detail}")]
    Config { digest: String, detail: String },
    #[error("inspection of {reference} did not finish within {}s", .after.as_secs_f64())]
    Timeout { reference: String, after: Duration },
    #[error("docker config {path}: {detail}")]
    DockerConfig { path: String, detail: String },
    #[error("internal error: {0}")]
    Internal(String),
}
