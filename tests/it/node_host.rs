//! The host's own iptables (read from `--host-root`) against the live rules.

use crate::support::netns;

use netns::{Netns, installed_host_root};
use serde_json::Value;

fn inspect(ns: &Netns, root: &std::path::Path) -> Value {
    ns.nfguard_json(&["inspect", "node", "--host-root", root.to_str().unwrap()])
}

fn codes(v: &Value) -> Vec<String> {
    v["hazards"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|h| h["code"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn kubelet_chains(ns: &Netns, release: &str) {
    ns.iptables_ok(
        release,
        "iptables-nft",
        &["-t", "mangle", "-N", "KUBE-IPTABLES-HINT"],
    );
    ns.iptables_ok(
        release,
        "iptables-nft",
        &["-t", "nat", "-N", "KUBE-KUBELET-CANARY"],
    );
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn old_host_reader_under_rules_written_by_1_8_11() {
    let ns = Netns::new("oldhost");
    kubelet_chains(&ns, "1.8.11");
    ns.iptables_ok(
        "1.8.11",
        "iptables-nft",
        &["-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "ACCEPT"],
    );

    let old = installed_host_root("1.8.7", "nft");
    let v = inspect(&ns, old.path());
    assert_eq!(v["iptables"]["version"], "1.8.7", "{v:#}");
    assert_eq!(v["iptables"]["backend"], "nft");
    assert_eq!(v["minReaderVersion"], "1.8.8");
    let h: Vec<&Value> = v["hazards"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["code"] == "OldReaderNewRules")
        .collect();
    assert_eq!(h.len(), 1, "{v:#}");
    assert_eq!(h[0]["severity"], "critical");
    let msg = h[0]["message"].as_str().unwrap();
    assert!(msg.contains("1.8.7") && msg.contains("1.8.8"), "{msg}");
    // And the claim is real: the host's own 1.8.7 loses the port.
    let saved = ns.iptables_ok("1.8.7", "iptables-nft-save", &[]);
    assert!(saved.contains("-A INPUT -p tcp -j ACCEPT"), "{saved}");

    // A legacy-default host with the same old package: still a hazard, but a warning.
    let old_legacy = installed_host_root("1.8.7", "legacy");
    let v = inspect(&ns, old_legacy.path());
    let sev: Vec<&Value> = v["hazards"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["code"] == "OldReaderNewRules")
        .map(|h| &h["severity"])
        .collect();
    assert_eq!(sev, [&Value::from("warning")], "{v:#}");

    // A host reader at or above the minimum is fine.
    let new = installed_host_root("1.8.11", "nft");
    let v = inspect(&ns, new.path());
    assert_eq!(v["iptables"]["version"], "1.8.11");
    assert!(codes(&v).is_empty(), "{v:#}");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn old_host_reader_under_its_own_rules_is_fine() {
    let ns = Netns::new("oldown");
    kubelet_chains(&ns, "1.8.7");
    ns.iptables_ok(
        "1.8.7",
        "iptables-nft",
        &["-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "ACCEPT"],
    );
    let old = installed_host_root("1.8.7", "nft");
    let v = inspect(&ns, old.path());
    assert_eq!(v["minReaderVersion"], Value::Null);
    assert!(codes(&v).is_empty(), "{v:#}");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn missing_host_root_is_reported_not_fatal() {
    let ns = Netns::new("noroot");
    let v = inspect(&ns, std::path::Path::new("/nonexistent/nfguard-host-root"));
    assert_eq!(v["iptables"], Value::Null, "{v:#}");
    assert!(v["kernel"]["release"].is_string());
}

/// What the kernel offers, not only what is loaded: the running kernel's
/// module lists under the host root decide for a module that shows no sign of
/// being loaded (on this machine's kernel nft_compat is built in without a
/// sysfs entry, and ip_tables is loaded in every namespace).
#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn kernel_modules_come_from_the_running_kernels_lists_under_the_host_root() {
    let ns = Netns::new("kmods");
    let v = inspect(&ns, std::path::Path::new("/nonexistent/nfguard-host-root"));
    let release = v["kernel"]["release"].as_str().unwrap().to_string();
    assert_eq!(v["kernel"]["modules"]["ipTables"], "loaded", "{v:#}");
    assert_eq!(v["kernel"]["modules"]["nfTables"], "loaded", "{v:#}");

    let root = installed_host_root("1.8.9", "nft");
    let dir = root.path().join("usr/lib/modules").join(&release);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("modules.builtin"),
        "kernel/net/netfilter/nf_tables.ko\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("modules.dep"),
        "kernel/net/netfilter/nft_compat.ko.xz: kernel/net/netfilter/x_tables.ko.xz\n",
    )
    .unwrap();
    let v = inspect(&ns, root.path());
    assert_eq!(v["kernel"]["modules"]["nftCompat"], "module", "{v:#}");
    assert_eq!(v["kernel"]["modules"]["ipTables"], "loaded", "{v:#}");
    assert_eq!(v["kernel"]["ipTables"], true);

    // Lists that name no nft_compat: absent, and said so.
    std::fs::write(dir.join("modules.dep"), "").unwrap();
    let v = inspect(&ns, root.path());
    assert_eq!(v["kernel"]["modules"]["nftCompat"], "absent", "{v:#}");

    // The x_tables extensions Kubernetes' writers load, from the same lists
    // (a Talos-like kernel that lost xt_TPROXY and the rest): each with its
    // state, and the absent ones in one warning naming who needs them.
    std::fs::write(
        dir.join("modules.builtin"),
        "kernel/net/netfilter/nf_tables.ko\nkernel/net/netfilter/xt_comment.ko\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("modules.dep"),
        "kernel/net/netfilter/xt_CT.ko.zst: kernel/net/netfilter/x_tables.ko.zst\n",
    )
    .unwrap();
    let v = inspect(&ns, root.path());
    let xt = |name: &str| -> Value {
        v["kernel"]["modules"]["xt"]
            .as_array()
            .expect("xt modules")
            .iter()
            .find(|m| m["name"] == name)
            .map(|m| m["state"].clone())
            .unwrap_or(Value::Null)
    };
    // Loaded wins where this kernel shows a sysfs entry; else the lists.
    let loaded = |name: &str| std::path::Path::new("/sys/module").join(name).exists();
    for (name, listed) in [
        ("xt_comment", "builtin"),
        ("xt_CT", "module"),
        ("xt_TPROXY", "absent"),
    ] {
        let want = if loaded(name) { "loaded" } else { listed };
        assert_eq!(xt(name), want, "{name}: {v:#}");
    }
    let hazard = v["hazards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["code"] == "XtModulesAbsent")
        .cloned()
        .unwrap_or_else(|| panic!("no XtModulesAbsent: {v:#}"));
    assert_eq!(hazard["severity"], "warning");
    let msg = hazard["message"].as_str().unwrap();
    assert!(
        msg.contains("xt_TPROXY (-j TPROXY: Cilium, Istio)"),
        "{msg}"
    );
    assert!(
        !msg.contains("xt_comment") && !msg.contains("xt_CT "),
        "{msg}"
    );
}
