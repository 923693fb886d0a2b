//! A lint of the Dockerfile (hadolint is not in Debian): multi-stage shape, a
//! small final stage that runs as non-root, and no iptables or nft anywhere
//! in the image, since nfguard must never ship them.

use std::path::PathBuf;

fn read(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// One build stage: its FROM line and the instructions under it, with
/// continuation lines joined and comments dropped.
#[derive(Debug)]
struct Stage {
    from: String,
    name: Option<String>,
    instructions: Vec<(String, String)>,
}

fn stages(dockerfile: &str) -> Vec<Stage> {
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                logical.push(std::mem::take(&mut current));
            }
        }
    }
    let mut out: Vec<Stage> = Vec::new();
    // ARGs before the first FROM: their defaults are what FROM names.
    let mut globals: Vec<(String, String)> = Vec::new();
    for line in logical {
        let (word, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let (word, mut rest) = (word.to_ascii_uppercase(), rest.trim().to_string());
        if word == "ARG" && out.is_empty() {
            if let Some((k, v)) = rest.split_once('=') {
                let v = globals.iter().fold(v.to_string(), |v, (gk, gv)| {
                    v.replace(&format!("${{{gk}}}"), gv)
                });
                globals.push((k.to_string(), v));
            }
            continue;
        }
        if word == "FROM" {
            for (k, v) in &globals {
                rest = rest.replace(&format!("${{{k}}}"), v);
            }
            let parts: Vec<&str> = rest.split_whitespace().collect();
            let name = match parts.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                _ => None,
            };
            out.push(Stage {
                from: parts.first().copied().unwrap_or_default().to_string(),
                name,
                instructions: Vec::new(),
            });
        } else if let Some(stage) = out.last_mut() {
            stage.instructions.push((word, rest));
        }
    }
    out
}

#[test]
fn multi_stage_with_small_final_stage() {
    let st = stages(&read("Dockerfile"));
    assert!(
        st.len() >= 2,
        "the Dockerfile must be multi-stage, has {} stage(s)",
        st.len()
    );
    let builder = &st[0];
    assert!(
        builder.from.starts_with("rust:") && builder.from.contains("bookworm"),
        "build on a Debian bookworm Rust image, not {}",
        builder.from
    );
    let runs: String = builder
        .instructions
        .iter()
        .filter(|(w, _)| w == "RUN")
        .map(|(_, r)| r.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        runs.contains("libclang-dev"),
        "the builder installs libclang-dev"
    );
    assert!(
        runs.contains("cargo build") && runs.contains("--release") && runs.contains("--locked"),
        "the builder runs cargo build --release --locked"
    );

    let last = st.last().expect("a final stage");
    assert!(
        last.from.starts_with("gcr.io/distroless/") || last.from.ends_with("-slim"),
        "the final stage must be small (distroless or -slim), is {}",
        last.from
    );
    let builder_name = builder.name.as_deref().expect("the builder stage is named");
    assert!(
        last.instructions.iter().any(|(w, r)| w == "COPY"
            && r.contains(&format!("--from={builder_name}"))
            && r.contains("nfguard")),
        "the final stage copies only the nfguard binary from the builder"
    );
    assert!(
        !last.instructions.iter().any(|(w, _)| w == "RUN"),
        "the final stage runs nothing (no package installs in the runtime image)"
    );
    let entry = last
        .instructions
        .iter()
        .find(|(w, _)| w == "ENTRYPOINT")
        .map(|(_, r)| r.clone())
        .expect("ENTRYPOINT");
    assert!(
        entry.contains("nfguard"),
        "ENTRYPOINT runs nfguard: {entry}"
    );
}

#[test]
fn final_stage_runs_as_non_root() {
    let st = stages(&read("Dockerfile"));
    let last = st.last().expect("a final stage");
    let user = last
        .instructions
        .iter()
        .rev()
        .find(|(w, _)| w == "USER")
        .map(|(_, r)| r.clone())
        .expect("the final stage sets USER");
    let uid = user.split(':').next().unwrap_or_default();
    assert!(
        !matches!(uid, "0" | "root" | ""),
        "the default user must not be root, is {user}"
    );
}

