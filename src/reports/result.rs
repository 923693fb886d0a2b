//! One judged pod's [`Decision`] -> report results: one per reason (the
//! webhook's reasons and one-line messages), or one `pass` when the pod's
//! iptables is compatible with its node. Bounded: every string a result
//! carries is capped, so a report's size has a ceiling whatever the input.

use super::owner::{ObjectId, PodRef};
use super::shapes::{ReportResult, ResultKind, ResultSeverity};
use crate::compat::evaluate::{Decision, Reason, ReasonClass, ReasonCode, Verdict};
use crate::facts::Severity;
use k8s_openapi::api::core::v1::ObjectReference;
use std::collections::BTreeMap;

/// `source` of every result and report.
pub const SOURCE: &str = "nfguard";
/// `policy` when no NetfilterPolicy selects the namespace's judgement (the
/// built-in default: `action: Deny, unresolvedImages: Warn`).
pub const DEFAULT_POLICY: &str = "nfguard-default";
/// `rule` of the result for a pod judged with no finding.
pub const RULE_COMPATIBLE: &str = "Compatible";
/// Node names in a message (the webhook's `--max-nodes` default; a running
/// pod's reason names its one node).
pub const MESSAGE_MAX_NODES: usize = 5;
/// Bytes of a result's message; longer ones are cut at a char boundary.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Bytes of one property value (image references can be long).
pub const MAX_PROPERTY_BYTES: usize = 256;
/// Bytes of the `policy` field (several combined policy names).
pub const MAX_POLICY_BYTES: usize = 253;

/// One running pod judged on its node, with what selected its judgement
/// and the workload it is reported under.
#[derive(Clone, Copy, Debug)]
pub struct JudgedPod<'a> {
    pub pod: &'a PodRef,
    /// From [`super::resolve_owner`].
    pub owner: &'a ObjectId,
    pub node: &'a str,
    /// The NetfilterPolicies combined for the pod's namespace
    /// (`EffectivePolicy::sources`; empty: the built-in default).
    pub policies: &'a [String],
    /// Decided with `Severity::Info`, so every reason is listed.
    pub decision: &'a Decision,
}

/// `s` cut to at most `max` bytes at a char boundary, `…` marking the cut.
fn capped(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The result kind of a reason (docs/reports.md has this table): what it
/// does under the policy first, then, for reasons that allow, its class.
pub fn result_kind(reason: &Reason) -> ResultKind {
    match reason.effect {
        Verdict::Deny => ResultKind::Fail,
        Verdict::Warn => ResultKind::Warn,
        Verdict::Allow => match reason.code.meta().class {
            // Never allowed by the engine; a problem if it ever is.
            ReasonClass::Unsafe => ResultKind::Warn,
            ReasonClass::CannotEvaluate => ResultKind::Error,
            ReasonClass::Exemption => ResultKind::Skip,
            ReasonClass::Info if reason.code == ReasonCode::NamespaceNotSelected => {
                ResultKind::Skip
            }
            ReasonClass::Info => ResultKind::Pass,
        },
    }
}

pub fn result_severity(severity: Severity) -> ResultSeverity {
    match severity {
        Severity::Critical => ResultSeverity::Critical,
        Severity::Warning => ResultSeverity::Medium,
        Severity::Info => ResultSeverity::Info,
    }
}

/// The class as a result's `category`.
pub fn category(class: ReasonClass) -> &'static str {
    match class {
        ReasonClass::Unsafe => "unsafe",
        ReasonClass::CannotEvaluate => "cannot-evaluate",
        ReasonClass::Exemption => "exemption",
        ReasonClass::Info => "info",
    }
}

/// The `policy` field: the combined policies' names, sorted, comma-joined.
pub fn policy_name(policies: &[String]) -> String {
    if policies.is_empty() {
        return DEFAULT_POLICY.into();
    }
    let mut names: Vec<&str> = policies.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    capped(&names.join(","), MAX_POLICY_BYTES)
}

fn pod_reference(pod: &PodRef) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name.clone()),
        namespace: Some(pod.namespace.clone()),
        uid: Some(pod.uid.clone()),
        ..Default::default()
    }
}

fn properties(judged: &JudgedPod<'_>, reason: Option<&Reason>) -> BTreeMap<String, String> {
    let mut p = BTreeMap::new();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            p.insert(k.to_string(), capped(&v, MAX_PROPERTY_BYTES));
        }
    };
    put("node", Some(judged.node.to_string()));
    if let Some(r) = reason {
        put("container", r.container.clone());
        put("image", r.image.clone());
        put("imageDigest", r.image_digest.clone());
        put("platform", r.platform.clone());
        put("imageVersion", r.image_version.map(|v| v.to_string()));
        put("imageBackend", r.image_backend.map(|b| b.to_string()));
        put("nodeBackend", r.node_backend.clone());
        put("other", r.other.clone());
        put("otherVersion", r.other_version.map(|v| v.to_string()));
        put(
            "minReaderVersion",
            r.min_reader_version.map(|v| v.to_string()),
        );
    }
    p
}

