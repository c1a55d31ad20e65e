//! Steady state allocates nothing: add, get and done of keys the queue has seen.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::sync::Arc;

use rudder_workqueue::WorkQueue;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn cycles<K>(q: &WorkQueue<K>, keys: &[K], rounds: usize)
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
{
    for _ in 0..rounds {
        for k in keys {
            q.add(k.clone());
            q.add(k.clone()); // a dedup hit too
        }
        while let Some(item) = q.try_get() {
            item.done();
        }
    }
}

fn allocations_in<K>(keys: &[K]) -> usize
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
{
    let q = WorkQueue::<K>::new();
    cycles(&q, keys, 3); // warm up: tables and heaps reach their size
    let region = Region::new(GLOBAL);
    cycles(&q, keys, 20);
    let stats = region.change();
    stats.allocations + stats.reallocations
}

// One test per binary: the allocator's counters are process-wide.
#[test]
fn steady_state_cycles_allocate_nothing() {
    let ints: Vec<u64> = (0..1000).collect();
    let names: Vec<Arc<str>> = (0..1000)
        .map(|i| Arc::from(format!("ns/name-{i}")))
        .collect();
    assert_eq!((allocations_in(&ints), allocations_in(&names)), (0, 0));
}
