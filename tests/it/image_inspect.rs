//! `nfguard inspect image` end to end: real images laid out from the real
//! Debian iptables packages, pushed to a real `docker-registry` on loopback,
//! inspected through the CLI binary, with assertions on the JSON.

use crate::support::images;
use crate::support::registry;

use assert_cmd::Command;
use images::*;
use registry::Registry;
use serde_json::Value;
use std::path::Path;

use images::inspect_cli as inspect;

fn ok(reg: &str, reference: &str, extra: &[&str]) -> Value {
    let r = inspect(reg, reference, extra);
    assert_eq!(r.code, 0, "inspect {reference} failed: {}", r.stderr);
    r.json
}

fn base_layer(work: &Path) -> Blob {
    build_layer(
        work,
        &[
            dir("/etc"),
            file(
                "/etc/os-release",
                "PRETTY_NAME=\"Debian GNU/Linux\"\nID=debian\n",
            ),
            dir("/usr"),
            dir("/usr/bin"),
            exe("/usr/bin/true", "#!/bin/sh\n"),
        ],
        Compression::Gzip,
    )
}

fn deb_version(version: &str) -> String {
    let out = std::process::Command::new("dpkg-deb")
        .args(["-f"])
        .arg(deb(version, "iptables"))
        .arg("Version")
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn sources(facts: &Value) -> Vec<String> {
    facts["evidence"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["source"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A Debian image with the real release `version` and default `alt`.
fn debian_image(reg: &Registry, work: &Path, repo: &str, version: &str, alt: Alt) -> Pushed {
    let layers = [
        base_layer(work),
        build_layer(work, &debian_iptables(version, alt), Compression::Gzip),
    ];
    push_image(&reg.host(), repo, "v1", &layers, &ImageConfig::default())
}

fn check_debian(version: &str, alt: Alt, backend: &str) {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let img = debian_image(&reg, work.path(), "debian-iptables", version, alt);
    let out = ok(&reg.host(), &img.reference, &[]);
    println!("{out:#}"); // shown with --nocapture: a real example output
    assert_eq!(out["image"], img.reference.as_str());
    assert_eq!(out["digest"], img.digest.as_str());
    assert_eq!(out["platform"], "linux/amd64");
    let f = &out["iptables"];
    assert_eq!(f["version"], version, "{out:#}");
    assert_eq!(f["backend"], backend, "{out:#}");
    assert_eq!(
        f["packageVersion"],
        deb_version(version).as_str(),
        "{out:#}"
    );
    let s = sources(f);
    assert!(s.iter().any(|x| x == "dpkg"), "{out:#}");
    assert!(s.iter().any(|x| x == "binary"), "{out:#}");
}

#[test]
fn debian_1_8_7_nft() {
    check_debian("1.8.7", Alt::Nft, "nft");
}

#[test]
fn debian_1_8_9_nft() {
    check_debian("1.8.9", Alt::Nft, "nft");
}

#[test]
fn debian_1_8_11_nft() {
    check_debian("1.8.11", Alt::Nft, "nft");
}

#[test]
fn debian_1_8_9_legacy_default() {
    check_debian("1.8.9", Alt::Legacy, "legacy");
}

#[test]
fn debian_1_8_7_legacy_default() {
    check_debian("1.8.7", Alt::Legacy, "legacy");
}

#[test]
fn debian_1_8_11_wrapper_default() {
    check_debian("1.8.11", Alt::Wrapper, "wrapper");
}

#[test]
fn distroless_status_d() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let layers = [build_layer(
        work.path(),
        &distroless_iptables("1.8.11", Alt::Wrapper),
        Compression::Gzip,
    )];
    let img = push_image(
        &reg.host(),
        "distroless",
        "v1",
        &layers,
        &ImageConfig::default(),
    );
    let out = ok(&reg.host(), &img.reference, &[]);
    let f = &out["iptables"];
    assert_eq!(f["version"], "1.8.11", "{out:#}");
    assert_eq!(f["backend"], "wrapper", "{out:#}");
    assert_eq!(
        f["packageVersion"],
        deb_version("1.8.11").as_str(),
        "{out:#}"
    );
    let paths: Vec<&str> = f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert!(
        paths.iter().any(|p| p.contains("/var/lib/dpkg/status.d/")),
        "{out:#}"
    );
}

#[test]
fn binaries_without_package_database() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let layers = [
        base_layer(work.path()),
        build_layer(
            work.path(),
            &bare_iptables("1.8.7", Alt::Legacy),
            Compression::None,
        ),
    ];
    let img = push_image(&reg.host(), "bare", "v1", &layers, &ImageConfig::default());
    let out = ok(&reg.host(), &img.reference, &[]);
    let f = &out["iptables"];
    assert_eq!(f["version"], "1.8.7", "{out:#}");
    assert_eq!(f["backend"], "legacy", "{out:#}");
    assert!(
        f.get("packageVersion").is_none_or(Value::is_null),
        "{out:#}"
    );
    assert!(sources(f).iter().any(|s| s == "binary"), "{out:#}");
    assert!(!sources(f).iter().any(|s| s == "dpkg"), "{out:#}");
}

#[test]
fn purge_in_upper_layer_hides_iptables() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let lower = build_layer(
        work.path(),
        &debian_iptables("1.8.9", Alt::Nft),
        Compression::Gzip,
    );
    // What `apt-get purge iptables` leaves in the next layer: whiteouts for
    // the package's files and a status file without it.
    let mut purge = vec![
        dir("/usr"),
        dir("/usr/sbin"),
        dir("/etc"),
        dir("/etc/alternatives"),
        dir("/var"),
        dir("/var/lib"),
        dir("/var/lib/dpkg"),
        file(
            "/var/lib/dpkg/status",
            "Package: base-files\nStatus: install ok installed\nVersion: 12.4\n\n",
        ),
    ];
    for entry in std::fs::read_dir(iptables_release("1.8.9").join("root/usr/sbin")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        purge.push(whiteout(&format!("/usr/sbin/{name}")));
    }
    for tool in ["iptables", "iptables-save", "iptables-restore"] {
        purge.push(whiteout(&format!("/usr/sbin/{tool}")));
        purge.push(whiteout(&format!("/etc/alternatives/{tool}")));
    }
    let upper = build_layer(work.path(), &purge, Compression::Gzip);
    let img = push_image(
        &reg.host(),
        "purged",
        "v1",
        &[lower, upper],
        &ImageConfig::default(),
    );
    let out = ok(&reg.host(), &img.reference, &[]);
    assert!(
        out["iptables"].is_null(),
        "purged image still reports iptables: {out:#}"
    );
}

#[test]
fn opaque_directory_replaces_lower_contents() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let lower = build_layer(
        work.path(),
        &debian_iptables("1.8.9", Alt::Nft),
        Compression::Gzip,
    );
    // Upper: /usr/sbin and /var/lib/dpkg are opaque; only 1.8.7 binaries remain.
    let mut top = vec![dir("/usr"), dir("/usr/sbin"), opaque("/usr/sbin")];
    top.extend(bare_iptables("1.8.7", Alt::Legacy));
    top.extend([
        dir("/var"),
        dir("/var/lib"),
        dir("/var/lib/dpkg"),
        opaque("/var/lib/dpkg"),
    ]);
    let upper = build_layer(work.path(), &top, Compression::Zstd);
    let img = push_image(
        &reg.host(),
        "opaque",
        "v1",
        &[lower, upper],
        &ImageConfig::default(),
    );
    let out = ok(&reg.host(), &img.reference, &[]);
    let f = &out["iptables"];
    assert_eq!(f["version"], "1.8.7", "{out:#}");
    assert_eq!(f["backend"], "legacy", "{out:#}");
    assert!(
        f.get("packageVersion").is_none_or(Value::is_null),
        "{out:#}"
    );
}

