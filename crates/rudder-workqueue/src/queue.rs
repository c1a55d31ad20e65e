//! The queue handle: adding keys, handing them to workers, shutting down; and the guard
//! ([`WorkItem`]) a worker holds while it processes a key, beside the queue it belongs to (as
//! a lock's guard is beside its lock).

use std::fmt;
use std::future::{Future, poll_fn};
use std::hash::{BuildHasher, Hash};
use std::ops::Deref;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Poll, Waker};
use std::time::Duration;

use hashbrown::DefaultHashBuilder;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::clock::Nanos;
use crate::metrics::{MetricsProvider, QueueMetrics, UNFINISHED_WORK_UPDATE_PERIOD};
use crate::rate_limiter::{RateLimiter, default_controller_rate_limiter};
use crate::state::{Armed, Effect, State};
use crate::{AddOptions, Payload};

/// How long a key must wait to be worth one priority level, unless the builder says otherwise.
///
/// With this default a key at priority -100 (rudder-handler's low priority for the initial
/// list) lets newer priority-0 keys go first for at most 100 seconds, then takes its turn.
pub const DEFAULT_PRIORITY_AGING: Duration = Duration::from_secs(1);

/// An async work queue with client-go's processing rules; a cheap handle to clone.
///
/// See the [crate documentation](crate) for the rules and an example. `P` is what each
/// queued key carries ([`Payload`]; nothing by default). A handle carries one too
/// ([`set_payload`](Self::set_payload)), which its adds bring to their keys.
pub struct WorkQueue<K, P = ()> {
    shared: Arc<Shared<K, P>>,
    /// What this handle's adds carry, unless they name their own.
    payload: P,
}

impl<K, P: Clone> Clone for WorkQueue<K, P> {
    /// Another handle to the same queue, carrying what this one carries.
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            payload: self.payload.clone(),
        }
    }
}

pub(crate) struct Shared<K, P> {
    /// Every operation takes this lock. parking_lot's rather than std's: with producers and
    /// workers on different threads the lock is contended on every key, and std's futex mutex
    /// (spin, then sleep in the kernel) made the 2-producer, 2-worker bench 1.5-2x slower
    /// than parking_lot's (spin with backoff, yield, then park); uncontended they cost the
    /// same (docs/benchmarks.md).
    state: Mutex<State<K, P>>,
    /// Hashes keys before the lock is taken, so hashing a long key holds no one up.
    hasher: DefaultHashBuilder,
    /// Whether the last add read the clock (it queued a key, with ageing on or a delay).
    /// The next add then reads it before taking the lock, so the read (tens of nanoseconds,
    /// more on some virtual machines) does not lengthen the critical section; a run of
    /// dedup hits, which need no time, stops the early reads.
    adds_need_time: AtomicBool,
    /// `shutdown_with_drain` callers, when the last in-flight key is done.
    drained: Notify,
    epoch: Instant,
    name: String,
    limiter: Box<dyn RateLimiter<K>>,
    metrics: Option<Box<dyn QueueMetrics>>,
    /// Woken when a worker takes a key while none was processing: the unfinished-work
    /// updater sleeps on it while the queue is idle (metrics on only).
    busy: Arc<Notify>,
    updater: Mutex<Option<JoinHandle<()>>>,
}

impl<K, P> Drop for Shared<K, P> {
    fn drop(&mut self) {
        let updater = self.updater.get_mut();
        if let Some(task) = updater.take() {
            task.abort();
        }
    }
}

/// Builds a [`WorkQueue`] with a name, a rate limiter, a priority ageing rule and metrics.
pub struct Builder<K, P = ()> {
    name: String,
    limiter: Option<Box<dyn RateLimiter<K>>>,
    aging: Option<Duration>,
    metrics: Option<Box<dyn MetricsProvider>>,
    payload: std::marker::PhantomData<fn() -> P>,
}

impl<K, P> fmt::Debug for Builder<K, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.name)
            .field("aging", &self.aging)
            .field("metrics", &self.metrics.is_some())
            .finish_non_exhaustive()
    }
}

