//! `nfguard inspect image` of images bundling the REAL Debian nftables
//! releases (bullseye 0.9.8, bookworm 1.0.6, trixie 1.1.3, from
//! scripts/fetch-nftables.sh), pushed to a real `docker-registry` on
//! loopback and inspected through the CLI binary: with a dpkg status, with
//! only distroless status.d stanzas, with no package database at all, next
//! to iptables, and with a hostile libnftables.

use crate::support::images;
use crate::support::registry;

use assert_cmd::Command;
use images::*;
use registry::Registry;
use serde_json::Value;
use std::path::Path;

use images::inspect_cli as inspect;

fn ok(reg: &str, reference: &str) -> Value {
    let r = inspect(reg, reference, &[]);
    assert_eq!(r.code, 0, "inspect {reference} failed: {}", r.stderr);
    r.json
}

/// A small Debian-like base layer without any nftables.
fn base_layer(work: &Path) -> Blob {
    build_layer(
        work,
        &[
            dir("/etc"),
            file("/etc/os-release", "ID=debian\n"),
            dir("/usr"),
            dir("/usr/bin"),
            exe("/usr/bin/true", "#!/bin/sh\n"),
        ],
        Compression::Gzip,
    )
}

fn push(reg: &Registry, work: &Path, repo: &str, top: &[Entry]) -> Pushed {
    let layers = [base_layer(work), build_layer(work, top, Compression::Gzip)];
    push_image(&reg.host(), repo, "v1", &layers, &ImageConfig::default())
}

fn sources(facts: &Value) -> Vec<String> {
    facts["evidence"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["source"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Release, whether it writes the new set userdata, and how it reads it.
const RELEASES: [(&str, bool, &str); 3] = [
    ("0.9.8", false, "crashes"),
    ("1.0.6", false, "crashes"),
    ("1.1.3", true, "current"),
];

fn check_nft(out: &Value, release: &str, writes: bool, reader: &str) {
    let f = &out["nftables"];
    assert_eq!(f["version"], release, "{out:#}");
    assert_eq!(f["writesTypeUserdata"], writes, "{out:#}");
    assert_eq!(f["userdataReader"], reader, "{out:#}");
    assert_eq!(f["program"], true, "{out:#}");
    assert!(
        f.get("conflicts")
            .is_none_or(|c| c.as_array().is_some_and(Vec::is_empty)),
        "{out:#}"
    );
}

#[test]
fn debian_releases_with_dpkg_status() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    for (release, writes, reader) in RELEASES {
        let img = push(
            &reg,
            work.path(),
            &format!("nft-{release}"),
            &debian_nftables(release),
        );
        let out = ok(&reg.host(), &img.reference);
        println!("{out:#}"); // shown with --nocapture: a real example output
        check_nft(&out, release, writes, reader);
        assert_eq!(
            out["nftables"]["packageVersion"],
            nftables_package_version(release).as_str(),
            "{out:#}"
        );
        let s = sources(&out["nftables"]);
        assert!(s.iter().any(|x| x == "dpkg") && s.iter().any(|x| x == "binary"));
        assert!(out["iptables"].is_null(), "{out:#}");
    }
}

/// (a) No package database: the library's literal alone.
#[test]
fn library_literal_only() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    for (release, writes, reader) in RELEASES {
        let img = push(
            &reg,
            work.path(),
            &format!("bare-{release}"),
            &bare_nftables(release),
        );
        let out = ok(&reg.host(), &img.reference);
        check_nft(&out, release, writes, reader);
        let f = &out["nftables"];
        assert!(f.get("packageVersion").is_none(), "{out:#}");
        assert_eq!(sources(f), ["binary", "binary"], "{out:#}");
        let lib = &f["evidence"][0];
        assert!(
            lib["path"]
                .as_str()
                .unwrap()
                .starts_with("/usr/lib/x86_64-linux-gnu/libnftables.so.1."),
            "{out:#}"
        );
        assert_eq!(
            lib["detail"],
            format!("libnftables version literal \"{release}\""),
            "{out:#}"
        );
    }
}

/// (b) Distroless: only status.d stanzas.
#[test]
fn distroless_status_d_only() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let img = push(
        &reg,
        work.path(),
        "distroless-nft",
        &distroless_nftables("1.1.3"),
    );
    let out = ok(&reg.host(), &img.reference);
    check_nft(&out, "1.1.3", true, "current");
    let f = &out["nftables"];
    assert_eq!(f["packageVersion"], "1.1.3-1", "{out:#}");
    let paths: Vec<&str> = f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "dpkg")
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "/var/lib/dpkg/status.d/libnftables1",
            "/var/lib/dpkg/status.d/nftables"
        ],
        "{out:#}"
    );
}

/// (c) iptables 1.8.11 and trixie's nftables 1.1.3 in one image, and the
/// text output naming both.
#[test]
fn iptables_and_nftables_together() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let img = push(
        &reg,
        work.path(),
        "both",
        &debian_iptables_and_nftables("1.8.11", Alt::Nft, "1.1.3"),
    );
    let out = ok(&reg.host(), &img.reference);
    assert_eq!(out["iptables"]["version"], "1.8.11", "{out:#}");
    assert_eq!(out["iptables"]["backend"], "nft", "{out:#}");
    check_nft(&out, "1.1.3", true, "current");
    assert_eq!(out["nftables"]["packageVersion"], "1.1.3-1", "{out:#}");

    let text = Command::cargo_bin("nfguard")
        .unwrap()
        .args(["inspect", "image", &img.reference])
        .args(["--insecure-registry", &reg.host()])
        .env_remove("DOCKER_CONFIG")
        .env("HOME", "/nonexistent")
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    println!("{stdout}");
    for line in [
        "iptables: 1.8.11 (nft)\n",
        "nftables: 1.1.3 (writes type userdata: yes; reader: current)\n",
        "  package:  1.1.3-1\n",
        "  program:  nft\n",
        "  evidence: dpkg /var/lib/dpkg/status package libnftables1 1.1.3-1\n",
    ] {
        assert!(stdout.contains(line), "{line:?} in\n{stdout}");
    }
}

