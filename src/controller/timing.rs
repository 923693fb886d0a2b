//! How long the controller waits, in one place: the reconcile loop (`run`)
//! and the report writer (`reports::write`) keep the same clock.

use std::time::Duration;

/// Reconcile every node at least this often (catches missed events).
pub const RESYNC: Duration = Duration::from_secs(300);
/// Retry a failed reconcile after this long.
pub const RETRY: Duration = Duration::from_secs(30);
/// How long a reconcile waits for its image look-ups (each is also bounded
/// by the registry timeout); what is not in by then counts as unresolved.
pub const IMAGE_DEADLINE: Duration = Duration::from_secs(60);
/// How long a reconcile waits for the caches' first lists. No reconcile
/// can do anything useful before them, and at 5,000 nodes x 20 the first
/// list of 100,000 pods took over 20 s: with 10 s, the first reconciles
/// failed with the RBAC hint below and waited out `RETRY`. A list that is
/// refused shows at once anyway, as the watch's own "watch failed" warning.
pub const LIST_WAIT: Duration = Duration::from_secs(120);
