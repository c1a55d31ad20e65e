//! A [`Controller`] is a [`Runnable`]: the manager starts it, gates it on leadership and stops
//! it like any other. The impl lives here, beside the controller, since rudder-core (which
//! defines `Runnable`) knows no controller.

use futures::future::BoxFuture;
use rudder_core::{BoxError, LeaderGate, Runnable, Shutdown};

use crate::{Controller, Reconciler};

impl<R: Reconciler> Runnable for Controller<R> {
    fn name(&self) -> String {
        format!("controller {}", Controller::name(self))
    }

    /// A sharded controller ([`Controller::set_shard_gate`]) runs on every replica.
    fn needs_leader_election(&self) -> bool {
        !self.is_sharded()
    }

    fn set_leader_gate(&mut self, gate: LeaderGate) -> bool {
        Controller::set_leader_gate(self, gate).is_ok()
    }

    fn start(self: Box<Self>, shutdown: Shutdown) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move { self.run_until(shutdown).await.map_err(BoxError::from) })
    }
}
