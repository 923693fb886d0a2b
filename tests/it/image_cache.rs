//! `ImageInspector` as the webhook uses it: caches by reference (per
//! credential), manifest digest and layer digest; per-call credentials.

use crate::support::images;
use crate::support::registry;

use images::*;
use nfguard::registry::{Credentials, ImageInspector, Platform, RegistryConfig, RegistryError};
use registry::Registry;

/// An inspector for `reg` with an empty docker config (never the user's).
fn inspector(reg: &Registry) -> ImageInspector {
    inspector_with(reg, RegistryConfig::default())
}

fn inspector_with(reg: &Registry, config: RegistryConfig) -> ImageInspector {
    let empty = reg.storage().with_file_name("empty-docker-config.json");
    std::fs::write(&empty, "{}").unwrap();
    ImageInspector::new(RegistryConfig {
        insecure_registries: vec![reg.host()],
        docker_config: Some(empty),
        ..config
    })
}

fn amd64() -> Platform {
    "linux/amd64".parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caches_profiles_and_shared_layers() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let base = build_layer(
        work.path(),
        &debian_iptables("1.8.9", Alt::Legacy),
        Compression::Gzip,
    );
    let top_a = build_layer(
        work.path(),
        &[dir("/app"), file("/app/a", "a")],
        Compression::Gzip,
    );
    let top_b = build_layer(
        work.path(),
        &[dir("/app"), file("/app/b", "b")],
        Compression::Gzip,
    );
    let a = push_image(
        &reg.host(),
        "a",
        "v1",
        &[base.clone(), top_a],
        &ImageConfig::default(),
    );
    let b = push_image(
        &reg.host(),
        "b",
        "v1",
        &[base.clone(), top_b],
        &ImageConfig::default(),
    );
    let insp = inspector(&reg);
    let p = amd64();

    assert!(insp.cached(&a.reference, &p).is_none());
    let (pa, sa) = insp
        .inspect_with_stats(&a.reference, &p, None)
        .await
        .unwrap();
    assert_eq!(pa.digest, a.digest);
    assert_eq!(
        pa.iptables
            .as_ref()
            .unwrap()
            .version
            .as_ref()
            .unwrap()
            .to_string(),
        "1.8.9"
    );
    assert_eq!(
        (sa.layers_fetched, sa.layers_from_cache, sa.from_cache),
        (2, 0, false)
    );

    // Warm: pure memory look-up, same answer.
    let warm = insp.cached(&a.reference, &p).expect("cached after inspect");
    assert_eq!(warm, pa);
    let (again, s2) = insp
        .inspect_with_stats(&a.reference, &p, None)
        .await
        .unwrap();
    assert!(s2.from_cache);
    assert_eq!(again, pa);

    // B shares the base layer: read once from the registry, reused from cache.
    let (pb, sb) = insp
        .inspect_with_stats(&b.reference, &p, None)
        .await
        .unwrap();
    assert_eq!(pb.iptables, pa.iptables);
    assert_eq!((sb.layers_fetched, sb.layers_from_cache), (1, 1), "{sb:?}");
    assert_eq!(reg.blob_gets(&base.digest), 1, "base layer fetched twice");

    // By digest: answered from the manifest-digest cache, no layer fetched.
    let by_digest = format!("{}/a@{}", reg.host(), a.digest);
    let (pd, sd) = insp.inspect_with_stats(&by_digest, &p, None).await.unwrap();
    assert!(sd.from_cache, "{sd:?}");
    assert_eq!(pd.image, by_digest);
    assert_eq!(pd.iptables, pa.iptables);

    // Cached answers survive the registry going away (no network involved).
    drop(reg);
    assert_eq!(insp.cached(&a.reference, &p), Some(pa));
    assert!(
        insp.cached(&b.reference, &"linux/arm64".parse().unwrap())
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_call_credentials() {
    let mut reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let img = push_image(
        &reg.host(),
        "secret",
        "v1",
        &[build_layer(
            work.path(),
            &bare_iptables("1.8.11", Alt::Nft),
            Compression::Zstd,
        )],
        &ImageConfig::default(),
    );
    reg.restart_with_basic_auth("bob", "pull-secret");
    let insp = inspector(&reg);
    let err = insp
        .inspect(&img.reference, &amd64(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err}");
    let creds = Credentials::Basic {
        username: "bob".into(),
        password: "pull-secret".into(),
    };
    let p = insp
        .inspect(&img.reference, &amd64(), Some(&creds))
        .await
        .unwrap();
    assert_eq!(p.iptables.unwrap().version.unwrap().to_string(), "1.8.11");

    // What the pull secret read is never served to a caller without it, nor
    // to another credential: each must resolve the manifest itself.
    assert!(insp.cached(&img.reference, &amd64()).is_none());
    let err = insp
        .inspect(&img.reference, &amd64(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err}");
    let other = Credentials::Basic {
        username: "eve".into(),
        password: "guess".into(),
    };
    let err = insp
        .inspect(&img.reference, &amd64(), Some(&other))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err}");
    // The owner's second look-up is served from the cache.
    let (_, stats) = insp
        .inspect_with_stats(&img.reference, &amd64(), Some(&creds))
        .await
        .unwrap();
    assert!(stats.from_cache, "{stats:?}");
}

/// Two single-layer images of `repo` (amd64 and arm64) with this iptables.
fn pair(reg: &Registry, work: &std::path::Path, repo: &str, version: &str) -> (Pushed, Pushed) {
    let layer = build_layer(work, &bare_iptables(version, Alt::Nft), Compression::Gzip);
    let amd = push_image(
        &reg.host(),
        repo,
        &format!("{version}-amd64"),
        std::slice::from_ref(&layer),
        &ImageConfig::default(),
    );
    let arm = push_image(
        &reg.host(),
        repo,
        &format!("{version}-arm64"),
        &[layer],
        &ImageConfig {
            architecture: "arm64".into(),
            ..ImageConfig::default()
        },
    );
    (amd, arm)
}

fn version_of(p: &nfguard::facts::ImageProfile) -> String {
    p.iptables.as_ref().unwrap().version.unwrap().to_string()
}

/// A tag is resolved to a digest once per tag TTL and credential: every
/// platform is read from that index while the pin holds (even if the tag
/// moves in between), and a moved tag is judged by its new digest once the
/// pin expires. The profile reports the digest that was read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_is_pinned_to_one_digest_for_every_platform_until_its_ttl() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let (old_amd, old_arm) = pair(&reg, work.path(), "agent", "1.8.7");
    let (new_amd, new_arm) = pair(&reg, work.path(), "agent", "1.8.11");
    push_index(&reg.host(), "agent", "stable", &[&old_amd, &old_arm]);
    // Long enough that a loaded machine still reads the second platform
    // within the pin (the test fails, never skips, when it cannot).
    let tag_ttl = std::time::Duration::from_secs(20);
    let insp = inspector_with(
        &reg,
        RegistryConfig {
            tag_ttl,
            ..Default::default()
        },
    );
    let stable = format!("{}/agent:stable", reg.host());
    let arm64: Platform = "linux/arm64".parse().unwrap();

    // The pin is made during this first look-up: no earlier than
    // `pinned_at`, no later than `pinned_by`.
    let pinned_at = std::time::Instant::now();
    let amd = insp.inspect(&stable, &amd64(), None).await.unwrap();
    let pinned_by = std::time::Instant::now();
    assert_eq!(
        (amd.digest.as_str(), version_of(&amd).as_str()),
        (old_amd.digest.as_str(), "1.8.7")
    );

    // The tag moves; the other platform is still read from the pinned index.
    push_index(&reg.host(), "agent", "stable", &[&new_amd, &new_arm]);
    let arm = insp.inspect(&stable, &arm64, None).await.unwrap();
    assert!(
        pinned_at.elapsed() < tag_ttl,
        "the machine was too slow to observe the pin (took {:?})",
        pinned_at.elapsed()
    );
    assert_eq!(
        (arm.digest.as_str(), version_of(&arm).as_str()),
        (old_arm.digest.as_str(), "1.8.7")
    );

    // Once the pin expires, both platforms are judged by the new digest.
    tokio::time::sleep(
        tag_ttl.saturating_sub(pinned_by.elapsed()) + std::time::Duration::from_millis(200),
    )
    .await;
    let arm = insp.inspect(&stable, &arm64, None).await.unwrap();
    assert_eq!(
        (arm.digest.as_str(), version_of(&arm).as_str()),
        (new_arm.digest.as_str(), "1.8.11")
    );
    let amd = insp.inspect(&stable, &amd64(), None).await.unwrap();
    assert_eq!(
        (amd.digest.as_str(), version_of(&amd).as_str()),
        (new_amd.digest.as_str(), "1.8.11")
    );
    // A digest reference is never re-resolved: the old content stays readable by name.
    let by_digest = format!("{}/agent@{}", reg.host(), old_amd.digest);
    assert_eq!(
        version_of(&insp.inspect(&by_digest, &amd64(), None).await.unwrap()),
        "1.8.7"
    );
}
