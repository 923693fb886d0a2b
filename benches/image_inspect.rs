//! Image inspection benchmark (run: scripts/bench-image.sh). Real registry on
//! loopback, real images; each figure is a ratio against a baseline measured
//! in the same run:
//! 1. cold `nfguard inspect image` of a 250 MB lower layer under a small
//!    settling top layer vs `skopeo copy docker://... dir:` of that image;
//! 2. cold inspection of a single-layer 100 MB image whose iptables files
//!    sit at the end of the tar vs the same skopeo copy;
//! 3. warm `ImageInspector::cached` look-up (in process), vs the cold
//!    in-process inspection of the same image;
//! 4. cold inspection of an ordinary three-layer image (Debian iptables and
//!    nftables under an app layer) with the layers parsed in the confined
//!    child process (`--image-parser=sandbox`, the default) vs parsed in
//!    process: what the sandbox costs per inspection.

#[path = "../tests/it/support/images.rs"]
mod images;
#[path = "../tests/it/support/registry.rs"]
mod registry;

use images::*;
use nfguard::registry::parse::{Parser, SandboxConfig};
use nfguard::registry::{ImageInspector, Platform, RegistryConfig};
use std::process::Command;
use std::time::{Duration, Instant};

const RUNS: usize = 5;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn nfguard_cold(reg: &str, reference: &str) -> (Duration, u64, u64) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_nfguard"))
        .args(inspect_image_args(reference, reg))
        .arg("--stats")
        .output()
        .expect("run nfguard");
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(json["iptables"]["version"].is_string(), "{json}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stats: serde_json::Value =
        serde_json::from_str(stderr.lines().last().unwrap_or("{}")).expect("stats line");
    (
        took,
        stats["bytesFetched"].as_u64().unwrap_or(0),
        stats["imageBytes"].as_u64().unwrap_or(0),
    )
}

fn skopeo_copy(reference: &str, scratch: &std::path::Path) -> Duration {
    let dest = scratch.join("skopeo-dir");
    let _ = std::fs::remove_dir_all(&dest);
    let started = Instant::now();
    let out = Command::new("skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false"])
        .arg(format!("docker://{reference}"))
        .arg(format!("dir:{}", dest.display()))
        .output()
        .expect("run skopeo");
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "skopeo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dest);
    took
}

