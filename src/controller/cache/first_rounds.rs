//! The nodes whose first round since this controller started is over: a
//! reconcile planned them and the watches show what it wrote. Until then
//! a node's profile holds the writer inventory (and its summaries) the
//! last controller wrote, or none at all on a cold start, so a policy
//! report judged from it is likely to change once the reconcile's status
//! write arrives: the cluster benchmark (1,000 nodes, two writer pods each)
//! wrote 469 of 2,000 reports twice on a cold start, the first time
//! without the other writer on the node. The report writer leaves a
//! workload with a pod on such a node for later; the end of the node's
//! round marks it again.

use std::collections::HashSet;
use std::sync::RwLock;

/// The names of the nodes whose first round is over.
#[derive(Debug, Default)]
pub struct FirstRounds {
    done: RwLock<HashSet<String>>,
}

impl FirstRounds {
    /// `node`'s round is over (its facts in the caches are the ones this
    /// controller planned, or its reconcile failed: waiting longer would
    /// not make them better).
    pub fn done(&self, node: &str) {
        // Every reconcile ends a round: after the first, a read suffices.
        if self.is_done(node) {
            return;
        }
        let mut done = self.done.write().unwrap_or_else(|e| e.into_inner());
        if !done.contains(node) {
            done.insert(node.to_string());
        }
    }

    pub fn is_done(&self, node: &str) -> bool {
        self.done
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(node)
    }

    /// How many of `nodes` have not had their first round yet.
    pub fn pending<'a>(&self, nodes: impl IntoIterator<Item = &'a str>) -> usize {
        let done = self.done.read().unwrap_or_else(|e| e.into_inner());
        nodes.into_iter().filter(|n| !done.contains(*n)).count()
    }

    /// A deleted node: its name may come back as a new node.
    pub fn forget(&self, node: &str) {
        self.done
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_is_over_once_done_until_the_node_is_forgotten() {
        let r = FirstRounds::default();
        assert!(!r.is_done("n1"));
        r.done("n1");
        r.done("n1");
        assert!(r.is_done("n1") && !r.is_done("n2"));
        assert_eq!(r.pending(["n1", "n2", "n3"]), 2);
        r.forget("n1");
        assert!(!r.is_done("n1"));
    }
}
