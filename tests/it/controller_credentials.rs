//! The controller's image look-ups against a real registry (docker-registry
//! on loopback, htpasswd): a private image is read with the running pod's
//! own pull secret (read through the API: a fake API server behind a real
//! kube client), unresolved without it; another pod's secret is not used for
//! it; pods sharing a ServiceAccount and secret names share one read; the
//! docker config is read once, and a rewrite on disk is picked up
//! without a restart.

use crate::support::images::*;
use crate::support::registry::Registry;
use crate::support::secrets_api::{SecretsApi, dockerconfigjson_secret, service_account};
use base64::Engine;
use k8s_openapi::api::core::v1::Pod;
use nfguard::compat::evaluate::{ImageKey, ImageResolution, ImageResolutions};
use nfguard::judgement::Bounded;
use nfguard::judgement::pull_secrets::PullSecretReader;
use nfguard::projection::PodFacts;
use nfguard::registry::{DockerConfigFile, ImageInspector, Platform, RegistryConfig};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const USER: &str = "bob";
const PASSWORD: &str = "pull-secret";

fn amd64() -> Platform {
    "linux/amd64".parse().unwrap()
}

/// A registry that answers only `USER:PASSWORD`, holding one image with
/// iptables 1.8.11 (nft) under `private/agent:v1`; its reference.
fn private_registry(work: &std::path::Path) -> (Registry, String) {
    let mut reg = Registry::start();
    let img = push_image(
        &reg.host(),
        "private/agent",
        "v1",
        &[build_layer(
            work,
            &bare_iptables("1.8.11", Alt::Nft),
            Compression::Gzip,
        )],
        &ImageConfig::default(),
    );
    reg.restart_with_basic_auth(USER, PASSWORD);
    (reg, img.reference)
}

/// The controller's resolver for `reg`: the inspector, the docker config
/// `docker_config`, and the pods' pull secrets through `api`.
fn controller_images(
    reg: &Registry,
    docker_config: Arc<DockerConfigFile>,
    api: &SecretsApi,
) -> Bounded {
    let inspector = ImageInspector::new(RegistryConfig {
        insecure_registries: vec![reg.host()],
        ..RegistryConfig::default()
    });
    Bounded::new(Arc::new(inspector), 4)
        .with_credentials(docker_config)
        .with_pull_secrets(PullSecretReader::new(
            api.client(),
            Duration::from_secs(30),
            64,
        ))
}

/// A running hostNetwork NET_ADMIN pod in `apps` running `image`, naming
/// `secrets` as its imagePullSecrets.
fn pod(name: &str, image: &str, secrets: &[&str]) -> Pod {
    pod_in("apps", name, image, secrets)
}

