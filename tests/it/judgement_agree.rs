//! The webhook, `nfguard check` and the controller judge through one path
//! (`nfguard::judgement`), so for the same facts they must agree. Generated
//! clusters (node backends and versions, marker chains, platforms, policies
//! with namespace-label selectors, exempt globs, invalid policies, writer
//! pods with several images, exempt annotations) are fed to all three:
//! - check and the webhook return the same decision (verdict and reasons),
//!   and so does the path without a `NodeIndex`;
//! - the controller (its production path: caches fed as its watches feed
//!   them, then `plan_from_caches`) taints for a running pod exactly when a
//!   `Taint` policy selects its namespace and the webhook finds critical
//!   reasons, the same ones;
//! - the controller's policy report (its production path: the same caches,
//!   then `judge_reports`) lists for the pod on its node exactly the
//!   webhook's reasons, each with the result its effect gives (deny -> fail,
//!   warn -> warn; allowed ones error, skip or pass by class), one
//!   `Compatible` pass when a writer has none, and no report for a pod that
//!   cannot write rules; its worst result is the webhook's verdict.
//!
//! Some images are private: the registry answers them only to the right
//! pull secret, which the pod names itself, or its ServiceAccount does, or
//! which is wrong, or absent. The webhook and the controller read it through
//! the API (a fake API server behind a real kube client), `check` is given
//! the same credentials as its docker config; all agree, and differ from an
//! anonymous caller, for whom the image is unresolved.

use crate::support::secrets_api::{SecretsApi, dockerconfigjson_secret, service_account};
use k8s_openapi::api::core::v1::{Node, Pod};
use nfguard::api::PolicyAction;
use nfguard::api::{NetfilterPolicy, NodeNetfilterProfile};
use nfguard::check::{CheckError, Inputs, ResolveOptions, check};
use nfguard::compat::evaluate::{
    Decision, ImageResolutions, ReasonCode, Verdict, Workload, pod_spec_can_write, validate_policy,
};
use nfguard::controller::apply::gather::plan_from_caches;
use nfguard::controller::cache::namespaces::NamespaceMeta;
use nfguard::controller::cache::stores::{FirstLists, caches};
use nfguard::controller::reports::judge::{Scope, judge_reports};
use nfguard::controller::reports::owners::parents;
use nfguard::facts::{Backend, ImageProfile, IptablesFacts, Platform};
use nfguard::judgement::pull_secrets::PullSecretReader;
use nfguard::judgement::{
    Bounded, FixedImages, ImageLookup, LookupError, PolicyBook, Scene, Subject,
};
use nfguard::registry::{Anonymous, CredentialSource, Credentials};
use nfguard::reports::{RULE_COMPATIBLE, ResultKind, result_kind};
use nfguard::webhook::admission::Judge;
use nfguard::webhook::facts::{Facts, Snapshot};
use nfguard::webhook::images::{CacheTtl, ImageCache};
use nfguard::webhook::metrics::Metrics;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

const NAMESPACE: &str = "payments";

/// Image references and what they bundle (None: the registry has no such image).
const IMAGES: &[(&str, Option<(&str, Backend)>)] = &[
    ("cni:1.8.7", Some(("1.8.7", Backend::Nft))),
    ("cni:1.8.9", Some(("1.8.9", Backend::Nft))),
    ("cni:1.8.11", Some(("1.8.11", Backend::Nft))),
    ("flannel:legacy", Some(("1.8.9", Backend::Legacy))),
    ("proxy:wrapper", Some(("1.8.11", Backend::Wrapper))),
    ("vendor/exempt-agent:1", Some(("1.8.7", Backend::Nft))),
    ("missing:1", None),
    (
        "private.registry.test/cni:1.8.7",
        Some(("1.8.7", Backend::Nft)),
    ),
    (
        "private.registry.test/flannel:legacy",
        Some(("1.8.9", Backend::Legacy)),
    ),
];

/// The registry that answers its images only to `PULL_USER:PULL_PASSWORD`.
const PRIVATE_HOST: &str = "private.registry.test";
const PULL_USER: &str = "puller";
const PULL_PASSWORD: &str = "right-password";

fn pull_credentials(password: &str) -> Credentials {
    Credentials::Basic {
        username: PULL_USER.into(),
        password: password.into(),
    }
}

fn is_private(image: &str) -> bool {
    image.starts_with(PRIVATE_HOST)
}

