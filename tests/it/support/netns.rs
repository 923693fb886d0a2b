//! Reusable test support: a uniquely named network namespace that is deleted
//! on drop (even when the test fails), real iptables fixture releases run
//! inside it, and the nfguard binary run inside it via `ip netns exec`.
//!
//! Use from a test file with:
//! `use crate::support::netns;` (tests/reporter_bench.rs, a binary of its own: `#[path = "it/support/netns.rs"] mod netns;`)
//! then `let ns = netns::Netns::new("tag");`, in a test marked
//! `#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]`.
//! Such a test never passes without running: plain `cargo test` lists it as
//! ignored (with that reason), scripts/test.sh runs it (nextest
//! `--run-ignored all`), and run without root it fails.
// tests/reporter_bench.rs, a binary of its own, includes this file too and
// uses a part of it.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The iptables releases the fixture script provides (1.8.13 is Debian forky's,
/// run with forky's own libc and loader).
pub const RELEASES: [&str; 4] = ["1.8.7", "1.8.9", "1.8.11", "1.8.13"];

/// `$NFGUARD_FIXTURES`, else `<crate>/target/fixtures`.
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("NFGUARD_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/fixtures"))
}

/// `<fixtures>/iptables/<release>` (holds `root/`, `debs/`, `run`).
pub fn release_dir(release: &str) -> PathBuf {
    fixtures_dir().join("iptables").join(release)
}

/// Panics unless running as root: a privileged test that cannot run fails,
/// it never passes (see the module comment for how such tests are marked).
pub fn require_root(test: &str) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!(
            "{test}: needs root (network namespaces): run scripts/test.sh, \
             or as root: cargo test -- --include-ignored"
        );
    }
}

/// Panics (with the command and its output) unless it exited 0.
pub fn check(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub struct Netns {
    pub name: String,
}

impl Netns {
    /// A fresh namespace named `nfg-<tag>-<pid>-<n>`; panics when not root.
    pub fn new(tag: &str) -> Self {
        require_root(tag);
        let tag: String = tag
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(20)
            .collect();
        let name = format!(
            "nfg-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        check(
            Command::new("ip")
                .args(["netns", "add", &name])
                .output()
                .expect("run ip"),
            &format!("ip netns add {name}"),
        );
        let ns = Netns { name };
        // Loopback up, so tests that send traffic inside the namespace can.
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// `ip netns exec NAME`, with an xtables lock of this namespace's own:
    /// iptables-legacy takes a host-wide flock (/run/xtables.lock) that tests
    /// running in parallel would otherwise fight over ("Another app is
    /// currently holding the xtables lock"), though their tables are separate.
    fn command(&self) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).env(
            "XTABLES_LOCKFILE",
            format!("/run/{}.xtables.lock", self.name),
        );
        cmd
    }

    /// Run `args` inside the namespace.
    pub fn exec(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .output()
            .expect("run ip netns exec")
    }

    pub fn exec_ok(&self, args: &[&str]) -> Output {
        check(self.exec(args), &args.join(" "))
    }

    /// Run `args` inside the namespace with `input` on stdin.
    pub fn exec_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ip netns exec");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("wait")
    }

    /// A fixture release's tool (`iptables-nft`, `ip6tables-legacy-save`, ...) inside the namespace.
    pub fn iptables(&self, release: &str, tool: &str, args: &[&str]) -> Output {
        let run = release_dir(release).join("run");
        let run = run.to_str().expect("utf-8 fixture path");
        let mut all = vec![run, tool];
        all.extend_from_slice(args);
        self.exec(&all)
    }

    /// Like `iptables`, panicking on failure; returns stdout.
    pub fn iptables_ok(&self, release: &str, tool: &str, args: &[&str]) -> String {
        let out = self.iptables(release, tool, args);
        let out = check(out, &format!("{release} {tool} {}", args.join(" ")));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Pipe `input` into a fixture release's tool (e.g. `iptables-nft-restore`).
    pub fn iptables_stdin(&self, release: &str, tool: &str, args: &[&str], input: &str) -> Output {
        let run = release_dir(release).join("run");
        let run = run.to_str().expect("utf-8 fixture path");
        let mut all = vec![run, tool];
        all.extend_from_slice(args);
        self.exec_stdin(&all, input)
    }

    /// The nfguard binary built for this test run, inside the namespace.
    pub fn nfguard(&self, args: &[&str]) -> Output {
        let mut all = vec![env!("CARGO_BIN_EXE_nfguard")];
        all.extend_from_slice(args);
        self.exec(&all)
    }

    /// `nfguard ARGS -o json` inside the namespace, parsed.
    pub fn nfguard_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend_from_slice(&["-o", "json"]);
        let out = check(self.nfguard(&all), &format!("nfguard {}", all.join(" ")));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "nfguard printed no JSON ({e}):\n{}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// Contents of a file under /proc (or any path) as seen from inside the namespace.
    pub fn read(&self, path: &str) -> String {
        String::from_utf8_lossy(&self.exec_ok(&["cat", path]).stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        let _ = std::fs::remove_file(format!("/run/{}.xtables.lock", self.name));
    }
}

/// A node root filesystem with one fixture release installed the way Debian
/// leaves it: the extracted package tree, its dpkg status stanza (from the
/// real .deb's control file) and the alternatives symlinks
/// `/usr/sbin/iptables -> /etc/alternatives/iptables -> /usr/sbin/iptables-<backend>`.
pub fn installed_host_root(release: &str, backend: &str) -> tempfile::TempDir {
    use std::os::unix::fs::symlink;
    let dir = release_dir(release);
    let tmp = copy_of(&dir.join("root"));
    let deb = std::fs::read_dir(dir.join("debs"))
        .expect("debs dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("iptables_"))
        })
        .expect("iptables .deb in fixtures");
    let stanza = installed_stanza(&deb);
    let root = tmp.path();
    std::fs::create_dir_all(root.join("var/lib/dpkg")).unwrap();
    std::fs::write(root.join("var/lib/dpkg/status"), format!("{stanza}\n")).unwrap();
    std::fs::create_dir_all(root.join("etc/alternatives")).unwrap();
    symlink(
        format!("/usr/sbin/iptables-{backend}"),
        root.join("etc/alternatives/iptables"),
    )
    .unwrap();
    let _ = std::fs::remove_file(root.join("usr/sbin/iptables"));
    symlink("/etc/alternatives/iptables", root.join("usr/sbin/iptables")).unwrap();
    tmp
}

