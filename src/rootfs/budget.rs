//! One byte budget for all image data a process holds: every layer being read
//! and every layer kept in a cache reserves what it retains (file contents and
//! per-entry bookkeeping) before allocating it, and gives it back when dropped.
//! Caps per file and per layer bound one image; this bounds them all together,
//! so many concurrent hostile admissions cannot add up past the container's
//! memory limit (they fail with `BudgetExhausted` instead).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
struct Shared {
    limit: u64,
    used: AtomicU64,
    /// Reservations refused since start (a metric: the budget is too small, or under attack).
    refused: AtomicU64,
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
                limit,
                used: AtomicU64::new(0),
                refused: AtomicU64::new(0),
            }),
        }
    }

    /// No shared bound (tests and one-shot tools whose per-image caps suffice).
    pub fn unlimited() -> Self {
        Self::new(u64::MAX)
    }

    pub fn limit(&self) -> u64 {
        self.shared.limit
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
            let next = match cur.checked_add(n) {
                Some(v) if v <= s.limit => v,
                _ => {
                    s.refused.fetch_add(1, Ordering::Relaxed);
                    return Err(BudgetExhausted { limit: s.limit });
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