/// Where the pod's pull secret comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PullSecret {
    None,
    /// The right one, in the pod's own `imagePullSecrets`.
    Pod,
    /// The right one, in its ServiceAccount's.
    ServiceAccount,
    /// One with a wrong password, in the pod's own.
    Wrong,
}

impl PullSecret {
    /// The credentials it holds for the private registry.
    fn credentials(self) -> Option<Credentials> {
        match self {
            PullSecret::None => None,
            PullSecret::Pod | PullSecret::ServiceAccount => Some(pull_credentials(PULL_PASSWORD)),
            PullSecret::Wrong => Some(pull_credentials("wrong-password")),
        }
    }
}

#[derive(Clone, Debug)]
struct NodeSpec {
    arm: bool,
    legacy_rules: bool,
    host_version: &'static str,
    min_reader: bool,
    markers: bool,
}

#[derive(Clone, Debug)]
struct PolicySpec {
    action: &'static str,
    /// 0: none, 1: matchLabels team=net, 2: team NotIn [net], 3: another namespace by name.
    selector: u8,
    exempt: bool,
    invalid: bool,
}

#[derive(Clone, Debug)]
struct ContainerSpec {
    image: usize,
    net_admin: bool,
    privileged: bool,
    init: bool,
}

#[derive(Clone, Debug)]
struct Cluster {
    nodes: Vec<NodeSpec>,
    team: &'static str,
    policies: Vec<PolicySpec>,
    host_network: bool,
    on_node: usize,
    containers: Vec<ContainerSpec>,
    exempt_annotation: bool,
    pull_secret: PullSecret,
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::sample::select(vec!["1.8.7", "1.8.9", "1.8.11"]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(arm, legacy_rules, host_version, min_reader, markers)| NodeSpec {
                arm,
                legacy_rules,
                host_version,
                min_reader,
                markers,
            },
        )
}

fn policy_spec() -> impl Strategy<Value = PolicySpec> {
    (
        prop::sample::select(vec!["Warn", "Taint", "Deny"]),
        0u8..4,
        any::<bool>(),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(action, selector, exempt, invalid)| PolicySpec {
            action,
            selector,
            exempt,
            invalid,
        })
}

fn container_spec() -> impl Strategy<Value = ContainerSpec> {
    (
        0..IMAGES.len(),
        prop::bool::weighted(0.7),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(image, net_admin, privileged, init)| ContainerSpec {
            image,
            net_admin,
            privileged,
            init,
        })
}

fn cluster() -> impl Strategy<Value = Cluster> {
    (
        prop::collection::vec(node_spec(), 1..4),
        prop::sample::select(vec!["net", "web"]),
        prop::collection::vec(policy_spec(), 0..3),
        prop::bool::weighted(0.8),
        0usize..3,
        prop::collection::vec(container_spec(), 1..4),
        prop::bool::weighted(0.1),
        prop::sample::select(vec![
            PullSecret::None,
            PullSecret::Pod,
            PullSecret::ServiceAccount,
            PullSecret::Wrong,
        ]),
    )
        .prop_map(
            |(
                nodes,
                team,
                policies,
                host_network,
                on_node,
                containers,
                exempt_annotation,
                pull_secret,
            )| {
                let on_node = on_node % nodes.len();
                Cluster {
                    nodes,
                    team,
                    policies,
                    host_network,
                    on_node,
                    containers,
                    exempt_annotation,
                    pull_secret,
                }
            },
        )
}

fn node_name(i: usize) -> String {
    format!("n{i}")
}

fn node(i: usize, n: &NodeSpec) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": node_name(i), "labels": {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": if n.arm { "arm64" } else { "amd64" }}},
        "spec": {}
    }))
    .unwrap()
}

fn profile(i: usize, n: &NodeSpec) -> NodeNetfilterProfile {
    let backend = if n.legacy_rules { "legacy" } else { "nft" };
    let counts = |used: bool| {
        json!({"tables": if used {3} else {0}, "chains": if used {20} else {0},
               "rules": if used {100} else {0},
               "hintChain": used && n.markers, "canaryChain": used && n.markers})
    };
    serde_json::from_value(json!({
        "metadata": {"name": node_name(i), "generation": 1},
        "spec": {"nodeName": node_name(i)},
        "status": {
            "iptables": {"version": n.host_version, "backend": backend, "evidence": []},
            "kernel": {"release": "6.1", "nfTables": true, "ipTables": true},
            "backends": {"nft": counts(!n.legacy_rules), "legacy": counts(n.legacy_rules)},
            "activeBackend": backend,
            "minReaderVersion": if n.min_reader && !n.legacy_rules { json!("1.8.8") } else { json!(null) },
            "hazards": [],
            "lastProbeTime": "2026-03-01T11:59:30Z",
            "probeIntervalSeconds": 60
        }
    }))
    .unwrap()
}

