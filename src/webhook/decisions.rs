//! Finished admission answers, remembered for the same object under the same
//! facts.
//!
//! A verdict is a pure function of the object, the namespace, the facts
//! (profiles, Nodes, policies, namespace labels) and the image answers. So
//! the same object bytes under the same facts generation and image epoch get
//! the same answer: API server retries, no-op re-applies by GitOps tools, and
//! identical objects created in a burst skip parsing and judging. Answers
//! that depend on an image not resolved yet are never kept, and entries live
//! `TTL` at most, which bounds how long an answer outlives an image answer
//! that expired in the image cache.

use super::review::Prepared;
use crate::compat::evaluate::{ReasonCode, WorkloadKind};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// How long an answer is kept (image answers live minutes; see module doc).
pub const TTL: Duration = Duration::from_secs(30);

/// Everything an answer depends on besides the judge's fixed settings.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Key {
    /// Facts generation and image epoch when the answer was computed.
    pub generation: (u64, u64),
    pub kind: WorkloadKind,
    /// The request's namespace (defaults the object's own).
    pub namespace: Option<String>,
    /// sha256 of `request.object` as sent: collisions cannot be crafted.
    pub object: [u8; 32],
}

impl Key {
    pub fn new(
        generation: (u64, u64),
        kind: WorkloadKind,
        namespace: Option<&str>,
        object_json: &str,
    ) -> Self {
        Key {
            generation,
            kind,
            namespace: namespace.map(str::to_string),
            object: Sha256::digest(object_json.as_bytes()).into(),
        }
    }
}

/// A judged answer, ready to send again under another uid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The response body but for the uid.
    pub response: Prepared,
    /// "allow", "warn" or "deny".
    pub verdict: &'static str,
    /// Reason codes of the decision (metrics count them on every answer).
    pub codes: Vec<ReasonCode>,
    /// `Kind/namespace/name` for logs.
    pub object_ref: String,
}

pub struct DecisionCache {
    cache: moka::sync::Cache<Key, Arc<Answer>>,
}

impl DecisionCache {
    /// None when `entries` is 0 (the cache is off).
    pub fn new(entries: u64) -> Option<Self> {
        (entries > 0).then(|| DecisionCache {
            cache: moka::sync::Cache::builder()
                .max_capacity(entries)
                .time_to_live(TTL)
                .build(),
        })
    }

    pub fn get(&self, key: &Key) -> Option<Arc<Answer>> {
        self.cache.get(key)
    }

    pub fn insert(&self, key: Key, answer: Arc<Answer>) {
        self.cache.insert(key, answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> Arc<Answer> {
        Arc::new(Answer {
            response: Prepared::new(true, None, &[], "allow"),
            verdict: "allow",
            codes: vec![],
            object_ref: "Pod/default/p".into(),
        })
    }

    #[test]
    fn keyed_by_bytes_generation_kind_and_namespace() {
        let c = DecisionCache::new(16).unwrap();
        let k = Key::new((1, 0), WorkloadKind::Pod, Some("ns"), r#"{"a":1}"#);
        c.insert(k.clone(), answer());
        assert!(c.get(&k).is_some());
        for other in [
            Key::new((2, 0), WorkloadKind::Pod, Some("ns"), r#"{"a":1}"#),
            Key::new((1, 1), WorkloadKind::Pod, Some("ns"), r#"{"a":1}"#),
            Key::new((1, 0), WorkloadKind::DaemonSet, Some("ns"), r#"{"a":1}"#),
            Key::new((1, 0), WorkloadKind::Pod, None, r#"{"a":1}"#),
            Key::new((1, 0), WorkloadKind::Pod, Some("ns"), r#"{"a": 1}"#),
        ] {
            assert!(c.get(&other).is_none(), "{other:?}");
        }
        assert!(DecisionCache::new(0).is_none());
    }
}
