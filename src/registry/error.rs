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
    Network {
        registry: String,
        detail: String,
        /// The registry gave no answer (unreachable, HTTP 429 or 5xx), as
        /// opposed to nfguard refusing to ask (egress policy, a refused
        /// redirect, an untrusted certificate) or a token service's other
        /// answers: only silence lets a tag's last answer stand in (`stale`).
        outage: bool,
    },
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

/// What was wrong with JSON a registry sent, in our words: serde's own
/// messages quote the offending values, which are the remote's text.
pub(super) fn json_problem(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Io => "unreadable",
        Category::Syntax => "invalid JSON",
        Category::Data => "unexpected structure",
        Category::Eof => "truncated JSON",
    };
    format!("{what} at line {} column {}", e.line(), e.column())
}

/// A short remote string (a media type, platform names) safe to show:
/// only characters such names use, at most `max` of them.
pub(super) fn remote_words(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .filter(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '+' | '-' | '_' | ',' | ' ')
        })
        .take(max)
        .collect();
    if s.chars().count() > max {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_problems_do_not_quote_the_input() {
        let e = serde_json::from_slice::<Vec<u8>>(br#"{"secret":"hunter2"}"#).unwrap_err();
        let p = json_problem(&e);
        assert!(!p.contains("hunter2") && !p.contains("secret"), "{p}");
        assert!(p.starts_with("unexpected structure at line 1"), "{p}");
        let e = serde_json::from_slice::<serde_json::Value>(b"<html>hunter2").unwrap_err();
        assert_eq!(json_problem(&e), "invalid JSON at line 1 column 1");
    }

    #[test]
    fn remote_words_keep_names_and_drop_the_rest() {
        assert_eq!(
            remote_words("application/vnd.x+json", 64),
            "application/vnd.x+json"
        );
        assert_eq!(remote_words("a\"<b>\n\u{1b}[;c", 64), "abc");
        assert_eq!(remote_words(&"x".repeat(10), 4), "xxxx...");
    }
}
