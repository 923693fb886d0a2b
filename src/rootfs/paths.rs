//! Which paths of an image the probes can ever need. A `Layer` keeps metadata
//! for these paths (and their ancestor directories) and file content only for
//! `wants_content` paths, so a layer's memory does not grow with its size.
//!
//! Paths here are normalized: absolute, '/'-separated, no `.`/`..`, no trailing '/'.

/// dpkg's database (Debian, Ubuntu).
pub const DPKG_STATUS: &str = "/var/lib/dpkg/status";
/// Distroless: one control stanza per package.
pub const DPKG_STATUS_D: &str = "/var/lib/dpkg/status.d";
/// apk's database (Alpine): classic and usr-merged locations.
pub const APK_INSTALLED: [&str; 2] = ["/lib/apk/db/installed", "/usr/lib/apk/db/installed"];
/// rpm's sqlite database (Fedora 33+, RHEL 9): classic and sysimage locations.
pub const RPMDB_SQLITE: [&str; 2] = [
    "/var/lib/rpm/rpmdb.sqlite",
    "/usr/lib/sysimage/rpm/rpmdb.sqlite",
];
/// Where an `iptables` command or the xtables binaries live, in PATH order.
pub const COMMAND_DIRS: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];
/// Debian/RHEL alternatives links.
pub const ALTERNATIVES_DIR: &str = "/etc/alternatives";
/// Where a shared library lives, searched after the multiarch directories
/// below the last two (`/usr/lib/x86_64-linux-gnu`, `/lib/aarch64-linux-gnu`).
pub const LIBRARY_DIRS: [&str; 4] = ["/usr/lib64", "/lib64", "/usr/lib", "/lib"];
/// The directories that hold multiarch directories.
pub const MULTIARCH_PARENTS: [&str; 2] = ["/usr/lib", "/lib"];
/// The soname programs load libnftables by.
pub const NFT_LIBRARY: &str = "libnftables.so.1";
/// The nftables command.
pub const NFT_PROGRAM: &str = "nft";
/// First components of every tracked path: a layer reader drops any other
/// tar entry before normalizing its name.
pub const TRACKED_TOP_DIRS: [&str; 7] = ["usr", "var", "lib", "lib64", "sbin", "bin", "etc"];

/// Exact files whose content probes read.
const CONTENT_FILES: [&str; 5] = [
    DPKG_STATUS,
    APK_INSTALLED[0],
    APK_INSTALLED[1],
    RPMDB_SQLITE[0],
    RPMDB_SQLITE[1],
];

/// A name in a command directory that matters: the command itself, its
/// alternatives targets, the multi-call binaries and the wrapper.
pub fn is_command_name(name: &str) -> bool {
    name.starts_with("iptables") || name.starts_with("xtables-")
}

/// A multiarch directory name: a GNU or musl triplet such as
/// `x86_64-linux-gnu`, `arm-linux-gnueabihf`, `x86_64-linux-musl`.
pub fn is_multiarch_name(name: &str) -> bool {
    ["-linux-gnu", "-linux-musl"]
        .iter()
        .any(|abi| name.find(abi).is_some_and(|at| at > 0))
}

/// A directory searched for libnftables: `LIBRARY_DIRS` and the multiarch
/// directories directly below `MULTIARCH_PARENTS`.
pub fn is_library_dir(path: &str) -> bool {
    LIBRARY_DIRS.contains(&path)
        || split_parent(path).is_some_and(|(parent, name)| {
            MULTIARCH_PARENTS.contains(&parent) && is_multiarch_name(name)
        })
}

/// A libnftables file or link: the soname and what it links to
/// (`libnftables.so.1 -> libnftables.so.1.1.0`), and the dev link.
pub fn is_nft_library_name(name: &str) -> bool {
    name.starts_with("libnftables.so")
}

fn split_parent(path: &str) -> Option<(&str, &str)> {
    let (parent, name) = path.rsplit_once('/')?;
    Some((if parent.is_empty() { "/" } else { parent }, name))
}

/// The most bytes of each kind of file a probe reads, by what the file is:
/// far above any real one, far below what would let one image hold the
/// webhook's memory. A larger file is kept as metadata only and read as
/// `FsError::TooLarge` (noted as evidence, never fatal).
pub mod caps {
    /// dpkg's status: ~1 MiB in a large container image, ~5 MiB on a desktop.
    pub const DPKG_STATUS: u64 = 32 << 20;
    /// One distroless status.d stanza: a few KiB.
    pub const DPKG_STATUS_D_ENTRY: u64 = 64 << 10;
    /// apk's installed database: under 2 MiB even for large images.
    pub const APK_INSTALLED: u64 = 16 << 20;
    /// rpmdb.sqlite: 5-30 MiB in container images.
    pub const RPMDB_SQLITE: u64 = 64 << 20;
    /// An iptables command or xtables multi-call binary (a few hundred KiB;
    /// a static build a few MiB) or the iptables-wrapper script.
    pub const COMMAND: u64 = 16 << 20;
    /// An alternatives entry that is a file rather than the usual link.
    pub const ALTERNATIVE: u64 = 64 << 10;
    /// libnftables.so: about 1 MiB (Debian 0.9.8 to 1.1.7: 0.7-1.1 MiB).
    /// One large hostile library is refused (read as unknown, with a note)
    /// without holding more than a command may.
    pub const NFT_LIBRARY: u64 = 16 << 20;
}

