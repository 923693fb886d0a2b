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
            // 1.8.13 (forky) writes exactly what 1.8.11 writes: measured, the
            // same expressions and no rule userdata (see
            // `no_release_writes_compat_userdata`).
            "1.8.11" | "1.8.13" => {
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

/// Matches iptables-nft has always written as xt-compat `match` expressions:
/// nfguard reports no native feature for them, and every release reads back
/// what every release wrote.
const XT_RULES: &[(&str, &[&str], &str)] = &[
    (
        "comment",
        &[
            "-A",
            "INPUT",
            "-m",
            "comment",
            "--comment",
            "hello-nfguard",
            "-j",
            "ACCEPT",
        ],
        "-A INPUT -m comment --comment hello-nfguard -j ACCEPT",
    ),
    (
        "conntrack",
        &[
            "-A",
            "INPUT",
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ],
        "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
    ),
];

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn xt_compat_matches_read_back_by_every_release() {
    for writer in RELEASES {
        for (name, args, lossless) in XT_RULES {
            let ns = Netns::new(&format!("xt{writer}"));
            ns.iptables_ok(writer, "iptables-nft", args);
            let (features, min) = probe(&ns);
            assert!(features.is_empty(), "writer {writer}, {name}: {features:?}");
            assert_eq!(min, Value::Null, "writer {writer}, {name}");
            for reader in RELEASES {
                let saved = ns.iptables_ok(reader, "iptables-nft-save", &["-t", "filter"]);
                assert!(
                    saved.lines().any(|l| l == *lossless),
                    "writer {writer}, reader {reader}, {name}: expected `{lossless}`:\n{saved}"
                );
            }
        }
    }
}

/// The shared facts (netfilter-compat.md §1, §8) credit 1.8.12 with "embed
/// compat extensions in rule userdata" (an opt-in, `--compat` /
/// `XTABLES_COMPAT`, that would let a reader fall back to the xt extension):
/// upstream reverted it before the 1.8.12 tag (iptables commit bf77b769,
/// 2026-02-12), and the `--compat` flag of 2023 was reverted before 1.8.10.
/// Measured with the real releases: no release from 1.8.11 on knows
/// `--compat`, `XTABLES_COMPAT=1` changes nothing that is written (no rule
/// userdata), so the minimum reader of every native encoding stays 1.8.8. A release that brings the opt-in back fails here: measure it
/// and model its userdata before adding it to RELEASES.
#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn no_release_writes_compat_userdata() {
    let rule = [
        "-A",
        "INPUT",
        "-p",
        "tcp",
        "--dport",
        "80",
        "-m",
        "mark",
        "--mark",
        "0x4000/0x4000",
        "-j",
        "ACCEPT",
    ];
    for writer in RELEASES.into_iter().filter(|r| v(r) >= v("1.8.11")) {
        let ns = Netns::new(&format!("cf{writer}"));
        let mut flagged = vec!["--compat"];
        flagged.extend_from_slice(&rule);
        let out = ns.iptables(writer, "iptables-nft", &flagged);
        assert_eq!(out.status.code(), Some(2), "{writer} --compat: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("unknown option \"--compat\""),
            "{writer} --compat: {out:?}"
        );
        drop(ns);

        let plain = Netns::new(&format!("pl{writer}"));
        plain.iptables_ok(writer, "iptables-nft", &rule);
        let env = Netns::new(&format!("ce{writer}"));
        let run = netns::release_dir(writer).join("run");
        let mut args = vec![
            "env",
            "XTABLES_COMPAT=1",
            run.to_str().expect("utf-8 fixture path"),
            "iptables-nft",
        ];
        args.extend_from_slice(&rule);
        env.exec_ok(&args);
        // No rule userdata at all (the host's nft prints a rule's userdata
        // under its expressions as `userdata = { ... }`).
        for (ns, how) in [(&plain, "plain"), (&env, "XTABLES_COMPAT=1")] {
            let dump = ns.exec_ok(&["nft", "--debug=netlink", "list", "table", "ip", "filter"]);
            let dump = String::from_utf8_lossy(&dump.stdout);
            assert!(dump.contains("[ meta load mark"), "{writer} {how}: {dump}");
            assert!(!dump.contains("userdata"), "{writer} {how}: {dump}");
        }
        let (features, min) = probe(&env);
        assert_eq!(
            features,
            probe(&plain).0,
            "{writer}: XTABLES_COMPAT=1 changed what is written"
        );
        assert_eq!(min, "1.8.8", "{writer}");
        // The readers see the same as without it: 1.8.7 still loses both
        // matches (and exits 0), 1.8.9 on keep them.
        for reader in RELEASES {
            let saved = env.iptables_ok(reader, "iptables-nft-save", &["-t", "filter"]);
            let kept = saved.contains("--dport 80") && saved.contains("--mark 0x4000/0x4000");
            assert_eq!(
                kept,
                v(reader) >= v("1.8.8"),
                "writer {writer} with XTABLES_COMPAT=1, reader {reader}:\n{saved}"
            );
            if v(reader) < v("1.8.8") {
                assert!(
                    saved.lines().any(|l| l == "-A INPUT -p tcp -j ACCEPT"),
                    "writer {writer} with XTABLES_COMPAT=1, reader {reader}:\n{saved}"
                );
            }
        }
    }
}
