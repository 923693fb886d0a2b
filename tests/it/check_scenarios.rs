//! The gate's scenarios through the whole `check` pipeline (files -> load ->
//! candidates -> image resolution -> evaluate -> report) with profile YAML in
//! the reporter's contract shape and an injected image resolver standing in
//! for the registry. tests/check_e2e.rs repeats them with real parts.

use nfguard::check::Report;
use nfguard::check::cli::CheckFormat as Format;
use nfguard::check::cli::{Args, Env, execute, render};
use nfguard::compat::evaluate::Verdict;
use nfguard::facts::Platform;
use nfguard::facts::{Backend, ImageProfile, IptablesFacts, Version};
use nfguard::judgement::{ImageLookup, LookupError};
use nfguard::registry::Credentials;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Images by reference: (version, backend); "stall/*" never answers.
struct FakeRegistry(HashMap<&'static str, (&'static str, Backend)>);

#[async_trait::async_trait]
impl ImageLookup for FakeRegistry {
    async fn lookup(
        &self,
        image: &str,
        platform: &Platform,
        _credentials: Option<&Credentials>,
    ) -> Result<ImageProfile, LookupError> {
        if image.starts_with("stall/") {
            futures::future::pending::<()>().await;
        }
        let (v, b) = self
            .0
            .get(image)
            .ok_or_else(|| LookupError::not_found(format!("{image}: manifest unknown")))?;
        Ok(ImageProfile {
            image: image.into(),
            digest: "sha256:feed".into(),
            platform: platform.to_string(),
            iptables: Some(IptablesFacts {
                version: Some(v.parse::<Version>().unwrap()),
                backend: Some(*b),
                ..Default::default()
            }),
            nftables: None,
        })
    }
}

fn registry() -> Arc<dyn ImageLookup> {
    Arc::new(FakeRegistry(HashMap::from([
        ("kube-router:1.8.7", ("1.8.7", Backend::Nft)),
        ("kube-router:1.8.9", ("1.8.9", Backend::Nft)),
        ("kube-proxy:wrapper", ("1.8.9", Backend::Wrapper)),
        ("flannel:legacy", ("1.8.9", Backend::Legacy)),
    ])))
}

/// Node profiles as the reporter writes them: node-a/b rules written by
/// 1.8.9 (native mark match -> minReader 1.8.8), node-c legacy.
const PROFILES: &str = r#"
apiVersion: nfguard.io/v1alpha1
kind: NodeNetfilterProfile
metadata: {name: node-a}
spec: {nodeName: node-a}
status:
  iptables:
    version: "1.8.9"
    backend: nft
    packageVersion: "1.8.9-2"
    evidence: [{source: dpkg, path: /var/lib/dpkg/status, detail: "iptables 1.8.9-2"}]
  kernel: {release: "6.1.0", nfTables: true, ipTables: true}
  backends:
    nft: {tables: 3, chains: 12, rules: 40, hintChain: true, canaryChain: true, markerTables: [ip/mangle]}
    legacy: {tables: 0, chains: 0, rules: 0, hintChain: false, canaryChain: false}
  activeBackend: nft
  minReaderVersion: "1.8.8"
  bridge: {brNetfilter: true, callIptables: true, callIp6tables: true}
  ipForward: true
  hazards: []
  lastProbeTime: "2026-11-22T07:00:00Z"
  probeIntervalSeconds: 60
---
apiVersion: nfguard.io/v1alpha1
kind: NodeNetfilterProfile
metadata: {name: node-b}
spec: {nodeName: node-b}
status:
  iptables: {version: "1.8.9", backend: nft, evidence: []}
  kernel: {release: "6.1.0", nfTables: true, ipTables: true}
  backends:
    nft: {tables: 3, chains: 12, rules: 40, hintChain: true, canaryChain: true}
    legacy: {tables: 0, chains: 0, rules: 0, hintChain: false, canaryChain: false}
  activeBackend: nft
  minReaderVersion: "1.8.8"
  writers:
  - {pod: kube-system/kube-proxy-x1, container: kube-proxy, image: "kube-proxy:wrapper", version: "1.8.9", backend: wrapper}
  newestWriterVersion: "1.8.9"
  oldestReaderVersion: "1.8.9"
---
apiVersion: nfguard.io/v1alpha1
kind: NodeNetfilterProfile
metadata: {name: node-c}
spec: {nodeName: node-c}
status:
  iptables: {version: "1.8.7", backend: legacy, evidence: []}
  kernel: {release: "5.10.0", nfTables: true, ipTables: true}
  backends:
    nft: {tables: 0, chains: 0, rules: 0, hintChain: false, canaryChain: false}
    legacy: {tables: 3, chains: 10, rules: 30, hintChain: true, canaryChain: true}
  activeBackend: legacy
"#;

const NODES: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: node-a
    labels: {kubernetes.io/os: linux, kubernetes.io/arch: amd64, nfguard.io/iptables-backend: nft}
- apiVersion: v1
  kind: Node
  metadata:
    name: node-b
    labels: {kubernetes.io/os: linux, kubernetes.io/arch: amd64, nfguard.io/iptables-backend: nft}
