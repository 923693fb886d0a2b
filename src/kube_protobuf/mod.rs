//! Kubernetes' protobuf encoding, read for the one collection where JSON
//! costs most: every pod in the cluster (the controller's list and watch).
//! A bounded decoder of its own, reading only the fields the projection
//! reads, instead of full generated types: `wire` (the wire format),
//! `envelope` (what wraps an object), `pod` (a Pod's read fields),
//! `reader` (a body read as it arrives), `pods` (the list and watch).

pub mod envelope;
pub mod pod;
pub mod pods;
pub mod reader;
pub mod wire;
