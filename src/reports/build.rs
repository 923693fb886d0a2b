//! Judged pods -> one desired report per workload: results grouped by the
//! pod's resolved owner, ordered worst first (then by pod, node, rule), at
//! most [`MAX_RESULTS`] listed and all counted, and a content hash so the
//! caller writes only what changed.

use super::owner::ObjectId;
use super::result::{JudgedPod, SOURCE, pod_results};
use super::shapes::{
    Limits, PolicyReport, Report, ReportApi, ReportConfiguration, ReportResult, ReportSummary,
    ResultKind, ResultSeverity,
};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Results listed per report; the rest are counted in the summary only.
pub const MAX_RESULTS: usize = 100;
pub use crate::wellknown::{
    ANNOTATION_REPORT_HASH as ANNOTATION_CONTENT_HASH, ANNOTATION_RESULTS_LEFT_OUT,
    LABEL_MANAGED_BY, MANAGED_BY,
};
/// Report names are DNS subdomains: at most this many bytes.
const MAX_NAME_BYTES: usize = 253;

/// One workload's report, in neither API's shape yet.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredReport {
    pub namespace: String,
    pub name: String,
    pub owner: ObjectId,
    /// Worst first, at most [`MAX_RESULTS`].
    pub results: Vec<ReportResult>,
    /// Every result, listed or not.
    pub summary: ReportSummary,
    pub left_out: usize,
}

/// `nfguard-<kind>-<name>-<hash>`: the owner's kind and name to read, made a
/// DNS subdomain (lowercase, other characters `-`, cut to fit), and 16 hex
/// digits of SHA-256 over its API group, kind, name and uid. Owner
/// references are set by whoever creates a pod, so two owners in one
/// namespace may share kind and name (a forged `DaemonSet` reference beside
/// the real one, another group's `Deployment`) or differ only in characters
/// a name cannot hold: the hash keeps their reports apart, and one owner
/// keeps its name across passes.
pub fn report_name(owner: &ObjectId) -> String {
    let mut hasher = Sha256::new();
    for part in [owner.group(), &owner.kind, &owner.name, &owner.uid] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    let hash = hex::encode(&hasher.finalize()[..8]);
    let readable = format!("nfguard-{}-{}", owner.kind, owner.name)
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect::<String>();
    // ASCII only by now: any byte is a char boundary.
    let keep = readable.len().min(MAX_NAME_BYTES - hash.len() - 1);
    let head = readable[..keep].trim_end_matches(['-', '.']);
    format!("{head}-{hash}")
}

/// A report name without its hash: what tests and readers compare.
#[cfg(test)]
pub(crate) fn without_hash(name: &str) -> &str {
    name.rsplit_once('-').map_or(name, |(head, _)| head)
}

/// The order results are listed (and kept under the cap) in: worst first,
/// then by pod, node, rule and message, whatever order the pods came in.
type OrderKey = (
    Option<ResultKind>,
    Option<ResultSeverity>,
    Option<String>,
    Option<String>,
    String,
    String,
);

fn order_key(r: &ReportResult) -> OrderKey {
    (
        r.result,
        r.severity,
        r.resources.first().and_then(|o| o.name.clone()),
        r.properties.get("node").cloned(),
        r.rule.clone(),
        r.message.clone(),
    )
}

