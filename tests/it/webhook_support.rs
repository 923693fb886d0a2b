//! Shared by the webhook tests: profile/node facts in the reporter's contract
//! shape, workload manifests, AdmissionReview v1 envelopes as the API server
//! sends them, and an in-process router built like `nfguard webhook` builds it.

use nfguard::facts::Platform;
use nfguard::facts::{Backend, ImageProfile, IptablesFacts, Version};
use nfguard::judgement::{ImageLookup, LookupError};
use nfguard::registry::Credentials;
use nfguard::webhook::decisions::DecisionCache;
use nfguard::webhook::facts::Facts;
use nfguard::webhook::images::{CacheTtl, ImageCache};
use nfguard::webhook::metrics::Metrics;
use nfguard::webhook::{AppState, Judge};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Node profiles: node-a/b rules written by 1.8.9 (minReader 1.8.8), node-c legacy.
pub const PROFILES: &str = r#"
apiVersion: nfguard.io/v1alpha1
kind: NodeNetfilterProfile
metadata: {name: node-a}
spec: {nodeName: node-a}
status:
  iptables: {version: "1.8.9", backend: nft, packageVersion: "1.8.9-2", evidence: []}
  kernel: {release: "6.1.0", nfTables: true, ipTables: true}
  backends:
    nft: {tables: 3, chains: 12, rules: 40, hintChain: true, canaryChain: true, markerTables: [ip/mangle]}
    legacy: {tables: 0, chains: 0, rules: 0, hintChain: false, canaryChain: false}
  activeBackend: nft
  minReaderVersion: "1.8.8"
  hazards: []
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

pub const NODES: &str = r#"
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

/// Images by reference: (version, backend); "stall/*" never answers,
/// "slow/*" answers after `slow` (then as "kube-router:1.8.7").
pub struct FakeRegistry {
    pub images: HashMap<String, (String, Backend)>,
    pub slow: Duration,
}

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
        let lookup = if image.starts_with("slow/") {
            tokio::time::sleep(self.slow).await;
            "kube-router:1.8.7"
        } else {
            image
        };
        let (v, b) = self
            .images
            .get(lookup)
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

pub fn fake_registry(slow: Duration) -> Arc<dyn ImageLookup> {
    Arc::new(FakeRegistry {
        images: [
            ("kube-router:1.8.7", ("1.8.7", Backend::Nft)),
            ("kube-router:1.8.9", ("1.8.9", Backend::Nft)),
            ("kube-proxy:wrapper", ("1.8.9", Backend::Wrapper)),
            ("flannel:legacy", ("1.8.9", Backend::Legacy)),
            ("netshoot:1.8.7", ("1.8.7", Backend::Nft)),
            ("busybox:1", ("1.8.7", Backend::Nft)),
        ]
        .into_iter()
        .map(|(k, (v, b))| (k.to_string(), (v.to_string(), b)))
        .collect(),
        slow,
    })
}

pub struct Fixture {
    pub dir: tempfile::TempDir,
}

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("profiles.yaml"), PROFILES).unwrap();
        std::fs::write(dir.path().join("nodes.yaml"), NODES).unwrap();
        Fixture { dir }
    }
    pub fn profiles(&self) -> std::path::PathBuf {
        self.dir.path().join("profiles.yaml")
    }
    pub fn nodes(&self) -> std::path::PathBuf {
        self.dir.path().join("nodes.yaml")
    }
    pub fn write(&self, name: &str, text: &str) -> std::path::PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

/// The router as `nfguard webhook --profiles --nodes [--policy]` builds it.
pub fn state(
    profiles: &Path,
    nodes: Option<&Path>,
    policy: Option<&Path>,
    resolver: Arc<dyn ImageLookup>,
    timeout: Duration,
) -> AppState {
    let metrics = Arc::new(Metrics::new());
    let facts = Arc::new(Facts::from_files(profiles, nodes, policy).unwrap());
    let images = Arc::new(ImageCache::new(
        resolver,
        1000,
        CacheTtl::default(),
        metrics.clone(),
    ));
    AppState {
        judge: Arc::new(Judge {
            facts,
            images,
            pull_secrets: None,
            metrics: metrics.clone(),
            timeout,
            default_platform: "linux/amd64".parse().unwrap(),
            max_nodes: 5,
            decisions: DecisionCache::new(64),
        }),
        intake: nfguard::webhook::intake::Intake::open(metrics.clone()),
        metrics,
        ready: Arc::new(|| true),
    }
}

pub fn container(name: &str, image: &str, caps: &[&str]) -> Value {
    json!({
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "securityContext": {"capabilities": {"add": caps}},
    })
}

pub fn pod_spec(host_network: bool, containers: Vec<Value>) -> Value {
    json!({
        "hostNetwork": host_network,
        "containers": containers,
        "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "terminationGracePeriodSeconds": 30,
        "tolerations": [{"operator": "Exists"}],
    })
}

/// (group, version, kind, resource) for the kinds nfguard judges.
pub fn gvk(kind: &str) -> (&'static str, &'static str, &'static str) {
    match kind {
        "Pod" => ("", "v1", "pods"),
        "DaemonSet" => ("apps", "v1", "daemonsets"),
        "Deployment" => ("apps", "v1", "deployments"),
        "StatefulSet" => ("apps", "v1", "statefulsets"),
        "ReplicaSet" => ("apps", "v1", "replicasets"),
        "Job" => ("batch", "v1", "jobs"),
        "CronJob" => ("batch", "v1", "cronjobs"),
        "ConfigMap" => ("", "v1", "configmaps"),
        _ => ("example.com", "v1", "widgets"),
    }
}

