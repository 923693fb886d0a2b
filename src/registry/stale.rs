//! Stale-if-error for tags (RFC 5861's `stale-if-error`, applied to a tag's
//! pin): a registry outage is not an outage of judgement. When a tag's pin
//! has expired and its registry gives no answer (unreachable, too slow,
//! HTTP 429 or 5xx), the tag's last answer (the digest it was last pinned
//! to and the profile read from it, per platform, kept per credential as
//! the fresh answer was) stands in, marked stale, for at most `bound` past
//! the pin's expiry; then the look-up fails as it always did.
//!
//! Only silence keeps it. Any answer the registry gives replaces or forgets
//! it: 401/403 (a permission), 404 (an existence), content nfguard refuses,
//! a new digest. So a stale answer never outlives the permission that
//! filled it and never hides that a tag moved.

use super::RegistryError;
use super::cache::PinKey;
use crate::facts::ImageProfile;
use moka::ops::compute::Op;
use moka::sync::Cache;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The default bound past a pin's expiry (`RegistryConfig::stale_if_error`):
/// most registry incidents (a registry pod restarting, a partition, a
/// public registry's status-page incident, a rate-limit window) end within
/// it, and it is how long a tag moved during an outage may be judged by its
/// old image, or a credential revoked during one may still read its answer.
pub const STALE_IF_ERROR: Duration = Duration::from_secs(3600);
/// Platforms kept per tag: a cluster's nodes have few.
const MAX_PLATFORMS: usize = 8;
/// How long re-pinning a tag may take while it has a stale answer to fall
/// back to: a registry that cannot answer one manifest GET in this time is
/// taken as down. A blackholed registry then costs an admission this, not
/// the connect timeout (10 s, more than the webhook's 8 s budget).
pub const PROBE: Duration = Duration::from_secs(3);

/// The registry gave no answer at all: only then may a stale answer stand in.
pub fn silent(e: &RegistryError) -> bool {
    use RegistryError as E;
    match e {
        E::Network { outage, .. } => *outage,
        // Too slow, or the connection broke mid-blob.
        E::Timeout { .. } | E::BlobStream { .. } | E::Truncated { .. } => true,
        _ => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Answer with the tag's last answer, marked stale.
    Serve,
    /// Fail as before; keep the last answer.
    Fail,
    /// Fail, and forget the last answer: the registry spoke.
    Forget,
}

/// May an answer `age` old (since the registry last confirmed its tag)
/// still be served stale?
pub fn servable(age: Duration, tag_ttl: Duration, bound: Duration) -> bool {
    !bound.is_zero() && age <= tag_ttl.saturating_add(bound)
}

/// What a failed look-up of a tag does with its last answer, `age` old
/// (None: nothing kept for this tag, platform and credential).
pub fn decide(
    e: &RegistryError,
    age: Option<Duration>,
    tag_ttl: Duration,
    bound: Duration,
) -> Decision {
    if !silent(e) {
        return Decision::Forget;
    }
    match age {
        Some(age) if servable(age, tag_ttl, bound) => Decision::Serve,
        _ => Decision::Fail,
    }
}

/// What `InspectStats` says of an answer served stale.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Staleness {
    /// Since the registry last said the tag named this digest.
    pub age_millis: u64,
    /// For people: the age, and the failure in nfguard's words (registry
    /// errors never carry a remote body).
    pub note: String,
}

impl Staleness {
    fn new(age: Duration, cause: &RegistryError) -> Self {
        Staleness {
            age_millis: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
            note: format!(
                "stale answer from {} ago, served because the registry failed: {cause}",
                human(age)
            ),
        }
    }
}

/// "0.4s", "4m12s", "1h05m".
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1}s", d.as_secs_f64()),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// A tag's last answer: what it was pinned to, when, and the profiles read
/// from that digest. Replaced whole (copy on write) so the cache weighs it
/// right.
struct TagAnswer {
    /// Empty for a tombstone (the registry spoke: nothing older may return).
    digest: String,
    read_at: Instant,
    profiles: Vec<(String, Arc<ImageProfile>)>,
    /// Served stale since the registry last confirmed it (the age gauge).
    served: AtomicBool,
}

