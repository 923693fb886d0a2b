//! Probes: each reads one kind of evidence through `RootFs` and says whether
//! its answer is final (`determined`) or could still change when unread lower
//! layers arrive. `collect` merges them.

pub mod apk;
pub mod binary;
pub mod command;
pub mod dpkg;
pub mod label;
pub mod nft;
pub mod nft_literal;
pub mod rpm;

use super::fs::{FsError, Lookup, RootFs};
use super::paths;
use crate::facts::{Evidence, EvidenceSource};
use bytes::Bytes;

/// Largest package database read into memory (each kind has its own, smaller
/// cap in `paths::caps`; this is the ceiling for the reads themselves).
pub const MAX_DB_BYTES: u64 = crate::rootfs::paths::caps::RPMDB_SQLITE;
/// Largest binary scanned for a version literal.
pub const MAX_BINARY_BYTES: u64 = crate::rootfs::paths::caps::COMMAND;
/// Package hits (per tool) and notes one probe keeps: real images have one
/// or two; a database of a million forged `Package: iptables` stanzas must
/// not become a million-entry profile (in a cache, in every admission warning).
pub const MAX_HITS: usize = 16;
pub const MAX_NOTES: usize = 16;

/// The package names one tool is known by in one kind of database (dpkg's
/// `libnftables1` and `nftables`; rpm's `iptables-nft`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackageSet {
    /// The tool, as notes name it ("iptables", "nftables").
    pub tool: &'static str,
    pub names: &'static [&'static str],
}

/// One installed package of a wanted set found in a package database.
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
    /// How many leading `hits` were found while the probe was still
    /// determined: no unread lower layer can add a hit ahead of them.
    pub settled_hits: usize,
    /// A whole package database (dpkg's `status`, apk's `installed`, an
    /// rpmdb) was read: it lists every package its package manager
    /// installed in this and the lower layers, so an unread layer cannot add
    /// one of those without it showing here.
    pub whole_database: bool,
    /// `MAX_HITS` was reached and later hits were dropped (noted once).
    hits_dropped: bool,
}

impl PackageProbe {
    pub(crate) fn new() -> Self {
        Self {
            determined: true,
            ..Self::default()
        }
    }

    /// Keep a hit of `tool`'s packages, up to `MAX_HITS` (one note says
    /// when more were dropped).
    pub(crate) fn hit(&mut self, tool: &str, mut hit: PackageHit) {
        if self.hits.len() < MAX_HITS {
            if let std::borrow::Cow::Owned(short) = paths::shorten(&hit.path) {
                hit.path = short;
            }
            self.hits.push(hit);
            if self.determined {
                self.settled_hits = self.hits.len();
            }
        } else if !self.hits_dropped {
            self.hits_dropped = true;
            self.note(
                hit.source,
                &hit.path,
                format!("more than {MAX_HITS} {tool} package entries; the rest are ignored"),
            );
        }
    }

    pub(crate) fn note(&mut self, source: EvidenceSource, path: &str, detail: String) {
        if self.notes.len() >= MAX_NOTES {
            return;
        }
        self.notes.push(Evidence {
            source,
            path: paths::shorten(path).into_owned(),
            detail,
        });
    }
}

/// One read of a package database for several tools: each tool keeps its own
/// hits (and its own `MAX_HITS` bound); what goes wrong reading a file, and
/// what an unread lower layer could still add, concerns every tool.
pub(crate) struct PackageProbes<const N: usize> {
    sets: [PackageSet; N],
    probes: [PackageProbe; N],
}

impl<const N: usize> PackageProbes<N> {
    pub(crate) fn new(sets: [PackageSet; N]) -> Self {
        Self {
            sets,
            probes: std::array::from_fn(|_| PackageProbe::new()),
        }
    }

    /// A name test for the parsers (a copy: it outlives no borrow of `self`).
    pub(crate) fn wanted(&self) -> impl Fn(&str) -> bool + use<N> {
        let sets = self.sets;
        move |name| sets.iter().any(|s| s.names.contains(&name))
    }

    /// Read a database file; `None` when it is absent, unknown or unreadable
    /// (an unreadable one is noted, an unknown one undetermines the probes).
    pub(crate) fn read(
        &mut self,
        root: &dyn RootFs,
        source: EvidenceSource,
        path: &str,
    ) -> Option<Bytes> {
        match root.read(path, MAX_DB_BYTES) {
            Ok(Lookup::Found(data)) => Some(data),
            Ok(Lookup::Absent) => None,
            Ok(Lookup::Unknown) => {
                self.undetermined();
                None
            }
            Err(e) => {
                self.note(source, path, format!("unreadable: {e}"));
                None
            }
        }
    }