/// How many bytes of this path's content a layer retains (when it is a
/// regular file), or None when no probe reads it.
pub fn content_cap(path: &str) -> Option<u64> {
    if path == DPKG_STATUS {
        return Some(caps::DPKG_STATUS);
    }
    if APK_INSTALLED.contains(&path) {
        return Some(caps::APK_INSTALLED);
    }
    if RPMDB_SQLITE.contains(&path) {
        return Some(caps::RPMDB_SQLITE);
    }
    let (parent, name) = split_parent(path)?;
    if name.is_empty() {
        return None;
    }
    if parent == DPKG_STATUS_D {
        // status.d holds `NAME` and `NAME.md5sums`; only the stanzas matter.
        return (!name.ends_with(".md5sums")).then_some(caps::DPKG_STATUS_D_ENTRY);
    }
    if parent == ALTERNATIVES_DIR {
        return name.starts_with("iptables").then_some(caps::ALTERNATIVE);
    }
    if is_library_dir(parent) {
        return is_nft_library_name(name).then_some(caps::NFT_LIBRARY);
    }
    (COMMAND_DIRS.contains(&parent) && (is_command_name(name) || name == NFT_PROGRAM))
        .then_some(caps::COMMAND)
}

/// Content of this path is retained by a layer (when it is a regular file).
pub fn wants_content(path: &str) -> bool {
    content_cap(path).is_some()
}

/// The path's entry (kind, symlink target, whiteout) is retained by a layer:
/// content paths and every ancestor directory of one (e.g. `/usr`, `/sbin`,
/// `/lib`, `/var/lib/rpm`, which may be usrmerge symlinks).
pub fn is_tracked(path: &str) -> bool {
    if path == "/" || wants_content(path) || is_library_dir(path) {
        return true;
    }
    let anchors = CONTENT_FILES
        .iter()
        .copied()
        .chain([DPKG_STATUS_D, ALTERNATIVES_DIR])
        .chain(COMMAND_DIRS)
        .chain(LIBRARY_DIRS);
    for anchor in anchors {
        if anchor == path {
            return true;
        }
        if let Some(rest) = anchor.strip_prefix(path)
            && rest.starts_with('/')
        {
            return true;
        }
    }
    false
}