fn pod_in(namespace: &str, name: &str, image: &str, secrets: &[&str]) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": "n1", "hostNetwork": true,
                 "imagePullSecrets": secrets.iter().map(|s| json!({"name": s})).collect::<Vec<_>>(),
                 "containers": [{"name": "c", "image": image,
                     "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]},
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

fn version(out: &ImageResolutions, image: &str) -> Result<String, String> {
    match out.get(image, &amd64()) {
        Some(ImageResolution::Resolved(p)) => Ok(p
            .iptables
            .as_ref()
            .and_then(|f| f.version.as_ref())
            .map(|v| v.to_string())
            .unwrap_or_default()),
        Some(ImageResolution::Unresolved { error }) => Err(error.clone()),
        None => Err("not answered".into()),
    }
}

/// Through the pods' projections, as the controller's store keeps them.
async fn resolve(images: &Bounded, pods: &[&Pod], image: &str) -> ImageResolutions {
    let keys = [ImageKey::new(image, &amd64())];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let facts: Vec<PodFacts> = pods.iter().map(|p| PodFacts::of(p)).collect();
    let facts: Vec<&PodFacts> = facts.iter().collect();
    images.resolve_for_pods(&facts, &keys, deadline).await
}

fn docker_config_json(host: &str, password: &str) -> String {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}"));
    json!({"auths": {host: {"auth": auth}}}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_reads_a_private_image_with_the_pods_own_pull_secret() {
    let work = tempfile::tempdir().unwrap();
    let (reg, image) = private_registry(work.path());
    let api = SecretsApi::new([
        dockerconfigjson_secret("apps", "regcred", &reg.host(), USER, PASSWORD),
        service_account("apps", "default", &[]),
    ]);
    let empty = Arc::new(DockerConfigFile::at(work.path().join("absent.json"), false));
    let images = controller_images(&reg, empty, &api);

    // With the pod's secret: the image's iptables.
    let owner = pod("owner", &image, &["regcred"]);
    let out = resolve(&images, &[&owner], &image).await;
    assert_eq!(version(&out, &image).as_deref(), Ok("1.8.11"));
    assert!(
        api.asked()
            .contains(&"/api/v1/namespaces/apps/secrets/regcred".to_string()),
        "{:?}",
        api.asked()
    );

    // Another pod with the same namespace, ServiceAccount and secret names
    // (a DaemonSet's next pod) shares that read: no request to the API.
    let read = api.asked().len();
    let sibling = pod("owner-2", &image, &["regcred"]);
    let out = resolve(&images, &[&sibling], &image).await;
    assert_eq!(version(&out, &image).as_deref(), Ok("1.8.11"));
    assert_eq!(api.asked().len(), read, "{:?}", api.asked());

    // Without it: unresolved, though the owner's answer is cached.
    let stranger = pod("stranger", &image, &[]);
    let out = resolve(&images, &[&stranger], &image).await;
    let err = version(&out, &image).unwrap_err();
    assert!(err.contains("unauthorized") || err.contains("401"), "{err}");

    // A secret held by another pod that does not run the image is not used
    // (its own image is not looked up here).
    let public = pod("holder", "127.0.0.1:1/elsewhere:v1", &["regcred"]);
    let out = resolve(&images, &[&stranger, &public], &image).await;
    assert!(version(&out, &image).is_err());
}

/// Issue #37: two tenants run one private image string under different
/// secrets (one that reads it, one the registry refuses). Each tenant's
/// answers (its policy reports) are read with its own secret only: the
/// refused tenant's pod stays unresolved though the other's answer for the
/// same image is cached, whichever pod comes first. The node plan, which
/// asks whether the node is safe, reads with the first pod's credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_running_one_private_image_each_get_their_own_answer() {
    let work = tempfile::tempdir().unwrap();
    let (reg, image) = private_registry(work.path());
    let api = SecretsApi::new([
        dockerconfigjson_secret("tenant-a", "regcred", &reg.host(), USER, PASSWORD),
        dockerconfigjson_secret("tenant-b", "regcred", &reg.host(), USER, "not-the-password"),
        service_account("tenant-a", "default", &[]),
        service_account("tenant-b", "default", &[]),
    ]);
    let empty = Arc::new(DockerConfigFile::at(work.path().join("absent.json"), false));
    let images = controller_images(&reg, empty, &api);
    let a = PodFacts::of(&pod_in("tenant-a", "agent", &image, &["regcred"]));
    let b = PodFacts::of(&pod_in("tenant-b", "agent", &image, &["regcred"]));
    let keys = vec![ImageKey::new(&image, &amd64())];
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(20);

    for (first, second) in [(&a, &b), (&b, &a)] {
        let pods = [first, second];
        let per_pod = images
            .resolve_per_pod(&pods, &[keys.clone(), keys.clone()], deadline())
            .await;
        assert_eq!(per_pod.groups(), 2);
        let (of_a, of_b) = if std::ptr::eq(first, &a) {
            (per_pod.of(0), per_pod.of(1))
        } else {
            (per_pod.of(1), per_pod.of(0))
        };
        assert_eq!(version(of_a, &image).as_deref(), Ok("1.8.11"));
        let err = version(of_b, &image).unwrap_err();
        assert!(err.contains("unauthorized") || err.contains("401"), "{err}");
    }
    // The node plan's look-up: one answer per image, read with the first
    // pod's credentials for its registry (the pods in the node's order).
    let node = images.resolve_for_pods(&[&a, &b], &keys, deadline()).await;
    assert_eq!(version(&node, &image).as_deref(), Ok("1.8.11"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docker_config_is_read_once_and_a_rewrite_is_picked_up_without_restart() {
    let work = tempfile::tempdir().unwrap();
    let (reg, image) = private_registry(work.path());
    let api = SecretsApi::new([service_account("apps", "default", &[])]);
    let path = work.path().join("config.json");
    std::fs::write(&path, docker_config_json(&reg.host(), "stale-password")).unwrap();
    let file = Arc::new(DockerConfigFile::at(&path, true));
    let images = controller_images(&reg, file.clone(), &api);
    let agent = pod("agent", &image, &[]);

    for _ in 0..3 {
        let out = resolve(&images, &[&agent], &image).await;
        assert!(
            version(&out, &image).is_err(),
            "a stale password reads nothing"
        );
    }
    assert_eq!(file.reads(), 1, "unchanged: read once");

    // Rotated on disk (as a mounted Secret is: a new file renamed over it).
    let next = work.path().join("config.json.new");
    std::fs::write(&next, docker_config_json(&reg.host(), PASSWORD)).unwrap();
    std::fs::rename(&next, &path).unwrap();
    for _ in 0..3 {
        let out = resolve(&images, &[&agent], &image).await;
        assert_eq!(version(&out, &image).as_deref(), Ok("1.8.11"));
    }
    assert_eq!(file.reads(), 2, "read again once, after the change");
}
