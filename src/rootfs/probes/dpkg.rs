//! dpkg: `/var/lib/dpkg/status` (stanzas with `Status: install ok installed`)
//! and distroless `/var/lib/dpkg/status.d/*` (one control stanza per file,
//! named after the package or a hash, so the `Package:` field decides).

use super::{Fields, PackageHit, PackageProbe, PackageProbes, PackageSet, scan_stanzas};
use crate::facts::EvidenceSource;
use crate::rootfs::fs::{Lookup, RootFs};
use crate::rootfs::paths::{DPKG_STATUS, DPKG_STATUS_D, join};

/// The packages that install the `iptables` command on Debian and Ubuntu.
pub const IPTABLES: PackageSet = PackageSet {
    tool: "iptables",
    names: &["iptables"],
};
/// libnftables (`libnftables1`, which decides) and the `nft` program (`nftables`).
pub const NFTABLES: PackageSet = PackageSet {
    tool: "nftables",
    names: &["libnftables1", "nftables"],
};

/// Read the database once for every set; one probe per set, in that order.
pub fn probe<const N: usize>(root: &dyn RootFs, sets: [PackageSet; N]) -> [PackageProbe; N] {
    let mut p = PackageProbes::new(sets);
    let wanted = p.wanted();
    if let Some(data) = p.read(root, EvidenceSource::Dpkg, DPKG_STATUS) {
        parse(&data, DPKG_STATUS, true, &wanted, |h| p.hit(h));
        p.whole_database();
    }
    // Names seen so far are enough: a lower layer adding a stanza only adds
    // supplementary evidence, and `determined` says so.
    match root.list_seen(DPKG_STATUS_D) {
        Ok(Lookup::Found(names)) => {
            if !matches!(root.list(DPKG_STATUS_D), Ok(Lookup::Found(_))) {
                p.undetermined();
            }
            for name in names.iter().filter(|n| !n.ends_with(".md5sums")) {
                let path = join(DPKG_STATUS_D, name);
                if let Some(data) = p.read(root, EvidenceSource::Dpkg, &path) {
                    parse(&data, &path, false, &wanted, |h| p.hit(h));
                }
            }
        }
        Ok(Lookup::Absent) => {}
        Ok(Lookup::Unknown) => p.undetermined(),
        Err(e) => p.note(
            EvidenceSource::Dpkg,
            DPKG_STATUS_D,
            format!("unreadable: {e}"),
        ),
    }
    p.finish()
}

/// Installed stanzas of `wanted` packages in one file, each handed to `hit`.
/// `need_status`: the main status file lists removed and config-files-only
/// packages too; status.d files describe installed packages and may carry no
/// Status field.
pub fn parse(
    data: &[u8],
    path: &str,
    need_status: bool,
    wanted: &dyn Fn(&str) -> bool,
    mut hit: impl FnMut(PackageHit),
) {
    const FIELDS: Fields<'static, 3> = Fields {
        names: ["Package", "Status", "Version"],
        case_insensitive: true,
    };
    scan_stanzas(data, b':', &FIELDS, |[name, status, version]| {
        let (Some(name), Some(version)) = (name, version) else {
            return;
        };
        if !wanted(name) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rootfs::HostRoot;

    fn write(root: &std::path::Path, path: &str, text: &str) {
        let p = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn names(p: &PackageProbe) -> Vec<(String, String)> {
        p.hits
            .iter()
            .map(|h| (h.name.clone(), h.version.clone()))
            .collect()
    }

    #[test]
    fn one_read_serves_both_tools() {
        let t = tempfile::tempdir().unwrap();
        write(
            t.path(),
            DPKG_STATUS,
            "Package: libnftables1\nStatus: install ok installed\nVersion: 1.1.3-1\n\n\
             Package: iptables\nStatus: install ok installed\nVersion: 1.8.11-2\n\n\
             Package: nftables\nStatus: deinstall ok config-files\nVersion: 1.0.6-2\n\n\
             Package: nftables\nStatus: install ok installed\nVersion: 1.1.3-1\n\n\
             Package: libnftnl11\nStatus: install ok installed\nVersion: 1.2.9-1\n",
        );
        let [ipt, nft] = probe(&HostRoot::new(t.path()), [IPTABLES, NFTABLES]);
        assert_eq!(names(&ipt), [("iptables".into(), "1.8.11-2".into())]);
        assert_eq!(
            names(&nft),
            [
                ("libnftables1".into(), "1.1.3-1".into()),
                ("nftables".into(), "1.1.3-1".into())
            ]
        );
        assert!(ipt.determined && nft.determined);
        assert_eq!(nft.settled_hits, 2);
    }

    #[test]
    fn status_d_only_for_nftables() {
        let t = tempfile::tempdir().unwrap();
        write(
            t.path(),
            "/var/lib/dpkg/status.d/libnftables1",
            "Package: libnftables1\nSource: nftables\nVersion: 1.0.6-2.1+k8s1\n",
        );
        write(
            t.path(),
            "/var/lib/dpkg/status.d/libnftables1.md5sums",
            "Package: nftables\n",
        );
        write(
            t.path(),
            "/var/lib/dpkg/status.d/9f2c",
            "Package: nftables\nVersion: 1.0.6-2.1+k8s1\n",
        );
        let [nft] = probe(&HostRoot::new(t.path()), [NFTABLES]);
        assert_eq!(
            names(&nft),
            [
                ("nftables".into(), "1.0.6-2.1+k8s1".into()),
                ("libnftables1".into(), "1.0.6-2.1+k8s1".into())
            ]
        );
    }

    #[test]
    fn hits_are_bounded_per_tool() {
        let t = tempfile::tempdir().unwrap();
        let mut status = String::new();
        for i in 0..100 {
            status.push_str(&format!(
                "Package: nftables\nStatus: install ok installed\nVersion: 1.0.{i}\n\n"
            ));
        }
        status.push_str("Package: iptables\nStatus: install ok installed\nVersion: 1.8.9-2\n");
        write(t.path(), DPKG_STATUS, &status);
        let [ipt, nft] = probe(&HostRoot::new(t.path()), [IPTABLES, NFTABLES]);
        assert_eq!(nft.hits.len(), super::super::MAX_HITS);
        assert!(
            nft.notes
                .iter()
                .any(|n| n.detail.contains("more than 16 nftables package entries"))
        );
        // The flood of one tool's stanzas does not crowd out the other's.
        assert_eq!(names(&ipt), [("iptables".into(), "1.8.9-2".into())]);
        assert!(ipt.notes.is_empty());
    }
}
