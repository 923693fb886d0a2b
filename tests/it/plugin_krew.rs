//! The krew manifest: plugins/nfguard.yaml is a template with a placeholder
//! for each release fact; plugins/krew-release.sh packages real archives and
//! fills it; krew's own validator (`validate-krew-manifest`, built from the Go
//! module proxy by scripts/go-tool.sh krew) accepts the result, and krew's
//! own installer installs it from a loopback HTTP server for linux/amd64 and
//! linux/arm64, checksums verified, LICENSE extracted, the plugin runnable.
//!
//! krew's validator installs through `kubectl krew install`; the test runs
//! the same `krew install --manifest` directly (no kubectl needed) and then
//! checks what the validator checks (a LICENSE among the installed files).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const VERSION: &str = "v0.1.0";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("runs")
}

/// The directory holding `krew` and `validate-krew-manifest`:
/// $NFGUARD_KREW_TOOLS (scripts/test.sh sets it), else scripts/go-tool.sh krew.
fn krew_tools() -> PathBuf {
    if let Some(dir) = std::env::var_os("NFGUARD_KREW_TOOLS") {
        let dir = PathBuf::from(dir);
        for tool in ["krew", "validate-krew-manifest"] {
            assert!(
                dir.join(tool).is_file(),
                "NFGUARD_KREW_TOOLS={} holds no {tool} (scripts/go-tool.sh krew builds both)",
                dir.display()
            );
        }
        return dir;
    }
    let out = run(Command::new(repo().join("scripts/go-tool.sh")).arg("krew"));
    assert!(
        out.status.success(),
        "krew's tools are needed: set NFGUARD_KREW_TOOLS or let scripts/go-tool.sh krew build them (needs Go and the Go module proxy): {}",
        text(&out.stderr)
    );
    PathBuf::from(text(&out.stdout).trim())
}

/// Package `bin` for linux/amd64 and linux/arm64 into `out`.
fn release(out: &Path, base_url: &str, bin: &Path) -> Output {
    let platform = |p: &str| format!("{p}={}", bin.display());
    run(Command::new(repo().join("plugins/krew-release.sh"))
        .args([VERSION, base_url])
        .arg(out)
        .arg(platform("linux/amd64"))
        .arg(platform("linux/arm64")))
}

fn nfguard() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_nfguard"))
}

/// Serves the files of `dir` under /releases/VERSION/ on loopback.
fn serve_dir(dir: PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/releases", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            serve_file(stream, &dir);
        }
    });
    base
}

fn serve_file(mut stream: TcpStream, dir: &Path) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
        line.clear();
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("");
    let file = path
        .strip_prefix(&format!("/releases/{VERSION}/"))
        .filter(|f| !f.contains('/'))
        .and_then(|f| std::fs::read(dir.join(f)).ok());
    let (status, body) = match file {
        Some(b) => ("200 OK", b),
        None => ("404 Not Found", b"not found".to_vec()),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(&body);
}

fn krew_install(tools: &Path, manifest: &Path, root: &Path, arch: &str) -> Output {
    run(Command::new(tools.join("krew"))
        .args(["install", "--manifest"])
        .arg(manifest)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", root)
        .env("KREW_ROOT", root)
        .env("KREW_OS", "linux")
        .env("KREW_ARCH", arch)
        .env("KREW_NO_UPGRADE_CHECK", "1"))
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    out
}

