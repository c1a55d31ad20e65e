//! One test per queue rule, on paused tokio time.
#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rudder_workqueue::metrics::MetricsProvider;
use rudder_workqueue::metrics::QueueMetrics;
use rudder_workqueue::rate_limiter::RateLimiter;
use rudder_workqueue::rate_limiter::{ExponentialBackoff, FastSlow};
use rudder_workqueue::{AddOptions, WorkQueue};
use tokio::time::{Instant, advance, timeout};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Hands out every ready key without waiting, marking each done.
fn drain<K>(q: &WorkQueue<K>) -> Vec<K>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
{
    std::iter::from_fn(|| q.try_get().map(|item| item.key().clone())).collect()
}

#[tokio::test(start_paused = true)]
async fn adding_a_waiting_key_does_nothing() {
    let q = WorkQueue::new();
    for _ in 0..3 {
        q.add("a");
    }
    q.add("b");
    assert_eq!(q.len(), 2);
    assert_eq!(drain(&q), ["a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn processing_key_is_never_handed_out_twice() {
    let q = WorkQueue::new();
    q.add(1u64);
    let item = q.get().await.unwrap();
    q.add(1);
    assert!(
        q.try_get().is_none(),
        "a processing key must not be handed out"
    );
    // A second getter waits for it rather than receiving it.
    let waiting = {
        let q = q.clone();
        tokio::spawn(async move { q.get().await.map(|i| *i.key()) })
    };
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    item.done();
    assert_eq!(waiting.await.unwrap(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn readd_during_processing_runs_exactly_once_more() {
    let q = WorkQueue::new();
    q.add("k");
    let item = q.try_get().unwrap();
    for _ in 0..5 {
        q.add("k");
    }
    drop(item);
    assert_eq!(drain(&q), ["k"]);
    assert!(q.try_get().is_none());
    // Without a re-add, done frees the key entirely.
    q.add("k");
    let item = q.try_get().unwrap();
    item.done();
    assert!(q.try_get().is_none());
    assert_eq!(q.stats().processing, 0);
}

#[tokio::test(start_paused = true)]
async fn panicking_worker_does_not_wedge_its_key() {
    let q = WorkQueue::new();
    q.add("k");
    let worker = {
        let q = q.clone();
        tokio::spawn(async move {
            let _item = q.get().await.unwrap();
            q.add("k");
            panic!("reconcile blew up");
        })
    };
    assert!(worker.await.unwrap_err().is_panic());
    // The guard was dropped while unwinding: the key is free and its re-add runs.
    assert_eq!(drain(&q), ["k"]);
}

/// A key whose `Eq` panics when compared with the key named "bad" (every key hashes alike,
/// so adding one compares it with the keys already waiting, under the queue's lock).
#[derive(Clone, Debug)]
struct Touchy(&'static str);

impl std::hash::Hash for Touchy {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        0u8.hash(state);
    }
}

impl PartialEq for Touchy {
    fn eq(&self, other: &Self) -> bool {
        assert!(self.0 != "bad" && other.0 != "bad", "Eq blew up");
        self.0 == other.0
    }
}

impl Eq for Touchy {}

#[tokio::test(start_paused = true)]
async fn a_key_whose_eq_panics_under_the_lock_does_not_wedge_the_queue() {
    let q = WorkQueue::new();
    q.add(Touchy("a"));
    let add_bad = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| q.add(Touchy("bad"))));
    assert!(add_bad.is_err(), "the key's own Eq panicked");
    // The lock was released while unwinding, and the other keys are served as before.
    q.add(Touchy("b"));
    let keys: Vec<_> = drain(&q).into_iter().map(|k| k.0).collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(q.stats().processing, 0);
}

#[tokio::test(start_paused = true)]
async fn add_after_waits_for_the_delay() {
    let q = WorkQueue::new();
    let start = Instant::now();
    q.add_after("k", ms(50));
    assert!(q.try_get().is_none());
    let item = q.get().await.unwrap();
    assert_eq!(start.elapsed(), ms(50));
    assert_eq!(*item.key(), "k");
}

#[tokio::test(start_paused = true)]
async fn delayed_key_added_now_runs_once_now() {
    let q = WorkQueue::new();
    q.add_after("k", ms(100));
    q.add("k");
    assert_eq!(drain(&q), ["k"]);
    advance(ms(200)).await;
    assert!(
        q.try_get().is_none(),
        "the delay was merged, not kept as a second run"
    );
    assert_eq!(q.stats().delayed, 0);
}

#[tokio::test(start_paused = true)]
async fn two_delays_keep_the_earliest() {
    for (first, second) in [(500, 100), (100, 500)] {
        let q = WorkQueue::new();
        let start = Instant::now();
        q.add_after("k", ms(first));
        q.add_after("k", ms(second));
        let item = q.get().await.unwrap();
        assert_eq!(start.elapsed(), ms(100));
        drop(item);
        advance(ms(1000)).await;
        assert!(q.try_get().is_none(), "ran twice for {first}/{second}");
    }
}

#[tokio::test(start_paused = true)]
async fn earlier_delay_rearms_a_parked_getter() {
    let q = WorkQueue::new();
    q.add_after("late", Duration::from_secs(60));
    let getter = {
        let q = q.clone();
        tokio::spawn(async move {
            let item = q.get().await.unwrap();
            (*item.key(), Instant::now())
        })
    };
    tokio::task::yield_now().await;
    let start = Instant::now();
    q.add_after("soon", ms(10));
    let (key, at) = getter.await.unwrap();
    assert_eq!(key, "soon");
    assert_eq!(at - start, ms(10));
}

#[tokio::test(start_paused = true)]
async fn rate_limited_backoff_doubles_per_failure() {
    let q = WorkQueue::builder()
        .rate_limiter(ExponentialBackoff::<&str>::default())
        .build();
    let mut waits = Vec::new();
    for _ in 0..6 {
        let start = Instant::now();
        q.add_rate_limited("k");
        let item = q.get().await.unwrap();
        waits.push(start.elapsed());
        drop(item);
    }
    assert_eq!(waits, [5, 10, 20, 40, 80, 160].map(ms));
    assert_eq!(q.num_requeues(&"k"), 6);
    q.forget(&"k");
    assert_eq!(q.num_requeues(&"k"), 0);
    let start = Instant::now();
    q.add_rate_limited("k");
    q.get().await.unwrap();
    assert_eq!(start.elapsed(), ms(5));
}

#[tokio::test(start_paused = true)]
async fn backoff_reaches_the_cap() {
    let q = WorkQueue::new();
    for _ in 0..30 {
        q.add_rate_limited("k");
        // Jump past any delay so the bucket refills and only the per-key backoff counts.
        advance(Duration::from_secs(1001)).await;
        drop(q.try_get().unwrap());
    }
    let start = Instant::now();
    q.add_rate_limited("k");
    q.get().await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1000));
}

#[tokio::test(start_paused = true)]
async fn rate_limited_and_after_take_the_longer_wait() {
    let q = WorkQueue::builder()
        .rate_limiter(FastSlow::new(ms(5), ms(500), 1))
        .build();
    let start = Instant::now();
    q.add_with("k", AddOptions::new().after(ms(50)).rate_limited());
    q.get().await.unwrap();
    assert_eq!(start.elapsed(), ms(50));
    let start = Instant::now();
    q.add_with("k", AddOptions::new().after(ms(50)).rate_limited());
    q.get().await.unwrap();
    assert_eq!(start.elapsed(), ms(500));
}

#[tokio::test(start_paused = true)]
async fn higher_priority_first_fifo_within_a_priority() {
    let q = WorkQueue::builder().priority_aging(None).build();
    q.add_with("low-1", AddOptions::new().priority(-1));
    advance(ms(1)).await;
    q.add("mid-1");
    advance(ms(1)).await;
    q.add_with("high", AddOptions::new().priority(5));
    advance(ms(1)).await;
    q.add("mid-2");
    advance(ms(1)).await;
    q.add_with("low-2", AddOptions::new().priority(-1));
    assert_eq!(drain(&q), ["high", "mid-1", "mid-2", "low-1", "low-2"]);
}

#[tokio::test(start_paused = true)]
async fn merging_keeps_highest_priority_and_earliest_time() {
    let q = WorkQueue::builder().priority_aging(None).build();
    q.add("other");
    q.add_with("k", AddOptions::new().priority(-10));
    q.add_with("k", AddOptions::new().priority(3));
    // A lower priority later does not demote it.
    q.add_with("k", AddOptions::new().priority(1));
    assert_eq!(drain(&q), ["k", "other"]);

    // Delayed at high priority, then added now at low priority: runs now, at high priority.
    q.add_with("k", AddOptions::new().after(ms(100)).priority(7));
    q.add("other");
    q.add_with("k", AddOptions::new().priority(-5));
    let first = q.try_get().unwrap();
    assert_eq!((*first.key(), first.priority()), ("k", 7));
    drop(first);
    assert_eq!(drain(&q), ["other"]);
    advance(ms(200)).await;
    assert!(q.try_get().is_none());
}

#[tokio::test(start_paused = true)]
async fn readd_while_processing_keeps_the_merged_priority() {
    let q = WorkQueue::builder().priority_aging(None).build();
    q.add("k");
    let item = q.try_get().unwrap();
    q.add_with("k", AddOptions::new().priority(2));
    q.add_with("k", AddOptions::new().priority(9));
    q.add_with("other", AddOptions::new().priority(5));
    drop(item);
    let next = q.try_get().unwrap();
    assert_eq!((*next.key(), next.priority()), ("k", 9));
}

/// Workers take one key per 100 ms while producers add a priority-0 key every 50 ms: the
/// queue never empties. Returns when the low-priority key ran, if it ran within `limit`.
async fn low_priority_wait(q: WorkQueue<String>, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    q.add_with("low".to_string(), AddOptions::new().priority(-5));
    let mut n = 0u64;
    while start.elapsed() < limit {
        for _ in 0..2 {
            q.add(format!("high-{n}"));
            n += 1;
            advance(ms(50)).await;
        }
        let item = q.try_get().unwrap();
        if item.key() == "low" {
            return Some(start.elapsed());
        }
    }
    None
}

#[tokio::test(start_paused = true)]
async fn ageing_stops_low_priority_starving() {
    // Strict priority: the low key never runs while higher work keeps coming.
    let strict = WorkQueue::builder().priority_aging(None).build();
    assert_eq!(
        low_priority_wait(strict, Duration::from_secs(60)).await,
        None
    );
    // Ageing at 1 s per level: after 5 s waiting it outranks newly added priority-0 keys,
    // and runs once the older priority-0 keys ahead of it are done.
    let aged = WorkQueue::builder()
        .priority_aging(Some(Duration::from_secs(1)))
        .build();
    let waited = low_priority_wait(aged, Duration::from_secs(60))
        .await
        .expect("the low-priority key must run");
    assert!(waited >= Duration::from_secs(5), "{waited:?}");
    assert!(waited <= Duration::from_secs(11), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn ageing_still_lets_fresh_high_priority_overtake() {
    let q = WorkQueue::new();
    q.add_with("low", AddOptions::new().priority(-100));
    advance(Duration::from_secs(10)).await;
    q.add("fresh");
    assert_eq!(drain(&q), ["fresh", "low"]);
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_ready_keys_then_returns_none() {
    let q = WorkQueue::new();
    q.add("a");
    q.add("b");
    q.add_after("later", ms(10));
    let parked_q = WorkQueue::<u8>::new();
    let parked = {
        let q = parked_q.clone();
        tokio::spawn(async move { q.get().await.is_none() })
    };
    q.shutdown();
    parked_q.shutdown();
    assert!(parked.await.unwrap(), "a parked getter is woken with None");
    q.add("ignored");
    assert_eq!(q.get().await.map(|i| *i.key()), Some("a"));
    assert_eq!(q.get().await.map(|i| *i.key()), Some("b"));
    assert!(q.get().await.is_none());
    advance(ms(100)).await;
    assert!(
        q.get().await.is_none(),
        "delayed keys are dropped at shutdown"
    );
    assert_eq!(q.stats().delayed, 0);
    assert!(q.is_shutting_down());
}

#[tokio::test(start_paused = true)]
async fn shutdown_with_drain_waits_for_in_flight_work() {
    let q = WorkQueue::new();
    q.add("k");
    let item = q.get().await.unwrap();
    let drained = Arc::new(AtomicUsize::new(0));
    let drainer = {
        let (q, drained) = (q.clone(), drained.clone());
        tokio::spawn(async move {
            q.shutdown_with_drain().await;
            drained.store(1, Ordering::SeqCst);
        })
    };
    advance(ms(500)).await;
    assert_eq!(
        drained.load(Ordering::SeqCst),
        0,
        "returned with work in flight"
    );
    drop(item);
    timeout(ms(10), drainer).await.unwrap().unwrap();
    assert_eq!(drained.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn cancelled_getters_lose_nothing() {
    let q = WorkQueue::new();
    // A getter that gives up leaves no trace.
    assert!(timeout(ms(10), q.get()).await.is_err());
    q.add("k");
    assert_eq!(q.try_get().map(|i| *i.key()), Some("k"));

    // A getter that owns the delay timer and is cancelled hands the timer on.
    q.add_after("d", ms(100));
    let timer_owner = {
        let q = q.clone();
        tokio::spawn(async move { q.get().await.map(|i| *i.key()) })
    };
    tokio::task::yield_now().await;
    let other = {
        let q = q.clone();
        tokio::spawn(async move { q.get().await.map(|i| *i.key()) })
    };
    tokio::task::yield_now().await;
    timer_owner.abort();
    assert_eq!(timeout(ms(200), other).await.unwrap().unwrap(), Some("d"));
}

#[tokio::test(start_paused = true)]
async fn each_ready_key_wakes_a_parked_worker() {
    let q = WorkQueue::<u32>::new();
    let running = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (q, running) = (q.clone(), running.clone());
            tokio::spawn(async move {
                let item = q.get().await.unwrap();
                running.fetch_add(1, Ordering::SeqCst);
                // Hold the key until every worker has one: proves they run at once.
                while running.load(Ordering::SeqCst) < 4 {
                    tokio::task::yield_now().await;
                }
                *item.key()
            })
        })
        .collect();
    tokio::task::yield_now().await;
    for k in 0..4u32 {
        q.add(k);
    }
    let mut got = Vec::new();
    for w in workers {
        got.push(timeout(ms(100), w).await.unwrap().unwrap());
    }
    got.sort_unstable();
    assert_eq!(got, [0, 1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn delayed_keys_due_together_reach_all_parked_workers() {
    let q = WorkQueue::<u32>::new();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let item = q.get().await.unwrap();
                (*item.key(), Instant::now())
            })
        })
        .collect();
    tokio::task::yield_now().await;
    let start = Instant::now();
    for k in 0..3u32 {
        q.add_after(k, ms(20 + u64::from(k)));
    }
    for w in workers {
        let (_, at) = timeout(ms(100), w).await.unwrap().unwrap();
        assert!(at - start <= ms(22));
    }
}

#[derive(Default)]
struct Recorded {
    adds: AtomicUsize,
    retries: AtomicUsize,
    depth: Mutex<Vec<usize>>,
    latency: Mutex<Vec<Duration>>,
    work: Mutex<Vec<Duration>>,
    unfinished: Mutex<Vec<(Duration, Duration)>>,
    names: Mutex<Vec<String>>,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Recorded>);

impl MetricsProvider for Recorder {
    fn queue_metrics(&self, name: &str) -> Box<dyn QueueMetrics> {
        self.0.names.lock().unwrap().push(name.to_owned());
        Box::new(self.clone())
    }
}

impl QueueMetrics for Recorder {
    fn set_depth(&self, depth: usize) {
        self.0.depth.lock().unwrap().push(depth);
    }
    fn add(&self) {
        self.0.adds.fetch_add(1, Ordering::SeqCst);
    }
    fn queue_latency(&self, waited: Duration) {
        self.0.latency.lock().unwrap().push(waited);
    }
    fn work_duration(&self, held: Duration) {
        self.0.work.lock().unwrap().push(held);
    }
    fn unfinished_work(&self, total: Duration, longest: Duration) {
        self.0.unfinished.lock().unwrap().push((total, longest));
    }
    fn retry(&self) {
        self.0.retries.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_client_go_meanings() {
    let rec = Recorder::default();
    let q = WorkQueue::builder()
        .name("things")
        .metrics(rec.clone())
        .build();
    assert_eq!(*rec.0.names.lock().unwrap(), ["things"]);
    q.add("a");
    q.add("a"); // dedup: not an add
    q.add("b");
    assert_eq!(rec.0.adds.load(Ordering::SeqCst), 2);
    assert_eq!(rec.0.depth.lock().unwrap().last(), Some(&2));
    advance(ms(30)).await;
    let item = q.get().await.unwrap();
    // The first key in flight wakes the unfinished-work updater (idle, it sleeps).
    tokio::task::yield_now().await;
    assert_eq!(*rec.0.latency.lock().unwrap(), [ms(30)]);
    q.add("a"); // re-add while processing counts, and counts toward depth
    assert_eq!(rec.0.adds.load(Ordering::SeqCst), 3);
    assert_eq!(rec.0.depth.lock().unwrap().last(), Some(&2));
    // Hold the key across a refresh of the unfinished-work gauges.
    advance(ms(1200)).await;
    // The updater's timer fires in this advance; let it run before reading.
    tokio::task::yield_now().await;
    let (total, longest) = *rec.0.unfinished.lock().unwrap().last().unwrap();
    assert!(
        longest >= ms(1000) && total >= longest,
        "{total:?} {longest:?}"
    );
    drop(item);
    assert_eq!(*rec.0.work.lock().unwrap(), [ms(1200)]);
    q.add_rate_limited("c");
    assert_eq!(rec.0.retries.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_queue_ends_the_metrics_task() {
    let rec = Recorder::default();
    let q = WorkQueue::<u8>::builder().metrics(rec.clone()).build();
    advance(ms(600)).await;
    tokio::task::yield_now().await;
    let before = rec.0.unfinished.lock().unwrap().len();
    assert!(before >= 1);
    drop(q);
    advance(Duration::from_secs(5)).await;
    tokio::task::yield_now().await;
    assert_eq!(rec.0.unfinished.lock().unwrap().len(), before);
    // The task held the only other reference to the recorder.
    assert_eq!(Arc::strong_count(&rec.0), 1);
}

#[test]
fn a_custom_rate_limiter_plugs_in() {
    struct Fixed;
    impl RateLimiter<u8> for Fixed {
        fn when(&self, _: &u8) -> Duration {
            Duration::ZERO
        }
        fn forget(&self, _: &u8) {}
        fn num_requeues(&self, _: &u8) -> u32 {
            42
        }
    }
    let q = WorkQueue::builder().rate_limiter(Fixed).build();
    q.add_rate_limited(1);
    assert_eq!(q.num_requeues(&1), 42);
    assert_eq!(q.try_get().map(|i| *i.key()), Some(1));
}

/// An idle queue's unfinished-work updater wakes for nothing: the gauges are set to zero
/// once, and refreshed only while a key is in flight.
#[tokio::test(start_paused = true)]
async fn an_idle_queue_refreshes_no_gauge() {
    let rec = Recorder::default();
    let q = WorkQueue::builder().metrics(rec.clone()).build();
    advance(Duration::from_secs(60)).await;
    tokio::task::yield_now().await;
    assert_eq!(
        *rec.0.unfinished.lock().unwrap(),
        [(Duration::ZERO, Duration::ZERO)],
        "one zero, then nothing while idle"
    );
    q.add("a");
    let item = q.get().await.unwrap();
    tokio::task::yield_now().await;
    for _ in 0..2 {
        advance(ms(600)).await;
        tokio::task::yield_now().await;
    }
    let busy = rec.0.unfinished.lock().unwrap().len();
    assert!(busy >= 3, "refreshed while a key is in flight: {busy}");
    drop(item);
    advance(ms(600)).await;
    tokio::task::yield_now().await;
    let settled = rec.0.unfinished.lock().unwrap().clone();
    assert_eq!(
        settled.last(),
        Some(&(Duration::ZERO, Duration::ZERO)),
        "back to zero once nothing is in flight"
    );
    advance(Duration::from_secs(60)).await;
    tokio::task::yield_now().await;
    assert_eq!(
        rec.0.unfinished.lock().unwrap().len(),
        settled.len(),
        "idle again: no more refreshes"
    );
}
