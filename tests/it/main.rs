//! nfguard's integration tests, gathered into one test binary (`it`). Each
//! module was a `tests/<name>.rs` binary of its own that linked the whole
//! crate and its dependencies again; together they were most of the dev
//! build (docs/ci.md, "Build time"). nextest names a test here
//! `<module>::<test>` in the binary `nfguard::it`; one test is one process
//! under nextest, as before.
//!
//! A new test goes into a module here; a new file needs its `mod` line
//! below (`test_layout` fails on a file that has none, and on a new
//! top-level `tests/*.rs`, which would be a binary of its own again).

// Helpers shared by the test modules.
mod check_ci_support;
mod inspect_support;
mod monitoring_support;
mod support;
mod webhook_support;

mod architecture;
mod check_ci_examples;
mod check_ci_output;
mod check_cli;
mod check_cluster;
mod check_e2e;
mod check_scenarios;
mod check_whatif;
mod ci_workflows;
mod controller_cli;
mod controller_credentials;
mod controller_lease;
mod controller_policy_status;
mod controller_reconcile;
mod e2e_layout;
mod gate_match;
mod image_cache;
mod image_hostile;
mod image_inspect;
mod image_inspect_nft;
mod image_sandbox;
mod inspect_fixtures;
mod inspect_hostile;
mod inspect_layers;
mod inspect_nftables;
mod inspect_rpm;
mod inspect_tarstream;
mod install_check;
mod install_crds;
mod install_dockerfile;
mod install_helm;
mod judgement_agree;
mod kube_client_tls;
mod monitoring;
mod node_host;
mod node_kernel;
mod node_min_reader;
mod node_nft_skew;
mod node_scenarios;
mod plugin_cli;
mod plugin_krew;
mod pods_protobuf;
mod prometheus_config;
mod registry_egress;
mod registry_stale;
mod release_workflow;
mod reporter_api;
mod reporter_netns;
mod sqlite_reader;
mod status_cluster;
mod test_layout;
mod version_smoke;
mod webhook_bootstrap;
mod webhook_credentials;
mod webhook_drain;
mod webhook_egress;
mod webhook_hostile;
mod webhook_intake;
mod webhook_load;
mod webhook_reload;
mod webhook_router;
mod webhook_tls;
mod webhook_trickle;
