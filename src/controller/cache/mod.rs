//! The caches and their projections: what the controller keeps in memory so
//! that a reconcile reads nothing from the API server. Reflector stores fed
//! by the watches, what each watch event changes (a fingerprint or a
//! projection: `predicates`, `pod_store`), the indexes from a node to its
//! pods and to nfguard's taints, and which of the controller's own writes
//! the watches have not shown yet.
//!
//! May call: `plan` (pure; the node a profile describes) and the crate's
//! API types. Never the API server's writes, `apply`, `reports` or `run`.

pub mod first_rounds;
pub mod in_flight;
pub mod index;
pub mod namespaces;
pub mod pod_store;
pub mod predicates;
pub mod stores;
