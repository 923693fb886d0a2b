//! Hostile registries and images: each answered by a clear one-line error
//! (exit 2) or a correct answer, never a panic, with bounded memory and time.

#[path = "support/images.rs"]
mod images;
#[path = "support/registry_lying.rs"]
mod lying;
#[path = "support/registry.rs"]
mod registry;

use assert_cmd::Command;
use images::*;
use lying::{LyingRegistry, Reply, StallingListener};
use registry::Registry;
use serde_json::Value;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

struct Run {
    code: i32,
    json: Value,
    stderr: String,
}

fn inspect(reg: &str, reference: &str, extra: &[&str]) -> Run {
    let out = Command::cargo_bin("nfguard")
        .unwrap()
        .args([
            "inspect",
            "image",
            reference,
            "--insecure-registry",
            reg,
            "-o",
            "json",
        ])
        .args(extra)
        .env_remove("DOCKER_CONFIG")
        .env("HOME", "/nonexistent")
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    Run {
        code: out.status.code().unwrap_or(-1),
        json: serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        stderr,
    }
}

fn fails_with(r: &Run, needles: &[&str]) {
    assert_eq!(
        r.code, 2,
        "expected an error, got {:#} / {}",
        r.json, r.stderr
    );
    assert_eq!(
        r.stderr.trim_end().lines().count(),
        1,
        "one line: {}",
        r.stderr
    );
    assert!(
        needles.iter().any(|n| r.stderr.contains(n)),
        "stderr {:?} names none of {needles:?}",
        r.stderr
    );
}

/// Peak resident memory of finished children of this test process (KiB).
fn children_max_rss_kib() -> i64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    usage.ru_maxrss
}

#[test]
fn unknown_tag_is_not_found() {
    let reg = Registry::start();
    let r = inspect(&reg.host(), &format!("{}/nothing:here", reg.host()), &[]);
    fails_with(&r, &["not found"]);
}

#[test]
fn invalid_reference_is_rejected() {
    let r = inspect("127.0.0.1:1", "UPPER/Case::bad", &[]);
    fails_with(&r, &["invalid image reference"]);
}

#[test]
fn closed_port_is_a_network_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = format!("127.0.0.1:{port}");
    let r = inspect(&host, &format!("{host}/x:y"), &["--timeout", "5"]);
    // Not the connection error's own text: a closed port and a silent one
    // must read the same to an admission client.
    fails_with(&r, &[&format!("cannot reach registry {host}: unreachable")]);
}

#[test]
fn stalling_registry_times_out() {
    let stall = StallingListener::start();
    let started = Instant::now();
    let r = inspect(
        &stall.host(),
        &format!("{}/x:y", stall.host()),
        &["--timeout", "2"],
    );
    let took = started.elapsed();
    fails_with(&r, &["did not finish within 2s", "timed out", "timeout"]);
    // The budget is 2 s; allow process start-up, never the 30 s default.
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn gzip_bomb_is_refused() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    // One tar header announcing a 16 GiB file, then 256 gzip members of
    // 64 MiB zeros each: ~16 MB on the wire, 16 GiB decompressed.
    let bomb_path = work.path().join("bomb.gz");
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&bomb_path).unwrap());
        let mut h = tar::Header::new_gnu();
        h.set_path("data/zeros").unwrap();
        h.set_size(16 << 30);
        h.set_mode(0o644);
        h.set_cksum();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(h.as_bytes()).unwrap();
        out.write_all(&gz.finish().unwrap()).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::copy(&mut std::io::repeat(0).take_bytes(64 << 20), &mut gz).unwrap();
        let member = gz.finish().unwrap();
        for _ in 0..256 {
            out.write_all(&member).unwrap();
        }
    }
    let layer = raw_layer(&bomb_path, Compression::Gzip.media_type());
    let img = push_image(&reg.host(), "bomb", "v1", &[layer], &ImageConfig::default());
    let r = inspect(
        &reg.host(),
        &img.reference,
        &["--max-layer-bytes", "1073741824"],
    );
    fails_with(&r, &["decompresses to more than 1073741824 bytes"]);
    let rss = children_max_rss_kib();
    assert!(rss < 512 * 1024, "peak RSS {rss} KiB");
}

trait TakeBytes: std::io::Read + Sized {
    fn take_bytes(self, n: u64) -> std::io::Take<Self> {
        self.take(n)
    }
}
impl<R: std::io::Read> TakeBytes for R {}

#[test]
fn million_entry_tar_is_refused() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("million.tar.gz");
    {
        let f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        for i in 0..1_000_000u32 {
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_mode(0o644);
            b.append_data(&mut h, format!("f/{i:07}"), std::io::empty())
                .unwrap();
        }
        b.into_inner().unwrap().finish().unwrap();
    }
    let layer = raw_layer(&path, Compression::Gzip.media_type());
    let img = push_image(
        &reg.host(),
        "million",
        "v1",
        &[layer],
        &ImageConfig::default(),
    );
    let r = inspect(&reg.host(), &img.reference, &[]);
    fails_with(&r, &["tar entries"]);
    let rss = children_max_rss_kib();
    assert!(rss < 512 * 1024, "peak RSS {rss} KiB");
}

