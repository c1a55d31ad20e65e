//! One worker's loop: taking a request while the gates admit it, reconciling it, and queueing
//! what the outcome asks for.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::{Either, FutureExt, select};
use rudder_core::Queue;
use rudder_core::Request;
use rudder_core::cause::Cause;
use rudder_core::cause::QueuedCauses;
use rudder_core::{cause, panic_message};
use rudder_workqueue::AddOptions;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Inner;
use crate::error::{ErrorChain, is_terminal};
use crate::gate::LeaderGate;
use crate::own_writes::{Gate, OwnWrites};
use crate::reconciler::{Action, BoxError, Context, Next, ReconcileId, Reconciler};
use crate::shard::{ShardGate, ShardPermit};
use rudder_core::writes::{WriteObserver, WriteScope};

/// A request handed to a worker, with the causes of its run.
type WorkItem = rudder_workqueue::WorkItem<Request, QueuedCauses>;

/// One worker: takes requests while `gate` is open, until the controller stops, reconciling
/// each.
pub(super) async fn worker<R: Reconciler>(
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
            && let Some((item, permit)) = admit_shard(&inner, shard.as_ref(), item)
            && let Some(item) = admit_fresh(inner.own_writes.as_deref(), item)
        {
            process(&inner, item, permit).await;
        }
    }
}

/// Hands `item` on if `gate` is open now; otherwise puts its key back in `queue` at its
/// priority with its causes (queued again once the item is dropped, here) and hands
/// nothing on.
fn admit(queue: &Queue, gate: &LeaderGate, mut item: WorkItem) -> Option<WorkItem> {
    if gate.is_open() {
        return Some(item);
    }
    let options = AddOptions::new().priority(item.priority());
    queue.add_with_payload(item.key().clone(), options, item.take_payload());
    None
}

/// Hands `item` on with its shard permit if `shard` admits its key (or there is no shard
/// gate); otherwise drops it, forgetting its retries: the replica owning its shard
/// reconciles it.
fn admit_shard<R>(
    inner: &Inner<R>,
    shard: Option<&ShardGate>,
    item: WorkItem,
) -> Option<(WorkItem, Option<ShardPermit>)> {
    let Some(shard) = shard else {
        return Some((item, None));
    };
    match shard.admit(item.key()) {
        Some(permit) => Some((item, Some(permit))),
        None => {
            tracing::trace!(request = %item.key(), "not this replica's shard: dropped");
            inner.queue.forget(item.key());
            // Its causes go with it: the shard's holder records its own.
            None
        }
    }
}

/// Hands `item` on unless the cache has not yet delivered the writes of its key's last
/// reconcile; such a key is put back to run when they arrive or the bound passes, and takes
/// no worker meanwhile.
fn admit_fresh(own_writes: Option<&OwnWrites>, mut item: WorkItem) -> Option<WorkItem> {
    let Some(writes) = own_writes else {
        return Some(item);
    };
    match writes.check(item.key(), item.priority()) {
        Gate::Run => Some(item),
        Gate::Hold(delay) => {
            let causes = item.take_payload();
            writes.requeue_held(item.key().clone(), delay, item.priority(), causes);
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
    mut item: WorkItem,
    mut permit: Option<ShardPermit>,
) {
    let request = item.key().clone();
    let id = ReconcileId::new(NEXT_RECONCILE_ID.fetch_add(1, Ordering::Relaxed));
    let cancel = inner.hard_stop.child_token();
    let mut ctx = Context::new(cancel.clone(), id, Arc::clone(&inner.name));
    if let Some(cluster) = &inner.cluster {
        ctx = ctx.with_cluster(Arc::clone(cluster));
    }
    let causes = item.take_payload().into_causes();
    let span = match &causes {
        Some(causes) => {
            let first = causes.first();
            inner.metrics().triggered(first.source(), first.event());
            // From when the run's cause made the key ready (a requeue's own delay is not a
            // wait; a retry's backoff, which only the rate limiter knows, is).
            let waited = first.due().elapsed().unwrap_or_default();
            tracing::info_span!(
                "reconcile",
                controller = %inner.name,
                cluster = inner.cluster.as_deref(),
                request = %request,
                reconcile_id = %id,
                triggers = causes.count(),
                cause = %first,
                last_cause = causes.last().map(tracing::field::display),
                queue_wait_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
            )
        }
        None => {
            inner
                .metrics()
                .triggered(cause::source::UNKNOWN, cause::source::UNKNOWN);
            tracing::info_span!(
                "reconcile",
                controller = %inner.name,
                cluster = inner.cluster.as_deref(),
                request = %request,
                reconcile_id = %id,
            )
        }
    };
    if let Some(causes) = causes {
        ctx = ctx.with_causes(causes);
    }
    inner.metrics().active_workers(1.0);
    let started = Instant::now();
    let reconcile = boxed_reconcile(&inner.reconciler, request.clone(), ctx);
    let reconcile = match &inner.own_writes {
        Some(writes) => {
            let observer: Arc<dyn WriteObserver> = Arc::clone(writes) as _;
            let scope = WriteScope::new(observer, request.clone(), writes.timeout());
            Either::Left(scope.run(reconcile))
        }
        None => Either::Right(reconcile),
    };
    let reconcile = AssertUnwindSafe(reconcile)
        .catch_unwind()
        .instrument(span.clone());
    let reconcile = with_timeout(reconcile, inner.reconcile_timeout, &span, &cancel);
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
        shard_passed(inner, &request, &cancel, permit.as_ref());
        drop(item);
        drop(permit);
        return;
    };
    let outcome = match result {
        Ok(Ok(action)) => requeue(inner, request, action),
        Ok(Err(error)) => {
            let error: BoxError = error.into();
            retry_unless_terminal(inner, request, &*error)
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
            requeue_for(
                inner,
                request,
                AddOptions::new().rate_limited(),
                cause::source::RETRY,
                "panic",
                Duration::ZERO,
            );
            Outcome::Error
        }
    };
    inner.metrics().reconciled(outcome.label());
    drop(item);
    drop(permit);
}

/// The reconciler's future for `request`, on the heap.
///
/// A user's reconcile future can be tens of kilobytes, and every layer `process` wraps it in
/// (the write scope, `catch_unwind`, `instrument`, the timeout, `select!`) moves what it
/// wraps; in a debug build each move is a stack slot of the poll frame, and with a 30 KB
/// future that frame outgrew the 2 MiB stack of a tokio worker. Boxed here, in a frame of its
/// own that is gone before the first poll, each layer moves a pointer and no frame of the
/// worker grows with the reconciler.
#[inline(never)]
fn boxed_reconcile<R: Reconciler>(
    reconciler: &R,
    request: Request,
    ctx: Context,
) -> Pin<Box<impl Future<Output = Result<Action, R::Error>> + Send + use<'_, R>>> {
    Box::pin(reconciler.reconcile(request, ctx))
}

