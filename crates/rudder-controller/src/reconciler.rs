//! The reconciler contract ([`Reconciler`], [`Action`], [`Context`], [`ReconcileId`]) is
//! rudder-core's (its one public path); imported here for the crate's own use.

pub(crate) use rudder_core::{Action, BoxError, Context, Next, ReconcileId, Reconciler};
