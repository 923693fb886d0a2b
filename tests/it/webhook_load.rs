//! The webhook under attack: the real binary, real TLS, a real registry on
//! loopback holding hostile images (issue #20). 32 concurrent admissions,
//! each naming a hostile image nobody inspected yet, while an ordinary
//! namespace keeps admitting its own workloads:
//! - every review is answered within the webhook's budget;
//! - the process's peak RSS stays under the container limit it was given;
//! - the ordinary namespace's look-ups still get slots (fair share) and its
//!   warm admissions are timed against the same without attack (printed:
//!   docs/benchmarks.md keeps the figures; speed is not asserted here).

use crate::support::images;
use crate::support::pki;
use crate::support::registry;
use crate::webhook_support as support;

use images::*;
use pki::pki;
use registry::Registry;
use serde_json::Value;
use std::io::Write;
use std::time::{Duration, Instant};
use support::*;

/// The webhook's default container limit (manifests/webhook.yaml).
const LIMIT: u64 = 512 << 20;
/// The answer budget the API server's 10 s timeout leaves (`--timeout`).
const BUDGET: Duration = Duration::from_secs(8);
const ATTACKERS: usize = 32;

fn hostile_layers(work: &std::path::Path) -> Vec<Blob> {
    // Four 60 MiB "stanza files" (over the per-file cap: metadata only).
    let flood: Vec<u8> = b"a: b\nc: d\n\n"
        .iter()
        .copied()
        .cycle()
        .take(60 << 20)
        .collect();
    let bomb: Vec<Entry> = (0..4)
        .map(|i| file(&format!("var/lib/dpkg/status.d/bomb{i}"), flood.clone()))
        .collect();
    // 3000 files just under the cap: over one inspection's share.
    let small: Vec<u8> = flood[..60 << 10].to_vec();
    let many: Vec<Entry> = (0..3000)
        .map(|i| file(&format!("var/lib/dpkg/status.d/p{i}"), small.clone()))
        .collect();
    // A dpkg status just under its cap, all tiny fields.
    let status = vec![file("var/lib/dpkg/status", flood[..31 << 20].to_vec())];
    vec![
        build_layer(work, &bomb, Compression::Gzip),
        build_layer(work, &many, Compression::Gzip),
        build_layer(work, &status, Compression::Zstd),
    ]
}

