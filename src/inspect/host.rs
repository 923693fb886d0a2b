//! TODO(inspect helper): a root filesystem that is a directory (a node's root at /host).

use super::rootfs::{FsError, Lookup, NodeKind, RootFs};
use std::path::PathBuf;

pub struct HostRoot {
    pub dir: PathBuf,
}

impl HostRoot {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }
}

impl RootFs for HostRoot {
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
