//! TODO(inspect helper): OCI layers merged lazily with whiteout rules.

use super::rootfs::{FsError, Lookup, NodeKind, RootFs};
use std::io::Read;

/// Bounds on what one layer's tar may cost.
#[derive(Debug, Clone)]
pub struct LayerLimits {
    /// Tar entries per layer (a million-entry tar is refused).
    pub max_entries: u64,
    /// Bytes kept in memory per retained file (e.g. an xtables binary, a dpkg status).
    pub max_file_bytes: u64,
    /// Bytes kept in memory for the whole layer.
    pub max_retained_bytes: u64,
}

impl Default for LayerLimits {
    fn default() -> Self {
        Self {
            max_entries: 500_000,
            max_file_bytes: 64 << 20,
            max_retained_bytes: 256 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("layer has more than {0} tar entries")]
    TooManyEntries(u64),
    #[error("layer tar is malformed: {0}")]
    Tar(String),
    #[error("{0}")]
    Limit(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// One layer, keeping only the entries probes can need (see `paths`).
#[derive(Debug, Default, Clone)]
pub struct Layer {}

impl Layer {
    /// Read an (already decompressed) layer tar, retaining relevant entries,
    /// whiteouts and opaque markers.
    pub fn from_tar<R: Read>(_tar: R, _limits: &LayerLimits) -> Result<Layer, LayerError> {
        todo!()
    }
}

/// Layers top-first. `complete` is false while lower layers are still unread,
/// in which case look-ups that fall through every layer answer `Unknown`.
pub struct LayeredRoot {
    pub layers: Vec<Layer>,
    pub complete: bool,
}

impl RootFs for LayeredRoot {
    fn lstat(&self, _path: &str) -> Result<Lookup<NodeKind>, FsError> {
        todo!()
    }
    fn read(&self, _path: &str, _limit: u64) -> Result<Lookup<Vec<u8>>, FsError> {
        todo!()
    }
    fn list(&self, _path: &str) -> Result<Lookup<Vec<String>>, FsError> {
        todo!()
    }
}
