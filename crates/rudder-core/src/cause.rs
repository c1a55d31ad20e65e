//! Why a reconcile ran: the [`Cause`] of each time its key was queued, kept while the key
//! waits ([`Causes`]: the first, the last and how many), and handed to the reconcile.
//!
//! A controller records a cause for every add of a key: a watch's handler enqueuing it (the
//! watch's source, the event, the object the event was about), the reconciler asking to run
//! again ([`Action::requeue`](crate::Action::requeue)), a retry after an error, a shard
//! handed to this replica. Adds merged while the key waits are kept as a count and the
//! last one, so what a queued key holds is bounded (two causes) however many events arrive.
//! The reconcile's span carries them, [`Context::causes`](crate::Context::causes) gives them
//! to the reconciler, and `rudder_controller_reconcile_triggers_total{controller,source,event}`
//! counts them.
//!
//! They live in the work queue's own slot for the key, as its payload ([`QueuedCauses`],
//! the payload of a controller's [`Queue`](crate::handler::Queue)): recording a cause costs
//! no lookup and no lock of its own. A watch's handler adds through a queue handle that
//! carries the cause of the event it handles
//! ([`WorkQueue::set_payload`](rudder_workqueue::WorkQueue::set_payload)), so a handler's
//! plain `queue.add(request)` records it; the worker's own re-adds name theirs
//! ([`WorkQueue::add_with_payload`](rudder_workqueue::WorkQueue::add_with_payload)).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::Resource;
use rudder_workqueue::Payload;

/// The object an event was about, read when asked (the cause holds the object, shared with
/// the cache, rather than copies of its names).
pub trait Trigger: Send + Sync {
    /// Its kind (`ConfigMap`).
    fn kind(&self) -> Cow<'static, str>;
    /// Its namespace, for a namespaced object.
    fn namespace(&self) -> Option<&str>;
    /// Its name.
    fn name(&self) -> &str;
    /// Its resourceVersion, as the event carried it.
    fn resource_version(&self) -> Option<&str>;
}

impl<K> Trigger for K
where
    K: Resource<DynamicType = ()> + Send + Sync,
{
    fn kind(&self) -> Cow<'static, str> {
        K::kind(&())
    }

    fn namespace(&self) -> Option<&str> {
        self.meta().namespace.as_deref()
    }

    fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }

    fn resource_version(&self) -> Option<&str> {
        self.meta().resource_version.as_deref()
    }
}

/// Where an add of a key came from, besides a watch's own label.
pub mod source {
    /// The reconciler asked to run again ([`Action::requeue`](crate::Action::requeue),
    /// `requeue_after`).
    pub const REQUEUE: &str = "requeue";
    /// The reconcile failed (an error, a panic or its timeout) and is retried with backoff.
    pub const RETRY: &str = "retry";
    /// A shard was handed to this replica, and its keys queued.
    pub const HANDOFF: &str = "handoff";
    /// The label counted when nothing was recorded for a key (queued by code outside any
    /// watch: a handler called directly, a test).
    pub const UNKNOWN: &str = "unknown";
}

/// Why a key was queued once.
///
/// A shared pointer: a cause is made once per event and cloned into each key the event's
/// handler queues, and a clone costs a reference count, not an allocation.
#[derive(Clone)]
pub struct Cause(Arc<CauseData>);

/// What a [`Cause`] holds.
#[derive(Clone)]
struct CauseData {
    source: Arc<str>,
    event: &'static str,
    object: Option<Arc<dyn Trigger>>,
    at: SystemTime,
    /// For an add that waits (a requeue after a delay, a retry): how long at least.
    after: Option<Duration>,
}

impl Cause {
    /// A cause from `source` (a watch's label, or one of [`source`]'s) for `event` (the
    /// event's kind, `create`, `update`, `delete`, `generic`, `initial` for an object of an
    /// informer's first list; or the reason for the other sources), now.
    pub fn new(source: Arc<str>, event: &'static str) -> Self {
        Self::make(source, event, None)
    }

    fn make(source: Arc<str>, event: &'static str, after: Option<Duration>) -> Self {
        Self(Arc::new(CauseData {
            source,
            event,
            object: None,
            at: SystemTime::now(),
            after,
        }))
    }

    /// A cause of an add that makes the key ready only after `after` (a requeue after a
    /// delay; `Duration::ZERO` when the delay is the rate limiter's, unknown here). An add
    /// that makes the key ready at once takes its place as the run's first cause.
    pub fn scheduled(source: Arc<str>, event: &'static str, after: Duration) -> Self {
        Self::make(source, event, Some(after))
    }

