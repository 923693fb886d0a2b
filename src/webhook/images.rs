//! Image look-ups for admission: answered from a bounded cache when warm;
//! otherwise started as look-ups that the requests asking for them drive
//! until their deadlines. When every waiting request has given up, a look-up
//! goes on in the background (so a slow registry's image is warm for the
//! next admission) only within a small quota per namespace and in all, and
//! for at most `background_for`; otherwise it is dropped (cancelled, its
//! memory and stream slot freed). No object can leave unbounded work behind.
//! Answers are keyed by the credentials that fetched them: a profile read
//! with one namespace's pull secret, or an error met without one, never
//! answers another credential (a public image, read anonymously, answers
//! everyone).

use super::metrics::Metrics;
use crate::compat::evaluate::{ImageKey, ImageResolutions};
use crate::facts::ImageProfile;
use crate::judgement::{ImageLookup, LookupError, LookupErrorKind};
use crate::registry::{Anonymous, CredentialId, CredentialSource, Credentials};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared, WeakShared};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

type Answer = Arc<Result<Arc<ImageProfile>, LookupError>>;
type LookupFuture = Shared<BoxFuture<'static, Answer>>;

/// How much look-up work requests may cause.
#[derive(Clone, Copy, Debug)]
pub struct LookupLimits {
    /// New look-ups one request may start (a hostile object can list
    /// thousands of distinct images); the rest count as unresolved.
    pub per_request: usize,
    /// Look-ups in flight across all requests.
    pub inflight: usize,
    /// Look-ups in flight started by one namespace's requests: a fair share,
    /// so one tenant's stream of hostile objects cannot take every slot.
    pub per_namespace: usize,
    /// Look-ups that go on after every waiting request gave up, in all and
    /// per namespace, and for how long at most.
    pub background: usize,
    pub background_per_namespace: usize,
    pub background_for: Duration,
}

impl Default for LookupLimits {
    fn default() -> Self {
        LookupLimits {
            per_request: MAX_NEW_LOOKUPS_PER_REQUEST,
            inflight: 512,
            per_namespace: 64,
            background: 32,
            background_per_namespace: 4,
            background_for: Duration::from_secs(60),
        }
    }
}

/// `LookupLimits::per_request` by default.
pub const MAX_NEW_LOOKUPS_PER_REQUEST: usize = 32;

/// An answer is true for the image, the platform and the credentials it was
/// fetched with.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct AnswerKey {
    image: ImageKey,
    credential: CredentialId,
}

/// Why a look-up was not started (a bounded label set for the metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotStarted {
    PerRequest,
    PerNamespace,
    Inflight,
}

impl NotStarted {
    pub fn as_str(self) -> &'static str {
        match self {
            NotStarted::PerRequest => "per_request",
            NotStarted::PerNamespace => "per_namespace",
            NotStarted::Inflight => "inflight",
        }
    }

    fn message(self) -> &'static str {
        match self {
            NotStarted::PerRequest => {
                "not inspected: this object names more images than one admission inspects at once"
            }
            NotStarted::PerNamespace => {
                "not inspected: this namespace has too many image look-ups in flight"
            }
            NotStarted::Inflight => "not inspected: too many image look-ups in flight",
        }
    }
}

struct Inflight {
    future: WeakShared<BoxFuture<'static, Answer>>,
    /// The namespace whose request started it (its share is charged).
    namespace: Arc<str>,
    /// Driven by a background task since its waiters gave up.
    background: bool,
}

/// How long answers are kept. Errors briefly (the registry may recover),
/// an image or platform that does not exist a little longer (asking again
/// soon gives the same answer), a profile by digest longer still (its
/// content never changes). A profile by tag only as long as the registry
/// module trusts the tag's digest: a moved tag is judged by its new digest
/// within two `TAG_TTL`s, not after minutes.
#[derive(Clone, Copy, Debug)]
pub struct CacheTtl {
    pub ok: Duration,
    pub ok_by_tag: Duration,
    pub error: Duration,
    pub not_found: Duration,
}

impl Default for CacheTtl {
    fn default() -> Self {
        CacheTtl {
            ok: Duration::from_secs(300),
            ok_by_tag: crate::registry::TAG_TTL,
            error: Duration::from_secs(15),
            not_found: Duration::from_secs(60),
        }
    }
}

impl CacheTtl {
    fn of(&self, key: &AnswerKey, answer: &Answer) -> Duration {
        match answer.as_ref() {
            Ok(_) if is_digest_reference(&key.image.image) => self.ok,
            Ok(_) => self.ok_by_tag,
            Err(e) if e.kind == LookupErrorKind::NotFound => self.not_found,
            Err(_) => self.error,
        }
    }
}

