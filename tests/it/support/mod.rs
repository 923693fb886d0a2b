//! Test helpers shared by the modules of this binary: real images and
//! registries, network namespaces, certificates, kube's mock client,
//! scripted HTTP servers.
pub mod images;
pub mod kube_mock;
pub mod netns;
pub mod nft;
pub mod pki;
pub mod registry;
pub mod registry_lying;
pub mod scripted_http;
pub mod secrets_api;
