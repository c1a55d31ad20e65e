//! [`Controller`]: watches feeding a work queue, and workers running a reconciler over it.
//!
//! By concern: `builder.rs` ([`Builder`]), this file (the [`Controller`] handle and what it
//! holds), `run.rs` (starting the watches, the sync, the workers, the stop), `worker.rs`
//! (taking a request and reconciling it), `watch.rs` ([`WatchSpec`]: a source with its
//! predicates and handler), `names.rs` (the process-wide registry of controller names).

mod builder;
mod names;
mod run;
mod watch;
mod worker;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rudder_core::EventHandler;
use rudder_core::Predicate;
use rudder_core::Queue;
use rudder_core::Source;
use rudder_core::SourceError;
use rudder_core::Synced;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use builder::Builder;
pub use watch::WatchSpec;

use crate::error::{Result, RunError};
use crate::gate::LeaderGate;
use crate::metrics::{DeferredQueueMetrics, Metrics};
use crate::own_writes::OwnWrites;
use crate::reconciler::Reconciler;
use crate::shard::{KeyLister, ShardGate};
use names::unregister_name;
use rudder_core::Request;
use rudder_core::sync::LockExt;
use rudder_core::writes::{RecentWrite, WriteObserver, WriteScope};
use watch::ErasedWatch;

/// Runs a [`Reconciler`] over a work queue fed by watches: controller-runtime's controller.
///
/// Add watches with [`watch`](Self::watch) (before or after [`run`](Self::run) starts), then
/// `run` it until its cancellation token fires. The handle is cheap to clone.
pub struct Controller<R> {
    inner: Arc<Inner<R>>,
}

impl<R> Clone for Controller<R> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<R> fmt::Debug for Controller<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.inner.name)
            .field("workers", &self.inner.workers)
            .finish_non_exhaustive()
    }
}

struct Inner<R> {
    name: Arc<str>,
    /// The member cluster it serves (`Options::cluster`).
    cluster: Option<Arc<str>>,
    /// Its name in the process-wide registry.
    registry_key: String,
    registered: bool,
    reconciler: R,
    /// The queue; each key carries why it was queued (its causes) until its reconcile
    /// takes them.
    queue: Queue,
    workers: usize,
    cache_sync_timeout: Duration,
    reconcile_timeout: Option<Duration>,
    shutdown_grace: Duration,
    recover_panic: bool,
    /// Made when `run` starts (see [`Inner::metrics`]).
    metrics: OnceLock<Metrics>,
    queue_metrics: DeferredQueueMetrics,
    started: AtomicBool,
    /// Stops the watches' event pumps.
    stop_sources: CancellationToken,
    /// Parent of every reconcile's context: cancelled when the grace period runs out.
    hard_stop: CancellationToken,
    watches: Mutex<Watches>,
    /// When workers may take requests; read once, when `run` starts.
    gate: Mutex<LeaderGate>,
    /// Which keys this replica may reconcile, when sharded; read once, when `run` starts.
    shard: Mutex<Option<ShardGate>>,
    /// The writes of its reconciles the cache has not delivered, by key (read-your-writes);
    /// `None` when it is off.
    own_writes: Option<Arc<OwnWrites>>,
    filter_own_echoes: bool,
    /// Turned on by `run` once the watches it started have synced.
    synced: Synced,
}

impl<R> Drop for Inner<R> {
    fn drop(&mut self) {
        self.stop_sources.cancel();
        if self.registered {
            unregister_name(&self.registry_key);
        }
    }
}

#[derive(Default)]
struct Watches {
    /// Added before `run`, started by it.
    pending: Vec<Box<dyn ErasedWatch>>,
    synced: Vec<Synced>,
    tasks: Vec<JoinHandle<()>>,
    running: bool,
}

impl<R: Reconciler> Controller<R> {
    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The controller's work queue (to add requests from elsewhere, or to inspect it).
    pub fn queue(&self) -> &Queue {
        &self.inner.queue
    }