#[test]
fn no_iptables_or_nft_in_the_image() {
    let dockerfile = read("Dockerfile");
    for st in stages(&dockerfile) {
        for (word, rest) in &st.instructions {
            if word != "RUN" && word != "COPY" && word != "ADD" {
                continue;
            }
            let lower = rest.to_ascii_lowercase();
            for banned in [
                "iptables",
                "nftables",
                "nft ",
                "xtables",
                "ebtables",
                "arptables",
            ] {
                assert!(
                    !lower.contains(banned),
                    "stage {:?} {word} mentions {banned:?}: nfguard never ships iptables/nft: {rest}",
                    st.name
                );
            }
        }
    }
    // The build context must not carry the fixture releases into the image either.
    let ignore = read(".dockerignore");
    for must in ["target/", ".git/", "*.deb"] {
        assert!(
            ignore.lines().any(|l| l.trim().ends_with(must)),
            ".dockerignore lacks {must}"
        );
    }
}

#[test]
fn manifests_use_the_image_the_dockerfile_builds() {
    // The image name in manifests/ and the build command documented in the
    // Dockerfile must agree, or `kind load` in e2e/run.sh loads the wrong tag.
    let dockerfile = read("Dockerfile");
    let kustomization = read("manifests/kustomization.yaml");
    assert!(dockerfile.contains("ghcr.io/nfguard/nfguard:dev"));
    assert!(kustomization.contains("name: ghcr.io/nfguard/nfguard"));
    assert!(read("e2e/run.sh").contains("ghcr.io/nfguard/nfguard:dev"));
    // scripts/build-image.sh names its image after the controller's; every
    // component and the chart (repository:appVersion) must name the same.
    let image_of = |rel: &str| -> Vec<String> {
        read(rel)
            .lines()
            .filter_map(|l| l.trim().strip_prefix("image: ").map(str::to_string))
            .collect()
    };
    let controller = image_of("manifests/controller.yaml");
    assert_eq!(controller, ["ghcr.io/nfguard/nfguard:dev"]);
    for rel in ["manifests/reporter.yaml", "manifests/webhook.yaml"] {
        assert_eq!(image_of(rel), controller, "{rel}");
    }
    let values = read("charts/nfguard/values.yaml");
    let chart = read("charts/nfguard/Chart.yaml");
    let repo = values
        .lines()
        .find_map(|l| l.trim().strip_prefix("repository: "))
        .expect("image.repository");
    let app = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion: "))
        .expect("appVersion")
        .trim_matches('"');
    assert_eq!(format!("{repo}:{app}"), controller[0]);
}

#[test]
fn builder_toolchain_matches_the_crates_rust_version() {
    // The lock file is resolved for Cargo.toml's rust-version (MSRV-aware
    // resolver), so the builder must use exactly that toolchain or newer.
    let cargo = read("Cargo.toml");
    let msrv = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("Cargo.toml sets rust-version");
    let dockerfile = read("Dockerfile");
    let arg = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ARG RUST_VERSION="))
        .map(str::trim)
        .expect("Dockerfile has ARG RUST_VERSION=...");
    assert_eq!(
        arg, msrv,
        "Dockerfile's RUST_VERSION must equal Cargo.toml's rust-version"
    );
}

