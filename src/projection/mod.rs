//! Typed projections of API objects: exactly what the judgement, the
//! controller's plan and its reports read of an object, built once when the
//! object arrives. Stores keep projections instead of API objects (a few
//! hundred bytes where k8s-openapi's structs take kilobytes), and a
//! projection's equality is its change test, so a field added to one is
//! read and watched for in one place.

pub mod node;
pub mod pod;

pub use node::{NODE_LABELS_READ, SlimNode};
pub use pod::{MAX_PULL_SECRETS, PodFacts, PullSecretRefs, is_running};