/// `name@sha256:...`: the reference names content, not a tag that moves.
fn is_digest_reference(image: &str) -> bool {
    image.contains('@')
}

struct AnswerExpiry(CacheTtl);

impl moka::Expiry<AnswerKey, Answer> for AnswerExpiry {
    fn expire_after_create(
        &self,
        k: &AnswerKey,
        v: &Answer,
        _now: std::time::Instant,
    ) -> Option<Duration> {
        Some(self.0.of(k, v))
    }
}

/// The webhook's image cache plus the look-ups in flight (deduplicated).
pub struct ImageCache {
    source: Arc<dyn ImageLookup>,
    /// The docker config: asked after the admitted pod's pull secrets.
    credentials: Arc<dyn CredentialSource>,
    cache: moka::sync::Cache<AnswerKey, Answer>,
    inflight: Arc<Mutex<HashMap<AnswerKey, Inflight>>>,
    metrics: Arc<Metrics>,
    /// Bumped whenever an answer enters the cache (decisions depend on it).
    epoch: Arc<AtomicU64>,
    limits: LookupLimits,
}

impl ImageCache {
    pub fn new(
        source: Arc<dyn ImageLookup>,
        entries: u64,
        ttl: CacheTtl,
        metrics: Arc<Metrics>,
    ) -> Self {
        ImageCache {
            source,
            credentials: Arc::new(Anonymous),
            cache: moka::sync::Cache::builder()
                .max_capacity(entries.max(1))
                .expire_after(AnswerExpiry(ttl))
                .build(),
            inflight: Arc::new(Mutex::new(HashMap::new())),
            metrics,
            epoch: Arc::new(AtomicU64::new(0)),
            limits: LookupLimits::default(),
        }
    }

    /// Credentials asked when the pod's own pull secrets have none for an
    /// image (the docker config); anonymous by default.
    pub fn with_credentials(mut self, credentials: Arc<dyn CredentialSource>) -> Self {
        self.credentials = credentials;
        self
    }

    pub fn credentials(&self) -> &dyn CredentialSource {
        self.credentials.as_ref()
    }

    pub fn with_limits(mut self, limits: LookupLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Join the look-up in flight for `key` or start one.
    fn start(
        &self,
        key: &AnswerKey,
        credentials: Option<Credentials>,
        namespace: &str,
    ) -> Result<LookupFuture, NotStarted> {
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = inflight.get(key).and_then(|i| i.future.upgrade()) {
            return Ok(f);
        }
        // Look-ups nobody drives any more were dropped with their last waiter.
        inflight.retain(|_, i| i.future.upgrade().is_some());
        if inflight.len() >= self.limits.inflight {
            return Err(NotStarted::Inflight);
        }
        let of_namespace = inflight
            .values()
            .filter(|i| &*i.namespace == namespace)
            .count();
        if of_namespace >= self.limits.per_namespace {
            return Err(NotStarted::PerNamespace);
        }
        let source = self.source.clone();
        let cache = self.cache.clone();
        let map = self.inflight.clone();
        let metrics = self.metrics.clone();
        let epoch = self.epoch.clone();
        let k = key.clone();
        // Not spawned: driven by the requests waiting for it, and dropped
        // (cancelled) when the last of them gives up.
        let fut = async move {
            let res = AssertUnwindSafe(source.lookup(
                &k.image.image,
                &k.image.platform,
                credentials.as_ref(),
            ))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| {
                Err(LookupError::unavailable(
                    "image inspection failed unexpectedly",
                ))
            });
            if res.is_err() {
                metrics.registry_errors.inc();
            }
            let answer: Answer = Arc::new(res.map(Arc::new));
            cache.insert(k.clone(), answer.clone());
            epoch.fetch_add(1, Ordering::Release);
            map.lock().unwrap_or_else(|p| p.into_inner()).remove(&k);
            answer
        }
        .boxed()
        .shared();
        let weak = fut
            .downgrade()
            .expect("a new shared future has not completed");
        inflight.insert(
            key.clone(),
            Inflight {
                future: weak,
                namespace: namespace.into(),
                background: false,
            },
        );
        Ok(fut)
    }

