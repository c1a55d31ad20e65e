//! [`Builder`]: a controller's name, reconciler and options, and the checks of `build`.

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};

use rudder_core::Queue;
use rudder_core::Synced;
use rudder_workqueue::rate_limiter::default_controller_rate_limiter;
use tokio_util::sync::CancellationToken;

use super::names::{self, register_name};
use super::{Controller, Inner, Watches};
use crate::error::BuildError;
use crate::gate::LeaderGate;
use crate::metrics::DeferredQueueMetrics;
use crate::options::Options;
use crate::own_writes::OwnWrites;
use crate::reconciler::Reconciler;

/// Builds a [`Controller`].
pub struct Builder<R> {
    name: String,
    reconciler: R,
    options: Options,
}

impl<R> fmt::Debug for Builder<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.name)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<R: Reconciler> Builder<R> {
    /// How the controller runs (default [`Options::default`]).
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// Builds the controller; fails if the name is empty or taken.
    pub fn build(self) -> Result<Controller<R>, BuildError> {
        if self.name.is_empty() {
            return Err(BuildError::EmptyName);
        }
        let options = self.options;
        let registered = !options.skip_name_validation;
        let registry_key = names::registry_key(&self.name, options.cluster.as_deref());
        if registered && !register_name(&registry_key) {
            return Err(BuildError::DuplicateName(registry_key));
        }
        let limiter = options.rate_limiter.as_ref().map_or_else(
            || Box::new(default_controller_rate_limiter()) as Box<_>,
            crate::options::Limiter::make,
        );
        // The queue's metric handles, like the controller's, are made when it runs.
        let queue_metrics = DeferredQueueMetrics::new(&self.name, options.cluster.clone());
        let queue = Queue::builder_with_payload()
            .name(self.name.clone())
            .rate_limiter(limiter)
            .metrics(queue_metrics.clone())
            .build();
        let own_writes = options.read_your_writes.then(|| {
            Arc::new(OwnWrites::new(
                &self.name,
                options.cluster.clone(),
                queue.clone(),
                options.write_wait,
            ))
        });
        let filter_own_echoes = options.read_your_writes && options.filter_own_echoes;
        let name: Arc<str> = Arc::from(self.name);
        Ok(Controller {
            inner: Arc::new(Inner {
                name,
                cluster: options.cluster,
                registry_key,
                registered,
                reconciler: self.reconciler,
                queue,
                workers: options.workers,
                cache_sync_timeout: options.cache_sync_timeout,
                reconcile_timeout: options.reconcile_timeout,
                shutdown_grace: options.shutdown_grace,
                recover_panic: options.recover_panic,
                metrics: OnceLock::new(),
                queue_metrics,
                started: AtomicBool::new(false),
                stop_sources: CancellationToken::new(),
                hard_stop: CancellationToken::new(),
                watches: Mutex::new(Watches::default()),
                gate: Mutex::new(LeaderGate::always_open()),
                shard: Mutex::new(None),
                own_writes,
                filter_own_echoes,
                synced: Synced::new(),
            }),
        })
    }
}

impl<R: Reconciler> Controller<R> {
    /// Starts building a controller called `name` (unique in the process: it labels the
    /// metrics and logs) around `reconciler`.
    pub fn builder(name: impl Into<String>, reconciler: R) -> Builder<R> {
        Builder {
            name: name.into(),
            reconciler,
            options: Options::default(),
        }
    }
}
