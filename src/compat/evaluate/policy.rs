//! The effective NetfilterPolicy for one workload: which policies select its
//! namespace, how they combine, exempt images and where the exempt
//! annotation counts.
//!
//! Every policy is validated on its own ([`validate_policy`]); an invalid one
//! is left out of the combination (judged as if it did not exist) and listed
//! in [`EffectivePolicy::ignored`], so callers can show it instead of
//! failing the judgement of every workload.

use super::selector::label_selector_matches;
use crate::api::{NetfilterPolicy, NetfilterPolicySpec, PolicyAction, UnresolvedAction};
use globset::{Glob, GlobSet, GlobSetBuilder};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

/// Namespaces carry this label automatically (Kubernetes >= 1.21).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The highest `maxTaintedNodesPercent` (a share of all nodes).
const MAX_TAINTED_PERCENT: u32 = 100;

/// Why one NetfilterPolicy's spec cannot be used. Each variant names the
/// field at fault; [`PolicyError::reason`] is the status condition's reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("exemptImages[{index}] {pattern:?} is not a valid glob: {why}")]
    InvalidExemptImages {
        index: usize,
        pattern: String,
        why: String,
    },
    #[error("namespaceSelector.matchExpressions[{index}] (key {key:?}): {why}")]
    InvalidNamespaceSelector {
        index: usize,
        key: String,
        why: String,
    },
    #[error("exemptionNamespaceSelector.matchExpressions[{index}] (key {key:?}): {why}")]
    InvalidExemptionNamespaceSelector {
        index: usize,
        key: String,
        why: String,
    },
    #[error("maxTaintedNodesPercent {0} is above {MAX_TAINTED_PERCENT}")]
    InvalidMaxTaintedNodesPercent(u32),
}

impl PolicyError {
    /// The spec field at fault, as written in YAML.
    pub fn field(&self) -> &'static str {
        match self {
            PolicyError::InvalidExemptImages { .. } => "exemptImages",
            PolicyError::InvalidNamespaceSelector { .. } => "namespaceSelector",
            PolicyError::InvalidExemptionNamespaceSelector { .. } => "exemptionNamespaceSelector",
            PolicyError::InvalidMaxTaintedNodesPercent(_) => "maxTaintedNodesPercent",
        }
    }

    /// `Invalid<Field>`: a stable, PascalCase condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            PolicyError::InvalidExemptImages { .. } => "InvalidExemptImages",
            PolicyError::InvalidNamespaceSelector { .. } => "InvalidNamespaceSelector",
            PolicyError::InvalidExemptionNamespaceSelector { .. } => {
                "InvalidExemptionNamespaceSelector"
            }
            PolicyError::InvalidMaxTaintedNodesPercent(_) => "InvalidMaxTaintedNodesPercent",
        }
    }
}

/// A NetfilterPolicy left out of the judgement, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidPolicy {
    pub name: String,
    #[source]
    pub error: PolicyError,
    /// `NetfilterPolicy <name>: <error>`, built once: judgements borrow it.
    message: String,
}