impl<K, P> Builder<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    /// The queue's name, used as the `name` label of its metrics.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The limiter [`WorkQueue::add_rate_limited`] consults (default:
    /// [`default_controller_rate_limiter`]).
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<K> + 'static) -> Self {
        self.limiter = Some(Box::new(limiter));
        self
    }

    /// How long a ready key must wait to gain one priority level over newer keys (default
    /// [`DEFAULT_PRIORITY_AGING`]); `None` for strict priority, where a steady stream of
    /// higher-priority keys can hold lower ones back indefinitely.
    pub fn priority_aging(mut self, per_level: Option<Duration>) -> Self {
        self.aging = per_level;
        self
    }

    /// Reports the queue's metrics to `provider`.
    ///
    /// The unfinished-work gauges are refreshed every 500 ms while keys are in flight, and
    /// set to zero once none is, by a task spawned on the tokio runtime the queue is built
    /// in: an idle queue wakes nothing (a process of many idle queues, a fleet's, spends no
    /// CPU on them). The task ends when the queue is dropped. Outside a runtime those two
    /// gauges are not refreshed.
    pub fn metrics(mut self, provider: impl MetricsProvider + 'static) -> Self {
        self.metrics = Some(Box::new(provider));
        self
    }

    /// Builds the queue.
    pub fn build(self) -> WorkQueue<K, P> {
        let aging = self
            .aging
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1));
        let metrics = self.metrics.map(|p| p.queue_metrics(&self.name));
        let has_metrics = metrics.is_some();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(aging, has_metrics)),
            hasher: DefaultHashBuilder::default(),
            adds_need_time: AtomicBool::new(false),
            drained: Notify::new(),
            epoch: Instant::now(),
            name: self.name,
            limiter: self
                .limiter
                .unwrap_or_else(|| Box::new(default_controller_rate_limiter())),
            metrics,
            busy: Arc::new(Notify::new()),
            updater: Mutex::new(None),
        });
        if has_metrics && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            #[allow(
                clippy::disallowed_methods,
                reason = "owned: the queue holds the handle and aborts it when dropped (the task holds only a Weak)"
            )]
            let task = runtime.spawn(update_unfinished_work(
                Arc::downgrade(&shared),
                Arc::clone(&shared.busy),
            ));
            *shared.updater.lock() = Some(task);
        }
        WorkQueue {
            shared,
            payload: P::default(),
        }
    }
}

impl<K> WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A queue with the default controller rate limiter, default priority ageing and no
    /// metrics, whose keys carry nothing.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Starts building a queue whose keys carry nothing
    /// ([`builder_with_payload`](Self::builder_with_payload) for a queue whose keys do).
    pub fn builder() -> Builder<K> {
        Self::builder_with_payload()
    }
}

