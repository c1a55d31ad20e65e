//! [`Group`]: runnables started together, named so that what fails, panics or is left at a
//! deadline can be reported, each with a stop signal of its own so that one can be removed
//! while the others run.

use std::collections::HashMap;

use rudder_core::ErrorChain;
use rudder_core::Shutdown;
use rudder_core::panic_message;
use tokio::task::{AbortHandle, JoinSet};

use super::Error;
use crate::runnable::{BoxError, Runnable};

/// A runnable of the group, as its task knows it.
struct Member {
    name: String,
    stop: Shutdown,
    abort: AbortHandle,
}

/// Runnables started together, each task known by its name so that what is left at a
/// deadline, or what panicked, can be named.
#[derive(Default)]
pub(super) struct Group {
    set: JoinSet<Result<(), BoxError>>,
    members: HashMap<tokio::task::Id, Member>,
}

/// How a runnable of a group ended.
pub(super) struct Ended {
    /// Its name.
    pub(super) name: String,
    /// The error the manager should stop with, if any.
    pub(super) error: Option<Error>,
}

impl Ended {
    /// Logs the failure, if it failed, with what follows from it (`then`).
    pub(super) fn log(&self, then: &str) {
        match &self.error {
            Some(Error::Runnable { source, .. }) => {
                tracing::error!(runnable = %self.name, error = %ErrorChain(&**source), "runnable failed; {then}");
            }
            Some(Error::Panicked { message, .. }) => {
                tracing::error!(runnable = %self.name, panic = %message, "runnable panicked; {then}");
            }
            _ => {}
        }
    }
}

impl Group {
    /// Starts `r` with a stop signal of its own.
    pub(super) fn spawn(&mut self, r: Box<dyn Runnable>) {
        let name = r.name();
        tracing::info!(runnable = %name, "starting");
        let stop = Shutdown::new();
        let abort = self.set.spawn(r.start(stop.clone()));
        self.members
            .insert(abort.id(), Member { name, stop, abort });
    }

    pub(super) fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Tells every runnable to stop by `deadline`.
    pub(super) fn stop_all(&self, deadline: Option<tokio::time::Instant>) {
        for member in self.members.values() {
            member.stop.stop(deadline);
        }
    }

    /// Tells the runnable called `name` to stop by `deadline`; whether there was one.
    pub(super) fn stop_one(&self, name: &str, deadline: Option<tokio::time::Instant>) -> bool {
        let mut found = false;
        for member in self.members.values().filter(|m| m.name == name) {
            member.stop.stop(deadline);
            found = true;
        }
        found
    }

    /// Aborts the runnable called `name` (it did not stop by its deadline).
    pub(super) fn abort_one(&self, name: &str) {
        for member in self.members.values().filter(|m| m.name == name) {
            tracing::warn!(runnable = %name, "still running at its removal's deadline; aborting it");
            member.abort.abort();
        }
    }

    /// Waits for the next runnable to end: `None` if none is running.
    pub(super) async fn join_next(&mut self) -> Option<Ended> {
        let ended = self.set.join_next_with_id().await?;
        Some(self.ended_with(ended))
    }

    /// The name of a finished runnable, and the error it should stop the manager with.
    fn ended_with(
        &mut self,
        ended: Result<(tokio::task::Id, Result<(), BoxError>), tokio::task::JoinError>,
    ) -> Ended {
        let (id, result) = match ended {
            Ok((id, result)) => (id, Ok(result)),
            Err(join) => (join.id(), Err(join)),
        };
        let name = self
            .members
            .remove(&id)
            .map_or_else(|| "a runnable".to_owned(), |m| m.name);
        let error = match result {
            Ok(Ok(())) => None,
            Ok(Err(source)) => Some(Error::Runnable {
                name: name.clone(),
                source,
            }),
            Err(join) if join.is_panic() => Some(Error::Panicked {
                name: name.clone(),
                message: panic_message(&*join.into_panic()),
            }),
            // Aborted: only the manager aborts, and it names what it aborted itself.
            Err(_) => None,
        };
        Ended { name, error }
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
            let ended = self.ended_with(ended);
            ended.log("stopping the manager");
            if let Some(error) = ended.error
                && failure.is_none()
            {
                *failure = Some(error);
            }
        }
        let (mut left, stops): (Vec<String>, Vec<Shutdown>) =
            self.members.drain().map(|(_, m)| (m.name, m.stop)).unzip();
        left.sort();
        tracing::warn!(
            left = %left.join(", "),
            "runnables still running at the graceful-shutdown deadline; aborting them"
        );
        self.set.abort_all();
        while self.set.join_next().await.is_some() {}
        // What they spawned was aborted with them (their sets dropped), and is joined here:
        // an aborted runnable cannot join its own tasks.
        for stop in stops {
            stop.tracked_ended().await;
        }
        left
    }
}
