//! Rudder's work queue against kube-runtime's scheduler, side by side in one run.
//!
//! Run with `cargo bench -p rudder-workqueue --bench workqueue`. Each row runs both
//! implementations in the same process, one after the other, and the table printed at the end
//! gives the median time per operation of each and their ratio (kube-runtime / Rudder: above
//! 1 means Rudder is faster). On shared machines absolute times drift; the ratio is the result.
//!
//! Single-task rows run on a current-thread tokio runtime with a paused clock, for both
//! sides: timers fire as soon as the runtime is idle, so what is measured is the CPU cost of
//! the queue machinery, not waiting. This is generous to kube-runtime, whose `DelayQueue`
//! rounds every deadline up to the next millisecond: on a real clock, an item scheduled for
//! "now" waits for that tick.
//!
//! kube-runtime has no rate limiter; its closest equivalent of a rate-limited retry is a
//! requeue with a fixed delay (`Action::requeue`), which is what its side of that row does,
//! so on that row Rudder does more work (a per-key backoff lookup and a `forget`). The
//! "requeue after 5 ms" row compares the same operation on both. The rate-limiting queue's
//! success path has no kube-runtime side.
//!
//! This bench is built with `rudder-workqueue`'s dev-dependencies, so its tokio has
//! `test-util` (the crate's tests need a paused clock): once a runtime has paused its clock,
//! every `tokio::time::Instant::now()` in the process takes that runtime's clock mutex. Both
//! sides pay it here; Rudder's figures as a production build runs them, against client-go's
//! queue, come from `crates/rudder-workqueue/bench` (a separate package without `test-util`),
//! which also holds the real-clock rows (several workers, short delays). `cargo xtask
//! bench-workqueue` runs both beside client-go.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout
)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, Throughput, measurement::WallTime};
use futures::channel::mpsc;
use futures::{StreamExt, poll};
use kube_runtime::scheduler::{ScheduleRequest, scheduler};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rudder_workqueue::WorkQueue;
use rudder_workqueue::rate_limiter::ExponentialBackoff;
use tokio::runtime::Runtime;

/// Per-sample nanoseconds per operation, by (row, side).
type Samples = Mutex<BTreeMap<(String, &'static str), Vec<f64>>>;

static SAMPLES: Samples = Mutex::new(BTreeMap::new());

const RUDDER: &str = "rudder";
const KUBE: &str = "kube-runtime";

fn paused_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Runs `body(iters)` on `rt`, records ns per `ops_per_iter` operations, returns the time.
fn measure<F, Fut>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    row: &str,
    side: &'static str,
    ops_per_iter: u64,
    rt: &Runtime,
    body: F,
) where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    g.bench_function(side, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            rt.block_on(body(iters));
            let took = start.elapsed();
            let per_op = took.as_nanos() as f64 / (iters * ops_per_iter) as f64;
            SAMPLES
                .lock()
                .unwrap()
                .entry((row.to_owned(), side))
                .or_default()
                .push(per_op);
            took
        });
    });
}

/// kube-runtime's side of the one-key-at-a-time rows: schedule a key `delay` from now, then
/// take it from the scheduler.
async fn kube_one_at_a_time<T>(iters: u64, key: impl Fn(u64) -> T, delay: Duration)
where
    T: std::hash::Hash + Eq + Clone + Unpin,
{
    let (tx, rx) = mpsc::unbounded();
    let mut sched = pin!(scheduler(rx));
    for i in 0..iters {
        tx.unbounded_send(ScheduleRequest {
            message: key(i),
            run_at: tokio::time::Instant::now() + delay,
        })
        .unwrap();
        black_box(sched.next().await.unwrap());
    }
}

fn string_keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("namespace-{}/object-name-{i}", i % 7))
        .collect()
}