    /// Hand a hit to every tool whose set names its package.
    pub(crate) fn hit(&mut self, hit: PackageHit) {
        for (set, probe) in self.sets.iter().zip(self.probes.iter_mut()) {
            if set.names.contains(&hit.name.as_str()) {
                probe.hit(set.tool, hit.clone());
            }
        }
    }

    pub(crate) fn note(&mut self, source: EvidenceSource, path: &str, detail: String) {
        for p in &mut self.probes {
            p.note(source, path, detail.clone());
        }
    }

    /// A whole database was read (see [`PackageProbe::whole_database`]).
    pub(crate) fn whole_database(&mut self) {
        for p in &mut self.probes {
            p.whole_database = true;
        }
    }

    /// An unread lower layer could still add or change a database.
    pub(crate) fn undetermined(&mut self) {
        for p in &mut self.probes {
            p.determined = false;
        }
    }

    pub(crate) fn finish(self) -> [PackageProbe; N] {
        self.probes
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

/// Which field names a stanza scan looks for, and how names compare (dpkg's
/// are case-insensitive; apk's `p:` "provides" is not `P:` "name").
pub(crate) struct Fields<'a, const N: usize> {
    pub names: [&'a str; N],
    pub case_insensitive: bool,
}

impl<const N: usize> Fields<'_, N> {
    fn index(&self, key: &str) -> Option<usize> {
        self.names.iter().position(|n| {
            if self.case_insensitive {
                n.eq_ignore_ascii_case(key)
            } else {
                *n == key
            }
        })
    }
}

/// Walk a Debian-control-style text (`Field: value` lines, stanzas split by
/// blank lines) and call `each` with the wanted fields of every stanza (the
/// first occurrence of each, trimmed; None when absent or not UTF-8).
/// Streaming and allocation-free: a 32 MiB database of millions of tiny
/// fields costs no more memory than its own bytes. Continuation lines (a
/// leading space or tab) are skipped: the wanted fields are one-line.
pub(crate) fn scan_stanzas<'d, const N: usize>(
    data: &'d [u8],
    sep: u8,
    fields: &Fields<'_, N>,
    mut each: impl FnMut(&[Option<&'d str>; N]),
) {
    let mut cur: [Option<&'d str>; N] = [None; N];
    let mut any = false;
    for line in data.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            if any {
                each(&cur);
                cur = [None; N];
                any = false;
            }
            continue;
        }
        any = true;
        if line.starts_with(b" ") || line.starts_with(b"\t") {
            continue;
        }
        let Some(at) = line.iter().position(|&b| b == sep) else {
            continue;
        };
        let Ok(key) = std::str::from_utf8(&line[..at]) else {
            continue;
        };
        if let Some(i) = fields.index(key.trim())
            && cur[i].is_none()
        {
            cur[i] = std::str::from_utf8(&line[at + 1..]).ok().map(str::trim);
        }
    }
    if any {
        each(&cur);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(text: &str, names: [&str; 2], ci: bool) -> Vec<[Option<String>; 2]> {
        let mut out = Vec::new();
        let fields = Fields {
            names,
            case_insensitive: ci,
        };
        scan_stanzas(text.as_bytes(), b':', &fields, |f| {
            out.push(f.map(|v| v.map(str::to_string)))
        });
        out
    }

    #[test]
    fn stanzas_fields_and_continuations() {
        let text = "Package: iptables\r\nDescription: x\n more: text\nversion: 1.8.9-2\n\n\n\
                    Package: other\n \t\nPackage: third\nPackage: ignored-second\n";
        let got = scan(text, ["Package", "Version"], true);
        assert_eq!(
            got,
            vec![
                [Some("iptables".into()), Some("1.8.9-2".into())],
                [Some("other".into()), None],
                [Some("third".into()), None],
            ]
        );
        // Case-sensitive: `p:` is not `P:`.
        let got = scan(
            "p: provides\nP: iptables\nV: 1.8.10-r3\n",
            ["P", "V"],
            false,
        );
        assert_eq!(
            got,
            vec![[Some("iptables".into()), Some("1.8.10-r3".into())]]
        );
    }

    #[test]
    fn non_utf8_values_are_absent_not_fatal() {
        let data = b"Package: \xff\xfe\nVersion: 1\n";
        let mut n = 0;
        let fields = Fields {
            names: ["Package", "Version"],
            case_insensitive: false,
        };
        scan_stanzas(data, b':', &fields, |f| {
            n += 1;
            assert_eq!(f, &[None, Some("1")]);
        });
        assert_eq!(n, 1);
    }
}
