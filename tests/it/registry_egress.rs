//! The registry egress policy, redirects, the token flow and what users see,
//! against scripted registries on loopback. A refusal is proven by a
//! listener that records zero connections.

use crate::support::pki;
use crate::support::scripted_http as scripted;

use nfguard::registry::cli::RegistryArgs;
use nfguard::registry::egress::{Cidr, HostPattern};
use nfguard::registry::{
    Credentials, EGRESS_REFUSED, ImageInspector, Platform, RegistryConfig, RegistryError,
};
use scripted::{Reply, Request, Server, TlsIdentity};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &[u8] = br#"{"os":"linux","architecture":"amd64","config":{}}"#;

fn digest(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

/// A manifest with a config and no layers: inspecting it reads the
/// manifest, then the config blob, and is done.
fn manifest() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(CONFIG), "size": CONFIG.len()},
        "layers": []
    }))
    .unwrap()
}

fn config_path() -> String {
    format!("/v2/app/blobs/{}", digest(CONFIG))
}

/// Answers the manifest of `app:*` and the config blob.
fn image(req: &Request) -> Reply {
    if req.path().starts_with("/v2/app/manifests/") {
        Reply::ok(MANIFEST_TYPE, manifest())
    } else if req.path() == config_path() {
        Reply::ok("application/octet-stream", CONFIG.to_vec())
    } else {
        Reply::status(404)
    }
}

fn platform() -> Platform {
    "linux/amd64".parse().unwrap()
}

fn args(insecure: &[&str]) -> RegistryArgs {
    RegistryArgs {
        insecure_registries: insecure.iter().map(|s| s.to_string()).collect(),
        ..RegistryArgs::default()
    }
}

fn cidrs(list: &[&str]) -> Vec<Cidr> {
    list.iter().map(|c| c.parse().unwrap()).collect()
}

fn hosts(list: &[&str]) -> Vec<HostPattern> {
    list.iter().map(|h| h.parse().unwrap()).collect()
}

/// An inspector that reads an empty docker config, never the machine's.
fn inspector(config: RegistryConfig) -> ImageInspector {
    let empty = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/docker-config-empty.json");
    ImageInspector::new(RegistryConfig {
        docker_config: Some(empty),
        ..config
    })
}

async fn inspect(
    config: RegistryConfig,
    reference: &str,
    credentials: Option<&Credentials>,
) -> Result<(), RegistryError> {
    inspector(config)
        .inspect(reference, &platform(), credentials)
        .await
        .map(|_| ())
}

fn assert_refused_by_policy(e: &RegistryError) {
    let msg = e.to_string();
    assert!(
        matches!(e, RegistryError::Network { .. }) && msg.contains(EGRESS_REFUSED),
        "not an egress refusal: {msg}"
    );
    assert!(
        msg.contains("refused by the registry egress policy"),
        "{msg}"
    );
}

/// Inspecting `reference` with `config` fails as refused by the policy.
async fn assert_refused(config: RegistryConfig, reference: &str) -> RegistryError {
    let e = inspect(config, reference, None).await.unwrap_err();
    assert_refused_by_policy(&e);
    e
}

#[tokio::test]
async fn in_cluster_default_refuses_loopback_without_connecting() {
    let reg = Server::start("127.0.0.1", image);
    let port = reg.port();
    let literal = reg.host();
    // 127.0.0.1 as one decimal number: URL parsing makes it the literal.
    let decimal = format!("2130706433:{port}");
    let named = format!("localhost:{port}");
    for host in [&literal, &decimal, &named] {
        // Configured as the webhook and the controller configure themselves.
        let config = args(&[host]).in_cluster_config(Duration::from_secs(10));
        let e = assert_refused(config, &format!("{host}/app:1")).await;
        assert!(
            e.to_string().contains(host.as_str()),
            "names the registry: {e}"
        );
    }
    assert_eq!(reg.connections(), 0, "the refused registry was contacted");

    // The CLI's default reaches the same registry.
    let config = args(&[&literal]).config(Duration::from_secs(10));
    inspect(config, &format!("{literal}/app:1"), None)
        .await
        .unwrap();
    assert!(reg.connections() > 0);
}