/// Runs `reconcile`, cancelling its context (`cancel`) once `timeout` passes and then
/// waiting for it to return.
async fn with_timeout<T>(
    reconcile: impl Future<Output = T>,
    timeout: Option<Duration>,
    span: &tracing::Span,
    cancel: &CancellationToken,
) -> T {
    let Some(timeout) = timeout else {
        return reconcile.await;
    };
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

/// Counts and logs a reconcile cancelled because this replica's hold on its key's shard
/// passed, and forgets the key: the shard's new holder reconciles it.
fn shard_passed<R>(
    inner: &Inner<R>,
    request: &Request,
    cancel: &CancellationToken,
    permit: Option<&ShardPermit>,
) {
    cancel.cancel();
    metrics::counter!(crate::metrics::SHARD_CANCELLED_TOTAL, "controller" => inner.name.to_string())
        .increment(1);
    // Counted as an error, as controller-runtime counts every reconcile that did not
    // succeed in both `reconcile_total{result="error"}` and `reconcile_errors_total`.
    inner.metrics().error();
    tracing::warn!(
        shard = permit.map(ShardPermit::shard),
        "this replica's hold on the key's shard passed while it was reconciled: \
         reconcile cancelled (the shard's new holder reconciles the key)"
    );
    inner.queue.forget(request);
    inner.metrics().reconciled(Outcome::Error.label());
}

/// Counts and logs a failed reconcile, and queues it again with backoff unless its error is
/// terminal.
fn retry_unless_terminal<R>(
    inner: &Inner<R>,
    request: Request,
    error: &(dyn std::error::Error + 'static),
) -> Outcome {
    inner.metrics().error();
    if is_terminal(error) {
        inner.metrics().terminal_error();
        tracing::error!(error = %ErrorChain(error), "reconcile failed with a terminal error; not retrying");
        inner.queue.forget(&request);
    } else {
        tracing::error!(error = %ErrorChain(error), "reconcile failed; retrying with backoff");
        requeue_for(
            inner,
            request,
            AddOptions::new().rate_limited(),
            cause::source::RETRY,
            "error",
            Duration::ZERO,
        );
    }
    Outcome::Error
}

/// Queues `request` again with `options`, carrying why (`source` one of
/// [`cause::source`]'s): to be ready after `after` at the earliest.
fn requeue_for<R>(
    inner: &Inner<R>,
    request: Request,
    options: AddOptions,
    source: &'static str,
    event: &'static str,
    after: Duration,
) {
    /// The worker's sources, made once.
    static SOURCES: std::sync::LazyLock<[Arc<str>; 2]> = std::sync::LazyLock::new(|| {
        [
            Arc::from(cause::source::REQUEUE),
            Arc::from(cause::source::RETRY),
        ]
    });
    let source = match source {
        cause::source::REQUEUE => Arc::clone(&SOURCES[0]),
        cause::source::RETRY => Arc::clone(&SOURCES[1]),
        other => Arc::from(other),
    };
    let cause = QueuedCauses::new(Cause::scheduled(source, event, after));
    inner.queue.add_with_payload(request, options, cause);
}

/// Queues what a successful reconcile asked for.
fn requeue<R>(inner: &Inner<R>, request: Request, action: Action) -> Outcome {
    let priority = action.priority().unwrap_or(0);
    match action.next() {
        Next::Done => {
            inner.queue.forget(&request);
            Outcome::Success
        }
        Next::Requeue => {
            let options = AddOptions::new().rate_limited().priority(priority);
            requeue_for(
                inner,
                request,
                options,
                cause::source::REQUEUE,
                "requeue",
                Duration::ZERO,
            );
            Outcome::Requeue
        }
        Next::RequeueAfter(delay) => {
            inner.queue.forget(&request);
            let options = AddOptions::new().after(delay).priority(priority);
            requeue_for(
                inner,
                request,
                options,
                cause::source::REQUEUE,
                "requeue_after",
                delay,
            );
            Outcome::RequeueAfter
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::watch;
    use tokio::time::Instant;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_taken_as_the_gate_closed_goes_back_at_its_priority() {
        let queue = Queue::builder_with_payload().build();
        queue.add_with_payload(
            Request::namespaced("ns", "low"),
            AddOptions::new().priority(-100),
            QueuedCauses::new(Cause::new(Arc::from("for"), "create")),
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
        let causes = again.payload().get().expect("its causes went back with it");
        assert_eq!(
            (causes.count(), causes.first().to_string()),
            (1, "for/create".into())
        );
        drop(again);
        validity.send_replace(None);
        assert!(queue.is_empty());
    }
}
