//! OCI layers merged lazily with whiteout rules. A `Layer` is read once from
//! its tar stream and keeps only the entries in `paths::is_tracked` (content
//! only for `paths::wants_content`), so its memory is bounded by what probes
//! need, not by the layer's size.

use super::budget::{MemoryBudget, Reservation};
use super::fs::{FsError, Lookup, NodeKind, Resolved, RootFs, resolve_with};
use super::paths;
use super::tarstream::{Kind, TarError, TarReader};
use bytes::Bytes;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::sync::Arc;

mod wire;

/// Why a file's content was not kept (also its code on the wire).
const DROPPED: [&str; 2] = [
    "content not needed by any probe",
    "hard link to an entry this layer did not keep",
];

/// Bounds on what one layer's tar may cost.
#[derive(Debug, Clone)]
pub struct LayerLimits {
    /// Tar entries per layer (a million-entry tar is refused).
    pub max_entries: u64,
    /// Bytes kept in memory per retained file, over the per-kind cap of
    /// `paths::content_cap` (which is usually the smaller). A larger file is
    /// kept as metadata only; reading it fails with `FsError::TooLarge`.
    pub max_file_bytes: u64,
    /// Bytes kept in memory for the whole layer, file contents and per-entry
    /// bookkeeping together; exceeding it fails the layer.
    pub max_retained_bytes: u64,
    /// The process-wide pool every retained byte is also reserved from.
    pub budget: MemoryBudget,
}

impl Default for LayerLimits {
    fn default() -> Self {
        Self {
            max_entries: 500_000,
            max_file_bytes: paths::caps::RPMDB_SQLITE,
            max_retained_bytes: 128 << 20,
            budget: MemoryBudget::unlimited(),
        }
    }
}

/// What keeping one entry costs beyond its name and content: the map slot,
/// the `Entry`, the `String` headers (measured: ~90 bytes on x86_64).
const ENTRY_OVERHEAD: u64 = 128;

