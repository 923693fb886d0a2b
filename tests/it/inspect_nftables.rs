//! `collect`'s nftables answer over the REAL Debian nftables releases
//! (bullseye 0.9.8, bookworm 1.0.6, trixie 1.1.3) extracted by
//! scripts/fetch-nftables.sh: read through `HostRoot` as dpkg would leave
//! them, and as layered images built here (the settle rule).

use crate::inspect_support::{E, from, image, tar};
use crate::support::images::{fixtures_dir, nftables_package_version, nftables_stanzas};
use nfguard::facts::{EvidenceSource, NftVersion, NftablesFacts, UserdataReader, Version};
use nfguard::rootfs::{HostRoot, collect};
use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// Release, its soname target, whether it writes the new set userdata, how
/// it reads it (shared doc §8).
const RELEASES: [(&str, &str, bool, UserdataReader); 3] = [
    (
        "0.9.8",
        "libnftables.so.1.0.0",
        false,
        UserdataReader::Crashes,
    ),
    (
        "1.0.6",
        "libnftables.so.1.1.0",
        false,
        UserdataReader::Crashes,
    ),
    (
        "1.1.3",
        "libnftables.so.1.1.0",
        true,
        UserdataReader::Current,
    ),
];
const LIB_DIR: &str = "/usr/lib/x86_64-linux-gnu";

fn release_dir(release: &str) -> PathBuf {
    let d = fixtures_dir().join("nftables").join(release);
    assert!(
        d.join("root/usr/sbin/nft").is_file(),
        "nftables fixtures missing under {}: run scripts/fetch-nftables.sh",
        d.display()
    );
    d
}

fn v(s: &str) -> NftVersion {
    s.parse().unwrap()
}

fn no_labels() -> BTreeMap<String, String> {
    BTreeMap::new()
}

/// A copy of one release's extracted tree (tests may change it).
fn tree(release: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", release_dir(release).join("root").display()))
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(st.success());
    tmp
}

