//! Resolving the (image, platform) pairs `evaluate` needs, concurrently and
//! within one overall deadline. The resolver is a trait so everything above
//! it is testable without a registry.

use crate::compat::evaluate::{ImageKey, ImageResolutions};
use crate::facts::ImageProfile;
use crate::registry::{ImageInspector, Platform};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// Anything that turns an image reference into an `ImageProfile` for a platform.
#[async_trait::async_trait]
pub trait ImageResolver: Send + Sync {
    async fn resolve(&self, image: &str, platform: &str) -> Result<ImageProfile, String>;
}

/// The real thing: the registry module's (cached) inspector.
pub struct RegistryResolver {
    pub inspector: ImageInspector,
}

#[async_trait::async_trait]
impl ImageResolver for RegistryResolver {
    async fn resolve(&self, image: &str, platform: &str) -> Result<ImageProfile, String> {
        let platform: Platform = platform.parse()?;
        self.inspector
            .inspect(image, &platform, None)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Resolve every key with at most `concurrency` look-ups in flight. Whatever
/// is not done by `timeout` is marked unresolved ("timed out"), so the caller
/// always gets an answer for every key in bounded time. A resolver that
/// panics marks its key unresolved instead of taking the CLI down.
pub async fn resolve_all(
    resolver: Arc<dyn ImageResolver>,
    keys: Vec<ImageKey>,
    timeout: Duration,
    concurrency: usize,
) -> ImageResolutions {
    let mut out = ImageResolutions::new();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pending: std::collections::BTreeSet<ImageKey> = keys.iter().cloned().collect();
    let mut stream = futures::stream::iter(keys.into_iter().map(|key| {
        let r = resolver.clone();
        async move {
            let k = key.clone();
            let mut task = AbortOnDrop(tokio::spawn(async move {
                r.resolve(&k.image, &k.platform).await
            }));
            let res = match (&mut task.0).await {
                Ok(r) => r,
                Err(e) if e.is_panic() => Err("image inspection failed unexpectedly".to_string()),
                Err(e) => Err(e.to_string()),
            };
            (key, res)
        }
    }))
    .buffer_unordered(concurrency.max(1));
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some((key, res))) => {
                pending.remove(&key);
                match res {
                    Ok(profile) => out.insert_profile(&key.image, &key.platform, profile),
                    Err(e) => out.insert_error(&key.image, &key.platform, e),
                }
            }
            Ok(None) => break,
            Err(_) => break,
        }
    }
    for key in pending {
        out.insert_error(
            &key.image,
            &key.platform,
            format!("timed out after {}s", timeout.as_secs_f64()),
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