#[tokio::test]
async fn allow_flags_lift_the_in_cluster_refusal() {
    let reg = Server::start("127.0.0.1", image);
    let host = reg.host();
    let by_cidr = RegistryArgs {
        allow_cidrs: cidrs(&["127.0.0.0/8"]),
        ..args(&[&host])
    };
    inspect(
        by_cidr.in_cluster_config(Duration::from_secs(10)),
        &format!("{host}/app:1"),
        None,
    )
    .await
    .unwrap();
    let by_host = RegistryArgs {
        allow_hosts: hosts(&["127.0.0.1"]),
        ..args(&[&host])
    };
    inspect(
        by_host.in_cluster_config(Duration::from_secs(10)),
        &format!("{host}/app:2"),
        None,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn deny_cidr_and_deny_host_refuse_without_connecting() {
    let denied = Server::start("127.0.0.2", image);
    let host = denied.host();
    // The CLI's permissive default, tightened by a deny-CIDR that wins over
    // an allow-CIDR naming the same address.
    let by_cidr = RegistryArgs {
        deny_cidrs: cidrs(&["127.0.0.2/32"]),
        allow_cidrs: cidrs(&["127.0.0.0/8"]),
        ..args(&[&host])
    };
    assert_refused(
        by_cidr.config(Duration::from_secs(10)),
        &format!("{host}/app:1"),
    )
    .await;
    let named = format!("LocalHost:{}", denied.port());
    let by_host = RegistryArgs {
        deny_hosts: hosts(&["localhost"]),
        ..args(&[&named])
    };
    assert_refused(
        by_host.config(Duration::from_secs(10)),
        &format!("{named}/app:1"),
    )
    .await;
    assert_eq!(denied.connections(), 0);
}

/// A registry whose config blob is redirected to `location`.
fn redirecting(location: String) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    move |req| {
        if req.path() == config_path() {
            Reply::redirect(&location)
        } else {
            image(req)
        }
    }
}

#[tokio::test]
async fn redirect_from_https_to_http_is_refused() {
    let target = Server::start("127.0.0.1", image);
    let pki = pki::pki();
    let tls = TlsIdentity {
        cert_pem: pki.cert_pem.clone(),
        key_pem: pki.key_pem.clone(),
    };
    let location = format!("http://{}{}", target.host(), config_path());
    let reg = Server::start_tls("127.0.0.1", &tls, redirecting(location));
    let host = reg.host();
    let config = RegistryConfig {
        extra_root_certificates_pem: pki.ca_pem.into_bytes(),
        ..args(&[]).config(Duration::from_secs(10))
    };
    let e = inspect(config.clone(), &format!("{host}/app:1"), None)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("redirect refused (https redirected to plain http)"),
        "{e}"
    );
    assert_eq!(target.connections(), 0, "the http target was contacted");
    // The TLS registry itself was spoken to (manifest, then the blob).
    let paths: Vec<_> = reg
        .requests()
        .iter()
        .map(|r| r.path().to_string())
        .collect();
    assert!(paths.contains(&config_path()), "{paths:?}");
}

#[tokio::test]
async fn redirect_to_a_denied_address_is_refused_without_connecting() {
    let denied = Server::start("127.0.0.2", image);
    let location = format!("http://{}{}", denied.host(), config_path());
    // (1) The CLI's policy with a deny-CIDR.
    let reg = Server::start("127.0.0.1", redirecting(location.clone()));
    let host = reg.host();
    let cli = RegistryArgs {
        deny_cidrs: cidrs(&["127.0.0.2/32"]),
        ..args(&[&host])
    };
    assert_refused(
        cli.config(Duration::from_secs(10)),
        &format!("{host}/app:1"),
    )
    .await;
    // (2) The in-cluster policy allowing the registry by name only: the
    // redirect's IP literal (an IPv4-mapped IPv6 form of the denied
    // listener) is checked (no resolver runs for it) and refused.
    let mapped = format!(
        "http://[::ffff:127.0.0.2]:{}{}",
        denied.port(),
        config_path()
    );
    let reg2 = Server::start("127.0.0.1", redirecting(mapped));
    let named = format!("localhost:{}", reg2.port());
    let in_cluster = RegistryArgs {
        allow_hosts: hosts(&["localhost"]),
        ..args(&[&named])
    };
    assert_refused(
        in_cluster.in_cluster_config(Duration::from_secs(10)),
        &format!("{named}/app:1"),
    )
    .await;
    assert_eq!(denied.connections(), 0, "the denied target was contacted");
    for r in [&reg, &reg2] {
        assert!(
            r.requests().iter().any(|q| q.path() == config_path()),
            "the inspection reached the redirect: {:?}",
            r.requests()
        );
    }
}

