//! One inspection code path for any root filesystem: a node's root directory
//! (`HostRoot`) or a stack of OCI layers (`LayeredRoot`). Probes read only
//! through `RootFs`, so hosts and images are judged by the very same code.
//!
//! OWNER: inspect helper. Interface used by registry/, kernel/ (host root), check/.

pub mod collect;
pub mod host;
pub mod layered;
pub mod paths;
pub mod probes;
pub mod rootfs;
pub mod tarstream;

pub use collect::{Collected, collect};
pub use host::HostRoot;
pub use layered::{Layer, LayerError, LayerLimits, LayeredRoot};
pub use rootfs::{Chain, Hop, Resolved, follow_chain};
pub use rootfs::{FsError, Lookup, NodeKind, RootFs};