    /// Whether the add waits for a time of its own ([`scheduled`](Self::scheduled)).
    pub fn is_scheduled(&self) -> bool {
        self.0.after.is_some()
    }

    /// When the add made (or makes) the key ready: when it was recorded, plus the delay of
    /// a scheduled add.
    pub fn due(&self) -> SystemTime {
        self.0.at + self.0.after.unwrap_or_default()
    }

    /// This cause, about `object`.
    #[must_use]
    pub fn about(mut self, object: Arc<dyn Trigger>) -> Self {
        // Not yet shared when made by `new`: no copy. A clone of a cause shared by several
        // events (a watch's for the events of one batch) is copied, with their time.
        Arc::make_mut(&mut self.0).object = Some(object);
        self
    }

    /// Where the add came from: the watch's label (`for`, `owns`, `watches`, or the name a
    /// builder gave it), or one of [`source`]'s.
    pub fn source(&self) -> &str {
        &self.0.source
    }

    /// The event (`create`, `update`, `delete`, `generic`, `initial`), or the reason for the
    /// sources that are not watches: `requeue` and `requeue_after` (source `requeue`),
    /// `error` and `panic` (source `retry`), `handoff` (source `handoff`).
    pub fn event(&self) -> &'static str {
        self.0.event
    }

    /// The object the event was about, if the add came from a watch of objects.
    pub fn object(&self) -> Option<&dyn Trigger> {
        self.0.object.as_deref()
    }

    /// When the cause was recorded (the event's arrival at the controller). A controller's
    /// watch reads the clock once for the events it finds waiting together (at most 64), so
    /// their causes share the time it took the first of them.
    pub fn at(&self) -> SystemTime {
        self.0.at
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Cause {
    /// `source/event`, and the object (`Kind namespace/name@resourceVersion`) if any.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.0.source, self.0.event)?;
        if let Some(object) = &self.0.object {
            write!(f, " {} ", object.kind())?;
            if let Some(namespace) = object.namespace() {
                write!(f, "{namespace}/")?;
            }
            write!(f, "{}", object.name())?;
            if let Some(rv) = object.resource_version() {
                write!(f, "@{rv}")?;
            }
        }
        Ok(())
    }
}

/// The causes of one run of a key: the add the run answers (the first that made the key
/// ready: an add from a watch takes the place of a requeue or retry still waiting for its
/// delay), the latest other add if there were more, and how many there were.
#[derive(Clone, Debug)]
pub struct Causes {
    first: Cause,
    last: Option<Cause>,
    count: u32,
}

impl Causes {
    /// The causes of a key queued once, by `cause`.
    pub fn new(cause: Cause) -> Self {
        Self {
            first: cause,
            last: None,
            count: 1,
        }
    }

    /// Adds `cause`, merged into these: the first is kept, unless it waits for its time and
    /// `cause` does not (the run is then `cause`'s); the last is replaced.
    pub fn merge(&mut self, cause: Cause) {
        self.count = self.count.saturating_add(1);
        if self.first.is_scheduled() && !cause.is_scheduled() {
            let waiting = std::mem::replace(&mut self.first, cause);
            if self.last.is_none() {
                self.last = Some(waiting);
            }
            return;
        }
        self.last = Some(cause);
    }

    /// The add the run answers: the first since the key last ran that made it ready.
    pub fn first(&self) -> &Cause {
        &self.first
    }

    /// The latest other add, if there was more than one.
    pub fn last(&self) -> Option<&Cause> {
        self.last.as_ref()
    }

    /// The latest cause: the last, or the first if there was one.
    pub fn latest(&self) -> &Cause {
        self.last.as_ref().unwrap_or(&self.first)
    }

    /// How many adds were merged into this run (at least 1).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Adds all of `later`'s, as if each had been merged in turn: its first and its last,
    /// and its count.
    pub(crate) fn merge_all(&mut self, later: Causes) {
        let count = self.count.saturating_add(later.count);
        self.merge(later.first);
        if let Some(last) = later.last {
            self.merge(last);
        }
        self.count = count;
    }
}

/// What a key carries in a controller's work queue: the [`Causes`] of its pending run, or
/// none (a key added with no cause named: by code outside any watch, or before a controller
/// runs). The work queue's [`Payload`]: merged on each add while the key waits, handed to
/// the worker with the key.
///
/// Three words (two [`Cause`] pointers and a count): the queue's slot and the work item a
/// worker moves around grow by that much (with the causes inline, moving work items cost a
/// controller's in-memory pass more than the causes' whole bookkeeping), and a clone for
/// each key an event queues costs a reference count.
#[derive(Clone, Debug, Default)]
pub struct QueuedCauses(Option<Causes>);

