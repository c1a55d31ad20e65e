//! [`Manager::start_until_signal`]: the manager stopped by SIGTERM or SIGINT.

use tokio_util::sync::CancellationToken;

use super::{Error, Manager};

impl Manager {
    /// Runs until SIGTERM or SIGINT, then stops gracefully; a second signal exits the
    /// process at once (status 1). The handlers are in place before any runnable starts.
    pub async fn start_until_signal(&self) -> Result<(), Error> {
        use tokio::signal::unix::{SignalKind, signal};
        let cancel = CancellationToken::new();
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: aborted and joined below, once the manager has stopped"
        )]
        let watcher = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Some(tokio::spawn(signals(term, int, cancel.clone()))),
            _ => {
                tracing::warn!("cannot listen for signals; stop the manager with its token");
                None
            }
        };
        let result = self.start(cancel).await;
        if let Some(watcher) = watcher {
            watcher.abort();
            // Joined: it ends at the abort (its panic, were there one, has nothing to hand on).
            let _ = watcher.await;
        }
        result
    }
}

/// Cancels on the first SIGTERM or SIGINT; exits on the second.
async fn signals(
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
    cancel: CancellationToken,
) {
    for n in 0..2 {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        if n == 0 {
            tracing::info!("signal received: stopping gracefully (send another to exit at once)");
            cancel.cancel();
        } else {
            tracing::warn!("second signal: exiting now");
            std::process::exit(1);
        }
    }
}