- apiVersion: v1
  kind: Node
  metadata:
    name: node-c
    labels: {kubernetes.io/os: linux, kubernetes.io/arch: amd64, nfguard.io/iptables-backend: legacy}
"#;

fn daemonset(name: &str, image: &str, host_network: bool, caps: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {name}
  namespace: kube-system
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      hostNetwork: {host_network}
{extra}
      containers:
      - name: {name}
        image: "{image}"
        securityContext: {{capabilities: {{add: [{caps}]}}}}
"#
    )
}

struct Files {
    _dir: tempfile::TempDir,
    manifest: PathBuf,
    profiles: PathBuf,
    nodes: PathBuf,
}

fn files(manifest: &str) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let w = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    Files {
        manifest: w("m.yaml", manifest),
        profiles: w("profiles.yaml", PROFILES),
        nodes: w("nodes.yaml", NODES),
        _dir: dir,
    }
}

fn args(manifest: &Path, profiles: &Path, nodes: Option<&Path>) -> Args {
    Args {
        files: vec![manifest.display().to_string()],
        profiles: Some(profiles.to_path_buf()),
        nodes: nodes.map(Path::to_path_buf),
        policy: None,
        lookup: nfguard::check::cli::LookupArgs {
            registry: Default::default(),
            platform_default: "linux/amd64".into(),
            timeout: 2,
            concurrency: 4,
        },
        kubeconfig: None,
        cluster: false,
        output: Format::Json,
        max_nodes: 10,
        what_if: Default::default(),
    }
}