impl<K, P> WorkQueue<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    /// Starts building a queue whose keys carry a `P` ([`Payload`]).
    pub fn builder_with_payload() -> Builder<K, P> {
        Builder {
            name: String::new(),
            limiter: None,
            aging: Some(DEFAULT_PRIORITY_AGING),
            metrics: None,
            payload: std::marker::PhantomData,
        }
    }

    /// Makes this handle's adds carry `payload` (each add a clone of it), and returns what
    /// they carried before. Other handles, clones made earlier included, are not changed;
    /// a clone made later carries it too. [`add_with_payload`](Self::add_with_payload)
    /// names its own.
    pub fn set_payload(&mut self, payload: P) -> P {
        std::mem::replace(&mut self.payload, payload)
    }

    /// What this handle's adds carry.
    pub fn payload(&self) -> &P {
        &self.payload
    }

    /// The queue's name (empty unless the builder set one).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Queues `key` to run now, at priority 0.
    ///
    /// Adding a key that is already waiting does nothing (beyond moving it earlier if it was
    /// delayed); adding a key that a worker holds makes it run once more after the worker is
    /// done. Adds after [`shutdown`](Self::shutdown) are ignored.
    pub fn add(&self, key: K) {
        self.add_with(key, AddOptions::new());
    }

    /// Queues `key` to run once `delay` has passed. If the key is already waiting, the earlier
    /// of the two times wins; it runs once.
    pub fn add_after(&self, key: K, delay: Duration) {
        self.add_with(key, AddOptions::new().after(delay));
    }

    /// Queues `key` after the delay the rate limiter gives it, recording a failure.
    pub fn add_rate_limited(&self, key: K) {
        self.add_with(key, AddOptions::new().rate_limited());
    }

    /// Queues `key` with `options`: a delay, a rate-limited delay (the longer of the two
    /// wins), and a priority. Merging with a waiting key keeps the highest priority and the
    /// earliest ready time.
    pub fn add_with(&self, key: K, options: AddOptions) {
        self.add_with_payload(key, options, self.payload.clone());
    }

    /// [`add_with`](Self::add_with), the key carrying `payload` rather than this handle's:
    /// merged into what the key's pending run carries ([`Payload::merge`]), whether or not
    /// the add changes anything else. After [`shutdown`](Self::shutdown) it is dropped.
    pub fn add_with_payload(&self, key: K, options: AddOptions, payload: P) {
        let shared = &*self.shared;
        let delay = if options.after.is_none() && !options.rate_limited {
            0
        } else {
            let mut delay = options.after.unwrap_or(Duration::ZERO);
            if options.rate_limited {
                delay = delay.max(shared.limiter.when(&key));
                if let Some(m) = &shared.metrics {
                    m.retry();
                }
            }
            u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX)
        };
        let hash = shared.hasher.hash_one(&key);
        let mut clock = Clock::new(shared);
        let predicted = shared.adds_need_time.load(Ordering::Relaxed);
        if predicted {
            clock.now();
        }
        let mut asked = false;
        let mut st = shared.lock();
        let effect = st.add(key, hash, delay, options.priority, payload, &mut || {
            asked = true;
            clock.now()
        });
        let waker = wake_for(&mut st, effect);
        let depth = st.depth();
        drop(st);
        wake(waker);
        if asked != predicted {
            shared.adds_need_time.store(asked, Ordering::Relaxed);
        }
        if let Some(m) = &shared.metrics {
            if effect.counted_add {
                m.add();
                m.set_depth(depth);
            } else if effect.became_ready {
                m.set_depth(depth);
            }
        }
    }

    /// Waits for a key and hands it out; `None` once the queue is shut down and no key is
    /// ready.
    ///
    /// The key is the caller's until the returned [`WorkItem`] is done or dropped: no other
    /// getter receives it meanwhile. Getters are served by priority, then by the time their
    /// keys became ready. Cancelling this future loses nothing.
    pub async fn get(&self) -> Option<WorkItem<K, P>> {
        let shared = &*self.shared;
        // Fast path: a key is ready; no waiting machinery is built. (With nothing ready, the
        // first poll below looks at the delayed keys, which needs the clock.)
        if let Some(item) = self.pop_if_ready() {
            return Some(item);
        }
        let mut parked = Parked {
            shared,
            id: None,
            timer: false,
        };
        // Created only if this getter comes to hold the timer for the earliest delayed key, so
        // the common case (a key is ready on the first poll) touches no timer at all.
        let mut sleep = pin!(None::<tokio::time::Sleep>);
        let mut sleep_at = None;
        poll_fn(|cx| {
            loop {
                let mut st = shared.lock();
                parked.leave(&mut st);
                st = match self.try_pop(st) {
                    Ok(item) => return Poll::Ready(Some(item)),
                    Err(st) => st,
                };
                if st.shutting_down {
                    return Poll::Ready(None);
                }
                let id = st.waiters.park(cx.waker());
                parked.id = Some(id);
                let deadline = match st.armed {
                    Some(_) => None,
                    None => st.next_ready_at(),
                };
                let Some(at) = deadline else {
                    return Poll::Pending;
                };
                st.armed = Some(Armed { at, waiter: id });
                parked.timer = true;
                drop(st);
                if sleep_at != Some(at) {
                    match sleep.as_mut().as_pin_mut() {
                        Some(timer) => timer.reset(shared.instant(at)),
                        None => sleep.set(Some(tokio::time::sleep_until(shared.instant(at)))),
                    }
                    sleep_at = Some(at);
                }
                if let Some(timer) = sleep.as_mut().as_pin_mut()
                    && timer.poll(cx).is_pending()
                {
                    return Poll::Pending;
                }
                // The timer has fired: look again.
            }
        })
        .await
    }

    /// Hands out a ready key without waiting, or `None` if no key is ready now.
    pub fn try_get(&self) -> Option<WorkItem<K, P>> {
        self.try_pop(self.shared.lock()).ok()
    }

    /// Clears the rate limiter's memory of `key` (call it when the key succeeded).
    pub fn forget(&self, key: &K) {
        self.shared.limiter.forget(key);
    }

    /// How many failures of `key` the rate limiter remembers.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.shared.limiter.num_requeues(key)
    }

    /// Keys ready to be handed out now, delayed keys that are due included.
    pub fn len(&self) -> usize {
        self.shared.lock_due().ready_len()
    }

    /// Whether no key is ready to be handed out now (nor any delayed key due).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts of the keys the queue knows, by where they stand (a delayed key that is due
    /// counts as ready).
    pub fn stats(&self) -> QueueStats {
        let st = self.shared.lock_due();
        QueueStats {
            ready: st.ready_len(),
            delayed: st.delayed_len(),
            processing: st.processing_len(),
            bookkeeping_bytes: st.footprint(),
        }
    }

    /// Stops the queue: later adds are ignored, delayed keys are dropped, getters receive the
    /// keys that are ready and then `None`. Keys added while processing and due now still run
    /// once more.
    pub fn shutdown(&self) {
        let shared = &*self.shared;
        let now = shared.now();
        let mut st = shared.lock();
        st.shut_down(now);
        let wakers = st.waiters.notify_all();
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
        shared.drained.notify_waiters();
    }

    /// [`shutdown`](Self::shutdown), then waits until every key handed out is done.
    pub async fn shutdown_with_drain(&self) {
        self.shutdown();
        let shared = &*self.shared;
        loop {
            let mut drained = pin!(shared.drained.notified());
            drained.as_mut().enable();
            if shared.lock().processing_len() == 0 {
                return;
            }
            drained.await;
        }
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.lock().shutting_down
    }

    /// Pops if a key is ready, without looking at delayed keys unless something is ready.
    #[inline]
    fn pop_if_ready(&self) -> Option<WorkItem<K, P>> {
        let st = self.shared.lock();
        if st.ready_len() == 0 {
            return None;
        }
        self.try_pop(st).ok()
    }

    /// Pops with the lock held, then reports and wakes after releasing it; hands the lock
    /// back if nothing is ready.
    #[allow(clippy::result_large_err)]
    #[inline]
    fn try_pop<'a>(
        &self,
        mut st: MutexGuard<'a, State<K, P>>,
    ) -> Result<WorkItem<K, P>, MutexGuard<'a, State<K, P>>> {
        let shared = &*self.shared;
        let mut clock = Clock::new(shared);
        if st.delayed_len() > 0 {
            st.promote(clock.now());
        }
        if st.ready_len() == 0 {
            return Err(st);
        }
        let now = if shared.metrics.is_some() {
            clock.now()
        } else {
            0
        };
        let Some(popped) = st.pop(now) else {
            return Err(st);
        };
        // The first key in flight: the unfinished-work updater starts its rounds.
        let first_in_flight = shared.metrics.is_some() && st.processing_len() == 1;
        // Pass the baton: more ready keys, or delayed keys nobody's timer covers.
        let next = if st.ready_len() > 0 || (st.armed.is_none() && st.delayed_len() > 0) {
            st.waiters.notify_one()
        } else {
            None
        };
        let depth = st.depth();
        drop(st);
        wake(next);
        if first_in_flight {
            shared.busy.notify_one();
        }
        if let Some(m) = &shared.metrics {
            m.set_depth(depth);
            m.queue_latency(Duration::from_nanos(popped.queued_for));
        }
        Ok(WorkItem {
            key: popped.key,
            payload: popped.payload,
            slot: popped.slot,
            priority: popped.priority,
            queue: WorkQueue {
                shared: Arc::clone(&self.shared),
                payload: P::default(),
            },
        })
    }

    /// Marks the key in `slot` done (called by [`WorkItem`]).
    #[inline]
    pub(crate) fn finish(&self, slot: u32) {
        let shared = &*self.shared;
        let mut clock = Clock::new(shared);
        let mut st = shared.lock();
        let finished = st.done(slot, &mut || clock.now());
        let waker = wake_for(&mut st, finished.effect);
        let drained = st.shutting_down && st.processing_len() == 0;
        let depth = st.depth();
        drop(st);
        wake(waker);
        if drained {
            shared.drained.notify_waiters();
        }
        if let Some(m) = &shared.metrics {
            m.work_duration(Duration::from_nanos(finished.worked_for));
            m.set_depth(depth);
        }
    }
}

