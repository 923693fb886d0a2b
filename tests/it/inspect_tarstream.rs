//! The streaming tar reader against the `tar` crate and GNU tar on real
//! archives: same entries, same data, in every format a layer may use.

use crate::inspect_support;

use nfguard::rootfs::tarstream::{Kind, TarReader};
use std::path::Path;
use std::process::Command;

/// (path, kind, link, data) as the `tar` crate sees them.
fn with_tar_crate(bytes: &[u8]) -> Vec<(String, Kind, String, Vec<u8>)> {
    let mut a = tar::Archive::new(bytes);
    let mut out = Vec::new();
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        let t = e.header().entry_type();
        let kind = match t {
            t if t.is_dir() => Kind::Dir,
            t if t.is_symlink() => Kind::Symlink,
            t if t.is_hard_link() => Kind::HardLink,
            t if t.is_file() || t == tar::EntryType::Continuous => Kind::File,
            _ => Kind::Other,
        };
        let path = String::from_utf8_lossy(&e.path_bytes()).into_owned();
        let link = e
            .link_name_bytes()
            .map(|l| String::from_utf8_lossy(&l).into_owned())
            .unwrap_or_default();
        let mut data = Vec::new();
        if kind == Kind::File {
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
        }
        out.push((path, kind, link, data));
    }
    out
}

fn with_ours(bytes: &[u8]) -> Vec<(String, Kind, String, Vec<u8>)> {
    let mut r = TarReader::new(bytes);
    let mut out = Vec::new();
    while let Some(e) = r.next_entry().unwrap() {
        let data = if e.kind == Kind::File {
            r.read_data(e.size).unwrap()
        } else {
            Vec::new()
        };
        out.push((e.path, e.kind, e.link, data));
    }
    out
}

fn same(bytes: &[u8]) {
    let ours = with_ours(bytes);
    assert!(!ours.is_empty());
    let theirs = with_tar_crate(bytes);
    // The tar crate drops a trailing '/' from directory names; compare normalized.
    let norm = |v: Vec<(String, Kind, String, Vec<u8>)>| -> Vec<_> {
        v.into_iter()
            .map(|(p, k, l, d)| (p.trim_end_matches('/').to_string(), k, l, d))
            .collect()
    };
    assert_eq!(norm(ours), norm(theirs));
}

#[test]
fn long_names_in_gnu_pax_and_ustar_forms() {
    let long = format!("usr/{}/{}", "d".repeat(120), "f".repeat(90));
    let long_link = format!("../{}", "t".repeat(150));
    // GNU: 'L' and 'K' entries.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(3);
    h.set_mode(0o644);
    b.append_data(&mut h, &long, &b"abc"[..]).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "usr/sbin/iptables", &long_link)
        .unwrap();
    // PAX path record.
    b.append_pax_extensions([("path", long.replace("f", "p").as_bytes())])
        .unwrap();
    let mut h = tar::Header::new_ustar();
    h.set_size(1);
    h.set_mode(0o644);
    h.set_path("placeholder").unwrap();
    h.set_cksum();
    b.append(&h, &b"z"[..]).unwrap();
    // ustar prefix/name split.
    let mut h = tar::Header::new_ustar();
    h.set_size(2);
    h.set_mode(0o644);
    h.set_path(format!("{}/file", "p".repeat(120))).unwrap();
    h.set_cksum();
    b.append(&h, &b"xy"[..]).unwrap();
    let bytes = b.into_inner().unwrap();
    same(&bytes);
    let ours = with_ours(&bytes);
    assert_eq!(ours[0].0, long);
    assert_eq!(ours[1].2, long_link);
    assert_eq!(ours[2].0, long.replace("f", "p"));
}

fn gnu_tar(dir: &Path, format: &str) -> Vec<u8> {
    let out = Command::new("tar")
        .arg(format!("--format={format}"))
        .arg("-C")
        .arg(dir)
        .args(["-cf", "-", "."])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn gnu_tar_archives_of_a_real_tree() {
    // The 1.8.9 release tree plus long names, hard links and non-ASCII names,
    // written by GNU tar in its gnu, posix (PAX) and ustar formats.
    let t = tempfile::tempdir().unwrap();
    let src = inspect_support::fixtures().join("1.8.9/root");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", src.display()))
            .arg(t.path())
            .status()
            .unwrap()
            .success()
    );
    let deep = t
        .path()
        .join("opt")
        .join("x".repeat(80))
        .join("y".repeat(80));
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("z".repeat(90)), b"deep").unwrap();
    std::fs::write(t.path().join("opt/caf\u{e9}"), b"utf8").unwrap();
    std::fs::hard_link(
        t.path().join("usr/sbin/xtables-nft-multi"),
        t.path().join("opt/nft-hardlink"),
    )
    .unwrap();
    for format in ["gnu", "posix"] {
        same(&gnu_tar(t.path(), format));
    }
    // ustar cannot hold the deep name: without it.
    std::fs::remove_dir_all(t.path().join("opt").join("x".repeat(80))).unwrap();
    same(&gnu_tar(t.path(), "ustar"));
}

#[test]
fn real_deb_data_tar() {
    let debs = inspect_support::fixtures().join("1.8.11/debs");
    for deb in std::fs::read_dir(debs).unwrap() {
        let deb = deb.unwrap().path();
        let out = Command::new("dpkg-deb")
            .arg("--fsys-tarfile")
            .arg(&deb)
            .output()
            .unwrap();
        assert!(out.status.success());
        same(&out.stdout);
    }
}

#[test]
fn oversized_extensions_are_refused_before_reading_them() {
    // A GNU long-name entry claiming 1 GiB, then the stream ends: refused on
    // the header, not after buffering.
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::GNULongName);
    h.set_size(1 << 30);
    h.set_cksum();
    let mut r = TarReader::new(&h.as_bytes()[..]);
    let err = r.next_entry().unwrap_err().to_string();
    assert!(err.contains("long name"), "{err}");
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(tar::EntryType::XHeader);
    h.set_size(1 << 30);
    h.set_cksum();
    let mut r = TarReader::new(&h.as_bytes()[..]);
    let err = r.next_entry().unwrap_err().to_string();
    assert!(err.contains("PAX"), "{err}");
}