    /// Let a look-up whose waiters gave up go on in the background, within
    /// the quota; false when it is dropped instead (cancelled).
    fn adopt(&self, key: &AnswerKey, fut: LookupFuture) -> bool {
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = inflight.get(key) else {
            return false;
        };
        if entry.background {
            return true;
        }
        let namespace = entry.namespace.clone();
        let (mut total, mut of_namespace) = (0, 0);
        for i in inflight.values().filter(|i| i.background) {
            total += 1;
            of_namespace += usize::from(i.namespace == namespace);
        }
        if total >= self.limits.background || of_namespace >= self.limits.background_per_namespace {
            return false;
        }
        if let Some(entry) = inflight.get_mut(key) {
            entry.background = true;
        }
        let map = self.inflight.clone();
        let k = key.clone();
        let limit = self.limits.background_for;
        tokio::spawn(async move {
            if tokio::time::timeout(limit, fut).await.is_err() {
                // Given up: dropping the last handle cancels the look-up.
                map.lock().unwrap_or_else(|p| p.into_inner()).remove(&k);
            }
        });
        true
    }

    /// A cached answer that holds for these credentials: one fetched with
    /// them, or a profile read anonymously (a public image is public to all).
    fn answer_for(&self, key: &ImageKey, credential: CredentialId) -> Option<Answer> {
        let own = AnswerKey {
            image: key.clone(),
            credential,
        };
        if let Some(a) = self.cache.get(&own) {
            return Some(a);
        }
        self.public(key)
    }

    /// A profile read anonymously: true for every credential.
    fn public(&self, key: &ImageKey) -> Option<Answer> {
        let anon = AnswerKey {
            image: key.clone(),
            credential: CredentialId::ANONYMOUS,
        };
        self.cache.get(&anon).filter(|a| a.is_ok())
    }

    /// True when `key` has an answer for everyone (no pull secret needed to know it).
    pub fn is_public(&self, key: &ImageKey) -> bool {
        self.public(key).is_some()
    }

    /// Answer every key: cached ones at once, the rest as they come in until
    /// `deadline`; what is still missing then is "unresolved (timed out)"
    /// and its look-up is dropped unless another request still waits for it.
    pub async fn resolve(
        &self,
        keys: &[ImageKey],
        credentials: &dyn CredentialSource,
        namespace: &str,
        deadline: Instant,
        budget: Duration,
    ) -> ImageResolutions {
        let mut out = ImageResolutions::new();
        let mut waits = Vec::new();
        for key in keys {
            let creds = match credentials.for_image(&key.image) {
                Ok(c) => c,
                Err(e) => {
                    // A broken docker config: its reason, never its content.
                    out.insert_error(&key.image, &key.platform, LookupError::from(e).message);
                    continue;
                }
            };
            let credential = Credentials::identity(creds.as_ref());
            if let Some(a) = self.answer_for(key, credential) {
                self.metrics.image_cache_hits.inc();
                put(&mut out, key, &a);
                continue;
            }
            self.metrics.image_cache_misses.inc();
            let k = AnswerKey {
                image: key.clone(),
                credential,
            };
            let started = if waits.len() < self.limits.per_request {
                self.start(&k, creds, namespace)
            } else {
                Err(NotStarted::PerRequest)
            };
            match started {
                Ok(f) => waits.push((k, f)),
                Err(why) => {
                    self.metrics.lookup_not_started(why.as_str());
                    out.insert_error(&key.image, &key.platform, why.message())
                }
            }
        }
        if waits.is_empty() {
            return out;
        }
        let all = futures::future::join_all(waits.iter().map(|(_, f)| f.clone()));
        match tokio::time::timeout_at(deadline, all).await {
            Ok(answers) => {
                for ((k, _), a) in waits.iter().zip(answers) {
                    put(&mut out, &k.image, &a);
                }
            }
            Err(_) => {
                for (k, f) in waits {
                    if let Some(a) = f.peek() {
                        put(&mut out, &k.image, a);
                        continue;
                    }
                    let then = if self.adopt(&k, f) {
                        "still resolving in the background"
                    } else {
                        "cancelled: too many background look-ups"
                    };
                    out.insert_error(
                        &k.image.image,
                        &k.image.platform,
                        format!(
                            "not inspected within the admission budget of {:.1}s ({then})",
                            budget.as_secs_f64()
                        ),
                    );
                }
            }
        }
        out
    }

    /// Changes whenever a new image answer is cached.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Warm answer for anonymous look-ups only (tests, benchmarks).
    pub fn cached(&self, key: &ImageKey) -> Option<Answer> {
        self.answer_for(key, CredentialId::ANONYMOUS)
    }

    /// Look-ups being driven right now (tests: nothing outlives its waiters).
    pub fn inflight(&self) -> usize {
        let mut m = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, i| i.future.upgrade().is_some());
        m.len()
    }
}

