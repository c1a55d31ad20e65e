//! `complete_with` without `for_`: a controller with nothing to reconcile.

use rudder::prelude::*;

struct Noop;

impl Reconciler for Noop {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        Ok(Action::done())
    }
}

async fn declare(manager: &Manager) {
    let _ = rudder::new_controller(manager)
        .complete_with(|_tools| Noop)
        .await;
}

fn main() {}
