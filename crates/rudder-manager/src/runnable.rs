//! [`Runnable`] and [`runnable`] are rudder-core's (a library can write a runnable without
//! depending on the manager); re-exported here under the paths the crate has always used. A
//! controller's impl is rudder-controller's.

pub use rudder_core::{BoxError, Runnable, runnable};
