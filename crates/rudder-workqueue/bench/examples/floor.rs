//! The one-lock floor: what any work queue built on one mutex pays on this machine, to read
//! Rudder's figures against.
//!
//! `Floor` is client-go's three structures (a FIFO of keys, a set of keys waiting to run and a
//! set of keys being processed) under one `parking_lot` mutex, hashed with hashbrown's default
//! hasher, as `rudder-workqueue` itself uses; and nothing else: no priorities, ageing, delays,
//! rate limits, metrics, guards or waker machinery (a getter that finds nothing yields and
//! asks again). It keeps client-go's rules (dedup, never twice at once, a key added while
//! processing runs once more) and nothing more; it is not a queue to use.
//!
//! `cargo build --release --manifest-path crates/rudder-workqueue/bench/Cargo.toml --example
//! floor`, then `floor cycle|workers|workers-clock N`, beside `profile`'s modes of the same
//! names: `cycle` adds, gets and marks done N keys in one thread; `workers` runs rounds of
//! the multi-worker row (a fresh queue, 2 producers adding 10,000 keys each, 2 workers) on a
//! two-thread runtime until N keys are done; `workers-clock` the same with one clock read per
//! add, which is what Rudder's ageing costs an add. Each prints nanoseconds per key (the
//! whole run's wall time: alternate runs with `profile` to compare them).
#![allow(clippy::disallowed_methods, reason = "examples may spawn: the example owns its tasks")]

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use hashbrown::HashSet;
use parking_lot::Mutex;
use rudder_workqueue_bench::{PER_PRODUCER, per_key_on_two_threads};

#[derive(Default)]
struct Inner {
    queue: VecDeque<u64>,
    dirty: HashSet<u64>,
    processing: HashSet<u64>,
    shutting_down: bool,
}

/// client-go's rules under one lock.
#[derive(Default)]
struct Floor {
    inner: Mutex<Inner>,
    /// Read the clock on every add (as an add with ageing does).
    clock: bool,
}

impl Floor {
    fn add(&self, key: u64) {
        if self.clock {
            black_box(tokio::time::Instant::now());
        }
        let mut g = self.inner.lock();
        if !g.dirty.insert(key) || g.processing.contains(&key) {
            return;
        }
        g.queue.push_back(key);
    }

    /// `Ok(None)` once shut down and empty; `Err(())` when nothing is ready yet.
    fn try_get(&self) -> Result<Option<u64>, ()> {
        let mut g = self.inner.lock();
        match g.queue.pop_front() {
            Some(key) => {
                g.processing.insert(key);
                g.dirty.remove(&key);
                Ok(Some(key))
            }
            None if g.shutting_down => Ok(None),
            None => Err(()),
        }
    }

    fn done(&self, key: u64) {
        let mut g = self.inner.lock();
        g.processing.remove(&key);
        if g.dirty.contains(&key) {
            g.queue.push_back(key);
        }
    }
}

fn cycle(n: u64) {
    let q = Floor::default();
    let start = Instant::now();
    for i in 0..n {
        q.add(black_box(i & 63));
        let key = q.try_get().unwrap().unwrap();
        q.done(black_box(key));
    }
    println!(
        "{:.1} ns per cycle",
        start.elapsed().as_nanos() as f64 / n as f64
    );
}

fn workers(n: u64, clock: bool) {
    let per_key = per_key_on_two_threads(n, || round(clock));
    println!("{per_key:.1} ns per key");
}

/// One round, as `profile`'s (`rudder_workqueue_bench::producers_and_workers`): a fresh
/// queue, 2 producers, 2 workers.
async fn round(clock: bool) {
    let total = 2 * PER_PRODUCER as usize;
    let q = Arc::new(Floor {
        clock,
        ..Floor::default()
    });
    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (q, done) = (q.clone(), done.clone());
            tokio::spawn(async move {
                loop {
                    match q.try_get() {
                        Ok(Some(key)) => {
                            black_box(key);
                            if done.fetch_add(1, Ordering::Relaxed) + 1 == total {
                                q.inner.lock().shutting_down = true;
                            }
                            q.done(key);
                        }
                        Ok(None) => return,
                        Err(()) => tokio::task::yield_now().await,
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    match args.get(1).map(String::as_str) {
        Some("cycle") => cycle(n),
        Some("workers") => workers(n, false),
        Some("workers-clock") => workers(n, true),
        _ => {
            eprintln!("usage: floor cycle|workers|workers-clock [N]");
            std::process::exit(2);
        }
    }
}
