//! `nfguard controller`: turns NodeNetfilterProfiles (facts written by the
//! reporter) into cluster behaviour: profile conditions, node labels, the
//! writer inventory, opt-in taints with a safety brake, and clean-up of
//! profiles whose Node is gone.
//!
//! Every reconcile is a pipeline: gather (the Node, its profile, its
//! running writer pods, the policies and namespace labels from the caches
//! the watches fill ([`stores`]); image look-ups) -> [`plan::plan_node`]
//! (pure, clock passed in) -> apply (node labels, taints, status, events). Only the
//! holder of a `coordination.k8s.io/v1` Lease reconciles ([`lease`]); it
//! also writes each NetfilterPolicy's status ([`policy_status`]).

pub mod apply;
pub mod cli;
pub mod conditions;
pub mod first_rounds;
pub mod gather;
pub mod http;
pub mod in_flight;
pub mod index;
pub mod inventory;
pub mod labels;
pub mod lease;
pub mod metrics;
pub mod namespaces;
pub mod orphans;
pub mod plan;
pub mod pod_store;
pub mod policy_status;
pub mod predicates;
pub mod report_errors;
pub mod report_owners;
pub mod reports_judge;
pub mod reports_write;
pub mod run;
pub mod stores;
pub mod taints;

/// Field manager for the controller's part of the profile status.
pub const FIELD_MANAGER: &str = "nfguard-controller";
/// Name under which events are reported.
pub const EVENT_REPORTER: &str = "nfguard-controller";