/// The results for one judged pod: one per reason; a single `pass` when a
/// container that can write rules was judged and nothing was found; none
/// when the pod cannot touch netfilter at all (no reason, nothing judged).
pub fn pod_results(judged: &JudgedPod<'_>) -> Vec<ReportResult> {
    let policy = policy_name(judged.policies);
    let base =
        |rule: String, category: &str, kind, severity, message: String, props| ReportResult {
            source: SOURCE.into(),
            policy: policy.clone(),
            rule,
            category: category.into(),
            severity: Some(severity),
            result: Some(kind),
            scored: false,
            resources: vec![pod_reference(judged.pod)],
            message: capped(&message, MAX_MESSAGE_BYTES),
            properties: props,
        };
    let d = judged.decision;
    if d.reasons.is_empty() {
        if d.containers_in_scope == 0 {
            return Vec::new();
        }
        return vec![base(
            RULE_COMPATIBLE.into(),
            "compatible",
            ResultKind::Pass,
            ResultSeverity::Info,
            format!(
                "[{RULE_COMPATIBLE}] the pod's iptables is compatible with node {}",
                judged.node
            ),
            properties(judged, None),
        )];
    }
    d.reasons
        .iter()
        .map(|r| {
            base(
                r.code.to_string(),
                category(r.code.meta().class),
                result_kind(r),
                result_severity(r.severity),
                r.line(MESSAGE_MAX_NODES),
                properties(judged, Some(r)),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reports::test_support::{self as support, decision};

    fn reason(code: ReasonCode, severity: Severity, effect: Verdict) -> Reason {
        support::reason(code, severity, effect, "n1")
    }

    fn pod() -> PodRef {
        support::pod("ns", "p")
    }

    /// The results of pod `ns/p` on node `n1` decided `d` under `policies`.
    fn results_of(d: &Decision, policies: &[String]) -> Vec<ReportResult> {
        let p = pod();
        let judged = JudgedPod {
            pod: &p,
            owner: &p.id(),
            node: "n1",
            policies,
            decision: d,
        };
        pod_results(&judged)
    }

    #[test]
    fn the_result_follows_the_effect_then_the_class() {
        use ReasonCode as C;
        let cases = [
            (
                C::BackendMismatch,
                Severity::Critical,
                Verdict::Deny,
                ResultKind::Fail,
            ),
            (
                C::BackendMismatch,
                Severity::Critical,
                Verdict::Warn,
                ResultKind::Warn,
            ),
            (
                C::ImageUnresolved,
                Severity::Warning,
                Verdict::Deny,
                ResultKind::Fail,
            ),
            (
                C::ImageUnresolved,
                Severity::Info,
                Verdict::Allow,
                ResultKind::Error,
            ),
            (C::Exempt, Severity::Info, Verdict::Allow, ResultKind::Skip),
            (
                C::ImageExempt,
                Severity::Info,
                Verdict::Allow,
                ResultKind::Skip,
            ),
            (
                C::NamespaceNotSelected,
                Severity::Info,
                Verdict::Allow,
                ResultKind::Skip,
            ),
            (
                C::NoIptables,
                Severity::Info,
                Verdict::Allow,
                ResultKind::Pass,
            ),
            (
                C::NodeHazard,
                Severity::Info,
                Verdict::Allow,
                ResultKind::Pass,
            ),
            (
                C::InvalidPolicyIgnored,
                Severity::Warning,
                Verdict::Warn,
                ResultKind::Warn,
            ),
            (
                C::KnownBadIptables,
                Severity::Critical,
                Verdict::Allow,
                ResultKind::Warn,
            ),
        ];
        for (code, sev, effect, want) in cases {
            assert_eq!(
                result_kind(&reason(code, sev, effect)),
                want,
                "{code} {effect}"
            );
        }
    }

    proptest::proptest! {
        /// The report says what the webhook says: a `fail` result exactly
        /// when the pod's verdict is deny; else a `warn` result exactly when
        /// it is warn. Any reasons the engine can give (an unsafe one never
        /// allows), in any number and order.
        #[test]
        fn the_worst_result_is_the_verdict(
            picks in proptest::collection::vec((0..ReasonCode::ALL.len(), 0..3usize, 0..3usize), 0..6),
        ) {
            let severities = [Severity::Info, Severity::Warning, Severity::Critical];
            let effects = [Verdict::Allow, Verdict::Warn, Verdict::Deny];
            let reasons: Vec<Reason> = picks
                .into_iter()
                .map(|(c, s, e)| {
                    let code = ReasonCode::ALL[c];
                    let unsafe_code = code.meta().class == ReasonClass::Unsafe;
                    let effect = if unsafe_code && e == 0 { Verdict::Warn } else { effects[e] };
                    reason(code, severities[s], effect)
                })
                .collect();
            let d = decision(reasons, 1);
            let kinds: Vec<ResultKind> =
                results_of(&d, &[]).iter().filter_map(|r| r.result).collect();
            let has = |k| kinds.contains(&k);
            proptest::prop_assert_eq!(d.verdict == Verdict::Deny, has(ResultKind::Fail));
            proptest::prop_assert_eq!(
                d.verdict == Verdict::Warn,
                !has(ResultKind::Fail) && has(ResultKind::Warn)
            );
        }
    }

    #[test]
    fn severities_map_onto_the_schemas_enum() {
        assert_eq!(
            result_severity(Severity::Critical),
            ResultSeverity::Critical
        );
        assert_eq!(result_severity(Severity::Warning), ResultSeverity::Medium);
        assert_eq!(result_severity(Severity::Info), ResultSeverity::Info);
    }

    #[test]
    fn each_class_has_its_own_category() {
        let classes = [
            ReasonClass::Unsafe,
            ReasonClass::CannotEvaluate,
            ReasonClass::Exemption,
            ReasonClass::Info,
        ];
        let mut names: Vec<&str> = classes.map(category).to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names, ["cannot-evaluate", "exemption", "info", "unsafe"]);
    }

    #[test]
    fn the_policy_is_the_sorted_sources_or_the_default() {
        assert_eq!(policy_name(&[]), DEFAULT_POLICY);
        let names = ["b".to_string(), "a".to_string(), "b".to_string()];
        assert_eq!(policy_name(&names), "a,b");
        let long = vec!["x".repeat(300)];
        assert!(policy_name(&long).len() <= MAX_POLICY_BYTES);
    }

    #[test]
    fn each_reason_is_one_result_with_the_webhooks_line_and_its_facts() {
        let r = reason(
            ReasonCode::OldReaderNewRules,
            Severity::Critical,
            Verdict::Deny,
        );
        let d = decision(vec![r.clone()], 1);
        let got = results_of(&d, &["strict".to_string()]);
        assert_eq!(got.len(), 1);
        let res = &got[0];
        assert_eq!(res.message, r.line(MESSAGE_MAX_NODES));
        assert_eq!(
            (
                res.policy.as_str(),
                res.rule.as_str(),
                res.category.as_str(),
                res.source.as_str()
            ),
            ("strict", "OldReaderNewRules", "unsafe", SOURCE)
        );
        assert_eq!(res.result, Some(ResultKind::Fail));
        assert_eq!(res.severity, Some(ResultSeverity::Critical));
        assert_eq!(res.resources[0].name.as_deref(), Some("p"));
        assert_eq!(res.resources[0].uid.as_deref(), Some("uid-p"));
        let props: Vec<(&str, &str)> = res
            .properties
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let digest = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            props,
            [
                ("container", "c"),
                ("image", "img:1"),
                ("imageBackend", "nft"),
                ("imageDigest", digest.as_str()),
                ("imageVersion", "1.8.7"),
                ("node", "n1"),
                ("nodeBackend", "nft"),
                ("otherVersion", "1.8.10"),
                ("platform", "linux/amd64"),
            ]
        );
    }

    #[test]
    fn a_compatible_writer_passes_and_a_pod_out_of_scope_gives_nothing() {
        let got = results_of(&decision(vec![], 1), &[]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].result, Some(ResultKind::Pass));
        assert_eq!(got[0].rule, RULE_COMPATIBLE);
        assert_eq!(got[0].policy, DEFAULT_POLICY);
        assert_eq!(
            got[0].properties.get("node").map(String::as_str),
            Some("n1")
        );
        assert!(results_of(&decision(vec![], 0), &[]).is_empty());
    }

    #[test]
    fn long_strings_are_capped_at_a_char_boundary() {
        let mut r = reason(
            ReasonCode::BackendMismatch,
            Severity::Critical,
            Verdict::Deny,
        );
        r.message = "é".repeat(2000);
        r.image = Some(format!("registry.example/{}", "ü".repeat(1000)));
        let res = &results_of(&decision(vec![r], 1), &[])[0];
        assert!(res.message.len() <= MAX_MESSAGE_BYTES && res.message.ends_with('…'));
        let image = &res.properties["image"];
        assert!(image.len() <= MAX_PROPERTY_BYTES && image.ends_with('…'));
        assert_eq!(capped("short", 10), "short");
    }
}