fn write(root: &Path, path: &str, content: &[u8]) {
    let p = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// The release's packages as dpkg's status file lists them once installed.
fn dpkg_status(release: &str) -> String {
    let mut s =
        String::from("Package: base-files\nStatus: install ok installed\nVersion: 12.4\n\n");
    for (_, stanza) in nftables_stanzas(release) {
        s.push_str(&stanza);
        s.push('\n');
    }
    s
}

fn nft_of(root: &dyn nfguard::rootfs::RootFs) -> NftablesFacts {
    collect(root, &no_labels())
        .nftables
        .expect("nftables found")
}

fn details(f: &NftablesFacts, source: EvidenceSource) -> Vec<String> {
    f.evidence
        .iter()
        .filter(|e| e.source == source)
        .map(|e| format!("{} {}", e.path, e.detail))
        .collect()
}

fn real(release: &str, path: &str) -> Vec<u8> {
    std::fs::read(
        release_dir(release)
            .join("root")
            .join(path.trim_start_matches('/')),
    )
    .unwrap()
}

#[test]
fn each_release_installed_with_dpkg() {
    for (release, soname_target, writes, reader) in RELEASES {
        let t = tree(release);
        write(
            t.path(),
            "/var/lib/dpkg/status",
            dpkg_status(release).as_bytes(),
        );
        let c = collect(&HostRoot::new(t.path()), &no_labels());
        assert!(c.settled);
        let f = c.nftables.expect("nftables found");
        let pkg = nftables_package_version(release);
        assert_eq!(f.version, Some(v(release)), "{release}: {f:#?}");
        assert_eq!(f.package_version.as_deref(), Some(pkg.as_str()));
        assert_eq!(f.writes_type_userdata, Some(writes), "{release}");
        assert_eq!(f.userdata_reader, Some(reader), "{release}");
        assert!(f.program);
        assert!(f.conflicts.is_empty(), "{release}: {:?}", f.conflicts);
        assert_eq!(
            details(&f, EvidenceSource::Dpkg),
            [
                format!("/var/lib/dpkg/status package libnftables1 {pkg}"),
                format!("/var/lib/dpkg/status package nftables {pkg}"),
            ]
        );
        let bin = details(&f, EvidenceSource::Binary);
        assert_eq!(
            bin[0],
            format!("{LIB_DIR}/{soname_target} libnftables version literal \"{release}\"")
        );
        assert!(
            bin[1].starts_with(&format!(
                "/usr/sbin/nft nft program version literal \"{release}\" ("
            )),
            "{bin:?}"
        );
        // The host has no nftables packages of its own in this root.
        assert_eq!(c.facts, None);
    }
}

#[test]
fn library_literal_alone_without_a_package_database() {
    for (release, _, writes, reader) in RELEASES {
        let t = tree(release);
        let f = nft_of(&HostRoot::new(t.path()));
        assert_eq!(f.version, Some(v(release)), "{release}");
        assert_eq!(f.package_version, None);
        assert_eq!(
            (f.writes_type_userdata, f.userdata_reader),
            (Some(writes), Some(reader)),
            "{release}"
        );
        assert!(f.program && f.conflicts.is_empty(), "{f:#?}");
    }
}

#[test]
fn distroless_status_d_only() {
    let t = tree("1.1.3");
    for (name, stanza) in nftables_stanzas("1.1.3") {
        let stanza = stanza.replace("Status: install ok installed\n", "");
        write(
            t.path(),
            &format!("/var/lib/dpkg/status.d/{name}"),
            stanza.as_bytes(),
        );
        write(
            t.path(),
            &format!("/var/lib/dpkg/status.d/{name}.md5sums"),
            b"0123  usr/sbin/nft\n",
        );
    }
    let f = nft_of(&HostRoot::new(t.path()));
    assert_eq!(f.package_version.as_deref(), Some("1.1.3-1"));
    assert_eq!(f.userdata_reader, Some(UserdataReader::Current));
    assert_eq!(
        details(&f, EvidenceSource::Dpkg),
        [
            "/var/lib/dpkg/status.d/libnftables1 package libnftables1 1.1.3-1",
            "/var/lib/dpkg/status.d/nftables package nftables 1.1.3-1",
        ]
    );
}

/// `nftables v1.1.3 (Commodore Bullmoose #4)` -> ("1.1.3", "Commodore Bullmoose #4").
fn parse_version_output(out: &str) -> (String, String) {
    let rest = out.trim().strip_prefix("nftables v").expect(out);
    let (v, name) = rest.split_once(" (").expect(out);
    (v.to_string(), name.trim_end_matches(')').to_string())
}

#[test]
fn agrees_with_what_the_real_nft_prints() {
    // The oracle: each release's own `nft --version`, run from the extracted
    // tree (the fixture's `run`), against what was read without running it.
    for (release, ..) in RELEASES {
        let out = Command::new(release_dir(release).join("run"))
            .arg("--version")
            .output()
            .unwrap();
        assert!(out.status.success(), "{release}");
        let (said, name) = parse_version_output(&String::from_utf8_lossy(&out.stdout));
        let t = tree(release);
        let f = nft_of(&HostRoot::new(t.path()));
        assert_eq!(f.version, Some(v(&said)), "{release}");
        let prog = details(&f, EvidenceSource::Binary).remove(1);
        assert_eq!(
            prog,
            format!("/usr/sbin/nft nft program version literal \"{said}\" (\"{name}\")")
        );
    }
}

#[test]
fn only_the_library_decides() {
    // §8: bookworm's nft program with trixie's libnftables writes the new
    // userdata, and `nft --version` still says 1.0.6.
    let t = tree("1.0.6");
    write(
        t.path(),
        &format!("{LIB_DIR}/libnftables.so.1.1.0"),
        &real("1.1.3", &format!("{LIB_DIR}/libnftables.so.1.1.0")),
    );
    let f = nft_of(&HostRoot::new(t.path()));
    assert_eq!(f.version, Some(v("1.1.3")));
    assert_eq!(f.writes_type_userdata, Some(true));
    assert_eq!(f.conflicts.len(), 1, "{:?}", f.conflicts);
    assert!(
        f.conflicts[0].starts_with("the nft program /usr/sbin/nft says 1.0.6, libnftables")
            && f.conflicts[0].contains("only libnftables decides"),
        "{:?}",
        f.conflicts
    );
}

#[test]
fn package_versions_win_over_the_literal() {
    // Kubernetes' patched distroless build prints "1.0.6": no conflict, and
    // the package version says it is fixed.
    let t = tree("1.0.6");
    write(
        t.path(),
        "/var/lib/dpkg/status.d/libnftables1",
        b"Package: libnftables1\nSource: nftables\nVersion: 1.0.6-2.1+k8s1\n",
    );
    let f = nft_of(&HostRoot::new(t.path()));
    assert_eq!(f.version, Some(v("1.0.6")));
    assert_eq!(f.package_version.as_deref(), Some("1.0.6-2.1+k8s1"));
    assert_eq!(f.userdata_reader, Some(UserdataReader::Fixed));
    assert!(f.conflicts.is_empty(), "{:?}", f.conflicts);

    // A stanza that says 1.1.3 over a 1.0.6 library: the package wins, and
    // the disagreement is reported, not hidden.
    let t = tree("1.0.6");
    write(
        t.path(),
        "/var/lib/dpkg/status",
        dpkg_status("1.1.3").as_bytes(),
    );
    let f = nft_of(&HostRoot::new(t.path()));
    assert_eq!(f.version, Some(v("1.1.3")));
    assert_eq!(
        f.conflicts,
        [
            format!(
                "libnftables {LIB_DIR}/libnftables.so.1.1.0 says 1.0.6, dpkg package libnftables1 \
                 1.1.3-1 (/var/lib/dpkg/status) says 1.1.3: the package wins (it carries \
                 distribution patches)"
            ),
            "the nft program /usr/sbin/nft says 1.0.6, dpkg package libnftables1 1.1.3-1 \
             (/var/lib/dpkg/status) says 1.1.3: only libnftables decides (an nft program runs \
             whichever library it loads)"
                .to_string(),
        ]
    );

    // nftables' stanza alone (the library's package missing) still speaks.
    let t = tree("0.9.8");
    write(
        t.path(),
        "/var/lib/dpkg/status",
        b"Package: nftables\nStatus: install ok installed\nVersion: 0.9.8-3.1+deb11u2\n",
    );
    let f = nft_of(&HostRoot::new(t.path()));
    assert_eq!(f.package_version.as_deref(), Some("0.9.8-3.1+deb11u2"));
    assert_eq!(f.userdata_reader, Some(UserdataReader::Crashes));
}

#[test]
fn program_alone_speaks_for_a_missing_library() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "/usr/sbin/nft", &real("1.1.3", "/usr/sbin/nft"));
    let f = nft_of(&HostRoot::new(t.path()));
    assert_eq!(f.version, Some(v("1.1.3")));
    assert!(f.program);
    // Debian's nft is dynamic: the evidence says the library it needs is missing.
    assert!(
        f.evidence.iter().any(|e| e
            .detail
            .starts_with("no libnftables.so.1 in the library directories")),
        "{:#?}",
        f.evidence
    );
}

