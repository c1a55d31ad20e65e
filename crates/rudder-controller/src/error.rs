//! Errors: the controller's own; [`TerminalError`] for reconcilers and [`ErrorChain`] are
//! rudder-core's (their one public path), imported here.

use std::time::Duration;

pub(crate) use rudder_core::{ErrorChain, is_terminal};

/// Why a controller could not be built ([`Builder::build`](crate::Builder::build)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Another controller in this process already has the name; names label metrics and logs,
    /// so they must be unique. Pick another name.
    #[error("a controller named {0:?} already exists in this process")]
    DuplicateName(String),

    /// The controller's name is empty.
    #[error("a controller needs a name")]
    EmptyName,
}

/// Why a controller's run failed ([`Controller::run`](crate::Controller::run)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Not every source synced within the cache-sync timeout; the controller did not start
    /// its workers. Often a type the API server does not serve (a CRD not installed) or
    /// missing RBAC permissions; retrying helps once that is fixed.
    #[error(
        "controller {controller:?}: {pending} of {total} sources did not sync within {timeout:?}"
    )]
    CacheSyncTimeout {
        /// The controller.
        controller: String,
        /// How many sources had not synced.
        pending: usize,
        /// How many sources the controller watches.
        total: usize,
        /// The timeout that passed.
        timeout: Duration,
    },

    /// A source could not start (for a `Kind`: the cache refused its informers, e.g.
    /// because it was stopped). Nothing of the controller runs.
    #[error("controller {controller:?}: a source could not start")]
    Source {
        /// The controller.
        controller: String,
        /// The source's error.
        #[source]
        source: rudder_core::SourceError,
    },

    /// `run` was called on a controller that already ran.
    #[error("controller {0:?} was already started")]
    AlreadyStarted(String),
}

/// A `Result` with an error of this crate (a [`RunError`] unless said otherwise).
pub type Result<T, E = RunError> = std::result::Result<T, E>;
