//! The byte budget for request bodies in flight, in two lanes, with a cap
//! per peer.
//!
//! - The large lane holds whole largest bodies (19 MiB each), as many as
//!   fit beside a small lane of at least [`SMALL_LANE_MIN`]; it is first
//!   come, first served, so a 19 MiB body waiting is not overtaken by mid-size
//!   ones.
//! - The small lane (the rest of the budget) takes only bodies of at most
//!   [`SMALL_BODY_BYTES`]. Reviews are small (a few KiB, rarely 100 KiB), so
//!   a queue of 19 MiB announcements never stands in front of them. A small
//!   body takes whichever lane has room first; it never waits in line
//!   behind a large body.
//! - One peer may hold (or wait for) at most half the budget, and at least
//!   one largest body plus the small lane's minimum: an API server's reviews
//!   (small, and a largest one rare) never reach that; a caller announcing
//!   19 MiB bodies gets one at a time.
//!
//! The two lanes add up to the budget: the memory bound is unchanged.

use super::MAX_BODY_BYTES;
use super::peers::{Peer, PeerHold, PeerTally};
use prometheus_client::metrics::gauge::Gauge;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bodies up to this size are small: every review short of a huge object.
pub const SMALL_BODY_BYTES: u64 = 1 << 20;

/// The least the small lane holds: hundreds of ordinary reviews, four of
/// the largest small ones.
pub const SMALL_LANE_MIN: u64 = 4 << 20;

/// How `limit` splits into the (small, large) lanes: whole largest bodies
/// for the large lane, at least one, beside at least [`SMALL_LANE_MIN`];
/// the small lane gets the rest. 64 MiB: three largest (57 MiB) and 7 MiB.
pub fn lanes(limit: u64) -> (u64, u64) {
    let max = MAX_BODY_BYTES as u64;
    let large = (limit.saturating_sub(SMALL_LANE_MIN) / max).max(1) * max;
    (limit.saturating_sub(large).max(SMALL_LANE_MIN), large)
}

/// What one peer may hold of a budget of `limit` (its lanes' sum).
pub fn per_peer(limit: u64) -> u64 {
    (limit / 2).max(MAX_BODY_BYTES as u64 + SMALL_LANE_MIN)
}

/// Why no share was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shortfall {
    /// The caller's address already holds its cap.
    Peer,
    /// The lane stayed full for the whole wait.
    Budget,
}

/// Bytes of request bodies that may be in flight at once.
pub struct BodyBudget {
    small: Arc<Semaphore>,
    large: Arc<Semaphore>,
    small_lane: u64,
    large_lane: u64,
    peers: Arc<PeerTally>,
    wait: Duration,
    in_flight: AtomicU64,
    peak: AtomicU64,
    gauge: Gauge,
}

impl std::fmt::Debug for BodyBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyBudget")
            .field("small_lane", &self.small_lane)
            .field("large_lane", &self.large_lane)
            .field("per_peer", &self.peers.cap())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// A body's share of the budget; given back on drop.
pub struct BodyShare {
    _permit: OwnedSemaphorePermit,
    _peer: Option<PeerHold>,
    bytes: u64,
    budget: Arc<BodyBudget>,
}

impl Drop for BodyShare {
    fn drop(&mut self) {
        let now = self
            .budget
            .in_flight
            .fetch_sub(self.bytes, Ordering::AcqRel)
            - self.bytes;
        self.budget.gauge.set(now as i64);
    }
}

impl BodyBudget {
    /// `limit` is raised to one largest body plus the small lane's minimum,
    /// so every admissible body can be read; `gauge` shows the bytes in flight.
    pub fn new(limit: u64, wait: Duration, gauge: Gauge) -> Arc<Self> {
        let (small_lane, large_lane) = lanes(limit);
        Arc::new(BodyBudget {
            small: Arc::new(Semaphore::new(small_lane as usize)),
            large: Arc::new(Semaphore::new(large_lane as usize)),
            small_lane,
            large_lane,
            peers: PeerTally::new(per_peer(small_lane + large_lane)),
            wait,
            in_flight: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            gauge,
        })
    }

