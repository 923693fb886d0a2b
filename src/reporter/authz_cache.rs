//! Remembered answers of the metrics endpoint's access reviews, keyed by the
//! SHA-256 of the bearer token (the token itself is never kept). Bounded in
//! entries and time: a granted answer is kept for `allowed_ttl`, a refused
//! one for `denied_ttl` (shorter: a freshly bound scraper gets in soon).
//! Granted and refused answers live in separate LRUs, so a flood of random
//! tokens evicts only other refusals, never the scraper's grant. Pure: the
//! caller passes the time in.

use lru::LruCache;
use sha2::{Digest, Sha256};
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

/// What a review decided about one token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Authenticated and allowed `get` on `/metrics`.
    Allowed,
    /// The API server did not authenticate the token (HTTP 401).
    Unauthenticated,
    /// Authenticated, but not allowed `get` on `/metrics` (HTTP 403).
    Forbidden,
}

/// The cache key: a token's digest.
pub type TokenKey = [u8; 32];

pub fn token_key(token: &str) -> TokenKey {
    Sha256::digest(token.as_bytes()).into()
}

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub allowed_entries: NonZeroUsize,
    pub denied_entries: NonZeroUsize,
    pub allowed_ttl: Duration,
    pub denied_ttl: Duration,
}

impl Default for Limits {
    /// The API server's own webhook-authorizer defaults for the times (5 min
    /// granted is shortened to 2 min, the token-review cache's), and room for
    /// a handful of scrapers.
    fn default() -> Self {
        Self {
            allowed_entries: NonZeroUsize::new(64).expect("non-zero"),
            denied_entries: NonZeroUsize::new(1024).expect("non-zero"),
            allowed_ttl: Duration::from_secs(120),
            denied_ttl: Duration::from_secs(30),
        }
    }
}

pub struct DecisionCache {
    limits: Limits,
    allowed: LruCache<TokenKey, Instant>,
    denied: LruCache<TokenKey, (Decision, Instant)>,
}

impl DecisionCache {
    pub fn new(limits: Limits) -> Self {
        Self {
            allowed: LruCache::new(limits.allowed_entries),
            denied: LruCache::new(limits.denied_entries),
            limits,
        }
    }

    /// The remembered decision, if one is still fresh at `now`.
    pub fn get(&mut self, key: &TokenKey, now: Instant) -> Option<Decision> {
        if let Some(&until) = self.allowed.get(key) {
            if now < until {
                return Some(Decision::Allowed);
            }
            self.allowed.pop(key);
        }
        if let Some(&(decision, until)) = self.denied.get(key) {
            if now < until {
                return Some(decision);
            }
            self.denied.pop(key);
        }
        None
    }

    /// Remember `decision` from `now` on.
    pub fn put(&mut self, key: TokenKey, decision: Decision, now: Instant) {
        match decision {
            Decision::Allowed => {
                self.denied.pop(&key);
                self.allowed.put(key, now + self.limits.allowed_ttl);
            }
            refused => {
                self.allowed.pop(&key);
                self.denied
                    .put(key, (refused, now + self.limits.denied_ttl));
            }
        }
    }

    /// Entries held (granted, refused).
    pub fn len(&self) -> (usize, usize) {
        (self.allowed.len(), self.denied.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Limits {
        Limits {
            allowed_entries: NonZeroUsize::new(2).unwrap(),
            denied_entries: NonZeroUsize::new(3).unwrap(),
            allowed_ttl: Duration::from_secs(120),
            denied_ttl: Duration::from_secs(30),
        }
    }

    #[test]
    fn decisions_expire_after_their_own_time() {
        let mut c = DecisionCache::new(small());
        let t0 = Instant::now();
        let (good, bad, stranger) = (token_key("good"), token_key("bad"), token_key("who"));
        c.put(good, Decision::Allowed, t0);
        c.put(bad, Decision::Forbidden, t0);
        c.put(stranger, Decision::Unauthenticated, t0);
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(c.get(&good, at(29)), Some(Decision::Allowed));
        assert_eq!(c.get(&bad, at(29)), Some(Decision::Forbidden));
        assert_eq!(c.get(&stranger, at(29)), Some(Decision::Unauthenticated));
        assert_eq!(c.get(&bad, at(30)), None, "a refusal is kept 30 s");
        assert_eq!(c.get(&stranger, at(30)), None);
        assert_eq!(c.get(&good, at(119)), Some(Decision::Allowed));
        assert_eq!(c.get(&good, at(120)), None, "a grant is kept 120 s");
        assert_eq!(c.len(), (0, 0), "expired entries are dropped when met");
    }

    #[test]
    fn a_flood_of_refused_tokens_never_evicts_a_grant() {
        let mut c = DecisionCache::new(small());
        let now = Instant::now();
        let scraper = token_key("prometheus");
        c.put(scraper, Decision::Allowed, now);
        for i in 0..10_000 {
            c.put(
                token_key(&format!("random-{i}")),
                Decision::Unauthenticated,
                now,
            );
        }
        assert_eq!(c.get(&scraper, now), Some(Decision::Allowed));
        assert_eq!(c.len(), (1, 3), "each side bounded by its capacity");
        // The newest refusals are the ones kept.
        assert_eq!(
            c.get(&token_key("random-9999"), now),
            Some(Decision::Unauthenticated)
        );
        assert_eq!(c.get(&token_key("random-0"), now), None);
    }

    #[test]
    fn grants_are_bounded_least_recently_used_first() {
        let mut c = DecisionCache::new(small());
        let now = Instant::now();
        let [a, b, d] = ["a", "b", "d"].map(token_key);
        c.put(a, Decision::Allowed, now);
        c.put(b, Decision::Allowed, now);
        assert!(c.get(&a, now).is_some(), "a used: b is now the oldest");
        c.put(d, Decision::Allowed, now);
        assert_eq!(c.get(&b, now), None);
        assert_eq!(c.get(&a, now), Some(Decision::Allowed));
        assert_eq!(c.get(&d, now), Some(Decision::Allowed));
    }

    #[test]
    fn a_new_answer_replaces_the_other_kind() {
        let mut c = DecisionCache::new(small());
        let now = Instant::now();
        let k = token_key("rebound");
        c.put(k, Decision::Forbidden, now);
        c.put(k, Decision::Allowed, now);
        assert_eq!(c.get(&k, now), Some(Decision::Allowed));
        c.put(k, Decision::Forbidden, now);
        assert_eq!(c.get(&k, now), Some(Decision::Forbidden));
        assert_eq!(c.len(), (0, 1));
    }

    #[test]
    fn the_key_is_a_digest_not_the_token() {
        let k = token_key("secret-token");
        assert_eq!(k.len(), 32);
        assert_ne!(&k[..12], b"secret-token");
        assert_eq!(k, token_key("secret-token"));
        assert_ne!(k, token_key("secret-token2"));
    }
}
