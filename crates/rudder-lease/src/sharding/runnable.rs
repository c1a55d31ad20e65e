//! A sharding [`Ring`] is a [`Runnable`] that runs on every replica, not only a leader: the
//! manager starts it beside the controllers whose shards it opens and closes. (The impl is
//! here because both the trait, rudder-core's, and the type are foreign to the manager.)

use futures::future::BoxFuture;
use rudder_core::{BoxError, Runnable, Shutdown};

use super::Ring;

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
