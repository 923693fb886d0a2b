//! Hostile registries and images: each answered by a clear one-line error
//! (exit 2) or a correct answer, never a panic, with bounded memory and time.

use crate::support::images;
use crate::support::registry;
use crate::support::registry_lying as lying;

use images::*;
use lying::{LyingRegistry, Reply, StallingListener};
use registry::Registry;
use serde_json::Value;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use images::{InspectRun as Run, inspect_cli as inspect};

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

/// `inspect`, and the peak resident memory of that nfguard process alone
/// (KiB). Measured by GNU time, not by this process's wait: a child spawned
/// from here starts life in a clone of this test's memory (the images it
/// built), and the kernel carries that high-water mark across exec.
fn inspect_measured(reg: &str, reference: &str, extra: &[&str]) -> (Run, i64) {
    const MARK: &str = "nfguard-peak-rss-kib=";
    let out = std::process::Command::new("/usr/bin/time")
        .args(["-f", &format!("{MARK}%M")])
        .arg(env!("CARGO_BIN_EXE_nfguard"))
        .args(inspect_image_args(reference, reg))
        .args(extra)
        .env_remove("DOCKER_CONFIG")
        .env("HOME", "/nonexistent")
        .output()
        .expect("GNU time (Debian package time) runs nfguard");
    let all = String::from_utf8_lossy(&out.stderr).to_string();
    let (stderr, rss) = match all.rsplit_once(MARK) {
        Some((before, kib)) => (before.to_string(), kib.trim().parse().expect(&all)),
        None => panic!("no peak RSS from time: {all}"),
    };
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    // GNU time notes a non-zero exit on a line of its own.
    let stderr: String = stderr
        .lines()
        .filter(|l| !l.starts_with("Command exited with non-zero status"))
        .map(|l| format!("{l}\n"))
        .collect();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        json: serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        stderr,
    };
    (run, rss)
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
    let img = push_layer(&reg.host(), "bomb", layer);
    let (r, rss) = inspect_measured(
        &reg.host(),
        &img.reference,
        &["--max-layer-bytes", "1073741824"],
    );
    fails_with(&r, &["decompresses to more than 1073741824 bytes"]);
    println!("figure: gzip bomb refused at {} MiB peak RSS", rss / 1024);
    assert!(rss < 128 * 1024, "peak RSS {rss} KiB");
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
    let img = push_layer(&reg.host(), "million", layer);
    let (r, rss) = inspect_measured(&reg.host(), &img.reference, &[]);
    fails_with(&r, &["tar entries"]);
    println!(
        "figure: million-entry tar refused at {} MiB peak RSS",
        rss / 1024
    );
    assert!(rss < 128 * 1024, "peak RSS {rss} KiB");
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
    let img = push_layer(&reg.host(), "loop", layer);
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
    let img = push_layer(&reg.host(), "escape", layer);
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
    let (r, rss) = inspect_measured(&srv.host(), &reference, &["--timeout", "20"]);
    fails_with(&r, &[MANIFEST_LIMIT]);
    assert!(r.stderr.contains(&reference), "{}", r.stderr);
    eprintln!("endless chunked manifest: peak RSS {rss} KiB");
    assert!(rss < MANIFEST_RSS_KIB, "peak RSS {rss} KiB");
}

#[test]
fn endless_chunked_index_is_refused_at_the_limit() {
    let srv = endless_manifest(None, "application/vnd.oci.image.index.v1+json");
    let reference = format!("{}/app:v1", srv.host());
    let (r, rss) = inspect_measured(&srv.host(), &reference, &["--timeout", "20"]);
    fails_with(&r, &[MANIFEST_LIMIT]);
    assert!(rss < MANIFEST_RSS_KIB, "peak RSS {rss} KiB");
}

#[test]
fn huge_announced_manifest_is_refused_before_reading() {
    // Announces 1 TiB: refused from the header alone.
    let srv = endless_manifest(Some(1 << 40), "application/vnd.oci.image.manifest.v1+json");
    let reference = format!("{}/app:v1", srv.host());
    let (r, rss) = inspect_measured(&srv.host(), &reference, &["--timeout", "20"]);
    fails_with(&r, &[MANIFEST_LIMIT]);
    assert!(r.stderr.contains(&reference), "{}", r.stderr);
    assert!(rss < MANIFEST_RSS_KIB, "peak RSS {rss} KiB");
}

