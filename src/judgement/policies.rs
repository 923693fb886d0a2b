//! Every NetfilterPolicy and every namespace's labels, with one effective
//! policy per namespace computed once (building one compiles the
//! exempt-image globs) and shared by all judgements over the same facts.

use crate::api::NetfilterPolicy;
use crate::compat::evaluate::EffectivePolicy;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Namespace name -> its labels (None: the namespace is not known).
pub type NamespaceLabels = Arc<dyn Fn(&str) -> Option<BTreeMap<String, String>> + Send + Sync>;

/// Namespaces remembered (judgements come for namespaces that exist; past
/// this the policy is computed each time).
const MEMO_MAX: usize = 4096;

/// The policies and namespace labels one set of judgements reads.
pub struct PolicyBook {
    policies: Vec<Arc<NetfilterPolicy>>,
    /// None: no namespace is known, so a `namespaceSelector` can match only
    /// `kubernetes.io/metadata.name` (as `nfguard check` without a cluster).
    namespace_labels: Option<NamespaceLabels>,
    memo: Mutex<foldhash::HashMap<String, Arc<EffectivePolicy>>>,
}

impl std::fmt::Debug for PolicyBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyBook")
            .field("policies", &self.policies.len())
            .field("namespace_labels", &self.namespace_labels.is_some())
            .finish()
    }
}

impl Default for PolicyBook {
    fn default() -> Self {
        Self::shared(Vec::new())
    }
}

impl PolicyBook {
    pub fn new(policies: impl IntoIterator<Item = NetfilterPolicy>) -> Self {
        Self::shared(policies.into_iter().map(Arc::new).collect())
    }

    /// Policies as reflector stores hold them.
    pub fn shared(policies: Vec<Arc<NetfilterPolicy>>) -> Self {
        PolicyBook {
            policies,
            namespace_labels: None,
            memo: Mutex::default(),
        }
    }

    /// Selectors match the labels `labels` gives for each namespace.
    pub fn with_namespace_labels(mut self, labels: NamespaceLabels) -> Self {
        self.namespace_labels = Some(labels);
        self
    }

    pub fn policies(&self) -> impl Iterator<Item = &NetfilterPolicy> {
        self.policies.iter().map(|p| p.as_ref())
    }

    /// Whether namespace labels are known (cluster) or assumed (files).
    pub fn knows_namespaces(&self) -> bool {
        self.namespace_labels.is_some()
    }

    /// The effective policy for `namespace` (invalid policies left out and
    /// listed in its `ignored()`).
    pub fn for_namespace(&self, namespace: &str) -> Arc<EffectivePolicy> {
        if let Some(p) = self.memo().get(namespace) {
            return p.clone();
        }
        let labels = self.namespace_labels.as_ref().and_then(|f| f(namespace));
        let p = Arc::new(EffectivePolicy::from_policies(
            self.policies(),
            namespace,
            labels.as_ref(),
        ));
        let mut memo = self.memo();
        if memo.len() < MEMO_MAX {
            memo.insert(namespace.to_string(), p.clone());
        }
        p
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, foldhash::HashMap<String, Arc<EffectivePolicy>>> {
        self.memo.lock().unwrap_or_else(|e| e.into_inner())
    }
}
