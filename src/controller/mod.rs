//! `nfguard controller`: turns NodeNetfilterProfiles (facts written by the
//! reporter) into cluster behaviour: profile conditions, node labels, the
//! writer inventory, opt-in taints with a safety brake, and clean-up of
//! profiles whose Node is gone.
//!
//! Every reconcile is a pipeline: gather (the Node, its profile, its
//! running writer pods, the policies and namespace labels from the caches
//! the watches fill ([`cache`]); image look-ups) -> [`plan::plan_node`]
//! (pure, clock passed in) -> apply (node labels, taints, status, events:
//! [`apply`]). Only the holder of a `coordination.k8s.io/v1` Lease
//! reconciles ([`lease`]); it also writes each NetfilterPolicy's status
//! ([`apply::policy_status`]) and the policy reports ([`reports`]).
//!
//! The rooms, lowest first (each may call only those before it):
//! [`timing`] and [`plan`] (pure) <- [`cache`] <- [`metrics`] <- [`apply`],
//! [`reports`] <- [`lease`], [`run`] <- [`http`] <- [`cli`].

pub mod apply;
pub mod cache;
pub mod cli;
pub mod http;
pub mod lease;
pub mod metrics;
pub mod plan;
pub mod reports;
pub mod run;
pub mod timing;

/// Field manager for the controller's part of the profile status.
pub const FIELD_MANAGER: &str = "nfguard-controller";
/// Name under which events are reported.
pub const EVENT_REPORTER: &str = "nfguard-controller";
