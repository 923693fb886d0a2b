//! Layered roots built from tars made here: whiteout merging, the settle
//! rule, and every probe on an in-memory image.

use crate::inspect_support;

use inspect_support::*;
use nfguard::facts::{Backend, EvidenceSource, Version};
use nfguard::rootfs::{Lookup, NodeKind, RootFs, collect};
use std::collections::BTreeMap;
use std::sync::Arc;

fn no_labels() -> BTreeMap<String, String> {
    BTreeMap::new()
}

#[test]
fn debian_image_over_usrmerge_base() {
    let root = image(
        vec![
            from(&usrmerge_base()),
            from(&debian_install("1.8.9", "1.8.9-2", "nft")),
        ],
        true,
    );
    let c = collect(&root, &no_labels());
    assert!(c.settled);
    let f = c.facts.unwrap();
    assert_eq!(f.version, Some(Version::new(1, 8, 9)));
    assert_eq!(f.backend, Some(Backend::Nft));
    // The upper layer's status file replaces the base's.
    assert_eq!(f.package_version.as_deref(), Some("1.8.9-2"));
    // /sbin/iptables resolves through the base's usrmerge link.
    assert_eq!(
        root.resolve("/sbin/iptables", true)
            .unwrap()
            .found()
            .unwrap()
            .path,
        "/usr/sbin/xtables-nft-multi"
    );
}

#[test]
fn purge_in_upper_layer_removes_iptables() {
    let purge = tar(&[
        E::Dir("./usr/sbin/"),
        E::File("./usr/sbin/.wh.iptables", b""),
        E::File("./usr/sbin/.wh.iptables-nft", b""),
        E::File("./usr/sbin/.wh.iptables-legacy", b""),
        E::File("./usr/sbin/.wh.xtables-nft-multi", b""),
        E::File("./usr/sbin/.wh.xtables-legacy-multi", b""),
        E::File("./etc/alternatives/.wh.iptables", b""),
        E::File(
            "./var/lib/dpkg/status",
            b"Package: iptables\nStatus: deinstall ok config-files\nVersion: 1.8.9-2\n\n",
        ),
    ]);
    let root = image(
        vec![
            from(&usrmerge_base()),
            from(&debian_install("1.8.9", "1.8.9-2", "nft")),
            from(&purge),
        ],
        true,
    );
    assert_eq!(root.lstat("/usr/sbin/iptables").unwrap(), Lookup::Absent);
    let c = collect(&root, &no_labels());
    assert_eq!(c.facts, None);
    assert!(c.settled);
}

#[test]
fn opaque_directory_hides_lower_children_only() {
    let upper = tar(&[
        E::Dir("./usr/sbin/"),
        E::File("./usr/sbin/.wh..wh..opq", b""),
        E::Symlink("./usr/sbin/iptables", "xtables-legacy-multi"),
        E::File(
            "./usr/sbin/xtables-legacy-multi",
            &real_binary("1.8.11", "xtables-legacy-multi"),
        ),
    ]);
    let root = image(
        vec![
            from(&debian_install("1.8.7", "1.8.7-1", "nft")),
            from(&upper),
        ],
        true,
    );
    assert_eq!(
        root.lstat("/usr/sbin/xtables-nft-multi").unwrap(),
        Lookup::Absent
    );
    assert_eq!(
        root.list("/usr/sbin").unwrap(),
        Lookup::Found(vec!["iptables".into(), "xtables-legacy-multi".into()])
    );
    let f = collect(&root, &no_labels()).facts.unwrap();
    assert_eq!(f.backend, Some(Backend::Legacy));
    assert_eq!(f.version, Some(Version::new(1, 8, 11)));
    // The lower dpkg status is not under the opaque dir: it still speaks, and loses.
    assert_eq!(f.package_version.as_deref(), Some("1.8.7-1"));
    assert_eq!(f.conflicts.len(), 1, "{:?}", f.conflicts);
}

#[test]
fn whiteout_never_hides_its_own_layer() {
    let lower = tar(&[
        E::Dir("./usr/sbin/"),
        E::Symlink("./usr/sbin/iptables", "iptables-nft"),
    ]);
    // Same layer: a whiteout and a new entry for the same name, and an opaque
    // marker next to new children (in both tar orders).
    let upper = tar(&[
        E::Symlink("./usr/sbin/iptables", "xtables-legacy-multi"),
        E::File("./usr/sbin/.wh.iptables", b""),
        E::File("./etc/alternatives/iptables", b"x"),
        E::File("./etc/alternatives/.wh..wh..opq", b""),
    ]);
    let root = image(vec![from(&lower), from(&upper)], true);
    assert_eq!(
        root.lstat("/usr/sbin/iptables").unwrap(),
        Lookup::Found(NodeKind::Symlink {
            target: "xtables-legacy-multi".into()
        })
    );
    assert_eq!(
        root.lstat("/etc/alternatives/iptables").unwrap(),
        Lookup::Found(NodeKind::File { size: 1 })
    );
}

