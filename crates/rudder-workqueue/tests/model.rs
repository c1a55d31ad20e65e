//! Property test: random operations by several workers, checked against a simple model.
//!
//! The model tracks, per key, whether it is idle, queued (with a ready time and a priority) or
//! processing (with an optional pending run). Every `try_get` must hand out a key the model
//! says is queued and ready, of the best priority (strict mode) among those; it must hand out
//! something whenever the model has a ready key; and after the last operation every pending
//! key must still run exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use rudder_workqueue::rate_limiter::RateLimiter;
use rudder_workqueue::{AddOptions, WorkItem, WorkQueue};
use tokio::time::{Instant, advance};

/// A limiter with a known schedule: 7 ms per recorded failure, so the model can follow it.
struct Linear(std::sync::Mutex<HashMap<u8, u32>>);

impl RateLimiter<u8> for Linear {
    fn when(&self, key: &u8) -> Duration {
        let mut m = self.0.lock().unwrap();
        let n = m.entry(*key).or_default();
        *n += 1;
        Duration::from_millis(7 * u64::from(*n))
    }
    fn forget(&self, key: &u8) {
        self.0.lock().unwrap().remove(key);
    }
    fn num_requeues(&self, key: &u8) -> u32 {
        self.0.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Add {
        key: u8,
        delay_ms: u64,
        priority: i32,
    },
    AddRateLimited(u8),
    Get {
        worker: usize,
    },
    Done {
        worker: usize,
    },
    Forget(u8),
    Advance(u64),
    Shutdown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6, prop_oneof![Just(0u64), 1u64..40], -2i32..3)
            .prop_map(|(key, delay_ms, priority)| Op::Add { key, delay_ms, priority }),
        1 => (0u8..6).prop_map(Op::AddRateLimited),
        4 => (0usize..3).prop_map(|worker| Op::Get { worker }),
        3 => (0usize..3).prop_map(|worker| Op::Done { worker }),
        1 => (0u8..6).prop_map(Op::Forget),
        2 => (1u64..30).prop_map(Op::Advance),
        1 => Just(Op::Shutdown),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    ready_at: Instant,
    priority: i32,
}

impl Run {
    fn merge(self, other: Run) -> Run {
        Run {
            ready_at: self.ready_at.min(other.ready_at),
            priority: self.priority.max(other.priority),
        }
    }
}

/// Where a queued key stands in line within its priority: when it joined (its ready time,
/// or the moment it was queued if later) and the operation that queued it.
type Order = (Instant, u64);

#[derive(Debug)]
enum Key {
    Queued(Run, Order),
    Processing(Option<Run>),
}

#[derive(Default)]
struct Model {
    keys: HashMap<u8, Key>,
    failures: HashMap<u8, u32>,
    shutting_down: bool,
}

impl Model {
    fn add(&mut self, key: u8, run: Run, now: Instant, op: u64) {
        if self.shutting_down {
            return;
        }
        let queued = |run: Run| Key::Queued(run, (run.ready_at.max(now), op));
        let next = match self.keys.remove(&key) {
            None => queued(run),
            // Waiting and due: only a higher priority changes it, and it keeps its place in
            // line (the merged ready time is its own, which has passed).
            Some(Key::Queued(old, order)) if old.ready_at <= now => {
                Key::Queued(old.merge(run), order)
            }
            // Waiting for a delay: any change re-queues it.
            Some(Key::Queued(old, order)) => {
                let merged = old.merge(run);
                if merged == old {
                    Key::Queued(old, order)
                } else {
                    queued(merged)
                }
            }
            Some(Key::Processing(None)) => Key::Processing(Some(run)),
            Some(Key::Processing(Some(old))) => Key::Processing(Some(old.merge(run))),
        };
        self.keys.insert(key, next);
    }

    /// Keys that may be handed out now, in the order they must be: highest priority first,
    /// then first in line.
    fn ready(&self, now: Instant) -> Vec<(u8, Run)> {
        let mut ready: Vec<_> = self
            .keys
            .iter()
            .filter_map(|(k, s)| match s {
                Key::Queued(run, order) if run.ready_at <= now => Some((*k, *run, *order)),
                _ => None,
            })
            .collect();
        ready.sort_by_key(|(_, run, order)| (-run.priority, *order));
        ready.into_iter().map(|(k, run, _)| (k, run)).collect()
    }