impl<K, P> Default for WorkQueue<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    /// [`WorkQueue::new`], for any payload.
    fn default() -> Self {
        Self::builder_with_payload().build()
    }
}

impl<K, P> fmt::Debug for WorkQueue<K, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

/// Counts of a queue's keys, from [`WorkQueue::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Keys ready to be handed out.
    pub ready: usize,
    /// Keys waiting for a delay.
    pub delayed: usize,
    /// Keys held by workers.
    pub processing: usize,
    /// Bytes held by the queue's own tables and heaps (not the keys' own heap data).
    pub bookkeeping_bytes: usize,
}

impl<K, P> Shared<K, P> {
    #[inline]
    fn lock(&self) -> MutexGuard<'_, State<K, P>> {
        // parking_lot's lock is not poisoned by a panic: no code path panics with the lock
        // held except on broken invariants, and if a key's own Hash or Eq panicked, the state
        // is still consistent enough to keep serving others.
        self.state.lock()
    }

    /// Locks, with delayed keys that are due moved to the ready queue, as a getter would.
    fn lock_due(&self) -> MutexGuard<'_, State<K, P>>
    where
        K: Hash + Eq + Clone,
        P: Payload,
    {
        let mut st = self.lock();
        if st.delayed_len() > 0 {
            st.promote(self.now());
        }
        st
    }

    #[inline]
    fn now(&self) -> Nanos {
        let since = Instant::now().saturating_duration_since(self.epoch);
        // In u64 (584 years from the epoch), not `as_nanos`' u128.
        since
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(since.subsec_nanos()))
    }

    fn instant(&self, at: Nanos) -> Instant {
        self.epoch + Duration::from_nanos(at)
    }
}

