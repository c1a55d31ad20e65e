//! [`LeaderGate`] is rudder-core's (a runnable is offered one); imported here for the crate's
//! own use (its one public path is rudder-core's).

pub(crate) use rudder_core::LeaderGate;
