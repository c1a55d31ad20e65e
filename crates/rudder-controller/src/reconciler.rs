//! The reconciler contract ([`Reconciler`], [`Action`], [`Context`], [`ReconcileId`]) is
//! rudder-core's; this module re-exports it under the paths the crate has always used.

pub use rudder_core::{Action, BoxError, Context, Next, ReconcileId, Reconciler};
