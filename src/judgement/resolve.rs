//! Look-up strategies: how a judgement's (image, platform) pairs are
//! answered within its deadline. Every answer is recorded, resolved or not,
//! so `evaluate` never sees a silently missing image.

use super::lookup::{ImageLookup, LookupError};
use crate::compat::evaluate::{ImageKey, ImageResolutions};
use futures::StreamExt;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::time::Instant;

/// Answers a batch of pairs by a deadline.
#[async_trait::async_trait]
pub trait ResolveImages: Send + Sync {
    /// Every key gets an answer; what is not resolved by `deadline` is
    /// marked unresolved.
    async fn resolve(&self, keys: &[ImageKey], deadline: Instant) -> ImageResolutions;
}

/// At most `concurrency` look-ups in flight, no credentials: `nfguard check`
/// and the controller (the registry module caches what it inspected).
pub struct Bounded {
    pub lookup: Arc<dyn ImageLookup>,
    pub concurrency: usize,
}

impl Bounded {
    pub fn new(lookup: Arc<dyn ImageLookup>, concurrency: usize) -> Self {
        Bounded {
            lookup,
            concurrency,
        }
    }
}

#[async_trait::async_trait]
impl ResolveImages for Bounded {
    async fn resolve(&self, keys: &[ImageKey], deadline: Instant) -> ImageResolutions {
        resolve_all(
            self.lookup.clone(),
            keys.to_vec(),
            deadline,
            self.concurrency,
        )
        .await
    }
}

/// Resolve every key with at most `concurrency` look-ups in flight. Whatever
/// is not done by `deadline` is marked unresolved ("timed out"), so the
/// caller always gets an answer for every key in bounded time. A look-up
/// that panics marks its key unresolved instead of taking the caller down.
pub async fn resolve_all(
    lookup: Arc<dyn ImageLookup>,
    keys: Vec<ImageKey>,
    deadline: Instant,
    concurrency: usize,
) -> ImageResolutions {
    let budget = deadline.saturating_duration_since(Instant::now());
    let mut out = ImageResolutions::new();
    let mut pending: BTreeSet<ImageKey> = keys.iter().cloned().collect();
    let mut stream = futures::stream::iter(keys.into_iter().map(|key| {
        let lookup = lookup.clone();
        async move {
            let k = key.clone();
            let mut task = AbortOnDrop(tokio::spawn(async move {
                lookup.lookup(&k.image, &k.platform, None).await
            }));
            let res = match (&mut task.0).await {
                Ok(r) => r,
                Err(e) if e.is_panic() => Err(LookupError::unavailable(
                    "image inspection failed unexpectedly",
                )),
                Err(e) => Err(LookupError::unavailable(e.to_string())),
            };
            (key, res)
        }
    }))
    .buffer_unordered(concurrency.max(1));
    while let Ok(Some((key, res))) = tokio::time::timeout_at(deadline, stream.next()).await {
        pending.remove(&key);
        match res {
            Ok(profile) => out.insert_profile(&key.image, &key.platform, profile),
            Err(e) => {
                tracing::debug!(image = %key.image, platform = %key.platform, error = %e, "image not resolved");
                out.insert_error(&key.image, &key.platform, e.message)
            }
        }
    }
    for key in pending {
        out.insert_error(
            &key.image,
            &key.platform,
            // Tenths of a second: the deadline was set a moment before.
            format!(
                "timed out after {}s",
                (budget.as_millis() as f64 / 100.0).round() / 10.0
            ),
        );
    }
    out
}

/// A look-up abandoned at the deadline must not keep running.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
