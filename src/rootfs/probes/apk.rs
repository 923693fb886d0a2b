//! apk (Alpine): `/lib/apk/db/installed` (or `/usr/lib/apk/db/installed`),
//! stanzas of `P:` name and `V:` version lines.

use super::{PackageHit, PackageProbe, field, stanzas};
use crate::facts::EvidenceSource;
use crate::rootfs::fs::RootFs;
use crate::rootfs::paths::APK_INSTALLED;

/// `iptables` (nft by default since Alpine 3.19) and `iptables-legacy`.
pub const PACKAGES: [&str; 2] = ["iptables", "iptables-legacy"];

pub fn probe(root: &dyn RootFs) -> PackageProbe {
    let mut p = PackageProbe::new();
    for path in APK_INSTALLED {
        if let Some(data) = p.read(root, EvidenceSource::Apk, path) {
            p.hits.extend(parse(&data, path));
        }
    }
    p
}

pub fn parse(data: &[u8], path: &str) -> Vec<PackageHit> {
    let text = String::from_utf8_lossy(data);
    stanzas(&text, ':')
        .into_iter()
        .filter_map(|s| {
            let name = field(&s, "P")?;
            if !PACKAGES.contains(&name) {
                return None;
            }
            Some(PackageHit {
                source: EvidenceSource::Apk,
                path: path.to_string(),
                name: name.to_string(),
                version: field(&s, "V")?.to_string(),
            })
        })
        .collect()
}
