//! [`OwnWrites`]: the controller's side of read-your-writes. It is the [`WriteObserver`] its
//! reconciles write under: it knows, per key, which objects the key's last reconcile wrote
//! that the cache has not delivered yet, and the workers ask it ([`OwnWrites::check`]) before
//! they hand a key to the reconciler.
//!
//! A key with such writes is *held*: put back in the queue to run when the last of them is
//! reached (the tracker tells [`OwnWrites::reached`], which queues the key at once) or when
//! the bound passes (then it runs anyway, counted and logged with the objects named). A held
//! key takes no worker while it waits, so other keys never wait behind it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};
use rudder_core::Queue;
use rudder_core::Request;
use rudder_core::sync::LockExt;
use rudder_core::writes::{ObjectRef, RecentWrite, WriteObserver};
use rudder_workqueue::AddOptions;
use tokio::time::Instant;

use crate::metrics::{WRITE_WAIT_SECONDS, WRITE_WAIT_TIMEOUTS_TOTAL, WRITES_PENDING};

/// Whether a worker may reconcile a key now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Yes: the cache has every write of the key's last reconcile (or the wait timed out).
    Run,
    /// Not yet: put the key back to run after this long at the latest; it is queued sooner
    /// when its writes are reached.
    Hold(Duration),
}

/// One controller's pending writes, by key.
pub(crate) struct OwnWrites {
    controller: String,
    /// The member cluster the controller serves (`Options::cluster`), for its metrics.
    cluster: Option<std::sync::Arc<str>>,
    queue: Queue,
    timeout: Duration,
    keys: Mutex<HashMap<Request, KeyWrites>>,
    metrics: OnceLock<WriteMetrics>,
    /// Keys released by the bound, as the metric counts them (for `Controller::write_wait_timeouts`).
    timeouts: AtomicU64,
    /// Kept only for a sharded controller ([`keep_recent`](Self::keep_recent)): the writes
    /// of the last [`fence_window`](Self::fence_window), to hand over with a shard.
    recent: Mutex<Recent>,
}

#[derive(Default)]
struct Recent {
    on: bool,
    by_key: HashMap<Request, Vec<(ObjectRef, String, Instant)>>,
    next_prune: Option<Instant>,
}

#[derive(Default)]
struct KeyWrites {
    objects: Vec<ObjectRef>,
    held: Option<Held>,
}

struct Held {
    since: Instant,
    deadline: Instant,
    priority: i32,
}

struct WriteMetrics {
    wait: Histogram,
    timeouts: Counter,
    pending: Gauge,
}

impl OwnWrites {
    /// The pending writes of the controller `controller`, whose keys go back to `queue`, each
    /// held at most `timeout`.
    pub(crate) fn new(
        controller: &str,
        cluster: Option<std::sync::Arc<str>>,
        queue: Queue,
        timeout: Duration,
    ) -> Self {
        Self {
            controller: controller.to_owned(),
            cluster,
            queue,
            timeout,
            keys: Mutex::new(HashMap::new()),
            metrics: OnceLock::new(),
            timeouts: AtomicU64::new(0),
            recent: Mutex::new(Recent::default()),
        }
    }

    /// The longest a key is held.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Makes the metric handles against the current recorder (when the controller starts).
    pub(crate) fn start_metrics(&self) {
        let mut labels = vec![metrics::Label::new("controller", self.controller.clone())];
        if let Some(cluster) = &self.cluster {
            labels.push(metrics::Label::new("cluster", cluster.to_string()));
        }
        self.metrics.get_or_init(|| WriteMetrics {
            wait: metrics::histogram!(WRITE_WAIT_SECONDS, labels.clone()),
            timeouts: metrics::counter!(WRITE_WAIT_TIMEOUTS_TOTAL, labels.clone()),
            pending: metrics::gauge!(WRITES_PENDING, labels),
        });
    }

