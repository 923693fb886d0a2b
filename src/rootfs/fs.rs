//! The `RootFs` abstraction. Paths are absolute within the root and
//! '/'-separated ("/usr/sbin/iptables"); nothing ever resolves to the host.

use super::paths;

/// Result of a look-up in a possibly incomplete root. `Unknown` means "not in
/// the layers read so far, and not hidden by a whiteout": a lower layer that
/// has not been read could still supply it. A `HostRoot` never answers Unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<T> {
    Found(T),
    Absent,
    Unknown,
}

impl<T> Lookup<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Lookup<U> {
        match self {
            Lookup::Found(t) => Lookup::Found(f(t)),
            Lookup::Absent => Lookup::Absent,
            Lookup::Unknown => Lookup::Unknown,
        }
    }
    pub fn found(self) -> Option<T> {
        match self {
            Lookup::Found(t) => Some(t),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeKind {
    File { size: u64 },
    Dir,
    Symlink { target: String },
    Other,
}

/// Paths in messages are shortened (`paths::shorten`): an image's names are
/// attacker-chosen and up to 64 KiB long.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("symlink loop or too many links resolving {}", paths::shorten(.0))]
    SymlinkLoop(String),
    #[error("{}: {source}", paths::shorten(path))]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{}: file is larger than the {limit} byte read limit",
        paths::shorten(path)
    )]
    TooLarge { path: String, limit: u64 },
    /// A layered root keeps only the paths in `paths::is_tracked`; anything
    /// else (e.g. a symlink into /opt) cannot be answered from a layer.
    #[error("{}: not retained from the image layers ({why})", paths::shorten(path))]
    NotRetained { path: String, why: &'static str },
    #[error("{}: not a regular file", paths::shorten(.0))]
    NotAFile(String),
    #[error("{}: not a directory", paths::shorten(.0))]
    NotADir(String),
}

/// Where a path leads inside the root: its canonical path (no symlink in any
/// component, or none but the last when the final link was not followed) and
/// what is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub path: String,
    pub kind: NodeKind,
}

/// Symlinks followed per look-up before `FsError::SymlinkLoop` (Linux uses 40).
pub const MAX_LINKS: u32 = 40;

pub trait RootFs: Send + Sync {
    /// Metadata of `path` without following a final symlink (intermediate
    /// directories are followed inside the root).
    fn lstat(&self, path: &str) -> Result<Lookup<NodeKind>, FsError>;
    /// Contents of the regular file at `path` (symlinks followed inside the root), at most `limit` bytes.
    /// Shared, not copied: a layer's retained bytes are handed out as they are.
    fn read(&self, path: &str, limit: u64) -> Result<Lookup<bytes::Bytes>, FsError>;
    /// Names in directory `path` (symlinks followed inside the root).
    fn list(&self, path: &str) -> Result<Lookup<Vec<String>>, FsError>;

    /// Canonical path and kind of `path`, following the final symlink when
    /// `follow_final`. The default walks with `lstat`; implementations override
    /// it with their cheaper raw look-up.
    fn resolve(&self, path: &str, follow_final: bool) -> Result<Lookup<Resolved>, FsError> {
        resolve_with(|p| self.lstat(p), path, follow_final)
    }

    /// Like `list`, but on a root with unread lower layers answers the names
    /// seen so far instead of `Unknown` (lower layers may add more). Used for
    /// supplementary evidence that must not wait for every layer.
    fn list_seen(&self, path: &str) -> Result<Lookup<Vec<String>>, FsError> {
        self.list(path)
    }
}

/// Resolve `path` component by component with `raw`, which answers for a
/// canonical path (every ancestor a real directory) without following it.
/// Absolute link targets restart at the root; `..` is clamped at the root.
pub fn resolve_with(
    mut raw: impl FnMut(&str) -> Result<Lookup<NodeKind>, FsError>,
    path: &str,
    follow_final: bool,
) -> Result<Lookup<Resolved>, FsError> {
    // Components still to walk, last component at the end (popped from the back
    // after reversing, so pushing a link target in front is cheap).
    let mut todo: Vec<String> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .rev()
        .map(str::to_string)
        .collect();
    let mut cur: Vec<String> = Vec::new();
    let mut kind = NodeKind::Dir;
    let mut links = 0u32;
    while let Some(c) = todo.pop() {
        if c == ".." {
            cur.pop();
            kind = NodeKind::Dir;
            continue;
        }
        cur.push(c);
        let here = canonical(&cur);
        let is_final = todo.is_empty();
        match raw(&here)? {
            Lookup::Absent => return Ok(Lookup::Absent),
            Lookup::Unknown => return Ok(Lookup::Unknown),
            Lookup::Found(NodeKind::Symlink { target }) if !is_final || follow_final => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(FsError::SymlinkLoop(path.to_string()));
                }
                cur.pop();
                if target.starts_with('/') {
                    cur.clear();
                }
                todo.extend(
                    target
                        .split('/')
                        .filter(|c| !c.is_empty() && *c != ".")
                        .rev()
                        .map(str::to_string),
                );
                kind = NodeKind::Dir;
            }
            Lookup::Found(k) => {
                if !is_final && k != NodeKind::Dir {
                    // A file used as a directory: ENOTDIR, i.e. nothing there.
                    return Ok(Lookup::Absent);
                }
                kind = k;
            }
        }
    }
    Ok(Lookup::Found(Resolved {
        path: canonical(&cur),
        kind,
    }))
}

