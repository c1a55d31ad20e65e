//! The queue handle: adding keys, handing them to workers, shutting down.

use std::fmt;
use std::future::{Future, poll_fn};
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::metrics::{MetricsProvider, QueueMetrics, UNFINISHED_WORK_UPDATE_PERIOD};
use crate::rate_limiter::{RateLimiter, default_controller_rate_limiter};
use crate::state::{Effect, Nanos, State};
use crate::{AddOptions, WorkItem};

/// How long a key must wait to be worth one priority level, unless the builder says otherwise.
///
/// With this default a key at priority -100 (rudder-handler's low priority for the initial
/// list) lets newer priority-0 keys go first for at most 100 seconds, then takes its turn.
pub const DEFAULT_PRIORITY_AGING: Duration = Duration::from_secs(1);

/// An async work queue with client-go's processing rules; a cheap handle to clone.
///
/// See the [crate documentation](crate) for the rules and an example.
pub struct WorkQueue<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

pub(crate) struct Shared<K> {
    state: Mutex<State<K>>,
    /// Getters waiting for a ready key.
    ready: Notify,
    /// The getter whose timer is armed, when an earlier ready time arrives.
    rearm: Notify,
    /// `shutdown_with_drain` callers, when the last in-flight key is done.
    drained: Notify,
    epoch: Instant,
    name: String,
    limiter: Box<dyn RateLimiter<K>>,
    metrics: Option<Box<dyn QueueMetrics>>,
    updater: Mutex<Option<JoinHandle<()>>>,
}

impl<K> Drop for Shared<K> {
    fn drop(&mut self) {
        let updater = self
            .updater
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(task) = updater.take() {
            task.abort();
        }
    }
}

/// Builds a [`WorkQueue`] with a name, a rate limiter, a priority ageing rule and metrics.
pub struct Builder<K> {
    name: String,
    limiter: Option<Box<dyn RateLimiter<K>>>,
    aging: Option<Duration>,
    metrics: Option<Box<dyn MetricsProvider>>,
}

impl<K> fmt::Debug for Builder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.name)
            .field("aging", &self.aging)
            .field("metrics", &self.metrics.is_some())
            .finish_non_exhaustive()
    }
}

impl<K> Builder<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
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
    /// The unfinished-work gauges are refreshed every 500 ms by a task spawned on the tokio
    /// runtime the queue is built in; it ends when the queue is dropped. Outside a runtime
    /// those two gauges are not refreshed.
    pub fn metrics(mut self, provider: impl MetricsProvider + 'static) -> Self {
        self.metrics = Some(Box::new(provider));
        self
    }

    /// Builds the queue.
    pub fn build(self) -> WorkQueue<K> {
        let aging = self
            .aging
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1));
        let metrics = self.metrics.map(|p| p.queue_metrics(&self.name));
        let has_metrics = metrics.is_some();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(aging)),
            ready: Notify::new(),
            rearm: Notify::new(),
            drained: Notify::new(),
            epoch: Instant::now(),
            name: self.name,
            limiter: self
                .limiter
                .unwrap_or_else(|| Box::new(default_controller_rate_limiter())),
            metrics,
            updater: Mutex::new(None),
        });
        if has_metrics {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let task = runtime.spawn(update_unfinished_work(Arc::downgrade(&shared)));
                *shared
                    .updater
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(task);
            }
        }
        WorkQueue { shared }
    }
}

