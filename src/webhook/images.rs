//! Image look-ups for admission: answered from a bounded cache when warm;
//! otherwise started as background tasks that the request waits for only
//! until its deadline. A look-up that misses the deadline keeps running and
//! fills the cache, so the next request for the same image is fast.

use super::metrics::Metrics;
use crate::compat::evaluate::{ImageKey, ImageResolutions};
use crate::facts::ImageProfile;
use crate::judgement::{ImageLookup, LookupError, LookupErrorKind};
use crate::registry::Credentials;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

type Answer = Arc<Result<Arc<ImageProfile>, LookupError>>;

/// New look-ups one request may start (a hostile object can list thousands
/// of distinct images); the rest count as unresolved.
pub const MAX_NEW_LOOKUPS_PER_REQUEST: usize = 32;
/// Look-ups in flight across all requests.
pub const MAX_INFLIGHT: usize = 512;

/// How long answers are kept. Errors briefly (the registry may recover),
/// an image or platform that does not exist a little longer (asking again
/// soon gives the same answer), profiles longer still (the registry module
/// re-checks tags itself when asked).
#[derive(Clone, Copy, Debug)]
pub struct CacheTtl {
    pub ok: Duration,
    pub error: Duration,
    pub not_found: Duration,
}

impl Default for CacheTtl {
    fn default() -> Self {
        CacheTtl {
            ok: Duration::from_secs(300),
            error: Duration::from_secs(15),
            not_found: Duration::from_secs(60),
        }
    }
}

impl CacheTtl {
    fn of(&self, answer: &Answer) -> Duration {
        match answer.as_ref() {
            Ok(_) => self.ok,
            Err(e) if e.kind == LookupErrorKind::NotFound => self.not_found,
            Err(_) => self.error,
        }
    }
}

struct AnswerExpiry(CacheTtl);

impl moka::Expiry<ImageKey, Answer> for AnswerExpiry {
    fn expire_after_create(
        &self,
        _k: &ImageKey,
        v: &Answer,
        _now: std::time::Instant,
    ) -> Option<Duration> {
        Some(self.0.of(v))
    }
}

/// The webhook's image cache plus the look-ups in flight (deduplicated).
pub struct ImageCache {
    source: Arc<dyn ImageLookup>,
    cache: moka::sync::Cache<ImageKey, Answer>,
    inflight: Arc<Mutex<HashMap<ImageKey, Shared<BoxFuture<'static, Answer>>>>>,
    metrics: Arc<Metrics>,
    /// Bumped whenever an answer enters the cache (decisions depend on it).
    epoch: Arc<AtomicU64>,
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
            cache: moka::sync::Cache::builder()
                .max_capacity(entries.max(1))
                .expire_after(AnswerExpiry(ttl))
                .build(),
            inflight: Arc::new(Mutex::new(HashMap::new())),
            metrics,
            epoch: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Join the look-up in flight for `key` or start one (None: too many in flight).
    fn start(
        &self,
        key: &ImageKey,
        credentials: Option<Credentials>,
    ) -> Option<Shared<BoxFuture<'static, Answer>>> {
        let mut inflight = match self.inflight.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(f) = inflight.get(key) {
            return Some(f.clone());
        }
        if inflight.len() >= MAX_INFLIGHT {
            return None;
        }
        let source = self.source.clone();
        let cache = self.cache.clone();
        let map = self.inflight.clone();
        let metrics = self.metrics.clone();
        let epoch = self.epoch.clone();
        let k = key.clone();
        // Spawned: runs to completion even when every waiting request gave up.
        let task = tokio::spawn(async move {
            let res = source
                .lookup(&k.image, &k.platform, credentials.as_ref())
                .await;
            if res.is_err() {
                metrics.registry_errors.inc();
            }
            let answer: Answer = Arc::new(res.map(Arc::new));
            cache.insert(k.clone(), answer.clone());
            epoch.fetch_add(1, Ordering::Release);
            if let Ok(mut m) = map.lock() {
                m.remove(&k);
            }
            answer
        });
        let fut = task
            .map(|r| match r {
                Ok(a) => a,
                Err(e) => Arc::new(Err(LookupError::unavailable(format!(
                    "image inspection failed unexpectedly: {e}"
                )))),
            })
            .boxed()
            .shared();
        inflight.insert(key.clone(), fut.clone());
        Some(fut)
    }

    /// Answer every key: cached ones at once, the rest as they come in until
    /// `deadline`; what is still missing then is "unresolved (timed out)".
    pub async fn resolve(
        &self,
        keys: &[ImageKey],
        credentials: &(dyn Fn(&str) -> Option<Credentials> + Sync),
        deadline: Instant,
        budget: Duration,
    ) -> ImageResolutions {
        let mut out = ImageResolutions::new();
        let mut waits = Vec::new();
        for key in keys {
            if let Some(a) = self.cache.get(key) {
                self.metrics.image_cache_hits.inc();
                put(&mut out, key, &a);
            } else {
                self.metrics.image_cache_misses.inc();
                let started = if waits.len() < MAX_NEW_LOOKUPS_PER_REQUEST {
                    self.start(key, credentials(&key.image))
                } else {
                    None
                };
                match started {
                    Some(f) => waits.push((key.clone(), f)),
                    None => out.insert_error(
                        &key.image,
                        &key.platform,
                        "not inspected: too many image look-ups at once (per object or in flight)",
                    ),
                }
            }
        }
        if waits.is_empty() {
            return out;
        }
        let all = futures::future::join_all(waits.iter().map(|(_, f)| f.clone()));
        match tokio::time::timeout_at(deadline, all).await {
            Ok(answers) => {
                for ((key, _), a) in waits.iter().zip(answers) {
                    put(&mut out, key, &a);
                }
            }
            Err(_) => {
                for (key, f) in waits {
                    match f.peek() {
                        Some(a) => put(&mut out, &key, a),
                        None => out.insert_error(
                            &key.image,
                            &key.platform,
                            format!(
                                "not inspected within the admission budget of {:.1}s (still resolving in the background)",
                                budget.as_secs_f64()
                            ),
                        ),
                    }
                }
            }
        }
        out
    }

    /// Changes whenever a new image answer is cached.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Warm answer only (tests, benchmarks).
    pub fn cached(&self, key: &ImageKey) -> Option<Answer> {
        self.cache.get(key)
    }
}

fn put(out: &mut ImageResolutions, key: &ImageKey, a: &Answer) {
    match a.as_ref() {
        Ok(p) => out.insert_shared(&key.image, &key.platform, p.clone()),
        Err(e) => out.insert_error(&key.image, &key.platform, e.message.clone()),
    }
}