/// The image without Docker (`scripts/build-image.sh`, which the local e2e
/// cluster uses too) is the Dockerfile's runtime stage: the same binary
/// path and mode, user, working directory, environment, entrypoint and
/// ports, distroless's accounts and CA bundle, and no netfilter tools.
#[test]
#[ignore = "needs the image builder's tools (jq, ldd, tar); scripts/test.sh runs it"]
fn build_image_script_builds_the_dockerfiles_runtime_stage() {
    use std::process::Command;
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("image.tar");
    // Any dynamically linked ELF stands in for the release binary.
    let run = Command::new(repo.join("scripts/build-image.sh"))
        .args([
            "--binary",
            "/usr/bin/true",
            "--name",
            "test.invalid/nfguard:recipe",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let layout = tmp.path().join("oci");
    std::fs::create_dir(&layout).unwrap();
    let untar = Command::new("tar")
        .arg("-xf")
        .arg(&out)
        .arg("-C")
        .arg(&layout)
        .status()
        .unwrap();
    assert!(untar.success());
    let blob = |digest: &str| {
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    };
    let json = |p: PathBuf| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let index = json(layout.join("index.json"));
    assert_eq!(
        index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"],
        "test.invalid/nfguard:recipe"
    );
    let manifest = json(blob(index["manifests"][0]["digest"].as_str().unwrap()));
    let config = json(blob(manifest["config"]["digest"].as_str().unwrap()))["config"].clone();

    let st = stages(&read("Dockerfile"));
    let last = st.last().unwrap();
    let one = |word: &str| {
        last.instructions
            .iter()
            .rev()
            .find(|(w, _)| w == word)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("the runtime stage sets {word}"))
    };
    assert_eq!(config["User"], one("USER"));
    assert_eq!(config["WorkingDir"], one("WORKDIR"));
    let entry: serde_json::Value = serde_json::from_str(&one("ENTRYPOINT")).unwrap();
    assert_eq!(config["Entrypoint"], entry);
    let mut ports: Vec<String> = config["ExposedPorts"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    ports.sort();
    let mut want: Vec<String> = one("EXPOSE")
        .split_whitespace()
        .map(|p| format!("{p}/tcp"))
        .collect();
    want.sort();
    assert_eq!(ports, want);
    let env: Vec<&str> = config["Env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for (w, r) in &last.instructions {
        if w == "ENV" {
            assert!(env.contains(&r.as_str()), "Env {env:?} lacks {r}");
        }
    }

    // The files: the COPY destination, executable, and what distroless gives.
    let copy = one("COPY");
    let dest = copy
        .split_whitespace()
        .last()
        .unwrap()
        .trim_start_matches('/');
    let layer = blob(manifest["layers"][0]["digest"].as_str().unwrap());
    let list = Command::new("tar")
        .arg("-tvzf")
        .arg(&layer)
        .output()
        .unwrap();
    assert!(list.status.success());
    let list = String::from_utf8(list.stdout).unwrap();
    let entry_of = |path: &str| {
        list.lines()
            .find(|l| {
                let name = l.split(" -> ").next().unwrap_or(l);
                name.split_whitespace()
                    .last()
                    .map(|n| n.trim_end_matches('/'))
                    == Some(path)
            })
            .unwrap_or_else(|| panic!("{path} missing from the image:\n{list}"))
            .to_string()
    };
    assert!(
        entry_of(dest).starts_with("-rwxr-xr-x"),
        "{}",
        entry_of(dest)
    );
    entry_of("etc/ssl/certs/ca-certificates.crt");
    assert!(entry_of("tmp").starts_with("drwxrwxrwt"));
    assert!(entry_of("home/nonroot").contains("65532/65532"));
    let passwd = Command::new("tar")
        .arg("-xOzf")
        .arg(&layer)
        .arg("etc/passwd")
        .output()
        .unwrap();
    let passwd = String::from_utf8(passwd.stdout).unwrap();
    let uid = one("USER");
    let uid = uid.split(':').next().unwrap();
    assert!(
        passwd.lines().any(|l| l.split(':').nth(2) == Some(uid)),
        "USER {uid} has no account in /etc/passwd: {passwd}"
    );
    for banned in ["iptables", "ip6tables", "nft", "xtables-nft-multi"] {
        assert!(
            !list.lines().any(|l| l
                .split(" -> ")
                .next()
                .unwrap_or(l)
                .ends_with(&format!("/{banned}"))),
            "{banned} in the image"
        );
    }
}