impl<K> WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A queue with the default controller rate limiter, default priority ageing and no metrics.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Starts building a queue.
    pub fn builder() -> Builder<K> {
        Builder {
            name: String::new(),
            limiter: None,
            aging: Some(DEFAULT_PRIORITY_AGING),
            metrics: None,
        }
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
        let shared = &*self.shared;
        let mut delay = options.after.unwrap_or(Duration::ZERO);
        if options.rate_limited {
            delay = delay.max(shared.limiter.when(&key));
            if let Some(m) = &shared.metrics {
                m.retry();
            }
        }
        let delay = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        let mut clock = Clock::new(shared);
        let mut st = shared.lock();
        let effect = st.add(key, delay, options.priority, &mut || clock.now());
        let wake = Wake::for_effect(&st, effect);
        let depth = st.depth();
        drop(st);
        wake.fire(shared);
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
    pub async fn get(&self) -> Option<WorkItem<K>> {
        let shared = &*self.shared;
        // Fast path: something is ready, no waiting machinery needed.
        if let Some(item) = self.pop_locked(shared.lock()) {
            return Some(item);
        }
        let mut parked = Parked {
            shared,
            waiting: false,
            timer: false,
        };
        loop {
            let mut ready = pin!(shared.ready.notified());
            let mut rearm = pin!(shared.rearm.notified());
            let deadline = {
                let mut st = shared.lock();
                parked.leave(&mut st);
                if let Some(item) = self.pop_locked(st) {
                    return Some(item);
                }
                let mut st = shared.lock();
                if st.shutting_down && st.ready_len() == 0 {
                    return None;
                }
                if st.ready_len() > 0 {
                    // Another getter took the lock between our pop and now and left work:
                    // look again rather than sleep.
                    continue;
                }
                ready.as_mut().enable();
                st.waiters += 1;
                parked.waiting = true;
                let deadline = match st.armed {
                    Some(_) => None,
                    None => st.next_ready_at(),
                };
                if let Some(at) = deadline {
                    st.armed = Some(at);
                    parked.timer = true;
                    rearm.as_mut().enable();
                }
                deadline
            };
            match deadline {
                None => ready.await,
                Some(at) => {
                    let mut sleep = pin!(tokio::time::sleep_until(shared.instant(at)));
                    poll_fn(|cx| {
                        if ready.as_mut().poll(cx).is_ready()
                            || rearm.as_mut().poll(cx).is_ready()
                            || sleep.as_mut().poll(cx).is_ready()
                        {
                            Poll::Ready(())
                        } else {
                            Poll::Pending
                        }
                    })
                    .await;
                }
            }
        }
    }

    /// Hands out a ready key without waiting, or `None` if no key is ready now.
    pub fn try_get(&self) -> Option<WorkItem<K>> {
        self.pop_locked(self.shared.lock())
    }

    /// Clears the rate limiter's memory of `key` (call it when the key succeeded).
    pub fn forget(&self, key: &K) {
        self.shared.limiter.forget(key);
    }

    /// How many failures of `key` the rate limiter remembers.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.shared.limiter.num_requeues(key)
    }

    /// Keys ready to be handed out now.
    pub fn len(&self) -> usize {
        self.shared.lock().ready_len()
    }

    /// Whether no key is ready to be handed out now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts of the keys the queue knows, by where they stand.
    pub fn stats(&self) -> QueueStats {
        let st = self.shared.lock();
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
        shared.lock().shut_down(now);
        shared.ready.notify_waiters();
        shared.rearm.notify_waiters();
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

    /// Pops with the lock held, then reports and wakes after releasing it.
    fn pop_locked(&self, mut st: MutexGuard<'_, State<K>>) -> Option<WorkItem<K>> {
        let shared = &*self.shared;
        let mut clock = Clock::new(shared);
        if st.delayed_len() > 0 {
            st.promote(clock.now());
        }
        if st.ready_len() == 0 {
            return None;
        }
        let now = if shared.metrics.is_some() {
            clock.now()
        } else {
            0
        };
        let popped = st.pop(now)?;
        // Pass the baton: more ready keys, or delayed keys nobody's timer covers.
        let wake_next =
            st.waiters > 0 && (st.ready_len() > 0 || (st.armed.is_none() && st.delayed_len() > 0));
        let depth = st.depth();
        drop(st);
        if wake_next {
            shared.ready.notify_one();
        }
        if let Some(m) = &shared.metrics {
            m.set_depth(depth);
            m.queue_latency(Duration::from_nanos(popped.queued_for));
        }
        Some(WorkItem::new(
            popped.key,
            popped.slot,
            popped.priority,
            self.clone(),
        ))
    }

    /// Marks the key in `slot` done (called by [`WorkItem`]).
    pub(crate) fn finish(&self, slot: u32) {
        let shared = &*self.shared;
        let mut clock = Clock::new(shared);
        let mut st = shared.lock();
        // The clock is only needed to requeue a dirty key or to measure work time.
        let now = if shared.metrics.is_some() || st.depth() > st.ready_len() {
            clock.now()
        } else {
            0
        };
        let finished = st.done(slot, now);
        let wake = Wake::for_effect(&st, finished.effect);
        let drained = st.shutting_down && st.processing_len() == 0;
        let depth = st.depth();
        drop(st);
        wake.fire(shared);
        if drained {
            shared.drained.notify_waiters();
        }
        if let Some(m) = &shared.metrics {
            m.work_duration(Duration::from_nanos(finished.worked_for));
            m.set_depth(depth);
        }
    }
}

