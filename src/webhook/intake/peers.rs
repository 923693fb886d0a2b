//! Per-peer tallies: how much one remote address holds (body bytes,
//! connections), so one caller cannot take what every caller shares.
//!
//! A peer is the remote IP. The API server is one address per instance (or a
//! few konnectivity agents), an attacker is a pod: caps are sized so the
//! former never reaches them. Where a NAT folds many pods into one address
//! they share its cap; `--client-ca-file` is the answer there.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The remote address of the connection a request came over (inserted by
/// the accept loop; absent for the router called without a socket).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub IpAddr);

impl Peer {
    /// An IPv4 client on a dual-stack socket is the same peer as over IPv4.
    pub fn of(ip: IpAddr) -> Self {
        Peer(ip.to_canonical())
    }
}

/// Units held per peer, at most `cap` each. The map holds only peers that
/// hold something, so it is as small as the open connections.
#[derive(Debug)]
pub struct PeerTally {
    cap: u64,
    held: Mutex<HashMap<IpAddr, u64>>,
}

/// What a peer holds; given back on drop.
#[derive(Debug)]
pub struct PeerHold {
    tally: Arc<PeerTally>,
    ip: IpAddr,
    units: u64,
}

impl PeerTally {
    pub fn new(cap: u64) -> Arc<Self> {
        Arc::new(PeerTally {
            cap,
            held: Mutex::new(HashMap::new()),
        })
    }

    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// `units` more for `peer`, or None when that would pass the cap.
    pub fn take(self: &Arc<Self>, peer: Peer, units: u64) -> Option<PeerHold> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let now = held.get(&peer.0).copied().unwrap_or(0);
        let after = now.checked_add(units).filter(|n| *n <= self.cap)?;
        held.insert(peer.0, after);
        Some(PeerHold {
            tally: self.clone(),
            ip: peer.0,
            units,
        })
    }

    /// What `peer` holds now.
    pub fn held(&self, peer: Peer) -> u64 {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(&peer.0).copied().unwrap_or(0)
    }

    /// How many peers hold anything.
    pub fn peers(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for PeerHold {
    fn drop(&mut self) {
        let mut held = self.tally.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.ip) {
            *n = n.saturating_sub(self.units);
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Peer {
        Peer::of(IpAddr::from([127, 0, 0, last]))
    }

    #[test]
    fn a_peer_is_capped_and_others_are_not() {
        let t = PeerTally::new(10);
        let a = t.take(ip(2), 6).unwrap();
        assert!(t.take(ip(2), 5).is_none(), "6 + 5 over 10");
        let b = t.take(ip(2), 4).unwrap();
        assert_eq!(t.held(ip(2)), 10);
        // Another address has a cap of its own.
        let c = t.take(ip(3), 10).unwrap();
        assert_eq!(t.peers(), 2);
        drop(a);
        assert_eq!(t.held(ip(2)), 4);
        assert!(t.take(ip(2), 6).is_some(), "given back on drop");
        drop((b, c));
        assert_eq!(t.peers(), 0, "peers holding nothing leave the map");
    }

    #[test]
    fn an_ipv4_mapped_address_is_the_same_peer() {
        let t = PeerTally::new(1);
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        let _one = t.take(Peer::of(mapped), 1).unwrap();
        assert!(t.take(ip(2), 1).is_none());
    }

    #[test]
    fn more_than_the_cap_at_once_is_refused_even_when_nothing_is_held() {
        let t = PeerTally::new(10);
        assert!(t.take(ip(2), 11).is_none());
        assert!(t.take(ip(2), u64::MAX).is_none());
        assert_eq!(t.peers(), 0);
    }
}
