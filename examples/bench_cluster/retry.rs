//! Bounded concurrency with retries for the generator's bulk writes, and
//! progress on stderr.

use futures::{StreamExt, TryStreamExt};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Whether an API error is worth retrying: throttling, server errors and
/// transport failures (an overloaded 2-core API server drops some).
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// `op` until it succeeds, fails for good, or failed 8 times (back-off
/// 0.2 s doubling to 5 s).
pub async fn retry<T, F, Fut>(mut op: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(200);
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e) if attempt < 8 && transient(&e) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Treat 409 AlreadyExists (create) or 404 NotFound (delete) as done:
/// re-runs after a crash are idempotent.
pub fn ok_if(code: u16, r: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(s)) if s.code == code => Ok(()),
        other => other,
    }
}

/// Counts done items and prints `what done/total` every 5 s until dropped.
pub struct Progress {
    done: Arc<AtomicUsize>,
    ticker: tokio::task::JoinHandle<()>,
    what: String,
    total: usize,
    started: std::time::Instant,
}

impl Progress {
    pub fn new(what: &str, total: usize) -> Self {
        let done = Arc::new(AtomicUsize::new(0));
        let (d, w) = (done.clone(), what.to_string());
        let ticker = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            every.tick().await;
            loop {
                every.tick().await;
                eprintln!("bench: {w} {}/{total}", d.load(Ordering::Relaxed));
            }
        });
        Self {
            done,
            ticker,
            what: what.into(),
            total,
            started: std::time::Instant::now(),
        }
    }

    pub fn inc(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.ticker.abort();
        eprintln!(
            "bench: {} {}/{} in {:.1} s",
            self.what,
            self.done.load(Ordering::Relaxed),
            self.total,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// Run `op` on every item with at most `concurrency` in flight; the first
/// error stops the run.
pub async fn for_each<I, F, Fut>(
    what: &str,
    items: I,
    concurrency: usize,
    op: F,
) -> anyhow::Result<()>
where
    I: IntoIterator,
    I::IntoIter: ExactSizeIterator,
    F: Fn(I::Item) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let items = items.into_iter();
    let progress = Progress::new(what, items.len());
    futures::stream::iter(items)
        .map(|item| {
            let fut = op(item);
            let progress = &progress;
            async move {
                fut.await?;
                progress.inc();
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<()>()
        .await
}
