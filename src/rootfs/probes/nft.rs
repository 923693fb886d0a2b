//! Where the nftables userspace lives in a root: `libnftables.so.1` in the
//! library directories (multiarch ones first), and the `nft` program in the
//! command directories. Each file found is read (bounded by
//! `paths::caps`) for its version literal (`nft_literal`).

use super::nft_literal::{self, LiteralError, NftLiteral};
use crate::facts::{Evidence, EvidenceSource};
use crate::rootfs::fs::{FsError, Lookup, NodeKind, RootFs};
use crate::rootfs::paths::{
    self, COMMAND_DIRS, LIBRARY_DIRS, MULTIARCH_PARENTS, NFT_LIBRARY, NFT_PROGRAM, caps, join,
};

/// One file that was found, and what its literal said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftFile {
    /// Canonical path (links followed inside the root).
    pub path: String,
    pub literal: Result<NftLiteral, Unreadable>,
    /// The file names `libnftables.so.1` (a dynamically linked `nft`).
    pub links_library: bool,
}

/// Why a found file gave no version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    #[error(transparent)]
    Literal(#[from] LiteralError),
    #[error("unreadable: {0}")]
    Fs(String),
}

/// The first file found along a search path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    pub found: Option<NftFile>,
    /// No unread lower layer can put a file ahead of `found` (or anywhere,
    /// when none was found).
    pub determined: bool,
}

/// What the files say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftFilesProbe {
    pub library: Search,
    pub program: Search,
    pub evidence: Vec<Evidence>,
}

pub fn probe(root: &dyn RootFs) -> NftFilesProbe {
    let mut evidence = Vec::new();
    let (dirs, listed) = library_dirs(root, &mut evidence);
    let mut library = search(root, &dirs, NFT_LIBRARY, Kind::Library, &mut evidence);
    library.determined &= listed;
    let program = search(
        root,
        &COMMAND_DIRS,
        NFT_PROGRAM,
        Kind::Program,
        &mut evidence,
    );
    NftFilesProbe {
        library,
        program,
        evidence,
    }
}

/// The library directories in search order: the multiarch ones below
/// `/usr/lib` and `/lib` (sorted), then `LIBRARY_DIRS`. False when an unread
/// lower layer could still add a multiarch directory.
fn library_dirs(root: &dyn RootFs, evidence: &mut Vec<Evidence>) -> (Vec<String>, bool) {
    let mut dirs = Vec::new();
    let mut listed = true;
    for parent in MULTIARCH_PARENTS {
        if !matches!(root.list(parent), Ok(Lookup::Found(_)) | Ok(Lookup::Absent)) {
            listed = false;
        }
        match root.list_seen(parent) {
            Ok(Lookup::Found(names)) => dirs.extend(
                names
                    .iter()
                    .filter(|n| paths::is_multiarch_name(n))
                    .map(|n| join(parent, n)),
            ),
            Ok(Lookup::Absent) | Ok(Lookup::Unknown) => {}
            Err(e) => evidence.push(super::fs_note(EvidenceSource::Binary, parent, &e)),
        }
    }
    dirs.extend(LIBRARY_DIRS.iter().map(|d| d.to_string()));
    (dirs, listed)
}

#[derive(Clone, Copy)]
enum Kind {
    Library,
    Program,
}

impl Kind {
    fn cap(self) -> u64 {
        match self {
            Kind::Library => caps::NFT_LIBRARY,
            Kind::Program => caps::COMMAND,
        }
    }

    fn scan(self, data: &[u8]) -> Result<NftLiteral, LiteralError> {
        match self {
            Kind::Library => nft_literal::library_version(data),
            Kind::Program => nft_literal::program_version(data),
        }
    }

    fn detail(self, literal: &Result<NftLiteral, Unreadable>) -> String {
        let what = match self {
            Kind::Library => "libnftables",
            Kind::Program => "nft program",
        };
        match literal {
            Ok(l) => match &l.release_name {
                Some(name) => format!("{what} version literal {:?} ({name:?})", l.text),
                None => format!("{what} version literal {:?}", l.text),
            },
            Err(Unreadable::Literal(e)) => format!("{what}: {e}: version unknown"),
            Err(Unreadable::Fs(e)) => format!("{what} unreadable: {e}: version unknown"),
        }
    }
}

/// Find `name` in `dirs` (first hit wins) and read its literal. An
/// `Unknown` before the hit leaves the search undetermined.
fn search(
    root: &dyn RootFs,
    dirs: &[impl AsRef<str>],
    name: &str,
    kind: Kind,
    evidence: &mut Vec<Evidence>,
) -> Search {
    let mut determined = true;
    for dir in dirs {
        let path = join(dir.as_ref(), name);
        match locate(root, &path, kind) {
            Lookup::Found(file) => {
                evidence.push(Evidence {
                    source: EvidenceSource::Binary,
                    path: paths::shorten(&file.path).into_owned(),
                    detail: kind.detail(&file.literal),
                });
                return Search {
                    found: Some(file),
                    determined,
                };
            }
            Lookup::Absent => {}
            Lookup::Unknown => determined = false,
        }
    }
    Search {
        found: None,
        determined,
    }
}

