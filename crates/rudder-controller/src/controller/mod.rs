//! [`Controller`]: watches feeding a work queue, and workers running a reconciler over it.

use std::any::Any;
use std::collections::HashSet;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use futures::future::{Either, FutureExt, join_all, select};
use futures::stream::StreamExt;
use rudder_handler::{EventHandler, Predicate, Queue, Request, Source, SourceError, Synced};
use rudder_workqueue::rate_limiter::default_controller_rate_limiter;
use rudder_workqueue::{AddOptions, WorkItem};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{BuildError, ErrorChain, Result, RunError, is_terminal};
use crate::gate::LeaderGate;
use crate::metrics::{DeferredQueueMetrics, Metrics};
use crate::options::Options;
use crate::reconciler::{Action, BoxError, Context, Next, ReconcileId, Reconciler};
use crate::shard::{KeyLister, ShardGate, ShardPermit};
use crate::shutdown::Shutdown;

/// How often `run` logs which sources are still not synced while it waits.
const SYNC_REPORT_PERIOD: Duration = Duration::from_secs(10);

/// The most time a stop with a deadline keeps between cancelling in-flight reconciles'
/// contexts and the deadline itself, for them to return.
const RETURN_MARGIN: Duration = Duration::from_secs(5);

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
        if registered && !register_name(&self.name) {
            return Err(BuildError::DuplicateName(self.name));
        }
        let limiter = options
            .rate_limiter
            .unwrap_or_else(|| Box::new(default_controller_rate_limiter()));
        // The queue's metric handles, like the controller's, are made when it runs.
        let queue_metrics = DeferredQueueMetrics::new(&self.name);
        let queue = Queue::builder()
            .name(self.name.clone())
            .rate_limiter(limiter)
            .metrics(queue_metrics.clone())
            .build();
        let name: Arc<str> = Arc::from(self.name);
        Ok(Controller {
            inner: Arc::new(Inner {
                name,
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
            }),
        })
    }
}

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
    registered: bool,
    reconciler: R,
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
}