#[test]
fn alpine_apk_database() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let bin =
        std::fs::read(iptables_release("1.8.11").join("root/usr/sbin/xtables-nft-multi")).unwrap();
    let installed = "C:Q1abc=\nP:musl\nV:1.2.5-r0\nA:x86_64\n\nC:Q1def=\nP:iptables\nV:1.8.11-r1\nA:x86_64\nT:Linux kernel firewall, NAT and packet mangling tools\n\n";
    let layers = [build_layer(
        work.path(),
        &[
            dir("/sbin"),
            exe("/sbin/xtables-nft-multi", bin),
            symlink("/sbin/iptables", "xtables-nft-multi"),
            symlink("/sbin/iptables-save", "xtables-nft-multi"),
            dir("/lib"),
            dir("/lib/apk"),
            dir("/lib/apk/db"),
            file("/lib/apk/db/installed", installed),
        ],
        Compression::Gzip,
    )];
    let img = push_image(
        &reg.host(),
        "alpine",
        "3.21",
        &layers,
        &ImageConfig::default(),
    );
    let out = ok(&reg.host(), &img.reference, &[]);
    let f = &out["iptables"];
    assert_eq!(f["version"], "1.8.11", "{out:#}");
    assert_eq!(f["backend"], "nft", "{out:#}");
    assert_eq!(f["packageVersion"], "1.8.11-r1", "{out:#}");
    assert!(sources(f).iter().any(|s| s == "apk"), "{out:#}");
}

