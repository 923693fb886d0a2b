//! rpmdb.sqlite written by the real `rpm` tool (Debian package `rpm`):
//! WAL-mode database, real header blobs. Skipped with a printed line when
//! rpm/rpmbuild are missing, except in CI (env CI set), where it must run.

use nfguard::facts::{EvidenceSource, Version};
use nfguard::rootfs::{HostRoot, Layer, LayerLimits, LayeredRoot, collect};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn build_rpm(top: &Path, name: &str, version: &str, release: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(top).unwrap();
    let spec = top.join(format!("{name}.spec"));
    std::fs::write(
        &spec,
        format!(
            "Name: {name}\nVersion: {version}\nRelease: {release}\nSummary: t\nLicense: GPL\n\
             BuildArch: noarch\n%description\nt\n%files\n"
        ),
    )
    .unwrap();
    let out = Command::new("rpmbuild")
        .arg("--define")
        .arg(format!("_topdir {}", top.display()))
        .arg("-bb")
        .arg(&spec)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    top.join(format!("RPMS/noarch/{name}-{version}-{release}.noarch.rpm"))
}

fn rpm(dbpath: &Path, args: &[&str]) {
    let out = Command::new("rpm")
        .arg("--dbpath")
        .arg(dbpath)
        .args(["--define", "_db_backend sqlite"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn real_rpmdb_sqlite() {
    assert!(
        have("rpm") && have("rpmbuild"),
        "this test needs rpm and rpmbuild: apt-get install rpm (scripts/test.sh does)"
    );
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    let db = root.join("usr/lib/sysimage/rpm");
    std::fs::create_dir_all(&db).unwrap();
    std::fs::create_dir_all(root.join("var/lib")).unwrap();
    std::os::unix::fs::symlink("../../usr/lib/sysimage/rpm", root.join("var/lib/rpm")).unwrap();
    rpm(&db, &["--initdb"]);
    for (n, v, r) in [
        ("glibc", "2.34", "100.el9"),
        ("iptables-libs", "1.8.10", "11.el9"),
        ("iptables-nft", "1.8.10", "11.el9"),
        ("nftables", "1.0.9", "7.el9"),
    ] {
        let pkg = build_rpm(&work.path().join("top"), n, v, r);
        rpm(
            &db,
            &[
                "-i",
                "--justdb",
                "--nodeps",
                "--noscripts",
                pkg.to_str().unwrap(),
            ],
        );
    }
    // rpm leaves the database in WAL mode.
    let head = std::fs::read(db.join("rpmdb.sqlite")).unwrap();
    assert_eq!(&head[18..20], &[2, 2], "expected a WAL-mode database");

    let check =
        |c: nfguard::rootfs::Collected| {
            let f = c.facts.unwrap();
            assert_eq!(f.package_version.as_deref(), Some("1.8.10-11.el9"));
            assert_eq!(f.version, Some(Version::new(1, 8, 10)));
            assert!(f.evidence.iter().any(|e| e.source == EvidenceSource::Rpm
                && e.detail == "package iptables-nft 1.8.10-11.el9"));
            // The same read of the database answers nftables: RHEL 9's fixed build.
            let n = c.nftables.unwrap();
            assert_eq!(n.package_version.as_deref(), Some("1.0.9-7.el9"));
            assert_eq!(
                n.userdata_reader,
                Some(nfguard::facts::UserdataReader::Fixed)
            );
        };
    check(collect(&HostRoot::new(&root), &BTreeMap::new()));

    // The same tree as an image layer.
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    b.append_dir_all(".", &root).unwrap();
    let bytes = b.into_inner().unwrap();
    let layer = Layer::from_tar(&bytes[..], &LayerLimits::default()).unwrap();
    let image = LayeredRoot {
        layers: vec![std::sync::Arc::new(layer)],
        complete: true,
    };
    check(collect(&image, &BTreeMap::new()));
}