    /// The reconciler.
    pub fn reconciler(&self) -> &R {
        &self.inner.reconciler
    }

    /// Watches `source`: each event that every predicate lets through goes to `handler`,
    /// which queues requests. The source starts when `run` does; added after `run` started,
    /// it starts at once (a tokio runtime must be current) and `run` does not wait for it to
    /// sync.
    ///
    /// # Errors
    ///
    /// Only when added to a running controller: [`RunError::Source`] if the source could not
    /// start (before `run`, a source that cannot start fails `run` instead).
    pub fn watch<K, H>(
        &self,
        source: impl Source<K>,
        handler: H,
        predicates: Vec<Box<dyn Predicate<K>>>,
    ) -> Result<()>
    where
        K: Send + Sync + 'static,
        H: EventHandler<K> + 'static,
    {
        self.add_watch(WatchSpec::new(source, handler, predicates))
    }

    /// Adds a watch prepared with [`WatchSpec::new`] (for builders that collect watches of
    /// several types before the controller exists); the same as [`watch`](Self::watch).
    ///
    /// # Errors
    ///
    /// As [`watch`](Self::watch).
    pub fn add_watch(&self, spec: WatchSpec) -> Result<()> {
        let watch = spec.0;
        let mut watches = self.inner.lock_watches();
        if watches.running {
            let (synced, task) = watch
                .spawn(self.inner.queue.clone(), self.inner.stop_sources.clone())
                .map_err(|source| self.inner.source_error(source))?;
            watches.synced.push(synced);
            watches.tasks.push(task);
        } else {
            watches.pending.push(watch);
        }
        Ok(())
    }

    /// Gates the workers behind `gate`: they take a request only while it is open (see
    /// [`LeaderGate`]). Sources start and sync regardless, and their events are queued, so a
    /// controller gated on leadership can run on a replica that does not lead, keeping its
    /// queue filled and ready for the moment it does (the manager's warm standby). Without
    /// a call the gate is [`LeaderGate::always_open`].
    ///
    /// # Errors
    ///
    /// [`RunError::AlreadyStarted`] if `run` has started: the workers took their gate then.
    pub fn set_leader_gate(&self, gate: LeaderGate) -> Result<()> {
        let mut current = self.inner.gate.lock_unpoisoned();
        if self.inner.started.load(Ordering::SeqCst) {
            return Err(RunError::AlreadyStarted(self.inner.name.to_string()));
        }
        *current = gate;
        Ok(())
    }

    /// Shards the controller's keys behind `gate` (see [`ShardGate`]): a worker reconciles a
    /// key it takes from the queue only if the gate admits it (its shard is held by this
    /// replica and valid now) and drops it otherwise, leaving it to the replica that owns it.
    /// Each time a shard opens, every key of that shard listed by `keys` (the primary
    /// objects in the cache) is queued at the default priority (0), so keys dropped before
    /// this replica owned them are reconciled. A sharded controller runs on every replica
    /// and needs no leader gate; if it has one too, both must be open.
    ///
    /// A gate (and its clones) serves one controller: a second controller given it replaces
    /// the first one's key lister, and only the first of them to run queues the keys of the
    /// shards that open. Give each sharded controller a ring of its own.
    ///
    /// # Errors
    ///
    /// [`RunError::AlreadyStarted`] if `run` has started.
    pub fn set_shard_gate(&self, gate: ShardGate, keys: KeyLister) -> Result<()> {
        let mut current = self.inner.shard.lock_unpoisoned();
        if self.inner.started.load(Ordering::SeqCst) {
            return Err(RunError::AlreadyStarted(self.inner.name.to_string()));
        }
        gate.set_key_lister(keys);
        *current = Some(gate);
        if let Some(writes) = &self.inner.own_writes {
            writes.keep_recent();
        }
        Ok(())
    }

    /// Whether the controller is sharded ([`set_shard_gate`](Self::set_shard_gate)).
    pub fn is_sharded(&self) -> bool {
        self.inner.shard.lock_unpoisoned().is_some()
    }