#[test]
fn whiteout_of_a_directory_and_recreation_above() {
    let base = from(&debian_install("1.8.7", "1.8.7-1", "nft"));
    let wipe = from(&tar(&[E::File("./.wh.usr", b"")]));
    let fresh = from(&tar(&[E::Dir("./usr/"), E::Dir("./usr/sbin/")]));
    let root = image(vec![base, wipe, fresh], true);
    assert_eq!(
        root.lstat("/usr/sbin").unwrap(),
        Lookup::Found(NodeKind::Dir)
    );
    assert_eq!(
        root.lstat("/usr/sbin/xtables-nft-multi").unwrap(),
        Lookup::Absent
    );
    assert_eq!(root.list("/usr/sbin").unwrap(), Lookup::Found(vec![]));
}

#[test]
fn incomplete_root_answers_unknown_until_hidden() {
    let top = from(&tar(&[
        E::Dir("./usr/"),
        E::Dir("./usr/sbin/"),
        E::File("./usr/sbin/.wh.iptables", b""),
    ]));
    let root = image(vec![top], false);
    assert_eq!(root.lstat("/usr/sbin/iptables").unwrap(), Lookup::Absent);
    assert_eq!(
        root.lstat("/usr/sbin/iptables-nft").unwrap(),
        Lookup::Unknown
    );
    assert_eq!(root.lstat("/sbin").unwrap(), Lookup::Unknown);
    assert_eq!(root.list("/usr/sbin").unwrap(), Lookup::Unknown);
    assert_eq!(root.list_seen("/usr/sbin").unwrap(), Lookup::Found(vec![]));
    let c = collect(&root, &no_labels());
    assert!(!c.settled);
}

#[test]
fn a_top_layer_with_iptables_and_nftables_settles_both() {
    let top = Arc::new(from(&debian_install_and_nft("1.8.11", "1.8.11-2", "nft")));
    let c = collect(&image(vec![top], false), &no_labels());
    assert!(c.settled, "{c:#?}");
    assert_eq!(
        c.facts.unwrap().version.map(|v| v.to_string()).as_deref(),
        Some("1.8.11")
    );
    let n = c.nftables.unwrap();
    assert_eq!(n.package_version.as_deref(), Some("1.1.3-1"));
    assert_eq!(n.writes_type_userdata, Some(true));
}

#[test]
fn settles_when_top_layer_holds_command_and_binary() {
    // Its whole dpkg `status` lists no nftables: that answer settles too.
    let top = Arc::new(from(&debian_install("1.8.11", "1.8.11-2", "legacy")));
    let root = image(vec![top.clone()], false);
    let c = collect(&root, &no_labels());
    assert!(c.settled, "{c:#?}");
    let f = c.facts.unwrap();
    assert_eq!(f.version, Some(Version::new(1, 8, 11)));
    assert_eq!(f.backend, Some(Backend::Legacy));
    // The same layer read as the whole image gives the same answer.
    assert_eq!(
        collect(&image(vec![top], true), &no_labels()).facts,
        Some(f)
    );
}

#[test]
fn does_not_settle_on_package_data_or_a_link_into_unread_layers() {
    // Only a dpkg status: the binaries may be below.
    let status_only = from(&tar(&[E::File(
        "./var/lib/dpkg/status",
        b"Package: iptables\nStatus: install ok installed\nVersion: 1.8.9-2\n\n",
    )]));
    let c = collect(&image(vec![status_only], false), &no_labels());
    assert!(!c.settled);
    assert_eq!(c.facts.unwrap().package_version.as_deref(), Some("1.8.9-2"));

    // The command link is here, its target in a lower layer.
    let link_only = Arc::new(from(&tar(&[
        E::Dir("./usr/"),
        E::Dir("./usr/sbin/"),
        E::Symlink("./usr/sbin/iptables", "xtables-nft-multi"),
    ])));
    let root = image(vec![link_only.clone()], false);
    let c = collect(&root, &no_labels());
    assert!(!c.settled);
    // Once the lower layer is read, it settles (the lower layer also
    // installs nftables, so that answer settles there too).
    let nft = NftInstall::trixie();
    let xtables = real_binary("1.8.7", "xtables-nft-multi");
    let mut entries = vec![
        E::Dir("./usr/"),
        E::Dir("./usr/sbin/"),
        E::File("./usr/sbin/xtables-nft-multi", &xtables),
    ];
    entries.extend(nft.entries());
    let bin = Arc::new(from(&tar(&entries)));
    let root = image(vec![bin, link_only], false);
    let c = collect(&root, &no_labels());
    assert!(c.settled);
    assert_eq!(c.facts.unwrap().version, Some(Version::new(1, 8, 7)));
}

