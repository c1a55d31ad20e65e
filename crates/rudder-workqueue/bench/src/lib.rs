//! Timing helpers for the production-build benches of `rudder-workqueue` (see
//! `benches/production.rs`): criterion runs each row, and every sample's time per operation
//! is kept so that the table printed at the end gives medians and ratios in the format
//! `cargo xtask bench-workqueue` reads (`| row | rudder ns/op | kube-runtime ns/op | ratio |
//! rudder CPU ns/op |`): the wall clock, and the process's CPU time over the same samples.
//! The shapes the benches and the `profile` example share live here too, so that both run
//! the same code.
#![allow(clippy::disallowed_methods, reason = "benches may spawn: the bench owns its tasks")]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use rudder_workqueue::WorkQueue;
use tokio::runtime::Runtime;

/// Rudder's side of a row.
pub const RUDDER: &str = "rudder";
/// kube-runtime's side of a row.
pub const KUBE: &str = "kube-runtime";

/// Per-sample nanoseconds per operation, by (row, side).
static SAMPLES: Mutex<BTreeMap<(String, &'static str), Vec<f64>>> = Mutex::new(BTreeMap::new());
/// Per-sample CPU nanoseconds per operation (every thread of the process), by (row, side).
static CPU_SAMPLES: Mutex<BTreeMap<(String, &'static str), Vec<f64>>> =
    Mutex::new(BTreeMap::new());

/// The CPU time the process has used so far, every thread's (user and system).
pub fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

fn record(
    samples: &Mutex<BTreeMap<(String, &'static str), Vec<f64>>>,
    row: &str,
    side: &'static str,
    per_op: f64,
) {
    samples
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry((row.to_owned(), side))
        .or_default()
        .push(per_op);
}

/// Runs `body(iters)` on `rt` as criterion's sample, recording wall and CPU ns per
/// `ops_per_iter` operations under (`row`, `side`).
pub fn measure<F, Fut>(
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
            let cpu = process_cpu();
            let start = Instant::now();
            rt.block_on(body(iters));
            let took = start.elapsed();
            let cpu = process_cpu().saturating_sub(cpu);
            let ops = (iters * ops_per_iter) as f64;
            record(&SAMPLES, row, side, took.as_nanos() as f64 / ops);
            record(&CPU_SAMPLES, row, side, cpu.as_nanos() as f64 / ops);
            took
        });
    });
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The table of medians: one line per row, in the order rows were first measured; the last
/// column is Rudder's CPU time per operation.
pub fn table() -> String {
    let mut samples = SAMPLES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut cpu_samples = CPU_SAMPLES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut rows: Vec<String> = Vec::new();
    for (row, _) in samples.keys() {
        if !rows.contains(row) {
            rows.push(row.clone());
        }
    }
    let mut out = String::from(
        "| row | rudder ns/op | kube-runtime ns/op | kube-runtime / rudder | rudder CPU ns/op |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for row in rows {
        let r = samples.get_mut(&(row.clone(), RUDDER)).map(|v| median(v));
        let k = samples.get_mut(&(row.clone(), KUBE)).map(|v| median(v));
        let cpu = cpu_samples
            .get_mut(&(row.clone(), RUDDER))
            .map_or_else(|| "-".to_owned(), |v| format!("{:.1}", median(v)));
        match (r, k) {
            (Some(r), Some(k)) => out.push_str(&format!(
                "| {row} | {r:.1} | {k:.1} | {:.2}x | {cpu} |\n",
                k / r
            )),
            (Some(r), None) => out.push_str(&format!("| {row} | {r:.1} | - | - | {cpu} |\n")),
            _ => {}
        }
    }
    out
}

/// Keys each producer adds in one round of the multi-worker shape (client-go's benchmark
/// has the same).
pub const PER_PRODUCER: u64 = 10_000;

/// The single-task cycle: `n` times, add one of 64 u64 keys, get it and drop the item (done),
/// as client-go's `Add`, `Get`, `Done` in one goroutine.
pub async fn add_get_done(q: &WorkQueue<u64>, n: u64) {
    for i in 0..n {
        q.add(i & 63);
        let item = q.get().await.unwrap();
        black_box(item.key());
    }
}

/// One round of the multi-worker shape on `q` (fresh): 2 producer tasks add
/// [`PER_PRODUCER`] distinct keys each while 2 worker tasks get them; the worker that takes
/// the last key shuts the queue down, and the round returns when all four tasks are done.
pub async fn producers_and_workers(q: WorkQueue<u64>) {
    let total = 2 * PER_PRODUCER as usize;
    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (q, done) = (q.clone(), done.clone());
            tokio::spawn(async move {
                while let Some(item) = q.get().await {
                    black_box(item.key());
                    if done.fetch_add(1, Ordering::Relaxed) + 1 == total {
                        q.shutdown();
                    }
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let q = q.clone();
            tokio::spawn(async move {
                for k in p * PER_PRODUCER..(p + 1) * PER_PRODUCER {
                    q.add(k);
                }
            })
        })
        .collect();
    for t in producers.into_iter().chain(workers) {
        t.await.unwrap();
    }
}

/// Runs `round` on a fresh two-thread runtime until at least `keys` keys are done (each
/// round handles `2 × PER_PRODUCER`); returns the wall time per key, in nanoseconds.
pub fn per_key_on_two_threads<F, Fut>(keys: u64, mut round: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let rounds = keys.div_ceil(2 * PER_PRODUCER);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let start = Instant::now();
    for _ in 0..rounds {
        rt.block_on(round());
    }
    start.elapsed().as_nanos() as f64 / (rounds * 2 * PER_PRODUCER) as f64
}
