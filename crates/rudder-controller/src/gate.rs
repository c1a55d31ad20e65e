//! [`LeaderGate`] is rudder-core's (a runnable is offered one); re-exported here under the
//! path the crate has always used.

pub use rudder_core::LeaderGate;
