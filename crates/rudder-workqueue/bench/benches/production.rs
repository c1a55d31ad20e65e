//! Rudder's work queue in client-go's benchmark shapes, on a production build of tokio.
//!
//! Run with `cargo bench --manifest-path crates/rudder-workqueue/bench/Cargo.toml` (or
//! through `cargo xtask bench-workqueue`, which runs client-go's queue in the same shapes and
//! prints the ratios). Every runtime here runs on the real clock, as a controller's does, and
//! tokio is built without `test-util` (see this package's `Cargo.toml`), so a clock read costs
//! what it costs in production. The rows with a kube-runtime side that need a paused clock to
//! be fair to it are in `rudder-workqueue`'s own `benches/workqueue.rs`; the two rows here
//! with a kube-runtime side run both on the real clock.
//!
//! The row names are the link to client-go's benchmarks: keep them in step with
//! `bench/src/workqueue.rs`.
#![allow(clippy::disallowed_methods, reason = "benches may spawn: the bench owns its tasks")]

#![allow(missing_docs, clippy::unwrap_used, clippy::print_stdout)]

use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use futures::StreamExt;
use futures::channel::mpsc;
use kube_runtime::scheduler::{ScheduleRequest, scheduler};
use rudder_workqueue::{AddOptions, WorkQueue};
use rudder_workqueue_bench::{
    KUBE, PER_PRODUCER, RUDDER, add_get_done, measure, producers_and_workers as round, table,
};
use tokio::runtime::Runtime;

fn current_thread() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn string_keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("namespace-{}/object-name-{i}", i % 7))
        .collect()
}

/// One task adds a key, gets it and drops the item (done), as client-go's `Add`, `Get`,
/// `Done` in one goroutine.
fn cycle(c: &mut Criterion) {
    let rt = current_thread();
    // With the default ageing, then strict priority: no clock read per add (ageing needs
    // one). client-go has no priorities, so strict is its own order.
    for (row, q) in [
        ("add+get+done, u64 key", WorkQueue::<u64>::new()),
        ("add+get+done, u64 key, strict priority", strict_queue()),
    ] {
        let mut g = c.benchmark_group(row);
        measure(&mut g, row, RUDDER, 1, &rt, |iters| {
            let q = q.clone();
            async move { add_get_done(&q, iters).await }
        });
        g.finish();
    }

    let row = "add+get+done, namespace/name key";
    let mut g = c.benchmark_group(row);
    let keys = Arc::new(string_keys(64));
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
    g.finish();
}

fn dedup_hit(c: &mut Criterion) {
    let rt = current_thread();
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
    g.finish();
}

