//! The `RootFs` abstraction. Paths are absolute within the root and
//! '/'-separated ("/usr/sbin/iptables"); nothing ever resolves to the host.

/// Result of a look-up in a possibly incomplete root. `Unknown` means "not in
/// the layers read so far, and not hidden by a whiteout": a lower layer that
/// has not been read could still supply it. A `HostRoot` never answers Unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<T> {
    Found(T),
    Absent,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeKind {
    File { size: u64 },
    Dir,
    Symlink { target: String },
    Other,
}

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("symlink loop or too many links resolving {0}")]
    SymlinkLoop(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: file is larger than the {limit} byte read limit")]
    TooLarge { path: String, limit: u64 },
}

pub trait RootFs: Send + Sync {
    /// Metadata of `path` without following a final symlink (intermediate
    /// directories are followed inside the root).
    fn lstat(&self, path: &str) -> Result<Lookup<NodeKind>, FsError>;
    /// Contents of the regular file at `path` (symlinks followed inside the root), at most `limit` bytes.
    fn read(&self, path: &str, limit: u64) -> Result<Lookup<Vec<u8>>, FsError>;
    /// Names in directory `path` (symlinks followed inside the root).
    fn list(&self, path: &str) -> Result<Lookup<Vec<String>>, FsError>;
}
