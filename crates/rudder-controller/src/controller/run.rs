//! [`Controller::run_until`]: starting the watches, waiting for them to sync, running the
//! workers, and the stop.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::join_all;
use rudder_core::Queue;
use rudder_core::Synced;
use rudder_core::sync::LockExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Controller;
use super::worker::worker;
use crate::error::{Result, RunError};
use crate::gate::LeaderGate;
#[cfg(doc)]
use crate::options::Options;
use crate::reconciler::Reconciler;
use crate::shard::ShardGate;
use crate::shutdown::Shutdown;

/// How often `run` logs which sources are still not synced while it waits.
const SYNC_REPORT_PERIOD: Duration = Duration::from_secs(10);

/// The most time a stop with a deadline keeps between cancelling in-flight reconciles'
/// contexts and the deadline itself, for them to return.
const RETURN_MARGIN: Duration = Duration::from_secs(5);

impl<R: Reconciler> Controller<R> {
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
        let (gate, shard) = self.take_gates()?;
        self.inner.start_metrics();
        let synced = match self.start_watches() {
            Ok(synced) => synced,
            Err(error) => {
                self.stop_watches().await;
                return Err(error);
            }
        };
        if !self.wait_for_sync(&synced, &shutdown).await? {
            return Ok(());
        }
        self.inner.synced.mark();
        let stopping = CancellationToken::new();
        // Owned here: if `run` is dropped (its task aborted), the workers are aborted with it
        // and the watches stop, so nothing of the controller outlives it.
        let _watches = StopOnDrop(self.inner.stop_sources.clone());
        let mut workers = self.start_workers(&gate, shard.as_ref(), &stopping, &shutdown);
        // Queues the keys of each shard as it opens; after the sync, so the cache lists
        // them all. Aborted with `run` (a `JoinSet` aborts its tasks when dropped).
        let _resyncs = start_resync(shard.as_ref(), &self.inner.queue);
        let mut ended = Vec::new();
        tokio::select! {
            _ = shutdown.stopped() => {}
            Some(early) = workers.join_next() => ended.push(early),
            () = announce(&self.inner.name, gate) => {}
        }
        tracing::info!(controller = %self.inner.name, "stopping");
        // Workers first: none takes a request from here on, while the watches wind down.
        stopping.cancel();
        self.stop_watches().await;
        ended.extend(self.join_workers(&shutdown, &mut workers).await);
        self.inner.queue.shutdown();
        for joined in ended {
            if let Err(e) = joined
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        Ok(())
    }

    /// Marks the controller started and takes its gates, under their locks, so a gate set
    /// concurrently is either taken or refused.
    fn take_gates(&self) -> Result<(LeaderGate, Option<ShardGate>)> {
        let inner = &self.inner;
        let gate = inner.gate.lock_unpoisoned();
        let shard = inner.shard.lock_unpoisoned();
        if inner.started.swap(true, Ordering::SeqCst) {
            return Err(RunError::AlreadyStarted(inner.name.to_string()));
        }
        Ok((gate.clone(), shard.clone()))
    }

    /// Starts every watch added so far (later ones start as they are added); returns their
    /// sync signals, or the first source that could not start.
    fn start_watches(&self) -> Result<Vec<Synced>> {
        let inner = &self.inner;
        let mut watches = inner.lock_watches();
        watches.running = true;
        let pending = std::mem::take(&mut watches.pending);
        for watch in pending {
            let (synced, task) = watch
                .spawn(inner.queue.clone(), inner.stop_sources.clone())
                .map_err(|source| inner.source_error(source))?;
            watches.synced.push(synced);
            watches.tasks.push(task);
        }
        Ok(watches.synced.clone())
    }

    /// Waits up to the cache-sync timeout for `synced`, saying now and then what is
    /// missing: `true` once all synced, `false` if `shutdown` came first. Stops the watches
    /// unless they synced.
    async fn wait_for_sync(&self, synced: &[Synced], shutdown: &Shutdown) -> Result<bool> {
        let inner = &self.inner;
        tracing::info!(controller = %inner.name, sources = synced.len(), "waiting for sources to sync");
        let sync = tokio::time::timeout(inner.cache_sync_timeout, all_synced(&inner.name, synced));
        tokio::select! {
            _ = shutdown.stopped() => {
                self.stop_watches().await;
                Ok(false)
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
                Ok(true)
            }
        }
    }

    /// Spawns the workers, each taking requests while `gate` (and `shard`) admit them,
    /// until `stopping`. Each is tracked on `shutdown`: if `run` is aborted at the deadline
    /// (a reconcile ignoring its context), the set drops and aborts them, and whoever
    /// aborted `run` joins them through `shutdown`.
    fn start_workers(
        &self,
        gate: &LeaderGate,
        shard: Option<&ShardGate>,
        stopping: &CancellationToken,
        shutdown: &Shutdown,
    ) -> JoinSet<()> {
        let inner = &self.inner;
        if gate.is_open() {
            tracing::info!(controller = %inner.name, workers = inner.workers, "starting workers");
        } else {
            tracing::info!(controller = %inner.name, workers = inner.workers,
                "starting workers; they wait for leadership (events are queued meanwhile)");
        }
        inner.metrics().set_max_concurrent(inner.workers);
        let mut workers = JoinSet::new();
        for _ in 0..inner.workers {
            workers.spawn(shutdown.track(worker(
                Arc::clone(inner),
                gate.clone(),
                shard.cloned(),
                stopping.clone(),
            )));
        }
        workers
    }

    /// Waits for the workers to return; when the stop's deadline nears with reconciles
    /// still running, cancels their contexts and waits for them.
    async fn join_workers(
        &self,
        shutdown: &Shutdown,
        workers: &mut JoinSet<()>,
    ) -> Vec<Result<(), tokio::task::JoinError>> {
        let inner = &self.inner;
        let finished = match self.cancel_contexts_at(shutdown) {
            Some(at) => tokio::time::timeout_at(at, join_all_of(workers)).await.ok(),
            None => Some(join_all_of(workers).await),
        };
        match finished {
            Some(done) => done,
            None => {
                tracing::warn!(controller = %inner.name,
                    "reconciles still running as the stop's deadline nears: cancelling their contexts");
                inner.hard_stop.cancel();
                join_all_of(workers).await
            }
        }
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
    let handoff: Arc<str> = Arc::from(rudder_core::cause::source::HANDOFF);
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
            let cause = rudder_core::cause::Cause::new(Arc::clone(&handoff), "handoff");
            queue.add_with_payload(
                key,
                rudder_workqueue::AddOptions::new(),
                rudder_core::cause::QueuedCauses::new(cause),
            );
        }
    }
}

/// Starts queueing the keys of each shard as it opens, when the controller is sharded and
/// no other controller on the gate took its openings.
fn start_resync(shard: Option<&ShardGate>, queue: &Queue) -> JoinSet<()> {
    let mut resyncs = JoinSet::new();
    if let Some(shard) = shard
        && let Some(opened) = shard.take_opened()
    {
        resyncs.spawn(resync(shard.clone(), opened, queue.clone()));
    }
    resyncs
}

/// Resolves once every source in `synced` has synced, warning every
/// `SYNC_REPORT_PERIOD` how many have not.
async fn all_synced(name: &str, synced: &[Synced]) {
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
                    controller = %name,
                    pending,
                    total = synced.len(),
                    "sources still not synced; is every watched type served (CRDs \
                     installed) and readable with this identity's RBAC?"
                );
            }
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