fn policy(i: usize, p: &PolicySpec) -> NetfilterPolicy {
    let selector = match p.selector {
        1 => json!({"matchLabels": {"team": "net"}}),
        2 => json!({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["net"]}]}),
        3 => json!({"matchLabels": {"kubernetes.io/metadata.name": "elsewhere"}}),
        _ => Value::Null,
    };
    let mut exempt = Vec::new();
    if p.exempt {
        exempt.push("vendor/*");
    }
    if p.invalid {
        exempt.push("[unclosed");
    }
    let mut spec = json!({"action": p.action, "exemptImages": exempt});
    if !selector.is_null() {
        spec["namespaceSelector"] = selector;
    }
    serde_json::from_value(json!({
        "apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicy",
        "metadata": {"name": format!("policy-{i}"), "generation": 1},
        "spec": spec
    }))
    .unwrap()
}

fn pod(c: &Cluster) -> Value {
    let container = |i: usize, s: &ContainerSpec| {
        let mut sc = json!({});
        if s.net_admin {
            sc["capabilities"] = json!({"add": ["NET_ADMIN"]});
        }
        if s.privileged {
            sc["privileged"] = json!(true);
        }
        json!({"name": format!("c{i}"), "image": IMAGES[s.image].0, "securityContext": sc})
    };
    let (init, app): (Vec<_>, Vec<_>) = c
        .containers
        .iter()
        .enumerate()
        .map(|(i, s)| (s.init, container(i, s)))
        .partition(|(init, _)| *init);
    let mut annotations = json!({});
    if c.exempt_annotation {
        annotations["nfguard.io/exempt"] = json!("vendor support case 42");
    }
    let pull_secrets = match c.pull_secret {
        PullSecret::Pod => json!([{"name": "regcred"}]),
        PullSecret::Wrong => json!([{"name": "wrongcred"}]),
        PullSecret::None | PullSecret::ServiceAccount => json!([]),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent", "namespace": NAMESPACE, "annotations": annotations},
        "spec": {
            "nodeName": node_name(c.on_node),
            "hostNetwork": c.host_network,
            "serviceAccountName": "builder",
            "imagePullSecrets": pull_secrets,
            "initContainers": init.into_iter().map(|(_, c)| c).collect::<Vec<_>>(),
            "containers": app.into_iter().map(|(_, c)| c).collect::<Vec<_>>(),
        },
        "status": {"phase": "Running"}
    })
}

/// The API server's Secrets and the pod's ServiceAccount.
fn secrets_api(c: &Cluster) -> SecretsApi {
    let secret = |name: &str, password: &str| {
        dockerconfigjson_secret(NAMESPACE, name, PRIVATE_HOST, PULL_USER, password)
    };
    let sa_secrets: &[&str] = match c.pull_secret {
        PullSecret::ServiceAccount => &["sacred"],
        _ => &[],
    };
    SecretsApi::new([
        secret("regcred", PULL_PASSWORD),
        secret("sacred", PULL_PASSWORD),
        secret("wrongcred", "wrong-password"),
        service_account(NAMESPACE, "builder", sa_secrets),
    ])
}

/// The image table, the private registry's images answered only to the
/// right credentials (as a registry with htpasswd does).
struct PrivateRegistry(FixedImages);

#[async_trait::async_trait]
impl ImageLookup for PrivateRegistry {
    async fn lookup(
        &self,
        image: &str,
        platform: &Platform,
        credentials: Option<&Credentials>,
    ) -> Result<ImageProfile, LookupError> {
        if is_private(image) && credentials != Some(&pull_credentials(PULL_PASSWORD)) {
            return Err(LookupError::refused(format!(
                "unauthorized: {image} needs a pull secret"
            )));
        }
        self.0.lookup(image, platform, credentials).await
    }
}

