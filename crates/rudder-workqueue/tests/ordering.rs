//! Ordering across priorities and the counts of ready keys, on paused tokio time: the rules
//! that ageing, raised priorities, very long ageing periods and due delayed keys must keep.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rudder_workqueue::{AddOptions, QueueStats, WorkQueue};
use tokio::time::advance;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Hands out every ready key without waiting, marking each done.
fn drain<K>(q: &WorkQueue<K>) -> Vec<K>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
{
    std::iter::from_fn(|| q.try_get().map(|item| item.key().clone())).collect()
}

#[tokio::test(start_paused = true)]
async fn ageing_counts_the_time_a_key_waited_alone() {
    // Default ageing: one level per second. The low key waits alone for 100 s; a priority-0
    // key added exactly 100 levels later ties with it (and the higher level wins the tie);
    // one added after that goes after it.
    let q = WorkQueue::new();
    q.add_with("low", AddOptions::new().priority(-100));
    advance(secs(100)).await;
    q.add("a");
    advance(ms(1)).await;
    q.add("b");
    assert_eq!(drain(&q), ["a", "low", "b"]);
}

#[tokio::test(start_paused = true)]
async fn ageing_counts_from_the_time_each_lone_key_was_added() {
    // Two keys wait alone at -10, added 5 s apart; the normal key arrives at t=12 s. The first
    // has waited 12 levels' worth and goes first; the second only 7, so it goes last.
    let q = WorkQueue::new();
    q.add_with("low-1", AddOptions::new().priority(-10));
    advance(secs(5)).await;
    q.add_with("low-2", AddOptions::new().priority(-10));
    advance(secs(7)).await;
    q.add("normal");
    assert_eq!(drain(&q), ["low-1", "normal", "low-2"]);
}

#[tokio::test(start_paused = true)]
async fn a_delayed_key_ages_from_when_it_became_due() {
    // Due at 10 s, and nothing touches the queue until 111 s: by then it has waited 101 s,
    // more than 100 levels, so it goes before the fresh priority-0 key.
    let q = WorkQueue::new();
    q.add_with("low", AddOptions::new().after(secs(10)).priority(-100));
    advance(secs(111)).await;
    q.add("fresh");
    assert_eq!(drain(&q), ["low", "fresh"]);
}

#[tokio::test(start_paused = true)]
async fn a_delayed_key_due_recently_has_not_aged_yet() {
    // The counterpart: due at 50 s, so at 111 s it has waited 61 s, less than 100 levels.
    let q = WorkQueue::new();
    q.add_with("low", AddOptions::new().after(secs(50)).priority(-100));
    advance(secs(111)).await;
    q.add("fresh");
    assert_eq!(drain(&q), ["fresh", "low"]);
}

#[tokio::test(start_paused = true)]
async fn raising_a_keys_priority_keeps_its_place_in_line() {
    let q = WorkQueue::builder().priority_aging(None).build();
    q.add_with("k", AddOptions::new().priority(-100));
    advance(secs(10)).await;
    q.add("z");
    q.add("k");
    assert_eq!(drain(&q), ["k", "z"]);

    // Several keys already at the new level: the raised key goes among them by the time it
    // became ready, not to the back.
    q.add("a");
    advance(ms(1)).await;
    q.add_with("k", AddOptions::new().priority(-1));
    advance(ms(1)).await;
    q.add("b");
    q.add("c");
    q.add_with("k", AddOptions::new().priority(0));
    assert_eq!(drain(&q), ["a", "k", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn raising_a_keys_priority_keeps_its_wait_for_ageing() {
    // k waits at -100 from t=0 and is raised to -50 at t=60 s. For ageing it has waited since
    // t=0, so at t=60 s it ranks 0 + 50 s = 50 s, ahead of a priority-0 key added at 60 s.
    let q = WorkQueue::new();
    q.add_with("k", AddOptions::new().priority(-100));
    advance(secs(60)).await;
    q.add_with("k", AddOptions::new().priority(-50));
    q.add("fresh");
    assert_eq!(drain(&q), ["k", "fresh"]);
}

#[tokio::test(start_paused = true)]
async fn a_very_long_ageing_period_is_strict_priority() {
    let forever = Duration::from_secs(300 * 365 * 24 * 3600);
    for aging in [Duration::MAX, forever, Duration::from_secs(u64::MAX / 2)] {
        let q = WorkQueue::builder().priority_aging(Some(aging)).build();
        q.add_with("low", AddOptions::new().priority(-1));
        advance(secs(1)).await;
        q.add_with("high", AddOptions::new().priority(1));
        q.add("normal");
        assert_eq!(drain(&q), ["high", "normal", "low"], "aging {aging:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn due_delayed_keys_count_as_ready() {
    let q = WorkQueue::new();
    q.add_after("k", ms(10));
    assert_eq!(q.len(), 0);
    assert!(q.is_empty());
    assert_eq!((q.stats().ready, q.stats().delayed), (0, 1));
    advance(ms(20)).await;
    assert_eq!(q.len(), 1);
    assert!(!q.is_empty());
    let QueueStats {
        ready,
        delayed,
        processing,
        ..
    } = q.stats();
    assert_eq!((ready, delayed, processing), (1, 0, 0));
    let item = q.try_get().unwrap();
    assert_eq!(*item.key(), "k");
    assert_eq!(q.len(), 0);
    assert_eq!(q.stats().processing, 1);
}