fn put(out: &mut ImageResolutions, key: &ImageKey, a: &Answer) {
    match a.as_ref() {
        Ok(p) => out.insert_shared(&key.image, &key.platform, p.clone()),
        Err(e) => out.insert_error(&key.image, &key.platform, e.message.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::evaluate::ImageResolution;
    use crate::facts::Platform;
    use crate::runtime::admin::Exposition;
    use std::sync::atomic::AtomicUsize;

    /// "stall/*" never answers; "private/*" answers only with credentials;
    /// anything else resolves. Counts look-ups started and dropped unfinished.
    #[derive(Default)]
    struct Script {
        started: AtomicUsize,
        dropped: Arc<AtomicUsize>,
    }

    struct DropGuard(Arc<AtomicUsize>, bool);
    impl Drop for DropGuard {
        fn drop(&mut self) {
            if !self.1 {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    #[async_trait::async_trait]
    impl ImageLookup for Script {
        async fn lookup(
            &self,
            image: &str,
            platform: &Platform,
            credentials: Option<&Credentials>,
        ) -> Result<ImageProfile, LookupError> {
            self.started.fetch_add(1, Ordering::SeqCst);
            let mut guard = DropGuard(self.dropped.clone(), false);
            tokio::time::sleep(Duration::from_millis(10)).await;
            if image.starts_with("stall/") {
                futures::future::pending::<()>().await;
            }
            guard.1 = true;
            if image.starts_with("private/") && credentials.is_none() {
                return Err(LookupError::refused("unauthorized"));
            }
            Ok(ImageProfile {
                image: image.into(),
                digest: "sha256:0".into(),
                platform: platform.to_string(),
                iptables: None,
                nftables: None,
            })
        }
    }

    fn cache(script: Arc<Script>) -> ImageCache {
        ImageCache::new(script, 100, CacheTtl::default(), Arc::new(Metrics::new()))
    }

    fn key(image: &str) -> ImageKey {
        ImageKey::new(image, &Platform::linux_amd64())
    }

    fn resolved(out: &ImageResolutions, image: &str) -> bool {
        matches!(
            out.get(image, &Platform::linux_amd64()),
            Some(ImageResolution::Resolved(_))
        )
    }

    fn error(out: &ImageResolutions, image: &str) -> String {
        match out.get(image, &Platform::linux_amd64()) {
            Some(ImageResolution::Unresolved { error }) => error.clone(),
            other => panic!("{image}: {other:?}"),
        }
    }

    async fn resolve(
        c: &ImageCache,
        images: &[&str],
        creds: Option<Credentials>,
        ns: &str,
    ) -> ImageResolutions {
        let keys: Vec<ImageKey> = images.iter().map(|i| key(i)).collect();
        let budget = Duration::from_secs(1);
        c.resolve(
            &keys,
            &|_: &str| creds.clone(),
            ns,
            Instant::now() + budget,
            budget,
        )
        .await
    }

    fn limits(background_per_namespace: usize) -> LookupLimits {
        LookupLimits {
            background_per_namespace,
            background_for: Duration::from_secs(5),
            ..LookupLimits::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lookup_nobody_waits_for_is_cancelled_past_the_background_quota() {
        let script = Arc::new(Script::default());
        let c = cache(script.clone()).with_limits(limits(0));
        let out = resolve(&c, &["stall/a", "ok/b"], None, "team").await;
        assert!(resolved(&out, "ok/b"));
        assert!(
            error(&out, "stall/a").contains("cancelled"),
            "{}",
            error(&out, "stall/a")
        );
        // The stalled look-up was dropped with the request that drove it.
        assert_eq!(c.inflight(), 0);
        assert_eq!(script.dropped.load(Ordering::SeqCst), 1);
        // Asking again starts afresh (nothing was left running to join).
        resolve(&c, &["stall/a"], None, "team").await;
        assert_eq!(script.started.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn background_lookups_are_bounded_per_namespace_and_in_time() {
        let script = Arc::new(Script::default());
        let c = cache(script.clone()).with_limits(limits(1));
        let first = resolve(&c, &["stall/a", "stall/b"], None, "team").await;
        assert!(error(&first, "stall/a").contains("still resolving in the background"));
        assert!(error(&first, "stall/b").contains("cancelled"));
        assert_eq!(c.inflight(), 1, "one goes on in the background");
        // Another namespace has a quota of its own.
        let other = resolve(&c, &["stall/c"], None, "other").await;
        assert!(error(&other, "stall/c").contains("in the background"));
        assert_eq!(c.inflight(), 2);
        // A background look-up that takes longer than allowed is dropped too.
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(c.inflight(), 0);
        assert_eq!(script.dropped.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_share_one_lookup_until_the_last_gives_up() {
        let script = Arc::new(Script::default());
        let c = Arc::new(cache(script.clone()).with_limits(limits(0)));
        let early = {
            let c = c.clone();
            tokio::spawn(async move {
                let keys = [key("stall/x")];
                let budget = Duration::from_millis(200);
                c.resolve(&keys, &|_: &str| None, "a", Instant::now() + budget, budget)
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let late = resolve(&c, &["stall/x"], None, "b").await;
        early.await.unwrap();
        assert!(error(&late, "stall/x").contains("admission budget"));
        assert_eq!(script.started.load(Ordering::SeqCst), 1, "deduplicated");
        assert_eq!(script.dropped.load(Ordering::SeqCst), 1);
        assert_eq!(c.inflight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn one_namespace_cannot_take_every_slot() {
        let script = Arc::new(Script::default());
        let c = Arc::new(cache(script.clone()).with_limits(LookupLimits {
            per_namespace: 3,
            ..limits(0)
        }));
        let hog = {
            let c = c.clone();
            tokio::spawn(async move {
                let keys: Vec<ImageKey> = (0..10).map(|i| key(&format!("stall/{i}"))).collect();
                let budget = Duration::from_secs(5);
                c.resolve(
                    &keys,
                    &|_: &str| None,
                    "hog",
                    Instant::now() + budget,
                    budget,
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(c.inflight(), 3, "the hog's share");
        let other = resolve(&c, &["ok/fair"], None, "other").await;
        assert!(
            resolved(&other, "ok/fair"),
            "another namespace still gets a slot"
        );
        let hogged = hog.await.unwrap();
        assert!(error(&hogged, "stall/9").contains("this namespace has too many"));
        assert!(c.metrics.encode().contains(
            "nfguard_webhook_image_lookups_not_started_total{bound=\"per_namespace\"} 7"
        ));
    }

    #[test]
    fn every_bound_is_a_series_the_metrics_export_from_the_start() {
        for b in [
            NotStarted::PerRequest,
            NotStarted::PerNamespace,
            NotStarted::Inflight,
        ] {
            assert!(super::super::metrics::LOOKUP_BOUNDS.contains(&b.as_str()));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_kept_per_credential() {
        let script = Arc::new(Script::default());
        let c = cache(script.clone());
        let secret = Credentials::Basic {
            username: "u".into(),
            password: "p".into(),
        };
        // Read with a pull secret: not served to a request without it...
        let with = resolve(&c, &["private/app"], Some(secret.clone()), "owner").await;
        assert!(resolved(&with, "private/app"));
        let without = resolve(&c, &["private/app"], None, "other").await;
        assert_eq!(error(&without, "private/app"), "unauthorized");
        // ...and the failure met without it is not served to the owner.
        let again = resolve(&c, &["private/app"], Some(secret.clone()), "owner").await;
        assert!(resolved(&again, "private/app"));
        assert_eq!(script.started.load(Ordering::SeqCst), 2);
        // A public image read anonymously answers everyone from the cache.
        resolve(&c, &["ok/public"], None, "a").await;
        assert!(c.is_public(&key("ok/public")));
        let other = Credentials::Basic {
            username: "v".into(),
            password: "q".into(),
        };
        let out = resolve(&c, &["ok/public"], Some(other), "b").await;
        assert!(resolved(&out, "ok/public"));
        assert_eq!(script.started.load(Ordering::SeqCst), 3);
    }

    /// A profile read by tag is kept only as long as a tag is trusted (it
    /// may move); one read by digest for the full profile TTL.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_by_tag_expire_with_the_tag_and_by_digest_last() {
        let ttl = CacheTtl {
            ok_by_tag: Duration::from_millis(100),
            ..CacheTtl::default()
        };
        let c = ImageCache::new(
            Arc::new(Script::default()),
            100,
            ttl,
            Arc::new(Metrics::new()),
        );
        let digest = format!("r/a@sha256:{}", "0".repeat(64));
        let out = resolve(&c, &["r/a:v1", &digest], None, "ns").await;
        assert!(resolved(&out, "r/a:v1") && resolved(&out, &digest));
        assert!(c.cached(&key("r/a:v1")).is_some());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            c.cached(&key("r/a:v1")).is_none(),
            "a tag answer outlived the tag TTL"
        );
        assert!(c.cached(&key(&digest)).is_some());
    }
}
