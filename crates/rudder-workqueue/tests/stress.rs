//! Multi-threaded stress: producers and workers on several runtime threads, checking that no
//! key is ever processed by two workers at once and that no add is lost.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rudder_workqueue::rate_limiter::ExponentialBackoff;
use rudder_workqueue::{AddOptions, WorkQueue};

const KEYS: usize = 500;
const PRODUCERS: u64 = 4;
const WORKERS: usize = 4;
const ADDS_PER_PRODUCER: usize = 25_000;

struct Tracker {
    /// A global logical clock ordering adds and starts.
    clock: AtomicU64,
    in_flight: Vec<AtomicBool>,
    /// Clock value just before the key's latest add call.
    last_add: Vec<AtomicU64>,
    /// Clock value just after the key's latest hand-out.
    last_start: Vec<AtomicU64>,
    adds: AtomicUsize,
    runs: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_producers_and_workers_keep_the_invariants() {
    let q: WorkQueue<usize> = WorkQueue::builder()
        .rate_limiter(ExponentialBackoff::new(
            Duration::from_micros(50),
            Duration::from_millis(2),
        ))
        .build();
    let t = Arc::new(Tracker {
        clock: AtomicU64::new(1),
        in_flight: (0..KEYS).map(|_| AtomicBool::new(false)).collect(),
        last_add: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        last_start: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        adds: AtomicUsize::new(0),
        runs: AtomicUsize::new(0),
    });

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (q, t) = (q.clone(), t.clone());
            tokio::spawn(async move {
                let mut rng = SmallRng::seed_from_u64(1000 + w as u64);
                while let Some(item) = q.get().await {
                    let key = *item.key();
                    let start = t.clock.fetch_add(1, Ordering::SeqCst);
                    t.last_start[key].fetch_max(start, Ordering::SeqCst);
                    assert!(
                        !t.in_flight[key].swap(true, Ordering::SeqCst),
                        "key {key} handed to two workers at once"
                    );
                    t.runs.fetch_add(1, Ordering::Relaxed);
                    if rng.random_ratio(1, 8) {
                        tokio::task::yield_now().await;
                    }
                    t.in_flight[key].store(false, Ordering::SeqCst);
                    if rng.random_ratio(1, 2) {
                        q.forget(&key);
                    }
                    drop(item);
                }
            })
        })
        .collect();

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (q, t) = (q.clone(), t.clone());
            tokio::spawn(async move {
                let mut rng = SmallRng::seed_from_u64(p);
                for i in 0..ADDS_PER_PRODUCER {
                    let key = rng.random_range(0..KEYS);
                    let before = t.clock.fetch_add(1, Ordering::SeqCst);
                    t.last_add[key].fetch_max(before, Ordering::SeqCst);
                    match rng.random_range(0..10) {
                        0 => q.add_after(key, Duration::from_micros(rng.random_range(0..500))),
                        1 => q.add_rate_limited(key),
                        2 => q.add_with(key, AddOptions::new().priority(rng.random_range(-3..4))),
                        _ => q.add(key),
                    }
                    t.adds.fetch_add(1, Ordering::Relaxed);
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }

    // Wait (with a deadline) until every delay has passed and every key is done.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = q.stats();
        if s.ready == 0 && s.delayed == 0 && s.processing == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "queue never settled: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    q.shutdown_with_drain().await;
    for w in workers {
        w.await.unwrap();
    }

    let adds = t.adds.load(Ordering::Relaxed);
    let runs = t.runs.load(Ordering::Relaxed);
    assert!(runs <= adds, "{runs} runs for {adds} adds");
    for key in 0..KEYS {
        let added = t.last_add[key].load(Ordering::SeqCst);
        let started = t.last_start[key].load(Ordering::SeqCst);
        if added > 0 {
            assert!(
                started > added,
                "key {key}: added at {added}, last run started at {started}"
            );
        }
    }
}
