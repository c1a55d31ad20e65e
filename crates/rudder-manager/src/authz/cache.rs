//! [`DecisionCache`]: decisions by key, each kept for a time that depends on the decision,
//! bounded, with one review in flight per key shared by every request waiting for it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use rudder_core::sync::LockExt;
use tokio::time::Instant;

use super::review::ReviewError;

/// A review in flight, shared by every request waiting for the same decision.
type Flight<V> = Shared<BoxFuture<'static, Result<V, Arc<ReviewError>>>>;

enum Slot<V> {
    Ready { value: V, expires: Instant },
    Pending { id: u64, flight: Flight<V> },
}

/// Decisions by key, each kept for a time that depends on the decision, at most `capacity`
/// of them; a key asked for while its review is in flight waits for that review.
pub(super) struct DecisionCache<K, V> {
    slots: Mutex<HashMap<K, Slot<V>>>,
    pub(super) capacity: usize,
    next_id: AtomicU64,
}

impl<K, V> std::fmt::Debug for DecisionCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionCache")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl<K, V> DecisionCache<K, V>
where
    K: Hash + Eq + Clone,
    V: Clone + Send + Sync + 'static,
{
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            slots: Mutex::new(HashMap::new()),
            capacity,
            next_id: AtomicU64::new(0),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slots.lock_unpoisoned().len()
    }

    /// The cached decision for `key`, or the one the review in flight for it reaches, or
    /// the one `review` reaches (cached for `ttl` of it; an error is not cached).
    pub(super) async fn get_or_review(
        &self,
        key: K,
        ttl: impl FnOnce(&V) -> Duration,
        review: impl FnOnce() -> BoxFuture<'static, Result<V, ReviewError>>,
    ) -> Result<V, Arc<ReviewError>> {
        let (id, flight) = {
            let mut slots = self.slots.lock_unpoisoned();
            let now = Instant::now();
            match slots.get(&key) {
                Some(Slot::Ready { value, expires }) if *expires > now => {
                    return Ok(value.clone());
                }
                Some(Slot::Pending { id, flight }) => (Some(*id), flight.clone()),
                _ => {
                    slots.remove(&key);
                    let flight = review().map(|r| r.map_err(Arc::new)).boxed().shared();
                    let id = self.make_room(&mut slots, now).then(|| {
                        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                        let pending = Slot::Pending {
                            id,
                            flight: flight.clone(),
                        };
                        slots.insert(key.clone(), pending);
                        id
                    });
                    (id, flight)
                }
            }
        };
        let result = flight.await;
        if let Some(id) = id {
            let mut slots = self.slots.lock_unpoisoned();
            // The first waiter to finish settles the slot; the others find it settled.
            if matches!(slots.get(&key), Some(Slot::Pending { id: pending, .. }) if *pending == id)
            {
                match &result {
                    Ok(value) => {
                        let ttl = ttl(value);
                        if ttl.is_zero() {
                            slots.remove(&key);
                        } else {
                            let expires = Instant::now() + ttl;
                            let value = value.clone();
                            slots.insert(key, Slot::Ready { value, expires });
                        }
                    }
                    Err(_) => {
                        slots.remove(&key);
                    }
                }
            }
        }
        result
    }

    /// Makes room for one more slot: expired decisions and abandoned reviews go first, then
    /// the decisions closest to expiry. `false` if every slot is a review in flight (the new review is
    /// then made without being shared).
    fn make_room(&self, slots: &mut HashMap<K, Slot<V>>, now: Instant) -> bool {
        if slots.len() < self.capacity {
            return true;
        }
        slots.retain(|_, slot| match slot {
            Slot::Ready { expires, .. } => *expires > now,
            // A review nobody waits for any more (its requests were dropped) holds only
            // this slot's clone: it would never settle, so it goes too.
            Slot::Pending { flight, .. } => flight.strong_count().is_some_and(|n| n > 1),
        });
        while slots.len() >= self.capacity {
            let soonest = slots
                .iter()
                .filter_map(|(key, slot)| match slot {
                    Slot::Ready { expires, .. } => Some((*expires, key)),
                    Slot::Pending { .. } => None,
                })
                .min_by_key(|(expires, _)| *expires)
                .map(|(_, key)| key.clone());
            match soonest {
                Some(key) => {
                    slots.remove(&key);
                }
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(value: bool) -> BoxFuture<'static, Result<bool, ReviewError>> {
        futures::future::ready(Ok(value)).boxed()
    }

    fn ttl(allowed: &bool) -> Duration {
        if *allowed {
            Duration::from_secs(10)
        } else {
            Duration::from_secs(2)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn allowed_decisions_live_longer_than_denials() {
        let cache = DecisionCache::<&str, bool>::new(8);
        let reviews = AtomicU64::new(0);
        let ask = |key, value| {
            let reviews = &reviews;
            let cache = &cache;
            async move {
                cache
                    .get_or_review(key, ttl, || {
                        reviews.fetch_add(1, Ordering::Relaxed);
                        answer(value)
                    })
                    .await
                    .ok()
            }
        };
        assert_eq!(ask("yes", true).await, Some(true));
        assert_eq!(ask("no", false).await, Some(false));
        assert_eq!(reviews.load(Ordering::Relaxed), 2);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(ask("yes", false).await, Some(true), "cached");
        assert_eq!(ask("no", true).await, Some(false), "cached");
        assert_eq!(reviews.load(Ordering::Relaxed), 2);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(ask("yes", true).await, Some(true), "still cached");
        assert_eq!(ask("no", true).await, Some(true), "expired, reviewed again");
        assert_eq!(reviews.load(Ordering::Relaxed), 3);
        tokio::time::advance(Duration::from_secs(8)).await;
        assert_eq!(
            ask("yes", false).await,
            Some(false),
            "expired, reviewed again"
        );
        assert_eq!(reviews.load(Ordering::Relaxed), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_share_one_review() {
        let cache = Arc::new(DecisionCache::<&str, bool>::new(8));
        let reviews = Arc::new(AtomicU64::new(0));
        let (release, gate) = tokio::sync::oneshot::channel::<()>();
        let gate = gate.shared();
        let mut waiting = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let (cache, reviews, gate) = (Arc::clone(&cache), Arc::clone(&reviews), gate.clone());
            waiting.spawn(async move {
                cache
                    .get_or_review("token", ttl, move || {
                        reviews.fetch_add(1, Ordering::Relaxed);
                        async move {
                            let _ = gate.await;
                            Ok(true)
                        }
                        .boxed()
                    })
                    .await
                    .ok()
            });
        }
        // Let every task reach the cache before the review answers.
        while cache.len() == 0 || waiting.len() < 50 {
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(release.send(()).is_ok());
        while let Some(answer) = waiting.join_next().await {
            assert_eq!(answer.ok().flatten(), Some(true));
        }
        assert_eq!(reviews.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_not_cached() {
        let cache = DecisionCache::<&str, bool>::new(8);
        let failing = || {
            futures::future::ready(Err(ReviewError::Timeout {
                what: "test",
                timeout: Duration::ZERO,
            }))
            .boxed()
        };
        assert!(cache.get_or_review("k", ttl, failing).await.is_err());
        assert_eq!(cache.len(), 0);
        assert_eq!(
            cache.get_or_review("k", ttl, || answer(true)).await.ok(),
            Some(true)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_never_holds_more_than_its_capacity() {
        let cache = DecisionCache::<u32, bool>::new(16);
        cache.get_or_review(0, ttl, || answer(true)).await.ok();
        for key in 1..1000 {
            cache.get_or_review(key, ttl, || answer(false)).await.ok();
            assert!(cache.len() <= 16);
        }
        assert_eq!(cache.len(), 16);
        // The allowed decision expires last, so the denials made room: it is still cached.
        let found = cache.get_or_review(0, ttl, || answer(false)).await.ok();
        assert_eq!(found, Some(true));
    }

    #[tokio::test(start_paused = true)]
    async fn abandoned_reviews_do_not_hold_the_cache() {
        let cache = DecisionCache::<u32, bool>::new(4);
        for key in 0..4 {
            // A request that gives up (its client went away) while its review is in flight.
            let asking = cache.get_or_review(key, ttl, || futures::future::pending().boxed());
            assert!(asking.now_or_never().is_none());
        }
        assert_eq!(cache.len(), 4);
        let found = cache.get_or_review(9, ttl, || answer(true)).await.ok();
        assert_eq!(found, Some(true));
        assert_eq!(cache.len(), 1, "the abandoned reviews made room");
        let cached = cache.get_or_review(9, ttl, || answer(false)).await.ok();
        assert_eq!(cached, Some(true));
    }
}