/// Early stop: a top layer that installed both with dpkg settles both
/// answers, and the 250 MB layer below is never requested; an iptables-only
/// top layer cannot rule out an nft below it and reads on.
#[test]
fn top_layer_settles_both_answers_or_reads_on() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let big = build_layer(
        work.path(),
        &[
            dir("/opt"),
            Entry::Random {
                path: "/opt/blob.bin".into(),
                size: 64 << 20,
                seed: 11,
            },
        ],
        Compression::Zstd,
    );
    let both = build_layer(
        work.path(),
        &debian_iptables_and_nftables("1.8.9", Alt::Nft, "1.1.3"),
        Compression::Gzip,
    );
    let img = push_image(
        &reg.host(),
        "settles",
        "v1",
        &[big.clone(), both],
        &ImageConfig::default(),
    );
    let r = inspect(&reg.host(), &img.reference, &["--stats"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["nftables"]["version"], "1.1.3", "{:#}", r.json);
    let stats: Value = serde_json::from_str(r.stderr.lines().last().unwrap()).unwrap();
    assert_eq!(stats["layersFetched"], 1, "{stats}");
    assert_eq!(reg.blob_gets(&big.digest), 0);

    let ipt_only = build_layer(
        work.path(),
        &debian_iptables("1.8.9", Alt::Nft),
        Compression::Gzip,
    );
    let img = push_image(
        &reg.host(),
        "reads-on",
        "v1",
        &[big.clone(), ipt_only],
        &ImageConfig::default(),
    );
    // dpkg's whole `status` file in the top layer lists no nftables: a
    // package manager's nftables below would be in it, so the scan stops.
    let r = inspect(&reg.host(), &img.reference, &["--stats"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["iptables"]["version"], "1.8.9", "{:#}", r.json);
    assert!(r.json.get("nftables").is_none(), "{:#}", r.json);
    let stats: Value = serde_json::from_str(r.stderr.lines().last().unwrap()).unwrap();
    assert_eq!(stats["layersFetched"], 1, "{stats}");
    assert_eq!(reg.blob_gets(&big.digest), 0);

    // Without a package database in the top layer, "no nftables" waits for
    // every layer (a lower one could hold an nft).
    let no_db: Vec<_> = debian_iptables("1.8.9", Alt::Nft)
        .into_iter()
        .filter(|e| !matches!(e, Entry::File { path, .. } if path == "/var/lib/dpkg/status"))
        .collect();
    let no_db = build_layer(work.path(), &no_db, Compression::Gzip);
    let img = push_image(
        &reg.host(),
        "reads-on",
        "v2",
        &[big.clone(), no_db],
        &ImageConfig::default(),
    );
    let r = inspect(&reg.host(), &img.reference, &["--stats"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["iptables"]["version"], "1.8.9", "{:#}", r.json);
    let stats: Value = serde_json::from_str(r.stderr.lines().last().unwrap()).unwrap();
    assert_eq!(stats["layersFetched"], 2, "{stats}");
}

/// A hostile libnftables in place of trixie's: huge, without a version, or
/// holding thousands of version literals. Each is bounded and read as
/// unknown with a note; the program's own literal does not stand in for it.
#[test]
fn hostile_libnftables_is_bounded_and_unknown() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let lib = "/usr/lib/x86_64-linux-gnu/libnftables.so.1.1.0";
    let mut flood = Vec::new();
    for i in 0..100_000u32 {
        flood.extend_from_slice(format!("\0nft\x001.{}.{}\0", i % 9, i % 31).as_bytes());
        flood.extend_from_slice(format!("{}.{}.{i}\0", i % 3, i % 7).as_bytes());
    }
    let cases: [(&str, Entry, &str); 3] = [
        (
            "huge",
            Entry::Zeros {
                path: lib.into(),
                size: 40 << 20,
            },
            "larger than the 16777216 byte read limit",
        ),
        (
            "no-version",
            file(lib, vec![0x7fu8; 1 << 20]),
            "no nftables version literal",
        ),
        (
            "flood",
            file(lib, flood),
            "100000 nftables version literals where a real build holds exactly one",
        ),
    ];
    for (what, hostile, says) in cases {
        // The real tree below, the hostile library replacing trixie's above.
        let layers = [
            build_layer(work.path(), &bare_nftables("1.1.3"), Compression::Gzip),
            build_layer(
                work.path(),
                &[
                    dir("/usr"),
                    dir("/usr/lib"),
                    dir("/usr/lib/x86_64-linux-gnu"),
                    hostile,
                ],
                Compression::Gzip,
            ),
        ];
        let img = push_image(
            &reg.host(),
            &format!("hostile-{what}"),
            "v1",
            &layers,
            &ImageConfig::default(),
        );
        let out = ok(&reg.host(), &img.reference);
        let f = &out["nftables"];
        assert!(f["version"].is_null(), "{what}: {out:#}");
        assert!(f.get("userdataReader").is_none(), "{what}: {out:#}");
        assert!(f.get("writesTypeUserdata").is_none(), "{what}: {out:#}");
        assert_eq!(f["program"], true, "{what}");
        let note = f["evidence"][0]["detail"].as_str().unwrap();
        assert!(
            note.contains(says) && note.ends_with("version unknown"),
            "{what}: {note}"
        );
    }
}