fn compare(name: &str, reg: &str, reference: &str, scratch: &std::path::Path) -> (f64, f64) {
    // Warm the registry's page cache and both tools' binaries once.
    nfguard_cold(reg, reference);
    skopeo_copy(reference, scratch);
    let mut ours = Vec::new();
    let mut base = Vec::new();
    let mut frac = 0.0;
    for _ in 0..RUNS {
        let (t, fetched, total) = nfguard_cold(reg, reference);
        ours.push(t);
        frac = fetched as f64 / total.max(1) as f64;
        base.push(skopeo_copy(reference, scratch));
    }
    let (o, b) = (median(ours), median(base));
    let ratio = o.as_secs_f64() / b.as_secs_f64();
    println!(
        "{name}: nfguard {:.1} ms, skopeo copy {:.1} ms, time ratio {:.3}x, bytes fetched {:.2}% of the image",
        o.as_secs_f64() * 1e3,
        b.as_secs_f64() * 1e3,
        ratio,
        frac * 100.0
    );
    (ratio, frac)
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    let reg = registry::Registry::start();
    let host = reg.host();
    let work = tempfile::tempdir().expect("work dir");
    let w = work.path();

    // 1. 250 MB incompressible lower layer + small Debian iptables 1.8.9 top.
    let big = build_layer(
        w,
        &[
            dir("/opt"),
            Entry::Random {
                path: "/opt/blob.bin".into(),
                size: 250 << 20,
                seed: 1,
            },
        ],
        Compression::Zstd,
    );
    let top = build_layer(w, &debian_iptables("1.8.9", Alt::Nft), Compression::Gzip);
    let big_img = push_image(
        &host,
        "bench-big",
        "v1",
        &[big.clone(), top],
        &ImageConfig::default(),
    );
    std::fs::remove_file(&big.path).ok();

    // 2. One 100 MB gzip layer, iptables files last in the tar.
    let mut entries = vec![
        dir("/opt"),
        Entry::Random {
            path: "/opt/data.bin".into(),
            size: 100 << 20,
            seed: 2,
        },
    ];
    entries.extend(debian_iptables("1.8.9", Alt::Nft));
    let single = build_layer(w, &entries, Compression::Gzip);
    let single_img = push_image(
        &host,
        "bench-single",
        "v1",
        std::slice::from_ref(&single),
        &ImageConfig::default(),
    );
    std::fs::remove_file(&single.path).ok();

    println!("# nfguard image inspection benchmark ({RUNS} runs each, medians)");
    let (r1, f1) = compare(
        "big lower layer (250 MB) under a settling top",
        &host,
        &big_img.reference,
        w,
    );
    let (r2, _) = compare(
        "single 100 MB layer, iptables at the end",
        &host,
        &single_img.reference,
        w,
    );

    // 3. Warm look-up in process.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let inspector = ImageInspector::new(RegistryConfig {
        insecure_registries: vec![host.clone()],
        ..Default::default()
    });
    let platform: Platform = "linux/amd64".parse().expect("platform");
    let started = Instant::now();
    rt.block_on(inspector.inspect(&big_img.reference, &platform, None))
        .expect("inspect");
    let cold = started.elapsed();
    let iterations = 200_000u32;
    let started = Instant::now();
    for _ in 0..iterations {
        std::hint::black_box(inspector.cached(std::hint::black_box(&big_img.reference), &platform))
            .expect("cached");
    }
    let warm = started.elapsed() / iterations;
    println!(
        "warm cached() look-up: {:.2} µs per call ({iterations} calls); cold in-process inspection {:.1} ms; warm/cold {:.6}",
        warm.as_secs_f64() * 1e6,
        cold.as_secs_f64() * 1e3,
        warm.as_secs_f64() / cold.as_secs_f64()
    );
    // 4. The sandbox's cost: one inspector per parser, as a webhook keeps
    // one (warmed once, so its spare parser is up), each image new to it
    // (its base layers come from the layer cache, its app layer from the
    // registry), alternating so the machine's noise hits both.
    let ordinary: Vec<String> = (0..(RUNS + 1) * 2)
        .map(|i| {
            let layers = [
                build_layer(w, &debian_iptables("1.8.9", Alt::Nft), Compression::Gzip),
                build_layer(w, &debian_nftables("1.0.6"), Compression::Zstd),
                build_layer(
                    w,
                    &[dir("/app"), file("/app/x", format!("{i}"))],
                    Compression::Gzip,
                ),
            ];
            push_image(
                &host,
                &format!("bench-ordinary{i}"),
                "v1",
                &layers,
                &ImageConfig::default(),
            )
            .reference
        })
        .collect();
    let sandbox = Parser::Sandbox(SandboxConfig {
        program: env!("CARGO_BIN_EXE_nfguard").into(),
        memory_bytes: nfguard::registry::MemoryPlan::default().parser_memory_bytes(),
    });
    let _guard = rt.enter();
    let with = |parser: &Parser| {
        ImageInspector::new(RegistryConfig {
            insecure_registries: vec![host.clone()],
            parser: parser.clone(),
            ..Default::default()
        })
    };
    let (a, b) = (with(&Parser::InProcess), with(&sandbox));
    let cold = |inspector: &ImageInspector, reference: &str| {
        let started = Instant::now();
        rt.block_on(inspector.inspect(reference, &platform, None))
            .expect("inspect");
        started.elapsed()
    };
    let (mut inproc, mut sandboxed) = (Vec::new(), Vec::new());
    for (i, pair) in ordinary.chunks(2).enumerate() {
        let (x, y) = (cold(&a, &pair[0]), cold(&b, &pair[1]));
        if i > 0 {
            inproc.push(x);
            sandboxed.push(y);
        }
    }
    let (inproc, sandboxed) = (median(inproc), median(sandboxed));
    let r4 = sandboxed.as_secs_f64() / inproc.as_secs_f64();
    println!(
        "sandboxed parser, an ordinary 3-layer image new to a warm inspector: {:.1} ms vs in process {:.1} ms, ratio {r4:.3}x",
        sandboxed.as_secs_f64() * 1e3,
        inproc.as_secs_f64() * 1e3,
    );
    println!(
        "targets: big-lower time <= 0.2x: {} ({r1:.3}x); bytes <= 5%: {} ({:.2}%); single layer <= 1.1x: {} ({r2:.3}x); warm < 50 µs: {}; sandbox <= 1.25x: {} ({r4:.3}x)",
        r1 <= 0.2,
        f1 <= 0.05,
        f1 * 100.0,
        r2 <= 1.1,
        warm < Duration::from_micros(50),
        r4 <= 1.25,
    );
}