/// Every pod's results grouped by its owner, one report per owner, sorted
/// by namespace and name. Owners whose pods give no result get no report.
pub fn build_reports(pods: &[JudgedPod<'_>]) -> Vec<DesiredReport> {
    let mut groups: BTreeMap<(&str, &ObjectId), Vec<ReportResult>> = BTreeMap::new();
    for judged in pods {
        let results = pod_results(judged);
        if !results.is_empty() {
            groups
                .entry((judged.pod.namespace.as_str(), judged.owner))
                .or_default()
                .extend(results);
        }
    }
    let mut reports: Vec<DesiredReport> = groups
        .into_iter()
        .map(|((namespace, owner), mut results)| {
            let mut summary = ReportSummary::default();
            for r in &results {
                if let Some(kind) = r.result {
                    summary.add(kind);
                }
            }
            results.sort_by_cached_key(order_key);
            let left_out = results.len().saturating_sub(MAX_RESULTS);
            results.truncate(MAX_RESULTS);
            DesiredReport {
                namespace: namespace.to_string(),
                name: report_name(owner),
                owner: owner.clone(),
                results,
                summary,
                left_out,
            }
        })
        .collect();
    reports.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    reports
}

impl DesiredReport {
    fn scope(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.owner.api_version.clone()),
            kind: Some(self.owner.kind.clone()),
            name: Some(self.owner.name.clone()),
            namespace: Some(self.namespace.clone()),
            uid: Some(self.owner.uid.clone()),
            ..Default::default()
        }
    }

    /// Metadata without the content hash (added once the content is known).
    fn metadata(&self) -> ObjectMeta {
        let mut annotations = BTreeMap::new();
        if self.left_out > 0 {
            annotations.insert(
                ANNOTATION_RESULTS_LEFT_OUT.to_string(),
                self.left_out.to_string(),
            );
        }
        ObjectMeta {
            name: Some(self.name.clone()),
            namespace: Some(self.namespace.clone()),
            labels: Some(BTreeMap::from([(
                LABEL_MANAGED_BY.to_string(),
                MANAGED_BY.to_string(),
            )])),
            annotations: Some(annotations),
            owner_references: Some(vec![self.owner.owner_reference()]),
            ..Default::default()
        }
    }

    /// As an `openreports.io/v1alpha1` `Report`.
    pub fn to_report(&self) -> Report {
        let api = ReportApi::OpenReports;
        let mut report = Report {
            api_version: api.api_version().into(),
            kind: api.kind().into(),
            metadata: self.metadata(),
            source: SOURCE.into(),
            scope: Some(self.scope()),
            configuration: Some(ReportConfiguration {
                limits: Limits {
                    max_results: MAX_RESULTS as u64,
                    status_filter: Vec::new(),
                },
            }),
            summary: self.summary,
            results: self.results.clone(),
        };
        let hash = content_hash(&report);
        set_hash(&mut report.metadata, hash);
        report
    }

    /// As a `wgpolicyk8s.io/v1alpha2` `PolicyReport` (severities as its
    /// published CRD allows: [`ResultSeverity::in_wg_policy`]).
    pub fn to_policy_report(&self) -> PolicyReport {
        let api = ReportApi::WgPolicy;
        let mut report = PolicyReport {
            api_version: api.api_version().into(),
            kind: api.kind().into(),
            metadata: self.metadata(),
            scope: Some(self.scope()),
            summary: self.summary,
            results: self
                .results
                .iter()
                .map(|r| ReportResult {
                    severity: r.severity.map(ResultSeverity::in_wg_policy),
                    ..r.clone()
                })
                .collect(),
        };
        let hash = content_hash(&report);
        set_hash(&mut report.metadata, hash);
        report
    }
}

/// SHA-256 of the object serialized before the hash is added: every field
/// nfguard sets (map keys sorted, results ordered), nothing of the clock.
fn content_hash(object: &impl serde::Serialize) -> String {
    let bytes = serde_json::to_vec(object).expect("a report serializes");
    hex::encode(Sha256::digest(&bytes))
}

fn set_hash(meta: &mut ObjectMeta, hash: String) {
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(ANNOTATION_CONTENT_HASH.to_string(), hash);
}

/// The content hash a report's metadata carries (nfguard's annotation).
pub fn hash_annotation(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(ANNOTATION_CONTENT_HASH)
        .map(String::as_str)
}

