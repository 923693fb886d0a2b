//! Watch plumbing shared by the webhook's facts and the controller's
//! caches: what of an object counts (a hash of the fields a caller reads),
//! which objects a watch event changed, and whether a store has its first
//! list. Pure: fed watch events, no I/O.

use futures::FutureExt;
use kube::Resource;
use kube::runtime::reflector::Store;
use kube::runtime::watcher::Event;
use serde::Serialize;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// Feeds serialized bytes straight into a hasher (no buffer).
struct HashWriter<H>(H);

impl<H: Hasher> std::io::Write for HashWriter<H> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn hash_json<T: Serialize>(value: &T) -> u64 {
    let mut w = HashWriter(foldhash::quality::FixedState::default().build_hasher());
    // Serializing API types cannot fail; were it to, the hash would differ
    // and count as a change, never hide one.
    let _ = serde_json::to_writer(&mut w, value);
    w.0.finish()
}

/// Whether `store` has applied its first full list. Only for a store
/// nobody awaits: kube's `Store::wait_until_ready` keeps one waker, and this
/// check polls it with a no-op one, taking it from a waiter. The controller
/// uses [`Listed`] for every store; this stays for the webhook's facts,
/// which nothing awaits.
pub fn is_listed<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    // `wait_until_ready` resolves once the first full list was applied.
    store
        .wait_until_ready()
        .now_or_never()
        .is_some_and(|r| r.is_ok())
}

/// A store's first full list, for any number of waiters. kube's
/// `Store::wait_until_ready` wakes only its last poller: when the report
/// writer and a reconcile both waited on the controller's caches, the
/// reconcile lost its waker and slept until its own 10 s timeout, on every
/// cold start (scripts/bench-cluster.sh: 15.1 s to converge, floor 4.4 s).
#[derive(Clone, Debug)]
pub struct Listed(tokio::sync::watch::Receiver<bool>);

/// The feed's side of [`Listed`]: marks it on the first `InitDone`.
#[derive(Debug)]
pub struct MarkListed(tokio::sync::watch::Sender<bool>);

/// A new, not yet listed, flag.
pub fn listed_flag() -> (MarkListed, Listed) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    (MarkListed(tx), Listed(rx))
}

impl MarkListed {
    /// Call after the store applied `event`.
    pub fn observe<K>(&self, event: &Event<K>) {
        if matches!(event, Event::InitDone) {
            self.0
                .send_if_modified(|listed| !std::mem::replace(listed, true));
        }
    }
}

impl Listed {
    pub fn is_listed(&self) -> bool {
        *self.0.borrow()
    }

    /// Until listed (forever if the feed is gone unlisted: bound it with a
    /// timeout).
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|listed| *listed).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// One object an event changed: what it belonged to (its tag, e.g. the
/// node of a pod) before and after. `before: None` is a new object,
/// `after: None` a deleted one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Touched<T> {
    pub before: Option<T>,
    pub after: Option<T>,
}

type Key = (Option<String>, Option<String>);

fn key<K: Resource>(o: &K) -> Key {
    (o.meta().namespace.clone(), o.meta().name.clone())
}

/// Remembers each object's fingerprint and tag, and tells, event by
/// event, which objects changed. Pure: fed watch events, no I/O.
pub struct Changes<K, T> {
    fingerprint: fn(&K) -> u64,
    tag: fn(&K) -> T,
    known: HashMap<Key, (u64, T)>,
    /// During a re-list: what it has listed so far.
    relist: Option<HashMap<Key, (u64, T)>>,
}

impl<K, T> std::fmt::Debug for Changes<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Changes")
            .field("known", &self.known.len())
            .finish()
    }
}

impl<K: Resource, T: Clone + PartialEq> Changes<K, T> {
    pub fn new(fingerprint: fn(&K) -> u64, tag: fn(&K) -> T) -> Self {
        Changes {
            fingerprint,
            tag,
            known: HashMap::new(),
            relist: None,
        }
    }

    /// The objects this event changed (new, different fingerprint or tag,
    /// deleted). A re-list reports at its end, as the stores apply it.
    pub fn observe(&mut self, event: &Event<K>) -> Vec<Touched<T>> {
        match event {
            Event::Apply(o) => {
                let now = ((self.fingerprint)(o), (self.tag)(o));
                let before = self.known.insert(key(o), now.clone());
                if before.as_ref() == Some(&now) {
                    return Vec::new();
                }
                vec![Touched {
                    before: before.map(|(_, t)| t),
                    after: Some(now.1),
                }]
            }
            Event::Delete(o) => match self.known.remove(&key(o)) {
                Some((_, tag)) => vec![Touched {
                    before: Some(tag),
                    after: None,
                }],
                None => Vec::new(),
            },
            Event::Init => {
                self.relist = Some(HashMap::new());
                Vec::new()
            }
            Event::InitApply(o) => {
                let entry = ((self.fingerprint)(o), (self.tag)(o));
                self.relist
                    .get_or_insert_with(HashMap::new)
                    .insert(key(o), entry);
                Vec::new()
            }
            Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let mut before = std::mem::replace(&mut self.known, listed);
                let mut out = Vec::new();
                for (k, now) in &self.known {
                    let was = before.remove(k);
                    if was.as_ref() != Some(now) {
                        out.push(Touched {
                            before: was.map(|(_, t)| t),
                            after: Some(now.1.clone()),
                        });
                    }
                }
                // Whatever the re-list no longer holds went away in the gap.
                out.extend(before.into_values().map(|(_, t)| Touched {
                    before: Some(t),
                    after: None,
                }));
                out
            }
        }
    }
}