/// Reads the clock at most once per operation, and only if it is needed.
struct Clock<'a, K, P> {
    shared: &'a Shared<K, P>,
    now: Option<Nanos>,
}

impl<'a, K, P> Clock<'a, K, P> {
    fn new(shared: &'a Shared<K, P>) -> Self {
        Self { shared, now: None }
    }

    #[inline]
    fn now(&mut self) -> Nanos {
        *self.now.get_or_insert_with(|| self.shared.now())
    }
}

/// Picks the getter to wake after an operation (under the lock); wake it after unlocking.
#[inline]
fn wake_for<K, P>(st: &mut State<K, P>, effect: Effect) -> Option<Waker> {
    if effect.became_ready {
        st.waiters.notify_one()
    } else if effect.new_earliest_delay {
        match st.armed {
            // The timer owner re-arms for the earlier time.
            Some(armed) => st.waiters.notify(armed.waiter),
            // Nobody holds the timer: a parked getter wakes to arm it.
            None => st.waiters.notify_one(),
        }
    } else {
        None
    }
}

#[inline]
fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

/// A getter's registration as a parked waiter (and maybe as the timer owner); undone when
/// the getter looks again, returns or is cancelled.
struct Parked<'a, K, P> {
    shared: &'a Shared<K, P>,
    id: Option<u32>,
    timer: bool,
}

impl<K, P> Parked<'_, K, P> {
    /// Unregisters. Returns whether this getter owed the queue a look it will now not take:
    /// it was notified, or it held the timer.
    fn leave(&mut self, st: &mut State<K, P>) -> bool {
        let Some(id) = self.id.take() else {
            return false;
        };
        let mut owed = st.waiters.unpark(id);
        if std::mem::take(&mut self.timer) && st.armed.is_some_and(|a| a.waiter == id) {
            st.armed = None;
            owed = true;
        }
        owed
    }
}

impl<K, P> Drop for Parked<'_, K, P> {
    fn drop(&mut self) {
        if self.id.is_none() {
            return;
        }
        let mut st = self.shared.lock();
        let owed = self.leave(&mut st);
        // A cancelled getter passes on a wake-up or the timer it will not use.
        let next = if owed && (st.ready_len() > 0 || st.delayed_len() > 0) {
            st.waiters.notify_one()
        } else {
            None
        };
        drop(st);
        wake(next);
    }
}

