//! nfguard: stops iptables version and backend mismatches from breaking
//! Kubernetes cluster networking. See README.md and docs/.

pub mod api;
pub mod capped;
pub mod check;
pub mod compat;
pub mod controller;
#[cfg(test)]
mod docs_block;
pub mod facts;
pub mod judgement;
pub mod kernel;
pub mod kube_protobuf;
mod named;
pub mod node;
pub mod object_names;
pub mod output;
pub mod plugin;
pub mod projection;
pub mod registry;
pub mod reporter;
pub mod reports;
pub mod rootfs;
pub mod runtime;
pub mod serving_certs;
pub mod status;
pub mod webhook;
pub mod wellknown;