    /// The observer this controller's reconciles write under (read-your-writes), for the
    /// writing client and the cache's tracker; `None` when read-your-writes is off
    /// ([`Options::read_your_writes`](crate::Options::read_your_writes)).
    pub fn write_observer(&self) -> Option<Arc<dyn WriteObserver>> {
        self.inner
            .own_writes
            .as_ref()
            .map(|w| Arc::clone(w) as Arc<dyn WriteObserver>)
    }

    /// Whether the controller drops the echoes of its own writes
    /// ([`Options::filter_own_echoes`](crate::Options::filter_own_echoes)).
    pub fn filters_own_echoes(&self) -> bool {
        self.inner.filter_own_echoes
    }

    /// How many writes of this controller's reconciles the cache has not delivered yet.
    pub fn pending_writes(&self) -> usize {
        self.inner.own_writes.as_ref().map_or(0, |w| w.pending())
    }

    /// How many keys were reconciled before the cache had their own writes, because the
    /// wait for them passed its bound (the `rudder_controller_write_wait_timeouts_total`
    /// count of this controller).
    pub fn write_wait_timeouts(&self) -> u64 {
        self.inner.own_writes.as_ref().map_or(0, |w| w.timeouts())
    }

    /// The writes made in the last fence window (twice [`Options::write_wait`](crate::Options::write_wait),
    /// at least 10 s) by reconciles of the keys `keys` selects, kept only once the controller
    /// is sharded: what a shard's owner hands over as it releases the shard.
    pub fn recent_writes(&self, keys: impl Fn(&Request) -> bool) -> Vec<RecentWrite> {
        self.inner
            .own_writes
            .as_ref()
            .map_or_else(Vec::new, |w| w.recent(keys))
    }

    /// Makes each of `writes` (another replica's, handed over with a shard) a write the
    /// controller waits for: `record` records it with the cache's write tracker inside the
    /// scope of its key, so the key is held until this replica's cache reaches it (or the
    /// bound passes). Nothing without read-your-writes.
    pub fn expect_writes(
        &self,
        writes: &[RecentWrite],
        record: impl Fn(&WriteScope, &RecentWrite),
    ) {
        let Some(own) = &self.inner.own_writes else {
            return;
        };
        let observer: Arc<dyn WriteObserver> = Arc::clone(own) as _;
        for write in writes {
            let scope = WriteScope::new(Arc::clone(&observer), write.key.clone(), own.timeout());
            record(&scope, write);
        }
    }

    /// A signal that turns on once [`run_until`](Self::run_until) has started the watches
    /// and they have synced (as its workers start), and stays on: what a caller awaits
    /// ([`Synced::wait`]) to learn, without polling, that the controller caught up.
    pub fn synced(&self) -> Synced {
        self.inner.synced.clone()
    }

    /// Whether every source has synced.
    pub fn has_synced(&self) -> bool {
        let watches = self.inner.lock_watches();
        watches.running && watches.synced.iter().all(Synced::is_synced)
    }
}

impl<R> Inner<R> {
    /// The controller's metric handles, made at the first call: `run` makes it as it starts,
    /// so they come from the recorder the process has installed by then.
    fn metrics(&self) -> &Metrics {
        self.metrics
            .get_or_init(|| Metrics::new(&self.name, self.cluster.as_deref()))
    }

    /// Makes every metric handle of the controller and its queue against the current
    /// recorder, and gives the recorder their descriptions.
    fn start_metrics(&self) {
        crate::metrics::describe();
        self.metrics();
        self.queue_metrics.bind(self.queue.len());
        if let Some(writes) = &self.own_writes {
            writes.start_metrics();
        }
    }

    fn lock_watches(&self) -> std::sync::MutexGuard<'_, Watches> {
        self.watches.lock_unpoisoned()
    }

    fn source_error(&self, source: SourceError) -> RunError {
        RunError::Source {
            controller: self.name.to_string(),
            source,
        }
    }
}
