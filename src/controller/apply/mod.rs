//! The node plan applied: gather one node's facts from the caches (and the
//! image look-ups), plan it with the pure core (`plan`), write the result
//! (labels, taints, profile status, events), sweep orphaned profiles, and
//! write each NetfilterPolicy's status.
//!
//! May call: `cache`, `plan`, `metrics`, `timing`. Never `reports` or `run`.

pub mod gather;
pub mod node;
pub mod orphans;
pub mod policy_status;
