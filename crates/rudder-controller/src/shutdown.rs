//! [`Shutdown`] is rudder-core's (every runnable is stopped with one); re-exported here under
//! the path the crate has always used.

pub use rudder_core::Shutdown;