fn canonical(parts: &[String]) -> String {
    if parts.is_empty() {
        return "/".to_string();
    }
    let mut s = String::new();
    for p in parts {
        s.push('/');
        s.push_str(p);
    }
    s
}

/// One hop of a symlink chain as written in the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The link's canonical path (its directory resolved).
    pub path: String,
    pub target: String,
}

/// A symlink chain followed hop by hop, so callers see every name on the way
/// (`/usr/sbin/iptables -> /etc/alternatives/iptables -> ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub hops: Vec<Hop>,
    /// Canonical path of the final non-link, and its kind.
    pub end: Lookup<Resolved>,
    /// Canonical path of the last link's destination (the path `end` is about),
    /// also when that is Absent (dangling link) or Unknown.
    pub last: String,
    /// Set when following stopped on an error (a loop, a link out of what a
    /// layered root keeps); `end` is then Absent and `hops` holds the way so far.
    pub broken: Option<String>,
}

/// Follow `path` through symlinks inside `root`, recording each hop.
pub fn follow_chain(root: &dyn RootFs, path: &str) -> Chain {
    let mut hops = Vec::new();
    let mut cur = paths::normalize(path);
    match walk(root, path, &mut hops, &mut cur) {
        Ok(c) => c,
        Err(e) => Chain {
            hops,
            end: Lookup::Absent,
            last: cur,
            broken: Some(e.to_string()),
        },
    }
}

fn walk(
    root: &dyn RootFs,
    path: &str,
    hops: &mut Vec<Hop>,
    cur: &mut String,
) -> Result<Chain, FsError> {
    let done = |hops: &mut Vec<Hop>, end, last| {
        Ok(Chain {
            hops: std::mem::take(hops),
            end,
            last,
            broken: None,
        })
    };
    loop {
        let parent = match root.resolve(paths::parent(cur), true)? {
            Lookup::Found(r) if r.kind == NodeKind::Dir => r.path,
            Lookup::Found(_) | Lookup::Absent => {
                return done(hops, Lookup::Absent, cur.clone());
            }
            Lookup::Unknown => {
                return done(hops, Lookup::Unknown, cur.clone());
            }
        };
        let name = paths::file_name(cur);
        if name.is_empty() {
            // The chain ended at the root directory itself.
            let root_dir = Resolved {
                path: "/".into(),
                kind: NodeKind::Dir,
            };
            return done(hops, Lookup::Found(root_dir), "/".into());
        }
        let here = paths::join(&parent, name);
        match root.lstat(&here)? {
            Lookup::Found(NodeKind::Symlink { target }) => {
                if hops.len() as u32 >= MAX_LINKS {
                    return Err(FsError::SymlinkLoop(path.to_string()));
                }
                let next = if target.starts_with('/') {
                    paths::normalize(&target)
                } else {
                    // Lexical join is right here: `parent` is canonical.
                    paths::normalize(&format!("{}/{}", parent, target))
                };
                hops.push(Hop { path: here, target });
                *cur = next;
            }
            Lookup::Found(kind) => {
                let end = Lookup::Found(Resolved {
                    path: here.clone(),
                    kind,
                });
                return done(hops, end, here);
            }
            Lookup::Absent => {
                return done(hops, Lookup::Absent, here);
            }
            Lookup::Unknown => {
                return done(hops, Lookup::Unknown, here);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn fake(entries: &[(&str, NodeKind)]) -> BTreeMap<String, NodeKind> {
        entries
            .iter()
            .map(|(p, k)| (p.to_string(), k.clone()))
            .collect()
    }

    fn run(map: &BTreeMap<String, NodeKind>, path: &str, follow: bool) -> Lookup<Resolved> {
        resolve_with(
            |p| {
                Ok(if p == "/" {
                    Lookup::Found(NodeKind::Dir)
                } else {
                    map.get(p).cloned().map_or(Lookup::Absent, Lookup::Found)
                })
            },
            path,
            follow,
        )
        .unwrap()
    }

    fn link(t: &str) -> NodeKind {
        NodeKind::Symlink {
            target: t.to_string(),
        }
    }

    #[test]
    fn follows_usrmerge_and_clamps_dotdot() {
        let m = fake(&[
            ("/sbin", link("usr/sbin")),
            ("/usr", NodeKind::Dir),
            ("/usr/sbin", NodeKind::Dir),
            ("/usr/sbin/x", NodeKind::File { size: 1 }),
            ("/usr/sbin/up", link("../../../../usr/sbin/x")),
        ]);
        let r = run(&m, "/sbin/x", true).found().unwrap();
        assert_eq!(r.path, "/usr/sbin/x");
        let r = run(&m, "/sbin/up", true).found().unwrap();
        assert_eq!(r.path, "/usr/sbin/x");
        let r = run(&m, "/sbin/up", false).found().unwrap();
        assert_eq!(r.path, "/usr/sbin/up");
        assert_eq!(run(&m, "/usr/sbin/x/y", true), Lookup::Absent);
    }

    #[test]
    fn loops_are_errors() {
        let m = fake(&[("/a", link("/b")), ("/b", link("a"))]);
        assert!(matches!(
            resolve_with(
                |p| Ok(m.get(p).cloned().map_or(Lookup::Absent, Lookup::Found)),
                "/a",
                true
            ),
            Err(FsError::SymlinkLoop(_))
        ));
    }
}
