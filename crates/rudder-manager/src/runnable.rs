//! [`Runnable`] and [`runnable`] are rudder-core's (a library can write a runnable without
//! depending on the manager); imported here for the crate's own use (their one public path is
//! rudder-core's). A
//! controller's impl is rudder-controller's.

pub(crate) use rudder_core::{BoxError, Runnable};
