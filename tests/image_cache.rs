//! `ImageInspector` as the webhook uses it: caches by reference (per
//! credential), manifest digest and layer digest; per-call credentials.

#[path = "support/images.rs"]
mod images;
#[path = "support/registry.rs"]
mod registry;

use images::*;
use nfguard::registry::{Credentials, ImageInspector, Platform, RegistryConfig, RegistryError};
use registry::Registry;

/// An inspector for `reg` with an empty docker config (never the user's).
fn inspector(reg: &Registry) -> ImageInspector {
    let empty = reg.storage().with_file_name("empty-docker-config.json");
    std::fs::write(&empty, "{}").unwrap();
    ImageInspector::new(RegistryConfig {
        insecure_registries: vec![reg.host()],
        docker_config: Some(empty),
        ..Default::default()
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