#[test]
fn symlink_loop_does_not_hang_or_panic() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let mut entries = bare_iptables("1.8.9", Alt::None);
    entries.extend([
        dir("/etc"),
        dir("/etc/alternatives"),
        symlink("/usr/sbin/iptables", "/etc/alternatives/iptables"),
        symlink("/etc/alternatives/iptables", "/usr/sbin/iptables"),
        symlink("/usr/sbin/a", "b"),
        symlink("/usr/sbin/b", "a"),
    ]);
    let layer = build_layer(work.path(), &entries, Compression::Gzip);
    let img = push_image(&reg.host(), "loop", "v1", &[layer], &ImageConfig::default());
    let r = inspect(&reg.host(), &img.reference, &["--timeout", "20"]);
    if r.code == 0 {
        // The loop cannot name a backend, and the evidence says why.
        let f = &r.json["iptables"];
        assert!(f["backend"].is_null(), "{:#}", r.json);
        assert!(
            f["evidence"].to_string().contains("symlink loop"),
            "{:#}",
            r.json
        );
    } else {
        fails_with(&r, &["symlink loop", "too many links"]);
    }
}

#[test]
fn absolute_symlink_stays_inside_the_image() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    // On the host, /usr/sbin/xtables-nft-multi is a real iptables 1.8.9; the
    // image has nothing there, so nothing may be reported from the host.
    let layer = build_layer(
        work.path(),
        &[
            dir("/usr"),
            dir("/usr/sbin"),
            symlink(
                "/usr/sbin/iptables",
                "/../../../../../../usr/sbin/xtables-nft-multi",
            ),
            symlink(
                "/usr/sbin/xtables-nft-multi",
                "/proc/self/root/usr/sbin/xtables-nft-multi",
            ),
        ],
        Compression::Gzip,
    );
    let img = push_image(
        &reg.host(),
        "escape",
        "v1",
        &[layer],
        &ImageConfig::default(),
    );
    let r = inspect(&reg.host(), &img.reference, &[]);
    if r.code == 0 {
        let f = &r.json["iptables"];
        assert!(
            f.is_null() || f["version"].is_null(),
            "read the host: {:#}",
            r.json
        );
    } else {
        fails_with(&r, &["symlink", "outside"]);
    }
}

/// Routes for `repo:tag` whose single layer is `served` but whose manifest
/// announces `announced` (digest and size).
fn lying_image(repo: &str, tag: &str, announced: &[u8], served: Reply) -> HashMap<String, Reply> {
    let blob = Blob {
        path: Default::default(),
        digest: sha256(announced),
        size: announced.len() as u64,
        media_type: Compression::None.media_type().into(),
        diff_id: sha256(announced),
    };
    let (config, manifest) = manifest_json(std::slice::from_ref(&blob), &ImageConfig::default());
    let mut routes = HashMap::new();
    routes.insert(
        format!("/v2/{repo}/manifests/{tag}"),
        Reply::json("application/vnd.oci.image.manifest.v1+json", manifest),
    );
    routes.insert(
        format!("/v2/{repo}/blobs/{}", sha256(&config)),
        Reply::blob(config),
    );
    routes.insert(format!("/v2/{repo}/blobs/{}", blob.digest), served);
    routes
}

fn small_tar(work: &Path) -> Vec<u8> {
    let layer = build_layer(work, &bare_iptables("1.8.9", Alt::Nft), Compression::None);
    std::fs::read(layer.path).unwrap()
}

#[test]
fn layer_digest_mismatch_is_named() {
    let work = tempfile::tempdir().unwrap();
    let good = small_tar(work.path());
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0xff; // same size, still a tar, different bytes
    let srv = LyingRegistry::start(lying_image("app", "v1", &good, Reply::blob(bad)));
    let r = inspect(&srv.host(), &format!("{}/app:v1", srv.host()), &[]);
    fails_with(&r, &[&format!("digest mismatch for {}", sha256(&good))]);
}

#[test]
fn manifest_digest_mismatch_is_named() {
    let work = tempfile::tempdir().unwrap();
    let good = small_tar(work.path());
    let mut routes = lying_image("app", "v1", &good, Reply::blob(good.clone()));
    // Ask by a digest the served manifest does not have.
    let wanted = sha256(b"some other manifest");
    let manifest = routes.get("/v2/app/manifests/v1").cloned().unwrap();
    routes.insert(format!("/v2/app/manifests/{wanted}"), manifest);
    let srv = LyingRegistry::start(routes);
    let r = inspect(&srv.host(), &format!("{}/app@{wanted}", srv.host()), &[]);
    fails_with(&r, &["digest", "Digest"]);
    assert!(r.stderr.contains(&wanted), "{}", r.stderr);
}

