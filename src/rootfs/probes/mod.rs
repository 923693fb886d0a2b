//! Probes: each reads one kind of evidence through `RootFs` and says whether
//! its answer is final (`determined`) or could still change when unread lower
//! layers arrive. `collect` merges them.

pub mod apk;
pub mod binary;
pub mod command;
pub mod dpkg;
pub mod label;
pub mod rpm;

use super::fs::{FsError, Lookup, RootFs};
use crate::facts::{Evidence, EvidenceSource};

/// Largest package database read into memory.
pub const MAX_DB_BYTES: u64 = 64 << 20;
/// Largest binary scanned for a version literal.
pub const MAX_BINARY_BYTES: u64 = 64 << 20;

/// One installed iptables package found in a package database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageHit {
    pub source: EvidenceSource,
    /// The database file it came from.
    pub path: String,
    pub name: String,
    /// As the database spells it ("1.8.9-2", "1.8.10-r3", "1.8.10-11.el9").
    pub version: String,
}

/// What a package-database probe found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackageProbe {
    pub hits: Vec<PackageHit>,
    /// Problems met on the way (unreadable file, corrupt database), as evidence.
    pub notes: Vec<Evidence>,
    /// False when an unread lower layer could still add or change a database.
    pub determined: bool,
}

impl PackageProbe {
    pub(crate) fn new() -> Self {
        Self {
            determined: true,
            ..Self::default()
        }
    }

    /// Read a database file; `None` when it is absent, unknown or unreadable
    /// (an unreadable one is noted, an unknown one undetermines the probe).
    pub(crate) fn read(
        &mut self,
        root: &dyn RootFs,
        source: EvidenceSource,
        path: &str,
    ) -> Option<Vec<u8>> {
        match root.read(path, MAX_DB_BYTES) {
            Ok(Lookup::Found(data)) => Some(data),
            Ok(Lookup::Absent) => None,
            Ok(Lookup::Unknown) => {
                self.determined = false;
                None
            }
            Err(e) => {
                self.note(source, path, format!("unreadable: {e}"));
                None
            }
        }
    }

    pub(crate) fn note(&mut self, source: EvidenceSource, path: &str, detail: String) {
        self.notes.push(Evidence {
            source,
            path: path.to_string(),
            detail,
        });
    }
}

/// An `FsError` is reported as evidence rather than failing the inspection:
/// one hostile file must not hide what the rest of the image says.
pub(crate) fn fs_note(source: EvidenceSource, path: &str, e: &FsError) -> Evidence {
    Evidence {
        source,
        path: path.to_string(),
        detail: format!("unreadable: {e}"),
    }
}

/// Split a Debian-control-style text into stanzas of (field, value) pairs.
/// Continuation lines (leading space/tab) are appended to the previous field.
pub(crate) fn stanzas(text: &str, sep: char) -> Vec<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut cur: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = cur.last_mut() {
                v.push('\n');
                v.push_str(line.trim());
            }
            continue;
        }
        if let Some((k, v)) = line.split_once(sep) {
            cur.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Case-sensitive field look-up (apk's `p:` "provides" is not `P:` "name").
pub(crate) fn field<'a>(stanza: &'a [(String, String)], name: &str) -> Option<&'a str> {
    stanza
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Case-insensitive field look-up (dpkg field names are).
pub(crate) fn field_ci<'a>(stanza: &'a [(String, String)], name: &str) -> Option<&'a str> {
    stanza
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}
