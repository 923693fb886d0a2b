//! rpm: `rpmdb.sqlite` (Fedora 33+, RHEL 9), read by nfguard's own SQLite
//! file-format reader (`rootfs::sqlite`): the image's SQL is never run, so a
//! `Packages` view over an endless query cannot keep a core busy. Table
//! `Packages(hnum, blob)`; each blob is an RPM header without its lead: be32
//! index count, be32 data length, 16-byte index entries (tag, type, offset,
//! count), then the data store.

use super::{PackageHit, PackageProbe, PackageProbes, PackageSet};
use crate::facts::EvidenceSource;
use crate::rootfs::fs::{Lookup, RootFs};
use crate::rootfs::paths::RPMDB_SQLITE;
use crate::rootfs::sqlite::{self, SqliteError, TableShape};

/// Package names that ship the `iptables` command (RHEL 8 `iptables`,
/// Fedora / RHEL 9 `iptables-nft` and `iptables-legacy`).
pub const IPTABLES: PackageSet = PackageSet {
    tool: "iptables",
    names: &["iptables", "iptables-nft", "iptables-legacy"],
};
/// Fedora and RHEL ship libnftables and `nft` in one `nftables` package.
pub const NFTABLES: PackageSet = PackageSet {
    tool: "nftables",
    names: &["nftables"],
};

const TAG_NAME: u32 = 1000;
const TAG_VERSION: u32 = 1001;
const TAG_RELEASE: u32 = 1002;
const TYPE_STRING: u32 = 6;

#[derive(Debug, thiserror::Error)]
pub enum RpmError {
    #[error("not a usable sqlite rpm database: {0}")]
    Sqlite(#[from] SqliteError),
    #[error("empty database file")]
    Empty,
}

/// Read each database once for every set; one probe per set, in that order.
pub fn probe<const N: usize>(root: &dyn RootFs, sets: [PackageSet; N]) -> [PackageProbe; N] {
    let mut p = PackageProbes::new(sets);
    let wanted = p.wanted();
    let mut seen: Vec<String> = Vec::new();
    for path in RPMDB_SQLITE {
        // /var/lib/rpm is usually a link to the sysimage location: read once.
        if let Ok(Lookup::Found(r)) = root.resolve(path, true) {
            if seen.contains(&r.path) {
                continue;
            }
            seen.push(r.path);
        }
        let Some(data) = p.read(root, EvidenceSource::Rpm, path) else {
            continue;
        };
        match packages(&data) {
            Ok(pkgs) => {
                p.whole_database();
                for h in pkgs.into_iter().filter(|h| wanted(&h.name)) {
                    p.hit(PackageHit {
                        source: EvidenceSource::Rpm,
                        path: path.to_string(),
                        version: format!("{}-{}", h.version, h.release),
                        name: h.name,
                    });
                }
            }
            Err(e) => p.note(EvidenceSource::Rpm, path, e.to_string()),
        }
    }
    p.finish()
}

/// Name, version and release of one header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpmHeader {
    pub name: String,
    pub version: String,
    pub release: String,
}

/// The table rpm writes: `CREATE TABLE 'Packages' (hnum INTEGER PRIMARY KEY
/// AUTOINCREMENT,blob BLOB NOT NULL)`, as rpm 4.18 writes it.
pub const PACKAGES_TABLE: TableShape = TableShape {
    name: "Packages",
    rowid: "hnum",
    blob: "blob",
};