#[test]
fn hard_links_within_a_layer_share_content() {
    let bin = real_binary("1.8.9", "xtables-legacy-multi");
    let root = image(
        vec![from(&tar(&[
            E::File("usr/sbin/xtables-legacy-multi", &bin),
            E::Hard("usr/sbin/iptables-legacy", "usr/sbin/xtables-legacy-multi"),
            E::Symlink("usr/sbin/iptables", "iptables-legacy"),
        ]))],
        true,
    );
    assert_eq!(
        root.read("/usr/sbin/iptables", u64::MAX).unwrap(),
        Lookup::Found(bin.into())
    );
    let f = collect(&root, &no_labels()).facts.unwrap();
    assert_eq!(f.backend, Some(Backend::Legacy));
    assert_eq!(f.version, Some(Version::new(1, 8, 9)));
}

#[test]
fn names_are_normalized_and_clamped() {
    let root = image(
        vec![from(&tar(&[
            E::File(
                "../../var/lib/dpkg/status",
                b"Package: iptables\nStatus: install ok installed\nVersion: 1.8.4-3\n",
            ),
            E::Symlink(
                "/usr/sbin/iptables",
                "../../../../../usr/sbin/xtables-legacy-multi",
            ),
            E::File(
                "usr//sbin/./xtables-legacy-multi",
                &real_binary("1.8.7", "xtables-legacy-multi"),
            ),
        ]))],
        true,
    );
    let f = collect(&root, &no_labels()).facts.unwrap();
    assert_eq!(f.version, Some(Version::new(1, 8, 7)));
    assert_eq!(f.backend, Some(Backend::Legacy));
    assert_eq!(f.package_version.as_deref(), Some("1.8.4-3"));
}

#[test]
fn dpkg_probe_reads_only_installed_iptables() {
    let status = b"Package: iptables\nStatus: deinstall ok config-files\nVersion: 1.8.4-1\n\n\
Package: iptables-dev\nStatus: install ok installed\nVersion: 9.9.9\n\n\
Package: iptables\nStatus: install ok installed\nVersion: 1.8.9-2\nDescription: x\n continued\n";
    let root = image(
        vec![from(&tar(&[E::File("var/lib/dpkg/status", status)]))],
        true,
    );
    let f = collect(&root, &no_labels()).facts.unwrap();
    assert_eq!(f.package_version.as_deref(), Some("1.8.9-2"));
    assert_eq!(f.version, Some(Version::new(1, 8, 9)));
    assert_eq!(f.backend, None);
}

#[test]
fn apk_probe_reads_both_locations() {
    let db = b"C:Q1abc=\nP:musl\nV:1.2.4-r2\n\nC:Q1def=\nP:iptables\nV:1.8.10-r3\np:cmd:iptables=1.8.10-r3\n\n";
    for path in ["lib/apk/db/installed", "usr/lib/apk/db/installed"] {
        let root = image(
            vec![from(&tar(&[
                E::File(path, db),
                E::Symlink("sbin/iptables", "xtables-nft-multi"),
            ]))],
            true,
        );
        let f = collect(&root, &no_labels()).facts.unwrap();
        assert_eq!(f.package_version.as_deref(), Some("1.8.10-r3"), "{path}");
        assert_eq!(f.version, Some(Version::new(1, 8, 10)));
        // The link dangles (no binary in this layer): no working command.
        assert_eq!(f.backend, None);
        assert!(f.evidence.iter().any(|e| e.source == EvidenceSource::Apk));
    }
}

#[test]
fn rpm_probe_reads_sqlite_headers_from_memory() {
    let db = rpmdb(&[
        ("glibc", "2.34", "100.el9"),
        ("iptables-libs", "1.8.10", "11.el9"),
        ("iptables-nft", "1.8.10", "11.el9"),
    ]);
    let root = image(
        vec![from(&tar(&[
            E::File("usr/lib/sysimage/rpm/rpmdb.sqlite", &db),
            E::Symlink("var/lib/rpm", "../../usr/lib/sysimage/rpm"),
        ]))],
        true,
    );
    let f = collect(&root, &no_labels()).facts.unwrap();
    assert_eq!(f.package_version.as_deref(), Some("1.8.10-11.el9"));
    assert_eq!(f.version, Some(Version::new(1, 8, 10)));
    assert!(f.evidence.iter().any(
        |e| e.source == EvidenceSource::Rpm && e.detail == "package iptables-nft 1.8.10-11.el9"
    ));
}

