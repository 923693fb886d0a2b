//! Look-up strategies: how a judgement's (image, platform) pairs are
//! answered within its deadline. Every answer is recorded, resolved or not,
//! so `evaluate` never sees a silently missing image.

use super::lookup::{ImageLookup, LookupError};
use super::pull_secrets::PullSecretReader;
use crate::compat::evaluate::{ImageKey, ImageResolutions};
use crate::projection::PodFacts;
use crate::registry::{Anonymous, CredentialSource, Credentials, PullSecrets, RegistryError};
use futures::{FutureExt, StreamExt};
use std::collections::{BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tokio::time::Instant;

/// Answers a batch of pairs by a deadline.
#[async_trait::async_trait]
pub trait ResolveImages: Send + Sync {
    /// Every key gets an answer; what is not resolved by `deadline` is
    /// marked unresolved.
    async fn resolve(&self, keys: &[ImageKey], deadline: Instant) -> ImageResolutions;
}

/// At most `concurrency` look-ups in flight, each with the credentials
/// `credentials` gives for its image: `nfguard check` and the controller
/// (the registry module caches what it inspected, per credential).
pub struct Bounded {
    pub lookup: Arc<dyn ImageLookup>,
    pub concurrency: usize,
    /// The docker config (`check`, the controller); anonymous by default.
    pub credentials: Arc<dyn CredentialSource>,
    /// The controller's: each running pod's own pull secrets, asked before
    /// `credentials` for that pod's images (see [`Bounded::resolve_for_pods`]).
    pub pull_secrets: Option<PullSecretReader>,
}

impl Bounded {
    /// Anonymous look-ups; see `with_credentials`, `with_pull_secrets`.
    pub fn new(lookup: Arc<dyn ImageLookup>, concurrency: usize) -> Self {
        Bounded {
            lookup,
            concurrency,
            credentials: Arc::new(Anonymous),
            pull_secrets: None,
        }
    }

    pub fn with_credentials(mut self, credentials: Arc<dyn CredentialSource>) -> Self {
        self.credentials = credentials;
        self
    }

    pub fn with_pull_secrets(mut self, reader: PullSecretReader) -> Self {
        self.pull_secrets = Some(reader);
        self
    }

    /// Resolve `keys`, the images `pods` run, each with the pull secrets of
    /// the pods that run it (in `pods`' order), then `credentials`: the
    /// controller judges a private image with the same secret the webhook
    /// admitted it with. Reading the secrets takes at most a quarter of the
    /// budget (as in the webhook); what is not read by then is not used.
    pub async fn resolve_for_pods(
        &self,
        pods: &[&PodFacts],
        keys: &[ImageKey],
        deadline: Instant,
    ) -> ImageResolutions {
        let Some(reader) = &self.pull_secrets else {
            return self.resolve(keys, deadline).await;
        };
        let until = Instant::now() + deadline.saturating_duration_since(Instant::now()) / 4;
        let reads = pods.iter().map(|pod| async move {
            let images = pod.containers.iter().filter_map(|c| c.image.clone());
            (
                images.collect::<Vec<_>>(),
                reader.for_pod(&pod.namespace, &pod.pull_secrets).await,
            )
        });
        let read = tokio::time::timeout_at(until, futures::future::join_all(reads))
            .await
            .unwrap_or_else(|_| {
                tracing::debug!("pull secrets not read within a quarter of the budget");
                Vec::new()
            });
        let credentials = PodCredentials {
            by_image: read.into_iter().fold(HashMap::new(), |mut m, (images, s)| {
                for image in images {
                    m.entry(image).or_insert_with(Vec::new).push(s.clone());
                }
                m
            }),
            then: self.credentials.as_ref(),
        };
        resolve_all(
            self.lookup.clone(),
            keys.to_vec(),
            &credentials,
            deadline,
            self.concurrency,
        )
        .await
    }
}

/// Each pod's answers, read only with that pod's own credentials (then the
/// docker config): see [`Bounded::resolve_per_pod`].
pub struct PerPod {
    groups: Vec<ImageResolutions>,
    group_of: Vec<usize>,
}

impl PerPod {
    /// The answers for the `i`th pod given to `resolve_per_pod`.
    pub fn of(&self, i: usize) -> &ImageResolutions {
        &self.groups[self.group_of[i]]
    }

    /// How many credential groups were resolved apart.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }
}

impl Bounded {
    /// Resolve `keys[i]` for each `pods[i]` with that pod's own pull
    /// secrets, never another's: what a tenant sees of an image (its
    /// policy reports) was read with what that tenant could pull with. Pods
    /// of one namespace naming the same ServiceAccount and secrets share one
    /// group and its look-ups; without pull secrets there is one group.
    pub async fn resolve_per_pod(
        &self,
        pods: &[&PodFacts],
        keys: &[Vec<ImageKey>],
        deadline: Instant,
    ) -> PerPod {
        let mut index: HashMap<(&str, &crate::projection::PullSecretRefs), usize> = HashMap::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        let group_of: Vec<usize> = pods
            .iter()
            .enumerate()
            .map(|(i, pod)| {
                let key = match self.pull_secrets {
                    Some(_) => (&*pod.namespace, &pod.pull_secrets),
                    None => ("", &pods[0].pull_secrets),
                };
                let g = *index.entry(key).or_insert_with(|| {
                    members.push(Vec::new());
                    members.len() - 1
                });
                members[g].push(i);
                g
            })
            .collect();
        drop(index);
        let mut groups = Vec::with_capacity(members.len());
        for chunk in members.chunks(self.concurrency.max(1)) {
            let mut runs = Vec::with_capacity(chunk.len());
            for m in chunk {
                let group_pods: Vec<&PodFacts> = m.iter().map(|i| pods[*i]).collect();
                let group_keys: BTreeSet<ImageKey> =
                    m.iter().flat_map(|i| keys[*i].iter().cloned()).collect();
                runs.push(self.resolve_group(
                    group_pods,
                    group_keys.into_iter().collect(),
                    deadline,
                ));
            }
            groups.extend(futures::future::join_all(runs).await);
        }
        PerPod { groups, group_of }
    }

    async fn resolve_group(
        &self,
        pods: Vec<&PodFacts>,
        keys: Vec<ImageKey>,
        deadline: Instant,
    ) -> ImageResolutions {
        self.resolve_for_pods(&pods, &keys, deadline).await
    }
}

/// The credentials of the pods running each image, then a fallback.
struct PodCredentials<'a> {
    by_image: HashMap<String, Vec<Arc<PullSecrets>>>,
    then: &'a dyn CredentialSource,
}