/// Every package of an rpmdb.sqlite image; blobs that do not parse are skipped.
/// Bounded in time and memory by the reader's caps, whatever the file holds.
pub fn packages(db: &[u8]) -> Result<Vec<RpmHeader>, RpmError> {
    if db.is_empty() {
        return Err(RpmError::Empty);
    }
    let mut out = Vec::new();
    sqlite::for_each_blob(db, &PACKAGES_TABLE, |blob| {
        out.extend(parse_header(blob));
    })?;
    Ok(out)
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Read NAME, VERSION and RELEASE from a header blob; None when malformed.
pub fn parse_header(blob: &[u8]) -> Option<RpmHeader> {
    let count = be32(blob, 0)? as usize;
    let data_len = be32(blob, 4)? as usize;
    let index_end = count.checked_mul(16)?.checked_add(8)?;
    let data = blob.get(index_end..index_end.checked_add(data_len)?)?;
    let string = |tag: u32| -> Option<String> {
        (0..count).find_map(|i| {
            let at = 8 + i * 16;
            if be32(blob, at)? != tag || be32(blob, at + 4)? != TYPE_STRING {
                return None;
            }
            let off = be32(blob, at + 8)? as usize;
            let rest = data.get(off..)?;
            let end = rest.iter().position(|&b| b == 0)?;
            Some(String::from_utf8_lossy(&rest[..end]).into_owned())
        })
    };
    Some(RpmHeader {
        name: string(TAG_NAME)?,
        version: string(TAG_VERSION)?,
        release: string(TAG_RELEASE)?,
    })
}

/// Build a header blob (used by tests and the fixtures builder).
pub fn build_header(fields: &[(u32, &str)]) -> Vec<u8> {
    let mut index = Vec::new();
    let mut data = Vec::new();
    for (tag, value) in fields {
        index.extend_from_slice(&tag.to_be_bytes());
        index.extend_from_slice(&TYPE_STRING.to_be_bytes());
        index.extend_from_slice(&(data.len() as u32).to_be_bytes());
        index.extend_from_slice(&1u32.to_be_bytes());
        data.extend_from_slice(value.as_bytes());
        data.push(0);
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(fields.len() as u32).to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(&index);
    out.extend_from_slice(&data);
    out
}

/// Tags for `build_header`.
pub const TAGS: (u32, u32, u32) = (TAG_NAME, TAG_VERSION, TAG_RELEASE);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rootfs::HostRoot;

    /// An rpmdb.sqlite as rpm writes it: table Packages(hnum, blob) of headers.
    fn rpmdb(pkgs: &[(&str, &str, &str)]) -> Vec<u8> {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE Packages (hnum INTEGER PRIMARY KEY AUTOINCREMENT, blob BLOB NOT NULL)",
        )
        .unwrap();
        for (n, v, r) in pkgs {
            let blob = build_header(&[(TAG_NAME, n), (TAG_VERSION, v), (TAG_RELEASE, r)]);
            conn.execute("INSERT INTO Packages (blob) VALUES (?1)", [blob])
                .unwrap();
        }
        conn.serialize("main").unwrap().to_vec()
    }

    #[test]
    fn one_read_serves_both_tools() {
        let t = tempfile::tempdir().unwrap();
        let db = t.path().join("usr/lib/sysimage/rpm");
        std::fs::create_dir_all(&db).unwrap();
        std::fs::create_dir_all(t.path().join("var/lib")).unwrap();
        std::os::unix::fs::symlink("../../usr/lib/sysimage/rpm", t.path().join("var/lib/rpm"))
            .unwrap();
        std::fs::write(
            db.join("rpmdb.sqlite"),
            rpmdb(&[
                ("glibc", "2.34", "100.el9"),
                ("nftables", "1.0.9", "7.el9"),
                ("iptables-nft", "1.8.10", "11.el9"),
                ("iptables-libs", "1.8.10", "11.el9"),
            ]),
        )
        .unwrap();
        let [ipt, nft] = probe(&HostRoot::new(t.path()), [IPTABLES, NFTABLES]);
        let v = |p: &PackageProbe| -> Vec<String> {
            p.hits
                .iter()
                .map(|h| format!("{} {} {}", h.path, h.name, h.version))
                .collect()
        };
        // Read once through the link's canonical location.
        assert_eq!(
            v(&ipt),
            ["/var/lib/rpm/rpmdb.sqlite iptables-nft 1.8.10-11.el9"]
        );
        assert_eq!(v(&nft), ["/var/lib/rpm/rpmdb.sqlite nftables 1.0.9-7.el9"]);
        assert!(ipt.determined && nft.determined && nft.settled_hits == 1);
    }
}