#[test]
fn corrupt_rpmdb_is_evidence_not_a_failure() {
    let root = image(
        vec![from(&tar(&[E::File(
            "var/lib/rpm/rpmdb.sqlite",
            b"SQLite format 3\0garbage",
        )]))],
        true,
    );
    let c = collect(&root, &no_labels());
    assert_eq!(c.facts, None);
}

#[test]
fn labels_only_when_the_filesystem_is_silent() {
    let labels: BTreeMap<String, String> = [
        (
            "io.nfguard.iptables.version".to_string(),
            "1.8.9".to_string(),
        ),
        (
            "io.nfguard.iptables.backend".to_string(),
            "legacy".to_string(),
        ),
    ]
    .into();
    let empty = image(vec![from(&usrmerge_base())], true);
    let f = collect(&empty, &labels).facts.unwrap();
    assert_eq!(f.version, Some(Version::new(1, 8, 9)));
    assert_eq!(f.backend, Some(Backend::Legacy));
    assert!(f.evidence.iter().all(|e| e.source == EvidenceSource::Label));

    let real = image(
        vec![from(&debian_install("1.8.11", "1.8.11-2", "nft"))],
        true,
    );
    let f = collect(&real, &labels).facts.unwrap();
    assert_eq!(f.version, Some(Version::new(1, 8, 11)));
    assert_eq!(f.backend, Some(Backend::Nft));
    assert_eq!(f.conflicts.len(), 2, "{:?}", f.conflicts);
}

#[test]
fn no_iptables_at_all() {
    let root = image(vec![from(&usrmerge_base())], true);
    let c = collect(&root, &no_labels());
    assert_eq!(c.facts, None);
    assert!(c.settled);
}

#[test]
fn opaque_root_and_whiteout_at_the_root() {
    let base = || from(&debian_install("1.8.7", "1.8.7-1", "nft"));
    let opaque_root = from(&tar(&[
        E::File("./.wh..wh..opq", b""),
        E::File("./etc/hostname", b"x"),
    ]));
    let root = image(vec![base(), opaque_root], true);
    assert_eq!(collect(&root, &no_labels()).facts, None);
    let no_var = from(&tar(&[E::File(".wh.var", b"")]));
    let root = image(vec![base(), no_var], true);
    let f = collect(&root, &no_labels()).facts.unwrap();
    assert_eq!(f.package_version, None);
    assert_eq!(f.version, Some(Version::new(1, 8, 7)));
}

#[test]
fn alpine_layout_sbin_without_usrmerge() {
    let db = b"P:iptables\nV:1.8.11-r1\n\n";
    let layer = Arc::new(from(&tar(&[
        E::Dir("sbin/"),
        E::Dir("usr/"),
        E::Dir("usr/sbin/"),
        E::Dir("usr/bin/"),
        E::Dir("bin/"),
        E::Symlink("sbin/iptables", "xtables-nft-multi"),
        E::File(
            "sbin/xtables-nft-multi",
            &real_binary("1.8.11", "xtables-nft-multi"),
        ),
        E::File("lib/apk/db/installed", db),
    ])));
    // Read as the top layer of an unfinished image: /usr/sbin/iptables comes
    // first in the search and is not in this layer, so a lower layer could
    // still supply it; only the complete image settles.
    let c = collect(&image(vec![layer.clone()], false), &no_labels());
    assert!(
        !c.settled,
        "a lower layer could still add /usr/sbin/iptables"
    );
    let c = collect(&image(vec![layer], true), &no_labels());
    assert!(c.settled);
    let f = c.facts.unwrap();
    assert_eq!(f.backend, Some(Backend::Nft));
    assert_eq!(f.version, Some(Version::new(1, 8, 11)));
    assert_eq!(f.package_version.as_deref(), Some("1.8.11-r1"));
    assert!(f.conflicts.is_empty(), "{:?}", f.conflicts);
}

#[test]
fn wrapper_in_the_top_layer_settles() {
    let nft = NftInstall::trixie();
    let xtables = real_binary("1.8.9", "xtables-nft-multi");
    let mut entries = vec![
        E::Dir("usr/"),
        E::Dir("usr/sbin/"),
        E::File(
            "usr/sbin/iptables-wrapper",
            b"#!/bin/sh\nexec xtables-nft-multi\n",
        ),
        E::Symlink("usr/sbin/iptables", "iptables-wrapper"),
        E::File("usr/sbin/xtables-nft-multi", &xtables),
    ];
    // nftables installed in the same layer: `settled` covers both answers.
    entries.extend(nft.entries());
    let top = from(&tar(&entries));
    let c = collect(&image(vec![top], false), &no_labels());
    assert!(c.settled, "{c:#?}");
    let f = c.facts.unwrap();
    assert_eq!(f.backend, Some(Backend::Wrapper));
    assert_eq!(f.version, Some(Version::new(1, 8, 9)));
}
