//! The nft skew of 2026 (shared doc §8) with Debian's own nftables releases
//! (scripts/fetch-nftables.sh) in network namespaces: what the writers leave
//! in the kernel, which real readers segfault on it, and that `nfguard
//! inspect node` predicts exactly those, with the host's own `nft` read from
//! a node root.

use crate::support::netns::Netns;
use crate::support::nft::{RELEASES, installed_root, nft, nft_script, package_version, segfaulted};
use nfguard::facts::NftablesFacts;
use nfguard::node::nft_skew::crashes;
use serde_json::Value;

/// One object per case, as kube-proxy, Calico and hand-written rules make
/// them; `typeof ... : verdict` maps cannot be written by 0.9.8.
const OBJECTS: [(&str, &str, bool); 11] = [
    ("type set", "add set ip t s { type ipv4_addr ; }", true),
    (
        "type ifname set with elements",
        "add set ip t s { type ifname ; elements = { \"eth0\" } ; }",
        true,
    ),
    (
        "type set with a comment",
        "add set ip t s { type ipv4_addr ; comment \"x\" ; }",
        true,
    ),
    ("typeof set", "add set ip t s { typeof ip daddr ; }", true),
    (
        "typeof concatenation",
        "add set ip t s { typeof ip daddr . tcp dport ; }",
        true,
    ),
    (
        "type concatenation",
        "add set ip t s { type ipv4_addr . inet_proto . inet_service ; }",
        true,
    ),
    (
        "verdict map",
        "add map ip t m { type ipv4_addr : verdict ; }",
        true,
    ),
    (
        "concatenated verdict map",
        "add map ip t m { type ipv4_addr . inet_proto . inet_service : verdict ; }",
        true,
    ),
    (
        "typeof verdict map",
        "add map ip t m { typeof ip daddr : verdict ; }",
        false,
    ),
    (
        "data map",
        "add map ip t m { type ipv4_addr : ipv4_addr ; }",
        true,
    ),
    (
        "inet type set",
        "add set inet t s { type ipv4_addr ; }",
        true,
    ),
];

/// A reader's facts as the fixture's package says them.
fn reader(release: &str) -> NftablesFacts {
    let pkg = package_version(release);
    NftablesFacts {
        version: pkg.parse().ok(),
        package_version: Some(pkg),
        program: true,
        ..Default::default()
    }
    .classified(false)
}

fn inspect(ns: &Netns, host_root: &str) -> Value {
    ns.nfguard_json(&["inspect", "node", "--host-root", host_root])
}