    /// Whether `key` (taken from the queue at `priority`) may be reconciled now; marks it
    /// held if not, and releases it, counted and logged, once it has been held `timeout`.
    pub(crate) fn check(&self, key: &Request, priority: i32) -> Gate {
        let mut keys = self.keys.lock_unpoisoned();
        let Some(writes) = keys.get_mut(key) else {
            return Gate::Run;
        };
        if writes.objects.is_empty() {
            keys.remove(key);
            return Gate::Run;
        }
        let now = Instant::now();
        match &mut writes.held {
            None => {
                writes.held = Some(Held {
                    since: now,
                    deadline: now + self.timeout,
                    priority,
                });
                tracing::debug!(request = %key, pending = writes.objects.len(),
                    "holding the key until the cache has its last reconcile's writes");
                Gate::Hold(self.timeout)
            }
            Some(held) if now < held.deadline => {
                held.priority = held.priority.max(priority);
                Gate::Hold(held.deadline - now)
            }
            Some(held) => {
                let waited = now - held.since;
                let objects: Vec<String> = writes.objects.iter().map(ToString::to_string).collect();
                tracing::warn!(
                    request = %key,
                    ?waited,
                    objects = ?objects,
                    "the cache did not deliver this key's own writes in time: reconciling anyway"
                );
                self.timeouts.fetch_add(1, Ordering::Relaxed);
                if let Some(m) = self.metrics.get() {
                    m.timeouts.increment(1);
                    m.wait.record(waited.as_secs_f64());
                    m.pending.decrement(objects.len() as f64);
                }
                keys.remove(key);
                Gate::Run
            }
        }
    }

    /// Keeps the writes of the last [`fence_window`](Self::fence_window) from now on (a
    /// sharded controller hands them over with its shards).
    pub(crate) fn keep_recent(&self) {
        self.recent.lock_unpoisoned().on = true;
    }

    /// How long writes are kept to hand over: twice the bound, and at least 10 s. A new
    /// owner whose cache is further behind than that is not fenced from older writes.
    pub(crate) fn fence_window(&self) -> Duration {
        (self.timeout * 2).max(Duration::from_secs(10))
    }

    /// The writes of the last fence window made by reconciles of the keys `keys` selects,
    /// the latest per (key, object).
    pub(crate) fn recent(&self, keys: impl Fn(&Request) -> bool) -> Vec<RecentWrite> {
        let window = self.fence_window();
        let now = Instant::now();
        let recent = self.recent.lock_unpoisoned();
        recent
            .by_key
            .iter()
            .filter(|(key, _)| keys(key))
            .flat_map(|(key, writes)| {
                writes
                    .iter()
                    .filter(move |(_, _, at)| *at + window > now)
                    .map(move |(object, rv, _)| RecentWrite {
                        key: key.clone(),
                        object: object.clone(),
                        resource_version: rv.clone(),
                    })
            })
            .collect()
    }

    /// How many keys ran because their writes did not arrive within the bound.
    pub(crate) fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }

    /// How many writes of this controller the cache has not reached.
    pub(crate) fn pending(&self) -> usize {
        self.keys
            .lock_unpoisoned()
            .values()
            .map(|w| w.objects.len())
            .sum()
    }

    /// Puts a held key back in the queue to run after `delay` at the latest, at `priority`,
    /// with the causes it was handed out with.
    pub(crate) fn requeue_held(
        &self,
        key: Request,
        delay: Duration,
        priority: i32,
        causes: rudder_core::cause::QueuedCauses,
    ) {
        self.queue.add_with_payload(
            key,
            AddOptions::new().after(delay).priority(priority),
            causes,
        );
    }
}

impl WriteObserver for OwnWrites {
    fn wrote(&self, key: &Request, object: &ObjectRef, resource_version: &str) {
        let mut recent = self.recent.lock_unpoisoned();
        if !recent.on {
            return;
        }
        let now = Instant::now();
        if recent.next_prune.is_none_or(|at| now >= at) {
            let window = self.fence_window();
            recent.next_prune = Some(now + Duration::from_secs(1));
            recent.by_key.retain(|_, writes| {
                writes.retain(|(_, _, at)| *at + window > now);
                !writes.is_empty()
            });
        }
        let writes = recent.by_key.entry(key.clone()).or_default();
        match writes.iter_mut().find(|(o, _, _)| o == object) {
            Some(write) => {
                write.1 = resource_version.to_owned();
                write.2 = now;
            }
            None => writes.push((object.clone(), resource_version.to_owned(), now)),
        }
    }