async fn check(manifest: &str, with_nodes: bool) -> Report {
    let f = files(manifest);
    let a = args(
        &f.manifest,
        &f.profiles,
        with_nodes.then_some(f.nodes.as_path()),
    );
    execute(
        &a,
        Env {
            lookup: Some(registry()),
            client: None,
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn incident_old_kube_router_on_nodes_written_by_189_is_denied() {
    let r = check(
        &daemonset("kube-router", "kube-router:1.8.7", true, "NET_ADMIN", ""),
        false,
    )
    .await;
    assert_eq!(r.verdict, Verdict::Deny);
    assert_eq!(r.exit_code(), 1);
    let res = &r.results[0];
    assert_eq!(res.object, "DaemonSet/kube-system/kube-router");
    let deny = res
        .reasons
        .iter()
        .find(|x| x.code.to_string() == "OldReaderNewRules")
        .expect("OldReaderNewRules");
    assert_eq!(deny.nodes, vec!["node-a", "node-b"]);
    assert!(
        deny.message.contains("drops those matches"),
        "{}",
        deny.message
    );
    assert!(
        deny.remedy
            .as_deref()
            .unwrap()
            .contains("iptables >= 1.8.9")
    );
    // node-c is legacy: the nft image splits the rule sets there.
    let split = res
        .reasons
        .iter()
        .find(|x| x.code.to_string() == "BackendMismatch")
        .unwrap();
    assert_eq!(split.nodes, vec!["node-c"]);
    let json = render(&r, Format::Json, 10).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["verdict"], "deny");
    assert_eq!(v["results"][0]["reasons"][0]["node"], "node-a");
}

#[tokio::test]
async fn wrapper_image_is_allowed_on_nft_and_legacy_nodes() {
    let r = check(
        &daemonset("kube-proxy", "kube-proxy:wrapper", true, "NET_ADMIN", ""),
        false,
    )
    .await;
    assert_eq!(r.verdict, Verdict::Allow, "{:#?}", r.results);
    assert_eq!(r.exit_code(), 0);
}

#[tokio::test]
async fn legacy_image_on_nft_nodes_is_denied() {
    let r = check(
        &daemonset("flannel", "flannel:legacy", true, "NET_ADMIN", ""),
        false,
    )
    .await;
    assert_eq!(r.verdict, Verdict::Deny);
    let split = &r.results[0].reasons[0];
    assert_eq!(split.code.to_string(), "BackendMismatch");
    assert_eq!(split.nodes, vec!["node-a", "node-b"]);
    assert!(
        split
            .remedy
            .as_deref()
            .unwrap()
            .contains("nodeSelector nfguard.io/iptables-backend=legacy")
    );
}

#[tokio::test]
async fn node_selector_keeping_it_on_compatible_nodes_is_allowed() {
    let sel = "      nodeSelector: {nfguard.io/iptables-backend: legacy}";
    let m = daemonset("flannel", "flannel:legacy", true, "NET_ADMIN", sel);
    let r = check(&m, true).await;
    assert_eq!(r.verdict, Verdict::Allow, "{:#?}", r.results);
    assert_eq!(r.results[0].candidate_nodes, 1);
    // Without Node objects the selector cannot be evaluated: every profile counts.
    let r = check(&m, false).await;
    assert_eq!(r.verdict, Verdict::Deny);
}

#[tokio::test]
async fn no_host_network_no_net_admin_is_allowed_without_lookups() {
    // The image is unknown to the registry: it must not even be looked up.
    let r = check(&daemonset("app", "unknown:1", false, "", ""), false).await;
    assert_eq!(r.verdict, Verdict::Allow);
    assert!(r.results[0].reasons.is_empty());
    assert_eq!(r.results[0].containers_in_scope, 0);
}

#[tokio::test]
async fn stalling_registry_gives_warn_within_the_timeout() {
    let start = Instant::now();
    let r = check(
        &daemonset("kr", "stall/kube-router:1", true, "NET_ADMIN", ""),
        false,
    )
    .await;
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "took {took:?} with a 2 s budget"
    );
    assert_eq!(r.verdict, Verdict::Warn);
    let reason = &r.results[0].reasons[0];
    assert_eq!(reason.code.to_string(), "ImageUnresolved");
    assert!(
        reason.message.contains("timed out after 2s"),
        "{}",
        reason.message
    );
    assert_eq!(r.exit_code(), 0);
}

#[tokio::test]
async fn unknown_image_warns_by_default_and_denies_under_a_strict_policy() {
    let f = files(&daemonset("kr", "missing:1", true, "NET_ADMIN", ""));
    let mut a = args(&f.manifest, &f.profiles, None);
    let env = || Env {
        lookup: Some(registry()),
        client: None,
    };
    let r = execute(&a, env()).await.unwrap();
    assert_eq!(r.verdict, Verdict::Warn);
    assert!(r.results[0].reasons[0].message.contains("manifest unknown"));
    let pol = f.manifest.with_file_name("policy.yaml");
    std::fs::write(
        &pol,
        "apiVersion: nfguard.io/v1alpha1\nkind: NetfilterPolicy\nmetadata: {name: strict}\nspec: {action: Deny, unresolvedImages: Deny}\n",
    )
    .unwrap();
    a.policy = Some(pol);
    let r = execute(&a, env()).await.unwrap();
    assert_eq!(r.verdict, Verdict::Deny);
}

#[tokio::test]
async fn policy_warn_action_and_exempt_images() {
    let f = files(&daemonset(
        "kube-router",
        "kube-router:1.8.7",
        true,
        "NET_ADMIN",
        "",
    ));
    let mut a = args(&f.manifest, &f.profiles, None);
    let pol = f.manifest.with_file_name("policy.yaml");
    let env = || Env {
        lookup: Some(registry()),
        client: None,
    };
    std::fs::write(
        &pol,
        "apiVersion: nfguard.io/v1alpha1\nkind: NetfilterPolicy\nmetadata: {name: soft}\nspec: {action: Warn}\n",
    )
    .unwrap();
    a.policy = Some(pol.clone());
    let r = execute(&a, env()).await.unwrap();
    assert_eq!(r.verdict, Verdict::Warn);
    assert_eq!(r.exit_code(), 0);
    std::fs::write(
        &pol,
        "apiVersion: nfguard.io/v1alpha1\nkind: NetfilterPolicy\nmetadata: {name: ex}\nspec: {exemptImages: [\"kube-router:*\"]}\n",
    )
    .unwrap();
    let r = execute(&a, env()).await.unwrap();
    assert_eq!(r.verdict, Verdict::Allow);
    assert_eq!(r.results[0].reasons[0].code.to_string(), "ImageExempt");
}

#[tokio::test]
async fn several_files_and_objects_pool_lookups_and_take_the_worst_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let a_path = dir.path().join("a.yaml");
    let b_path = dir.path().join("b.yaml");
    std::fs::write(
        &a_path,
        daemonset("kube-proxy", "kube-proxy:wrapper", true, "NET_ADMIN", ""),
    )
    .unwrap();
    std::fs::write(
        &b_path,
        format!(
            "{}\n---\n{}",
            daemonset("kube-router", "kube-router:1.8.9", true, "NET_ADMIN", ""),
            daemonset("old", "kube-router:1.8.7", true, "NET_ADMIN", "")
        ),
    )
    .unwrap();
    let p = dir.path().join("profiles.yaml");
    std::fs::write(&p, PROFILES).unwrap();
    let mut a = args(&a_path, &p, None);
    a.files.push(b_path.display().to_string());
    let r = execute(
        &a,
        Env {
            lookup: Some(registry()),
            client: None,
        },
    )
    .await
    .unwrap();
    let verdicts: Vec<(String, Verdict)> = r
        .results
        .iter()
        .map(|x| (x.object.clone(), x.verdict))
        .collect();
    assert_eq!(
        verdicts,
        vec![
            (
                "DaemonSet/kube-system/kube-proxy".to_string(),
                Verdict::Allow
            ),
            // 1.8.9 nft on the legacy node-c is still a backend split.
            (
                "DaemonSet/kube-system/kube-router".to_string(),
                Verdict::Deny
            ),
            ("DaemonSet/kube-system/old".to_string(), Verdict::Deny),
        ]
    );
    assert_eq!(r.verdict, Verdict::Deny);
    let text = render(&r, Format::Text, 10).unwrap();
    assert!(text.contains("DENY  DaemonSet/kube-system/old"), "{text}");
    assert!(text.contains("verdict: deny"));
}
