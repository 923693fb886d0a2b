//! Helpers of tests/it/monitoring.rs: the components' real /metrics, the text
//! exposition, PromQL through promtool, the rule and dashboard files.
pub mod components;
pub mod exposition;
pub mod files;
pub mod promql;
pub mod tools;