#[test]
fn no_iptables_at_all() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let img = push_image(
        &reg.host(),
        "plain",
        "v1",
        &[base_layer(work.path())],
        &ImageConfig::default(),
    );
    let out = ok(&reg.host(), &img.reference, &[]);
    assert_eq!(out["digest"], img.digest.as_str());
    assert!(out["iptables"].is_null(), "{out:#}");
    // Text output works too.
    let text = Command::cargo_bin("nfguard")
        .unwrap()
        .args([
            "inspect",
            "image",
            &img.reference,
            "--insecure-registry",
            &reg.host(),
        ])
        .output()
        .unwrap();
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("iptables: none"));
}

#[test]
fn label_declaration() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let mut config = ImageConfig::default();
    config
        .labels
        .insert("io.nfguard.iptables.version".into(), "1.8.9".into());
    config
        .labels
        .insert("io.nfguard.iptables.backend".into(), "legacy".into());
    let img = push_image(
        &reg.host(),
        "labelled",
        "v1",
        &[base_layer(work.path())],
        &config,
    );
    let out = ok(&reg.host(), &img.reference, &[]);
    let f = &out["iptables"];
    assert_eq!(f["version"], "1.8.9", "{out:#}");
    assert_eq!(f["backend"], "legacy", "{out:#}");
    assert!(sources(f).iter().any(|s| s == "label"), "{out:#}");
}

#[test]
fn multi_arch_index_platforms_differ() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let amd = push_image(
        &reg.host(),
        "multi",
        "amd64",
        &[build_layer(
            work.path(),
            &debian_iptables("1.8.9", Alt::Nft),
            Compression::Gzip,
        )],
        &ImageConfig::default(),
    );
    let arm_config = ImageConfig {
        architecture: "arm64".into(),
        ..Default::default()
    };
    let arm = push_image(
        &reg.host(),
        "multi",
        "arm64",
        &[build_layer(
            work.path(),
            &debian_iptables("1.8.7", Alt::Legacy),
            Compression::Gzip,
        )],
        &arm_config,
    );
    push_index(&reg.host(), "multi", "v1", &[&amd, &arm]);
    let reference = format!("{}/multi:v1", reg.host());

    let a = ok(&reg.host(), &reference, &["--platform", "linux/amd64"]);
    assert_eq!(a["digest"], amd.digest.as_str());
    assert_eq!(a["platform"], "linux/amd64");
    assert_eq!(a["iptables"]["version"], "1.8.9", "{a:#}");
    assert_eq!(a["iptables"]["backend"], "nft", "{a:#}");

    let b = Command::cargo_bin("nfguard")
        .unwrap()
        .args(["inspect", "image", &reference, "-o", "json"])
        .env("NFGUARD_PLATFORM", "linux/arm64")
        .env("NFGUARD_INSECURE_REGISTRIES", reg.host())
        .output()
        .unwrap();
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let b: Value = serde_json::from_slice(&b.stdout).unwrap();
    assert_eq!(b["digest"], arm.digest.as_str());
    assert_eq!(b["platform"], "linux/arm64");
    assert_eq!(b["iptables"]["version"], "1.8.7", "{b:#}");
    assert_eq!(b["iptables"]["backend"], "legacy", "{b:#}");

    let none = inspect(&reg.host(), &reference, &["--platform", "linux/s390x"]);
    assert_eq!(none.code, 2);
    assert!(
        none.stderr.contains("no manifest for platform linux/s390x")
            && none.stderr.contains("linux/arm64"),
        "{}",
        none.stderr
    );
}