/// A private copy of a fixture's extracted tree (tests may change it).
pub fn copy_of(root: &std::path::Path) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    check(
        Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", root.display()))
            .arg(tmp.path())
            .output()
            .expect("cp"),
        "copy fixture root",
    );
    tmp
}

/// A .deb's control stanza as dpkg's `status` records it once installed.
pub fn installed_stanza(deb: &std::path::Path) -> String {
    let control = check(
        Command::new("dpkg-deb")
            .arg("-f")
            .arg(deb)
            .output()
            .expect("dpkg-deb"),
        "dpkg-deb -f",
    );
    let mut stanza = String::new();
    for line in String::from_utf8_lossy(&control.stdout).lines() {
        stanza.push_str(line);
        stanza.push('\n');
        if line.starts_with("Package:") {
            stanza.push_str("Status: install ok installed\n");
        }
    }
    stanza
}

// ---- The rules kubelet and kube-proxy write, for the node scenarios ----

/// The comment of kube-proxy's KUBE-FIREWALL rule.
pub const KUBE_FIREWALL_COMMENT: &str = "block incoming localnet connections";

/// What kubelet creates at start: the hint chain and the canaries.
pub fn kubelet_chains(ns: &Netns, release: &str, tool: &str) {
    ns.iptables_ok(release, tool, &["-t", "mangle", "-N", "KUBE-IPTABLES-HINT"]);
    for table in ["mangle", "nat", "filter"] {
        ns.iptables_ok(release, tool, &["-t", table, "-N", "KUBE-KUBELET-CANARY"]);
    }
}

/// kube-proxy's firewall rule: `-m mark` is a native expression from 1.8.8 on.
pub fn kube_firewall(ns: &Netns, release: &str, tool: &str) {
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
            KUBE_FIREWALL_COMMENT,
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
