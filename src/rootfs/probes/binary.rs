//! The version literal inside an xtables multi-call binary, found among its
//! NUL-separated strings. Measured on Debian's builds: 1.8.9 and later carry
//! `"1.8.9 (nf_tables)"` / `"1.8.9 (legacy)"` next to a bare `"1.8.9"`;
//! 1.8.7 carries only the bare `"1.8.7"` (printed through `"%s v%s (nf_tables)"`).

use super::MAX_BINARY_BYTES;
use crate::facts::{Backend, Evidence, EvidenceSource, Version};
use crate::rootfs::fs::{Lookup, NodeKind, RootFs};
use crate::rootfs::paths::join;

/// What one binary says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryVersion {
    pub version: Version,
    /// The literal as found (`1.8.11 (nf_tables)` or `1.8.7`).
    pub literal: String,
    /// The backend named by a suffixed literal, if any.
    pub flavor: Option<Backend>,
}

/// Scan a binary for its version literal. A suffixed literal wins; otherwise
/// exactly one distinct bare `X.Y.Z` string must be present, and the binary
/// must print versions (`%s v%s`), so arbitrary files with a dotted number
/// are not mistaken for iptables.
pub fn scan(data: &[u8]) -> Option<BinaryVersion> {
    let mut suffixed: Option<BinaryVersion> = None;
    let mut bare: Vec<Version> = Vec::new();
    for s in data.split(|&b| b == 0) {
        // Version strings are short; skipping long ones keeps the scan cheap.
        if s.len() < 5 || s.len() > 24 || !s[0].is_ascii_digit() {
            continue;
        }
        let Ok(s) = std::str::from_utf8(s) else {
            continue;
        };
        let (num, flavor) = if let Some(n) = s.strip_suffix(" (nf_tables)") {
            (n, Some(Backend::Nft))
        } else if let Some(n) = s.strip_suffix(" (legacy)") {
            (n, Some(Backend::Legacy))
        } else {
            (s, None)
        };
        if num.split('.').count() != 3 || !num.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            continue;
        }
        let Ok(version) = num.parse::<Version>() else {
            continue;
        };
        if flavor.is_some() {
            if suffixed.is_none() {
                suffixed = Some(BinaryVersion {
                    version,
                    literal: s.to_string(),
                    flavor,
                });
            }
        } else if !bare.contains(&version) {
            bare.push(version);
        }
    }
    if suffixed.is_some() {
        return suffixed;
    }
    let prints_version = data.windows(5).any(|w| w == b"%s v%");
    match bare.as_slice() {
        [v] if prints_version => Some(BinaryVersion {
            version: *v,
            literal: v.to_string(),
            flavor: None,
        }),
        _ => None,
    }
}

/// The multi-call binaries, nft first (iptables-wrapper's default).
pub const MULTI_BINARIES: [&str; 3] =
    ["xtables-nft-multi", "xtables-legacy-multi", "xtables-multi"];
/// Where multi-call binaries are looked for, in this order.
pub const BINARY_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// A binary that was located and scanned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryHit {
    /// Canonical path.
    pub path: String,
    pub version: Option<BinaryVersion>,
}

/// Look-ups of binaries, with evidence and whether they are final.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BinaryProbe {
    pub hits: Vec<BinaryHit>,
    pub evidence: Vec<Evidence>,
    pub determined: bool,
}

impl BinaryProbe {
    pub fn new() -> Self {
        Self {
            determined: true,
            ..Self::default()
        }
    }

    /// Read and scan the file at `path` (symlinks followed).
    pub fn scan_path(&mut self, root: &dyn RootFs, path: &str) -> Lookup<()> {
        let resolved = match root.resolve(path, true) {
            Ok(Lookup::Found(r)) => r,
            Ok(Lookup::Absent) => return Lookup::Absent,
            Ok(Lookup::Unknown) => return Lookup::Unknown,
            Err(e) => {
                self.evidence
                    .push(super::fs_note(EvidenceSource::Binary, path, &e));
                return Lookup::Found(());
            }
        };
        if !matches!(resolved.kind, NodeKind::File { .. }) {
            return Lookup::Absent;
        }
        if self.hits.iter().any(|h| h.path == resolved.path) {
            return Lookup::Found(());
        }
        let data = match root.read(&resolved.path, MAX_BINARY_BYTES) {
            Ok(Lookup::Found(d)) => d,
            Ok(Lookup::Absent) => return Lookup::Absent,
            Ok(Lookup::Unknown) => return Lookup::Unknown,
            Err(e) => {
                self.evidence
                    .push(super::fs_note(EvidenceSource::Binary, &resolved.path, &e));
                self.hits.push(BinaryHit {
                    path: resolved.path,
                    version: None,
                });
                return Lookup::Found(());
            }
        };
        let version = scan(&data);
        self.evidence.push(Evidence {
            source: EvidenceSource::Binary,
            path: resolved.path.clone(),
            detail: match &version {
                Some(v) => format!("version literal {:?}", v.literal),
                None => "no iptables version literal found".to_string(),
            },
        });
        self.hits.push(BinaryHit {
            path: resolved.path,
            version,
        });
        Lookup::Found(())
    }

    /// Find `name` in `dirs` (first hit wins) and scan it. An `Unknown` in a
    /// directory searched before the hit leaves the probe undetermined.
    pub fn find(&mut self, root: &dyn RootFs, dirs: &[&str], name: &str) -> bool {
        for dir in dirs {
            match self.scan_path(root, &join(dir, name)) {
                Lookup::Found(()) => return true,
                Lookup::Absent => {}
                Lookup::Unknown => self.determined = false,
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixed_literal_wins() {
        let data = b"\0junk\x001.8.9\0%s v%s\0\x001.8.9 (nf_tables)\0";
        let v = scan(data).unwrap();
        assert_eq!(v.version, Version::new(1, 8, 9));
        assert_eq!(v.flavor, Some(Backend::Nft));
        assert_eq!(v.literal, "1.8.9 (nf_tables)");
    }

    #[test]
    fn bare_literal_needs_a_version_format_and_uniqueness() {
        assert_eq!(
            scan(b"\x001.8.7\0%s v%s (nf_tables)\0").unwrap().version,
            Version::new(1, 8, 7)
        );
        assert_eq!(scan(b"\x001.8.7\0no format here\0"), None);
        assert_eq!(scan(b"\x001.8.7\x001.2.3\0%s v%s\0"), None);
        assert_eq!(scan(b"\x000.0.0.0/0\0%s v%s\0"), None);
    }
}
