//! [`Group`]: runnables started together, named so that what fails, panics or is left at a
//! deadline can be reported.

use std::collections::HashMap;

use rudder_controller::{ErrorChain, Shutdown};
use rudder_core::panic_message;
use tokio::task::JoinSet;

use super::Error;
use crate::runnable::{BoxError, Runnable};

/// Runnables started together, each task known by its name so that what is left at a
/// deadline, or what panicked, can be named.
#[derive(Default)]
pub(super) struct Group {
    set: JoinSet<Result<(), BoxError>>,
    names: HashMap<tokio::task::Id, String>,
}

impl Group {
    pub(super) fn spawn(&mut self, r: Box<dyn Runnable>, shutdown: Shutdown) {
        let name = r.name();
        tracing::info!(runnable = %name, "starting");
        let handle = self.set.spawn(r.start(shutdown));
        self.names.insert(handle.id(), name);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Waits for the next runnable to end: `None` if none is running, `Some(None)` if it
    /// ended well, `Some(Some(error))` if the manager should stop with `error`.
    pub(super) async fn join_next(&mut self) -> Option<Option<Error>> {
        let ended = self.set.join_next_with_id().await?;
        Some(self.ended_with(ended))
    }

    /// The error a finished runnable should stop the manager with, if any.
    fn ended_with(
        &mut self,
        ended: Result<(tokio::task::Id, Result<(), BoxError>), tokio::task::JoinError>,
    ) -> Option<Error> {
        let (id, result) = match ended {
            Ok((id, result)) => (id, Ok(result)),
            Err(join) => (join.id(), Err(join)),
        };
        let name = self
            .names
            .remove(&id)
            .unwrap_or_else(|| "a runnable".to_owned());
        match result {
            Ok(Ok(())) => None,
            Ok(Err(source)) => {
                tracing::error!(runnable = %name, error = %ErrorChain(&*source), "runnable failed; stopping the manager");
                Some(Error::Runnable { name, source })
            }
            Err(join) if join.is_panic() => {
                let message = panic_message(&*join.into_panic());
                tracing::error!(runnable = %name, panic = %message, "runnable panicked; stopping the manager");
                Some(Error::Panicked { name, message })
            }
            // Aborted: only the manager aborts, and it names what it aborted itself.
            Err(_) => None,
        }
    }

    /// Waits for every runnable to end until `deadline`; aborts and names what is left
    /// after it.
    pub(super) async fn drain(
        &mut self,
        deadline: Option<tokio::time::Instant>,
        failure: &mut Option<Error>,
    ) -> Vec<String> {
        loop {
            let next = match deadline {
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, self.set.join_next_with_id()).await {
                        Ok(next) => next,
                        Err(_) => break,
                    }
                }
                None => self.set.join_next_with_id().await,
            };
            let Some(ended) = next else {
                return Vec::new();
            };
            if let Some(error) = self.ended_with(ended)
                && failure.is_none()
            {
                *failure = Some(error);
            }
        }
        let mut left: Vec<String> = self.names.drain().map(|(_, name)| name).collect();
        left.sort();
        tracing::warn!(
            left = %left.join(", "),
            "runnables still running at the graceful-shutdown deadline; aborting them"
        );
        self.set.abort_all();
        while self.set.join_next().await.is_some() {}
        left
    }
}