#[test]
fn false_small_content_length_manifest_is_an_error() {
    // Announces 200 bytes, then keeps sending: only the announced bytes are
    // read, which are not a whole manifest.
    let srv = endless_manifest(Some(200), "application/vnd.oci.image.manifest.v1+json");
    let reference = format!("{}/app:v1", srv.host());
    let (r, rss) = inspect_measured(&srv.host(), &reference, &["--timeout", "20"]);
    fails_with(&r, &["manifest is not JSON"]);
    assert!(r.stderr.contains(&reference), "{}", r.stderr);
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

/// `n` bytes of dpkg stanzas made of tiny fields, with a forged installed
/// iptables stanza every `every` stanzas: the cheapest text to compress and
/// the most expensive to parse field by field.
fn stanza_flood(n: usize, every: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 64);
    let mut i = 0usize;
    while out.len() < n {
        if i.is_multiple_of(every) {
            out.extend_from_slice(
                b"Package: iptables\nStatus: install ok installed\nVersion: 1.8.7-1\n\n",
            );
        } else {
            out.extend_from_slice(b"a: b\nc: d\ne: f\n\n");
        }
        i += 1;
    }
    out.truncate(n);
    out
}

/// The attack of issue #20: one small gzip layer whose `status.d` holds four
/// 60 MiB "stanza files" (818 MiB peak RSS before the per-kind caps). A
/// status.d file is a few KiB: these are kept as metadata only, the image is
/// still answered (from its real evidence), and memory stays near a normal
/// image's.
#[test]
fn status_d_bomb_is_answered_within_normal_memory() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let flood = stanza_flood(60 << 20, 1000);
    let mut entries = distroless_iptables("1.8.9", Alt::Nft);
    for i in 0..4 {
        entries.push(file(
            &format!("var/lib/dpkg/status.d/bomb{i}"),
            flood.clone(),
        ));
    }
    let layer = build_layer(work.path(), &entries, Compression::Gzip);
    assert!(
        layer.size < 4 << 20,
        "the bomb is small on the wire: {}",
        layer.size
    );
    let img = push_layer(&reg.host(), "stanzabomb", layer);
    let (r, rss) = inspect_measured(&reg.host(), &img.reference, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["iptables"]["version"], "1.8.9", "{:#}", r.json);
    let evidence = r.json["iptables"]["evidence"].to_string();
    assert!(
        evidence.contains("larger than the 65536 byte read limit"),
        "{evidence}"
    );
    println!(
        "figure: status.d bomb inspected at {} MiB peak RSS",
        rss / 1024
    );
    assert!(rss < 100 * 1024, "peak RSS {rss} KiB");
}

/// Thousands of status.d files each just under the per-file cap: the layer
/// as a whole is over what one inspection may hold (96 MiB at a 512 MiB
/// memory limit) and is refused as it is read, not after.
#[test]
fn many_capped_files_are_refused_at_the_inspection_budget() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let stanza = stanza_flood(60 << 10, 1000);
    let entries: Vec<Entry> = (0..3000)
        .map(|i| file(&format!("var/lib/dpkg/status.d/pkg{i}"), stanza.clone()))
        .collect();
    let layer = build_layer(work.path(), &entries, Compression::Gzip);
    let img = push_layer(&reg.host(), "manystanzas", layer);
    let (r, rss) = inspect_measured(
        &reg.host(),
        &img.reference,
        &["--memory-limit", "536870912"],
    );
    fails_with(&r, &["retains more than 100663296 bytes"]);
    println!(
        "figure: 3000 capped status.d files refused at {} MiB peak RSS",
        rss / 1024
    );
    assert!(rss < 200 * 1024, "peak RSS {rss} KiB");
}

/// A dpkg status just under its 32 MiB cap, of millions of tiny fields and
/// thousands of forged iptables stanzas: parsed without a copy and without
/// an allocation per field, and at most 16 hits kept.
#[test]
fn field_flood_in_dpkg_status_is_parsed_in_bounded_memory() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let mut entries = bare_iptables("1.8.9", Alt::Nft);
    entries.push(file("var/lib/dpkg/status", stanza_flood(31 << 20, 500)));
    let layer = build_layer(work.path(), &entries, Compression::Gzip);
    let img = push_layer(&reg.host(), "fieldflood", layer);
    let (r, rss) = inspect_measured(&reg.host(), &img.reference, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let evidence = r.json["iptables"]["evidence"].as_array().unwrap();
    assert!(evidence.len() <= 40, "{} evidence entries", evidence.len());
    assert!(
        r.json
            .to_string()
            .contains("more than 16 iptables package entries"),
        "{:#}",
        r.json
    );
    println!(
        "figure: 31 MiB dpkg status field flood inspected at {} MiB peak RSS",
        rss / 1024
    );
    assert!(rss < 150 * 1024, "peak RSS {rss} KiB");
}