#[test]
fn template_names_every_release_fact_as_a_placeholder() {
    let raw = std::fs::read_to_string(repo().join("plugins/nfguard.yaml")).unwrap();
    let m: serde_yaml::Value = serde_yaml::from_str(&raw).unwrap();
    assert_eq!(
        m["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(m["kind"], "Plugin");
    assert_eq!(m["metadata"]["name"], "nfguard");
    assert_eq!(m["spec"]["version"], "@VERSION@");
    let platforms = m["spec"]["platforms"].as_sequence().unwrap();
    let mut seen = Vec::new();
    for p in platforms {
        let labels = &p["selector"]["matchLabels"];
        let (os, arch) = (
            labels["os"].as_str().unwrap(),
            labels["arch"].as_str().unwrap(),
        );
        seen.push(format!("{os}/{arch}"));
        assert_eq!(p["bin"], "kubectl-nfguard");
        assert_eq!(
            p["uri"].as_str().unwrap(),
            format!("@BASE_URL@/@VERSION@/kubectl-nfguard_@VERSION@_{os}_{arch}.tar.gz")
        );
        assert_eq!(
            p["sha256"].as_str().unwrap(),
            format!("@SHA256_{}_{}@", os.to_uppercase(), arch.to_uppercase())
        );
        let files: Vec<&str> = p["files"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|f| f["from"].as_str().unwrap())
            .collect();
        assert_eq!(files, ["kubectl-nfguard", "LICENSE"]);
    }
    assert!(
        seen.contains(&"linux/amd64".to_string()) && seen.contains(&"linux/arm64".to_string()),
        "{seen:?}"
    );
}

#[test]
fn release_script_is_reproducible_and_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    // Any executable does for packaging; a small one keeps this quick.
    let tiny = dir.path().join("tiny");
    std::fs::write(&tiny, "#!/bin/sh\necho nfguard\n").unwrap();
    std::fs::set_permissions(&tiny, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for out in [&a, &b] {
        let o = release(out, "https://example.invalid/download", &tiny);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let amd64 = format!("kubectl-nfguard_{VERSION}_linux_amd64.tar.gz");
    assert_eq!(
        std::fs::read(a.join(&amd64)).unwrap(),
        std::fs::read(b.join(&amd64)).unwrap(),
        "same inputs, same archive bytes"
    );
    let manifest = std::fs::read_to_string(a.join("nfguard.yaml")).unwrap();
    assert!(
        !manifest.contains('@') && !manifest.starts_with('#'),
        "{manifest}"
    );
    assert!(manifest.contains(&format!(
        "uri: \"https://example.invalid/download/{VERSION}/{amd64}\""
    )));
    let listing = run(Command::new("tar").arg("-tzf").arg(a.join(&amd64)));
    assert_eq!(text(&listing.stdout), "kubectl-nfguard\nLICENSE\n");

    let bin = format!("linux/amd64={}", tiny.display());
    for (args, says) in [
        (
            vec!["0.1.0", "https://x", "o", &bin],
            "VERSION must look like v0.1.0",
        ),
        (
            vec![VERSION, "ftp://x", "o", &bin],
            "BASE_URL must be an http(s) URL",
        ),
        (
            vec![VERSION, "https://x", "o", &bin],
            "no binary given for: @SHA256_LINUX_ARM64@",
        ),
        (
            vec![VERSION, "https://x", "o", "linux/amd64=/nonexistent"],
            "not an executable file",
        ),
        (
            vec![VERSION, "https://x", "o", "windows/amd64=/bin/sh"],
            "has no platform windows/amd64",
        ),
        (vec![VERSION, "https://x", "o"], "usage:"),
    ] {
        let o = run(Command::new(repo().join("plugins/krew-release.sh"))
            .args(&args)
            .current_dir(dir.path()));
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            text(&o.stderr).contains(says),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
}

#[test]
fn released_manifest_passes_krews_validator_and_installs_on_both_platforms() {
    let tools = krew_tools();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dist");
    std::fs::create_dir(&out).unwrap();
    let base = serve_dir(out.clone());
    let o = release(&out, &base, nfguard());
    assert!(o.status.success(), "{}", text(&o.stderr));
    let manifest = out.join("nfguard.yaml");

    let validate = |path: &Path| {
        run(Command::new(tools.join("validate-krew-manifest"))
            .args(["-skip-install", "-manifest"])
            .arg(path))
    };
    let v = validate(&manifest);
    assert!(v.status.success(), "validator: {}", text(&v.stderr));
    assert!(text(&v.stderr).contains("structural validation OK"));
    // The validator does judge: the unfilled template is refused.
    let v = validate(&repo().join("plugins/nfguard.yaml"));
    assert!(!v.status.success());
    assert!(text(&v.stderr).contains("@VERSION@"), "{}", text(&v.stderr));

    for arch in ["amd64", "arm64"] {
        let root = dir.path().join(format!("krew-{arch}"));
        let o = krew_install(&tools, &manifest, &root, arch);
        assert!(
            o.status.success(),
            "krew install linux/{arch}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        let installed = files_under(&root.join("store/nfguard"));
        assert!(
            installed.contains(&"LICENSE".to_string())
                && installed.contains(&"kubectl-nfguard".to_string()),
            "{installed:?}"
        );
        let bin = root.join("bin/kubectl-nfguard");
        assert!(bin.exists(), "krew links {}", bin.display());
        if arch == "amd64" && cfg!(target_arch = "x86_64") {
            // The installed link is the plugin: its help names kubectl nfguard.
            let help = run(Command::new(&bin).arg("--help"));
            assert!(
                text(&help.stdout).contains("Usage: kubectl nfguard"),
                "{}",
                text(&help.stdout)
            );
        }
    }

    // A wrong checksum is caught by krew's installer.
    let good = std::fs::read_to_string(&manifest).unwrap();
    let sum = good
        .lines()
        .find_map(|l| l.trim().strip_prefix("sha256: \""))
        .map(|s| s.trim_end_matches('"').to_string())
        .unwrap();
    let tampered_dir = dir.path().join("tampered");
    std::fs::create_dir(&tampered_dir).unwrap();
    let tampered = tampered_dir.join("nfguard.yaml");
    std::fs::write(&tampered, good.replace(&sum, &"0".repeat(64))).unwrap();
    let o = krew_install(&tools, &tampered, &dir.path().join("krew-bad"), "amd64");
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).to_lowercase().contains("checksum"),
        "{}",
        text(&o.stderr)
    );
}