impl<K> Default for WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for WorkQueue<K> {
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

impl<K> Shared<K> {
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // No code path panics with the lock held except on broken invariants; if a key's own
        // Hash or Eq panicked, the state is still consistent enough to keep serving others.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> Nanos {
        let since = Instant::now().saturating_duration_since(self.epoch);
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }

    fn instant(&self, at: Nanos) -> Instant {
        self.epoch + Duration::from_nanos(at)
    }
}

/// Reads the clock at most once per operation, and only if it is needed.
struct Clock<'a, K> {
    shared: &'a Shared<K>,
    now: Option<Nanos>,
}

impl<'a, K> Clock<'a, K> {
    fn new(shared: &'a Shared<K>) -> Self {
        Self { shared, now: None }
    }

    fn now(&mut self) -> Nanos {
        *self.now.get_or_insert_with(|| self.shared.now())
    }
}

/// Whom to wake after an operation, decided under the lock and done after it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wake {
    Nobody,
    Getter,
    TimerOwner,
}

impl Wake {
    fn for_effect<K>(st: &State<K>, effect: Effect) -> Self {
        if effect.became_ready && st.waiters > 0 {
            Wake::Getter
        } else if effect.new_earliest_delay {
            if st.armed.is_some() {
                Wake::TimerOwner
            } else if st.waiters > 0 {
                // A parked getter will arm a timer for it.
                Wake::Getter
            } else {
                Wake::Nobody
            }
        } else {
            Wake::Nobody
        }
    }

    fn fire<K>(self, shared: &Shared<K>) {
        match self {
            Wake::Nobody => {}
            Wake::Getter => shared.ready.notify_one(),
            Wake::TimerOwner => shared.rearm.notify_one(),
        }
    }
}

/// A getter's registration as a waiter (and maybe as the timer owner); undone when the getter
/// wakes, returns or is cancelled.
struct Parked<'a, K> {
    shared: &'a Shared<K>,
    waiting: bool,
    timer: bool,
}

impl<K> Parked<'_, K> {
    fn leave(&mut self, st: &mut State<K>) -> bool {
        if self.waiting {
            st.waiters -= 1;
            self.waiting = false;
        }
        let was_timer = self.timer;
        if was_timer {
            st.armed = None;
            self.timer = false;
        }
        was_timer
    }
}

impl<K> Drop for Parked<'_, K> {
    fn drop(&mut self) {
        if !self.waiting && !self.timer {
            return;
        }
        let shared = self.shared;
        let mut st = shared.lock();
        let was_timer = self.leave(&mut st);
        // A cancelled timer owner hands the timer to another parked getter.
        let hand_off = was_timer && st.delayed_len() > 0 && st.waiters > 0;
        drop(st);
        if hand_off {
            shared.ready.notify_one();
        }
    }
}

/// Refreshes the unfinished-work gauges until the queue is dropped.
async fn update_unfinished_work<K>(shared: Weak<Shared<K>>) {
    let mut tick = tokio::time::interval(UNFINISHED_WORK_UPDATE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let now = shared.now();
        let (total, longest) = shared.lock().unfinished(now);
        if let Some(m) = &shared.metrics {
            m.unfinished_work(Duration::from_nanos(total), Duration::from_nanos(longest));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(waiters: usize, armed: Option<Nanos>) -> State<u8> {
        let mut st = State::new(None);
        st.waiters = waiters;
        st.armed = armed;
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
        let idle = state(0, None);
        assert!(Wake::for_effect(&idle, READY) == Wake::Nobody);
        assert!(Wake::for_effect(&idle, EARLIER) == Wake::Nobody);
        assert!(Wake::for_effect(&idle, Effect::default()) == Wake::Nobody);
    }

    #[test]
    fn a_ready_key_wakes_one_getter_and_an_earlier_delay_the_timer_owner() {
        assert!(Wake::for_effect(&state(2, None), READY) == Wake::Getter);
        assert!(Wake::for_effect(&state(2, Some(5)), EARLIER) == Wake::TimerOwner);
        // Nobody holds the timer yet: a parked getter wakes to arm it.
        assert!(Wake::for_effect(&state(1, None), EARLIER) == Wake::Getter);
    }
}
