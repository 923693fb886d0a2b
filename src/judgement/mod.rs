//! The one judgement path: from a workload (or a running pod) and the
//! cluster's facts to a [`Decision`]. The admission webhook, the controller
//! and `nfguard check` call this and nothing else, so they cannot disagree.
//!
//! 1. [`PolicyBook`]: every NetfilterPolicy and the namespaces' labels; one
//!    effective policy per namespace, computed once.
//! 2. [`Scene::prepare`] (pure): the effective policy, the candidate nodes,
//!    the containers and the (image, platform) pairs to look up.
//! 3. [`ResolveImages`]: the caller's strategy for look-ups within a
//!    deadline (a pooled, bounded fan-out for `check` and the controller;
//!    the webhook's cache), each look-up through the one typed
//!    [`ImageLookup`] trait.
//! 4. [`Prepared::decide`] (pure): `compat::evaluate` on those facts.

mod lookup;
mod policies;
pub mod pull_secrets;
mod resolve;
mod scene;

pub use crate::compat::evaluate::Decision;
pub use lookup::{FixedImages, ImageLookup, LookupError, LookupErrorKind};
pub use policies::{NamespaceLabels, PolicyBook};
pub use resolve::{Bounded, PerPod, ResolveImages, resolve_all};
pub use scene::{Judged, Prepared, Scene, Subject};
