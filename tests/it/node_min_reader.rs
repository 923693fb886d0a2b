//! The minimum safe reader, proved: each release writes the same rules,
//! nfguard names the native features and the oldest reader, and every real
//! reader release is checked against that claim — a reader older than a
//! feature's minimum loses that match, a reader at or above it keeps it.

use crate::support::netns;

use netns::{Netns, RELEASES};
use nfguard::facts::Version;
use serde_json::Value;

/// (feature nfguard reports, table, rule args, what a lossless `-save` prints)
const RULES: &[(&str, &str, &[&str], &str)] = &[
    (
        "meta-mark",
        "filter",
        &[
            "-A",
            "OUTPUT",
            "-m",
            "mark",
            "--mark",
            "0x4000/0x4000",
            "-j",
            "ACCEPT",
        ],
        "--mark 0x4000/0x4000",
    ),
    (
        "transport-ports",
        "filter",
        &["-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "ACCEPT"],
        "--dport 80",
    ),
    (
        "port-range",
        "filter",
        &[
            "-A",
            "INPUT",
            "-p",
            "udp",
            "--sport",
            "1000:2000",
            "-j",
            "ACCEPT",
        ],
        "--sport 1000:2000",
    ),
    (
        "tcp-flags",
        "filter",
        &[
            "-A",
            "INPUT",
            "-p",
            "tcp",
            "--tcp-flags",
            "SYN,ACK",
            "SYN",
            "-j",
            "ACCEPT",
        ],
        "--tcp-flags SYN,ACK SYN",
    ),
    (
        "payload-protocol",
        "filter",
        &["-A", "FORWARD", "-p", "icmp", "-j", "ACCEPT"],
        "-A FORWARD -p icmp -j ACCEPT",
    ),
    // In its own table: a reader that cannot decode it gives up on the whole table.
    (
        "log",
        "mangle",
        &["-A", "PREROUTING", "-j", "NFLOG", "--nflog-group", "5"],
        "--nflog-group 5",
    ),
];

fn v(s: &str) -> Version {
    s.parse().expect("version")
}

/// The features nfguard reports for rules `rules` written by `writer`.
fn probe(ns: &Netns) -> (Vec<(String, Option<Version>)>, Value) {
    let root = tempfile::tempdir().unwrap();
    let j = ns.nfguard_json(&[
        "inspect",
        "node",
        "--host-root",
        root.path().to_str().unwrap(),
    ]);
    let features = j["nativeFeatures"]
        .as_array()
        .unwrap_or_else(|| panic!("no nativeFeatures: {j:#}"))
        .iter()
        .map(|f| {
            (
                f["feature"].as_str().unwrap().to_string(),
                f["minReader"].as_str().map(v),
            )
        })
        .collect();
    (features, j["minReaderVersion"].clone())
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn minimum_reader_for_rules_written_by_each_release() {
    for writer in RELEASES {
        // All rules together: the inventory and the minimum for this writer.
        let ns = Netns::new(&format!("min{writer}"));
        for (_, table, args, _) in RULES {
            let mut a = vec!["-t", table];
            a.extend_from_slice(args);
            ns.iptables_ok(writer, "iptables-nft", &a);
        }
        let (features, min) = probe(&ns);
        let mut names: Vec<&str> = features.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        match writer {
            // 1.8.7 writes only xt-compat extensions: every release reads them.
            "1.8.7" => {
                assert!(features.is_empty(), "{writer}: {features:?}");
                assert_eq!(min, Value::Null);
            }
            "1.8.9" => {
                assert_eq!(
                    names,
                    [
                        "log",
                        "meta-mark",
                        "port-range",
                        "tcp-flags",
                        "transport-ports"
                    ],
                    "{writer}"
                );
                assert_eq!(min, "1.8.8");
            }
            "1.8.11" => {
                assert_eq!(
                    names,
                    [
                        "log",
                        "meta-mark",
                        "payload-protocol",
                        "port-range",
                        "tcp-flags",
                        "transport-ports"
                    ],
                    "{writer}"
                );
                assert_eq!(min, "1.8.8");
            }
            other => panic!("unexpected release {other}"),
        }
        drop(ns);

        // The proof, one rule per namespace (a reader that cannot decode one
        // expression may give up on the whole table): read back with every
        // release and compare with the claimed minimum.
        for (feature, table, args, lossless) in RULES {
            let ns = Netns::new(&format!("p{writer}"));
            let mut a = vec!["-t", table];
            a.extend_from_slice(args);
            ns.iptables_ok(writer, "iptables-nft", &a);
            let (found, _) = probe(&ns);
            let claimed = found
                .iter()
                .find(|(n, _)| n == feature)
                .and_then(|(_, m)| *m);
            for reader in RELEASES {
                let out = ns.iptables(reader, "iptables-nft-save", &["-t", table]);
                let saved = String::from_utf8_lossy(&out.stdout);
                let reads = claimed.is_none_or(|m| v(reader) >= m);
                assert_eq!(
                    saved.contains(lossless),
                    reads,
                    "writer {writer}, reader {reader}, feature {feature} (min {claimed:?}): \
                     expected the reader to {} `{lossless}`:\n{saved}",
                    if reads { "keep" } else { "lose" }
                );
                if !reads && v(reader) < v("1.8.8") {
                    // The danger: the old reader loses the match *and* exits 0.
                    assert!(out.status.success(), "{reader} save failed loudly: {out:?}");
                }
            }
        }
    }
}
