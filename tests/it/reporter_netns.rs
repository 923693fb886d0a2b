//! `nfguard reporter` against real kernels: the binary runs inside a fresh
//! network namespace with the file sink (`--status-file`), real Debian
//! iptables releases change the rules, and the test watches the status file.
//! nf_tables changes must show within 1 s with polling and heartbeat set to
//! an hour (so only the netlink notification can explain the update);
//! x_tables changes within the poll interval.

use crate::support::netns;

use netns::Netns;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The reporter running inside a namespace; killed on drop, even on failure.
struct Reporter {
    child: Child,
    status: PathBuf,
    _dir: tempfile::TempDir,
}

impl Reporter {
    fn start(ns: &Netns, extra: &[&str]) -> Reporter {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = dir.path().join("status.json");
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_nfguard")])
            .args(["--log", "warn", "reporter", "--host-root", "/"])
            .arg("--status-file")
            .arg(&status)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nfguard reporter");
        let r = Reporter {
            child,
            status,
            _dir: dir,
        };
        r.wait_for(Duration::from_secs(30), "the first status", |_| true);
        r
    }

    fn read(&self) -> Option<Value> {
        let text = std::fs::read(&self.status).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Polls the status file every 2 ms until `pred` holds; returns the
    /// status and how long it took.
    fn wait_for(
        &self,
        limit: Duration,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> (Value, Duration) {
        let start = Instant::now();
        loop {
            if let Some(v) = self.read().filter(|v| pred(v)) {
                return (v, start.elapsed());
            }
            if start.elapsed() > limit {
                panic!(
                    "{what}: not in the status file within {limit:?}; last: {}",
                    self.read().map(|v| v.to_string()).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rules(v: &Value, backend: &str) -> u64 {
    v["status"]["backends"][backend]["rules"]
        .as_u64()
        .unwrap_or(0)
}

fn has_hazard(v: &Value, code: &str) -> bool {
    v["status"]["hazards"]
        .as_array()
        .is_some_and(|a| a.iter().any(|h| h["code"] == code))
}

const HOUR: &[&str] = &[
    "--poll-seconds",
    "3600",
    "--heartbeat-seconds",
    "3600",
    "--metrics-listen",
    "off",
];

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn nft_rule_change_reaches_the_status_within_one_second() {
    let ns = Netns::new("repnft");
    let rep = Reporter::start(&ns, HOUR);
    let (first, _) = rep.wait_for(Duration::from_secs(1), "first", |_| true);
    assert_eq!(first["kind"], "NodeNetfilterProfile");
    assert!(first["status"]["lastProbeTime"].is_string());
    assert_eq!(first["status"]["probeIntervalSeconds"], 3600);
    assert!(
        first["status"].get("writers").is_none() && first["status"].get("conditions").is_none()
    );
    let before = rules(&first, "nft");
    let mut latencies = Vec::new();
    for i in 0..5u64 {
        let port = (8000 + i).to_string();
        ns.iptables_ok(
            "1.8.9",
            "iptables-nft",
            &["-A", "INPUT", "-p", "tcp", "--dport", &port, "-j", "ACCEPT"],
        );
        let want = before + i + 1;
        let (v, took) = rep.wait_for(Duration::from_secs(10), "the new nft rule", |v| {
            rules(v, "nft") == want
        });
        assert_eq!(
            v["status"]["minReaderVersion"], "1.8.8",
            "native port match written by 1.8.9"
        );
        latencies.push(took);
    }
    println!("nft change-to-status latencies: {latencies:?}");
    for took in latencies {
        assert!(took < Duration::from_secs(1), "took {took:?}");
    }
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn incident_restore_burst_shows_unconditional_drop_hazard_within_one_second() {
    let ns = Netns::new("repincident");
    let rep = Reporter::start(&ns, HOUR);
    ns.iptables_ok("1.8.9", "iptables-nft", &["-N", "KUBE-FIREWALL"]);
    ns.iptables_ok(
        "1.8.9",
        "iptables-nft",
        &[
            "-A",
            "KUBE-FIREWALL",
            "-m",
            "comment",
            "--comment",
            "block incoming localnet connections",
            "-m",
            "mark",
            "--mark",
            "0x8000/0x8000",
            "-j",
            "DROP",
        ],
    );
    rep.wait_for(Duration::from_secs(2), "KUBE-FIREWALL rule", |v| {
        rules(v, "nft") == 1
    });
    let (v, _) = rep.wait_for(Duration::from_secs(1), "current", |_| true);
    assert!(!has_hazard(&v, "FirewallUnconditionalDrop"), "{v}");
    // The old reader's save | restore (one restore = a burst of notifications).
    let saved = ns.iptables_ok("1.8.7", "iptables-nft-save", &[]);
    netns::check(
        ns.iptables_stdin("1.8.7", "iptables-nft-restore", &[], &saved),
        "1.8.7 restore",
    );
    let (v, took) = rep.wait_for(Duration::from_secs(10), "FirewallUnconditionalDrop", |v| {
        has_hazard(v, "FirewallUnconditionalDrop")
    });
    println!("incident reported after {took:?}");
    assert!(took < Duration::from_secs(1), "took {took:?}: {v}");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn legacy_changes_are_polled_and_unchanged_state_is_not_rewritten() {
    let ns = Netns::new("replegacy");
    let rep = Reporter::start(
        &ns,
        &[
            "--poll-seconds",
            "1",
            "--heartbeat-seconds",
            "3600",
            "--metrics-listen",
            "off",
        ],
    );
    let (first, _) = rep.wait_for(Duration::from_secs(1), "first", |_| true);
    // Several polls of an unchanged node: the file is not rewritten.
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let m0 = mtime(&rep.status);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(mtime(&rep.status), m0, "status rewritten without a change");
    assert_eq!(
        rep.read().unwrap()["status"]["lastProbeTime"],
        first["status"]["lastProbeTime"]
    );

    ns.iptables_ok(
        "1.8.9",
        "iptables-legacy",
        &["-A", "INPUT", "-s", "10.0.0.1", "-j", "DROP"],
    );
    let (v, took) = rep.wait_for(Duration::from_secs(10), "the legacy rule", |v| {
        rules(v, "legacy") == 1
    });
    println!("legacy change-to-status latency: {took:?}");
    assert!(took < Duration::from_secs(2), "poll is 1 s, took {took:?}");
    assert_eq!(v["status"]["backends"]["legacy"]["tables"], 1);

    // The same number of chains and rules, different contents: the
    // poll compares the rules themselves, so the new hazard is reported.
    let mark_drop = [
        "-m",
        "comment",
        "--comment",
        "fw",
        "-m",
        "mark",
        "--mark",
        "0x8000/0x8000",
        "-j",
        "DROP",
    ];
    ns.iptables_ok("1.8.9", "iptables-legacy", &["-N", "KUBE-FIREWALL"]);
    let mut add = vec!["-A", "KUBE-FIREWALL"];
    add.extend_from_slice(&mark_drop);
    ns.iptables_ok("1.8.9", "iptables-legacy", &add);
    rep.wait_for(Duration::from_secs(3), "KUBE-FIREWALL", |v| {
        rules(v, "legacy") == 2
    });
    ns.iptables_ok(
        "1.8.9",
        "iptables-legacy",
        &[
            "-R",
            "KUBE-FIREWALL",
            "1",
            "-m",
            "comment",
            "--comment",
            "fw",
            "-j",
            "DROP",
        ],
    );
    let (v, _) = rep.wait_for(Duration::from_secs(3), "the in-place replacement", |v| {
        has_hazard(v, "FirewallUnconditionalDrop")
    });
    assert_eq!(rules(&v, "legacy"), 2);

    // A sysctl (no notifications either) is polled too.
    ns.exec_ok(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    rep.wait_for(Duration::from_secs(3), "ipForward true", |v| {
        v["status"]["ipForward"] == true
    });
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn once_writes_one_status_and_stdout_sink_prints_json_lines() {
    let ns = Netns::new("reponce");
    ns.iptables_ok(
        "1.8.11",
        "iptables-nft",
        &["-t", "mangle", "-N", "KUBE-IPTABLES-HINT"],
    );
    let out = netns::check(
        ns.nfguard(&[
            "reporter",
            "--host-root",
            "/",
            "--status-file",
            "-",
            "--once",
            "--node-name",
            "n1",
        ]),
        "reporter --once",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: Value = serde_json::from_str(lines[0]).expect("JSON line");
    assert_eq!(v["metadata"]["name"], "n1");
    assert_eq!(v["status"]["backends"]["nft"]["hintChain"], true);
    assert_eq!(v["status"]["activeBackend"], "nft");
    // The host's own iptables (this machine's root) was probed.
    assert!(v["status"]["iptables"]["version"].is_string(), "{v}");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn metrics_health_and_readiness_are_served() {
    let ns = Netns::new("repmetrics");
    // The namespace has its own loopback, so the port cannot clash.
    // Unchecked metrics (no API server here) are allowed on loopback only;
    // the kubelet's probes have their own port.
    let _rep = Reporter::start(
        &ns,
        &[
            "--metrics-listen",
            "127.0.0.1:9090",
            "--metrics-auth",
            "none",
            "--health-listen",
            "127.0.0.1:9091",
        ],
    );
    let get = |path: &str| {
        let port = if path == "/metrics" { 9090 } else { 9091 };
        let url = format!("http://127.0.0.1:{port}{path}");
        let out = ns.exec(&["curl", "-s", "-o", "-", "-w", "\n%{http_code}", &url]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let start = Instant::now();
    let mut ready = get("/readyz");
    while !ready.ends_with("200") && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
        ready = get("/readyz");
    }
    assert!(ready.ends_with("200"), "{ready}");
    assert!(get("/healthz").ends_with("200"));
    let metrics = get("/metrics");
    assert!(
        metrics.contains("nfguard_reporter_status_writes_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("nfguard_reporter_probes_total"),
        "{metrics}"
    );
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn without_notifications_nft_changes_are_found_by_polling_the_generation() {
    let ns = Netns::new("repnonotify");
    let rep = Reporter::start(
        &ns,
        &[
            "--no-nft-notifications",
            "--poll-seconds",
            "1",
            "--heartbeat-seconds",
            "3600",
            "--metrics-listen",
            "off",
        ],
    );
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let m0 = mtime(&rep.status);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(mtime(&rep.status), m0, "unchanged generation: no rewrite");
    ns.iptables_ok("1.8.11", "iptables-nft", &["-A", "OUTPUT", "-j", "ACCEPT"]);
    let (_, took) = rep.wait_for(Duration::from_secs(10), "the nft rule via polling", |v| {
        rules(v, "nft") == 1
    });
    println!("nft change found by polling after {took:?}");
}