fn cycle(c: &mut Criterion) {
    let rt = paused_runtime();
    for (row, keys) in [
        ("add+get+done, u64 key", None),
        ("add+get+done, namespace/name key", Some(string_keys(64))),
    ] {
        let mut g = c.benchmark_group(row);
        match keys {
            None => {
                let q = WorkQueue::<u64>::new();
                measure(&mut g, row, RUDDER, 1, &rt, |iters| {
                    let q = q.clone();
                    async move {
                        for i in 0..iters {
                            q.add(i & 63);
                            let item = q.get().await.unwrap();
                            black_box(item.key());
                        }
                    }
                });
                measure(&mut g, row, KUBE, 1, &rt, |iters| {
                    kube_one_at_a_time(iters, |i| i & 63, Duration::ZERO)
                });
            }
            Some(keys) => {
                let keys = Arc::new(keys);
                let q = WorkQueue::<String>::new();
                measure(&mut g, row, RUDDER, 1, &rt, |iters| {
                    let (q, keys) = (q.clone(), keys.clone());
                    async move {
                        for i in 0..iters as usize {
                            q.add(keys[i & 63].clone());
                            let item = q.get().await.unwrap();
                            black_box(item.key());
                        }
                    }
                });
                measure(&mut g, row, KUBE, 1, &rt, |iters| {
                    let keys = keys.clone();
                    async move {
                        let key = |i: u64| keys[(i & 63) as usize].clone();
                        kube_one_at_a_time(iters, key, Duration::ZERO).await;
                    }
                });
            }
        }
        g.finish();
    }
}

fn dedup_hit(c: &mut Criterion) {
    let rt = paused_runtime();
    let row = "dedup hit (add of a waiting key)";
    let mut g = c.benchmark_group(row);
    let q = WorkQueue::<u64>::new();
    for k in 0..64 {
        q.add(k);
    }
    measure(&mut g, row, RUDDER, 1, &rt, |iters| {
        let q = q.clone();
        async move {
            for i in 0..iters {
                q.add(black_box(i & 63));
            }
        }
    });
    measure(&mut g, row, KUBE, 1, &rt, |iters| async move {
        let (tx, rx) = mpsc::unbounded();
        let mut sched = pin!(scheduler(rx));
        let later = tokio::time::Instant::now() + Duration::from_secs(3600);
        for k in 0..64 {
            tx.unbounded_send(ScheduleRequest {
                message: k,
                run_at: later,
            })
            .unwrap();
        }
        assert!(poll!(sched.next()).is_pending());
        for i in 0..iters {
            tx.unbounded_send(ScheduleRequest {
                message: i & 63,
                run_at: later,
            })
            .unwrap();
            // The scheduler takes the request in and merges it; nothing is due.
            assert!(poll!(sched.next()).is_pending());
        }
    });
    g.finish();
}

fn rate_limited(c: &mut Criterion) {
    let rt = paused_runtime();
    let row = "failure retry: add_rate_limited+get+done+forget (kube-runtime: fixed requeue)";
    let mut g = c.benchmark_group(row);
    let q = WorkQueue::<u64>::builder()
        .rate_limiter(ExponentialBackoff::default())
        .build();
    measure(&mut g, row, RUDDER, 1, &rt, |iters| {
        let q = q.clone();
        async move {
            for i in 0..iters {
                let k = i & 63;
                q.add_rate_limited(k);
                let item = q.get().await.unwrap();
                q.forget(item.key());
            }
        }
    });
    // kube-runtime: a requeue after a fixed 5 ms (its error policy's `Action::requeue`).
    measure(&mut g, row, KUBE, 1, &rt, |iters| {
        kube_one_at_a_time(iters, |i| i & 63, Duration::from_millis(5))
    });
    g.finish();
}