#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("layer has more than {0} tar entries")]
    TooManyEntries(u64),
    #[error("layer tar is malformed: {0}")]
    Tar(String),
    #[error("{0}")]
    Limit(String),
    #[error(transparent)]
    Budget(#[from] super::budget::BudgetExhausted),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A layer record from the parser sandbox that does not decode.
    #[error("layer record is malformed: {0}")]
    Malformed(&'static str),
}

/// A regular file's content as far as this layer kept it.
#[derive(Debug, Clone)]
enum Content {
    Retained(Bytes),
    /// Not kept; the reason is reported by `read`.
    Dropped(&'static str),
    /// Over `LayerLimits::max_file_bytes` (the limit).
    Oversize(u64),
}

#[derive(Debug, Clone)]
enum Entry {
    /// Named by the tar (or implied by a tracked child with no entry of its own).
    Dir {
        implicit: bool,
    },
    Symlink(String),
    File {
        size: u64,
        content: Content,
    },
    Other,
}

impl Entry {
    fn kind(&self) -> NodeKind {
        match self {
            Entry::Dir { .. } => NodeKind::Dir,
            Entry::Symlink(t) => NodeKind::Symlink { target: t.clone() },
            Entry::File { size, .. } => NodeKind::File { size: *size },
            Entry::Other => NodeKind::Other,
        }
    }
}

/// One layer, keeping only the entries probes can need (see `paths`).
#[derive(Debug)]
pub struct Layer {
    entries: HashMap<String, Entry>,
    /// Paths a `.wh.NAME` deletes from lower layers.
    whiteouts: HashSet<String>,
    /// Directories whose lower-layer children a `.wh..wh..opq` hides.
    opaque: HashSet<String>,
    tar_entries: u64,
    /// Every byte this layer keeps (contents and bookkeeping), reserved from
    /// the shared budget until the layer is dropped.
    retained: Reservation,
    max_retained: u64,
}

const OPAQUE: &str = ".wh..wh..opq";
const WHITEOUT_PREFIX: &str = ".wh.";

fn tar_err(e: TarError) -> LayerError {
    match e {
        TarError::Io(e) => LayerError::Io(e),
        e => LayerError::Tar(e.to_string()),
    }
}

/// Could this raw tar name be tracked (or be a whiteout of something
/// tracked)? Every tracked path starts with one of these top directories;
/// a whiteout of a top directory itself is `.wh.<dir>` at the root.
fn maybe_tracked(raw: &str) -> bool {
    let mut trimmed = raw;
    loop {
        if let Some(rest) = trimmed.strip_prefix("./") {
            trimmed = rest;
        } else if let Some(rest) = trimmed.strip_prefix('/') {
            trimmed = rest;
        } else {
            break;
        }
    }
    let first = trimmed.split('/').next().unwrap_or("");
    // `..` components can move a name anywhere, and whiteouts at the root
    // (`.wh.usr`, an opaque `/`) matter: let normalize decide.
    raw.contains("..")
        || first.is_empty()
        || first.starts_with(WHITEOUT_PREFIX)
        || paths::TRACKED_TOP_DIRS.contains(&first)
}

impl Layer {
    fn empty(limits: &LayerLimits) -> Layer {
        Layer {
            entries: HashMap::new(),
            whiteouts: HashSet::new(),
            opaque: HashSet::new(),
            tar_entries: 0,
            retained: limits.budget.reservation(),
            max_retained: limits.max_retained_bytes,
        }
    }

    /// Reserve `n` more retained bytes (this layer's cap, then the shared budget).
    fn charge(&mut self, n: u64, at: &str) -> Result<(), LayerError> {
        if self.retained.bytes().saturating_add(n) > self.max_retained {
            return Err(LayerError::Limit(format!(
                "layer retains more than {} bytes of probe files (at {})",
                self.max_retained,
                paths::shorten(at)
            )));
        }
        Ok(self.retained.grow(n)?)
    }

    /// Read an (already decompressed) layer tar, retaining relevant entries,
    /// whiteouts and opaque markers.
    pub fn from_tar<R: Read>(tar: R, limits: &LayerLimits) -> Result<Layer, LayerError> {
        let mut layer = Layer::empty(limits);
        let mut reader = TarReader::new(tar);
        while let Some(entry) = reader.next_entry().map_err(tar_err)? {
            layer.tar_entries += 1;
            if layer.tar_entries > limits.max_entries {
                return Err(LayerError::TooManyEntries(limits.max_entries));
            }
            if !maybe_tracked(&entry.path) {
                // Cheap reject before normalizing: the data is skipped by
                // the next `next_entry`.
                continue;
            }
            let path = paths::normalize(&entry.path);
            let name = paths::file_name(&path);
            if name == OPAQUE {
                let dir = paths::parent(&path);
                if paths::is_tracked(dir) && !layer.opaque.contains(dir) {
                    layer.charge(ENTRY_OVERHEAD + dir.len() as u64, dir)?;
                    layer.opaque.insert(dir.to_string());
                }
                continue;
            }
            if let Some(hidden) = name.strip_prefix(WHITEOUT_PREFIX) {
                let hidden = paths::join(paths::parent(&path), hidden);
                if paths::is_tracked(&hidden) && !layer.whiteouts.contains(&hidden) {
                    layer.charge(ENTRY_OVERHEAD + hidden.len() as u64, &hidden)?;
                    layer.whiteouts.insert(hidden);
                }
                continue;
            }
            if path == "/" || !paths::is_tracked(&path) {
                continue;
            }
            let new = match entry.kind {
                Kind::Dir => Entry::Dir { implicit: false },
                Kind::Symlink => {
                    layer.charge(entry.link.len() as u64, &path)?;
                    Entry::Symlink(entry.link.clone())
                }
                Kind::HardLink => match layer.entries.get(&paths::normalize(&entry.link)) {
                    // Shares the target's bytes: only the entry costs.
                    Some(Entry::File { size, content }) => Entry::File {
                        size: *size,
                        content: content.clone(),
                    },
                    _ => Entry::File {
                        size: 0,
                        content: Content::Dropped(DROPPED[1]),
                    },
                },
                Kind::File => {
                    let size = entry.size;
                    let content = match paths::content_cap(&path) {
                        None => Content::Dropped(DROPPED[0]),
                        Some(cap) if size > cap.min(limits.max_file_bytes) => {
                            Content::Oversize(cap.min(limits.max_file_bytes))
                        }
                        Some(_) => {
                            layer.charge(size, &path)?;
                            let data = reader.read_data(size).map_err(tar_err)?;
                            Content::Retained(Bytes::from(data))
                        }
                    };
                    Entry::File { size, content }
                }
                Kind::Other => Entry::Other,
            };
            layer.insert(path, new)?;
        }
        Ok(layer)
    }

    fn insert(&mut self, path: String, entry: Entry) -> Result<(), LayerError> {
        let mut dir = paths::parent(&path).to_string();
        while dir != "/" {
            if !self.entries.contains_key(&dir) {
                self.charge(ENTRY_OVERHEAD + dir.len() as u64, &dir)?;
                self.entries
                    .insert(dir.clone(), Entry::Dir { implicit: true });
            }
            dir = paths::parent(&dir).to_string();
        }
        if !self.entries.contains_key(&path) {
            self.charge(ENTRY_OVERHEAD + path.len() as u64, &path)?;
        }
        self.entries.insert(path, entry);
        Ok(())
    }

    /// Tar entries read (all of them, kept or not).
    pub fn tar_entries(&self) -> u64 {
        self.tar_entries
    }

    /// Bytes this layer keeps in memory: file contents plus per-entry
    /// bookkeeping (what it holds of the shared budget).
    pub fn retained_bytes(&self) -> u64 {
        self.retained.bytes()
    }

    /// True when this layer hides `path` of every LOWER layer: a whiteout of
    /// the path or an ancestor, an opaque ancestor, or an ancestor replaced by
    /// a non-directory.
    fn hides_lower(&self, path: &str) -> bool {
        if self.whiteouts.contains(path) {
            return true;
        }
        let mut dir = path;
        while dir != "/" {
            dir = paths::parent(dir);
            if self.opaque.contains(dir) || (dir != "/" && self.whiteouts.contains(dir)) {
                return true;
            }
            if let Some(e) = self.entries.get(dir)
                && !matches!(e, Entry::Dir { .. })
            {
                return true;
            }
        }
        false
    }
}

/// Layers top-first. `complete` is false while lower layers are still unread,
/// in which case look-ups that fall through every layer answer `Unknown`.
pub struct LayeredRoot {
    /// Shared with the layer cache: an inspection never copies a layer.
    pub layers: Vec<Arc<Layer>>,
    pub complete: bool,
}

impl LayeredRoot {
    /// The merged entry at canonical `path` (no symlink in its ancestors).
    fn find(&self, path: &str) -> Result<Lookup<&Entry>, FsError> {
        const ROOT: Entry = Entry::Dir { implicit: false };
        if path == "/" {
            return Ok(Lookup::Found(&ROOT));
        }
        if !paths::is_tracked(path) {
            return Err(FsError::NotRetained {
                path: path.to_string(),
                why: "path is outside what the probes track",
            });
        }
        let mut implied: Option<&Entry> = None;
        let mut closed = self.complete;
        for layer in &self.layers {
            match layer.entries.get(path) {
                Some(Entry::Dir { implicit: true }) => {
                    implied = implied.or(layer.entries.get(path))
                }
                Some(e) => return Ok(Lookup::Found(e)),
                None => {}
            }
            if layer.hides_lower(path) {
                closed = true;
                break;
            }
        }
        // A directory only implied by a child's name (no entry of its own)
        // exists as a directory unless a read layer below names it: a tar
        // extractor creates it, or follows a lower layer's link there.
        Ok(match (implied, closed) {
            (Some(e), _) => Lookup::Found(e),
            (None, true) => Lookup::Absent,
            (None, false) => Lookup::Unknown,
        })
    }

    fn raw(&self, path: &str) -> Result<Lookup<NodeKind>, FsError> {
        Ok(self.find(path)?.map(Entry::kind))
    }

    /// Names under canonical directory `dir`, and whether the listing is
    /// closed (no unread lower layer can add names).
    fn names(&self, dir: &str) -> (BTreeSet<String>, bool) {
        let mut names = BTreeSet::new();
        let mut hidden: HashSet<String> = HashSet::new();
        for layer in &self.layers {
            match layer.entries.get(dir) {
                Some(Entry::Dir { .. }) | None => {}
                // A non-directory here replaces every lower directory.
                Some(_) => return (names, true),
            }
            for (p, _) in layer.entries.iter() {
                if p != dir && paths::parent(p) == dir {
                    let n = paths::file_name(p);
                    if !hidden.contains(n) {
                        names.insert(n.to_string());
                    }
                }
            }
            for w in &layer.whiteouts {
                if paths::parent(w) == dir {
                    hidden.insert(paths::file_name(w).to_string());
                }
            }
            if layer.opaque.contains(dir) || layer.hides_lower(dir) {
                return (names, true);
            }
        }
        (names, self.complete)
    }

    fn list_impl(&self, path: &str, partial_ok: bool) -> Result<Lookup<Vec<String>>, FsError> {
        let r = match self.resolve(path, true)? {
            Lookup::Found(r) => r,
            Lookup::Absent => return Ok(Lookup::Absent),
            Lookup::Unknown => return Ok(Lookup::Unknown),
        };
        if r.kind != NodeKind::Dir {
            return Err(FsError::NotADir(r.path));
        }
        let (names, closed) = self.names(&r.path);
        Ok(if closed || partial_ok {
            Lookup::Found(names.into_iter().collect())
        } else {
            Lookup::Unknown
        })
    }
}

impl RootFs for LayeredRoot {
    fn lstat(&self, path: &str) -> Result<Lookup<NodeKind>, FsError> {
        Ok(self.resolve(path, false)?.map(|r| r.kind))
    }

    fn read(&self, path: &str, limit: u64) -> Result<Lookup<Bytes>, FsError> {
        let r = match self.resolve(path, true)? {
            Lookup::Found(r) => r,
            Lookup::Absent => return Ok(Lookup::Absent),
            Lookup::Unknown => return Ok(Lookup::Unknown),
        };
        let Lookup::Found(Entry::File { size, content }) = self.find(&r.path)? else {
            return Err(FsError::NotAFile(r.path));
        };
        match content {
            Content::Oversize(max) => Err(FsError::TooLarge {
                path: r.path,
                limit: *max,
            }),
            Content::Dropped(why) => Err(FsError::NotRetained { path: r.path, why }),
            Content::Retained(_) if *size > limit => Err(FsError::TooLarge {
                path: r.path,
                limit,
            }),
            Content::Retained(data) => Ok(Lookup::Found(data.clone())),
        }
    }

    fn list(&self, path: &str) -> Result<Lookup<Vec<String>>, FsError> {
        self.list_impl(path, false)
    }

    fn list_seen(&self, path: &str) -> Result<Lookup<Vec<String>>, FsError> {
        self.list_impl(path, true)
    }

    fn resolve(&self, path: &str, follow_final: bool) -> Result<Lookup<Resolved>, FsError> {
        resolve_with(|p| self.raw(p), path, follow_final)
    }
}
