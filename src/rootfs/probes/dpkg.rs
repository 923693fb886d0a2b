//! dpkg: `/var/lib/dpkg/status` (stanzas with `Status: install ok installed`)
//! and distroless `/var/lib/dpkg/status.d/*` (one control stanza per file,
//! named after the package or a hash, so the `Package:` field decides).

use super::{Fields, PackageHit, PackageProbe, scan_stanzas};
use crate::facts::EvidenceSource;
use crate::rootfs::fs::{Lookup, RootFs};
use crate::rootfs::paths::{DPKG_STATUS, DPKG_STATUS_D, join};

/// The packages that install the `iptables` command on Debian and Ubuntu.
pub const PACKAGES: [&str; 1] = ["iptables"];

pub fn probe(root: &dyn RootFs) -> PackageProbe {
    let mut p = PackageProbe::new();
    if let Some(data) = p.read(root, EvidenceSource::Dpkg, DPKG_STATUS) {
        parse(&data, DPKG_STATUS, true, |h| p.hit(h));
    }
    // Names seen so far are enough: a lower layer adding a stanza only adds
    // supplementary evidence, and `determined` says so.
    match root.list_seen(DPKG_STATUS_D) {
        Ok(Lookup::Found(names)) => {
            if !matches!(root.list(DPKG_STATUS_D), Ok(Lookup::Found(_))) {
                p.determined = false;
            }
            for name in names.iter().filter(|n| !n.ends_with(".md5sums")) {
                let path = join(DPKG_STATUS_D, name);
                if let Some(data) = p.read(root, EvidenceSource::Dpkg, &path) {
                    parse(&data, &path, false, |h| p.hit(h));
                }
            }
        }
        Ok(Lookup::Absent) => {}
        Ok(Lookup::Unknown) => p.determined = false,
        Err(e) => p.note(
            EvidenceSource::Dpkg,
            DPKG_STATUS_D,
            format!("unreadable: {e}"),
        ),
    }
    p
}

/// Installed iptables stanzas in one file, each handed to `hit`.
/// `need_status`: the main status file lists removed and config-files-only
/// packages too; status.d files describe installed packages and may carry no
/// Status field.
pub fn parse(data: &[u8], path: &str, need_status: bool, mut hit: impl FnMut(PackageHit)) {
    const FIELDS: Fields<'static, 3> = Fields {
        names: ["Package", "Status", "Version"],
        case_insensitive: true,
    };
    scan_stanzas(data, b':', &FIELDS, |[name, status, version]| {
        let (Some(name), Some(version)) = (name, version) else {
            return;
        };
        if !PACKAGES.contains(name) {
            return;
        }
        let installed = match status {
            Some(st) => st.split_whitespace().last() == Some("installed"),
            None => !need_status,
        };
        if installed {
            hit(PackageHit {
                source: EvidenceSource::Dpkg,
                path: path.to_string(),
                name: name.to_string(),
                version: version.to_string(),
            });
        }
    });
}
