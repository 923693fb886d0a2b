//! apk (Alpine): `/lib/apk/db/installed` (or `/usr/lib/apk/db/installed`),
//! stanzas of `P:` name and `V:` version lines.

use super::{Fields, PackageHit, PackageProbe, scan_stanzas};
use crate::facts::EvidenceSource;
use crate::rootfs::fs::RootFs;
use crate::rootfs::paths::APK_INSTALLED;

/// `iptables` (nft by default since Alpine 3.19) and `iptables-legacy`.
pub const PACKAGES: [&str; 2] = ["iptables", "iptables-legacy"];

pub fn probe(root: &dyn RootFs) -> PackageProbe {
    let mut p = PackageProbe::new();
    for path in APK_INSTALLED {
        if let Some(data) = p.read(root, EvidenceSource::Apk, path) {
            parse(&data, path, |h| p.hit(h));
        }
    }
    p
}

/// iptables packages in one database, each handed to `hit`.
pub fn parse(data: &[u8], path: &str, mut hit: impl FnMut(PackageHit)) {
    const FIELDS: Fields<'static, 2> = Fields {
        names: ["P", "V"],
        case_insensitive: false,
    };
    scan_stanzas(data, b':', &FIELDS, |[name, version]| {
        if let (Some(name), Some(version)) = (name, version)
            && PACKAGES.contains(name)
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
