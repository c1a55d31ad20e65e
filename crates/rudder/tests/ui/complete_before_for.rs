//! `complete` without `for_`.

use rudder::prelude::*;

struct Noop;

impl Reconciler for Noop {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        Ok(Action::done())
    }
}

async fn declare(manager: &Manager) {
    let _ = rudder::new_controller(manager).complete(Noop).await;
}

fn main() {}
