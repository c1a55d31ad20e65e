//! [`Error`] and [`Result`]: the builder API's errors, one type for the single-cluster
//! builders and the fleet's.

use crate::FleetError;

/// Errors of the builder API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The API server does not serve a watched type (a CRD not installed, or the wrong
    /// group or version); install it, then build the controller.
    #[error("the API server does not serve {kind}")]
    NotServed {
        /// `group/version Kind`.
        kind: String,
        /// The discovery error.
        #[source]
        source: kube::Error,
    },
    /// The controller could not be built (a duplicate or empty name).
    #[error("cannot build the controller")]
    Controller(#[source] rudder_controller::BuildError),
    /// A webhook could not be registered: its path is taken (webhooks declared twice for a
    /// type), or a conversion does not cover every served version of its kind.
    #[cfg(feature = "webhook")]
    #[error("cannot register the webhook")]
    Webhook(#[source] rudder_webhook::RegisterError),
    /// A watch could not be added. Before the controller runs, adding a watch only records
    /// it, so the builder meets this only for a controller that is already running.
    #[error("cannot add a watch to the controller")]
    Watch(#[source] rudder_controller::RunError),
    /// A sharded controller's ring has invalid Lease timings or names
    /// (`ControllerBuilder::sharded`, a fleet's `FleetBuilder::sharded`); fix the
    /// configuration.
    #[error("invalid sharding configuration")]
    Sharding(#[source] rudder_lease::leader_election::ConfigError),
    /// A fleet's controller could not be added: its name is taken in the fleet, or its
    /// options share one rate limiter between the members.
    #[error("cannot add the controller to the fleet")]
    Fleet(#[source] FleetError),
}

/// The result of the builder API.
pub type Result<T, E = Error> = std::result::Result<T, E>;
