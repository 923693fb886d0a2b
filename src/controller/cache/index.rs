//! Which nodes carry an nfguard taint, fed from Node watch events (pure,
//! tested by feeding objects in): the brake reads a count instead of
//! scanning every node. (Which pods run on each node: `pod_store`.)

use crate::controller::plan::taints::has_nfguard_taint;
use crate::projection::SlimNode;
use kube::runtime::watcher::Event;

fn node_tainted(n: &SlimNode) -> bool {
    has_nfguard_taint(n.taints.as_ref())
}

/// Node names to a flag, looked up on every reconcile (seeded per map).
type ByNode = foldhash::HashMap<String, bool>;

/// Which nodes carry an nfguard taint, for the safety brake: as the Node
/// watch shows them, except that the controller's own last write for a
/// node wins until the watch shows it (the watch may deliver events from
/// before that patch after it was made).
#[derive(Clone, Debug, Default)]
pub struct TaintedNodes {
    /// Every Node the watch lists, and whether it is tainted there.
    listed: ByNode,
    /// Our writes the watch has not shown yet.
    written: ByNode,
    /// Listed nodes tainted (written state first).
    count: usize,
    /// During a re-list.
    relist: Option<ByNode>,
}

impl TaintedNodes {
    /// Only a listed node counts; our write wins over the watch.
    fn effective(&self, node: &str) -> bool {
        self.listed
            .get(node)
            .is_some_and(|seen| *self.written.get(node).unwrap_or(seen))
    }

    /// Change the state of one node, keeping the count.
    fn update(&mut self, node: &str, change: impl FnOnce(&mut Self)) {
        let before = self.effective(node);
        change(self);
        let after = self.effective(node);
        self.count = (self.count + usize::from(after)).saturating_sub(usize::from(before));
    }

    fn seen(&mut self, node: &str, tainted: bool) {
        self.update(node, |s| {
            s.listed.insert(node.to_string(), tainted);
            // The watch caught up with our write: it is the truth again.
            if s.written.get(node) == Some(&tainted) {
                s.written.remove(node);
            }
        });
    }

    /// Apply one Node watch event.
    pub fn observe(&mut self, event: &Event<SlimNode>) {
        match event {
            Event::Apply(n) => {
                if let Some(name) = n.metadata.name.as_deref() {
                    self.seen(name, node_tainted(n));
                }
            }
            Event::Delete(n) => {
                if let Some(name) = n.metadata.name.as_deref() {
                    self.update(name, |s| {
                        s.listed.remove(name);
                        s.written.remove(name);
                    });
                }
            }
            Event::Init => self.relist = Some(ByNode::default()),
            Event::InitApply(n) => {
                if let Some(name) = n.metadata.name.clone() {
                    self.relist
                        .get_or_insert_with(ByNode::default)
                        .insert(name, node_tainted(n));
                }
            }
            Event::InitDone => {
                self.listed = self.relist.take().unwrap_or_default();
                let listed = &self.listed;
                self.written.retain(|n, _| listed.contains_key(n));
                for (name, tainted) in listed {
                    if self.written.get(name) == Some(tainted) {
                        self.written.remove(name);
                    }
                }
                self.count = listed.keys().filter(|n| self.effective(n)).count();
            }
        }
    }

    /// The controller wrote (or kept) `node`'s taints: tainted or not.
    pub fn wrote(&mut self, node: &str, tainted: bool) {
        self.update(node, |s| {
            // Nothing to remember when the watch already shows it (the
            // common case: no change), so a reconcile allocates nothing here.
            if s.listed.get(node) == Some(&tainted) {
                s.written.remove(node);
            } else {
                s.written.insert(node.to_string(), tainted);
            }
        });
    }

    /// Count `node` as tainted from the moment a plan decides to taint it,
    /// before the write: reconciles planned side by side then see it, so
    /// together they never pass the brake. The reconcile records what it
    /// wrote afterwards ([`Self::wrote`]); a failed write leaves the
    /// reservation until the node's next reconcile (the brake errs on the
    /// side of fewer taints).
    pub fn reserve(&mut self, node: &str) {
        if !self.effective(node) {
            self.update(node, |s| {
                s.written.insert(node.to_string(), true);
            });
        }
    }

    /// Nodes tainted by nfguard, `node` aside.
    pub fn elsewhere(&self, node: &str) -> usize {
        self.count - usize::from(self.effective(node))
    }

    /// Nodes tainted by nfguard.
    pub fn tainted(&self) -> usize {
        self.count
    }

    /// Nodes listed.
    pub fn total(&self) -> usize {
        self.listed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, tainted: bool) -> SlimNode {
        let taints = if tainted {
            json!([{"key": "nfguard.io/netfilter-degraded", "value": "X", "effect": "NoSchedule"}])
        } else {
            json!([{"key": "dedicated", "effect": "NoSchedule"}])
        };
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"taints": taints}}))
            .unwrap()
    }

    fn listed(nodes: &[(&str, bool)]) -> TaintedNodes {
        let mut t = TaintedNodes::default();
        t.observe(&Event::Init);
        for (n, tainted) in nodes {
            t.observe(&Event::InitApply(node(n, *tainted)));
        }
        t.observe(&Event::InitDone);
        t
    }

    #[test]
    fn tainted_nodes_count_what_the_watch_shows() {
        let mut t = listed(&[("a", true), ("b", false), ("c", true)]);
        assert_eq!((t.tainted(), t.total()), (2, 3));
        assert_eq!(t.elsewhere("a"), 1);
        assert_eq!(t.elsewhere("b"), 2);
        t.observe(&Event::Apply(node("b", true)));
        t.observe(&Event::Delete(node("c", true)));
        t.observe(&Event::Apply(node("d", false)));
        assert_eq!((t.tainted(), t.total()), (2, 3));
        assert_eq!(t.elsewhere("d"), 2);
    }

    #[test]
    fn our_write_wins_until_the_watch_shows_it() {
        let mut t = listed(&[("a", false), ("b", false)]);
        t.wrote("a", true);
        assert_eq!(t.tainted(), 1);
        assert_eq!(t.elsewhere("b"), 1);
        // An event from before our patch does not undo it.
        t.observe(&Event::Apply(node("a", false)));
        assert_eq!(t.tainted(), 1);
        // The watch shows our patch; later changes by others count again.
        t.observe(&Event::Apply(node("a", true)));
        t.observe(&Event::Apply(node("a", false)));
        assert_eq!(t.tainted(), 0);
        // A write for a node the watch does not list does not count.
        t.wrote("ghost", true);
        assert_eq!((t.tainted(), t.total()), (0, 2));
        // A re-list keeps a write the watch has not shown yet.
        t.wrote("b", true);
        t.observe(&Event::Init);
        t.observe(&Event::InitApply(node("a", false)));
        t.observe(&Event::InitApply(node("b", false)));
        t.observe(&Event::InitDone);
        assert_eq!(t.tainted(), 1);
    }
}