impl QueuedCauses {
    /// One add's: `cause`.
    pub fn new(cause: Cause) -> Self {
        Self(Some(Causes::new(cause)))
    }

    /// The causes, if any add named one.
    pub fn get(&self) -> Option<&Causes> {
        self.0.as_ref()
    }

    /// Takes the causes out, if any.
    pub fn into_causes(self) -> Option<Causes> {
        self.0
    }
}

impl From<Option<Causes>> for QueuedCauses {
    fn from(causes: Option<Causes>) -> Self {
        Self(causes)
    }
}

impl Payload for QueuedCauses {
    /// Merges `later`'s causes into these, as if each had been merged in turn. The two are
    /// put in the order their first causes were recorded, so a key put back with the causes
    /// it was handed out with (a closed leader gate) keeps them first.
    #[inline]
    fn merge(&mut self, later: Self) {
        let Some(mut later) = later.0 else {
            return;
        };
        match &mut self.0 {
            None => self.0 = Some(later),
            Some(mine) => {
                if later.first.at() < mine.first.at() {
                    std::mem::swap(mine, &mut later);
                }
                mine.merge_all(later);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::ObjectMeta;

    #[test]
    fn merged_causes_keep_the_first_the_last_and_a_count() {
        let object = Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some("a".into()),
                namespace: Some("ns".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        });
        let mut causes = Causes::new(Cause::new("for".into(), "create").about(object));
        assert_eq!(causes.first().to_string(), "for/create ConfigMap ns/a@7");
        assert!(causes.last().is_none());
        for _ in 0..1000 {
            causes.merge(Cause::new(source::REQUEUE.into(), "requeue"));
        }
        causes.merge(Cause::new("owns".into(), "delete"));
        assert_eq!(causes.count(), 1002);
        assert_eq!(causes.first().source(), "for");
        assert_eq!(causes.latest().to_string(), "owns/delete");
    }

    #[test]
    fn what_a_queued_key_holds_is_bounded() {
        // In the queue's slot: two pointers and a count, however many adds merge.
        assert_eq!(size_of::<QueuedCauses>(), 3 * size_of::<usize>());
        // On the heap, at most two causes a key (shared with the other keys an event queued).
        assert_eq!(size_of::<CauseData>(), 80);
        let mut queued = QueuedCauses::new(Cause::new("for".into(), "create"));
        for _ in 0..100 {
            queued.merge(QueuedCauses::new(Cause::new("for".into(), "update")));
        }
        let causes = queued.get().unwrap();
        assert_eq!(causes.count(), 101);
        assert_eq!(Arc::strong_count(&causes.first().0), 1);
    }

    #[test]
    fn queued_causes_merge_in_the_order_they_were_recorded() {
        let mut queued = QueuedCauses::default();
        queued.merge(QueuedCauses::default());
        assert!(queued.get().is_none(), "an add with no cause records none");
        let early = Cause::new("for".into(), "create");
        let mut held = QueuedCauses::new(early);
        held.merge(QueuedCauses::new(Cause::new("owns".into(), "update")));
        let recorded = held.get().unwrap().latest().at();
        // The next cause is recorded strictly later (the clock may be coarse).
        while SystemTime::now() <= recorded {
            std::hint::spin_loop();
        }
        let later = QueuedCauses::new(Cause::new("watches".into(), "delete"));
        // Put back after a later add: the held causes still come first.
        let mut slot = later;
        slot.merge(held);
        let causes = slot.into_causes().unwrap();
        assert_eq!(causes.count(), 3);
        assert_eq!(causes.first().to_string(), "for/create");
        assert_eq!(causes.latest().to_string(), "watches/delete");
    }

    #[test]
    fn an_add_ready_at_once_takes_the_place_of_a_scheduled_one() {
        let later = Duration::from_secs(600);
        let mut causes = Causes::new(Cause::scheduled(
            source::REQUEUE.into(),
            "requeue_after",
            later,
        ));
        assert!(causes.first().due() >= causes.first().at() + later);
        causes.merge(Cause::new("for".into(), "update"));
        assert_eq!(causes.first().to_string(), "for/update");
        assert_eq!(causes.last().unwrap().to_string(), "requeue/requeue_after");
        assert_eq!(causes.count(), 2);
        // A scheduled add does not displace one that is ready.
        causes.merge(Cause::scheduled(
            source::RETRY.into(),
            "error",
            Duration::ZERO,
        ));
        assert_eq!(causes.first().to_string(), "for/update");
        assert_eq!(causes.last().unwrap().to_string(), "retry/error");
    }
}