fn pod(ns: &str, image: &str) -> Value {
    let spec = pod_spec(true, vec![container("c", image, &["NET_ADMIN"])]);
    review(
        "Pod",
        None,
        "CREATE",
        ns,
        object("Pod", "p", ns, spec, serde_json::json!({})),
        false,
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[test]
fn thirty_two_hostile_admissions_stay_within_budget_and_memory() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let layers = hostile_layers(work.path());
    let mut hostile = Vec::new();
    for i in 0..ATTACKERS {
        // Distinct tags: 32 look-ups, none deduplicated, none cached.
        let layer = layers[i % layers.len()].clone();
        let img = push_image(
            &reg.host(),
            "hostile",
            &format!("t{i}"),
            &[layer],
            &ImageConfig::default(),
        );
        hostile.push(img.reference);
    }
    let pushed = push_image(
        &reg.host(),
        "ordinary",
        "v1",
        &[build_layer(
            work.path(),
            &distroless_iptables("1.8.11", Alt::Nft),
            Compression::Gzip,
        )],
        &ImageConfig::default(),
    );
    let ordinary = pushed.reference.clone();
    // The same image by digest: a key nobody looked up yet.
    let cold_ref = format!("{}/ordinary@{}", reg.host(), pushed.digest);

    let fx = Fixture::new();
    let pki = pki();
    let cert = fx.write("tls.crt", &pki.cert_pem);
    let key = fx.write("tls.key", &pki.key_pem);
    let budget = BUDGET.as_secs().to_string();
    let limit = LIMIT.to_string();
    let hook = SpawnedWebhook::start(
        &fx,
        &cert,
        &key,
        &[
            "--insecure-registry",
            &reg.host(),
            // The test registry is on loopback, which the webhook refuses by default.
            "--registry-allow-cidr",
            "127.0.0.1/32",
            "--timeout",
            &budget,
            "--memory-limit",
            &limit,
        ],
    );
    let url = format!("https://localhost:{}/validate", hook.https.port());

    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = localhost_client(&pki.ca_pem, hook.https);
    let post = |body: Value| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let started = Instant::now();
            let r = client.post(url).json(&body).send().await.unwrap();
            let status = r.status().as_u16();
            let v: Value = r.json().await.unwrap();
            (status, v, started.elapsed())
        }
    };
    // Warm the ordinary image, then time warm admissions without attack.
    let (s, v, _) = rt.block_on(post(pod("web", &ordinary)));
    assert_eq!(s, 200, "{v}");
    assert!(
        !v.to_string().contains("ImageUnresolved"),
        "judged on the image: {v}"
    );
    let quiet: Vec<Duration> = (0..40)
        .map(|_| rt.block_on(post(pod("web", &ordinary))).2)
        .collect();

    // The parsers are child processes in the same container: count them.
    let family = hook.watch_family_rss();
    let (attack, during, cold) = rt.block_on(async {
        let attack: Vec<_> = hostile
            .iter()
            .enumerate()
            .map(|(i, img)| tokio::spawn(post(pod(&format!("tenant{}", i % 2), img))))
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut during = Vec::new();
        for _ in 0..40 {
            during.push(post(pod("web", &ordinary)).await.2);
        }
        // A cold image of another namespace still gets a look-up slot.
        let cold = post(pod("other", &cold_ref)).await;
        let mut out = Vec::new();
        for a in attack {
            out.push(a.await.unwrap());
        }
        (out, during, cold)
    });
    for (status, v, took) in &attack {
        assert_eq!(*status, 200, "{v}");
        assert!(
            *took < BUDGET + Duration::from_secs(2),
            "a hostile review took {took:?} (budget {BUDGET:?})"
        );
        assert_eq!(
            v["response"]["allowed"], true,
            "unresolvedImages: Warn: {v}"
        );
    }
    let (status, v, took) = &cold;
    assert_eq!(*status, 200, "{v}");
    assert!(*took < BUDGET + Duration::from_secs(2), "{took:?}");
    assert!(
        !v.to_string().contains("ImageUnresolved"),
        "the ordinary namespace's cold image was not judged during the attack: {v}"
    );
    let rss = hook.peak_rss_kib();
    let (family_rss, parsers) = family.finish();
    let mut q = quiet.clone();
    q.sort();
    let mut d = during.clone();
    d.sort();
    let slowest = attack.iter().map(|a| a.2).max().unwrap();
    println!(
        "figure: webhook peak RSS {} MiB; with its parser children {} MiB held at once at most (sum of PSS, sampled every 5 ms; {parsers} children at once; limit {} MiB) after {ATTACKERS} concurrent hostile admissions; slowest hostile answer {:.2}s (budget {}s); cold ordinary image in another namespace {:.2}s; warm ordinary admission p50/p95 {:.1}/{:.1} ms quiet vs {:.1}/{:.1} ms under attack",
        rss / 1024,
        family_rss / 1024,
        LIMIT >> 20,
        slowest.as_secs_f64(),
        BUDGET.as_secs(),
        took.as_secs_f64(),
        percentile(&q, 0.5).as_secs_f64() * 1e3,
        percentile(&q, 0.95).as_secs_f64() * 1e3,
        percentile(&d, 0.5).as_secs_f64() * 1e3,
        percentile(&d, 0.95).as_secs_f64() * 1e3,
    );
    std::io::stdout().flush().unwrap();
    assert!(
        family_rss * 1024 < LIMIT,
        "the webhook and its parsers held {family_rss} KiB at once (PSS), over the {LIMIT}-byte limit"
    );
    assert!(
        rss * 1024 < LIMIT,
        "the webhook's own peak RSS {rss} KiB is over the {LIMIT}-byte limit"
    );
    assert!(parsers >= 1, "the images were parsed in child processes");
}
