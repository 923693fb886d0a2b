//! How many access reviews one source address may cause: a token bucket per
//! address, so that a pod sending a new made-up (but well-shaped) token with
//! every request makes its node ask the API server a few times a minute,
//! not as often as it can connect. A scraper with a valid token is reviewed
//! once per cached answer (minutes) and never comes near it. Bounded: the
//! buckets live in an LRU of [`PEERS`] addresses. Pure: the caller passes
//! the time in.

use lru::LruCache;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

/// Addresses remembered; the least recently seen one is forgotten first
/// (it starts again with a full bucket).
pub const PEERS: usize = 1024;

/// A bucket per address: `burst` reviews at once, refilled at one per
/// `every`.
#[derive(Debug)]
pub struct ReviewQuota {
    burst: u32,
    every: Duration,
    buckets: LruCache<IpAddr, (f64, Instant)>,
}

impl ReviewQuota {
    /// 4 reviews at once, then one every 15 s per address.
    pub fn new_default() -> Self {
        Self::new(4, Duration::from_secs(15))
    }

    pub fn new(burst: u32, every: Duration) -> Self {
        Self {
            burst: burst.max(1),
            every: every.max(Duration::from_millis(1)),
            buckets: LruCache::new(NonZeroUsize::new(PEERS).expect("non-zero")),
        }
    }

    /// One review for `peer` at `now`, if its bucket holds one.
    pub fn take(&mut self, peer: IpAddr, now: Instant) -> bool {
        let burst = f64::from(self.burst);
        let (tokens, last) = self.buckets.get(&peer).copied().unwrap_or((burst, now));
        let refill = now.saturating_duration_since(last).as_secs_f64() / self.every.as_secs_f64();
        let tokens = (tokens + refill).min(burst);
        if tokens >= 1.0 {
            self.buckets.put(peer, (tokens - 1.0, now));
            true
        } else {
            self.buckets.put(peer, (tokens, now));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_burst_then_one_per_interval() {
        let mut q = ReviewQuota::new(3, Duration::from_secs(10));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        assert!((0..3).all(|_| q.take(a, t0)));
        assert!(!q.take(a, t0), "the burst is spent");
        assert!(q.take(b, t0), "another address has its own bucket");
        assert!(!q.take(a, t0 + Duration::from_secs(9)));
        assert!(
            q.take(a, t0 + Duration::from_secs(10)),
            "one more after the interval"
        );
        assert!(!q.take(a, t0 + Duration::from_secs(10)));
        assert!(
            (0..3).all(|_| q.take(a, t0 + Duration::from_secs(500))),
            "refilled up to the burst, not beyond"
        );
        assert!(!q.take(a, t0 + Duration::from_secs(500)));
    }

    #[test]
    fn many_addresses_stay_within_the_bound() {
        let mut q = ReviewQuota::new(1, Duration::from_secs(60));
        let t0 = Instant::now();
        for i in 0..(PEERS as u32 + 100) {
            assert!(q.take(IpAddr::from(i.to_be_bytes()), t0));
        }
        assert_eq!(q.buckets.len(), PEERS);
    }
}
