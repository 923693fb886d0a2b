//! The real Debian nftables releases fetched by scripts/fetch-nftables.sh,
//! run inside a test's network namespace, and a node root with one of them
//! installed as dpkg leaves it.

use super::netns::{Netns, check, copy_of, fixtures_dir, installed_stanza};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Output};

/// The releases the fixture script provides: bullseye, bookworm, trixie,
/// and forky's (a fixed release >= 1.1.4; its version is in `forky/version`).
pub const RELEASES: [&str; 4] = ["0.9.8", "1.0.6", "1.1.3", "forky"];

/// `<fixtures>/nftables/<release>` (holds `root/`, `debs/`, `run`).
pub fn release_dir(release: &str) -> PathBuf {
    fixtures_dir().join("nftables").join(release)
}

/// The Debian package version of a fixture release ("1.0.6-2+deb12u2").
pub fn package_version(release: &str) -> String {
    let debs = release_dir(release).join("debs");
    let deb = std::fs::read_dir(&debs)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch-nftables.sh)", debs.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libnftables1_"))
        })
        .expect("libnftables1 .deb in fixtures");
    let out = check(
        Command::new("dpkg-deb")
            .args(["-f"])
            .arg(&deb)
            .arg("Version")
            .output()
            .expect("dpkg-deb"),
        "dpkg-deb -f Version",
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `nft ARGS` of a fixture release inside the namespace.
pub fn nft(ns: &Netns, release: &str, args: &[&str]) -> Output {
    let run = release_dir(release).join("run");
    let run = run.to_str().expect("utf-8 fixture path");
    let mut all = vec![run];
    all.extend_from_slice(args);
    ns.exec(&all)
}

/// `nft -f -` of a fixture release with `script`, which must succeed.
pub fn nft_script(ns: &Netns, release: &str, script: &str) {
    let run = release_dir(release).join("run");
    let run = run.to_str().expect("utf-8 fixture path");
    check(
        ns.exec_stdin(&[run, "-f", "-"], script),
        &format!("nft {release} -f: {script}"),
    );
}

/// Whether a command died of SIGSEGV (`ip netns exec` execs it, so the
/// signal reaches the status; a shell in between would say 139).
pub fn segfaulted(out: &Output) -> bool {
    out.status.signal() == Some(libc::SIGSEGV) || out.status.code() == Some(139)
}

/// A node root with a fixture release installed as dpkg leaves it: the
/// extracted tree (nft, libnftables) and the status stanzas of its debs.
pub fn installed_root(release: &str) -> tempfile::TempDir {
    let dir = release_dir(release);
    let tmp = copy_of(&dir.join("root"));
    let mut status = String::new();
    for deb in std::fs::read_dir(dir.join("debs")).expect("debs dir") {
        status.push_str(&installed_stanza(&deb.expect("entry").path()));
        status.push('\n');
    }
    let root = tmp.path();
    std::fs::create_dir_all(root.join("var/lib/dpkg")).unwrap();
    std::fs::write(root.join("var/lib/dpkg/status"), status).unwrap();
    tmp
}