#[tokio::test]
async fn redirect_loops_stop_after_a_few_hops() {
    let hops = Arc::new(AtomicUsize::new(0));
    let h = hops.clone();
    let reg = Server::start("127.0.0.1", move |req| {
        if req.path().starts_with("/hop") || req.path() == config_path() {
            let n = h.fetch_add(1, Ordering::SeqCst);
            Reply::redirect(&format!("/hop{n}"))
        } else {
            image(req)
        }
    });
    let host = reg.host();
    let e = inspect(
        args(&[&host]).config(Duration::from_secs(10)),
        &format!("{host}/app:1"),
        None,
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("redirect refused (more than 3 redirects)"),
        "{e}"
    );
    // The first request and three followed hops; the fourth is refused.
    assert_eq!(hops.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn credentials_are_not_forwarded_to_another_host() {
    // Storage on another address: serves the blob to anyone, records headers.
    let storage = Server::start("127.0.0.2", image);
    let location = format!("http://{}{}", storage.host(), config_path());
    let redirect = redirecting(location);
    // A registry wanting Basic credentials on every request.
    let reg = Server::start("127.0.0.1", move |req| {
        if req.header("authorization") != Some("Basic YWxpY2U6czNjcmV0") {
            return Reply::status(401).header("WWW-Authenticate", r#"Basic realm="test""#);
        }
        redirect(req)
    });
    let host = reg.host();
    let alice = Credentials::Basic {
        username: "alice".into(),
        password: "s3cret".into(),
    };
    inspect(
        args(&[&host]).config(Duration::from_secs(10)),
        &format!("{host}/app:1"),
        Some(&alice),
    )
    .await
    .unwrap();
    let at_registry = reg.requests();
    assert!(
        at_registry
            .iter()
            .any(|r| r.path() == config_path() && r.header("authorization").is_some()),
        "the registry got the credentials: {at_registry:?}"
    );
    let at_storage = storage.requests();
    assert_eq!(at_storage.len(), 1, "{at_storage:?}");
    assert_eq!(at_storage[0].path(), config_path());
    assert_eq!(
        at_storage[0].header("authorization"),
        None,
        "credentials crossed to another host"
    );
}

/// A registry with the token flow: every /v2/ path wants `Bearer tok-N`
/// and answers 401 with a challenge whose realm is `realm`.
fn token_registry(realm: String, scopes: Arc<std::sync::Mutex<Vec<Request>>>) -> Server {
    Server::start("127.0.0.1", move |req| {
        if req.path() == "/token" {
            scopes.lock().unwrap().push(req.clone());
            return Reply::ok(
                "application/json",
                br#"{"token":"tok-1","expires_in":300}"#.to_vec(),
            );
        }
        if req.header("authorization") != Some("Bearer tok-1") {
            let realm = realm.replace("SELF", req.header("host").unwrap_or_default());
            return Reply::status(401)
                .header(
                    "WWW-Authenticate",
                    &format!(r#"Bearer realm="{realm}",service="svc",scope="repository:app:pull""#),
                )
                .body(r#"{"errors":[{"code":"UNAUTHORIZED","message":"SECRET-BODY"}]}"#);
        }
        image(req)
    })
}

#[tokio::test]
async fn token_flow_works_and_caches_the_token() {
    let token_requests = Arc::new(std::sync::Mutex::new(Vec::new()));
    let reg = token_registry("http://SELF/token".into(), token_requests.clone());
    let host = reg.host();
    let config = args(&[&host]).config(Duration::from_secs(10));
    let inspector = inspector(config);
    inspector
        .inspect(&format!("{host}/app:1"), &platform(), None)
        .await
        .unwrap();
    // Another tag of the same repository: the cached token is sent up front.
    inspector
        .inspect(&format!("{host}/app:2"), &platform(), None)
        .await
        .unwrap();
    let tokens = token_requests.lock().unwrap().clone();
    assert_eq!(tokens.len(), 1, "token fetched once: {tokens:?}");
    assert!(
        tokens[0].target.contains("service=svc")
            && tokens[0].target.contains("scope=repository%3Aapp%3Apull"),
        "{}",
        tokens[0].target
    );
    assert_eq!(tokens[0].header("authorization"), None, "anonymous");

    // With credentials: a separate token (another credential identity),
    // fetched with Basic authentication.
    let bob = Credentials::Basic {
        username: "bob".into(),
        password: "pw".into(),
    };
    inspector
        .inspect(&format!("{host}/app:3"), &platform(), Some(&bob))
        .await
        .unwrap();
    let tokens = token_requests.lock().unwrap().clone();
    assert_eq!(tokens.len(), 2, "{tokens:?}");
    assert_eq!(tokens[1].header("authorization"), Some("Basic Ym9iOnB3"));
}

#[tokio::test]
async fn token_realm_on_a_denied_address_is_refused_without_connecting() {
    let realm_srv = Server::start("127.0.0.2", |_| {
        Reply::ok("application/json", br#"{"token":"tok-1"}"#.to_vec())
    });
    let realm = format!("http://{}/token", realm_srv.host());
    let reg = token_registry(realm, Arc::default());
    let host = reg.host();
    let a = RegistryArgs {
        deny_cidrs: cidrs(&["127.0.0.2/32"]),
        ..args(&[&host])
    };
    let e = assert_refused(a.config(Duration::from_secs(10)), &format!("{host}/app:1")).await;
    assert!(!e.to_string().contains("SECRET"), "{e}");
    assert_eq!(realm_srv.connections(), 0);
}

#[tokio::test]
async fn what_users_see_is_the_host_a_status_and_a_reason_never_a_body() {
    let reg = Server::start("127.0.0.1", |req| match req.path() {
        "/v2/e500/manifests/1" => Reply::status(500).body("SECRET-BODY internal stack trace"),
        "/v2/e404/manifests/1" => Reply::status(404)
            .header("Content-Type", "application/json")
            .body(r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"SECRET-BODY"}]}"#),
        "/v2/e403/manifests/1" => Reply::status(403)
            .header("Content-Type", "application/json")
            .body(r#"{"errors":[{"code":"DENIED","message":"SECRET-BODY"}]}"#),
        "/v2/html/manifests/1" => {
            Reply::ok("text/html", b"<html>SECRET-BODY metadata</html>".to_vec())
        }
        "/v2/json/manifests/1" => Reply::ok(
            MANIFEST_TYPE,
            br#"{"schemaVersion":2,"config":"SECRET-BODY","layers":[]}"#.to_vec(),
        ),
        "/v2/mediatype/manifests/1" => Reply::ok(
            MANIFEST_TYPE,
            br#"{"schemaVersion":2,"mediaType":"SECRET<script>\u001b[31m","layers":[]}"#.to_vec(),
        ),
        "/v2/challenge/manifests/1" => {
            Reply::status(401).header("WWW-Authenticate", "SECRET-BODY realm=x")
        }
        _ => Reply::status(418).body("SECRET-BODY"),
    });
    let host = reg.host();
    let config = args(&[&host]).config(Duration::from_secs(10));
    for (repo, expect) in [
        ("e500", format!("cannot reach registry {host}: HTTP 500")),
        ("e404", format!("not found: manifest {host}/e404:1")),
        (
            "e403",
            format!("registry {host} refused the credentials (or needs some): HTTP 403"),
        ),
        (
            "html",
            "manifest is not JSON (invalid JSON at line 1 column 1)".into(),
        ),
        (
            "json",
            "manifest does not parse (unexpected structure".into(),
        ),
        (
            "mediatype",
            "unsupported manifest media type \"SECRETscript31m\"".into(),
        ),
        (
            "challenge",
            format!(
                "registry {host} refused the credentials (or needs some): authentication challenge has an unsupported scheme"
            ),
        ),
        ("teapot", format!("unexpected HTTP 418 from {host}")),
    ] {
        let e = inspect(config.clone(), &format!("{host}/{repo}:1"), None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(&expect), "{repo}: {e:?} lacks {expect:?}");
        assert!(
            !e.contains("SECRET-BODY") && !e.contains('<'),
            "{repo}: {e}"
        );
    }
}

/// `--registry-ca`: a registry served with a private CA's certificate is
/// refused until that CA is given, then read; a file that is not a CA
/// bundle is refused with a clear message when the flags are read.
#[tokio::test]
async fn a_private_registry_ca_is_trusted_only_when_given() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        registry: RegistryArgs,
    }
    let pki = pki::pki();
    let tls = TlsIdentity {
        cert_pem: pki.cert_pem.clone(),
        key_pem: pki.key_pem.clone(),
    };
    let reg = Server::start_tls("127.0.0.1", &tls, image);
    let reference = format!("{}/app:1", reg.host());
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, &pki.ca_pem).unwrap();

    // In process: the sandbox's program would be this test binary.
    let untrusted = inspect(
        Cli::parse_from(["t", "--image-parser", "in-process"])
            .registry
            .config(Duration::from_secs(10)),
        &reference,
        None,
    )
    .await
    .unwrap_err();
    assert!(
        untrusted.to_string().contains(
            "unreachable (TLS certificate not trusted; a private CA needs --registry-ca)"
        ),
        "{untrusted}"
    );
    let given = Cli::parse_from([
        "t",
        "--image-parser",
        "in-process",
        "--registry-ca",
        ca.to_str().unwrap(),
    ]);
    inspect(
        given.registry.config(Duration::from_secs(10)),
        &reference,
        None,
    )
    .await
    .expect("the registry is read once its CA is trusted");

    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let bad_der = dir.path().join("bad.pem");
    std::fs::write(
        &bad_der,
        "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let huge = dir.path().join("huge.pem");
    std::fs::write(&huge, vec![b'a'; (2 << 20) as usize]).unwrap();
    for (file, says) in [
        (&not_pem, "holds no PEM certificate"),
        (&bad_der, "certificate 1 of"),
        (&huge, "is larger than 1048576 bytes"),
        (&dir.path().join("absent.pem"), "cannot open"),
    ] {
        let e = Cli::try_parse_from(["t", "--registry-ca", file.to_str().unwrap()])
            .err()
            .expect("refused");
        assert!(e.to_string().contains(says), "{file:?}: {e}");
    }
}

/// Issue #37 item 4: `check --running` and `status` look up images that
/// the cluster's tenants named. Those go through the in-cluster refusing
/// policy even in the CLI (an operator's laptop or CI runner is not a port
/// scanner for a pod); the user's own manifests keep the CLI's default.
#[tokio::test]
async fn cluster_sourced_images_in_the_cli_are_refused_internal_addresses() {
    use nfguard::check::cli::LookupArgs;
    let reg = Server::start("127.0.0.1", image);
    let host = reg.host();
    let lookup = LookupArgs {
        registry: args(&[&host]),
        platform_default: "linux/amd64".into(),
        timeout: 10,
        concurrency: 1,
    };
    let reference = format!("{host}/app:1");

    let from_cluster = lookup.options(None, true);
    let e = from_cluster
        .lookup
        .lookup(&reference, &platform(), None)
        .await
        .unwrap_err();
    assert!(e.message.contains(EGRESS_REFUSED), "{}", e.message);
    assert_eq!(reg.connections(), 0, "the tenant's registry was contacted");

    let own = lookup.options(None, false);
    own.lookup
        .lookup(&reference, &platform(), None)
        .await
        .unwrap();
    assert!(reg.connections() > 0);
}