/// Every image in the table, for both platforms.
fn registry() -> Arc<PrivateRegistry> {
    let mut table = ImageResolutions::new();
    for platform in ["linux/amd64", "linux/arm64"] {
        let platform: Platform = platform.parse().unwrap();
        for (image, facts) in IMAGES {
            if let Some((version, backend)) = facts {
                table.insert_profile(
                    image,
                    &platform,
                    ImageProfile {
                        image: image.to_string(),
                        digest: format!("sha256:{:0>64}", image.len()),
                        platform: platform.to_string(),
                        iptables: Some(IptablesFacts {
                            version: Some(version.parse().unwrap()),
                            backend: Some(*backend),
                            ..Default::default()
                        }),
                        nftables: None,
                    },
                );
            }
        }
    }
    Arc::new(PrivateRegistry(FixedImages(table)))
}

/// The facts of one generated cluster, as every caller reads them.
struct Facts3 {
    nodes: Vec<Node>,
    profiles: Vec<NodeNetfilterProfile>,
    policies: Vec<NetfilterPolicy>,
    labels: BTreeMap<String, String>,
    pod: Value,
    /// The pod's pull secret and ServiceAccount, behind the API.
    api: SecretsApi,
    /// What `check` is given as its docker config: what the pod's secret holds.
    docker_config: Option<Credentials>,
}

impl Facts3 {
    fn new(c: &Cluster) -> Self {
        Facts3 {
            nodes: c
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| node(i, n))
                .collect(),
            profiles: c
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| profile(i, n))
                .collect(),
            policies: c
                .policies
                .iter()
                .enumerate()
                .map(|(i, p)| policy(i, p))
                .collect(),
            labels: BTreeMap::from([
                (
                    "kubernetes.io/metadata.name".to_string(),
                    NAMESPACE.to_string(),
                ),
                ("team".to_string(), c.team.to_string()),
            ]),
            pod: pod(c),
            api: secrets_api(c),
            docker_config: c.pull_secret.credentials(),
        }
    }

    /// `check`'s credentials: a docker config with the pod's secret's.
    fn check_credentials(&self) -> Arc<dyn CredentialSource> {
        let creds = self.docker_config.clone();
        Arc::new(move |image: &str| creds.clone().filter(|_| is_private(image)))
    }

    fn book(&self) -> PolicyBook {
        let labels = self.labels.clone();
        PolicyBook::new(self.policies.iter().cloned()).with_namespace_labels(Arc::new(
            move |ns: &str| (ns == NAMESPACE).then(|| labels.clone()),
        ))
    }

    fn workload(&self) -> Workload {
        Workload::from_value(&self.pod)
            .unwrap()
            .expect("a pod is a workload")
    }
}

/// `nfguard check` on the same facts. The gate refuses an invalid policy
/// (exit 2) where the webhook and the controller leave it out: so check is
/// asked with the valid policies only, and must refuse the whole set.
async fn by_check(f: &Facts3, lookup: Arc<dyn ImageLookup>) -> Result<Decision, TestCaseError> {
    let valid: Vec<NetfilterPolicy> = f
        .policies
        .iter()
        .filter(|p| validate_policy(&p.spec).is_ok())
        .cloned()
        .collect();
    let inputs = |policies: Vec<NetfilterPolicy>| Inputs {
        workloads: vec![f.workload()],
        profiles: f.profiles.clone(),
        nodes: f.nodes.clone(),
        policies,
        namespace_labels: Some(HashMap::from([(NAMESPACE.to_string(), f.labels.clone())])),
        default_platform: Platform::linux_amd64(),
        ..Inputs::default()
    };
    let opts = ResolveOptions {
        lookup,
        credentials: f.check_credentials(),
        timeout: Duration::from_secs(5),
        concurrency: 4,
    };
    if valid.len() < f.policies.len() {
        let refused = check(&inputs(f.policies.clone()), &opts).await;
        prop_assert!(
            matches!(refused, Err(CheckError::Policy { .. })),
            "check must refuse an invalid policy: {:?}",
            refused.map(|r| r.verdict)
        );
    }
    let report = check(&inputs(valid), &opts).await.expect("check runs");
    let r = report.results.into_iter().next().unwrap();
    Ok(Decision {
        verdict: r.verdict,
        reasons: r.reasons,
        candidate_nodes: r.candidate_nodes,
        containers_in_scope: r.containers_in_scope,
        // Not in check's report; compared field by field below.
        exemptions_allowed: false,
    })
}