    fn written(&self, key: &Request, object: &ObjectRef) {
        let mut keys = self.keys.lock_unpoisoned();
        let writes = keys.entry(key.clone()).or_default();
        if !writes.objects.contains(object) {
            writes.objects.push(object.clone());
            if let Some(m) = self.metrics.get() {
                m.pending.increment(1.0);
            }
        }
    }

    fn reached(&self, key: &Request, object: &ObjectRef) {
        let mut keys = self.keys.lock_unpoisoned();
        let Some(writes) = keys.get_mut(key) else {
            return;
        };
        let before = writes.objects.len();
        writes.objects.retain(|o| o != object);
        if writes.objects.len() < before
            && let Some(m) = self.metrics.get()
        {
            m.pending.decrement(1.0);
        }
        if !writes.objects.is_empty() {
            return;
        }
        let held = writes.held.take();
        keys.remove(key);
        drop(keys);
        if let Some(held) = held {
            if let Some(m) = self.metrics.get() {
                m.wait.record(held.since.elapsed().as_secs_f64());
            }
            tracing::debug!(request = %key, waited = ?held.since.elapsed(),
                "the cache has the key's own writes: queueing it");
            self.queue
                .add_with(key.clone(), AddOptions::new().priority(held.priority));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str) -> ObjectRef {
        ObjectRef::new("", "configmaps", Some("ns"), name)
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_is_held_until_its_writes_are_reached_and_queued_then() {
        let queue = Queue::builder_with_payload().build();
        let writes = OwnWrites::new("test", None, queue.clone(), Duration::from_secs(5));
        let key = Request::namespaced("ns", "owner");
        assert_eq!(writes.check(&key, 0), Gate::Run, "nothing written");
        writes.written(&key, &object("a"));
        writes.written(&key, &object("b"));
        writes.written(&key, &object("a"));
        assert_eq!(writes.pending(), 2);
        assert_eq!(writes.check(&key, 3), Gate::Hold(Duration::from_secs(5)));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(writes.check(&key, 0), Gate::Hold(Duration::from_secs(4)));
        writes.reached(&key, &object("a"));
        assert!(queue.is_empty(), "one write still pending");
        writes.reached(&key, &object("b"));
        let item = queue
            .try_get()
            .expect("queued once its writes were reached");
        assert_eq!(item.key(), &key);
        assert_eq!(item.priority(), 3, "at the priority it was held at");
        drop(item);
        assert_eq!(writes.check(&key, 0), Gate::Run);
        assert_eq!(writes.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_whose_writes_never_arrive_runs_after_the_bound() {
        let queue = Queue::builder_with_payload().build();
        let writes = OwnWrites::new("test", None, queue.clone(), Duration::from_secs(5));
        let key = Request::namespaced("ns", "owner");
        let other = Request::namespaced("ns", "other");
        writes.written(&key, &object("a"));
        assert!(matches!(writes.check(&key, 0), Gate::Hold(_)));
        assert_eq!(
            writes.check(&other, 0),
            Gate::Run,
            "other keys are not held"
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(writes.check(&key, 0), Gate::Run);
        assert_eq!(writes.pending(), 0, "given up");
        writes.reached(&key, &object("a"));
        assert!(queue.is_empty(), "a late arrival queues nothing");
    }

    #[tokio::test]
    async fn a_write_reached_before_the_key_is_taken_holds_nothing() {
        let queue = Queue::builder_with_payload().build();
        let writes = OwnWrites::new("test", None, queue.clone(), Duration::from_secs(5));
        let key = Request::namespaced("ns", "owner");
        writes.written(&key, &object("a"));
        writes.reached(&key, &object("a"));
        assert!(queue.is_empty(), "not held: the event queues it");
        assert_eq!(writes.check(&key, 0), Gate::Run);
    }
}
