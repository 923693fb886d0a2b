//! `collect` over the REAL Debian iptables releases (1.8.7, 1.8.9, 1.8.11)
//! extracted by scripts/fetch-iptables.sh, laid out as dpkg's postinst and
//! update-alternatives would leave them, read through `HostRoot`.

use crate::inspect_support::fixtures;
use nfguard::facts::{Backend, EvidenceSource, Version};
use nfguard::rootfs::{HostRoot, collect};
use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

const RELEASES: [(&str, Version, &str); 3] = [
    ("1.8.7", Version::new(1, 8, 7), "1.8.7-1"),
    ("1.8.9", Version::new(1, 8, 9), "1.8.9-2"),
    ("1.8.11", Version::new(1, 8, 11), "1.8.11-2"),
];

/// A copy of one release's extracted tree (tests may change it).
fn tree(release: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join(release).join("root");
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", src.display()))
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(st.success());
    tmp
}

/// The deb's control stanza as dpkg records it once installed.
fn status_stanza(release: &str) -> String {
    let debs = fixtures().join(release).join("debs");
    let deb = std::fs::read_dir(&debs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("iptables_")
        })
        .expect("iptables deb");
    let out = Command::new("dpkg-deb")
        .arg("-f")
        .arg(&deb)
        .output()
        .unwrap();
    assert!(out.status.success());
    let control = String::from_utf8(out.stdout).unwrap();
    let mut stanza = String::new();
    for line in control.lines() {
        stanza.push_str(line);
        stanza.push('\n');
        if line.starts_with("Package:") {
            stanza.push_str("Status: install ok installed\n");
        }
    }
    stanza
}