    /// The budget: an eighth of the memory limit (see `MemoryPlan`).
    pub fn for_memory(plan: &crate::registry::MemoryPlan, gauge: Gauge) -> Arc<Self> {
        Self::new(plan.request_body_bytes, super::BODY_WAIT, gauge)
    }

    /// Both lanes.
    pub fn limit(&self) -> u64 {
        self.small_lane + self.large_lane
    }

    pub fn small_lane(&self) -> u64 {
        self.small_lane
    }

    pub fn large_lane(&self) -> u64 {
        self.large_lane
    }

    /// What one peer may hold.
    pub fn per_peer(&self) -> u64 {
        self.peers.cap()
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// The most bytes ever in flight at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }

    /// Reserve `bytes` with no peer known (the router called without a socket).
    pub async fn reserve(self: &Arc<Self>, bytes: u64) -> Option<BodyShare> {
        self.reserve_for(None, bytes).await.ok()
    }

    /// Reserve `bytes` (at most one largest body) for `peer`: refused at
    /// once when the peer holds its cap, else waiting up to the budget's
    /// wait for room in the body's lane.
    pub async fn reserve_for(
        self: &Arc<Self>,
        peer: Option<Peer>,
        bytes: u64,
    ) -> Result<BodyShare, Shortfall> {
        let bytes = bytes.min(MAX_BODY_BYTES as u64);
        // Held while waiting too: one peer cannot line up the large lane.
        let held = match peer {
            Some(p) => Some(self.peers.take(p, bytes).ok_or(Shortfall::Peer)?),
            None => None,
        };
        let n = bytes as u32;
        let acquire = async {
            if bytes <= SMALL_BODY_BYTES {
                // Whichever lane has room first; waiting in the large lane's
                // queue holds up nobody (a small body is served in moments).
                tokio::select! {
                    biased;
                    p = self.small.clone().acquire_many_owned(n) => p,
                    p = self.large.clone().acquire_many_owned(n) => p,
                }
            } else {
                self.large.clone().acquire_many_owned(n).await
            }
        };
        let permit = tokio::time::timeout(self.wait, acquire)
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or(Shortfall::Budget)?;
        let now = self.in_flight.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(now, Ordering::AcqRel);
        self.gauge.set(now as i64);
        Ok(BodyShare {
            _permit: permit,
            _peer: held,
            bytes,
            budget: self.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    const MAX: u64 = MAX_BODY_BYTES as u64;
    const MIB: u64 = 1 << 20;

    fn budget(limit: u64, wait: Duration) -> Arc<BodyBudget> {
        BodyBudget::new(limit, wait, Gauge::default())
    }

    fn peer(last: u8) -> Option<Peer> {
        Some(Peer::of(IpAddr::from([127, 0, 0, last])))
    }

    #[test]
    fn lanes_add_up_to_the_budget_and_hold_whole_largest_bodies() {
        // The default: an eighth of 512 MiB.
        assert_eq!(lanes(64 * MIB), (7 * MIB, 3 * MAX));
        assert_eq!(lanes(128 * MIB), (14 * MIB, 6 * MAX));
        // Raised to one largest body and the small lane's minimum.
        assert_eq!(lanes(1), (SMALL_LANE_MIN, MAX));
        assert_eq!(lanes(MAX + SMALL_LANE_MIN), (SMALL_LANE_MIN, MAX));
        for limit in [MAX + SMALL_LANE_MIN, 64 * MIB, 100 * MIB, 1 << 40] {
            let (small, large) = lanes(limit);
            assert_eq!(small + large, limit, "{limit}");
            assert!(small >= SMALL_LANE_MIN && large % MAX == 0, "{limit}");
        }
        assert_eq!(per_peer(64 * MIB), 32 * MIB);
        assert_eq!(per_peer(1), MAX + SMALL_LANE_MIN);
    }

    #[tokio::test]
    async fn a_share_waits_then_is_refused_and_is_given_back_on_drop() {
        let b = budget(2 * MAX + SMALL_LANE_MIN, Duration::from_millis(50));
        let one = b.reserve(MAX).await.unwrap();
        let two = b.reserve(MAX).await.unwrap();
        assert_eq!(b.in_flight(), 2 * MAX);
        assert!(b.reserve(2 * MIB).await.is_none(), "the large lane is full");
        drop(one);
        assert_eq!(b.in_flight(), MAX);
        let three = b.reserve(MAX).await.unwrap();
        assert_eq!(b.peak(), 2 * MAX);
        drop((two, three));
        assert_eq!(b.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_waiting_share_gets_in_when_one_is_given_back() {
        let b = budget(MAX + SMALL_LANE_MIN, Duration::from_secs(5));
        let one = b.reserve(MAX).await.unwrap();
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.reserve(2 * MIB).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(one);
        assert!(waiter.await.unwrap().is_some());
    }

    #[tokio::test]
    async fn small_bodies_are_not_queued_behind_a_large_waiter() {
        let b = budget(MAX + SMALL_LANE_MIN, Duration::from_secs(5));
        let held = b.reserve(MAX).await.unwrap();
        // A 19 MiB body waits for the large lane...
        let large = tokio::spawn({
            let b = b.clone();
            async move { b.reserve(MAX).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        // ... while small ones get in at once (a FIFO budget kept them
        // behind it until a 19 MiB share came back).
        let start = std::time::Instant::now();
        let mut small = Vec::new();
        for bytes in [
            SMALL_BODY_BYTES,
            SMALL_BODY_BYTES,
            SMALL_BODY_BYTES,
            20 << 10,
        ] {
            small.push(b.reserve(bytes).await.unwrap());
        }
        assert!(start.elapsed() < Duration::from_millis(100), "not queued");
        assert!(!large.is_finished());
        drop(small);
        assert_eq!(b.in_flight(), MAX, "the large waiter still waits");
        drop(held);
        assert!(large.await.unwrap().is_some());
        assert!(b.peak() <= b.limit());
    }

    #[tokio::test]
    async fn a_small_body_takes_the_large_lane_when_the_small_one_is_full() {
        let b = budget(MAX + SMALL_LANE_MIN, Duration::from_millis(50));
        let full: Vec<_> = futures::future::join_all((0..4).map(|_| b.reserve(SMALL_BODY_BYTES)))
            .await
            .into_iter()
            .map(Option::unwrap)
            .collect();
        let spill = b.reserve(SMALL_BODY_BYTES).await.unwrap();
        assert_eq!(b.in_flight(), 5 * SMALL_BODY_BYTES);
        // A largest body no longer fits beside it.
        assert!(b.reserve(MAX).await.is_none());
        drop((full, spill));
        assert!(b.reserve(MAX).await.is_some());
    }

    #[tokio::test]
    async fn one_peer_is_capped_and_refused_at_once_others_are_not() {
        // 64 MiB: a peer may hold 32 MiB, one largest body at a time.
        let b = budget(64 * MIB, Duration::from_secs(5));
        let first = b.reserve_for(peer(2), MAX).await.unwrap();
        let start = std::time::Instant::now();
        let again = b.reserve_for(peer(2), MAX).await;
        assert_eq!(again.err(), Some(Shortfall::Peer));
        assert!(
            start.elapsed() < Duration::from_millis(50),
            "refused without waiting"
        );
        // The same peer's small reviews still fit beside its large body.
        let small = b.reserve_for(peer(2), 100 << 10).await.unwrap();
        // Another address is not charged for it.
        let other = b.reserve_for(peer(3), MAX).await.unwrap();
        drop(first);
        let third = b.reserve_for(peer(2), MAX).await.unwrap();
        drop((small, other, third));
        assert_eq!(b.in_flight(), 0);
        assert_eq!(b.peers.peers(), 0);
    }

    #[tokio::test]
    async fn a_refused_share_gives_back_the_peers_charge() {
        let b = budget(MAX + SMALL_LANE_MIN, Duration::from_millis(30));
        let _full = b.reserve_for(peer(2), MAX).await.unwrap();
        assert_eq!(
            b.reserve_for(peer(3), MAX).await.err(),
            Some(Shortfall::Budget)
        );
        assert_eq!(b.peers.held(peer(3).unwrap()), 0);
    }
}
