//! Per-namespace caps on the reports nfguard stores: a tenant who can create
//! pods can make nfguard write a report per bare NET_ADMIN pod (each up to
//! a few hundred KiB), so a namespace holds at most so many reports and so
//! many bytes of them. Reports past a cap are not written (a stored one is
//! removed), counted and logged; the workloads are still judged, admitted
//! or denied as always. Which reports fit is decided in the order a pass
//! builds them, so a namespace's reports do not swap places between passes.

use std::collections::BTreeMap;

/// The caps of one namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespaceCaps {
    pub reports: u32,
    pub bytes: u64,
}

impl Default for NamespaceCaps {
    /// 500 reports and 32 MiB: far above a namespace's own workloads
    /// (kube-system of a large cluster holds a few dozen), far below what
    /// a flood of bare pods would write.
    fn default() -> Self {
        NamespaceCaps {
            reports: 500,
            bytes: 32 << 20,
        }
    }
}

/// What one pass keeps per namespace, and what it refused.
#[derive(Debug)]
pub struct NamespaceBudget {
    caps: NamespaceCaps,
    used: BTreeMap<String, (usize, u64)>,
    refused: BTreeMap<String, usize>,
}

impl NamespaceBudget {
    pub fn new(caps: NamespaceCaps) -> Self {
        NamespaceBudget {
            caps,
            used: BTreeMap::new(),
            refused: BTreeMap::new(),
        }
    }

    /// A stored report this pass keeps without rebuilding it (another
    /// workload's in a partial pass, a deferred one): it counts, whatever
    /// its size.
    pub fn keep(&mut self, namespace: &str, bytes: u64) {
        let used = self.used.entry(namespace.to_string()).or_default();
        used.0 += 1;
        used.1 += bytes;
    }

    /// Whether a report of `bytes` fits in `namespace`; counted as kept
    /// when it does, as refused when not.
    pub fn admit(&mut self, namespace: &str, bytes: u64) -> bool {
        let (reports, used) = self.used.get(namespace).copied().unwrap_or_default();
        if reports < self.caps.reports as usize && used.saturating_add(bytes) <= self.caps.bytes {
            self.keep(namespace, bytes);
            true
        } else {
            *self.refused.entry(namespace.to_string()).or_default() += 1;
            false
        }
    }

    /// Reports refused per namespace, in namespace order.
    pub fn refused(&self) -> &BTreeMap<String, usize> {
        &self.refused
    }

    pub fn caps(&self) -> NamespaceCaps {
        self.caps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_takes_reports_until_either_cap_then_refuses_them() {
        let mut b = NamespaceBudget::new(NamespaceCaps {
            reports: 3,
            bytes: 1000,
        });
        assert!(b.admit("flood", 100));
        assert!(b.admit("flood", 100));
        assert!(b.admit("flood", 100));
        assert!(!b.admit("flood", 1), "the fourth report");
        assert!(b.admit("web", 900), "another namespace has its own caps");
        assert!(!b.admit("web", 101), "over the bytes");
        assert!(b.admit("web", 100), "exactly at the bytes");
        assert_eq!(
            b.refused(),
            &BTreeMap::from([("flood".to_string(), 1), ("web".to_string(), 1)])
        );
    }

    #[test]
    fn kept_reports_count_against_the_caps_whatever_their_size() {
        let mut b = NamespaceBudget::new(NamespaceCaps {
            reports: 2,
            bytes: 1000,
        });
        b.keep("ns", 5000);
        assert!(!b.admit("ns", 1), "the kept report already fills the bytes");
        let mut b = NamespaceBudget::new(NamespaceCaps {
            reports: 2,
            bytes: 1000,
        });
        b.keep("ns", 0);
        b.keep("ns", 0);
        assert!(!b.admit("ns", 0), "and the count");
    }
}