impl CredentialSource for PodCredentials<'_> {
    fn for_image(&self, image: &str) -> Result<Option<Credentials>, RegistryError> {
        let own = self
            .by_image
            .get(image)
            .into_iter()
            .flatten()
            .find_map(|s| s.credentials_for(image));
        match own {
            Some(c) => Ok(Some(c)),
            None => self.then.for_image(image),
        }
    }
}

#[async_trait::async_trait]
impl ResolveImages for Bounded {
    async fn resolve(&self, keys: &[ImageKey], deadline: Instant) -> ImageResolutions {
        resolve_all(
            self.lookup.clone(),
            keys.to_vec(),
            self.credentials.as_ref(),
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
    credentials: &dyn CredentialSource,
    deadline: Instant,
    concurrency: usize,
) -> ImageResolutions {
    let budget = deadline.saturating_duration_since(Instant::now());
    let mut out = ImageResolutions::new();
    let mut pending: BTreeSet<ImageKey> = keys.iter().cloned().collect();
    // Polled in place, not spawned: a look-up abandoned at the deadline is
    // dropped with the stream, and a panicking one is caught, so neither
    // outlives the call nor takes the caller down, without a task per key
    // (most answers come from the registry module's caches at once).
    let mut stream = futures::stream::iter(keys.into_iter().map(|key| {
        let lookup = lookup.clone();
        // A broken docker config fails the look-up with its (secret-free) reason.
        let creds = credentials.for_image(&key.image);
        async move {
            let creds = match creds {
                Ok(c) => c,
                Err(e) => return (key, Err(LookupError::from(e))),
            };
            let res = AssertUnwindSafe(lookup.lookup(&key.image, &key.platform, creds.as_ref()))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    Err(LookupError::unavailable(
                        "image inspection failed unexpectedly",
                    ))
                });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::evaluate::ImageResolution;
    use crate::facts::{ImageProfile, Platform};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// "panic/*" panics, "stall/*" never answers, anything else resolves;
    /// counts look-ups in flight at once.
    #[derive(Default)]
    struct Script {
        inflight: AtomicUsize,
        most: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl ImageLookup for Script {
        async fn lookup(
            &self,
            image: &str,
            platform: &Platform,
            _credentials: Option<&Credentials>,
        ) -> Result<ImageProfile, LookupError> {
            let now = self.inflight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            self.inflight.fetch_sub(1, Ordering::SeqCst);
            if image.starts_with("panic/") {
                panic!("scripted panic");
            }
            if image.starts_with("stall/") {
                futures::future::pending::<()>().await;
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

    fn key(image: &str) -> ImageKey {
        ImageKey::new(image, &Platform::linux_amd64())
    }

    fn error_of(out: &ImageResolutions, image: &str) -> Option<String> {
        match out.get(image, &Platform::linux_amd64()) {
            Some(ImageResolution::Unresolved { error }) => Some(error.clone()),
            _ => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_key_is_answered_by_the_deadline_whatever_its_lookup_does() {
        let script = Arc::new(Script::default());
        let keys: Vec<ImageKey> = ["ok/a", "panic/b", "stall/c", "ok/d", "ok/e"]
            .into_iter()
            .map(key)
            .collect();
        let out = resolve_all(
            script.clone(),
            keys,
            &Anonymous,
            Instant::now() + Duration::from_secs(2),
            2,
        )
        .await;
        assert_eq!(out.len(), 5);
        for ok in ["ok/a", "ok/d", "ok/e"] {
            assert!(matches!(
                out.get(ok, &Platform::linux_amd64()),
                Some(ImageResolution::Resolved(_))
            ));
        }
        assert_eq!(
            error_of(&out, "panic/b").as_deref(),
            Some("image inspection failed unexpectedly")
        );
        assert_eq!(
            error_of(&out, "stall/c").as_deref(),
            Some("timed out after 2s")
        );
        assert_eq!(script.most.load(Ordering::SeqCst), 2, "concurrency bound");
    }
}