/// The success path of a controller on a rate-limiting queue, with the default controller
/// limiter (client-go's `DefaultControllerRateLimiter`).
fn rate_limiting_cycle(c: &mut Criterion) {
    let rt = current_thread();
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

/// Short delays on a real clock: by the time the last add is done most keys are due, so
/// what is measured is the queue's handling of delays (and the timer's resolution for the
/// keys that are not due yet), as client-go's `AddAfter` with the same delays.
fn short_delays_real_clock(c: &mut Criterion) {
    const N: u64 = 1000;
    let rt = current_thread();
    let row = "add_after 1000 keys (1-10 µs, real clock), then drain; per key";
    let delay = |k: u64| Duration::from_micros(1 + (k * 7) % 10);
    let mut g = c.benchmark_group(row);
    g.throughput(Throughput::Elements(N));
    let q = WorkQueue::<u64>::new();
    measure(&mut g, row, RUDDER, N, &rt, |iters| {
        let q = q.clone();
        async move {
            for _ in 0..iters {
                for k in 0..N {
                    q.add_after(k, delay(k));
                }
                for _ in 0..N {
                    black_box(q.get().await.unwrap());
                }
            }
        }
    });
    measure(&mut g, row, KUBE, N, &rt, |iters| async move {
        let (tx, rx) = mpsc::unbounded();
        let mut sched = pin!(scheduler(rx));
        for _ in 0..iters {
            let now = tokio::time::Instant::now();
            for k in 0..N {
                tx.unbounded_send(ScheduleRequest {
                    message: k,
                    run_at: now + delay(k),
                })
                .unwrap();
            }
            for _ in 0..N {
                black_box(sched.next().await.unwrap());
            }
        }
    });
    g.finish();
}

/// Two producer tasks add 10,000 distinct keys each while two worker tasks get them, on a
/// two-thread runtime, as client-go's benchmark does with goroutines.
fn producers_and_workers(c: &mut Criterion) {
    const TOTAL: u64 = 2 * PER_PRODUCER;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let row = "2 producers, 2 workers, 20k keys; per key";
    let mut g = c.benchmark_group(row);
    g.throughput(Throughput::Elements(TOTAL));
    g.sample_size(20);
    measure(&mut g, row, RUDDER, TOTAL, &rt, |iters| async move {
        for _ in 0..iters {
            round(WorkQueue::new()).await;
        }
    });
    // kube-runtime: producers feed the scheduler's request channel; the scheduler's stream is
    // consumed by two concurrent workers, as its controller does.
    measure(&mut g, row, KUBE, TOTAL, &rt, |iters| async move {
        for _ in 0..iters {
            let (tx, rx) = mpsc::unbounded();
            let producers: Vec<_> = (0..2)
                .map(|p| {
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        for k in p * PER_PRODUCER..(p + 1) * PER_PRODUCER {
                            tx.unbounded_send(ScheduleRequest {
                                message: k,
                                run_at: tokio::time::Instant::now(),
                            })
                            .unwrap();
                        }
                    })
                })
                .collect();
            scheduler(rx)
                .take(TOTAL as usize)
                .for_each_concurrent(2, |k| async move {
                    black_box(k);
                })
                .await;
            for t in producers {
                t.await.unwrap();
            }
            drop(tx);
        }
    });
    g.finish();

    let row = "2 producers, 2 workers, 20k keys, strict priority; per key";
    let mut g = c.benchmark_group(row);
    g.throughput(Throughput::Elements(TOTAL));
    g.sample_size(20);
    measure(&mut g, row, RUDDER, TOTAL, &rt, |iters| async move {
        for _ in 0..iters {
            round(strict_queue()).await;
        }
    });
    g.finish();
}

/// The keys of an initial list, waiting at low priority when the shape starts.
const BACKLOG: u64 = 10_000;

/// A controller's restart: 10,000 keys of its initial list wait at low priority (-100, as
/// the `Kind` source queues them), then changes arrive: per iteration a new key is added at
/// the normal priority (0), taken and done. With priorities the new key is the one taken,
/// ahead of the backlog; client-go has none (it takes the oldest waiting key, and the new one
/// joins the end), so its row is the same operations in FIFO order.
fn priority_backlog(c: &mut Criterion) {
    let rt = current_thread();
    for (row, q) in [
        (
            "10k keys waiting at low priority, add+get+done at normal priority",
            WorkQueue::<u64>::new(),
        ),
        (
            "10k keys waiting at low priority, add+get+done at normal priority, strict priority",
            strict_queue(),
        ),
    ] {
        for k in 0..BACKLOG {
            q.add_with(k, AddOptions::new().priority(-100));
        }
        let mut g = c.benchmark_group(row);
        let next = Arc::new(std::sync::atomic::AtomicU64::new(BACKLOG));
        measure(&mut g, row, RUDDER, 1, &rt, |iters| {
            let (q, next) = (q.clone(), Arc::clone(&next));
            async move {
                for _ in 0..iters {
                    let key = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    q.add_with(key, AddOptions::new().priority(0));
                    let item = q.get().await.unwrap();
                    black_box(item.key());
                }
            }
        });
        g.finish();
        assert_eq!(q.len() as u64, BACKLOG, "the backlog was taken instead of the new keys");
    }
}

/// A queue with strict priority (no ageing).
fn strict_queue() -> WorkQueue<u64> {
    WorkQueue::builder().priority_aging(None).build()
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(40)
        .configure_from_args();
    cycle(&mut c);
    dedup_hit(&mut c);
    rate_limiting_cycle(&mut c);
    short_delays_real_clock(&mut c);
    producers_and_workers(&mut c);
    priority_backlog(&mut c);
    c.final_summary();
    println!();
    print!("{}", table());
}
