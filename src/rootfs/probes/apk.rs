//! apk (Alpine): `/lib/apk/db/installed` (or `/usr/lib/apk/db/installed`),
//! stanzas of `P:` name and `V:` version lines.

use super::{Fields, PackageHit, PackageProbe, PackageProbes, PackageSet, scan_stanzas};
use crate::facts::EvidenceSource;
use crate::rootfs::fs::RootFs;
use crate::rootfs::paths::APK_INSTALLED;

/// `iptables` (nft by default since Alpine 3.19) and `iptables-legacy`.
pub const IPTABLES: PackageSet = PackageSet {
    tool: "iptables",
    names: &["iptables", "iptables-legacy"],
};
/// `nftables`, and `libnftables` where the library is a package of its own.
pub const NFTABLES: PackageSet = PackageSet {
    tool: "nftables",
    names: &["libnftables", "nftables"],
};

/// Read the database once for every set; one probe per set, in that order.
pub fn probe<const N: usize>(root: &dyn RootFs, sets: [PackageSet; N]) -> [PackageProbe; N] {
    let mut p = PackageProbes::new(sets);
    let wanted = p.wanted();
    for path in APK_INSTALLED {
        if let Some(data) = p.read(root, EvidenceSource::Apk, path) {
            parse(&data, path, &wanted, |h| p.hit(h));
            p.whole_database();
        }
    }
    p.finish()
}

/// `wanted` packages in one database, each handed to `hit`.
pub fn parse(
    data: &[u8],
    path: &str,
    wanted: &dyn Fn(&str) -> bool,
    mut hit: impl FnMut(PackageHit),
) {
    const FIELDS: Fields<'static, 2> = Fields {
        names: ["P", "V"],
        case_insensitive: false,
    };
    scan_stanzas(data, b':', &FIELDS, |[name, version]| {
        if let (Some(name), Some(version)) = (name, version)
            && wanted(name)
        {
            hit(PackageHit {
                source: EvidenceSource::Apk,
                path: path.to_string(),
                name: name.to_string(),
                version: version.to_string(),
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rootfs::HostRoot;

    #[test]
    fn one_read_serves_both_tools() {
        let t = tempfile::tempdir().unwrap();
        let db = t.path().join("lib/apk/db");
        std::fs::create_dir_all(&db).unwrap();
        std::fs::write(
            db.join("installed"),
            "P:libnftnl\nV:1.2.8-r0\n\nP:nftables\nV:1.1.1-r0\np:cmd:nft=1.1.1-r0\n\n\
             P:libnftables\nV:1.1.1-r0\n\nP:iptables\nV:1.8.11-r1\n",
        )
        .unwrap();
        let [ipt, nft] = probe(&HostRoot::new(t.path()), [IPTABLES, NFTABLES]);
        let v = |p: &PackageProbe| -> Vec<String> {
            p.hits
                .iter()
                .map(|h| format!("{} {}", h.name, h.version))
                .collect()
        };
        assert_eq!(v(&ipt), ["iptables 1.8.11-r1"]);
        assert_eq!(v(&nft), ["nftables 1.1.1-r0", "libnftables 1.1.1-r0"]);
        assert!(nft.hits.iter().all(|h| h.source == EvidenceSource::Apk));
    }
}
