//! What configmap-generator's tests share: a manager confined to the test's namespace, and
//! running it in the background.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use rudder::manager::Manager;
use rudder_envtest::TestNamespace;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A manager with no probe or metrics server, its cache on `ns`.
pub(crate) fn manager(ns: &TestNamespace) -> Arc<Manager> {
    let namespace = ns.name().to_owned();
    Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(None)
            .metrics_address(None)
            .cache(move |c| c.default_namespace(namespace))
            .build()
            .unwrap(),
    )
}

/// A running manager: cancel the token, then await the task.
pub(crate) type Running = (
    CancellationToken,
    JoinHandle<Result<(), rudder::manager::Error>>,
);

/// Starts `manager` on a task of its own.
pub(crate) fn start(manager: &Arc<Manager>) -> Running {
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (manager, stop) = (Arc::clone(manager), stop.clone());
        async move { manager.start(stop).await }
    });
    (stop, task)
}