/// The success path of a controller on a rate-limiting queue: add, get, forget, done, with
/// the default controller limiter (client-go's `DefaultControllerRateLimiter`). kube-runtime
/// has no rate limiter, so this row is Rudder's (and client-go's, in `cargo xtask
/// bench-workqueue`).
fn rate_limiting_cycle(c: &mut Criterion) {
    let rt = paused_runtime();
    let row = "rate-limiting queue: add+get+forget+done, default controller limiter";
    let mut g = c.benchmark_group(row);
    let q = WorkQueue::<u64>::new();
    measure(&mut g, row, RUDDER, 1, &rt, |iters| {
        let q = q.clone();
        async move {
            for i in 0..iters {
                q.add(i & 63);
                let item = q.get().await.unwrap();
                q.forget(item.key());
            }
        }
    });
    g.finish();
}

fn requeue_after(c: &mut Criterion) {
    let rt = paused_runtime();
    let row = "requeue after 5 ms: add_after+get+done";
    let mut g = c.benchmark_group(row);
    let q = WorkQueue::<u64>::new();
    measure(&mut g, row, RUDDER, 1, &rt, |iters| {
        let q = q.clone();
        async move {
            for i in 0..iters {
                q.add_after(i & 63, Duration::from_millis(5));
                black_box(q.get().await.unwrap());
            }
        }
    });
    measure(&mut g, row, KUBE, 1, &rt, |iters| {
        kube_one_at_a_time(iters, |i| i & 63, Duration::from_millis(5))
    });
    g.finish();
}

fn delayed_drain(c: &mut Criterion) {
    const N: u64 = 1000;
    let rt = paused_runtime();
    let row = "add_after 1000 keys (0-10 ms), then drain; per key";
    let mut g = c.benchmark_group(row);
    g.throughput(Throughput::Elements(N));
    let delays: Arc<Vec<Duration>> = {
        let mut rng = SmallRng::seed_from_u64(7);
        Arc::new(
            (0..N)
                .map(|_| Duration::from_micros(rng.random_range(0..10_000)))
                .collect(),
        )
    };
    let q = WorkQueue::<u64>::new();
    measure(&mut g, row, RUDDER, N, &rt, |iters| {
        let (q, delays) = (q.clone(), delays.clone());
        async move {
            for _ in 0..iters {
                for (k, d) in delays.iter().enumerate() {
                    q.add_after(k as u64, *d);
                }
                for _ in 0..N {
                    black_box(q.get().await.unwrap());
                }
            }
        }
    });
    measure(&mut g, row, KUBE, N, &rt, |iters| {
        let delays = delays.clone();
        async move {
            let (tx, rx) = mpsc::unbounded();
            let mut sched = pin!(scheduler(rx));
            for _ in 0..iters {
                let now = tokio::time::Instant::now();
                for (k, d) in delays.iter().enumerate() {
                    tx.unbounded_send(ScheduleRequest {
                        message: k as u64,
                        run_at: now + *d,
                    })
                    .unwrap();
                }
                for _ in 0..N {
                    black_box(sched.next().await.unwrap());
                }
            }
        }
    });
    g.finish();
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn print_ratios() {
    let mut samples = SAMPLES.lock().unwrap();
    let rows: Vec<String> = samples.keys().map(|(row, _)| row.clone()).collect();
    let mut seen = Vec::new();
    println!();
    println!("| row | rudder ns/op | kube-runtime ns/op | kube-runtime / rudder |");
    println!("|---|---:|---:|---:|");
    for row in rows {
        if seen.contains(&row) {
            continue;
        }
        seen.push(row.clone());
        let r = samples.get_mut(&(row.clone(), RUDDER)).map(|v| median(v));
        let k = samples.get_mut(&(row.clone(), KUBE)).map(|v| median(v));
        match (r, k) {
            (Some(r), Some(k)) => println!("| {row} | {r:.1} | {k:.1} | {:.2}x |", k / r),
            (Some(r), None) => println!("| {row} | {r:.1} | - | - |"),
            _ => {}
        }
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(40)
        .configure_from_args();
    cycle(&mut c);
    dedup_hit(&mut c);
    rate_limited(&mut c);
    rate_limiting_cycle(&mut c);
    requeue_after(&mut c);
    delayed_drain(&mut c);
    c.final_summary();
    print_ratios();
}