#[test]
fn truncated_blob_is_an_error() {
    let work = tempfile::tempdir().unwrap();
    let good = small_tar(work.path());
    let half = good[..good.len() / 2].to_vec();
    let missing = (good.len() - half.len()) as u64;
    let srv = LyingRegistry::start(lying_image(
        "app",
        "v1",
        &good,
        Reply::Truncated {
            body: half,
            missing,
        },
    ));
    let r = inspect(
        &srv.host(),
        &format!("{}/app:v1", srv.host()),
        &["--timeout", "10"],
    );
    fails_with(&r, &["truncated", "stream failed"]);
    assert!(r.stderr.contains(&sha256(&good)), "{}", r.stderr);
}

#[test]
fn lying_registry_404_blob() {
    let work = tempfile::tempdir().unwrap();
    let good = small_tar(work.path());
    let mut routes = lying_image("app", "v1", &good, Reply::blob(good.clone()));
    routes.remove(&format!("/v2/app/blobs/{}", sha256(&good)));
    let srv = LyingRegistry::start(routes);
    let r = inspect(&srv.host(), &format!("{}/app:v1", srv.host()), &[]);
    fails_with(&r, &["not found"]);
    assert!(r.stderr.contains(&sha256(&good)), "{}", r.stderr);
}

/// `repo:tag`'s manifest is the endless `reply`; nothing else is served.
fn endless_manifest(content_length: Option<u64>, media_type: &str) -> LyingRegistry {
    let mut routes = HashMap::new();
    routes.insert(
        "/v2/app/manifests/v1".to_string(),
        Reply::Endless {
            content_type: media_type.into(),
            content_length,
        },
    );
    LyingRegistry::start(routes)
}

/// Manifests and indexes are capped at 4 MiB, whatever the framing says.
const MANIFEST_LIMIT: &str = "4194304-byte limit";
/// Far below the 1 GiB the lying registry would send, far above nfguard's
/// own footprint plus one 4 MiB manifest.
const MANIFEST_RSS_KIB: i64 = 128 * 1024;

#[test]
fn endless_chunked_manifest_is_refused_at_the_limit() {
    let srv = endless_manifest(None, "application/vnd.oci.image.manifest.v1+json");
    let reference = format!("{}/app:v1", srv.host());
    let r = inspect(&srv.host(), &reference, &["--timeout", "20"]);
    fails_with(&r, &[MANIFEST_LIMIT]);
    assert!(r.stderr.contains(&reference), "{}", r.stderr);
    let rss = children_max_rss_kib();
    eprintln!("endless chunked manifest: peak RSS {rss} KiB");
    assert!(rss < MANIFEST_RSS_KIB, "peak RSS {rss} KiB");
}

#[test]
fn endless_chunked_index_is_refused_at_the_limit() {
    let srv = endless_manifest(None, "application/vnd.oci.image.index.v1+json");
    let reference = format!("{}/app:v1", srv.host());
    let r = inspect(&srv.host(), &reference, &["--timeout", "20"]);
    fails_with(&r, &[MANIFEST_LIMIT]);
    let rss = children_max_rss_kib();
    assert!(rss < MANIFEST_RSS_KIB, "peak RSS {rss} KiB");
}

#[test]
fn huge_announced_manifest_is_refused_before_reading() {
    // Announces 1 TiB: refused from the header alone.
    let srv = endless_manifest(Some(1 << 40), "application/vnd.oci.image.manifest.v1+json");
    let reference = format!("{}/app:v1", srv.host());
    let r = inspect(&srv.host(), &reference, &["--timeout", "20"]);
    fails_with(&r, &[MANIFEST_LIMIT]);
    assert!(r.stderr.contains(&reference), "{}", r.stderr);
    let rss = children_max_rss_kib();
    assert!(rss < MANIFEST_RSS_KIB, "peak RSS {rss} KiB");
}

#[test]
fn false_small_content_length_manifest_is_an_error() {
    // Announces 200 bytes, then keeps sending: only the announced bytes are
    // read, which are not a whole manifest.
    let srv = endless_manifest(Some(200), "application/vnd.oci.image.manifest.v1+json");
    let reference = format!("{}/app:v1", srv.host());
    let r = inspect(&srv.host(), &reference, &["--timeout", "20"]);
    fails_with(&r, &["manifest is not JSON"]);
    assert!(r.stderr.contains(&reference), "{}", r.stderr);
    let rss = children_max_rss_kib();
    assert!(rss < MANIFEST_RSS_KIB, "peak RSS {rss} KiB");
}

#[test]
fn bearer_token_flow_still_reaches_manifest_and_blobs() {
    // The capped manifest GET is ours, the token dance oci-client's: the
    // token must reach both the manifest and the blob requests.
    let work = tempfile::tempdir().unwrap();
    let good = small_tar(work.path());
    let routes = lying_image("app", "v1", &good, Reply::blob(good.clone()));
    let srv = LyingRegistry::start_with_bearer(routes, Some("tok-123"));
    let r = inspect(&srv.host(), &format!("{}/app:v1", srv.host()), &[]);
    assert_eq!(r.code, 0, "{:#} / {}", r.json, r.stderr);
    assert_eq!(r.json["iptables"]["version"], "1.8.9", "{:#}", r.json);
}