#[test]
fn labels_only_where_the_filesystem_is_silent() {
    let labels: BTreeMap<String, String> = [
        ("io.nfguard.nftables.version", "1.0.6"),
        ("io.nfguard.nftables.fixed", "true"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    // Nothing on disk: the label's version, and the author's word that the
    // build is fixed.
    let empty = tempfile::tempdir().unwrap();
    let f = collect(&HostRoot::new(empty.path()), &labels)
        .nftables
        .unwrap();
    assert_eq!(f.version, Some(v("1.0.6")));
    assert!(!f.program);
    assert_eq!(f.userdata_reader, Some(UserdataReader::Fixed));
    assert!(f.evidence.iter().all(|e| e.source == EvidenceSource::Label));

    // A real 1.1.3: the filesystem wins the version; the fix label still counts.
    let t = tree("1.1.3");
    let f = collect(&HostRoot::new(t.path()), &labels).nftables.unwrap();
    assert_eq!(f.version, Some(v("1.1.3")));
    assert_eq!(f.userdata_reader, Some(UserdataReader::Fixed));
    assert_eq!(f.conflicts.len(), 1, "{:?}", f.conflicts);
    assert!(f.conflicts[0].contains("the filesystem wins"));

    let bad: BTreeMap<String, String> = [("io.nfguard.nftables.fixed", "maybe")]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
    let f = collect(&HostRoot::new(t.path()), &bad).nftables.unwrap();
    assert_eq!(f.userdata_reader, Some(UserdataReader::Current));
    assert!(f.conflicts[0].contains("is not true or false"));
}

/// Hostile libraries where trixie's was: each is found, read as unknown
/// with a note, and the program's own literal does not stand in for it.
#[test]
fn hostile_library_is_bounded_and_unknown() {
    let lib = format!("{LIB_DIR}/libnftables.so.1.1.0");
    let mut flood = Vec::new();
    for i in 0..200_000u32 {
        flood.extend_from_slice(format!("\0nft\x001.{}.{}\0{i}.1.3\0", i % 9, i % 31).as_bytes());
    }
    let no_version = {
        let mut b = real("1.1.3", &lib);
        let at = b
            .windows(11)
            .position(|w| w == b"\0nft\x001.1.3\0")
            .expect("trixie's literal");
        b[at + 5..at + 10].copy_from_slice(b"x.y.z");
        b
    };
    let cases: [(&str, Option<Vec<u8>>, &str); 3] = [
        ("huge", None, "larger than the 16777216 byte read limit"),
        (
            "no version",
            Some(no_version),
            "no nftables version literal",
        ),
        (
            "many version literals",
            Some(flood),
            "200000 nftables version literals where a real build holds exactly one",
        ),
    ];
    for (what, content, says) in cases {
        let t = tree("1.1.3");
        let path = t.path().join(lib.trim_start_matches('/'));
        match content {
            Some(bytes) => std::fs::write(&path, bytes).unwrap(),
            // Sparse: 64 MiB on paper, nothing on disk; never read past the cap.
            None => std::fs::File::create(&path)
                .unwrap()
                .set_len(64 << 20)
                .unwrap(),
        }
        let started = std::time::Instant::now();
        let f = nft_of(&HostRoot::new(t.path()));
        assert!(started.elapsed().as_secs() < 10, "{what}");
        assert_eq!(f.version, None, "{what}: {f:#?}");
        assert_eq!(
            (f.writes_type_userdata, f.userdata_reader),
            (None, None),
            "{what}"
        );
        let note = details(&f, EvidenceSource::Binary).remove(0);
        assert!(
            note.contains(says) && note.ends_with("version unknown"),
            "{what}: {note}"
        );
        assert!(f.program, "{what}");

        // With a package database the package still decides.
        write(
            t.path(),
            "/var/lib/dpkg/status",
            dpkg_status("1.1.3").as_bytes(),
        );
        let f = nft_of(&HostRoot::new(t.path()));
        assert_eq!(f.version, Some(v("1.1.3")), "{what}");
    }
}

#[test]
fn iptables_and_nftables_in_one_root() {
    let t = tree("1.1.3");
    let ipt = fixtures_dir().join("iptables/1.8.11/root");
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", ipt.display()))
        .arg(t.path())
        .status()
        .unwrap();
    assert!(st.success());
    let status = format!(
        "{}Package: iptables\nStatus: install ok installed\nVersion: 1.8.11-2\n\n",
        dpkg_status("1.1.3")
    );
    write(t.path(), "/var/lib/dpkg/status", status.as_bytes());
    std::fs::create_dir_all(t.path().join("etc/alternatives")).unwrap();
    let _ = std::fs::remove_file(t.path().join("usr/sbin/iptables"));
    symlink(
        "/usr/sbin/iptables-nft",
        t.path().join("etc/alternatives/iptables"),
    )
    .unwrap();
    symlink(
        "/etc/alternatives/iptables",
        t.path().join("usr/sbin/iptables"),
    )
    .unwrap();
    let c = collect(&HostRoot::new(t.path()), &no_labels());
    assert!(c.settled);
    let ipt = c.facts.unwrap();
    assert_eq!(ipt.version, Some(Version::new(1, 8, 11)));
    assert_eq!(ipt.package_version.as_deref(), Some("1.8.11-2"));
    // Each answer holds its own tool's packages only.
    assert!(ipt.evidence.iter().all(|e| !e.detail.contains("nftables")));
    let nft = c.nftables.unwrap();
    assert_eq!(nft.version, Some(v("1.1.3")));
    assert_eq!(nft.writes_type_userdata, Some(true));
    assert!(nft.evidence.iter().all(|e| !e.detail.contains("iptables")));
}

// ---- Layered images: the settle rule ----

/// One image layer holding the release's library (and its soname link) and
/// `nft`, iptables 1.8.11's command and binary (so that the iptables answer
/// settles in this layer), `status` as the dpkg status, and `extra`.
fn layer_of(release: &str, status: Option<&str>, extra: Vec<E>) -> Vec<u8> {
    let so = format!("{LIB_DIR}/libnftables.so.1");
    let target = if release == "0.9.8" {
        "libnftables.so.1.0.0"
    } else {
        "libnftables.so.1.1.0"
    };
    let lib_path = format!("{LIB_DIR}/{target}");
    let lib = real(release, &lib_path);
    let nft = real(release, "/usr/sbin/nft");
    let xtables = crate::inspect_support::real_binary("1.8.11", "xtables-nft-multi");
    let mut entries = vec![
        E::Dir("usr/"),
        E::Dir("usr/sbin/"),
        E::Dir("usr/lib/"),
        E::Dir("usr/lib/x86_64-linux-gnu/"),
        E::File(&lib_path[1..], &lib),
        E::Symlink(&so[1..], target),
        E::File("usr/sbin/nft", &nft),
        E::File("usr/sbin/xtables-nft-multi", &xtables),
        E::Symlink("usr/sbin/iptables", "xtables-nft-multi"),
    ];
    if let Some(s) = status {
        entries.push(E::File("var/lib/dpkg/status", s.as_bytes()));
    }
    entries.extend(extra);
    tar(&entries)
}

/// The release's dpkg status with iptables 1.8.11 in it too.
fn status_with_iptables(release: &str) -> String {
    format!(
        "{}Package: iptables\nStatus: install ok installed\nVersion: 1.8.11-2\n\n",
        dpkg_status(release)
    )
}

#[test]
fn dpkg_install_layer_settles_nftables_on_its_own() {
    let status = status_with_iptables("1.1.3");
    let layer = Arc::new(from(&layer_of("1.1.3", Some(&status), vec![])));
    let c = collect(&image(vec![layer.clone()], false), &no_labels());
    assert!(c.settled, "{c:#?}");
    let f = c.nftables.clone().unwrap();
    assert_eq!(f.package_version.as_deref(), Some("1.1.3-1"));
    assert!(f.program);
    // The same layer read as the whole image gives the same answer.
    let whole = collect(&image(vec![layer], true), &no_labels());
    assert_eq!(whole.nftables, c.nftables);
    assert_eq!(whole.facts, c.facts);
}

#[test]
fn iptables_alone_in_the_top_layer_settles_by_its_whole_dpkg_status() {
    // dpkg's `status` is rewritten whole by every layer that installs: one
    // that lists no nftables settles "no nftables" (a package manager's nft
    // below would be in it).
    let top = Arc::new(from(&crate::inspect_support::debian_install(
        "1.8.11", "1.8.11-2", "nft",
    )));
    let c = collect(&image(vec![top.clone()], false), &no_labels());
    assert!(c.settled, "{c:#?}");
    assert!(c.facts.is_some() && c.nftables.is_none());
    let c = collect(&image(vec![top], true), &no_labels());
    assert!(c.settled);
    assert_eq!(c.nftables, None);
    // Without a database a lower layer could still hold an nft:
    // image_inspect_nft::top_layer_settles_both_answers_or_reads_on.
}

#[test]
fn library_literal_layer_waits_for_the_lower_layers() {
    // No package database here: a lower layer could hold one (or another
    // multiarch directory); the literal is reported but not final.
    let top = Arc::new(from(&layer_of("1.0.6", None, vec![])));
    let c = collect(&image(vec![top.clone()], false), &no_labels());
    assert!(!c.settled);
    assert_eq!(c.nftables.as_ref().unwrap().version, Some(v("1.0.6")));
    // The lower layer is a base with a dpkg status that knows no nftables.
    let base = Arc::new(from(&crate::inspect_support::usrmerge_base()));
    let c = collect(&image(vec![base, top], true), &no_labels());
    assert!(c.settled);
    let f = c.nftables.unwrap();
    assert_eq!(f.version, Some(v("1.0.6")));
    assert_eq!(f.userdata_reader, Some(UserdataReader::Crashes));
}

#[test]
fn status_d_hit_is_not_final_while_its_listing_is_open() {
    // A whole dpkg status without nftables, and a status.d stanza: a lower
    // layer could add `status.d/aaa` naming another libnftables1 ahead of it.
    let status = "Package: iptables\nStatus: install ok installed\nVersion: 1.8.11-2\n";
    let stanza = "Package: libnftables1\nVersion: 1.1.3-1\n";
    let top = layer_of(
        "1.1.3",
        Some(status),
        vec![E::File(
            "var/lib/dpkg/status.d/libnftables1",
            stanza.as_bytes(),
        )],
    );
    let c = collect(&image(vec![from(&top)], false), &no_labels());
    assert!(!c.settled);
    assert_eq!(
        c.nftables.unwrap().package_version.as_deref(),
        Some("1.1.3-1")
    );
    // An opaque status.d closes the listing: nothing below can add a stanza.
    let closed = layer_of(
        "1.1.3",
        Some(status),
        vec![
            E::File("var/lib/dpkg/status.d/.wh..wh..opq", b""),
            E::File("var/lib/dpkg/status.d/libnftables1", stanza.as_bytes()),
        ],
    );
    let c = collect(&image(vec![from(&closed)], false), &no_labels());
    assert!(c.settled, "{c:#?}");
    assert!(collect(&image(vec![from(&top)], true), &no_labels()).settled);
}

#[test]
fn whiteouts_remove_a_lower_nftables() {
    let lower = from(&layer_of("1.1.3", Some(&dpkg_status("1.1.3")), vec![]));
    let purge = from(&tar(&[
        E::File("usr/sbin/.wh.nft", b""),
        E::File("usr/sbin/.wh.iptables", b""),
        E::File("usr/lib/x86_64-linux-gnu/.wh.libnftables.so.1", b""),
        E::File("usr/lib/x86_64-linux-gnu/.wh.libnftables.so.1.1.0", b""),
        E::File(
            "var/lib/dpkg/status",
            b"Package: libnftables1\nStatus: purge ok not-installed\nVersion: 1.1.3-1\n",
        ),
    ]));
    let c = collect(&image(vec![lower, purge], true), &no_labels());
    assert!(c.settled);
    assert_eq!(c.nftables, None);
}

#[test]
fn one_layer_read_answers_both_tools_from_one_database() {
    // An rpm image (rpmdb as rpm writes it: Packages(hnum, blob)) holding
    // iptables-nft and RHEL 9's fixed nftables build.
    let db = crate::inspect_support::rpmdb(&[
        ("iptables-nft", "1.8.10", "11.el9"),
        ("nftables", "1.0.9", "7.el9"),
    ]);
    let root = image(
        vec![from(&tar(&[
            E::File("usr/lib/sysimage/rpm/rpmdb.sqlite", &db),
            E::Symlink("var/lib/rpm", "../../usr/lib/sysimage/rpm"),
        ]))],
        true,
    );
    let c = collect(&root, &no_labels());
    assert_eq!(
        c.facts.unwrap().package_version.as_deref(),
        Some("1.8.10-11.el9")
    );
    let f = c.nftables.unwrap();
    assert_eq!(f.package_version.as_deref(), Some("1.0.9-7.el9"));
    assert_eq!(f.version, Some(v("1.0.9")));
    assert_eq!(f.userdata_reader, Some(UserdataReader::Fixed));
    assert!(!f.program);
    assert_eq!(
        details(&f, EvidenceSource::Rpm),
        ["/var/lib/rpm/rpmdb.sqlite package nftables 1.0.9-7.el9"]
    );

    // apk: Alpine's nftables (with a split-out libnftables, which decides).
    let apk = b"P:nftables\nV:1.1.1-r0\n\nP:libnftables\nV:1.1.1-r1\n\n";
    let root = image(
        vec![from(&tar(&[E::File("lib/apk/db/installed", apk)]))],
        true,
    );
    let f = collect(&root, &no_labels()).nftables.unwrap();
    assert_eq!(f.package_version.as_deref(), Some("1.1.1-r1"));
    assert_eq!(f.userdata_reader, Some(UserdataReader::Crashes));
}

#[test]
fn this_machines_root_agrees_with_its_nft() {
    // The node path: HostRoot over a real root, against the host's own
    // `nft --version` and dpkg (scripts/test.sh installs Debian's nftables).
    let out = Command::new("/usr/sbin/nft")
        .arg("--version")
        .output()
        .expect("this test needs /usr/sbin/nft: apt-get install nftables (scripts/test.sh does)");
    let (said, _) = parse_version_output(&String::from_utf8_lossy(&out.stdout));
    let pkg = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "libnftables1"])
        .output()
        .unwrap();
    let pkg = String::from_utf8_lossy(&pkg.stdout).to_string();
    let c = collect(&HostRoot::new("/"), &no_labels());
    assert!(c.settled);
    let f = c.nftables.unwrap();
    assert_eq!(f.version, Some(v(&said)), "{f:#?}");
    assert_eq!(f.package_version.as_deref(), Some(pkg.as_str()), "{f:#?}");
    assert!(f.program);
    assert!(f.conflicts.is_empty(), "{:?}", f.conflicts);
}
