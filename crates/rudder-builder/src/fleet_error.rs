//! [`FleetError`]: why a fleet's controller could not be added, or one of its instances
//! could not be built in a member cluster. It lives here, below rudder-fleet, because the
//! builder API's one [`Error`](crate::Error) carries it ([`Error::Fleet`](crate::Error::Fleet)).

/// Why a fleet's controller could not be added ([`Error::Fleet`](crate::Error::Fleet)), or
/// why one of its instances could not be built in a member cluster (logged, and the
/// instance built again after a backoff).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// The fleet already has a controller of this name; give one of them another name
    /// (rudder-fleet's `FleetControllerBuilder::named`). Retrying
    /// does not help.
    #[error("the fleet already has a controller named {name:?}")]
    DuplicateController {
        /// The name taken.
        name: String,
    },
    /// The controller's options carry one rate limiter
    /// ([`Options::rate_limiter`](rudder_controller::Options::rate_limiter)), which every
    /// member's instance would share, mixing their keys' backoff; give it with
    /// [`Options::rate_limiter_with`](rudder_controller::Options::rate_limiter_with) so
    /// that each instance has its own. Retrying does not help.
    #[error(
        "a fleet controller's rate limiter must be made per instance (Options::rate_limiter_with)"
    )]
    SharedRateLimiter,
    /// An instance's controller could not be built (its name or options refused).
    #[error("cannot build the controller's instance")]
    Build(#[source] rudder_controller::BuildError),
    /// An instance's controller refused its gate or one of its watches (it was already
    /// running, which the fleet never lets happen to an instance it builds).
    #[error("cannot set up the controller's instance")]
    Setup(#[source] rudder_controller::RunError),
    /// An instance's controller ended with an error (its sources did not sync within
    /// `Options::cache_sync_timeout`, or one could not start): logged, counted, and the
    /// instance built again after a backoff.
    #[error("the controller's instance failed")]
    Run(#[source] rudder_controller::RunError),
}