/// Refreshes the unfinished-work gauges until the queue is dropped.
async fn update_unfinished_work<K, P>(shared: Weak<Shared<K, P>>, busy: Arc<Notify>) {
    loop {
        // Idle (nothing in flight, so both gauges are zero): no rounds, no wake-ups, until a
        // worker takes a key. A take between the check and the wait leaves a permit, so it
        // is not missed.
        let idle = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let idle = shared.lock().processing_len() == 0;
            if idle && let Some(m) = &shared.metrics {
                m.unfinished_work(Duration::ZERO, Duration::ZERO);
            }
            idle
        };
        if idle {
            busy.notified().await;
            continue;
        }
        // Keys in flight: every period, until none is. The first round a period from now, so
        // a key done before then costs no round (a queue that drains between keys wakes
        // this task once per key, not three times).
        let mut tick = tokio::time::interval_at(
            Instant::now() + UNFINISHED_WORK_UPDATE_PERIOD,
            UNFINISHED_WORK_UPDATE_PERIOD,
        );
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let now = shared.now();
            let (total, longest, in_flight) = {
                let st = shared.lock();
                let (total, longest) = st.unfinished(now);
                (total, longest, st.processing_len())
            };
            if let Some(m) = &shared.metrics {
                m.unfinished_work(Duration::from_nanos(total), Duration::from_nanos(longest));
            }
            if in_flight == 0 {
                break;
            }
        }
    }
}

/// A key handed to a worker by [`WorkQueue::get`].
///
/// While it exists no other worker receives the key. Dropping it, or calling
/// [`done`](Self::done), tells the queue the worker is finished; if the key was added again
/// meanwhile it is queued exactly once more. Because dropping counts as done, a worker that
/// panics cannot leave its key stuck.
pub struct WorkItem<K, P = ()>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    key: K,
    payload: P,
    slot: u32,
    priority: i32,
    queue: WorkQueue<K, P>,
}

impl<K, P> WorkItem<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// What the adds of this run carried, merged ([`Payload`]).
    pub fn payload(&self) -> &P {
        &self.payload
    }

    /// Takes what the adds of this run carried, leaving the default. To put the key back
    /// without losing it, add the key with it ([`WorkQueue::add_with_payload`]).
    pub fn take_payload(&mut self) -> P {
        std::mem::take(&mut self.payload)
    }

    /// The priority the key was queued with.
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// The queue the key came from (a handle carrying the default payload).
    pub fn queue(&self) -> &WorkQueue<K, P> {
        &self.queue
    }

    /// Marks the key done; the same as dropping the item.
    pub fn done(self) {}
}

impl<K, P> Drop for WorkItem<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    fn drop(&mut self) {
        self.queue.finish(self.slot);
    }
}

impl<K, P> Deref for WorkItem<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    type Target = K;

    fn deref(&self) -> &K {
        &self.key
    }
}

impl<K, P> fmt::Debug for WorkItem<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static + fmt::Debug,
    P: Payload,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkItem")
            .field("key", &self.key)
            .field("priority", &self.priority)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state with `parked` getters; the first holds the timer if `armed`.
    fn state(parked: usize, armed: bool) -> State<u8, ()> {
        let mut st = State::new(None, false);
        for _ in 0..parked {
            st.waiters.park(Waker::noop());
        }
        if armed {
            st.armed = Some(Armed { at: 5, waiter: 0 });
        }
        st
    }

    const READY: Effect = Effect {
        became_ready: true,
        new_earliest_delay: false,
        counted_add: true,
    };
    const EARLIER: Effect = Effect {
        became_ready: false,
        new_earliest_delay: true,
        counted_add: true,
    };

    #[test]
    fn nobody_is_woken_when_nobody_waits() {
        let mut idle = state(0, false);
        assert!(wake_for(&mut idle, READY).is_none());
        assert!(wake_for(&mut idle, EARLIER).is_none());
        let mut waiting = state(2, false);
        assert!(wake_for(&mut waiting, Effect::default()).is_none());
        assert_eq!(waiting.waiters.parked(), 2);
    }

    #[test]
    fn a_ready_key_wakes_one_getter_and_an_earlier_delay_the_timer_owner() {
        let mut st = state(2, false);
        assert!(wake_for(&mut st, READY).is_some());
        assert_eq!(st.waiters.parked(), 1, "exactly one getter woken");

        let mut st = state(3, true);
        assert!(wake_for(&mut st, EARLIER).is_some());
        assert!(st.waiters.is_notified(0), "the timer owner re-arms");
        assert_eq!(st.waiters.parked(), 2);

        // Nobody holds the timer yet: a parked getter wakes to arm it.
        let mut st = state(1, false);
        assert!(wake_for(&mut st, EARLIER).is_some());
    }
}
