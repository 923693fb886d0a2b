//! The effective NetfilterPolicy for one workload: which policies select its
//! namespace, how they combine, exempt images and the exempt annotation.

use super::selector::label_selector_matches;
use super::workload::Workload;
use crate::api::{NetfilterPolicy, PolicyAction, UnresolvedAction};
use globset::{Glob, GlobSet, GlobSetBuilder};
use std::collections::BTreeMap;

/// `nfguard.io/exempt: "<reason>"` on the workload (or its pod template).
pub const EXEMPT_ANNOTATION: &str = "nfguard.io/exempt";

/// Namespaces carry this label automatically (Kubernetes >= 1.21).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("NetfilterPolicy {policy}: exemptImages pattern {pattern:?}: {error}")]
    BadGlob {
        policy: String,
        pattern: String,
        error: globset::Error,
    },
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
    /// False when policies exist but none selects the namespace: not judged.
    applies: bool,
    exempt_patterns: Vec<String>,
    exempt: GlobSet,
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
            exempt_patterns: Vec::new(),
            exempt: GlobSet::empty(),
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
    /// Combine every policy whose namespaceSelector matches `namespace`.
    /// `namespace_labels` None means unknown (no cluster at hand): only the
    /// automatic `kubernetes.io/metadata.name` label is assumed. With no
    /// policies at all the default applies.
    pub fn from_policies<'a>(
        policies: impl IntoIterator<Item = &'a NetfilterPolicy>,
        namespace: &str,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> Result<Self, PolicyError> {
        let mut labels = namespace_labels.cloned().unwrap_or_default();
        labels
            .entry(NAMESPACE_NAME_LABEL.to_string())
            .or_insert_with(|| namespace.to_string());
        let mut out: Option<EffectivePolicy> = None;
        let mut any = false;
        let mut builder = GlobSetBuilder::new();
        for p in policies {
            any = true;
            let name = p.metadata.name.clone().unwrap_or_default();
            // Validate every policy's globs, selected or not: a broken policy is an error.
            let globs = p
                .spec
                .exempt_images
                .iter()
                .map(|pat| {
                    Glob::new(pat).map_err(|error| PolicyError::BadGlob {
                        policy: name.clone(),
                        pattern: pat.clone(),
                        error,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if let Some(sel) = &p.spec.namespace_selector
                && !label_selector_matches(sel, &labels)
            {
                continue;
            }
            for g in globs {
                builder.add(g);
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
            o.exempt_patterns
                .extend(p.spec.exempt_images.iter().cloned());
            o.sources.push(name);
        }
        match out {
            Some(mut o) => {
                o.exempt = builder.build().map_err(|error| PolicyError::BadGlob {
                    policy: o.sources.join(","),
                    pattern: o.exempt_patterns.join(","),
                    error,
                })?;
                Ok(o)
            }
            None if any => Ok(EffectivePolicy {
                applies: false,
                ..EffectivePolicy::default()
            }),
            None => Ok(EffectivePolicy::default()),
        }
    }

    /// Whether any policy selects the namespace (always true with no policies).
    pub fn applies(&self) -> bool {
        self.applies
    }

    /// The first `exemptImages` pattern matching `image`.
    pub fn exempt_image_pattern(&self, image: &str) -> Option<&str> {
        if self.exempt_patterns.is_empty() {
            return None;
        }
        self.exempt
            .matches(image)
            .first()
            .and_then(|i| self.exempt_patterns.get(*i))
            .map(String::as_str)
    }

    /// The `nfguard.io/exempt` reason from the object or its pod template.
    pub fn exempt_reason<'w>(&self, workload: &'w Workload) -> Option<&'w str> {
        workload
            .annotations
            .get(EXEMPT_ANNOTATION)
            .or_else(|| workload.template_annotations.get(EXEMPT_ANNOTATION))
            .map(String::as_str)
    }

    pub fn exempt_patterns(&self) -> &[String] {
        &self.exempt_patterns
    }
}