impl InvalidPolicy {
    pub fn new(name: impl Into<String>, error: PolicyError) -> Self {
        let name = name.into();
        let message = format!("NetfilterPolicy {name}: {error}");
        InvalidPolicy {
            name,
            error,
            message,
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Whether `spec` can be used, with the first problem found (fields in
/// declaration order). The webhook, the controller and `nfguard check` all
/// judge through this one function.
pub fn validate_policy(spec: &NetfilterPolicySpec) -> Result<(), PolicyError> {
    compile(spec).map(drop)
}

/// The first matchExpression of `sel` the API server's own rules for
/// metav1.LabelSelectorRequirement refuse: (index, key, why).
fn selector_problem(sel: &LabelSelector) -> Option<(usize, String, String)> {
    sel.match_expressions
        .iter()
        .flatten()
        .enumerate()
        .find_map(|(index, e)| {
            let values = e.values.as_deref().unwrap_or(&[]);
            let why = match e.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    Some(format!("operator {} needs at least one value", e.operator))
                }
                "In" | "NotIn" => None,
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    Some(format!("operator {} takes no values", e.operator))
                }
                "Exists" | "DoesNotExist" => None,
                other => Some(format!(
                    "unknown operator {other:?} (In, NotIn, Exists or DoesNotExist)"
                )),
            };
            why.map(|why| (index, e.key.clone(), why))
        })
}

/// The valid spec's exempt-image globs, compiled.
fn compile(spec: &NetfilterPolicySpec) -> Result<GlobSet, PolicyError> {
    if let Some((index, key, why)) = spec.namespace_selector.as_ref().and_then(selector_problem) {
        return Err(PolicyError::InvalidNamespaceSelector { index, key, why });
    }
    let mut builder = GlobSetBuilder::new();
    for (index, pattern) in spec.exempt_images.iter().enumerate() {
        let glob = Glob::new(pattern).map_err(|e| PolicyError::InvalidExemptImages {
            index,
            pattern: pattern.clone(),
            why: e.kind().to_string(),
        })?;
        builder.add(glob);
    }
    let globs = builder
        .build()
        .map_err(|e| PolicyError::InvalidExemptImages {
            index: 0,
            pattern: spec.exempt_images.join(" "),
            why: e.kind().to_string(),
        })?;
    if let Some((index, key, why)) = spec
        .exemption_namespace_selector
        .as_ref()
        .and_then(selector_problem)
    {
        return Err(PolicyError::InvalidExemptionNamespaceSelector { index, key, why });
    }
    if let Some(p) = spec.max_tainted_nodes_percent
        && p > MAX_TAINTED_PERCENT
    {
        return Err(PolicyError::InvalidMaxTaintedNodesPercent(p));
    }
    Ok(globs)
}

/// One selecting policy's `exemptImages`, compiled.
#[derive(Clone, Debug)]
struct ExemptImages {
    patterns: Vec<String>,
    globs: GlobSet,
}

/// The policies that apply to one namespace, combined: the strictest
/// `action` (Deny > Taint > Warn) and `unresolvedImages` (Deny > Warn > Allow),
/// the smallest registry timeout, the union of `exemptImages`, and whether
/// any of them lets `nfguard.io/exempt` count here.
#[derive(Clone, Debug)]
pub struct EffectivePolicy {
    pub action: PolicyAction,
    pub unresolved_images: UnresolvedAction,
    pub registry_timeout_seconds: Option<u32>,
    /// Names of the policies combined here (empty: the built-in default).
    pub sources: Vec<String>,
    /// False when valid policies exist but none selects the namespace: not judged.
    applies: bool,
    /// Per selecting policy, in order (each compiled on its own, so one
    /// policy's globs cannot make another's unusable).
    exempt: Vec<ExemptImages>,
    /// Invalid policies that select the namespace (or whose selector is the
    /// invalid part): left out of this combination.
    ignored: Vec<InvalidPolicy>,
    /// The namespace this policy was combined for ("" when unknown).
    namespace: String,
    /// A selecting policy's `exemptionNamespaceSelector` matches the
    /// namespace: `nfguard.io/exempt` counts here.
    exemptions_allowed: bool,
}

impl Default for EffectivePolicy {
    /// No NetfilterPolicy at all: `action: Deny, unresolvedImages: Warn`.
    fn default() -> Self {
        EffectivePolicy {
            action: PolicyAction::Deny,
            unresolved_images: UnresolvedAction::Warn,
            registry_timeout_seconds: None,
            sources: Vec::new(),
            applies: true,
            exempt: Vec::new(),
            ignored: Vec::new(),
            namespace: String::new(),
            exemptions_allowed: false,
        }
    }
}

fn action_rank(a: PolicyAction) -> u8 {
    match a {
        PolicyAction::Warn => 0,
        PolicyAction::Taint => 1,
        PolicyAction::Deny => 2,
    }
}

fn unresolved_rank(a: UnresolvedAction) -> u8 {
    match a {
        UnresolvedAction::Allow => 0,
        UnresolvedAction::Warn => 1,
        UnresolvedAction::Deny => 2,
    }
}

impl EffectivePolicy {
    /// Combine every valid policy whose namespaceSelector matches
    /// `namespace`. `namespace_labels` None means unknown (no cluster at
    /// hand): only the automatic `kubernetes.io/metadata.name` label is
    /// assumed. With no valid policy at all the default applies. Invalid
    /// policies never take part: those that would select the namespace are
    /// listed in [`EffectivePolicy::ignored`].
    pub fn from_policies<'a>(
        policies: impl IntoIterator<Item = &'a NetfilterPolicy>,
        namespace: &str,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> Self {
        let mut labels = namespace_labels.cloned().unwrap_or_default();
        labels
            .entry(NAMESPACE_NAME_LABEL.to_string())
            .or_insert_with(|| namespace.to_string());
        let mut out: Option<EffectivePolicy> = None;
        let mut any_valid = false;
        let mut ignored = Vec::new();
        for p in policies {
            let name = p.metadata.name.clone().unwrap_or_default();
            let selects = |p: &NetfilterPolicy| {
                p.spec
                    .namespace_selector
                    .as_ref()
                    .is_none_or(|sel| label_selector_matches(sel, &labels))
            };
            // Absent: this policy lets the annotation count nowhere.
            let allows_exemptions = |p: &NetfilterPolicy| {
                p.spec
                    .exemption_namespace_selector
                    .as_ref()
                    .is_some_and(|sel| label_selector_matches(sel, &labels))
            };
            let globs = match compile(&p.spec) {
                Ok(g) => g,
                Err(error) => {
                    // A selector that is itself invalid cannot tell: listed.
                    if matches!(error, PolicyError::InvalidNamespaceSelector { .. }) || selects(p) {
                        ignored.push(InvalidPolicy::new(name, error));
                    }
                    continue;
                }
            };
            any_valid = true;
            if !selects(p) {
                continue;
            }
            let o = out.get_or_insert_with(|| EffectivePolicy {
                action: PolicyAction::Warn,
                unresolved_images: UnresolvedAction::Allow,
                ..EffectivePolicy::default()
            });
            if action_rank(p.spec.action) > action_rank(o.action) {
                o.action = p.spec.action;
            }
            if unresolved_rank(p.spec.unresolved_images) > unresolved_rank(o.unresolved_images) {
                o.unresolved_images = p.spec.unresolved_images;
            }
            if let Some(t) = p.spec.registry_timeout_seconds {
                o.registry_timeout_seconds =
                    Some(o.registry_timeout_seconds.map_or(t, |cur| cur.min(t)));
            }
            if !p.spec.exempt_images.is_empty() {
                o.exempt.push(ExemptImages {
                    patterns: p.spec.exempt_images.clone(),
                    globs,
                });
            }
            o.exemptions_allowed |= allows_exemptions(p);
            o.sources.push(name);
        }
        let combined = match out {
            Some(o) => o,
            None if any_valid => EffectivePolicy {
                applies: false,
                ..EffectivePolicy::default()
            },
            None => EffectivePolicy::default(),
        };
        EffectivePolicy {
            ignored,
            namespace: namespace.to_string(),
            ..combined
        }
    }

