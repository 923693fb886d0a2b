//! The signal every long-running subcommand stops on.

/// Resolves on the first SIGTERM (what the kubelet sends) or Ctrl-C.
///
/// If the SIGTERM handler cannot be installed the process would otherwise
/// never stop cleanly, so that is logged and Ctrl-C alone is waited for.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received"),
                    _ = ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "no SIGTERM handler; stopping on Ctrl-C only");
                ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    ctrl_c().await;
}

async fn ctrl_c() {
    match tokio::signal::ctrl_c().await {
        Ok(()) => tracing::info!("Ctrl-C received"),
        // Without a handler Ctrl-C kills the process by default; wait on
        // the other signal rather than stopping right away.
        Err(e) => {
            tracing::warn!(error = %e, "no Ctrl-C handler");
            std::future::pending::<()>().await
        }
    }
}
