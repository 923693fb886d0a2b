//! Shared by tests/it/check_ci_*.rs: the fixture fleet and manifests
//! (tests/fixtures/check-ci) copied into a work directory with `REGISTRY`
//! replaced by a real registry on loopback that holds images bundling real
//! Debian iptables releases; the schema validator; the binary.

use crate::support::images;
use crate::support::registry;

use images::{Alt, Compression, ImageConfig, build_layer, debian_iptables, push_image};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/check-ci")
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A work directory holding `fleet/` and `manifests/` (images in `registry`).
pub struct World {
    pub dir: tempfile::TempDir,
    pub registry: registry::Registry,
}

impl World {
    /// Pushes kube-router-old (iptables-nft 1.8.7) and kube-proxy-wrapper
    /// (iptables-wrapper 1.8.9); `not-pushed` stays missing on purpose.
    pub fn new() -> World {
        let registry = registry::Registry::start();
        let host = registry.host();
        let dir = tempfile::tempdir().expect("work dir");
        let layers = dir.path().join(".layers");
        std::fs::create_dir(&layers).unwrap();
        for (repo, version, alt) in [
            ("kube-router-old", "1.8.7", Alt::Nft),
            ("kube-proxy-wrapper", "1.8.9", Alt::Wrapper),
        ] {
            let layer = build_layer(&layers, &debian_iptables(version, alt), Compression::Gzip);
            push_image(&host, repo, "v1", &[layer], &ImageConfig::default());
        }
        for sub in ["fleet", "manifests"] {
            let to = dir.path().join(sub);
            std::fs::create_dir(&to).unwrap();
            for entry in std::fs::read_dir(fixtures().join(sub)).unwrap() {
                let from = entry.unwrap().path();
                let text = std::fs::read_to_string(&from).unwrap();
                std::fs::write(
                    to.join(from.file_name().unwrap()),
                    text.replace("REGISTRY", &host),
                )
                .unwrap();
            }
        }
        World { dir, registry }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn host(&self) -> String {
        self.registry.host()
    }

    /// `nfguard check ARGS` in the work directory with the fleet's files.
    pub fn check(&self, args: &[&str]) -> Output {
        nfguard()
            .current_dir(self.path())
            .arg("check")
            .args(args)
            .args([
                "--profiles",
                "fleet/profiles.yaml",
                "--nodes",
                "fleet/nodes.yaml",
            ])
            .args(["--insecure-registry", &self.host(), "--timeout", "60"])
            .output()
            .expect("run nfguard")
    }

    /// The 1-based line of the first line in `file` (under the work directory)
    /// whose trimmed text is `text`: found independently of nfguard's scanner.
    pub fn line_of(&self, file: &str, text: &str) -> usize {
        let content = std::fs::read_to_string(self.path().join(file)).unwrap();
        content
            .lines()
            .position(|l| l.trim() == text)
            .unwrap_or_else(|| panic!("{text:?} not in {file}"))
            + 1
    }
}

/// The binary with no NFGUARD_* variable leaking in from the environment.
pub fn nfguard() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nfguard"));
    for (k, _) in std::env::vars() {
        if k.starts_with("NFGUARD_") {
            c.env_remove(k);
        }
    }
    c
}

/// Validate `report` (file) against the official schema of `kind`
/// ("junit" or "sarif"); the report's structure as JSON. Fails the test
/// when python3 or its modules are missing: scripts/test.sh installs them.
pub fn validate(kind: &str, report: &Path) -> Result<Value, String> {
    let out = Command::new("python3")
        .arg(fixtures().join("validate.py"))
        .arg(kind)
        .arg(report)
        .output()
        .unwrap_or_else(|e| panic!("python3 is required (scripts/test.sh installs it): {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match out.status.code() {
        Some(0) => Ok(serde_json::from_slice(&out.stdout).expect("validator prints JSON")),
        Some(1) => Err(stderr),
        _ => panic!("the schema validator could not run: {stderr}"),
    }
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}