/// The judgement path without a NodeIndex (the webhook and check judge
/// with one): the same decision, to the reason. With `credentials` (None:
/// anonymous).
async fn without_node_index(
    f: &Facts3,
    lookup: Arc<dyn ImageLookup>,
    credentials: Option<Arc<dyn CredentialSource>>,
) -> Decision {
    let profiles: Vec<&NodeNetfilterProfile> = f.profiles.iter().collect();
    let nodes: Vec<&Node> = f.nodes.iter().collect();
    let policies = f.book();
    let scene = Scene {
        profiles: &profiles,
        nodes: &nodes,
        policies: &policies,
        default_platform: &Platform::linux_amd64(),
        index: None,
    };
    let w = f.workload();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    scene
        .judge(
            Subject::Workload(&w),
            &Bounded::new(lookup, 4).with_credentials(credentials.unwrap_or(Arc::new(Anonymous))),
            deadline,
        )
        .await
        .decision
}

async fn by_webhook(f: &Facts3, lookup: Arc<dyn ImageLookup>) -> Decision {
    let metrics = Arc::new(Metrics::new());
    let snapshot = Snapshot::new(
        f.profiles.iter().cloned().map(Arc::new).collect(),
        f.nodes.iter().cloned().map(Arc::new).collect(),
        f.book(),
    );
    let judge = Judge {
        facts: Arc::new(Facts::Static(Arc::new(snapshot))),
        images: Arc::new(ImageCache::new(
            lookup,
            64,
            CacheTtl::default(),
            metrics.clone(),
        )),
        pull_secrets: Some(nfguard::judgement::pull_secrets::PodPullSecrets::new(
            f.api.client(),
            nfguard::judgement::pull_secrets::SERVICE_ACCOUNT_NAMES_TTL,
            nfguard::judgement::pull_secrets::SERVICE_ACCOUNT_NAMES_ENTRIES,
        )),
        metrics,
        timeout: Duration::from_secs(5),
        default_platform: Platform::linux_amd64(),
        max_nodes: 5,
        decisions: None,
    };
    judge
        .judge(
            &f.workload(),
            tokio::time::Instant::now() + Duration::from_secs(5),
        )
        .await
}

/// The controller's caches holding the cluster, fed as its watches feed them.
fn controller_caches(f: &Facts3) -> nfguard::controller::cache::stores::Caches {
    let pod: Pod = serde_json::from_value(f.pod.clone()).unwrap();
    let namespace: NamespaceMeta = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": f.labels}
    }))
    .unwrap();
    let (caches, mut feeds) = caches();
    feeds.list(FirstLists {
        nodes: f.nodes.clone(),
        profiles: f.profiles.clone(),
        pods: vec![pod],
        policies: f.policies.clone(),
        namespaces: vec![namespace],
    });
    caches
}

/// The controller's image look-ups: the pod's pull secrets through the API.
fn controller_images(f: &Facts3, lookup: Arc<dyn ImageLookup>) -> Bounded {
    Bounded::new(lookup, 4).with_pull_secrets(PullSecretReader::new(
        f.api.client(),
        Duration::from_secs(30),
        64,
    ))
}

/// The controller's plan for the pod's node, through its production path:
/// caches fed as its watches feed them, then `plan_from_caches`.
/// Returns (violation codes, status to write).
async fn by_controller(
    f: &Facts3,
    on_node: usize,
    lookup: Arc<dyn ImageLookup>,
) -> (
    Vec<ReasonCode>,
    Option<nfguard::api::NodeNetfilterProfileStatus>,
) {
    let plan = plan_from_caches(
        &nfguard::projection::SlimNode::from(f.nodes[on_node].clone()),
        &controller_caches(f),
        &controller_images(f, lookup),
        tokio::time::Instant::now() + Duration::from_secs(5),
        "2026-03-01T12:00:00Z".parse().unwrap(),
    )
    .await;
    let mut codes: Vec<ReasonCode> = plan
        .violations
        .iter()
        .flat_map(|v| v.codes.clone())
        .collect();
    codes.sort();
    codes.dedup();
    (codes, plan.status)
}

