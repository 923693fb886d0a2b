//! The vocabulary nfguard speaks about iptables: versions, backends, what one
//! installation (image or host) holds and where that came from, an image's
//! profile, node hazards. Plain data with parsing, no I/O. The CRD types
//! (`api`), the verdict engine (`compat`) and every probe use it; it uses
//! none of them, so the dependencies go one way: facts <- api <- compat.

pub mod hazard;
pub mod image;
pub mod iptables;
pub mod nftables;
pub mod platform;
pub mod version;

pub use hazard::{Hazard, HazardCode, Severity};
pub use image::ImageProfile;
pub use iptables::{Backend, Evidence, EvidenceSource, IptablesFacts};
pub use nftables::{NftVersion, NftablesFacts, UserdataReader};
pub use platform::{Platform, PlatformError};
pub use version::Version;
