//! Where image bytes are parsed: never in the process that holds the
//! ServiceAccount token, the registry credentials and the network.
//!
//! Each inspection that must read layers gets a `Session`: by default a
//! child process (this same binary, `child::ARG`) that confines itself
//! before reading anything (`confine`: seccomp, no files, no sockets, hard
//! memory and CPU limits) and then decompresses, reads tar and runs every
//! probe (ELF, dpkg, apk, rpm's SQLite pages) on what its parent sends.
//! The parent only pumps digest-verified blob bytes in and takes typed
//! answers out (`frame`): layer records it caches without reading, facts
//! as bounded JSON, refusals as codes. `Parser::InProcess` runs the same
//! loop on a thread, for library callers and hosts without seccomp.
//!
//! May call: rootfs (the parsers), registry::stream (decompression).

pub mod child;
mod confine;
mod frame;
pub mod probe;
mod refusal;
mod session;
mod worker;

pub use probe::{Probe, Report};
pub use session::{Failure, Feed, Session};

use std::path::PathBuf;

/// Where an inspection's parsing runs.
#[derive(Debug, Clone, Default)]
pub enum Parser {
    /// A thread of this process: only for tools and tests that hold nothing
    /// to protect, or a host where the sandbox cannot be set up.
    #[default]
    InProcess,
    /// A confined child process per inspection.
    Sandbox(SandboxConfig),
}

#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// This binary (`/proc/self/exe`: the kernel names it at exec time).
    pub program: PathBuf,
    /// The child's data memory limit (`MemoryPlan::parser_memory_bytes`).
    pub memory_bytes: u64,
}

/// Where Kubernetes mounts a pod's ServiceAccount token.
pub const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// The start-up check of the webhook and controller: with the sandbox on,
/// a child must fail to read the token and to reach the API server, or the
/// component does not start (the error says how to opt out).
pub async fn check_at_start(parser: &Parser) -> anyhow::Result<()> {
    if matches!(parser, Parser::InProcess) {
        tracing::warn!("image layers are parsed in this process (--image-parser=in-process)");
        return Ok(());
    }
    let api = match (
        std::env::var("KUBERNETES_SERVICE_HOST"),
        std::env::var("KUBERNETES_SERVICE_PORT"),
    ) {
        (Ok(h), Ok(p)) if h.contains(':') => format!("[{h}]:{p}"),
        (Ok(h), Ok(p)) => format!("{h}:{p}"),
        _ => "127.0.0.1:443".into(),
    };
    self_check(parser, TOKEN_PATH, &api).await.map_err(|e| {
        anyhow::anyhow!(
            "{e}; to parse image layers in this process instead, set --image-parser=in-process"
        )
    })?;
    tracing::info!("image parser sandbox checked: no token, no network, no programs");
    Ok(())
}

/// Run the sandbox self-check once: a child that tries to read
/// `secret_file` and connect to `connect_to` (and the rest of `probe`) and
/// must be refused every time. Err names each escape, or why no child ran.
pub async fn self_check(
    parser: &Parser,
    secret_file: &str,
    connect_to: &str,
) -> Result<(), String> {
    let limits = crate::rootfs::LayerLimits::default();
    let mut session = Session::start(parser, &limits, 5).map_err(|e| e.to_string())?;
    let probe = Probe {
        secret_file: secret_file.into(),
        connect_to: connect_to.into(),
        ..Probe::default()
    };
    let report = session
        .probe(&probe)
        .await
        .map_err(|e| e.into_error("").to_string())?;
    let escapes = report.escapes();
    if escapes.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the image parser sandbox does not hold: {}",
            escapes.join("; ")
        ))
    }
}