/// A zstd frame asking for a 128 MiB window (allocated before any output):
/// refused by name, not decoded.
#[test]
fn zstd_frame_with_a_huge_window_is_refused() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let tar_bytes = {
        let mut b = tar::Builder::new(Vec::new());
        let data = vec![b'x'; 1 << 20];
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "opt/data", &data[..]).unwrap();
        b.into_inner().unwrap()
    };
    let path = work.path().join("wide.zst");
    {
        let mut enc =
            zstd::stream::write::Encoder::new(std::fs::File::create(&path).unwrap(), 3).unwrap();
        enc.window_log(27).unwrap();
        enc.long_distance_matching(true).unwrap();
        enc.write_all(&tar_bytes).unwrap();
        enc.finish().unwrap();
    }
    let layer = raw_layer(&path, Compression::Zstd.media_type());
    let img = push_layer(&reg.host(), "widezstd", layer);
    let r = inspect(&reg.host(), &img.reference, &[]);
    fails_with(&r, &["requires too much memory for decoding"]);
}

/// An rpmdb.sqlite whose `Packages` is a VIEW over an endless recursive
/// query: running it (as SQLite would for `SELECT blob FROM Packages`) never
/// ends, and a blocking thread cannot be stopped by a deadline.
fn endless_view_rpmdb() -> Vec<u8> {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE VIEW Packages AS WITH RECURSIVE r(n) AS \
         (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n AS hnum, zeroblob(16) AS blob FROM r",
    )
    .unwrap();
    conn.serialize("main").unwrap().to_vec()
}

/// Exit code, stdout and the CPU time (user + system) of a child run to its
/// end; panics (after killing it) if it has not exited within `limit`.
// The child is reaped by `wait4` (which also reports its CPU time), not by
// `Child::wait`.
#[allow(clippy::zombie_processes)]
fn run_to_exit(mut cmd: std::process::Command, limit: Duration) -> (i32, Vec<u8>, Duration) {
    use std::io::Read;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).unwrap();
        out
    });
    let pid = child.id() as libc::pid_t;
    let started = Instant::now();
    loop {
        let mut status = 0;
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let done = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(done >= 0, "wait4 failed");
        if done == pid {
            assert!(libc::WIFEXITED(status), "ended by a signal: {status}");
            let tv = |t: libc::timeval| {
                Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
            };
            let cpu = tv(usage.ru_utime) + tv(usage.ru_stime);
            return (libc::WEXITSTATUS(status), reader.join().unwrap(), cpu);
        }
        if started.elapsed() > limit {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn endless_rpm_view_is_refused_and_the_process_exits() {
    use assert_cmd::cargo::CommandCargoExt;
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let mut entries = bare_iptables("1.8.9", Alt::Nft);
    entries.extend([
        dir("/usr/lib"),
        dir("/usr/lib/sysimage"),
        dir("/usr/lib/sysimage/rpm"),
        file("/usr/lib/sysimage/rpm/rpmdb.sqlite", endless_view_rpmdb()),
        dir("/var"),
        dir("/var/lib"),
        symlink("/var/lib/rpm", "../../usr/lib/sysimage/rpm"),
    ]);
    let layer = build_layer(work.path(), &entries, Compression::Gzip);
    let img = push_layer(&reg.host(), "rpmview", layer);

    let mut cmd = std::process::Command::cargo_bin("nfguard").unwrap();
    cmd.args(["inspect", "image", &img.reference, "--insecure-registry"])
        .arg(reg.host())
        .args(["-o", "json", "--timeout", "20"])
        .env_remove("DOCKER_CONFIG")
        .env("HOME", "/nonexistent");
    let started = Instant::now();
    // Before the reader, this ran until killed: "did not finish within 20s",
    // then a core at 100 %.
    let (code, stdout, cpu) = run_to_exit(cmd, Duration::from_secs(60));
    let took = started.elapsed();
    eprintln!("endless rpm view: answered and exited in {took:?}, {cpu:?} CPU");
    // Unreadable evidence, not a failure: the binary still answers.
    assert_eq!(code, 0);
    let json: Value = serde_json::from_slice(&stdout).unwrap();
    let f = &json["iptables"];
    assert_eq!(f["version"], "1.8.9", "{json:#}");
    let refused = f["evidence"].as_array().unwrap().iter().any(|e| {
        e["source"] == "rpm"
            && e["detail"]
                .as_str()
                .is_some_and(|d| d.contains("Packages is a view, refusing to evaluate SQL"))
    });
    assert!(refused, "{json:#}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(cpu < Duration::from_secs(5), "{cpu:?} CPU");
}
