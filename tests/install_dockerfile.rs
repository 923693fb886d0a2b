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
    for line in logical {
        let (word, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let (word, rest) = (word.to_ascii_uppercase(), rest.trim().to_string());
        if word == "FROM" {
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
