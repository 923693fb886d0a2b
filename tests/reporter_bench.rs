//! Reporter benchmark driver (not a test: `#[ignore]`d, run by
//! `scripts/bench-reporter.sh`, which builds the release binary and passes
//! it in NFGUARD_BENCH_BIN). Measures, in one run and one namespace:
//! - resident memory of the idle reporter (VmRSS/VmHWM from /proc/PID/status),
//!   against the peak RSS of a one-shot `nfguard inspect node` of the same
//!   rules (same probe code, no daemon) as the baseline;
//! - change-to-status latency: from the moment a real iptables-nft (1.8.9)
//!   command has committed a rule to the moment the status file shows it,
//!   against the time that iptables command itself took;
//! - the same for x_tables (iptables-legacy), which is polled.
//!
//! It prints figures only; nothing here asserts on time.

#[path = "it/support/netns.rs"]
mod netns;

use netns::Netns;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn proc_status_kib(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Peak RSS (KiB) of a command run to completion, from wait4's rusage.
fn max_rss_kib(mut cmd: Command) -> u64 {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pid of our child, valid pointers.
    let rc = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert!(rc > 0, "wait4");
    // Reaped by wait4 above; forget the handle so it is not waited twice.
    std::mem::forget(child);
    ru.ru_maxrss as u64
}

fn rules(v: &serde_json::Value, backend: &str) -> u64 {
    v["status"]["backends"][backend]["rules"]
        .as_u64()
        .unwrap_or(0)
}

fn read_status(p: &PathBuf) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(p).ok()?).ok()
}

