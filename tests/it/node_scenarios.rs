//! `nfguard inspect node` against real rule sets: every scenario in its own
//! network namespace, rules written by the real Debian iptables releases,
//! nfguard's JSON asserted.

use crate::support::netns;

use netns::Netns;
use serde_json::Value;

use netns::{KUBE_FIREWALL_COMMENT as COMMENT, kube_firewall, kubelet_chains};

/// Probe with an empty host root (a host without iptables, as on Talos), so
/// only the kernel facts speak.
fn inspect(ns: &Netns) -> Value {
    let root = tempfile::tempdir().expect("tempdir");
    inspect_with_root(ns, root.path())
}

fn inspect_with_root(ns: &Netns, root: &std::path::Path) -> Value {
    ns.nfguard_json(&["inspect", "node", "--host-root", root.to_str().unwrap()])
}

fn hazards(v: &Value, code: &str) -> Vec<Value> {
    v["hazards"]
        .as_array()
        .map(|a| a.iter().filter(|h| h["code"] == code).cloned().collect())
        .unwrap_or_default()
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

/// The two address families: (tool prefix, nf_tables family, a source network).
/// The incident tests run in both (the IPv6 rules are written by ip6tables).
const FAMILIES: [(&str, &str, &str); 2] = [
    ("iptables", "ip", "10.0.0.0/8"),
    ("ip6tables", "ip6", "fd00::/8"),
];

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn clean_nft_node_with_kubelet_chains() {
    let ns = Netns::new("clean");
    kubelet_chains(&ns, "1.8.9", "iptables-nft");
    kube_firewall(&ns, "1.8.9", "iptables-nft");
    let v = inspect(&ns);
    assert_eq!(v["activeBackend"], "nft", "{v:#}");
    assert_eq!(v["wrapperBackend"], "nft");
    let nft = &v["backends"]["nft"];
    assert_eq!(nft["hintChain"], true);
    assert_eq!(nft["canaryChain"], true);
    assert_eq!(nft["rules"], 2, "KUBE-FIREWALL's DROP and INPUT's jump");
    assert_eq!(
        nft["markerTables"],
        serde_json::json!(["ip/mangle", "ip/nat", "ip/filter"])
    );
    assert_eq!(v["backends"]["legacy"]["tables"], 0);
    assert_eq!(
        v["minReaderVersion"], "1.8.8",
        "1.8.9 wrote a native mark match"
    );
    assert_eq!(v["kernel"]["nfTables"], true);
    assert!(
        v["kernel"]["release"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
    );
    assert_eq!(
        v["hazards"],
        serde_json::json!([]),
        "the intact rule is not flagged: {v:#}"
    );
    // Reading never created a legacy table (asking about one would).
    assert_eq!(ns.read("/proc/net/ip_tables_names").trim(), "");
    assert_eq!(ns.read("/proc/net/ip6_tables_names").trim(), "");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn incident_old_reader_restore_makes_unconditional_drop() {
    for (tool, family, _) in FAMILIES {
        let (nft, save, restore) = (
            format!("{tool}-nft"),
            format!("{tool}-nft-save"),
            format!("{tool}-nft-restore"),
        );
        let ns = Netns::new(&format!("incident{family}"));
        kubelet_chains(&ns, "1.8.9", &nft);
        kube_firewall(&ns, "1.8.9", &nft);
        let v = inspect(&ns);
        assert_eq!(
            v["minReaderVersion"], "1.8.8",
            "1.8.9 wrote a native mark match: {v:#}"
        );
        let mark = v["nativeFeatures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["feature"] == "meta-mark")
            .cloned()
            .unwrap_or_else(|| panic!("no meta-mark: {v:#}"));
        assert_eq!(mark["example"], format!("{family}/filter/KUBE-FIREWALL"));
        assert!(
            codes(&v).is_empty(),
            "the intact rule is not flagged: {v:#}"
        );

        // kube-router/kube-proxy with 1.8.7 does save | restore.
        let saved = ns.iptables_ok("1.8.7", &save, &[]);
        assert!(
            saved.contains(COMMENT) && !saved.contains("--mark"),
            "1.8.7 loses the mark match:\n{saved}"
        );
        netns::check(
            ns.iptables_stdin("1.8.7", &restore, &[], &saved),
            "1.8.7 restore",
        );

        let v = inspect(&ns);
        let h = hazards(&v, "FirewallUnconditionalDrop");
        assert_eq!(h.len(), 1, "{v:#}");
        assert_eq!(h[0]["severity"], "critical");
        assert_eq!(h[0]["backend"], "nft");
        assert_eq!(h[0]["table"], "filter");
        assert_eq!(h[0]["chain"], "KUBE-FIREWALL");
        let message = h[0]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("nft {family}/filter chain KUBE-FIREWALL")),
            "{message}"
        );
        let rule = h[0]["rule"].as_str().unwrap();
        assert!(
            rule.contains(COMMENT) && rule.ends_with("-j DROP"),
            "{rule}"
        );
        assert_eq!(
            codes(&v)[0],
            "FirewallUnconditionalDrop",
            "critical hazards come first"
        );
        assert_eq!(
            v["minReaderVersion"],
            Value::Null,
            "only xt-compat left after 1.8.7's restore"
        );

        // Text output leads with the hazard.
        let root = tempfile::tempdir().unwrap();
        let out = ns.nfguard(&[
            "inspect",
            "node",
            "--host-root",
            root.path().to_str().unwrap(),
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.starts_with("Hazards (1):\n  [Critical] FirewallUnconditionalDrop"),
            "{text}"
        );
    }
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn incident_in_legacy_backend_is_flagged_too() {
    for (tool, family, net) in FAMILIES {
        let legacy = format!("{tool}-legacy");
        let ns = Netns::new(&format!("incleg{family}"));
        kubelet_chains(&ns, "1.8.7", &legacy);
        ns.iptables_ok("1.8.7", &legacy, &["-N", "KUBE-FIREWALL"]);
        let rule = ["-A", "KUBE-FIREWALL", "-m", "comment", "--comment", COMMENT];
        ns.iptables_ok("1.8.7", &legacy, &[&rule[..], &["-j", "REJECT"]].concat());
        let cond = [
            "-A",
            "KUBE-FIREWALL",
            "-s",
            net,
            "-m",
            "comment",
            "--comment",
            "x",
        ];
        ns.iptables_ok("1.8.7", &legacy, &[&cond[..], &["-j", "DROP"]].concat());
        let v = inspect(&ns);
        let h = hazards(&v, "FirewallUnconditionalDrop");
        assert_eq!(h.len(), 1, "only the rule without a real condition: {v:#}");
        assert_eq!(h[0]["backend"], "legacy");
        assert!(h[0]["rule"].as_str().unwrap().ends_with("-j REJECT"));
        let message = h[0]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("legacy {family}/filter chain KUBE-FIREWALL")),
            "{message}"
        );
        assert_eq!(v["activeBackend"], "legacy");
    }
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn port_match_loss_through_old_reader() {
    for (tool, family, _) in FAMILIES {
        let (nft, save) = (format!("{tool}-nft"), format!("{tool}-nft-save"));
        let ns = Netns::new(&format!("portloss{family}"));
        kubelet_chains(&ns, "1.8.11", &nft);
        ns.iptables_ok(
            "1.8.11",
            &nft,
            &["-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "ACCEPT"],
        );
        let v = inspect(&ns);
        assert_eq!(v["minReaderVersion"], "1.8.8", "{v:#}");
        let features: Vec<&str> = v["nativeFeatures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["feature"].as_str().unwrap())
            .collect();
        assert!(features.contains(&"transport-ports"), "{features:?}");
        // Proof of the mapping: 1.8.7 (< 1.8.8) loses the port, 1.8.9 keeps it.
        let old = ns.iptables_ok("1.8.7", &save, &[]);
        assert!(old.contains("-A INPUT -p tcp -j ACCEPT"), "{old}");
        let new = ns.iptables_ok("1.8.9", &save, &[]);
        assert!(
            new.contains("-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT"),
            "{new}"
        );
    }
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn nflog_rule_needs_native_log_reader() {
    let ns = Netns::new("nflog");
    kubelet_chains(&ns, "1.8.9", "iptables-nft");
    ns.iptables_ok(
        "1.8.9",
        "iptables-nft",
        &["-A", "INPUT", "-j", "NFLOG", "--nflog-group", "5"],
    );
    let v = inspect(&ns);
    assert_eq!(v["minReaderVersion"], "1.8.8");
    let log = v["nativeFeatures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["feature"] == "log")
        .cloned()
        .unwrap_or_else(|| panic!("no log feature: {v:#}"));
    assert_eq!(log["example"], "ip/filter/INPUT");
    // 1.8.7 gives up on the whole table, yet exits 0: a restore would wipe it.
    let out = netns::check(
        ns.iptables("1.8.7", "iptables-nft-save", &["-t", "filter"]),
        "1.8.7 save",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("incompatible") && !text.contains("NFLOG"),
        "{text}"
    );
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn legacy_and_nft_both_holding_rules_is_mixed() {
    let ns = Netns::new("mixed");
    kubelet_chains(&ns, "1.8.9", "iptables-nft");
    kube_firewall(&ns, "1.8.9", "iptables-nft");
    // An old component writes its KUBE-* chains through legacy.
    ns.iptables_ok("1.8.7", "iptables-legacy", &["-N", "KUBE-SERVICES"]);
    ns.iptables_ok(
        "1.8.7",
        "iptables-legacy",
        &["-A", "INPUT", "-j", "KUBE-SERVICES"],
    );
    let v = inspect(&ns);
    assert_eq!(v["activeBackend"], "mixed", "{v:#}");
    let h = hazards(&v, "MixedBackends");
    assert_eq!(h.len(), 1);
    assert_eq!(
        h[0]["severity"], "critical",
        "KUBE-* chains in both backends"
    );
    assert!(h[0]["message"].as_str().unwrap().contains("ip/filter"));
    assert_eq!(v["backends"]["legacy"]["rules"], 1);
    assert_eq!(
        v["backends"]["legacy"]["chains"], 4,
        "INPUT, FORWARD, OUTPUT, KUBE-SERVICES"
    );
    assert_eq!(
        v["wrapperBackend"], "nft",
        "the wrapper still follows the nft hint"
    );
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn marker_chains_only_in_legacy_means_legacy() {
    let ns = Netns::new("leg");
    kubelet_chains(&ns, "1.8.9", "iptables-legacy");
    ns.iptables_ok(
        "1.8.9",
        "iptables-legacy",
        &["-A", "INPUT", "-s", "10.0.0.0/8", "-j", "ACCEPT"],
    );
    let v = inspect(&ns);
    assert_eq!(v["activeBackend"], "legacy", "{v:#}");
    assert_eq!(v["wrapperBackend"], "legacy");
    let l = &v["backends"]["legacy"];
    assert_eq!(l["hintChain"], true);
    assert_eq!(l["canaryChain"], true);
    assert_eq!(l["rules"], 1);
    assert_eq!(v["backends"]["nft"]["tables"], 0);
    assert!(codes(&v).is_empty(), "{v:#}");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn marker_chains_only_in_ipv6() {
    let ns = Netns::new("v6");
    kubelet_chains(&ns, "1.8.11", "ip6tables-nft");
    let v = inspect(&ns);
    assert_eq!(v["activeBackend"], "nft", "{v:#}");
    assert_eq!(
        v["backends"]["nft"]["markerTables"],
        serde_json::json!(["ip6/mangle", "ip6/nat", "ip6/filter"])
    );
    assert!(hazards(&v, "KubeletChainsMissing").is_empty());

    // The same in legacy IPv6 only: legacy.
    let ns = Netns::new("v6leg");
    ns.iptables_ok(
        "1.8.9",
        "ip6tables-legacy",
        &["-t", "mangle", "-N", "KUBE-KUBELET-CANARY"],
    );
    let v = inspect(&ns);
    assert_eq!(v["activeBackend"], "legacy", "{v:#}");
    assert_eq!(
        v["backends"]["legacy"]["markerTables"],
        serde_json::json!(["ip6/mangle"])
    );
    assert_eq!(
        ns.read("/proc/net/ip_tables_names").trim(),
        "",
        "no IPv4 legacy table created"
    );
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn no_marker_chains() {
    let ns = Netns::new("nomark");
    // A host with iptables: kubelet would have written the chains.
    let host = netns::installed_host_root("1.8.9", "nft");
    let v = inspect_with_root(&ns, host.path());
    assert_eq!(v["activeBackend"], "none", "{v:#}");
    assert_eq!(v["wrapperBackend"], "nft", "the wrapper's default");
    assert_eq!(hazards(&v, "KubeletChainsMissing").len(), 1);
    assert_eq!(v["kubeletMarkers"]["state"], "missing", "{v:#}");

    ns.iptables_ok("1.8.9", "iptables-nft", &["-A", "FORWARD", "-j", "ACCEPT"]);
    let v = inspect_with_root(&ns, host.path());
    assert_eq!(
        v["activeBackend"], "nft",
        "the only backend holding rules: {v:#}"
    );
    assert_eq!(hazards(&v, "KubeletChainsMissing").len(), 1);
    // Without an iptables command on the host, kubelet writes none on purpose.
    let v = inspect(&ns);
    assert!(hazards(&v, "KubeletChainsMissing").is_empty(), "{v:#}");
    assert_eq!(v["kubeletMarkers"]["state"], "notExpected", "{v:#}");
    assert_eq!(ns.read("/proc/net/ip_tables_names").trim(), "");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn bridge_nf_call_iptables_off_inside_namespace() {
    let ns = Netns::new("bridge");
    let path = "/proc/sys/net/bridge/bridge-nf-call-iptables";
    if ns.exec(&["test", "-e", path]).status.code() != Some(0) {
        let _ = std::process::Command::new("modprobe")
            .arg("br_netfilter")
            .output();
        assert_eq!(
            ns.exec(&["test", "-e", path]).status.code(),
            Some(0),
            "br_netfilter not available and modprobe br_netfilter failed"
        );
    }
    kubelet_chains(&ns, "1.8.9", "iptables-nft");
    let v = inspect(&ns);
    assert_eq!(v["bridge"]["brNetfilter"], true);
    assert!(hazards(&v, "BridgeNetfilterDisabled").is_empty(), "{v:#}");
    ns.exec_ok(&["sh", "-c", &format!("echo 0 > {path}")]);
    let v = inspect(&ns);
    assert_eq!(v["bridge"]["callIptables"], false);
    let h = hazards(&v, "BridgeNetfilterDisabled");
    assert_eq!(h.len(), 1, "{v:#}");
    assert_eq!(h[0]["severity"], "warning");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn as_profile_prints_a_complete_object() {
    let ns = Netns::new("profile");
    kubelet_chains(&ns, "1.8.9", "iptables-nft");
    let root = tempfile::tempdir().unwrap();
    let v = ns.nfguard_json(&[
        "inspect",
        "node",
        "--host-root",
        root.path().to_str().unwrap(),
        "--as-profile",
        "node-a",
    ]);
    assert_eq!(v["apiVersion"], "nfguard.io/v1alpha1");
    assert_eq!(v["kind"], "NodeNetfilterProfile");
    assert_eq!(v["metadata"]["name"], "node-a");
    assert_eq!(v["spec"]["nodeName"], "node-a");
    assert_eq!(v["status"]["activeBackend"], "nft");
    assert!(v["status"]["lastProbeTime"].is_string());
    let p: nfguard::api::NodeNetfilterProfile = serde_json::from_value(v).expect("round trip");
    assert!(p.status.unwrap().backends.unwrap().nft.hint_chain);
    // YAML is the default for --as-profile without -o.
    let out = netns::check(
        ns.nfguard(&[
            "inspect",
            "node",
            "--host-root",
            root.path().to_str().unwrap(),
            "--as-profile",
            "node-a",
        ]),
        "as-profile yaml",
    );
    let y: nfguard::api::NodeNetfilterProfile = serde_yaml::from_slice(&out.stdout).expect("yaml");
    assert_eq!(y.spec.node_name.as_deref(), Some("node-a"));
}

/// Many rules in both backends: multi-datagram nf_tables dumps and a large
/// x_tables blob are read completely and counted exactly.
#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn large_rulesets_are_counted_exactly() {
    let ns = Netns::new("large");
    let chains = 300;
    let mut input =
        String::from("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    for c in 0..chains {
        input.push_str(&format!(":KUBE-SVC-{c} - [0:0]\n"));
    }
    for c in 0..chains {
        input.push_str(&format!(
            "-A INPUT -p tcp --dport {} -j KUBE-SVC-{c}\n",
            1000 + c
        ));
        for r in 0..9 {
            input.push_str(&format!(
                "-A KUBE-SVC-{c} -s 10.{}.{r}.0/24 -m comment --comment \"ep {c}/{r}\" -j ACCEPT\n",
                c % 250
            ));
        }
    }
    input.push_str("COMMIT\n");
    netns::check(
        ns.iptables_stdin("1.8.9", "iptables-nft-restore", &[], &input),
        "nft restore",
    );
    netns::check(
        ns.iptables_stdin("1.8.9", "iptables-legacy-restore", &[], &input),
        "legacy restore",
    );
    let v = inspect(&ns);
    for b in ["nft", "legacy"] {
        assert_eq!(v["backends"][b]["rules"], chains * 10, "{b}: {v:#}");
        assert_eq!(v["backends"][b]["chains"], chains + 3, "{b}");
    }
    assert!(v["probeError"].is_null(), "{v:#}");
}

/// Rules changing during the probe: the generation check / NLM_F_DUMP_INTR
/// restart yields a complete read, never an error or a torn picture.
#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn probe_while_rules_change() {
    let ns = Netns::new("churn");
    let writer = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "sh", "-c"])
        .arg(format!(
            "for i in $(seq 1 300); do {} iptables-nft -A INPUT -p tcp --dport $i -j ACCEPT || exit 1; done",
            netns::release_dir("1.8.9").join("run").display()
        ))
        .spawn()
        .expect("spawn writer");
    let mut writer = scopeguard(writer);
    let mut last = 0;
    for _ in 0..20 {
        let v = inspect(&ns);
        assert!(v["probeError"].is_null(), "{v:#}");
        let rules = v["backends"]["nft"]["rules"].as_u64().unwrap();
        assert!(
            rules >= last,
            "rule count went backwards: {last} -> {rules}"
        );
        last = rules;
    }
    assert!(writer.0.wait().expect("writer").success());
    let v = inspect(&ns);
    assert_eq!(v["backends"]["nft"]["rules"], 300);
}

/// Kills the child if the test panics before waiting for it.
struct Guard(std::process::Child);
impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
fn scopeguard(c: std::process::Child) -> Guard {
    Guard(c)
}

/// Tables iptables does not own (nft-native rule sets) are listed, not counted.
#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn foreign_nft_tables_are_listed_not_counted() {
    let ns = Netns::new("foreign");
    kubelet_chains(&ns, "1.8.9", "iptables-nft");
    ns.exec_ok(&["nft", "add table inet fw; add chain inet fw input { type filter hook input priority 0; }; add rule inet fw input tcp dport 22 drop"]);
    let v = inspect(&ns);
    assert_eq!(
        v["nativeTables"],
        serde_json::json!([{"family": "inet", "name": "fw", "chains": 1, "rules": 1, "sets": 0}]),
        "{v:#}"
    );
    assert_eq!(v["backends"]["nft"]["rules"], 0);
    assert_eq!(v["activeBackend"], "nft");
    assert!(
        v["nativeFeatures"].as_array().unwrap().is_empty(),
        "native rules outside iptables tables do not count"
    );
}

/// Without CAP_NET_ADMIN the probe reports what it could not read and exits 0.
#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn unprivileged_probe_reports_failure_not_crash() {
    let ns = Netns::new("unpriv");
    let out = netns::check(
        ns.exec(&[
            "setpriv",
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_nfguard"),
            "inspect",
            "node",
            "--host-root",
            "/nonexistent",
            "-o",
            "json",
        ]),
        "unprivileged nfguard",
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(hazards(&v, "ProbeFailed").len(), 2, "{v:#}");
    assert!(
        v["probeError"]
            .as_str()
            .is_some_and(|e| e.contains("nft:") && e.contains("legacy:"))
    );
    assert_eq!(
        v["kernel"]["nfTables"], true,
        "EPERM still means nf_tables exists"
    );
    assert!(
        v.get("activeBackend").is_none() && v.get("nativeFeatures").is_none(),
        "{v:#}"
    );
}

/// The reporter DaemonSet runs as root with CAP_NET_ADMIN only (no
/// CAP_NET_RAW): both backends must still be readable with exactly that.
#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn net_admin_alone_reads_both_backends() {
    let ns = Netns::new("netadminonly");
    ns.iptables_ok("1.8.9", "iptables-legacy", &["-N", "KUBE-KUBELET-CANARY"]);
    ns.iptables_ok("1.8.9", "iptables-legacy", &["-A", "INPUT", "-j", "ACCEPT"]);
    let out = netns::check(
        ns.exec(&[
            "setpriv",
            "--inh-caps=-all,+net_admin",
            "--ambient-caps=-all,+net_admin",
            "--bounding-set=-all,+net_admin",
            env!("CARGO_BIN_EXE_nfguard"),
            "inspect",
            "node",
            "-o",
            "json",
        ]),
        "nfguard inspect node with CAP_NET_ADMIN only",
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(v["probeError"].is_null(), "{v:#}");
    assert_eq!(v["backends"]["legacy"]["rules"], 1, "{v:#}");
    assert_eq!(v["backends"]["legacy"]["canaryChain"], true, "{v:#}");
    assert_eq!(v["activeBackend"], "legacy", "{v:#}");
}

// ---- the nodes of 2026: kube-proxy in nftables mode, hosts without iptables ----

/// A ClusterIP that kube-proxy's nftables table routes (kube-dns's), and one it does not.
const DNS_IP: &str = "10.96.0.10";
const OTHER_IP: &str = "10.96.0.99";

/// What kube-proxy 1.34's nftables proxier writes for one ClusterIP Service
/// (kube-system/kube-dns tcp/53) with one endpoint (pkg/proxy/nftables/
/// proxier.go: its base chains, jump chains, the `service-ips` verdict map, a
/// service chain and an endpoint chain), plus an IPv6 table with no Services.
fn kube_proxy_ruleset() -> String {
    let svc = "service-ULMVA6XW-kube-system/kube-dns/tcp/dns-tcp";
    let ep = "endpoint-5OJB2KTY-kube-system/kube-dns/tcp/dns-tcp__10.244.0.2/53";
    let mut r = String::new();
    for (fam, addr) in [("ip", "ipv4_addr"), ("ip6", "ipv6_addr")] {
        r += &format!(
            r#"add table {fam} kube-proxy {{ comment "rules for kube-proxy" ; }}
add chain {fam} kube-proxy filter-prerouting-pre-dnat {{ type filter hook prerouting priority -110 ; }}
add chain {fam} kube-proxy filter-output-pre-dnat {{ type filter hook output priority -110 ; }}
add chain {fam} kube-proxy filter-input {{ type filter hook input priority -110 ; }}
add chain {fam} kube-proxy filter-forward {{ type filter hook forward priority -110 ; }}
add chain {fam} kube-proxy filter-output {{ type filter hook output priority -110 ; }}
add chain {fam} kube-proxy nat-prerouting {{ type nat hook prerouting priority -100 ; }}
add chain {fam} kube-proxy nat-output {{ type nat hook output priority -100 ; }}
add chain {fam} kube-proxy nat-postrouting {{ type nat hook postrouting priority 100 ; }}
add chain {fam} kube-proxy services
add chain {fam} kube-proxy masquerading
add chain {fam} kube-proxy mark-for-masquerade
add chain {fam} kube-proxy cluster-ips-check
add chain {fam} kube-proxy service-endpoints-check
add chain {fam} kube-proxy nodeport-endpoints-check
add chain {fam} kube-proxy firewall-check
add chain {fam} kube-proxy reject-chain
add set {fam} kube-proxy cluster-ips {{ type {addr} ; comment "Active ClusterIPs" ; }}
add map {fam} kube-proxy no-endpoint-services {{ type {addr} . inet_proto . inet_service : verdict ; }}
add map {fam} kube-proxy no-endpoint-nodeports {{ type inet_proto . inet_service : verdict ; }}
add map {fam} kube-proxy firewall-ips {{ type {addr} . inet_proto . inet_service : verdict ; }}
add map {fam} kube-proxy service-ips {{ type {addr} . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }}
add map {fam} kube-proxy service-nodeports {{ type inet_proto . inet_service : verdict ; }}
add rule {fam} kube-proxy filter-prerouting-pre-dnat ct state new jump firewall-check
add rule {fam} kube-proxy filter-output-pre-dnat ct state new jump firewall-check
add rule {fam} kube-proxy filter-input ct state new jump nodeport-endpoints-check
add rule {fam} kube-proxy filter-input ct state new jump service-endpoints-check
add rule {fam} kube-proxy filter-forward ct state new jump service-endpoints-check
add rule {fam} kube-proxy filter-forward ct state new jump cluster-ips-check
add rule {fam} kube-proxy filter-output ct state new jump service-endpoints-check
add rule {fam} kube-proxy filter-output ct state new jump cluster-ips-check
add rule {fam} kube-proxy nat-prerouting jump services
add rule {fam} kube-proxy nat-output jump services
add rule {fam} kube-proxy nat-postrouting jump masquerading
add rule {fam} kube-proxy mark-for-masquerade meta mark set meta mark or 0x4000
add rule {fam} kube-proxy masquerading meta mark and 0x4000 == 0 return
add rule {fam} kube-proxy masquerading meta mark set meta mark xor 0x4000
add rule {fam} kube-proxy masquerading masquerade fully-random
add rule {fam} kube-proxy cluster-ips-check {fam} daddr @cluster-ips reject
add rule {fam} kube-proxy service-endpoints-check {fam} daddr . meta l4proto . th dport vmap @no-endpoint-services
add rule {fam} kube-proxy firewall-check {fam} daddr . meta l4proto . th dport vmap @firewall-ips
add rule {fam} kube-proxy reject-chain reject
add rule {fam} kube-proxy services {fam} daddr . meta l4proto . th dport vmap @service-ips
add rule {fam} kube-proxy services fib daddr type local meta l4proto . th dport vmap @service-nodeports
"#
        );
    }
    r += &format!(
        r#"add rule ip kube-proxy nodeport-endpoints-check ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports
add rule ip kube-proxy cluster-ips-check ip daddr {{ 10.96.0.0/16 }} drop
add chain ip kube-proxy {svc}
add chain ip kube-proxy {ep}
add rule ip kube-proxy {svc} ip daddr {DNS_IP} tcp dport 53 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
add rule ip kube-proxy {svc} numgen random mod 1 vmap {{ 0 : goto {ep} }}
add rule ip kube-proxy {ep} ip saddr 10.244.0.2 jump mark-for-masquerade
add rule ip kube-proxy {ep} meta l4proto tcp dnat to 10.244.0.2:53
add element ip kube-proxy cluster-ips {{ {DNS_IP} }}
add element ip kube-proxy service-ips {{ {DNS_IP} . tcp . 53 : goto {svc} }}
"#
    );
    r
}

fn load_kube_proxy_tables(ns: &Netns) {
    netns::check(
        ns.exec_stdin(&["nft", "-f", "-"], &kube_proxy_ruleset()),
        "nft -f (kube-proxy tables)",
    );
}

/// (chains, rules, named sets and maps) of one table, as `nft -j` lists it.
fn nft_counts(ns: &Netns, family: &str, table: &str) -> (u64, u64, u64) {
    let out = ns.exec_ok(&["nft", "-j", "list", "table", family, table]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("nft -j");
    let objs = v["nftables"].as_array().expect("nftables array");
    let count = |k: &str| objs.iter().filter(|o| o.get(k).is_some()).count() as u64;
    (count("chain"), count("rule"), count("set") + count("map"))
}

/// iptables-mode kube-proxy's Service dispatch for one ClusterIP, written
/// the way kube-proxy writes it (`iptables-restore --noflush`) by a real release.
fn iptables_mode_service(ns: &Netns, release: &str, tool: &str, ip: &str) {
    let svc = "KUBE-SVC-TCOU7JCQXEZGVUNU";
    let rules = format!(
        r#"*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:{svc} - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment "kube-system/kube-dns:dns-tcp cluster IP" -m tcp --dport 53 -j {svc}
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
COMMIT
"#
    );
    netns::check(
        ns.iptables_stdin(release, &format!("{tool}-restore"), &["--noflush"], &rules),
        "iptables-mode KUBE-SERVICES",
    );
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn kube_proxy_nftables_mode_on_a_host_without_iptables() {
    let ns = Netns::new("kpnft");
    load_kube_proxy_tables(&ns);
    let v = inspect(&ns);
    assert_eq!(v["activeBackend"], "nft", "{v:#}");
    assert_eq!(v["kubeProxyMode"], "nftables");
    assert_eq!(v["kubeletMarkers"]["state"], "notExpected");
    assert!(
        v["kubeletMarkers"]["reason"]
            .as_str()
            .unwrap()
            .contains("kubernetes#129826"),
        "{v:#}"
    );
    assert_eq!(codes(&v), Vec::<String>::new(), "no hazard at all: {v:#}");
    assert_eq!(
        v["backends"]["nft"]["tables"], 0,
        "native tables are not iptables'"
    );
    // Counts as the kernel holds them, cross-checked with nft's own listing.
    let ip = nft_counts(&ns, "ip", "kube-proxy");
    let ip6 = nft_counts(&ns, "ip6", "kube-proxy");
    assert_eq!(
        ip,
        (18, 27, 6),
        "18 chains, 27 rules, 6 named sets/maps (anonymous ones not counted)"
    );
    assert_eq!(ip6, (16, 21, 6));
    let t = v["nativeTables"].as_array().expect("nativeTables");
    let got: Vec<(String, u64, u64, u64)> = t
        .iter()
        .map(|t| {
            (
                format!(
                    "{}/{}",
                    t["family"].as_str().unwrap(),
                    t["name"].as_str().unwrap()
                ),
                t["chains"].as_u64().unwrap(),
                t["rules"].as_u64().unwrap(),
                t["sets"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("ip/kube-proxy".to_string(), ip.0, ip.1, ip.2),
            ("ip6/kube-proxy".to_string(), ip6.0, ip6.1, ip6.2),
        ]
    );
    assert!(v.get("nativeTablesNotListed").is_none());

    // The text output says the same.
    let out = netns::check(
        ns.nfguard(&[
            "inspect",
            "node",
            "--host-root",
            tempfile::tempdir().unwrap().path().to_str().unwrap(),
        ]),
        "inspect node (text)",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Active backend:    nft"), "{text}");
    assert!(text.contains("kube-proxy mode:   nftables"), "{text}");
    assert!(text.contains("Kubelet markers:   notExpected ("), "{text}");
    assert!(
        text.contains("  ip/kube-proxy        chains    18  rules      27  sets    6"),
        "{text}"
    );
}

/// kube-proxy's nftables tables plus an iptables-mode Service for `ip`
/// written by a real release: the profile and its one leftovers hazard.
fn with_leftovers(tag: &str, release: &str, tool: &str, ip: &str) -> (Value, String, String) {
    let ns = Netns::new(tag);
    load_kube_proxy_tables(&ns);
    iptables_mode_service(&ns, release, tool, ip);
    let v = inspect(&ns);
    assert_eq!(v["kubeProxyMode"], "mixed", "{v:#}");
    let h = hazards(&v, "KubeProxyModeLeftovers");
    assert_eq!(h.len(), 1, "{v:#}");
    let severity = h[0]["severity"].as_str().unwrap().to_string();
    let message = h[0]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("ip/kube-proxy") && message.contains("kube-proxy --cleanup"),
        "{message}"
    );
    (v, severity, message)
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn kube_proxy_mode_switch_leftovers_on_the_same_cluster_ip_are_critical() {
    let shared = format!("both route Service address(es) {DNS_IP};");
    // The legacy backend's `-d` is read from the x_tables entry header.
    let (_, severity, m) = with_leftovers("kpsameleg", "1.8.7", "iptables-legacy", DNS_IP);
    assert_eq!(severity, "critical", "{m}");
    assert!(
        m.contains("legacy ip/nat KUBE-SERVICES") && m.contains(&shared),
        "{m}"
    );

    // iptables-nft's `-d` is a payload load and an equality compare.
    let (v, severity, m) = with_leftovers("kpsame", "1.8.9", "iptables-nft", DNS_IP);
    assert_eq!(severity, "critical", "{m}");
    assert!(
        m.contains("nft ip/nat KUBE-SERVICES") && m.contains(&shared),
        "{m}"
    );
    // iptables-owned nft rules and native ones, no marker: one backend, nft.
    assert_eq!(v["activeBackend"], "nft");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn kube_proxy_mode_switch_leftovers_on_another_ip_are_a_warning() {
    let (v, severity, m) = with_leftovers("kpother", "1.8.7", "iptables-legacy", OTHER_IP);
    assert_eq!(severity, "warning", "{m}");
    assert!(
        m.contains("legacy ip/nat KUBE-SERVICES") && !m.contains("both route"),
        "{m}"
    );
    // Native rules and legacy rules without markers: mixed.
    assert_eq!(v["activeBackend"], "mixed");
    assert_eq!(v["kubeletMarkers"]["state"], "notExpected");
}
