//! The controller's own writes that its watches have not shown yet (what
//! client-go's controllers call expectations).
//!
//! A reconcile writes a node's labels and its profile's status; each write
//! triggers the node again when the watch delivers it, but the two watches
//! deliver independently. A reconcile woken by the Node's event could plan
//! from a profile the cache holds from before the status write, and write
//! the same status again (the cluster benchmark counted 1.03-1.09 writes
//! per node where 1 was due). So after writing, the reconcile records the
//! resourceVersions the API server returned; a reconcile of that node waits
//! (writes nothing) until the feeds have applied them, and the feed that
//! applies the last one triggers the node again. An expectation the watch
//! never meets (a re-list that skipped the version) expires after
//! [`EXPECTATION_TTL`], and the reconcile then plans from what it has.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a write may stay unseen before reconciles stop waiting for it.
pub const EXPECTATION_TTL: Duration = Duration::from_secs(15);

/// Which of a node's objects a write went to. A profile is named after its
/// node, so both are keyed by the node's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    Node,
    Profile,
}

#[derive(Debug)]
struct Pending {
    node: Option<String>,
    profile: Option<String>,
    since: Instant,
    /// A reconcile waited for this: trigger the node once it is seen.
    deferred: bool,
}

impl Pending {
    fn slot(&mut self, kind: Written) -> &mut Option<String> {
        match kind {
            Written::Node => &mut self.node,
            Written::Profile => &mut self.profile,
        }
    }

    fn is_empty(&self) -> bool {
        self.node.is_none() && self.profile.is_none()
    }
}

/// The pending writes, by node.
#[derive(Debug, Default)]
pub struct InFlight {
    pending: Mutex<HashMap<String, Pending>>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After a write of `kind` for `node` answered with `version`: expect
    /// the watch to show it, unless the store already holds it
    /// (`stored` reads the store's version under this lock, so a feed
    /// applying the event meanwhile cannot slip between check and record).
    pub fn expect(
        &self,
        node: &str,
        kind: Written,
        version: Option<String>,
        stored: impl FnOnce() -> Option<String>,
    ) {
        let Some(version) = version else { return };
        let mut pending = self.lock();
        if stored().as_deref() == Some(version.as_str()) {
            return;
        }
        let p = pending.entry(node.to_string()).or_insert_with(|| Pending {
            node: None,
            profile: None,
            since: Instant::now(),
            deferred: false,
        });
        p.since = Instant::now();
        *p.slot(kind) = Some(version);
    }

    /// Called by a feed after it applied an object of `kind` for `node` at
    /// `version` to its store (None: deleted). True when that was the last
    /// write a waiting reconcile expected: reconcile the node now.
    pub fn observed(&self, node: &str, kind: Written, version: Option<&str>) -> bool {
        let mut pending = self.lock();
        let Some(p) = pending.get_mut(node) else {
            return false;
        };
        let slot = p.slot(kind);
        if version.is_some() && slot.as_deref() != version {
            return false;
        }
        *slot = None;
        if !p.is_empty() {
            return false;
        }
        pending.remove(node).is_some_and(|p| p.deferred)
    }

    /// Whether a reconcile of `node` should wait for its own writes to be
    /// seen; Some(longest wait) if so. Expired expectations are dropped.
    pub fn wait_for(&self, node: &str) -> Option<Duration> {
        let mut pending = self.lock();
        let p = pending.get_mut(node)?;
        let age = p.since.elapsed();
        if age >= EXPECTATION_TTL {
            pending.remove(node);
            return None;
        }
        p.deferred = true;
        Some(EXPECTATION_TTL - age)
    }

    /// Whether no node has writes not yet seen.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconcile_waits_until_both_writes_are_seen_then_is_triggered() {
        let f = InFlight::default();
        f.expect("n1", Written::Node, Some("10".into()), || Some("9".into()));
        f.expect("n1", Written::Profile, Some("11".into()), || {
            Some("8".into())
        });
        assert!(f.wait_for("n1").is_some());
        assert!(f.wait_for("n2").is_none(), "other nodes never wait");
        // An older version of the object (before the write) is not it.
        assert!(!f.observed("n1", Written::Profile, Some("8")));
        assert!(!f.observed("n1", Written::Node, Some("10")));
        assert!(f.wait_for("n1").is_some(), "the profile is still unseen");
        assert!(f.observed("n1", Written::Profile, Some("11")), "trigger");
        assert!(f.wait_for("n1").is_none() && f.is_empty());
    }

    #[test]
    fn nothing_is_expected_when_the_store_already_shows_the_write() {
        let f = InFlight::default();
        // A write that changed nothing keeps the version the store has, or
        // the watch was quicker than the write's answer.
        f.expect("n1", Written::Profile, Some("11".into()), || {
            Some("11".into())
        });
        f.expect("n1", Written::Node, None, || None);
        assert!(f.is_empty());
    }

    #[test]
    fn seen_without_a_waiting_reconcile_triggers_nothing() {
        let f = InFlight::default();
        f.expect("n1", Written::Node, Some("10".into()), || None);
        assert!(!f.observed("n1", Written::Node, Some("10")));
        assert!(f.is_empty());
    }

    #[test]
    fn a_deleted_object_is_seen() {
        let f = InFlight::default();
        f.expect("n1", Written::Node, Some("10".into()), || None);
        assert!(f.wait_for("n1").is_some());
        assert!(f.observed("n1", Written::Node, None));
    }

    #[test]
    fn an_expectation_expires() {
        let f = InFlight::default();
        f.expect("n1", Written::Node, Some("10".into()), || None);
        f.lock().get_mut("n1").unwrap().since -= EXPECTATION_TTL;
        assert!(
            f.wait_for("n1").is_none(),
            "planned from what the cache has"
        );
        assert!(f.is_empty());
    }
}
