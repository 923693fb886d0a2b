//! `nfguard inspect node` against real rule sets: every scenario in its own
//! network namespace, rules written by the real Debian iptables releases,
//! nfguard's JSON asserted.

#[path = "support/netns.rs"]
mod netns;

use netns::Netns;
use serde_json::Value;

const COMMENT: &str = "block incoming localnet connections";

/// Probe with an empty host root, so only the kernel facts speak.
fn inspect(ns: &Netns) -> Value {
    let root = tempfile::tempdir().expect("tempdir");
    ns.nfguard_json(&[
        "inspect",
        "node",
        "--host-root",
        root.path().to_str().unwrap(),
    ])
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

/// What kubelet creates at start: the hint chain and the canaries.
fn kubelet_chains(ns: &Netns, release: &str, tool: &str) {
    ns.iptables_ok(release, tool, &["-t", "mangle", "-N", "KUBE-IPTABLES-HINT"]);
    for table in ["mangle", "nat", "filter"] {
        ns.iptables_ok(release, tool, &["-t", table, "-N", "KUBE-KUBELET-CANARY"]);
    }
}

fn kube_firewall(ns: &Netns, release: &str, tool: &str) {
    ns.iptables_ok(release, tool, &["-N", "KUBE-FIREWALL"]);
    ns.iptables_ok(
        release,
        tool,
        &[
            "-A",
            "KUBE-FIREWALL",
            "-m",
            "comment",
            "--comment",
            COMMENT,
            "-m",
            "mark",
            "--mark",
            "0x8000/0x8000",
            "-j",
            "DROP",
        ],
    );
    ns.iptables_ok(release, tool, &["-A", "INPUT", "-j", "KUBE-FIREWALL"]);
}

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
    let ns = Netns::new("incident");
    kubelet_chains(&ns, "1.8.9", "iptables-nft");
    kube_firewall(&ns, "1.8.9", "iptables-nft");
    // kube-router/kube-proxy with 1.8.7 does save | restore.
    let saved = ns.iptables_ok("1.8.7", "iptables-nft-save", &[]);
    assert!(
        saved.contains(COMMENT) && !saved.contains("--mark"),
        "1.8.7 loses the mark match:\n{saved}"
    );
    netns::check(
        ns.iptables_stdin("1.8.7", "iptables-nft-restore", &[], &saved),
        "1.8.7 restore",
    );

    let v = inspect(&ns);
    let h = hazards(&v, "FirewallUnconditionalDrop");
    assert_eq!(h.len(), 1, "{v:#}");
    assert_eq!(h[0]["severity"], "critical");
    assert_eq!(h[0]["backend"], "nft");
    assert_eq!(h[0]["table"], "filter");
    assert_eq!(h[0]["chain"], "KUBE-FIREWALL");
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

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn incident_in_legacy_backend_is_flagged_too() {
    let ns = Netns::new("incleg");
    kubelet_chains(&ns, "1.8.7", "iptables-legacy");
    ns.iptables_ok("1.8.7", "iptables-legacy", &["-N", "KUBE-FIREWALL"]);
    ns.iptables_ok(
        "1.8.7",
        "iptables-legacy",
        &[
            "-A",
            "KUBE-FIREWALL",
            "-m",
            "comment",
            "--comment",
            COMMENT,
            "-j",
            "REJECT",
        ],
    );
    ns.iptables_ok(
        "1.8.7",
        "iptables-legacy",
        &[
            "-A",
            "KUBE-FIREWALL",
            "-s",
            "10.0.0.0/8",
            "-m",
            "comment",
            "--comment",
            "x",
            "-j",
            "DROP",
        ],
    );
    let v = inspect(&ns);
    let h = hazards(&v, "FirewallUnconditionalDrop");
    assert_eq!(h.len(), 1, "only the rule without a real condition: {v:#}");
    assert_eq!(h[0]["backend"], "legacy");
    assert!(h[0]["rule"].as_str().unwrap().ends_with("-j REJECT"));
    assert_eq!(v["activeBackend"], "legacy");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn port_match_loss_through_old_reader() {
    let ns = Netns::new("portloss");
    kubelet_chains(&ns, "1.8.11", "iptables-nft");
    ns.iptables_ok(
        "1.8.11",
        "iptables-nft",
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
    let old = ns.iptables_ok("1.8.7", "iptables-nft-save", &[]);
    assert!(old.contains("-A INPUT -p tcp -j ACCEPT"), "{old}");
    let new = ns.iptables_ok("1.8.9", "iptables-nft-save", &[]);
    assert!(
        new.contains("-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT"),
        "{new}"
    );
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
    let v = inspect(&ns);
    assert_eq!(v["activeBackend"], "none", "{v:#}");
    assert_eq!(v["wrapperBackend"], "nft", "the wrapper's default");
    assert_eq!(hazards(&v, "KubeletChainsMissing").len(), 1);

    ns.iptables_ok("1.8.9", "iptables-nft", &["-A", "FORWARD", "-j", "ACCEPT"]);
    let v = inspect(&ns);
    assert_eq!(
        v["activeBackend"], "nft",
        "the only backend holding rules: {v:#}"
    );
    assert_eq!(hazards(&v, "KubeletChainsMissing").len(), 1);
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
    assert_eq!(v["otherNftTables"], serde_json::json!(["inet/fw"]), "{v:#}");
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