fn wait_rules(p: &PathBuf, backend: &str, want: u64, limit: Duration) -> Instant {
    let start = Instant::now();
    loop {
        if read_status(p).is_some_and(|v| rules(&v, backend) == want) {
            return Instant::now();
        }
        assert!(
            start.elapsed() < limit,
            "{backend} rules never reached {want}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn summary(name: &str, mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(|a, b| a.total_cmp(b));
    let (med, p99) = (pct(&ms, 0.5), pct(&ms, 0.99));
    println!(
        "{name}: n={} median={med:.1} ms p99={p99:.1} ms min={:.1} max={:.1}",
        ms.len(),
        ms[0],
        ms[ms.len() - 1]
    );
    (med, p99)
}

#[test]
#[ignore = "benchmark: run scripts/bench-reporter.sh"]
fn reporter_benchmark() {
    let bin = std::env::var_os("NFGUARD_BENCH_BIN")
        .expect("set NFGUARD_BENCH_BIN to a release nfguard: run scripts/bench-reporter.sh");
    let bin = bin.into_string().expect("utf-8 path");
    let ns = Netns::new("repbench");
    let base_rules = env_num("NFGUARD_BENCH_RULES", 2000);
    let nft_samples = env_num("NFGUARD_BENCH_SAMPLES", 100);
    let legacy_samples = env_num("NFGUARD_BENCH_LEGACY_SAMPLES", 20);

    // A realistic node: kubelet's chains and `base_rules` rules in nft.
    let mut restore = String::from(
        "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n*filter\n:KUBE-KUBELET-CANARY - [0:0]\n:KUBE-SERVICES - [0:0]\n",
    );
    for i in 0..base_rules {
        restore.push_str(&format!(
            "-A KUBE-SERVICES -d 10.96.{}.{}/32 -p tcp -m comment --comment \"svc {i}\" -m tcp --dport {} -j ACCEPT\n",
            (i / 250) % 256,
            i % 250 + 1,
            1024 + i % 60000
        ));
    }
    restore.push_str("COMMIT\n");
    netns::check(
        ns.iptables_stdin("1.8.9", "iptables-nft-restore", &[], &restore),
        "load base rules",
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let status = dir.path().join("status.json");
    let child = Command::new("ip")
        .args(["netns", "exec", &ns.name, &bin])
        .args(["reporter", "--host-root", "/", "--poll-seconds", "1"])
        .args([
            "--heartbeat-seconds",
            "3600",
            "--metrics-listen",
            "127.0.0.1:9090",
            "--metrics-auth",
            "none",
        ])
        .arg("--status-file")
        .arg(&status)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start reporter");
    let pid = child.id();
    let _guard = Kill(child);
    let initial = base_rules as u64;
    wait_rules(&status, "nft", initial, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(3)); // idle: a few polls, no changes
    let rss_idle = proc_status_kib(pid, "VmRSS:");
    let hwm_idle = proc_status_kib(pid, "VmHWM:");

    // Baseline: one-shot probe of the same namespace by the same binary.
    let mut inspect = Command::new("ip");
    inspect.args([
        "netns",
        "exec",
        &ns.name,
        &bin,
        "inspect",
        "node",
        "--host-root",
        "/",
        "-o",
        "json",
    ]);
    let inspect_rss = max_rss_kib(inspect);

    // nf_tables: notification-driven.
    let run = netns::release_dir("1.8.9").join("run");
    let run = run.to_str().expect("utf-8");
    let mut nft_ms = Vec::new();
    let mut cmd_ms = Vec::new();
    for i in 0..nft_samples {
        let port = (20000 + i).to_string();
        let t_start = Instant::now();
        let out = ns.exec(&[
            run,
            "iptables-nft",
            "-A",
            "INPUT",
            "-p",
            "tcp",
            "--dport",
            &port,
            "-j",
            "ACCEPT",
        ]);
        let t_committed = Instant::now();
        netns::check(out, "iptables-nft -A");
        let seen = wait_rules(
            &status,
            "nft",
            initial + i as u64 + 1,
            Duration::from_secs(10),
        );
        nft_ms.push((seen - t_committed).as_secs_f64() * 1e3);
        cmd_ms.push((t_committed - t_start).as_secs_f64() * 1e3);
        // Spread the samples over the debounce window's phases.
        std::thread::sleep(Duration::from_millis(20 + (i as u64 * 7) % 50));
    }

    // x_tables: polled every second.
    let mut legacy_ms = Vec::new();
    for i in 0..legacy_samples {
        let src = format!("10.1.{}.{}", i / 250, i % 250 + 1);
        let out = ns.exec(&[
            run,
            "iptables-legacy",
            "-A",
            "INPUT",
            "-s",
            &src,
            "-j",
            "DROP",
        ]);
        let t_committed = Instant::now();
        netns::check(out, "iptables-legacy -A");
        let seen = wait_rules(&status, "legacy", i as u64 + 1, Duration::from_secs(10));
        legacy_ms.push((seen - t_committed).as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(137 * (i as u64 % 7)));
    }
    let rss_after = proc_status_kib(pid, "VmRSS:");
    let hwm_after = proc_status_kib(pid, "VmHWM:");

    println!("--- reporter benchmark (release binary {bin}) ---");
    println!("base rule set: {base_rules} nft rules + kubelet marker chains");
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "idle reporter: VmRSS {:.1} MiB (VmHWM {:.1} MiB); budget 20 MiB -> {:.2}x of budget",
        mib(rss_idle),
        mib(hwm_idle),
        mib(rss_idle) / 20.0
    );
    println!(
        "baseline one-shot `nfguard inspect node` peak RSS {:.1} MiB -> idle reporter / baseline = {:.2}x",
        mib(inspect_rss),
        rss_idle as f64 / inspect_rss.max(1) as f64
    );
    println!(
        "after {} changes: VmRSS {:.1} MiB (VmHWM {:.1} MiB)",
        nft_samples + legacy_samples,
        mib(rss_after),
        mib(hwm_after)
    );
    let (cmd_med, _) = summary("iptables-nft -A command itself (baseline)", cmd_ms);
    let (med, p99) = summary("nft change -> status file", nft_ms);
    println!(
        "nft latency / iptables command time: median {:.2}x; p99 vs 1 s budget: {:.2}x",
        med / cmd_med.max(0.001),
        p99 / 1000.0
    );
    let (lmed, lp99) = summary("legacy change -> status file (poll 1 s)", legacy_ms);
    println!(
        "legacy latency vs poll interval 1000 ms: median {:.2}x, p99 {:.2}x",
        lmed / 1000.0,
        lp99 / 1000.0
    );
}
