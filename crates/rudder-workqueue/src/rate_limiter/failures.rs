//! A per-key failure count that forgets keys which stopped failing, shared by the per-key limiters.

use std::hash::Hash;
// parking_lot's lock, as the queue's: no poisoning (nothing panics while holding it).
use parking_lot::Mutex;
use std::time::Duration;

use hashbrown::HashMap;
use tokio::time::Instant;

struct Record {
    failures: u32,
    last_failure: Instant,
}

/// Failure counts per key. A key that has not failed for `idle_ttl` is dropped: either it
/// succeeded and nobody called `forget`, or it is gone. Expired keys are swept whenever the
/// table has doubled since the last sweep, which keeps the cost amortised O(1) per failure and
/// the table's size within twice the number of keys failing within `idle_ttl`.
pub(super) struct FailureTable<K> {
    inner: Mutex<Inner<K>>,
    idle_ttl: Duration,
}

struct Inner<K> {
    records: HashMap<K, Record>,
    sweep_at_len: usize,
}

const MIN_SWEEP_LEN: usize = 1024;

impl<K: Hash + Eq + Clone> FailureTable<K> {
    pub(super) fn new(idle_ttl: Duration) -> Self {
        Self {
            inner: Mutex::new(Inner {
                records: HashMap::new(),
                sweep_at_len: MIN_SWEEP_LEN,
            }),
            idle_ttl,
        }
    }

    /// Records a failure and returns how many failures came before it.
    pub(super) fn fail(&self, key: &K) -> u32 {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        if inner.records.len() >= inner.sweep_at_len {
            let ttl = self.idle_ttl;
            inner
                .records
                .retain(|_, r| now.saturating_duration_since(r.last_failure) < ttl);
            inner.sweep_at_len = (inner.records.len() * 2).max(MIN_SWEEP_LEN);
        }
        let ttl = self.idle_ttl;
        match inner.records.get_mut(key) {
            Some(r) => {
                let before = if now.saturating_duration_since(r.last_failure) >= ttl {
                    0
                } else {
                    r.failures
                };
                r.failures = before.saturating_add(1);
                r.last_failure = now;
                before
            }
            None => {
                inner.records.insert(
                    key.clone(),
                    Record {
                        failures: 1,
                        last_failure: now,
                    },
                );
                0
            }
        }
    }

    pub(super) fn forget(&self, key: &K) {
        let mut inner = self.inner.lock();
        inner.records.remove(key);
    }

    pub(super) fn count(&self, key: &K) -> u32 {
        let now = Instant::now();
        let inner = self.inner.lock();
        inner
            .records
            .get(key)
            .filter(|r| now.saturating_duration_since(r.last_failure) < self.idle_ttl)
            .map_or(0, |r| r.failures)
    }

    /// Keys currently remembered (expired ones included until the next sweep).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.inner.lock().records.len()
    }
}
