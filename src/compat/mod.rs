//! Pure compatibility knowledge: version parsing, the facts vocabulary, hazard
//! codes and (see `evaluate`) the verdict engine. No I/O, no async, no clock.
//! (Named `compat` rather than `core` so it never shadows the `core` crate.)

pub mod evaluate;
pub mod facts;
pub mod hazard;
pub mod version;

pub use facts::{Backend, Evidence, EvidenceSource, ImageProfile, IptablesFacts};
pub use hazard::{Hazard, HazardCode, Severity};
pub use version::Version;
