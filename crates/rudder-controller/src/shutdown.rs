//! [`Shutdown`] is rudder-core's (every runnable is stopped with one); imported here for the
//! crate's own use (its one public path is rudder-core's).

pub(crate) use rudder_core::Shutdown;