fn write(root: &Path, path: &str, content: &str) {
    let p = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// What iptables' postinst does: update-alternatives --install
/// /usr/sbin/iptables iptables /usr/sbin/iptables-<backend> ...
fn set_alternative(root: &Path, backend: &str) {
    std::fs::create_dir_all(root.join("etc/alternatives")).unwrap();
    let alt = root.join("etc/alternatives/iptables");
    let _ = std::fs::remove_file(&alt);
    symlink(format!("/usr/sbin/iptables-{backend}"), &alt).unwrap();
    let cmd = root.join("usr/sbin/iptables");
    let _ = std::fs::remove_file(&cmd);
    symlink("/etc/alternatives/iptables", &cmd).unwrap();
}

fn installed(release: &str, backend: &str) -> tempfile::TempDir {
    let t = tree(release);
    let other = "Package: libc6\nStatus: install ok installed\nVersion: 2.36-9\n\n";
    write(
        t.path(),
        "/var/lib/dpkg/status",
        &format!("{other}{}\n", status_stanza(release)),
    );
    set_alternative(t.path(), backend);
    t
}

#[test]
fn each_release_nft_default_with_dpkg() {
    for (release, version, pkg) in RELEASES {
        let t = installed(release, "nft");
        let c = collect(&HostRoot::new(t.path()), &BTreeMap::new());
        assert!(c.settled);
        let f = c.facts.expect("iptables found");
        assert_eq!(f.version, Some(version), "{release}: {f:#?}");
        assert_eq!(f.backend, Some(Backend::Nft), "{release}");
        assert_eq!(f.package_version.as_deref(), Some(pkg), "{release}");
        assert!(f.conflicts.is_empty(), "{release}: {:?}", f.conflicts);
        let alt = f
            .evidence
            .iter()
            .find(|e| e.source == EvidenceSource::Alternatives)
            .unwrap();
        assert_eq!(
            alt.detail,
            "/usr/sbin/iptables -> /etc/alternatives/iptables -> /usr/sbin/iptables-nft -> xtables-nft-multi: nft"
        );
        let bin = f
            .evidence
            .iter()
            .find(|e| e.source == EvidenceSource::Binary)
            .unwrap();
        assert_eq!(bin.path, "/usr/sbin/xtables-nft-multi");
        // 1.8.7 has only the bare literal; later releases the suffixed one.
        let want = if release == "1.8.7" {
            "version literal \"1.8.7\"".to_string()
        } else {
            format!("version literal \"{release} (nf_tables)\"")
        };
        assert_eq!(bin.detail, want, "{release}");
        assert!(
            f.evidence.iter().any(|e| e.source == EvidenceSource::Dpkg
                && e.detail == format!("package iptables {pkg}"))
        );
    }
}

#[test]
fn each_release_legacy_default() {
    for (release, version, _) in RELEASES {
        let t = installed(release, "legacy");
        let f = collect(&HostRoot::new(t.path()), &BTreeMap::new())
            .facts
            .unwrap();
        assert_eq!(f.version, Some(version), "{release}");
        assert_eq!(f.backend, Some(Backend::Legacy), "{release}");
        assert!(
            f.evidence.iter().any(|e| e.source == EvidenceSource::Binary
                && e.path == "/usr/sbin/xtables-legacy-multi")
        );
    }
}

#[test]
fn usrmerge_sbin_link_and_no_package_database() {
    // A usr-merged image without dpkg data: /sbin -> usr/sbin, and the
    // command found through /sbin/iptables only.
    let t = tree("1.8.11");
    symlink("usr/sbin", t.path().join("sbin")).unwrap();
    symlink("xtables-legacy-multi", t.path().join("usr/sbin/iptables")).unwrap();
    let f = collect(&HostRoot::new(t.path()), &BTreeMap::new())
        .facts
        .unwrap();
    assert_eq!(f.version, Some(Version::new(1, 8, 11)));
    assert_eq!(f.backend, Some(Backend::Legacy));
    assert_eq!(f.package_version, None);
}

#[test]
fn lying_package_database_loses_to_the_binary() {
    // dpkg claims 1.8.9 but the binaries are 1.8.7: the incident's shape.
    let t = tree("1.8.7");
    write(t.path(), "/var/lib/dpkg/status", &status_stanza("1.8.9"));
    set_alternative(t.path(), "nft");
    let f = collect(&HostRoot::new(t.path()), &BTreeMap::new())
        .facts
        .unwrap();
    assert_eq!(f.version, Some(Version::new(1, 8, 7)));
    assert_eq!(f.package_version.as_deref(), Some("1.8.9-2"));
    assert_eq!(f.conflicts.len(), 1, "{:?}", f.conflicts);
    assert!(f.conflicts[0].contains("1.8.9-2") && f.conflicts[0].contains("binary wins"));
}

#[test]
fn wrapper_reports_bundled_binaries() {
    let t = tree("1.8.9");
    write(
        t.path(),
        "/usr/sbin/iptables-wrapper",
        "#!/bin/sh\n# picks xtables-nft-multi or xtables-legacy-multi\n",
    );
    symlink("iptables-wrapper", t.path().join("usr/sbin/iptables")).unwrap();
    let f = collect(&HostRoot::new(t.path()), &BTreeMap::new())
        .facts
        .unwrap();
    assert_eq!(f.backend, Some(Backend::Wrapper));
    assert_eq!(f.version, Some(Version::new(1, 8, 9)));
    let bins: Vec<_> = f
        .evidence
        .iter()
        .filter(|e| e.source == EvidenceSource::Binary)
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(
        bins,
        [
            "/usr/sbin/xtables-nft-multi",
            "/usr/sbin/xtables-legacy-multi"
        ]
    );
}

#[test]
fn distroless_status_d_with_hashed_name() {
    let t = tree("1.8.11");
    write(
        t.path(),
        "/var/lib/dpkg/status.d/5f3a9c",
        &status_stanza("1.8.11").replace("Status: install ok installed\n", ""),
    );
    write(
        t.path(),
        "/var/lib/dpkg/status.d/5f3a9c.md5sums",
        "abc  usr/sbin/x\n",
    );
    write(
        t.path(),
        "/var/lib/dpkg/status.d/libc6",
        "Package: libc6\nVersion: 2.36\n",
    );
    set_alternative(t.path(), "nft");
    let f = collect(&HostRoot::new(t.path()), &BTreeMap::new())
        .facts
        .unwrap();
    assert_eq!(f.package_version.as_deref(), Some("1.8.11-2"));
    assert!(
        f.evidence
            .iter()
            .any(|e| e.path == "/var/lib/dpkg/status.d/5f3a9c")
    );
}

#[test]
fn host_root_never_escapes() {
    // /usr/sbin/iptables -> /../../../usr/sbin/xtables-nft-multi: the absolute
    // target and the `..` stay inside the root; the host's own 1.8.9 binary
    // must never be what is read.
    let t = tree("1.8.7");
    symlink(
        "/../../../../usr/sbin/xtables-nft-multi",
        t.path().join("usr/sbin/iptables"),
    )
    .unwrap();
    let f = collect(&HostRoot::new(t.path()), &BTreeMap::new())
        .facts
        .unwrap();
    assert_eq!(f.version, Some(Version::new(1, 8, 7)));
    assert_eq!(f.backend, Some(Backend::Nft));
}

/// `iptables v1.8.7 (nf_tables)` -> (1.8.7, nft).
fn parse_version_output(out: &str) -> (Version, Backend) {
    let rest = out.trim().strip_prefix("iptables v").expect(out);
    let (v, b) = rest.split_once(' ').expect(out);
    let backend = match b {
        "(nf_tables)" => Backend::Nft,
        "(legacy)" => Backend::Legacy,
        other => panic!("unexpected backend {other}"),
    };
    (v.parse().unwrap(), backend)
}

#[test]
fn agrees_with_what_the_real_binaries_print() {
    // The oracle: each release's own `iptables --version`, run from the
    // extracted tree (fixtures' `run` script), against what was read statically.
    for (release, _, _) in RELEASES {
        for backend in ["nft", "legacy"] {
            let out = Command::new(fixtures().join(release).join("run"))
                .arg(format!("iptables-{backend}"))
                .arg("--version")
                .output()
                .unwrap();
            assert!(out.status.success(), "{release} {backend}");
            let (v, b) = parse_version_output(&String::from_utf8_lossy(&out.stdout));
            let t = installed(release, backend);
            let f = collect(&HostRoot::new(t.path()), &BTreeMap::new())
                .facts
                .unwrap();
            assert_eq!(f.version, Some(v), "{release} {backend}");
            assert_eq!(f.backend, Some(b), "{release} {backend}");
        }
    }
}

#[test]
fn this_machines_root_agrees_with_its_iptables() {
    // The node path: HostRoot over a real root. Compared with what the host's
    // own `iptables --version` prints (scripts/test.sh installs Debian's iptables).
    let out = Command::new("/usr/sbin/iptables")
        .arg("--version")
        .output()
        .expect(
            "this test needs /usr/sbin/iptables: apt-get install iptables (scripts/test.sh does)",
        );
    let (v, b) = parse_version_output(&String::from_utf8_lossy(&out.stdout));
    let c = collect(&HostRoot::new("/"), &BTreeMap::new());
    assert!(c.settled);
    let f = c.facts.unwrap();
    assert_eq!(f.version, Some(v), "{f:#?}");
    assert_eq!(f.backend, Some(b), "{f:#?}");
}
