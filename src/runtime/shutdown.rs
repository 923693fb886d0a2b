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

/// Resolves once the stop flag `rx` watches turns true, or its sender is
/// gone (nobody is left to say "keep going"): how a task spawned with a
/// stop flag learns it is time to finish.
pub async fn flag_raised(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::watch;

    #[tokio::test(start_paused = true)]
    async fn flag_raised_waits_for_true_or_a_dropped_sender() {
        let (tx, rx) = watch::channel(false);
        let waiting = tokio::spawn(flag_raised(rx.clone()));
        tx.send(false).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "false is not a stop");
        tx.send(true).unwrap();
        waiting.await.unwrap();
        // Raised before anyone waits: resolves at once.
        flag_raised(rx).await;

        let (tx, rx) = watch::channel(false);
        let waiting = tokio::spawn(flag_raised(rx));
        drop(tx);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("a dropped sender ends the wait")
            .unwrap();
    }
}
