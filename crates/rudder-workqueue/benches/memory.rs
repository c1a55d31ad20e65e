//! Memory per queued key: one million distinct keys queued, then drained, in Rudder's queue
//! and in kube-runtime's scheduler, measured in one run with a counting allocator.
//!
//! Run with `cargo bench -p rudder-workqueue --bench memory`. Reports the bytes held per key
//! while all keys wait (keys' own heap data included: the same strings go into both), and
//! what each retains once drained.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout
)]

use std::alloc::System;
use std::pin::pin;
use std::time::Duration;

use futures::channel::mpsc;
use futures::{StreamExt, poll};
use kube_runtime::scheduler::{ScheduleRequest, scheduler};
use rudder_workqueue::WorkQueue;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const KEYS: usize = 1_000_000;

/// Bytes currently allocated.
fn live() -> isize {
    let s = GLOBAL.stats();
    // Reallocations are already folded into the two byte counters.
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn per_key(bytes: isize) -> f64 {
    bytes as f64 / KEYS as f64
}

struct Row {
    name: &'static str,
    queued: f64,
    retained: f64,
}

fn rudder<K>(name: &'static str, key: impl Fn(usize) -> K) -> Row
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let base = live();
        let q = WorkQueue::<K>::new();
        for i in 0..KEYS {
            q.add(key(i));
        }
        let queued = live() - base;
        for _ in 0..KEYS {
            q.get().await.unwrap().done();
        }
        let retained = live() - base;
        drop(q);
        Row {
            name,
            queued: per_key(queued),
            retained: per_key(retained),
        }
    })
}

fn kube<K>(name: &'static str, key: impl Fn(usize) -> K) -> Row
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + Unpin + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let base = live();
        let (tx, rx) = mpsc::unbounded();
        let mut sched = pin!(scheduler(rx));
        let run_at = tokio::time::Instant::now() + Duration::from_secs(60);
        for chunk in 0..KEYS / 1000 {
            for i in chunk * 1000..(chunk + 1) * 1000 {
                tx.unbounded_send(ScheduleRequest {
                    message: key(i),
                    run_at,
                })
                .unwrap();
            }
            // Let the scheduler take the requests in, so the channel never holds many.
            assert!(poll!(sched.next()).is_pending());
        }
        let queued = live() - base;
        tokio::time::advance(Duration::from_secs(61)).await;
        for _ in 0..KEYS {
            sched.next().await.unwrap();
        }
        let retained = live() - base;
        Row {
            name,
            queued: per_key(queued),
            retained: per_key(retained),
        }
    })
}

fn name_key(i: usize) -> String {
    format!("namespace-{}/object-name-{i}", i % 7)
}

fn main() {
    // `cargo test --benches` runs bench targets with `--bench` absent; do the work only when
    // benchmarking, to keep test runs fast.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rows = [
        rudder("rudder, u64 keys", |i| i as u64),
        kube("kube-runtime, u64 keys", |i| i as u64),
        rudder("rudder, namespace/name String keys", name_key),
        kube("kube-runtime, namespace/name String keys", name_key),
    ];
    println!("1M distinct keys queued, then drained (bytes per key)");
    println!("| queue | held while queued | retained after drain |");
    println!("|---|---:|---:|");
    for r in &rows {
        println!("| {} | {:.1} | {:.1} |", r.name, r.queued, r.retained);
    }
    for pair in rows.chunks(2) {
        println!(
            "{} / {}: {:.2}x",
            pair[1].name,
            pair[0].name,
            pair[1].queued / pair[0].queued
        );
    }
}
