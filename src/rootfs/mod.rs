//! One inspection code path for any root filesystem: a node's root directory
//! (`HostRoot`) or a stack of OCI layers (`LayeredRoot`). Probes read only
//! through `RootFs`, so hosts and images are judged by the very same code.
//!
//! Used by registry/ (image layers) and node/ (the host root).

pub mod budget;
pub mod collect;
pub mod fs;
pub mod host;
pub mod layered;
pub mod paths;
pub mod probes;
pub mod sqlite;
pub mod tarstream;

pub use budget::{BudgetExhausted, MemoryBudget, Reservation};
pub use collect::{Collected, collect};
pub use fs::{Chain, Hop, Resolved, follow_chain};
pub use fs::{FsError, Lookup, NodeKind, RootFs};
pub use host::HostRoot;
pub use layered::{Layer, LayerError, LayerLimits, LayeredRoot};