/// A workload object of `kind` whose pod spec is `spec`.
pub fn object(kind: &str, name: &str, ns: &str, spec: Value, annotations: Value) -> Value {
    let (group, version, _) = gvk(kind);
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let meta = json!({
        "name": name, "namespace": ns, "uid": "0b5c6a52-0c0a-4bd1-9a7e-6a8d1f2f3e11",
        "creationTimestamp": null, "labels": {"app": name}, "annotations": annotations,
    });
    let template = json!({"metadata": {"labels": {"app": name}}, "spec": spec});
    let body = match kind {
        "Pod" => {
            return json!({"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec, "status": {}});
        }
        "CronJob" => {
            json!({"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": template}}})
        }
        "Job" => json!({"template": template, "backoffLimit": 6}),
        _ => json!({"selector": {"matchLabels": {"app": name}}, "template": template}),
    };
    json!({"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": body, "status": {}})
}

/// An AdmissionReview v1 as the API server sends it.
pub fn review(
    kind: &str,
    sub: Option<&str>,
    op: &str,
    ns: &str,
    obj: Value,
    dry_run: bool,
) -> Value {
    let (group, version, resource) = gvk(kind);
    let name = obj.pointer("/metadata/name").cloned().unwrap_or(json!(""));
    let mut req = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": name,
        "namespace": ns,
        "operation": op,
        "userInfo": {"username": "admin", "uid": "014fbff9a07c", "groups": ["system:authenticated", "my-admin-group"]},
        "object": obj.clone(),
        "oldObject": if op == "UPDATE" { obj } else { Value::Null },
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": if op == "UPDATE" {"UpdateOptions"} else {"CreateOptions"}},
    });
    if let Some(s) = sub {
        req["subResource"] = json!(s);
        req["requestSubResource"] = json!(s);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// The incident as a review: kube-router's DaemonSet (hostNetwork,
/// NET_ADMIN) with `image`, created in kube-system.
pub fn incident(image: &str) -> Value {
    let spec = pod_spec(true, vec![container("kube-router", image, &["NET_ADMIN"])]);
    review(
        "DaemonSet",
        None,
        "CREATE",
        "kube-system",
        object("DaemonSet", "kube-router", "kube-system", spec, json!({})),
        false,
    )
}

/// `nfguard webhook --listen 127.0.0.1:0 ARGS...` with logs at info and no
/// docker config; returns the child and its first stdout line
/// (`nfguard webhook listening on https://ADDR metrics=...`).
pub fn spawn_webhook<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nfguard"))
        .args(["webhook", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("NFGUARD_LOG", "info")
        .env("HOME", "/nonexistent")
        .env_remove("DOCKER_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("start nfguard webhook");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

/// The webhook binary on loopback with the fixture's facts and its own TLS
/// files (metrics off); killed when dropped.
pub struct SpawnedWebhook {
    pub child: std::process::Child,
    pub https: std::net::SocketAddr,
}

impl SpawnedWebhook {
    pub fn start(
        fx: &Fixture,
        cert: impl AsRef<std::ffi::OsStr>,
        key: impl AsRef<std::ffi::OsStr>,
        extra: &[&str],
    ) -> Self {
        let mut args: Vec<std::ffi::OsString> = vec!["--metrics-listen".into(), "off".into()];
        args.extend(["--tls-cert".into(), cert.as_ref().into()]);
        args.extend(["--tls-key".into(), key.as_ref().into()]);
        args.extend(["--profiles".into(), fx.profiles().into()]);
        args.extend(["--nodes".into(), fx.nodes().into()]);
        args.extend(extra.iter().map(Into::into));
        let (child, line) = spawn_webhook(args);
        SpawnedWebhook {
            https: https_addr(&line),
            child,
        }
    }
}

impl SpawnedWebhook {
    /// Peak resident set of the webhook so far (KiB), from the kernel.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }
}

/// The children of `parent` now (the webhook's image parsers).
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let (_, rest) = stat.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// Proportional set size (`Pss` of smaps_rollup): the process's private
/// pages and its share of the pages it shares. Summed over processes it
/// counts the binary's text and libraries once, as the container's memory
/// cgroup does, not once per parser child.
fn pss_kib(pid: u32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Samples, every 5 ms until dropped, what the webhook and the parser
/// children alive at that moment hold together (the sum of their PSS), and
/// keeps the largest sum. Summing each process's peak RSS instead counted
/// the shared binary once per child and added peaks that never coincided:
/// with 8 children at once it read 558 MiB where the processes held far
/// less together.
pub struct FamilyRss {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<(u64, usize)>>,
}

impl FamilyRss {
    /// (the largest sum in KiB, the most children seen at once).
    pub fn finish(mut self) -> (u64, usize) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl SpawnedWebhook {
    pub fn watch_family_rss(&self) -> FamilyRss {
        let pid = self.child.id();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut most, mut widest) = (0u64, 0usize);
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let children = children_of(pid);
                let sum = pss_kib(pid).unwrap_or(0)
                    + children.iter().filter_map(|c| pss_kib(*c)).sum::<u64>();
                most = most.max(sum);
                widest = widest.max(children.len());
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            (most, widest)
        });
        FamilyRss {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for SpawnedWebhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The HTTPS address in `spawn_webhook`'s line.
pub fn https_addr(line: &str) -> std::net::SocketAddr {
    let port: u16 = line
        .split_whitespace()
        .find_map(|p| p.strip_prefix("https://127.0.0.1:"))
        .and_then(|p| p.parse().ok())
        .expect(line);
    ([127, 0, 0, 1], port).into()
}

/// A client trusting only `ca_pem`, reaching `https://localhost:PORT` at `https`.
pub fn localhost_client(ca_pem: &str, https: std::net::SocketAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .use_rustls_tls()
        .resolve("localhost", https)
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap()
}