    /// Whether any policy selects the namespace (always true with no policies).
    pub fn applies(&self) -> bool {
        self.applies
    }

    /// Invalid policies that would otherwise have taken part (see
    /// [`EffectivePolicy::from_policies`]).
    pub fn ignored(&self) -> &[InvalidPolicy] {
        &self.ignored
    }

    /// The namespace this policy was combined for ("" when unknown).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Whether `nfguard.io/exempt` counts in this namespace: only where a
    /// selecting policy's `exemptionNamespaceSelector` matches it (never with
    /// no policy at all).
    pub fn allows_exemptions(&self) -> bool {
        self.exemptions_allowed
    }

    /// The workload's `nfguard.io/exempt` reason if it counts here; the one
    /// place the judgement decides whether the annotation is honoured.
    pub fn honoured_exemption<'r>(&self, annotation: Option<&'r str>) -> Option<&'r str> {
        annotation.filter(|_| self.exemptions_allowed)
    }

    /// The first `exemptImages` pattern matching `image`.
    pub fn exempt_image_pattern(&self, image: &str) -> Option<&str> {
        self.exempt.iter().find_map(|e| {
            e.globs
                .matches(image)
                .first()
                .and_then(|i| e.patterns.get(*i))
                .map(String::as_str)
        })
    }
}