impl<R> Drop for Inner<R> {
    fn drop(&mut self) {
        self.stop_sources.cancel();
        if self.registered {
            unregister_name(&self.name);
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
    /// Starts building a controller called `name` (unique in the process: it labels the
    /// metrics and logs) around `reconciler`.
    pub fn builder(name: impl Into<String>, reconciler: R) -> Builder<R> {
        Builder {
            name: name.into(),
            reconciler,
            options: Options::default(),
        }
    }

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
        let mut current = self
            .inner
            .gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
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
        let mut current = self
            .inner
            .shard
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.inner.started.load(Ordering::SeqCst) {
            return Err(RunError::AlreadyStarted(self.inner.name.to_string()));
        }
        gate.set_key_lister(keys);
        *current = Some(gate);
        Ok(())
    }

    /// Whether the controller is sharded ([`set_shard_gate`](Self::set_shard_gate)).
    pub fn is_sharded(&self) -> bool {
        self.inner
            .shard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Whether every source has synced.
    pub fn has_synced(&self) -> bool {
        let watches = self.inner.lock_watches();
        watches.running && watches.synced.iter().all(Synced::is_synced)
    }

    /// Runs the controller until `cancel` is cancelled; the same as
    /// [`run_until`](Self::run_until) with a stop that carries no deadline, so in-flight
    /// reconciles get the controller's own shutdown grace
    /// ([`Options::shutdown_grace`]) before their contexts are cancelled.
    ///
    /// # Errors
    ///
    /// As [`run_until`](Self::run_until).
    pub async fn run(&self, cancel: CancellationToken) -> Result<()> {
        self.run_until(Shutdown::from_token(cancel)).await
    }

    /// Runs the controller until `shutdown` fires: starts the watches (a `Kind` asks the
    /// cache for its informers now), waits (up to the cache-sync timeout) for them to sync,
    /// then runs the workers.
    ///
    /// On stop, the watches stop and workers take no new requests. In-flight reconciles may
    /// finish; their contexts are cancelled when the stop's deadline is near (a quarter of
    /// the time left at the stop, at most 5 s, before it), so that they can return in time;
    /// with no deadline ([`Shutdown::stop`]`(None)`) they are never cancelled, and with a
    /// stop through the token alone they are cancelled after the shutdown grace. `run`
    /// returns when every reconcile has returned: nothing of the controller runs after that.
    /// It keeps no timer past the deadline: whoever handed the deadline down (the manager)
    /// decides what happens to a reconcile that ignores its context.
    ///
    /// # Errors
    ///
    /// [`RunError::AlreadyStarted`] on a second run, [`RunError::Source`] when a source
    /// cannot start, [`RunError::CacheSyncTimeout`] when the sources did not sync in time.
    pub async fn run_until(&self, shutdown: Shutdown) -> Result<()> {
        let inner = &self.inner;
        let (gate, shard) = {
            // Under the gates' locks, so a gate set concurrently is either taken or refused.
            let gate = inner.gate.lock().unwrap_or_else(PoisonError::into_inner);
            let shard = inner.shard.lock().unwrap_or_else(PoisonError::into_inner);
            if inner.started.swap(true, Ordering::SeqCst) {
                return Err(RunError::AlreadyStarted(inner.name.to_string()));
            }
            (gate.clone(), shard.clone())
        };
        inner.start_metrics();
        let started = {
            let mut watches = inner.lock_watches();
            watches.running = true;
            let pending = std::mem::take(&mut watches.pending);
            let mut failed = None;
            for watch in pending {
                match watch.spawn(inner.queue.clone(), inner.stop_sources.clone()) {
                    Ok((synced, task)) => {
                        watches.synced.push(synced);
                        watches.tasks.push(task);
                    }
                    Err(source) => {
                        failed = Some(inner.source_error(source));
                        break;
                    }
                }
            }
            match failed {
                Some(error) => Err(error),
                None => Ok(watches.synced.clone()),
            }
        };
        let synced = match started {
            Ok(synced) => synced,
            Err(error) => {
                self.stop_watches().await;
                return Err(error);
            }
        };
        tracing::info!(controller = %inner.name, sources = synced.len(), "waiting for sources to sync");
        let all_synced = async {
            let mut all = std::pin::pin!(join_all(synced.iter().map(Synced::wait)));
            // Say what is still missing now and then: a type the API server does not serve
            // yet (a CRD not installed) keeps its source unsynced while it retries.
            let mut every = tokio::time::interval(SYNC_REPORT_PERIOD);
            every.tick().await;
            loop {
                tokio::select! {
                    _ = &mut all => return,
                    _ = every.tick() => {
                        let pending = synced.iter().filter(|s| !s.is_synced()).count();
                        tracing::warn!(
                            controller = %inner.name,
                            pending,
                            total = synced.len(),
                            "sources still not synced; is every watched type served (CRDs \
                             installed) and readable with this identity's RBAC?"
                        );
                    }
                }
            }
        };
        let sync = tokio::time::timeout(inner.cache_sync_timeout, all_synced);
        tokio::select! {
            _ = shutdown.stopped() => {
                self.stop_watches().await;
                return Ok(());
            }
            waited = sync => {
                if waited.is_err() {
                    let pending = synced.iter().filter(|s| !s.is_synced()).count();
                    self.stop_watches().await;
                    return Err(RunError::CacheSyncTimeout {
                        controller: inner.name.to_string(),
                        pending,
                        total: synced.len(),
                        timeout: inner.cache_sync_timeout,
                    });
                }
            }
        }
        if gate.is_open() {
            tracing::info!(controller = %inner.name, workers = inner.workers, "starting workers");
        } else {
            tracing::info!(controller = %inner.name, workers = inner.workers,
                "starting workers; they wait for leadership (events are queued meanwhile)");
        }
        inner.metrics().set_max_concurrent(inner.workers);
        let stopping = CancellationToken::new();
        // Owned here: if `run` is dropped (its task aborted), the workers are aborted with it
        // and the watches stop, so nothing of the controller outlives it.
        let _watches = StopOnDrop(inner.stop_sources.clone());
        let mut workers = JoinSet::new();
        for _ in 0..inner.workers {
            workers.spawn(worker(
                Arc::clone(inner),
                gate.clone(),
                shard.clone(),
                stopping.clone(),
            ));
        }
        // Queues the keys of each shard as it opens; after the sync, so the cache lists
        // them all. Aborted with `run` (a `JoinSet` aborts its tasks when dropped).
        let mut resyncs = JoinSet::new();
        if let Some(shard) = &shard
            && let Some(opened) = shard.take_opened()
        {
            resyncs.spawn(resync(shard.clone(), opened, inner.queue.clone()));
        }
        let mut ended = Vec::new();
        tokio::select! {
            _ = shutdown.stopped() => {}
            Some(early) = workers.join_next() => ended.push(early),
            () = announce(&inner.name, gate) => {}
        }
        tracing::info!(controller = %inner.name, "stopping");
        self.stop_watches().await;
        stopping.cancel();
        let cancel_at = self.cancel_contexts_at(&shutdown);
        let finished = async {
            match cancel_at {
                Some(at) => tokio::time::timeout_at(at, join_all_of(&mut workers))
                    .await
                    .ok(),
                None => Some(join_all_of(&mut workers).await),
            }
        };
        match finished.await {
            Some(done) => ended.extend(done),
            None => {
                tracing::warn!(controller = %inner.name,
                    "reconciles still running as the stop's deadline nears: cancelling their contexts");
                inner.hard_stop.cancel();
                ended.extend(join_all_of(&mut workers).await);
            }
        }
        inner.queue.shutdown();
        for joined in ended {
            if let Err(e) = joined
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        Ok(())
    }

    /// When in-flight reconciles' contexts are cancelled during a stop (`None`: never).
    fn cancel_contexts_at(&self, shutdown: &Shutdown) -> Option<tokio::time::Instant> {
        let now = tokio::time::Instant::now();
        if !shutdown.was_given_deadline() {
            return Some(now + self.inner.shutdown_grace);
        }
        let deadline = shutdown.deadline()?;
        let left = deadline.saturating_duration_since(now);
        Some(deadline - (left / 4).min(RETURN_MARGIN))
    }

    async fn stop_watches(&self) {
        self.inner.stop_sources.cancel();
        let tasks = std::mem::take(&mut self.inner.lock_watches().tasks);
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// Queues every key of each shard `opened` reports, at the default priority: a shard
/// handed over is news to this replica, and its keys have waited through the hand-off.
/// Shards reported together share one listing of the keys.
async fn resync(
    shard: ShardGate,
    mut opened: tokio::sync::mpsc::UnboundedReceiver<usize>,
    queue: Queue,
) {
    while let Some(first) = opened.recv().await {
        let mut shards = vec![first];
        while let Ok(more) = opened.try_recv() {
            shards.push(more);
        }
        let keys = shard.keys_of(&shards);
        tracing::debug!(
            ?shards,
            keys = keys.len(),
            "shards opened: queueing their keys"
        );
        for key in keys {
            queue.add(key);
        }
    }
}

/// Cancels a token when dropped.
struct StopOnDrop(CancellationToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Logs each time a gated controller's gate opens or closes; never returns for an
/// always-open gate.
async fn announce(name: &str, mut gate: LeaderGate) {
    if gate.is_always_open() {
        return std::future::pending().await;
    }
    loop {
        gate.opened().await;
        tracing::info!(controller = %name, "leading: workers take requests");
        gate.closed().await;
        tracing::info!(controller = %name, "not leading (or no longer sure of it): workers take no requests");
    }
}

/// Waits for every task in `set`, collecting how each ended.
async fn join_all_of(set: &mut JoinSet<()>) -> Vec<Result<(), tokio::task::JoinError>> {
    let mut ended = Vec::new();
    while let Some(joined) = set.join_next().await {
        ended.push(joined);
    }
    ended
}

impl<R> Inner<R> {
    /// The controller's metric handles, made at the first call: `run` makes it as it starts,
    /// so they come from the recorder the process has installed by then.
    fn metrics(&self) -> &Metrics {
        self.metrics.get_or_init(|| Metrics::new(&self.name))
    }

    /// Makes every metric handle of the controller and its queue against the current
    /// recorder, and gives the recorder their descriptions.
    fn start_metrics(&self) {
        crate::metrics::describe();
        self.metrics();
        self.queue_metrics.bind(self.queue.len());
    }

    fn lock_watches(&self) -> std::sync::MutexGuard<'_, Watches> {
        self.watches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn source_error(&self, source: SourceError) -> RunError {
        RunError::Source {
            controller: self.name.to_string(),
            source,
        }
    }
}

/// One worker: takes requests while `gate` is open, until the controller stops, reconciling
/// each.
async fn worker<R: Reconciler>(
    inner: Arc<Inner<R>>,
    mut gate: LeaderGate,
    shard: Option<ShardGate>,
    stopping: CancellationToken,
) {
    // An always-open gate goes through the same loop: `opened` returns at once and `closed`
    // never does.
    loop {
        tokio::select! {
            biased;
            () = stopping.cancelled() => return,
            () = gate.opened() => {}
        }
        let item = tokio::select! {
            biased;
            () = stopping.cancelled() => return,
            // Cancelling a `get` loses nothing: the key stays queued.
            () = gate.closed() => continue,
            item = inner.queue.get() => match item {
                Some(item) => item,
                None => return,
            },
        };
        // The check that counts: the clock at the moment the request is taken. A process
        // resumed after a freeze can be handed a request before its timers run; the
        // request then goes back to the queue, not to the reconciler.
        if let Some(item) = admit(&inner.queue, &gate, item)
            && let Some((item, permit)) = admit_shard(&inner.queue, shard.as_ref(), item)
        {
            process(&inner, item, permit).await;
        }
    }
}

/// Hands `item` on if `gate` is open now; otherwise puts its key back in `queue` at its
/// priority (queued again once the item is dropped, here) and hands nothing on.
fn admit(queue: &Queue, gate: &LeaderGate, item: WorkItem<Request>) -> Option<WorkItem<Request>> {
    if gate.is_open() {
        return Some(item);
    }
    let options = AddOptions::new().priority(item.priority());
    queue.add_with(item.key().clone(), options);
    None
}

/// Hands `item` on with its shard permit if `shard` admits its key (or there is no shard
/// gate); otherwise drops it, forgetting its retries: the replica owning its shard
/// reconciles it.
fn admit_shard(
    queue: &Queue,
    shard: Option<&ShardGate>,
    item: WorkItem<Request>,
) -> Option<(WorkItem<Request>, Option<ShardPermit>)> {
    let Some(shard) = shard else {
        return Some((item, None));
    };
    match shard.admit(item.key()) {
        Some(permit) => Some((item, Some(permit))),
        None => {
            tracing::trace!(request = %item.key(), "not this replica's shard: dropped");
            queue.forget(item.key());
            None
        }
    }
}

static NEXT_RECONCILE_ID: AtomicU64 = AtomicU64::new(1);

/// What became of one reconcile, for the `result` label.
#[derive(Clone, Copy)]
enum Outcome {
    Success,
    Requeue,
    RequeueAfter,
    Error,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Requeue => "requeue",
            Outcome::RequeueAfter => "requeue_after",
            Outcome::Error => "error",
        }
    }
}

/// Reconciles `item`; with a shard `permit`, the reconcile is cancelled (its context
/// cancelled and its future dropped) if this replica's holding of the shard passes while it
/// runs, since another replica may then start the same key.
async fn process<R: Reconciler>(
    inner: &Inner<R>,
    item: WorkItem<Request>,
    mut permit: Option<ShardPermit>,
) {
    let request = item.key().clone();
    let id = ReconcileId(NEXT_RECONCILE_ID.fetch_add(1, Ordering::Relaxed));
    let cancel = inner.hard_stop.child_token();
    let ctx = Context {
        cancel: cancel.clone(),
        reconcile_id: id,
        controller: Arc::clone(&inner.name),
    };
    let span = tracing::info_span!(
        "reconcile",
        controller = %inner.name,
        request = %request,
        reconcile_id = %id,
    );
    inner.metrics().active_workers(1.0);
    let started = Instant::now();
    let reconcile = AssertUnwindSafe(inner.reconciler.reconcile(request.clone(), ctx))
        .catch_unwind()
        .instrument(span.clone());
    let reconcile = async {
        match inner.reconcile_timeout {
            None => reconcile.await,
            Some(timeout) => {
                let mut reconcile = std::pin::pin!(reconcile);
                match select(
                    reconcile.as_mut(),
                    std::pin::pin!(tokio::time::sleep(timeout)),
                )
                .await
                {
                    Either::Left((result, _)) => result,
                    Either::Right(((), _)) => {
                        span.in_scope(|| {
                            tracing::warn!(?timeout, "reconcile timed out: cancelling its context");
                        });
                        cancel.cancel();
                        reconcile.await
                    }
                }
            }
        }
    };
    let result = match permit.as_mut() {
        None => Some(reconcile.await),
        Some(permit) => tokio::select! {
            // After a freeze both may be ready: the lost holding wins.
            biased;
            () = permit.lost() => None,
            result = reconcile => Some(result),
        },
    };
    inner.metrics().reconcile_time(started.elapsed());
    inner.metrics().active_workers(-1.0);
    let _entered = span.enter();
    let Some(result) = result else {
        cancel.cancel();
        metrics::counter!(crate::metrics::SHARD_CANCELLED_TOTAL, "controller" => inner.name.to_string())
            .increment(1);
        // Counted as an error, as controller-runtime counts every reconcile that did not
        // succeed in both `reconcile_total{result="error"}` and `reconcile_errors_total`.
        inner.metrics().error();
        tracing::warn!(
            shard = permit.as_ref().map(ShardPermit::shard),
            "this replica's hold on the key's shard passed while it was reconciled: \
             reconcile cancelled (the shard's new holder reconciles the key)"
        );
        inner.queue.forget(&request);
        inner.metrics().reconciled(Outcome::Error.label());
        drop(item);
        drop(permit);
        return;
    };
    let outcome = match result {
        Ok(Ok(action)) => requeue(inner, request, action),
        Ok(Err(error)) => {
            let error: BoxError = error.into();
            let error: &(dyn std::error::Error + 'static) = &*error;
            inner.metrics().error();
            if is_terminal(error) {
                inner.metrics().terminal_error();
                tracing::error!(error = %ErrorChain(error), "reconcile failed with a terminal error; not retrying");
                inner.queue.forget(&request);
            } else {
                tracing::error!(error = %ErrorChain(error), "reconcile failed; retrying with backoff");
                inner.queue.add_rate_limited(request);
            }
            Outcome::Error
        }
        Err(panic) => {
            inner.metrics().panic();
            inner.metrics().error();
            let message = panic_message(&*panic);
            if !inner.recover_panic {
                inner.metrics().reconciled(Outcome::Error.label());
                drop(item);
                std::panic::resume_unwind(panic);
            }
            tracing::error!(panic = %message, "reconcile panicked; retrying with backoff");
            inner.queue.add_rate_limited(request);
            Outcome::Error
        }
    };
    inner.metrics().reconciled(outcome.label());
    drop(item);
    drop(permit);
}

/// Queues what a successful reconcile asked for.
fn requeue<R>(inner: &Inner<R>, request: Request, action: Action) -> Outcome {
    let priority = action.priority.unwrap_or(0);
    match action.next {
        Next::Done => {
            inner.queue.forget(&request);
            Outcome::Success
        }
        Next::Requeue => {
            let options = AddOptions::new().rate_limited().priority(priority);
            inner.queue.add_with(request, options);
            Outcome::Requeue
        }
        Next::RequeueAfter(delay) => {
            inner.queue.forget(&request);
            let options = AddOptions::new().after(delay).priority(priority);
            inner.queue.add_with(request, options);
            Outcome::RequeueAfter
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

/// A source, its predicates and its handler, with the source's type erased: what
/// [`Controller::add_watch`] takes.
pub struct WatchSpec(Box<dyn ErasedWatch>);

impl WatchSpec {
    /// Prepares a watch of `source` through `predicates` into `handler`.
    pub fn new<K, H>(
        source: impl Source<K>,
        handler: H,
        predicates: Vec<Box<dyn Predicate<K>>>,
    ) -> Self
    where
        K: Send + Sync + 'static,
        H: EventHandler<K> + 'static,
    {
        Self(Box::new(Watch {
            source: Box::new(source),
            handler,
            predicates,
        }))
    }
}

impl fmt::Debug for WatchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchSpec").finish_non_exhaustive()
    }
}

/// A watch with its key type erased, so a controller can hold watches of many types.
trait ErasedWatch: Send {
    /// Starts the source and the task pumping its events into `queue` until `stop`.
    fn spawn(
        self: Box<Self>,
        queue: Queue,
        stop: CancellationToken,
    ) -> std::result::Result<(Synced, JoinHandle<()>), SourceError>;
}

struct Watch<K, H> {
    source: Box<dyn Source<K>>,
    handler: H,
    predicates: Vec<Box<dyn Predicate<K>>>,
}

impl<K, H> ErasedWatch for Watch<K, H>
where
    K: Send + Sync + 'static,
    H: EventHandler<K> + 'static,
{
    fn spawn(
        self: Box<Self>,
        queue: Queue,
        stop: CancellationToken,
    ) -> std::result::Result<(Synced, JoinHandle<()>), SourceError> {
        let Watch {
            source,
            handler,
            predicates,
        } = *self;
        let started = source.start()?;
        let mut events = started.events;
        let task = tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    biased;
                    () = stop.cancelled() => return,
                    event = events.next() => match event {
                        Some(event) => event,
                        None => return,
                    },
                };
                if predicates.iter().all(|p| p.filter(&event)) {
                    handler.handle(&event, &queue);
                }
            }
        });
        Ok((started.synced, task))
    }
}

fn names() -> &'static Mutex<HashSet<String>> {
    static NAMES: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    NAMES.get_or_init(Mutex::default)
}

fn register_name(name: &str) -> bool {
    names()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.to_owned())
}

fn unregister_name(name: &str) {
    names()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(name);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::watch;
    use tokio::time::Instant;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_taken_as_the_gate_closed_goes_back_at_its_priority() {
        let queue = Queue::builder().build();
        queue.add_with(
            Request::namespaced("ns", "low"),
            AddOptions::new().priority(-100),
        );
        queue.add_with(
            Request::namespaced("ns", "high"),
            AddOptions::new().priority(7),
        );
        let (validity, receiver) = watch::channel(Some(Instant::now() + Duration::from_secs(1)));
        let gate = LeaderGate::new(receiver);

        let item = queue.try_get().unwrap();
        assert_eq!(item.key().name(), "high");
        let item = admit(&queue, &gate, item).expect("the gate is open");
        drop(item);

        let item = queue.try_get().unwrap();
        assert_eq!(item.key().name(), "low");
        // The gate closes (here: the validity passes) between the get and the check.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(admit(&queue, &gate, item).is_none());
        assert_eq!(queue.len(), 1, "the request went back to the queue");
        let again = queue.try_get().unwrap();
        assert_eq!(again.key().name(), "low");
        assert_eq!(again.priority(), -100);
        drop(again);
        validity.send_replace(None);
        assert!(queue.is_empty());
    }
}
