//! The manager's wiring of a sharding ring ([`rudder_lease::sharding::Ring`]): a runnable
//! that runs on every replica, not only a leader.

use futures::future::BoxFuture;
use rudder_controller::Shutdown;
use rudder_lease::sharding::Ring;

use crate::runnable::{BoxError, Runnable};

impl Runnable for Ring {
    fn name(&self) -> String {
        format!("sharding ring {}", self.config().ring())
    }

    fn needs_leader_election(&self) -> bool {
        false
    }

    fn start(self: Box<Self>, shutdown: Shutdown) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move { self.run(shutdown).await.map_err(BoxError::from) })
    }
}
