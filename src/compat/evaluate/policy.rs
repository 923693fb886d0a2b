//! The effective NetfilterPolicy for one workload: which policies select its
//! namespace, how they combine, exempt images and the exempt annotation.
//!
//! Every policy is validated on its own ([`validate_policy`]); an invalid one
//! is left out of the combination (judged as if it did not exist) and listed
//! in [`EffectivePolicy::ignored`], so callers can show it instead of
//! failing the judgement of every workload.

use super::selector::label_selector_matches;
use crate::api::{NetfilterPolicy, NetfilterPolicySpec, PolicyAction, UnresolvedAction};
use globset::{Glob, GlobSet, GlobSetBuilder};
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
    #[error("maxTaintedNodesPercent {0} is above {MAX_TAINTED_PERCENT}")]
    InvalidMaxTaintedNodesPercent(u32),
}

impl PolicyError {
    /// The spec field at fault, as written in YAML.
    pub fn field(&self) -> &'static str {
        match self {
            PolicyError::InvalidExemptImages { .. } => "exemptImages",
            PolicyError::InvalidNamespaceSelector { .. } => "namespaceSelector",
            PolicyError::InvalidMaxTaintedNodesPercent(_) => "maxTaintedNodesPercent",
        }
    }

    /// `Invalid<Field>`: a stable, PascalCase condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            PolicyError::InvalidExemptImages { .. } => "InvalidExemptImages",
            PolicyError::InvalidNamespaceSelector { .. } => "InvalidNamespaceSelector",
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

/// The valid spec's exempt-image globs, compiled.
fn compile(spec: &NetfilterPolicySpec) -> Result<GlobSet, PolicyError> {
    if let Some(sel) = &spec.namespace_selector {
        for (index, e) in sel.match_expressions.iter().flatten().enumerate() {
            let values = e.values.as_deref().unwrap_or(&[]);
            // The API server's own rules for metav1.LabelSelectorRequirement.
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
            if let Some(why) = why {
                return Err(PolicyError::InvalidNamespaceSelector {
                    index,
                    key: e.key.clone(),
                    why,
                });
            }
        }
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
/// the smallest registry timeout, and the union of `exemptImages`.
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