/// The controller's policy report for the pod (None: no report), through
/// its production path: caches and owner stores fed as the watches feed
/// them, then `judge_reports`. Returns (rule, result) of every result.
async fn by_reports(f: &Facts3, lookup: Arc<dyn ImageLookup>) -> Option<Vec<(String, ResultKind)>> {
    let (parents, mut owner_feeds) = parents();
    owner_feeds.list(Vec::new(), Vec::new());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let images = controller_images(f, lookup);
    let caches = controller_caches(f);
    // After the controller's first round over the nodes (reports wait for it).
    for node in f.nodes.iter().filter_map(|n| n.metadata.name.as_deref()) {
        caches.first_rounds.done(node);
    }
    let judged = judge_reports(&caches, &parents, &images, &Scope::All, deadline).await;
    assert!(judged.reports.len() <= 1, "one pod, one workload");
    let report = judged.reports.into_iter().next()?;
    Some(
        report
            .results
            .iter()
            .map(|r| (r.rule.clone(), r.result.expect("every result has one")))
            .collect(),
    )
}

/// `d` says `image` could not be inspected.
fn unresolved(d: &Decision, image: &str) -> bool {
    d.reasons
        .iter()
        .any(|r| r.code == ReasonCode::ImageUnresolved && r.image.as_deref() == Some(image))
}

