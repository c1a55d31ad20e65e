//! One bench shape in a loop, outside criterion, for `perf record` and
//! `valgrind --tool=callgrind` (instruction counts are repeatable on a noisy machine; run
//! twice with different counts and divide the difference by the difference in keys).
//!
//! `cargo build --release --manifest-path crates/rudder-workqueue/bench/Cargo.toml --example
//! profile`, then `profile cycle|cycle-strict|dedup|workers|workers-strict N`: `cycle` adds, gets and marks done
//! N u64 keys in one task (default ageing); `cycle-strict` the same with strict priority;
//! `dedup` adds N times one of 64 keys that are all waiting;
//! `workers` runs rounds of the bench's multi-worker row (a fresh queue, 2 producers adding
//! 10,000 keys each, 2 workers) on a two-thread runtime until N keys are done, and
//! `workers-strict` the same with strict priority (no clock read per add). Each prints
//! nanoseconds per operation (the whole run's wall time, so alternate runs of two builds to
//! compare them on a shared machine). Built with `--features test-util`, `cycle-test-util`
//! and `workers-test-util` do the same after pausing a clock elsewhere in the process, as
//! `rudder-workqueue`'s own bench did: what tokio's `test-util` adds to each clock read.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::hint::black_box;
use std::time::Instant;

use rudder_workqueue::WorkQueue;
use rudder_workqueue_bench::{add_get_done, per_key_on_two_threads, producers_and_workers};

fn cycle(q: WorkQueue<u64>, n: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let start = Instant::now();
    rt.block_on(add_get_done(&q, n));
    println!(
        "{:.1} ns per cycle",
        start.elapsed().as_nanos() as f64 / n as f64
    );
}

fn dedup(n: u64) {
    let q = WorkQueue::<u64>::new();
    for k in 0..64 {
        q.add(k);
    }
    let start = Instant::now();
    for i in 0..n {
        q.add(black_box(i & 63));
    }
    println!(
        "{:.1} ns per dedup",
        start.elapsed().as_nanos() as f64 / n as f64
    );
}

fn workers(n: u64, strict: bool) {
    let per_key = per_key_on_two_threads(n, || {
        producers_and_workers(if strict {
            WorkQueue::<u64>::builder().priority_aging(None).build()
        } else {
            WorkQueue::<u64>::new()
        })
    });
    println!("{per_key:.1} ns per key");
}

/// Pauses a clock (in a runtime of its own, as a paused-clock bench or test in the same
/// process would), after which, with tokio's `test-util` compiled in, every
/// `tokio::time::Instant::now()` takes the clock mutex of the runtime it runs on.
#[cfg(feature = "test-util")]
fn pause_a_clock() {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(async {});
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    match args.get(1).map(String::as_str) {
        Some("cycle") => cycle(WorkQueue::new(), n),
        Some("cycle-strict") => cycle(WorkQueue::builder().priority_aging(None).build(), n),
        Some("dedup") => dedup(n),
        Some("workers") => workers(n, false),
        Some("workers-strict") => workers(n, true),
        #[cfg(feature = "test-util")]
        Some("cycle-test-util") => {
            pause_a_clock();
            cycle(WorkQueue::new(), n);
        }
        #[cfg(feature = "test-util")]
        Some("workers-test-util") => {
            pause_a_clock();
            workers(n, false);
        }
        _ => {
            eprintln!("usage: profile cycle|cycle-strict|dedup|workers|workers-strict [N]");
            std::process::exit(2);
        }
    }
}