impl TagAnswer {
    fn new(digest: &str, read_at: Instant, profiles: Vec<(String, Arc<ImageProfile>)>) -> Self {
        TagAnswer {
            digest: digest.into(),
            read_at,
            profiles,
            served: AtomicBool::new(false),
        }
    }

    fn profile(&self, platform: &str) -> Option<&Arc<ImageProfile>> {
        self.profiles
            .iter()
            .find(|(p, _)| p == platform)
            .map(|(_, prof)| prof)
    }
}

/// Kept until the bound has passed since the registry confirmed it.
struct Expiry {
    keep: Duration,
}

impl Expiry {
    fn left(&self, value: &TagAnswer, now: Instant) -> Option<Duration> {
        Some(
            self.keep
                .saturating_sub(now.saturating_duration_since(value.read_at)),
        )
    }
}

impl moka::Expiry<PinKey, Arc<TagAnswer>> for Expiry {
    fn expire_after_create(
        &self,
        _: &PinKey,
        v: &Arc<TagAnswer>,
        now: Instant,
    ) -> Option<Duration> {
        self.left(v, now)
    }

    fn expire_after_update(
        &self,
        _: &PinKey,
        v: &Arc<TagAnswer>,
        now: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        self.left(v, now)
    }
}

/// An answer served stale.
pub struct Served {
    pub profile: Arc<ImageProfile>,
    pub staleness: Staleness,
}

/// The last answer of each tag, per credential: at most `entries` profiles
/// in all (like the other caches), each kept `tag_ttl + bound` at most.
pub struct StaleStore {
    tags: Cache<PinKey, Arc<TagAnswer>>,
    tag_ttl: Duration,
    bound: Duration,
}

impl StaleStore {
    /// A store (registered for the metrics); `bound` zero turns it off.
    pub fn new(entries: usize, tag_ttl: Duration, bound: Duration) -> Arc<Self> {
        let keep = tag_ttl.saturating_add(bound);
        let store = Arc::new(StaleStore {
            tags: Cache::builder()
                .max_capacity(if bound.is_zero() {
                    0
                } else {
                    entries.max(1) as u64
                })
                .weigher(|_: &PinKey, v: &Arc<TagAnswer>| v.profiles.len().max(1) as u32)
                .expire_after(Expiry { keep })
                .build(),
            tag_ttl,
            bound,
        });
        let mut all = STORES.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&store));
        store
    }

    fn enabled(&self) -> bool {
        !self.bound.is_zero()
    }

    /// The registry pinned the tag to `digest` at `at`: the same digest
    /// keeps its profiles (confirmed again); another drops them (the tag
    /// moved, the old answer must not stand in for the new one).
    pub fn pinned(&self, key: &PinKey, digest: &str, at: Instant) {
        if !self.enabled() {
            return;
        }
        self.tags.entry_by_ref(key).and_compute_with(|old| {
            let old = old.map(|e| e.into_value());
            match old {
                Some(o) if o.read_at > at => Op::Nop,
                Some(o) if o.digest == digest => {
                    Op::Put(Arc::new(TagAnswer::new(digest, at, o.profiles.clone())))
                }
                _ => Op::Put(Arc::new(TagAnswer::new(digest, at, Vec::new()))),
            }
        });
    }

    /// `profile` was read for `platform` from `digest`, the tag's pin made
    /// at `at`.
    pub fn answered(
        &self,
        key: &PinKey,
        digest: &str,
        at: Instant,
        platform: &str,
        profile: Arc<ImageProfile>,
    ) {
        if !self.enabled() {
            return;
        }
        self.tags.entry_by_ref(key).and_compute_with(|old| {
            let old = old.map(|e| e.into_value());
            match old {
                Some(o) if o.digest == digest => {
                    let mut profiles = o.profiles.clone();
                    match profiles.iter().position(|(p, _)| p == platform) {
                        Some(i) => profiles[i].1 = profile,
                        None if profiles.len() < MAX_PLATFORMS => {
                            profiles.push((platform.into(), profile))
                        }
                        None => return Op::Nop,
                    }
                    Op::Put(Arc::new(TagAnswer::new(
                        digest,
                        o.read_at.max(at),
                        profiles,
                    )))
                }
                // A newer pin (or the registry's refusal) came in meanwhile.
                Some(o) if o.read_at > at => Op::Nop,
                _ => Op::Put(Arc::new(TagAnswer::new(
                    digest,
                    at,
                    vec![(platform.into(), profile)],
                ))),
            }
        });
    }

    /// The registry spoke: nothing read before `now` may stand in any more
    /// (a tombstone, so a look-up still in flight cannot bring it back).
    pub fn forget(&self, key: &PinKey, now: Instant) {
        if self.enabled() {
            self.tags
                .insert(key.clone(), Arc::new(TagAnswer::new("", now, Vec::new())));
        }
    }

    /// The age of the answer for `platform` if it may be served stale at `now`.
    pub fn servable_age(&self, key: &PinKey, platform: &str, now: Instant) -> Option<Duration> {
        let t = self.tags.get(key)?;
        t.profile(platform)?;
        let age = now.saturating_duration_since(t.read_at);
        servable(age, self.tag_ttl, self.bound).then_some(age)
    }

    /// After a failed look-up of a tag for `platform`: its last answer,
    /// marked stale, if `e` was silence and the answer is within the bound;
    /// else `e` (forgetting the answer when the registry spoke).
    pub fn on_error(
        &self,
        key: &PinKey,
        platform: &str,
        e: RegistryError,
        now: Instant,
    ) -> Result<Served, RegistryError> {
        let kept = self.tags.get(key);
        let found = kept
            .as_ref()
            .and_then(|t| Some((t, t.profile(platform)?)))
            .map(|(t, p)| (t, p, now.saturating_duration_since(t.read_at)));
        match (
            decide(&e, found.map(|f| f.2), self.tag_ttl, self.bound),
            found,
        ) {
            (Decision::Serve, Some((t, profile, age))) => {
                t.served.store(true, Ordering::Relaxed);
                SERVED.fetch_add(1, Ordering::Relaxed);
                Ok(Served {
                    profile: profile.clone(),
                    staleness: Staleness::new(age, &e),
                })
            }
            (Decision::Forget, _) => {
                self.forget(key, now);
                Err(e)
            }
            _ => Err(e),
        }
    }

    /// The oldest answer served stale and still servable, by age.
    pub fn oldest_served(&self, now: Instant) -> Option<Duration> {
        self.tags
            .iter()
            .filter(|(_, t)| t.served.load(Ordering::Relaxed))
            .map(|(_, t)| now.saturating_duration_since(t.read_at))
            .filter(|age| servable(*age, self.tag_ttl, self.bound))
            .max()
    }
}