/// Normalize a tar entry name or a look-up path: "./usr/x", "usr/x/",
/// "/usr//x" -> "/usr/x"; "." components dropped; ".." clamped at the root
/// (lexically: tar names contain no symlinks to resolve).
pub fn normalize(name: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in name.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = String::with_capacity(name.len() + 1);
    for p in &parts {
        out.push('/');
        out.push_str(p);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// A path as shown in an error or evidence: image paths can be 64 KiB long
/// (GNU long names), and what reaches a user is bounded.
pub fn shorten(path: &str) -> std::borrow::Cow<'_, str> {
    const SHOWN: usize = 256;
    match path.char_indices().nth(SHOWN) {
        None => path.into(),
        Some((at, _)) => format!("{}... ({} bytes)", &path[..at], path.len()).into(),
    }
}

/// `parent` + `/` + `name` for normalized paths.
pub fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Parent directory of a normalized path ("/" for "/" itself).
pub fn parent(path: &str) -> &str {
    split_parent(path).map_or("/", |(p, _)| p)
}

/// Last component of a normalized path ("" for "/").
pub fn file_name(path: &str) -> &str {
    split_parent(path).map_or("", |(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_and_clamps() {
        assert_eq!(normalize("./usr/x"), "/usr/x");
        assert_eq!(normalize("usr/x/"), "/usr/x");
        assert_eq!(normalize("/usr//x"), "/usr/x");
        assert_eq!(normalize("../../etc/passwd"), "/etc/passwd");
        assert_eq!(normalize("a/../../b"), "/b");
        assert_eq!(normalize("./"), "/");
        assert_eq!(normalize(""), "/");
    }

    #[test]
    fn content_set_is_narrow() {
        for p in [
            "/var/lib/dpkg/status",
            "/var/lib/dpkg/status.d/iptables",
            "/var/lib/dpkg/status.d/a1b2c3",
            "/lib/apk/db/installed",
            "/usr/lib/apk/db/installed",
            "/var/lib/rpm/rpmdb.sqlite",
            "/usr/lib/sysimage/rpm/rpmdb.sqlite",
            "/usr/sbin/iptables",
            "/sbin/iptables-wrapper",
            "/usr/sbin/xtables-nft-multi",
            "/etc/alternatives/iptables",
            "/usr/sbin/nft",
            "/usr/local/sbin/nft",
            "/usr/lib/x86_64-linux-gnu/libnftables.so.1",
            "/usr/lib/x86_64-linux-gnu/libnftables.so.1.1.0",
            "/lib/aarch64-linux-gnu/libnftables.so.1",
            "/usr/lib/arm-linux-gnueabihf/libnftables.so.1",
            "/usr/lib/x86_64-linux-musl/libnftables.so.1",
            "/usr/lib64/libnftables.so.1",
            "/lib64/libnftables.so.1",
            "/usr/lib/libnftables.so.1",
            "/lib/libnftables.so.1",
        ] {
            assert!(wants_content(p), "{p}");
            assert!(is_tracked(p), "{p}");
        }
        for p in [
            "/var/lib/dpkg/status.d/iptables.md5sums",
            "/usr/sbin/nft-helper",
            "/usr/sbin/nftables",
            "/usr/share/nftables/nft",
            "/usr/lib/x86_64-linux-gnu/libnftnl.so.11",
            "/usr/lib/x86_64-linux-gnu/xtables/libnftables.so.1",
            "/usr/lib/linux-gnu/libnftables.so.1",
            "/usr/lib/python3/dist-packages/nftables/nftables.py",
            "/usr/share/man/man3/libnftables.3.gz",
            "/opt/lib/libnftables.so.1",
            "/usr/local/lib/libnftables.so.1",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/etc/alternatives/ebtables",
            "/var/lib/dpkg/info/iptables.list",
            "/usr/sbin",
        ] {
            assert!(!wants_content(p), "{p}");
        }
        for p in [
            "/",
            "/usr",
            "/sbin",
            "/lib",
            "/var/lib/rpm",
            "/usr/lib/sysimage",
            "/usr/lib/x86_64-linux-gnu",
            "/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/lib64",
        ] {
            assert!(is_tracked(p), "{p}");
        }
        for p in [
            "/opt",
            "/usr/share",
            "/usr/sbin/nft-helper",
            "/var/lib/dpkg/info",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/xtables",
            "/usr/lib/python3",
            "/usr/lib64/python3",
            "/usr/local/lib",
        ] {
            assert!(!is_tracked(p), "{p}");
        }
    }

    #[test]
    fn tracked_paths_start_with_a_tracked_top_dir() {
        let anchors = CONTENT_FILES
            .iter()
            .chain(&[DPKG_STATUS_D, ALTERNATIVES_DIR])
            .chain(&COMMAND_DIRS)
            .chain(&LIBRARY_DIRS)
            .chain(&MULTIARCH_PARENTS);
        for a in anchors {
            let top = a.trim_start_matches('/').split('/').next().unwrap_or("");
            assert!(TRACKED_TOP_DIRS.contains(&top), "{a}");
        }
    }

    #[test]
    fn multiarch_names() {
        for n in [
            "x86_64-linux-gnu",
            "aarch64-linux-gnu",
            "arm-linux-gnueabihf",
            "i386-linux-gnu",
            "x86_64-linux-musl",
        ] {
            assert!(is_multiarch_name(n), "{n}");
        }
        for n in [
            "linux-gnu",
            "-linux-gnu",
            "gnu",
            "x86_64",
            "python3",
            "xtables",
        ] {
            assert!(!is_multiarch_name(n), "{n}");
        }
    }

    #[test]
    fn caps_fit_what_each_file_is() {
        assert_eq!(
            content_cap("/var/lib/dpkg/status.d/libc6"),
            Some(caps::DPKG_STATUS_D_ENTRY)
        );
        assert_eq!(content_cap("/var/lib/dpkg/status"), Some(caps::DPKG_STATUS));
        assert_eq!(
            content_cap("/usr/lib/sysimage/rpm/rpmdb.sqlite"),
            Some(caps::RPMDB_SQLITE)
        );
        assert_eq!(
            content_cap("/usr/sbin/xtables-nft-multi"),
            Some(caps::COMMAND)
        );
        assert_eq!(content_cap("/var/lib/dpkg/status.d/x.md5sums"), None);
        assert_eq!(
            content_cap("/usr/lib/x86_64-linux-gnu/libnftables.so.1.1.0"),
            Some(caps::NFT_LIBRARY)
        );
        assert_eq!(content_cap("/usr/sbin/nft"), Some(caps::COMMAND));
        // A library is read whole for its literal, no more than a command.
        const { assert!(caps::NFT_LIBRARY <= caps::COMMAND) };
        // A stanza file is kilobytes: a bomb of many big "stanza" files is
        // refused per file, long before the layer's budget.
        const { assert!(caps::DPKG_STATUS_D_ENTRY * 16 < caps::DPKG_STATUS) };
    }
}