/// Whether the desired report must be written over what the cluster holds
/// (`stored`: the stored report's content hash, None when no report is
/// stored or it carries none). A report whose content did not change has
/// the same hash: 0 writes on a no-change resync. A stored report without
/// the annotation (written by hand, or by an older nfguard) is rewritten.
pub fn needs_write(stored: Option<&str>, desired: &ObjectMeta) -> bool {
    match (stored, hash_annotation(desired)) {
        (Some(have), Some(want)) => have != want,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::evaluate::{Decision, Reason, ReasonCode, Verdict};
    use crate::facts::Severity;
    use crate::reports::owner::PodRef;
    use crate::reports::test_support::{self as support, pod};

    pub(crate) fn owner(kind: &str, name: &str) -> ObjectId {
        ObjectId {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{kind}-{name}"),
        }
    }

    fn reason(code: ReasonCode, effect: Verdict, node: &str) -> Reason {
        support::reason(code, Severity::Critical, effect, node)
    }

    fn decision(reasons: Vec<Reason>) -> Decision {
        support::decision(reasons, 1)
    }

    /// `n` pods of one DaemonSet, one per node; every third one fails.
    struct Fixture {
        pods: Vec<PodRef>,
        nodes: Vec<String>,
        decisions: Vec<Decision>,
        owner: ObjectId,
    }

    fn daemonset_fixture(ns: &str, n: usize) -> Fixture {
        let nodes: Vec<String> = (0..n).map(|i| format!("node-{i:05}")).collect();
        let pods = (0..n).map(|i| pod(ns, &format!("ds-{i:05}"))).collect();
        let decisions = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                if i % 3 == 0 {
                    decision(vec![reason(
                        ReasonCode::BackendMismatch,
                        Verdict::Deny,
                        node,
                    )])
                } else {
                    decision(vec![])
                }
            })
            .collect();
        Fixture {
            pods,
            nodes,
            decisions,
            owner: owner("DaemonSet", "ds"),
        }
    }

    impl Fixture {
        fn judged(&self) -> Vec<JudgedPod<'_>> {
            (0..self.pods.len())
                .map(|i| JudgedPod {
                    pod: &self.pods[i],
                    owner: &self.owner,
                    node: &self.nodes[i],
                    policies: &[],
                    decision: &self.decisions[i],
                })
                .collect()
        }
    }

    #[test]
    fn one_report_per_owner_in_its_namespace() {
        let (a, b) = (pod("ns1", "a"), pod("ns2", "b"));
        let d = decision(vec![reason(
            ReasonCode::BackendMismatch,
            Verdict::Deny,
            "n1",
        )]);
        let (ds, deploy) = (owner("DaemonSet", "x"), owner("Deployment", "y"));
        let judged = [
            JudgedPod {
                pod: &a,
                owner: &ds,
                node: "n1",
                policies: &[],
                decision: &d,
            },
            JudgedPod {
                pod: &b,
                owner: &ds,
                node: "n1",
                policies: &[],
                decision: &d,
            },
            JudgedPod {
                pod: &a,
                owner: &deploy,
                node: "n2",
                policies: &[],
                decision: &d,
            },
        ];
        let reports = build_reports(&judged);
        let got: Vec<(&str, &str, u64)> = reports
            .iter()
            .map(|r| (r.namespace.as_str(), without_hash(&r.name), r.summary.fail))
            .collect();
        assert_eq!(
            got,
            [
                ("ns1", "nfguard-daemonset-x", 1),
                ("ns1", "nfguard-deployment-y", 1),
                ("ns2", "nfguard-daemonset-x", 1),
            ]
        );
    }

    #[test]
    fn at_most_max_results_listed_worst_first_and_every_one_counted() {
        let f = daemonset_fixture("ns", 1000);
        let judged = f.judged();
        let reports = build_reports(&judged);
        assert_eq!(reports.len(), 1);
        let r = &reports[0];
        assert_eq!(r.results.len(), MAX_RESULTS);
        assert_eq!(r.left_out, 1000 - MAX_RESULTS);
        // 334 fail (every third of 1000), 666 pass: the listed ones are failures.
        assert_eq!(
            (r.summary.fail, r.summary.pass, r.summary.total()),
            (334, 666, 1000)
        );
        assert!(r.results.iter().all(|x| x.result == Some(ResultKind::Fail)));
        let obj = r.to_report();
        let annotations = obj.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[ANNOTATION_RESULTS_LEFT_OUT], "900");
        assert_eq!(
            obj.configuration.unwrap().limits.max_results,
            MAX_RESULTS as u64
        );
    }

    #[test]
    fn a_report_under_the_cap_has_no_left_out_annotation() {
        let f = daemonset_fixture("ns", MAX_RESULTS);
        let r = &build_reports(&f.judged())[0];
        assert_eq!((r.results.len(), r.left_out), (MAX_RESULTS, 0));
        let annotations = r.to_report().metadata.annotations.unwrap();
        assert!(!annotations.contains_key(ANNOTATION_RESULTS_LEFT_OUT));
    }

    #[test]
    fn the_order_of_the_pods_does_not_change_the_report() {
        let f = daemonset_fixture("ns", 300);
        let judged = f.judged();
        let forward = build_reports(&judged);
        let mut reversed = judged.clone();
        reversed.reverse();
        // Interleave too, so it is not only a reversal.
        reversed.rotate_left(117);
        let backward = build_reports(&reversed);
        assert_eq!(forward, backward);
        assert_eq!(
            forward[0].to_report().metadata.annotations,
            backward[0].to_report().metadata.annotations
        );
        let first: Vec<_> = forward[0].results[..2]
            .iter()
            .map(|r| r.resources[0].name.clone().unwrap())
            .collect();
        assert_eq!(first, ["ds-00000", "ds-00003"]);
    }

    #[test]
    fn both_shapes_carry_the_same_content_owner_and_labels() {
        let f = daemonset_fixture("ns", 5);
        let d = &build_reports(&f.judged())[0];
        let new = d.to_report();
        let old = d.to_policy_report();
        assert_eq!(
            (new.api_version.as_str(), new.kind.as_str()),
            ("openreports.io/v1alpha1", "Report")
        );
        assert_eq!(
            (old.api_version.as_str(), old.kind.as_str()),
            ("wgpolicyk8s.io/v1alpha2", "PolicyReport")
        );
        // The same results but for the severities the older CRD allows.
        assert_eq!(new.results.len(), old.results.len());
        for (n, o) in new.results.iter().zip(&old.results) {
            let n_as_old = ReportResult {
                severity: n.severity.map(ResultSeverity::in_wg_policy),
                ..n.clone()
            };
            assert_eq!(&n_as_old, o);
        }
        assert_eq!(new.results[0].severity, Some(ResultSeverity::Critical));
        assert_eq!(old.results[0].severity, Some(ResultSeverity::High));
        assert_eq!(new.summary, old.summary);
        assert_eq!(new.scope, old.scope);
        for meta in [&new.metadata, &old.metadata] {
            assert_eq!(meta.labels.as_ref().unwrap()[LABEL_MANAGED_BY], MANAGED_BY);
            let refs = meta.owner_references.as_ref().unwrap();
            assert_eq!(refs.len(), 1);
            assert_eq!(
                (refs[0].kind.as_str(), refs[0].uid.as_str()),
                ("DaemonSet", "uid-DaemonSet-ds")
            );
            assert_eq!(meta.namespace.as_deref(), Some("ns"));
        }
        let scope = new.scope.unwrap();
        assert_eq!(scope.name.as_deref(), Some("ds"));
        assert_eq!(new.source, SOURCE);
        // The older shape has neither field.
        let value = serde_json::to_value(d.to_policy_report()).unwrap();
        assert!(value.get("source").is_none() && value.get("configuration").is_none());
        assert_eq!(
            serde_json::to_value(d.to_report()).unwrap()["source"],
            "nfguard"
        );
        // Different shapes, different hashes: switching API rewrites.
        assert_ne!(
            hash_annotation(&new.metadata),
            hash_annotation(&old.metadata)
        );
    }

    #[test]
    fn needs_write_only_when_the_content_changed() {
        let f = daemonset_fixture("ns", 10);
        let stored = build_reports(&f.judged())[0].to_report();
        // The no-change resync: built again from the same facts.
        let again = build_reports(&f.judged())[0].to_report();
        assert!(!needs_write(
            hash_annotation(&stored.metadata),
            &again.metadata
        ));
        // The API server adds its own metadata: still no write.
        let mut from_server = stored.metadata.clone();
        from_server.resource_version = Some("42".into());
        from_server.uid = Some("server-uid".into());
        assert!(!needs_write(hash_annotation(&from_server), &again.metadata));
        // A pod's verdict changes: a write.
        let mut changed = f;
        changed.decisions[1] = decision(vec![reason(
            ReasonCode::KnownBadIptables,
            Verdict::Deny,
            "node-00001",
        )]);
        let new = build_reports(&changed.judged())[0].to_report();
        assert!(needs_write(
            hash_annotation(&stored.metadata),
            &new.metadata
        ));
        // Nothing stored, or stored without a hash: a write.
        assert!(needs_write(None, &again.metadata));
        let mut bare = stored.metadata.clone();
        bare.annotations = None;
        assert!(needs_write(hash_annotation(&bare), &again.metadata));
    }

    #[test]
    fn pods_without_results_make_no_report() {
        let p = pod("ns", "quiet");
        let d = Decision {
            containers_in_scope: 0,
            ..decision(vec![])
        };
        let o = owner("Deployment", "q");
        let judged = [JudgedPod {
            pod: &p,
            owner: &o,
            node: "n1",
            policies: &[],
            decision: &d,
        }];
        assert!(build_reports(&judged).is_empty());
    }

    #[test]
    fn report_names_are_dns_subdomains_even_for_long_owner_names() {
        let name = report_name(&owner("StatefulSet", "db"));
        assert!(name.starts_with("nfguard-statefulset-db-"), "{name}");
        assert_eq!(name.len(), "nfguard-statefulset-db-".len() + 16);
        let a = report_name(&owner("Deployment", &"a".repeat(253)));
        let b = report_name(&owner("Deployment", &format!("{}b", "a".repeat(252))));
        assert!(a.len() <= MAX_NAME_BYTES && b.len() <= MAX_NAME_BYTES);
        assert_ne!(a, b);
        assert!(a.starts_with("nfguard-deployment-aaa"));
        for n in [&a, &b, &name] {
            assert!(crate::object_names::is_dns_subdomain(n), "{n}");
        }
    }

    #[test]
    fn owners_that_share_kind_and_name_never_share_a_report_name() {
        let real = owner("DaemonSet", "kube-router");
        // Owner references are whatever the pod's creator wrote.
        let forged_uid = ObjectId {
            uid: "forged".into(),
            ..real.clone()
        };
        let other_group = ObjectId {
            api_version: "evil.example/v1".into(),
            ..real.clone()
        };
        let odd = |name: &str| ObjectId {
            name: name.into(),
            ..real.clone()
        };
        let names: Vec<String> = [
            real.clone(),
            forged_uid,
            other_group,
            odd("Kube-Router"),
            odd("kube_router"),
            odd("kube router"),
            ObjectId {
                kind: "DaemonSet-kube".into(),
                name: "router".into(),
                ..real.clone()
            },
        ]
        .iter()
        .map(report_name)
        .collect();
        let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        for n in &names {
            assert!(crate::object_names::is_dns_subdomain(n), "{n}");
            assert!(n.starts_with("nfguard-daemonset-kube"), "{n}");
        }
        assert_eq!(report_name(&real), names[0], "stable for one owner");
    }

    #[test]
    fn a_worst_case_report_stays_far_below_etcds_object_limit() {
        // Every string at its cap: 100 results of long messages and images.
        let long = "x".repeat(10_000);
        let mut r = reason(ReasonCode::BackendMismatch, Verdict::Deny, &"n".repeat(253));
        r.message = long.clone();
        r.image = Some(long.clone());
        r.image_digest = Some(long.clone());
        r.container = Some(long.clone());
        r.node_backend = Some(long.clone());
        r.other = Some(long.clone());
        r.platform = Some(long);
        let reasons = vec![r; 3];
        let d = decision(reasons);
        let pods: Vec<PodRef> = (0..200)
            .map(|i| pod("ns", &format!("{}-{i}", "p".repeat(240))))
            .collect();
        let policies: Vec<String> = (0..50).map(|i| format!("{}-{i}", "q".repeat(60))).collect();
        let ds = owner("DaemonSet", &"d".repeat(253));
        let judged: Vec<JudgedPod<'_>> = pods
            .iter()
            .map(|p| JudgedPod {
                pod: p,
                owner: &ds,
                node: "n",
                policies: &policies,
                decision: &d,
            })
            .collect();
        let report = build_reports(&judged)[0].to_report();
        let bytes = serde_json::to_vec(&report).unwrap().len();
        // etcd refuses requests above 1.5 MiB; keep a wide margin.
        assert!(bytes < 512 * 1024, "{bytes} bytes");
        assert!(
            report
                .results
                .iter()
                .all(|r| r.severity == Some(ResultSeverity::Critical))
        );
    }
}