fn nft_hazards(status: &Value) -> Vec<Value> {
    status["hazards"]
        .as_array()
        .expect("hazards")
        .iter()
        .filter(|h| h["code"] == "NftSetsCrashHostNft")
        .cloned()
        .collect()
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn every_real_reader_crashes_exactly_where_nfguard_predicts() {
    let empty = tempfile::tempdir().unwrap();
    let empty = empty.path().to_str().unwrap();
    let readers: Vec<(&str, NftablesFacts)> = RELEASES.iter().map(|r| (*r, reader(r))).collect();
    let (mut crashed, mut survived) = (0, 0);
    for writer in RELEASES {
        for (what, object, old_writer_can) in OBJECTS {
            if writer == "0.9.8" && !old_writer_can {
                continue;
            }
            let ns = Netns::new("nftskew");
            let family = if object.contains(" inet ") {
                "inet"
            } else {
                "ip"
            };
            nft_script(&ns, writer, &format!("add table {family} t\n{object}\n"));
            let s = inspect(&ns, empty);
            let n = &s["nftables"];
            let min = n["minReader"].as_str().map(|v| v.parse().unwrap());
            let fixed = n["fixedReaderRequired"].as_bool().unwrap_or(false);
            for (name, facts) in &readers {
                let out = nft(&ns, name, &["list", "ruleset"]);
                let real = segfaulted(&out);
                if !real {
                    assert!(
                        out.status.success(),
                        "{name} list ruleset failed otherwise on {what} by {writer}: {out:?}"
                    );
                }
                let predicted = crashes(facts, min, fixed);
                assert_eq!(
                    predicted,
                    Some(real),
                    "reader {name} on a {what} written by {writer}: real crash {real}, nfguard \
                     says {predicted:?} (profile: {n})"
                );
                if real {
                    crashed += 1;
                } else {
                    survived += 1;
                }
            }
            // The count names exactly the crashing objects.
            let crashing = readers
                .iter()
                .any(|(_, f)| crashes(f, min, fixed) == Some(true));
            assert_eq!(
                n["crashingSets"],
                u32::from(crashing),
                "{what} by {writer}: {n}"
            );
        }
    }
    // Both outcomes happened: the matrix proved something either way.
    assert!(
        crashed >= 20 && survived >= 60,
        "crashed {crashed}, survived {survived}"
    );
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn the_incident_is_a_critical_hazard_for_an_unfixed_host_nft_only() {
    let ns = Netns::new("nftincident");
    // kube-proxy's table by bookworm's nft, then trixie's nft in the same
    // netns: the §8 reproduction.
    nft_script(
        &ns,
        "1.0.6",
        "add table ip kube-proxy\nadd chain ip kube-proxy services\n\
         add set ip kube-proxy cluster-ips { type ipv4_addr ; }\n",
    );
    let bookworm = installed_root("1.0.6");
    let bookworm = bookworm.path().to_str().unwrap();
    assert!(
        nft_hazards(&inspect(&ns, bookworm)).is_empty(),
        "old writers only"
    );
    nft_script(
        &ns,
        "1.1.3",
        "add table ip t\nadd set ip t s { type ifname ; elements = { \"eth0\" } ; }\n",
    );
    // The break is real: bookworm's nft segfaults listing, and on the very
    // batch kube-proxy's sync sends; its own table still lists.
    assert!(segfaulted(&nft(&ns, "1.0.6", &["list", "ruleset"])));
    let batch = ns.exec_stdin(
        &[
            crate::support::nft::release_dir("1.0.6")
                .join("run")
                .to_str()
                .unwrap(),
            "-f",
            "-",
        ],
        "add element ip kube-proxy cluster-ips { 10.96.0.1 }\n",
    );
    assert!(segfaulted(&batch), "{batch:?}");
    let table = nft(&ns, "1.0.6", &["list", "table", "ip", "kube-proxy"]);
    assert!(table.status.success(), "{table:?}");

    let s = inspect(&ns, bookworm);
    let n = &s["nftables"];
    assert_eq!(n["host"]["packageVersion"], package_version("1.0.6"), "{n}");
    assert_eq!(n["host"]["userdataReader"], "crashes", "{n}");
    assert_eq!(n["minReader"], "1.1.2", "{n}");
    assert_eq!(n["crashingSets"], 1, "{n}");
    assert_eq!(n["crashingExamples"][0], "ip/t/s", "{n}");
    let hs = nft_hazards(&s);
    assert_eq!(hs.len(), 1, "{s}");
    assert_eq!(hs[0]["severity"], "critical");
    assert_eq!(hs[0]["table"], "ip/t");
    // The host's nft carries the fix or reads the record: no hazard.
    for fixed in ["1.1.3", "forky"] {
        let root = installed_root(fixed);
        let s = inspect(&ns, root.path().to_str().unwrap());
        assert!(nft_hazards(&s).is_empty(), "host {fixed}: {s}");
        assert_eq!(s["nftables"]["crashingSets"], 1);
    }
    // A host without nft at all has no reader to crash.
    let empty = tempfile::tempdir().unwrap();
    let s = inspect(&ns, empty.path().to_str().unwrap());
    assert!(nft_hazards(&s).is_empty(), "{s}");
    // The text output says it too.
    let out = ns.nfguard(&["inspect", "node", "--host-root", bookworm]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("NftSetsCrashHostNft"), "{text}");
    assert!(
        text.contains("Min nft reader:    libnftables >= 1.1.2"),
        "{text}"
    );

    // Deleting the set ends it: forky's nft (fixed) removes it, bookworm's lists again.
    nft_script(&ns, "forky", "delete table ip t\n");
    assert!(nft(&ns, "1.0.6", &["list", "ruleset"]).status.success());
    assert!(nft_hazards(&inspect(&ns, bookworm)).is_empty());
}
