//! A root filesystem that is a directory (a node's root mounted at /host, or an
//! extracted image). Every component is resolved here with `symlink_metadata`
//! and `read_link`, so the OS never follows a link: an absolute target means
//! the root's own `/`, and `..` stops at the root.

use super::fs::{FsError, Lookup, NodeKind, Resolved, RootFs, resolve_with};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

pub struct HostRoot {
    pub dir: PathBuf,
}

impl HostRoot {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// Host path of a canonical in-root path.
    fn host_path(&self, canonical: &str) -> PathBuf {
        self.dir.join(canonical.trim_start_matches('/'))
    }

    /// Kind of a canonical path, not following it.
    fn raw(&self, canonical: &str) -> Result<Lookup<NodeKind>, FsError> {
        let host = self.host_path(canonical);
        let meta = match std::fs::symlink_metadata(&host) {
            Ok(m) => m,
            Err(e) if is_absent(&e) => return Ok(Lookup::Absent),
            Err(e) => return Err(io_err(canonical, e)),
        };
        let ft = meta.file_type();
        Ok(Lookup::Found(if ft.is_symlink() {
            let target = std::fs::read_link(&host).map_err(|e| io_err(canonical, e))?;
            NodeKind::Symlink {
                target: target.to_string_lossy().into_owned(),
            }
        } else if ft.is_dir() {
            NodeKind::Dir
        } else if ft.is_file() {
            NodeKind::File { size: meta.len() }
        } else {
            NodeKind::Other
        }))
    }
}

fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

fn io_err(path: &str, source: std::io::Error) -> FsError {
    FsError::Io {
        path: path.to_string(),
        source,
    }
}

impl RootFs for HostRoot {
    fn lstat(&self, path: &str) -> Result<Lookup<NodeKind>, FsError> {
        Ok(self.resolve(path, false)?.map(|r| r.kind))
    }

    fn read(&self, path: &str, limit: u64) -> Result<Lookup<bytes::Bytes>, FsError> {
        let r = match self.resolve(path, true)? {
            Lookup::Found(r) => r,
            Lookup::Absent => return Ok(Lookup::Absent),
            Lookup::Unknown => return Ok(Lookup::Unknown),
        };
        let NodeKind::File { size } = r.kind else {
            return Err(FsError::NotAFile(r.path));
        };
        if size > limit {
            return Err(FsError::TooLarge {
                path: r.path,
                limit,
            });
        }
        // O_NOFOLLOW: the canonical path's last component is not a link unless
        // it was swapped since we looked; then refuse rather than follow.
        // O_NONBLOCK: a file swapped for a FIFO must not hang the probe.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.host_path(&r.path))
            .map_err(|e| io_err(&r.path, e))?;
        if !file.metadata().map_err(|e| io_err(&r.path, e))?.is_file() {
            return Err(FsError::NotAFile(r.path));
        }
        let mut buf = Vec::with_capacity(size as usize);
        file.take(limit.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| io_err(&r.path, e))?;
        if buf.len() as u64 > limit {
            return Err(FsError::TooLarge {
                path: r.path,
                limit,
            });
        }
        Ok(Lookup::Found(buf.into()))
    }

    fn list(&self, path: &str) -> Result<Lookup<Vec<String>>, FsError> {
        let r = match self.resolve(path, true)? {
            Lookup::Found(r) => r,
            Lookup::Absent => return Ok(Lookup::Absent),
            Lookup::Unknown => return Ok(Lookup::Unknown),
        };
        if r.kind != NodeKind::Dir {
            return Err(FsError::NotADir(r.path));
        }
        let mut names = Vec::new();
        for e in std::fs::read_dir(self.host_path(&r.path)).map_err(|e| io_err(&r.path, e))? {
            let e = e.map_err(|e| io_err(&r.path, e))?;
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(Lookup::Found(names))
    }

    fn resolve(&self, path: &str, follow_final: bool) -> Result<Lookup<Resolved>, FsError> {
        resolve_with(
            |p| {
                if p == "/" {
                    Ok(Lookup::Found(NodeKind::Dir))
                } else {
                    self.raw(p)
                }
            },
            path,
            follow_final,
        )
    }
}