#[test]
fn big_lower_layer_is_not_downloaded() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let big = build_layer(
        work.path(),
        &[
            dir("/opt"),
            Entry::Random {
                path: "/opt/blob.bin".into(),
                size: 250 << 20,
                seed: 7,
            },
        ],
        Compression::Zstd,
    );
    assert!(big.size > 250 << 20, "the big layer must be incompressible");
    // The top layer's whole dpkg `status` settles iptables and "no nftables".
    let top = build_layer(
        work.path(),
        &debian_iptables("1.8.9", Alt::Nft),
        Compression::Gzip,
    );
    let img = push_image(
        &reg.host(),
        "big",
        "v1",
        &[big.clone(), top],
        &ImageConfig::default(),
    );
    std::fs::remove_file(&big.path).ok();

    let r = inspect(&reg.host(), &img.reference, &["--stats"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["iptables"]["version"], "1.8.9", "{:#}", r.json);
    assert_eq!(r.json["iptables"]["backend"], "nft", "{:#}", r.json);
    assert_eq!(
        reg.blob_gets(&big.digest),
        0,
        "the 250 MB layer was requested"
    );
    let stats: Value = serde_json::from_str(r.stderr.lines().last().unwrap()).unwrap();
    let fetched = stats["bytesFetched"].as_u64().unwrap();
    let total = stats["imageBytes"].as_u64().unwrap();
    assert!(fetched * 20 < total, "fetched {fetched} of {total} bytes");
    assert_eq!(stats["layersFetched"], 1, "{stats}");
}

#[test]
fn docker_config_basic_auth() {
    let mut reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let img = debian_image(&reg, work.path(), "private", "1.8.9", Alt::Nft);
    reg.restart_with_basic_auth("alice", "s3cret");

    // Anonymous: refused with a clear cause.
    let anon = inspect(&reg.host(), &img.reference, &[]);
    assert_eq!(anon.code, 2, "{}", anon.stderr);
    assert!(anon.stderr.contains("credentials"), "{}", anon.stderr);

    // `auths.<host>.auth` via --docker-config (a directory holding config.json).
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret");
    let cfg_dir = work.path().join("docker");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    std::fs::write(
        cfg_dir.join("config.json"),
        format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, reg.host()),
    )
    .unwrap();
    let out = ok(
        &reg.host(),
        &img.reference,
        &["--docker-config", cfg_dir.to_str().unwrap()],
    );
    assert_eq!(out["iptables"]["version"], "1.8.9", "{out:#}");

    // username/password fields via $DOCKER_CONFIG.
    let env_dir = work.path().join("envdocker");
    std::fs::create_dir_all(&env_dir).unwrap();
    std::fs::write(
        env_dir.join("config.json"),
        format!(
            r#"{{"auths":{{"http://{}/":{{"username":"alice","password":"s3cret"}}}}}}"#,
            reg.host()
        ),
    )
    .unwrap();
    let via_env = Command::cargo_bin("nfguard")
        .unwrap()
        .args([
            "inspect",
            "image",
            &img.reference,
            "--insecure-registry",
            &reg.host(),
            "-o",
            "json",
        ])
        .env("DOCKER_CONFIG", &env_dir)
        .output()
        .unwrap();
    assert!(
        via_env.status.success(),
        "{}",
        String::from_utf8_lossy(&via_env.stderr)
    );

    // Wrong password: refused.
    std::fs::write(
        env_dir.join("config.json"),
        format!(
            r#"{{"auths":{{"{}":{{"username":"alice","password":"wrong"}}}}}}"#,
            reg.host()
        ),
    )
    .unwrap();
    let wrong = inspect(
        &reg.host(),
        &img.reference,
        &[
            "--docker-config",
            env_dir.join("config.json").to_str().unwrap(),
        ],
    );
    assert_eq!(wrong.code, 2, "{:#}", wrong.json);
}