async fn agree(c: Cluster) -> Result<(), TestCaseError> {
    let registry = registry();
    let mut f = Facts3::new(&c);
    // The controller's first pass writes the node's writer inventory; all
    // three then judge the node as it is in the steady state.
    let (_, status) = by_controller(&f, c.on_node, registry.clone()).await;
    if let (Some(written), Some(current)) = (status, f.profiles[c.on_node].status.as_mut()) {
        current.writers = written.writers;
        current.newest_writer_version = written.newest_writer_version;
        current.oldest_reader_version = written.oldest_reader_version;
    }
    let checked = by_check(&f, registry.clone()).await?;
    let admitted = by_webhook(&f, registry.clone()).await;
    prop_assert_eq!(
        &without_node_index(&f, registry.clone(), Some(f.check_credentials())).await,
        &admitted,
        "a NodeIndex changed the decision"
    );
    // A private image the pod's secret reads is judged by its iptables; an
    // anonymous caller (or a wrong secret) finds it unresolved.
    let anonymous = without_node_index(&f, registry.clone(), None).await;
    let readable = matches!(c.pull_secret, PullSecret::Pod | PullSecret::ServiceAccount);
    for (image, _) in IMAGES.iter().filter(|(i, _)| is_private(i)) {
        if unresolved(&anonymous, image) {
            prop_assert_eq!(
                unresolved(&admitted, image),
                !readable,
                "{} with {:?}",
                image,
                c.pull_secret
            );
        } else {
            prop_assert!(
                !unresolved(&admitted, image),
                "{} unresolved to the webhook only",
                image
            );
        }
    }
    // The webhook judges as check does with the invalid policies left out,
    // and says so in a warning.
    let (ignored, kept): (Vec<_>, Vec<_>) = admitted
        .reasons
        .iter()
        .cloned()
        .partition(|r| r.code == ReasonCode::InvalidPolicyIgnored);
    let floor = if ignored.is_empty() {
        Verdict::Allow
    } else {
        Verdict::Warn
    };
    let expected = Decision {
        verdict: checked.verdict.max(floor),
        reasons: kept,
        ..admitted.clone()
    };
    prop_assert_eq!(
        &checked.reasons,
        &expected.reasons,
        "check and the webhook disagree"
    );
    prop_assert_eq!(
        admitted.verdict,
        expected.verdict,
        "check and the webhook disagree"
    );
    prop_assert_eq!(
        (checked.candidate_nodes, checked.containers_in_scope),
        (admitted.candidate_nodes, admitted.containers_in_scope)
    );

    // The policy report of the running pod: the webhook's reasons, each
    // with the result its effect gives, and the verdict as its worst result.
    let reported = by_reports(&f, registry.clone()).await;
    let pod: Pod = serde_json::from_value(f.pod.clone()).unwrap();
    let writes = pod_spec_can_write(pod.spec.as_ref().unwrap());
    let mut want: Vec<(String, ResultKind)> = admitted
        .reasons
        .iter()
        .map(|r| (r.code.to_string(), result_kind(r)))
        .collect();
    if want.is_empty() && admitted.containers_in_scope > 0 {
        want.push((RULE_COMPATIBLE.to_string(), ResultKind::Pass));
    }
    want.sort();
    let got = reported.clone().map(|mut r| {
        r.sort();
        r
    });
    if writes {
        prop_assert_eq!(
            got,
            (!want.is_empty()).then_some(want),
            "the report disagrees with the webhook"
        );
    } else {
        prop_assert_eq!(got, None, "a pod that cannot write rules is not reported");
    }
    if let Some(results) = &reported {
        let has = |k: ResultKind| results.iter().any(|(_, r)| *r == k);
        let verdict = if has(ResultKind::Fail) {
            Verdict::Deny
        } else if has(ResultKind::Warn) {
            Verdict::Warn
        } else {
            Verdict::Allow
        };
        prop_assert_eq!(
            verdict,
            admitted.verdict,
            "the report's worst result is not the webhook's verdict"
        );
    }

    let (violations, _) = by_controller(&f, c.on_node, registry).await;
    let policy = f.book().for_namespace(NAMESPACE);
    let taints = policy.action == PolicyAction::Taint && policy.applies();
    let expected = if taints {
        admitted.unsafe_codes()
    } else {
        Vec::new()
    };
    prop_assert_eq!(
        violations,
        expected,
        "the controller disagrees with the webhook (policy {:?})",
        policy.action
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn webhook_check_and_controller_agree(c in cluster()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(agree(c))?;
    }
}

/// One hostNetwork NET_ADMIN pod running `IMAGES[image]` on a 1.8.9 node
/// whose rules need a 1.8.8 reader, under a label-selected Taint policy.
fn old_reader_under_taint(image: usize) -> Cluster {
    Cluster {
        nodes: vec![NodeSpec {
            arm: false,
            legacy_rules: false,
            host_version: "1.8.9",
            min_reader: true,
            markers: true,
        }],
        team: "net",
        policies: vec![PolicySpec {
            action: "Taint",
            selector: 1,
            exempt: false,
            invalid: false,
        }],
        host_network: true,
        on_node: 0,
        containers: vec![ContainerSpec {
            image,
            net_admin: true,
            privileged: false,
            init: false,
        }],
        exempt_annotation: false,
        pull_secret: PullSecret::None,
    }
}

/// The generator reaches the cases that matter: a Taint policy selected by
/// a namespace label that finds a critical reason (so the agreement above
/// is not only about empty answers).
#[tokio::test]
async fn a_namespace_label_selected_taint_policy_finds_an_old_reader() {
    let c = old_reader_under_taint(0);
    let f = Facts3::new(&c);
    let (violations, _) = by_controller(&f, 0, registry()).await;
    assert_eq!(violations, vec![ReasonCode::OldReaderNewRules]);
    let admitted = by_webhook(&f, registry()).await;
    assert_eq!(admitted.unsafe_codes(), violations);
    agree(c).await.unwrap();
}

/// The same old reader from the private registry: the controller reads it
/// with the pod's own pull secret, or its ServiceAccount's, as the webhook
/// does, and taints; without the secret (or with a wrong one) both find it
/// unresolved and the controller does not taint.
#[tokio::test]
async fn a_private_old_reader_taints_with_the_pods_pull_secret_only() {
    let image = "private.registry.test/cni:1.8.7";
    let private = IMAGES.iter().position(|(i, _)| *i == image).unwrap();
    for (secret, taints) in [
        (PullSecret::Pod, true),
        (PullSecret::ServiceAccount, true),
        (PullSecret::None, false),
        (PullSecret::Wrong, false),
    ] {
        let c = Cluster {
            pull_secret: secret,
            ..old_reader_under_taint(private)
        };
        let f = Facts3::new(&c);
        let (violations, _) = by_controller(&f, 0, registry()).await;
        let admitted = by_webhook(&f, registry()).await;
        assert_eq!(admitted.unsafe_codes(), violations, "{secret:?}");
        let expected = if taints {
            vec![ReasonCode::OldReaderNewRules]
        } else {
            Vec::new()
        };
        assert_eq!(violations, expected, "{secret:?}");
        // An anonymous caller cannot read it.
        let anonymous = without_node_index(&f, registry(), None).await;
        assert!(unresolved(&anonymous, image), "{:?}", anonymous.reasons);
        assert_eq!(
            unresolved(&admitted, image),
            !taints,
            "{secret:?}: {:?}",
            admitted.reasons
        );
        // The controller read what the pod names, in its namespace only.
        let asked = f.api.asked();
        assert!(
            asked
                .iter()
                .all(|p| p.starts_with("/api/v1/namespaces/payments/")),
            "{asked:?}"
        );
        if secret == PullSecret::ServiceAccount {
            assert!(
                asked.iter().any(|p| p.ends_with("/secrets/sacred")),
                "{asked:?}"
            );
        }
        agree(c).await.unwrap();
    }
}
