//! `nfguard check --assume-nodes SELECTOR --assume PATCH` as a user runs it:
//! the real binary, the fixture fleet (tests/fixtures/check-ci) and images
//! bundling real Debian iptables releases in a real registry on loopback.
//! Every verdict comes from the real judgement on the patched profiles.

use crate::check_ci_support::{World, nfguard, stdout};
use serde_json::Value;

const CNI: &str = "manifests/cni.yaml";

fn json(w: &World, extra: &[&str]) -> Value {
    let mut args = vec!["-f", CNI, "-o", "json"];
    args.extend_from_slice(extra);
    let out = w.check(&args);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// (object, code, nodes) of every finding, message aside.
fn findings(report: &Value) -> Vec<(String, String, Vec<String>)> {
    let mut v = Vec::new();
    for r in report["results"].as_array().unwrap() {
        for reason in r["reasons"].as_array().unwrap() {
            let nodes = reason["nodes"]
                .as_array()
                .map(|n| n.iter().map(|x| x.as_str().unwrap().to_string()).collect())
                .unwrap_or_default();
            v.push((
                r["object"].as_str().unwrap().to_string(),
                reason["code"].as_str().unwrap().to_string(),
                nodes,
            ));
        }
    }
    v
}

fn object<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["object"] == name)
        .unwrap_or_else(|| panic!("{name} not in {report}"))
}

#[test]
fn moving_every_node_to_trixie_predicts_the_wrapper_warning() {
    let w = World::new();
    let today = json(&w, &[]);
    let kp = object(&today, "DaemonSet/kube-system/kube-proxy");
    assert_eq!(kp["verdict"], "allow", "{kp}");

    let out = w.check(&["-f", CNI, "--assume", "os=debian-13"]);
    let text = stdout(&out);
    eprintln!("{text}");
    // kube-router (iptables-nft 1.8.7) is denied today already: exit 1.
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("what-if: 0 workloads would be denied, 1 warned on 3 assumed nodes (all nodes: os=debian-13)"),
        "{text}"
    );

    let after = json(&w, &["--assume", "os=debian-13"]);
    let kp = object(&after, "DaemonSet/kube-system/kube-proxy");
    assert_eq!(kp["verdict"], "warn", "{kp}");
    let r = &kp["reasons"][0];
    assert_eq!(r["code"], "ReaderOlderThanWriter");
    assert_eq!(r["otherVersion"], "1.8.11", "the host's trixie iptables");
    assert_eq!(r["imageVersion"], "1.8.9");
    assert_eq!(
        r["nodes"],
        serde_json::json!(["node-a", "node-c"]),
        "the nft nodes"
    );
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .starts_with("what-if [all nodes: os=debian-13]: "),
        "{r}"
    );
    assert_eq!(
        after["whatIf"]["nodes"],
        serde_json::json!(["node-a", "node-b", "node-c"])
    );
    assert_eq!(after["whatIf"]["warned"], 1);
    // kube-router's denial holds today too: labelled so, not counted.
    let kr = object(&after, "DaemonSet/kube-system/kube-router");
    let msg = kr["reasons"][1]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("what-if [all nodes: os=debian-13], as today: "),
        "{msg}"
    );
    assert_eq!(after["whatIf"]["denied"], 0);
}

#[test]
fn switching_kube_proxy_to_nftables_changes_no_finding_here() {
    let w = World::new();
    let out = w.check(&["-f", CNI, "--assume", "kubeProxyMode=nftables"]);
    eprintln!("{}", stdout(&out));
    assert_eq!(out.status.code(), Some(1));
    // The fleet's kernels (6.1) are new enough: no note about 5.13.
    assert!(!stdout(&out).contains("older than 5.13"));
    let today = json(&w, &[]);
    let after = json(&w, &["--assume", "kubeProxyMode=nftables"]);
    assert_eq!(findings(&today), findings(&after));
    assert_eq!(today["verdict"], after["verdict"]);
    assert_eq!(
        (
            after["whatIf"]["denied"].as_u64(),
            after["whatIf"]["warned"].as_u64()
        ),
        (Some(0), Some(0))
    );
    assert!(
        stdout(&out).contains("what-if: 0 workloads would be denied, 0 warned on 3 assumed nodes")
    );
}

#[test]
fn a_kernel_without_legacy_xtables_denies_the_wrapper_there() {
    let w = World::new();
    let after = json(
        &w,
        &[
            "--assume-nodes",
            "nfguard.io/iptables-backend=legacy",
            "--assume",
            "kernel.ipTables=absent",
        ],
    );
    let kp = object(&after, "DaemonSet/kube-system/kube-proxy");
    assert_eq!(kp["verdict"], "deny", "{kp}");
    let r = &kp["reasons"][0];
    assert_eq!(r["code"], "KernelLacksBackend");
    assert_eq!(r["nodes"], serde_json::json!(["node-b"]));
    assert_eq!(after["whatIf"]["nodes"], serde_json::json!(["node-b"]));
}

#[test]
fn bad_patches_exit_2_naming_them_from_flags_and_env() {
    let w = World::new();
    let out = w.check(&["-f", CNI, "--assume", "iptables=1.8.11/wrapper"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "no half report");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("iptables=1.8.11/wrapper") && err.contains("nft or legacy"),
        "{err}"
    );

    let out = nfguard()
        .current_dir(w.path())
        .args([
            "check",
            "-f",
            CNI,
            "--profiles",
            "fleet/profiles.yaml",
            "--nodes",
            "fleet/nodes.yaml",
        ])
        .env("NFGUARD_ASSUME", "os=debian-13,kernel.xtables=absent")
        .env("NFGUARD_ASSUME_NODES", "nfguard.io/iptables-backend=nft")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown key \"kernel.xtables\""), "{err}");

    // A selector that needs Node labels, without them.
    let out = nfguard()
        .current_dir(w.path())
        .args(["check", "-f", CNI, "--profiles", "fleet/profiles.yaml"])
        .args(["--assume-nodes", "pool=old", "--assume", "os=trixie"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no Node objects"));

    // --assume-nodes alone is refused by the parser.
    let out = nfguard()
        .current_dir(w.path())
        .args(["check", "-f", CNI, "--profiles", "fleet/profiles.yaml"])
        .args(["--assume-nodes", "pool=old"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
