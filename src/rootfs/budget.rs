//! One byte budget for all image data a process holds: every layer being read
//! and every layer kept in a cache reserves what it retains (file contents and
//! per-entry bookkeeping) before allocating it, and gives it back when dropped.
//! Caps per file and per layer bound one image; this bounds them all together,
//! so many concurrent hostile admissions cannot add up past the container's
//! memory limit (they fail with `BudgetExhausted` instead).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

struct Shared {
    /// Grows only for a budget with a `source` (by what it grants).
    limit: AtomicU64,
    used: AtomicU64,
    /// Reservations refused since start (a metric: the budget is too small, or under attack).
    refused: AtomicU64,
    /// Where more bytes come from when `limit` is reached: the image parser
    /// sandbox asks its parent, which reserves them from the process-wide
    /// budget (so children and parent share one bound). Returns bytes granted.
    source: Option<Box<Refill>>,
}

/// Asked for at least `n` more bytes; grants some (>= n) or refuses.
pub type Refill = dyn Fn(u64) -> Result<u64, BudgetExhausted> + Send + Sync;

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("limit", &self.limit)
            .field("used", &self.used)
            .field("refused", &self.refused)
            .field("source", &self.source.is_some())
            .finish()
    }
}

/// A shared byte budget; cheap to clone (all clones draw from one pool).
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    shared: Arc<Shared>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "image inspection memory budget exhausted ({limit} bytes in use by other inspections and caches); try again shortly"
)]
pub struct BudgetExhausted {
    pub limit: u64,
}

impl MemoryBudget {
    pub fn new(limit: u64) -> Self {
        Self {
            shared: Arc::new(Shared {
                limit: AtomicU64::new(limit),
                used: AtomicU64::new(0),
                refused: AtomicU64::new(0),
                source: None,
            }),
        }
    }

    /// A budget that starts empty and asks `source` for every byte: the
    /// sandboxed parser's view of its parent's budget.
    pub fn granted_by(source: Box<Refill>) -> Self {
        Self {
            shared: Arc::new(Shared {
                limit: AtomicU64::new(0),
                used: AtomicU64::new(0),
                refused: AtomicU64::new(0),
                source: Some(source),
            }),
        }
    }

    /// No shared bound (tests and one-shot tools whose per-image caps suffice).
    pub fn unlimited() -> Self {
        Self::new(u64::MAX)
    }

    pub fn limit(&self) -> u64 {
        self.shared.limit.load(Ordering::Relaxed)
    }

    /// Bytes reserved right now.
    pub fn used(&self) -> u64 {
        self.shared.used.load(Ordering::Relaxed)
    }

    /// Reservations refused since this budget was made.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }

    /// An empty reservation that grows on demand and is released on drop.
    pub fn reservation(&self) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }

    fn take(&self, n: u64) -> Result<(), BudgetExhausted> {
        let s = &self.shared;
        let mut cur = s.used.load(Ordering::Relaxed);
        loop {
            let limit = s.limit.load(Ordering::Acquire);
            let next = match cur.checked_add(n) {
                Some(v) if v <= limit => v,
                Some(v) if s.source.is_some() => {
                    // Only the sandbox's single thread uses a source.
                    let source = s.source.as_ref().expect("checked");
                    match source(v - limit) {
                        Ok(granted) => {
                            s.limit.fetch_add(granted, Ordering::AcqRel);
                            continue;
                        }
                        Err(e) => {
                            s.refused.fetch_add(1, Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                }
                _ => {
                    s.refused.fetch_add(1, Ordering::Relaxed);
                    return Err(BudgetExhausted { limit });
                }
            };
            match s
                .used
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }

    fn give_back(&self, n: u64) {
        self.shared.used.fetch_sub(n, Ordering::AcqRel);
    }
}

impl Default for MemoryBudget {
    fn default() -> Self {
        Self::unlimited()
    }
}

/// Bytes held against a `MemoryBudget`; returned when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: MemoryBudget,
    bytes: u64,
}

impl Reservation {
    /// Reserve `n` more bytes, or fail without reserving any.
    pub fn grow(&mut self, n: u64) -> Result<(), BudgetExhausted> {
        self.budget.take(n)?;
        self.bytes += n;
        Ok(())
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.give_back(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_share_one_pool_and_give_back_on_drop() {
        let b = MemoryBudget::new(100);
        let mut a = b.reservation();
        let mut c = b.reservation();
        a.grow(60).unwrap();
        assert_eq!(c.grow(50), Err(BudgetExhausted { limit: 100 }));
        assert_eq!(c.bytes(), 0, "a refused grow reserves nothing");
        c.grow(40).unwrap();
        assert_eq!(b.used(), 100);
        drop(a);
        assert_eq!(b.used(), 40);
        c.grow(60).unwrap();
        drop(c);
        assert_eq!(b.used(), 0);
        assert_eq!(b.refused(), 1);
    }

    #[test]
    fn a_granted_budget_asks_its_source_for_what_it_lacks() {
        let parent = MemoryBudget::new(10);
        let upstream = parent.clone();
        let held = std::sync::Mutex::new(parent.reservation());
        let child = MemoryBudget::granted_by(Box::new(move |n| {
            let n = n.max(4);
            held.lock().unwrap().grow(n).map(|()| n)
        }));
        let mut r = child.reservation();
        r.grow(3).unwrap();
        assert_eq!(
            (child.limit(), upstream.used()),
            (4, 4),
            "asked once, at least 4"
        );
        r.grow(1).unwrap();
        assert_eq!(upstream.used(), 4, "within the grant: no new ask");
        r.grow(6).unwrap();
        assert_eq!(upstream.used(), 10);
        assert_eq!(
            r.grow(1),
            Err(BudgetExhausted { limit: 10 }),
            "the parent's bound"
        );
        assert_eq!(child.refused(), 1);
    }

    #[test]
    fn overflowing_requests_are_refused_not_wrapped() {
        let b = MemoryBudget::unlimited();
        let mut r = b.reservation();
        r.grow(u64::MAX - 1).unwrap();
        assert!(r.grow(2).is_err());
        drop(r);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn concurrent_grows_never_exceed_the_limit() {
        let b = MemoryBudget::new(1000);
        let held: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    let b = b.clone();
                    s.spawn(move || {
                        let mut r = b.reservation();
                        for _ in 0..100 {
                            let _ = r.grow(7);
                        }
                        r
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let total: u64 = held.iter().map(Reservation::bytes).sum();
        assert!(total <= 1000 && total == b.used(), "{total} {}", b.used());
        drop(held);
        assert_eq!(b.used(), 0);
    }
}