    fn done(&mut self, key: u8, now: Instant, op: u64) {
        match self.keys.remove(&key) {
            Some(Key::Processing(Some(run))) => {
                if !(self.shutting_down && run.ready_at > now) {
                    self.keys
                        .insert(key, Key::Queued(run, (run.ready_at.max(now), op)));
                }
            }
            Some(Key::Processing(None)) => {}
            other => panic!("done for a key the model has as {other:?}"),
        }
    }

    fn shut_down(&mut self, now: Instant) {
        self.shutting_down = true;
        self.keys
            .retain(|_, s| !matches!(s, Key::Queued(run, _) if run.ready_at > now));
    }
}

fn check(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        let q = WorkQueue::builder()
            .priority_aging(None)
            .rate_limiter(Linear(Default::default()))
            .build();
        let mut model = Model::default();
        let mut held: [Option<WorkItem<u8>>; 3] = [None, None, None];
        for (op_index, op) in ops.into_iter().enumerate() {
            let now = Instant::now();
            let seq = op_index as u64;
            match op {
                Op::Add {
                    key,
                    delay_ms,
                    priority,
                } => {
                    let after = Duration::from_millis(delay_ms);
                    q.add_with(key, AddOptions::new().after(after).priority(priority));
                    model.add(
                        key,
                        Run {
                            ready_at: now + after,
                            priority,
                        }, now, seq
                    );
                }
                Op::AddRateLimited(key) => {
                    q.add_rate_limited(key);
                    let n = model.failures.entry(key).or_default();
                    *n += 1;
                    let after = Duration::from_millis(7 * u64::from(*n));
                    model.add(
                        key,
                        Run {
                            ready_at: now + after,
                            priority: 0,
                        }, now, seq
                    );
                }
                Op::Get { worker } => {
                    if held[worker].is_some() {
                        continue;
                    }
                    let ready = model.ready(now);
                    match q.try_get() {
                        Some(item) => {
                            let key = *item.key();
                            let Some((first, best)) = ready.first() else {
                                return Err(TestCaseError::fail(format!(
                                    "handed out {key} but the model has nothing ready"
                                )));
                            };
                            prop_assert!(
                                key == *first,
                                "handed out {} but {} (priority {}) was first in line; ready: {:?}; state of {}: {:?}",
                                key, first, best.priority, ready, key, model.keys.get(&key)
                            );
                            prop_assert_eq!(item.priority(), best.priority);
                            model.keys.insert(key, Key::Processing(None));
                            held[worker] = Some(item);
                        }
                        None => prop_assert!(
                            ready.is_empty(),
                            "nothing handed out while {:?} were ready",
                            ready
                        ),
                    }
                }
                Op::Done { worker } => {
                    if let Some(item) = held[worker].take() {
                        let key = *item.key();
                        item.done();
                        model.done(key, now, seq);
                    }
                }
                Op::Forget(key) => {
                    q.forget(&key);
                    model.failures.remove(&key);
                }
                Op::Advance(ms) => advance(Duration::from_millis(ms)).await,
                Op::Shutdown => {
                    q.shutdown();
                    model.shut_down(now);
                }
            }
        }
        // Finish: release every worker, let every delay pass, drain. Each pending key runs
        // exactly once more, and nothing else runs.
        for slot in &mut held {
            if let Some(item) = slot.take() {
                let key = *item.key();
                drop(item);
                model.done(key, Instant::now(), u64::MAX);
            }
        }
        advance(Duration::from_secs(10)).await;
        let mut ran = Vec::new();
        while let Some(item) = q.try_get() {
            ran.push(*item.key());
        }
        ran.sort_unstable();
        let mut expected: Vec<u8> = model.keys.keys().copied().collect();
        expected.sort_unstable();
        prop_assert_eq!(ran, expected, "a pending key was lost or ran twice");
        let stats = q.stats();
        prop_assert_eq!((stats.ready, stats.delayed, stats.processing), (0, 0, 0));
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn queue_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        check(ops)?;
    }
}