/// Answers served stale by every store of this process.
static SERVED: AtomicU64 = AtomicU64::new(0);
/// Every live store (one per inspector), for the age gauge.
static STORES: Mutex<Vec<Weak<StaleStore>>> = Mutex::new(Vec::new());

/// Answers served stale in this process so far.
pub fn answers_served() -> u64 {
    SERVED.load(Ordering::Relaxed)
}

/// The age of the oldest answer served stale and still servable (zero: none).
pub fn oldest_served_age() -> Duration {
    let stores: Vec<_> = STORES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let now = Instant::now();
    stores
        .iter()
        .filter_map(|s| s.oldest_served(now))
        .max()
        .unwrap_or_default()
}

/// `<prefix>_registry_stale_answers_total` and
/// `<prefix>_registry_stale_answer_max_age_seconds` on every scrape, for
/// any component that inspects images.
#[derive(Debug)]
pub struct StaleCollector;

impl prometheus_client::collector::Collector for StaleCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let served = ConstCounter::new(answers_served());
        served.encode(encoder.encode_descriptor(
            "registry_stale_answers",
            "Image look-ups answered with a tag's last answer because its registry gave none (unreachable, timed out, HTTP 429 or 5xx)",
            None,
            served.metric_type(),
        )?)?;
        let age = ConstGauge::new(oldest_served_age().as_secs_f64());
        age.encode(encoder.encode_descriptor(
            "registry_stale_answer_max_age_seconds",
            "Age of the oldest tag answer being served stale (since its registry last confirmed it); 0 when none",
            None,
            age.metric_type(),
        )?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{CredentialId, Credentials};

    const TTL: Duration = Duration::from_secs(30);
    const BOUND: Duration = Duration::from_secs(3600);

    fn network(outage: bool) -> RegistryError {
        RegistryError::Network {
            registry: "r.example".into(),
            detail: "HTTP 503".into(),
            outage,
        }
    }

    #[test]
    fn only_silence_qualifies() {
        use RegistryError as E;
        let silent_ones = [
            network(true),
            E::Timeout {
                reference: "r/a:1".into(),
                after: Duration::from_secs(3),
            },
            E::BlobStream {
                digest: "sha256:0".into(),
                got: 1,
                detail: "connection to the registry failed".into(),
            },
            E::Truncated {
                digest: "sha256:0".into(),
                expected: 2,
                got: 1,
            },
        ];
        for e in &silent_ones {
            assert!(silent(e), "{e}");
        }
        let spoken = [
            // Refused by nfguard: egress policy, redirect, untrusted certificate.
            network(false),
            E::Unauthorized {
                registry: "r".into(),
                detail: "HTTP 401".into(),
            },
            E::Unauthorized {
                registry: "r".into(),
                detail: "HTTP 403".into(),
            },
            E::NotFound {
                what: "manifest r/a:1".into(),
            },
            E::NoMatchingPlatform {
                reference: "r/a:1".into(),
                platform: "linux/arm64".into(),
                available: "linux/amd64".into(),
            },
            E::Protocol {
                reference: "r/a:1".into(),
                detail: "unexpected HTTP 400".into(),
            },
            E::DigestMismatch {
                digest: "sha256:0".into(),
                actual: "sha256:1".into(),
            },
            E::Internal("x".into()),
        ];
        for e in &spoken {
            assert!(!silent(e), "{e}");
            assert_eq!(
                decide(e, Some(Duration::ZERO), TTL, BOUND),
                Decision::Forget
            );
        }
    }

    #[test]
    fn the_bound_counts_from_the_pins_expiry_and_zero_turns_it_off() {
        let e = network(true);
        let serve = |age, bound| decide(&e, Some(age), TTL, bound);
        assert_eq!(serve(TTL + BOUND, BOUND), Decision::Serve);
        assert_eq!(
            serve(TTL + BOUND + Duration::from_millis(1), BOUND),
            Decision::Fail
        );
        assert_eq!(serve(Duration::ZERO, Duration::ZERO), Decision::Fail);
        assert_eq!(decide(&e, None, TTL, BOUND), Decision::Fail);
    }

    fn key(credential: CredentialId) -> PinKey {
        ("r.example/a:1".into(), credential)
    }

    fn profile(digest: &str) -> Arc<ImageProfile> {
        Arc::new(ImageProfile {
            image: "r.example/a:1".into(),
            digest: digest.into(),
            platform: "linux/amd64".into(),
            iptables: None,
            nftables: None,
        })
    }

    const AMD: &str = "linux/amd64";

    #[test]
    fn serves_the_last_answer_per_credential_within_the_bound() {
        let s = StaleStore::new(16, TTL, BOUND);
        let t0 = Instant::now();
        let anon = key(CredentialId::ANONYMOUS);
        s.pinned(&anon, "sha256:index", t0);
        s.answered(&anon, "sha256:index", t0, AMD, profile("sha256:amd"));
        let later = t0 + TTL + Duration::from_secs(60);
        let served = s.on_error(&anon, AMD, network(true), later).ok().unwrap();
        assert_eq!(served.profile.digest, "sha256:amd");
        assert_eq!(served.staleness.age_millis, 90_000);
        assert!(
            served.staleness.note.starts_with(
                "stale answer from 1m30s ago, served because the registry failed: cannot reach registry r.example: HTTP 503"
            ),
            "{}",
            served.staleness.note
        );
        assert_eq!(s.oldest_served(later), Some(Duration::from_secs(90)));
        // Another platform, another credential: nothing to stand in.
        assert!(
            s.on_error(&anon, "linux/arm64", network(true), later)
                .is_err()
        );
        let other = key(Credentials::identity(Some(&Credentials::Basic {
            username: "u".into(),
            password: "p".into(),
        })));
        assert!(s.on_error(&other, AMD, network(true), later).is_err());
        // Past the bound it fails as before.
        let past = t0 + TTL + BOUND + Duration::from_secs(1);
        assert!(s.on_error(&anon, AMD, network(true), past).is_err());
        assert_eq!(s.oldest_served(past), None);
    }

    #[test]
    fn an_answer_from_the_registry_forgets_and_nothing_older_returns() {
        let s = StaleStore::new(16, TTL, BOUND);
        let t0 = Instant::now();
        let k = key(CredentialId::ANONYMOUS);
        s.answered(&k, "sha256:index", t0, AMD, profile("sha256:amd"));
        let t1 = t0 + TTL * 2;
        let e = RegistryError::Unauthorized {
            registry: "r".into(),
            detail: "HTTP 401".into(),
        };
        assert!(s.on_error(&k, AMD, e, t1).is_err());
        // A look-up that started before the 401 finishes after it: ignored.
        s.answered(&k, "sha256:index", t0, AMD, profile("sha256:amd"));
        assert!(s.on_error(&k, AMD, network(true), t1).is_err());
        assert_eq!(s.servable_age(&k, AMD, t1), None);
        // A fresh answer after it counts again.
        let t2 = t1 + Duration::from_secs(1);
        s.answered(&k, "sha256:index", t2, AMD, profile("sha256:amd"));
        assert_eq!(s.servable_age(&k, AMD, t2 + TTL), Some(TTL));
    }

    #[test]
    fn a_moved_tag_drops_the_old_digests_answers_and_the_same_digest_renews_them() {
        let s = StaleStore::new(16, TTL, BOUND);
        let t0 = Instant::now();
        let k = key(CredentialId::ANONYMOUS);
        s.pinned(&k, "sha256:one", t0);
        s.answered(&k, "sha256:one", t0, AMD, profile("sha256:amd1"));
        // Confirmed again later: same answer, younger.
        let t1 = t0 + TTL;
        s.pinned(&k, "sha256:one", t1);
        assert_eq!(s.servable_age(&k, AMD, t1), Some(Duration::ZERO));
        // Moved: the old digest's profile never stands in for the new one.
        let t2 = t1 + TTL;
        s.pinned(&k, "sha256:two", t2);
        assert!(s.on_error(&k, AMD, network(true), t2 + TTL).is_err());
        // An answer under the old pin arriving late does not come back.
        s.answered(&k, "sha256:one", t1, AMD, profile("sha256:amd1"));
        assert_eq!(s.servable_age(&k, AMD, t2), None);
        s.answered(&k, "sha256:two", t2, AMD, profile("sha256:amd2"));
        let served = s.on_error(&k, AMD, network(true), t2 + TTL).ok().unwrap();
        assert_eq!(served.profile.digest, "sha256:amd2");
    }

    #[test]
    fn bounded_in_platforms_and_entries_and_off_at_zero() {
        let t0 = Instant::now();
        let k = key(CredentialId::ANONYMOUS);
        let s = StaleStore::new(64, TTL, BOUND);
        for i in 0..MAX_PLATFORMS + 3 {
            s.answered(&k, "sha256:i", t0, &format!("linux/p{i}"), profile("d"));
        }
        assert_eq!(s.tags.get(&k).unwrap().profiles.len(), MAX_PLATFORMS);

        let small = StaleStore::new(4, TTL, BOUND);
        for i in 0..20 {
            let k = (format!("r.example/t{i}:1"), CredentialId::ANONYMOUS);
            small.answered(&k, "sha256:i", t0, AMD, profile("d"));
        }
        small.tags.run_pending_tasks();
        assert!(
            small.tags.weighted_size() <= 4,
            "{}",
            small.tags.weighted_size()
        );

        let off = StaleStore::new(16, TTL, Duration::ZERO);
        off.answered(&k, "sha256:i", t0, AMD, profile("d"));
        assert!(off.on_error(&k, AMD, network(true), t0).is_err());
        off.tags.run_pending_tasks();
        assert_eq!(off.tags.entry_count(), 0);
    }

    #[test]
    fn ages_read_as_people_do() {
        assert_eq!(human(Duration::from_millis(400)), "0.4s");
        assert_eq!(human(Duration::from_secs(252)), "4m12s");
        assert_eq!(human(Duration::from_secs(3900)), "1h05m");
    }
}