/// The regular file at `path` (links followed) and its literal. A file that
/// is there but cannot be read (a link loop, too large) is found, unknown.
fn locate(root: &dyn RootFs, path: &str, kind: Kind) -> Lookup<NftFile> {
    let unreadable = |path: &str, e: &FsError| NftFile {
        path: path.to_string(),
        literal: Err(Unreadable::Fs(e.to_string())),
        links_library: false,
    };
    let resolved = match root.resolve(path, true) {
        Ok(Lookup::Found(r)) => r,
        Ok(Lookup::Absent) => return Lookup::Absent,
        Ok(Lookup::Unknown) => return Lookup::Unknown,
        Err(e) => return Lookup::Found(unreadable(path, &e)),
    };
    if !matches!(resolved.kind, NodeKind::File { .. }) {
        return Lookup::Absent;
    }
    match root.read(&resolved.path, kind.cap()) {
        Ok(Lookup::Found(data)) => Lookup::Found(NftFile {
            literal: kind.scan(&data).map_err(Unreadable::from),
            links_library: matches!(kind, Kind::Program) && names_soname(&data),
            path: resolved.path,
        }),
        Ok(Lookup::Absent) => Lookup::Absent,
        Ok(Lookup::Unknown) => Lookup::Unknown,
        Err(e) => Lookup::Found(unreadable(&resolved.path, &e)),
    }
}

/// The soname as a whole string (a `DT_NEEDED` entry of a dynamic `nft`).
fn names_soname(data: &[u8]) -> bool {
    data.split(|&b| b == 0).any(|s| s == NFT_LIBRARY.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rootfs::HostRoot;
    use std::os::unix::fs::symlink;
    use std::path::Path;

    const LIB: &[u8] = b"\x7fELF\0nflog\0watcher\0nft\x001.1.3\0src/json.c\0";
    const NFT: &[u8] = b"\0Lester Gooch #5\x001.0.6\0nftables\0%s v%s (%s)\n\0";

    fn put(root: &Path, path: &str, data: &[u8]) {
        let p = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }

    #[test]
    fn follows_the_soname_link_in_a_multiarch_dir() {
        let t = tempfile::tempdir().unwrap();
        put(
            t.path(),
            "/usr/lib/x86_64-linux-gnu/libnftables.so.1.1.0",
            LIB,
        );
        symlink(
            "libnftables.so.1.1.0",
            t.path().join("usr/lib/x86_64-linux-gnu/libnftables.so.1"),
        )
        .unwrap();
        symlink("usr/lib", t.path().join("lib")).unwrap();
        put(t.path(), "/usr/sbin/nft", NFT);
        let p = probe(&HostRoot::new(t.path()));
        let lib = p.library.found.unwrap();
        assert_eq!(lib.path, "/usr/lib/x86_64-linux-gnu/libnftables.so.1.1.0");
        assert_eq!(lib.literal.unwrap().text, "1.1.3");
        assert!(p.library.determined);
        let prog = p.program.found.unwrap();
        assert_eq!(prog.path, "/usr/sbin/nft");
        assert_eq!(prog.literal.unwrap().text, "1.0.6");
        assert_eq!(
            p.evidence
                .iter()
                .map(|e| e.detail.as_str())
                .collect::<Vec<_>>(),
            [
                "libnftables version literal \"1.1.3\"",
                "nft program version literal \"1.0.6\" (\"Lester Gooch #5\")"
            ]
        );
    }

    #[test]
    fn plain_lib_dirs_and_nothing_at_all() {
        let t = tempfile::tempdir().unwrap();
        put(t.path(), "/usr/lib64/libnftables.so.1", LIB);
        let p = probe(&HostRoot::new(t.path()));
        assert_eq!(p.library.found.unwrap().path, "/usr/lib64/libnftables.so.1");
        assert_eq!(p.program.found, None);
        assert!(p.program.determined);

        let empty = tempfile::tempdir().unwrap();
        let p = probe(&HostRoot::new(empty.path()));
        assert_eq!((p.library.found, p.program.found), (None, None));
        assert!(p.library.determined && p.program.determined);
        assert!(p.evidence.is_empty());
    }

    #[test]
    fn hostile_libraries_are_found_and_unknown() {
        let t = tempfile::tempdir().unwrap();
        // Over the cap: never read past it.
        let big = t.path().join("usr/lib/libnftables.so.1");
        std::fs::create_dir_all(big.parent().unwrap()).unwrap();
        std::fs::File::create(&big)
            .unwrap()
            .set_len(caps::NFT_LIBRARY + 1)
            .unwrap();
        let p = probe(&HostRoot::new(t.path()));
        let lib = p.library.found.unwrap();
        assert!(matches!(lib.literal, Err(Unreadable::Fs(_))), "{lib:?}");
        assert!(p.evidence[0].detail.contains("version unknown"));

        // A link loop where the library should be.
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("lib")).unwrap();
        symlink("libnftables.so.1", t.path().join("lib/libnftables.so.1")).unwrap();
        let lib = probe(&HostRoot::new(t.path())).library.found.unwrap();
        assert!(matches!(lib.literal, Err(Unreadable::Fs(_))), "{lib:?}");
    }
}
