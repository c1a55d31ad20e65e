//! [`WatchSpec`]: a source, its predicates and its handler, with the key type erased, and the
//! task pumping the source's events into the queue.

use std::fmt;
use std::sync::Arc;

use futures::FutureExt;
use futures::stream::StreamExt;
use kube::Resource;
use rudder_core::EventHandler;
use rudder_core::Predicate;
use rudder_core::Queue;
use rudder_core::Source;
use rudder_core::SourceError;
use rudder_core::Synced;
use rudder_core::cause::Cause;
use rudder_core::cause::QueuedCauses;
use rudder_core::cause::Trigger;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use super::Controller;

/// A source, its predicates and its handler, with the source's type erased: what
/// [`Controller::add_watch`] takes.
pub struct WatchSpec(pub(super) Box<dyn ErasedWatch>);

/// The label of a watch's causes unless it is given one ([`WatchSpec::labelled`]).
pub(crate) const DEFAULT_WATCH_LABEL: &str = "watch";

impl WatchSpec {
    /// Prepares a watch of `source` through `predicates` into `handler`. The causes it
    /// records for the keys its handler queues name the watch `watch` and
    /// the event, not the object (whose type need not be a Kubernetes resource): see
    /// [`objects`](Self::objects) for that.
    pub fn new<K, H>(
        source: impl Source<K>,
        handler: H,
        predicates: Vec<Box<dyn Predicate<K>>>,
    ) -> Self
    where
        K: Send + Sync + 'static,
        H: EventHandler<K> + 'static,
    {
        Self(Box::new(Watch {
            source: Box::new(source),
            handler,
            predicates,
            label: Arc::from(DEFAULT_WATCH_LABEL),
            describe: None,
        }))
    }

    /// [`new`](Self::new) for a source of Kubernetes objects: the causes it records also
    /// name the object each event was about (kind, namespace/name, resourceVersion).
    pub fn objects<K, H>(
        source: impl Source<K>,
        handler: H,
        predicates: Vec<Box<dyn Predicate<K>>>,
    ) -> Self
    where
        K: Resource<DynamicType = ()> + Send + Sync + 'static,
        H: EventHandler<K> + 'static,
    {
        Self(Box::new(Watch {
            source: Box::new(source),
            handler,
            predicates,
            label: Arc::from(DEFAULT_WATCH_LABEL),
            describe: Some(|object: &Arc<K>| Arc::clone(object) as Arc<dyn Trigger>),
        }))
    }

    /// This watch, its causes labelled `label` (`for`, `owns`, `watches`, or a name of the
    /// caller's: the `source` of `rudder_controller_reconcile_triggers_total`; keep the set
    /// of labels small).
    #[must_use]
    pub fn labelled(mut self, label: impl Into<Arc<str>>) -> Self {
        self.0.set_label(label.into());
        self
    }
}

impl fmt::Debug for WatchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchSpec").finish_non_exhaustive()
    }
}

/// A watch with its key type erased, so a controller can hold watches of many types.
pub(super) trait ErasedWatch: Send {
    /// Names the watch in the causes it records.
    fn set_label(&mut self, label: Arc<str>);

    /// Starts the source and the task pumping its events into `queue` until `stop`.
    fn spawn(
        self: Box<Self>,
        queue: Queue,
        stop: CancellationToken,
    ) -> Result<(Synced, JoinHandle<()>), SourceError>;
}

struct Watch<K, H> {
    source: Box<dyn Source<K>>,
    handler: H,
    predicates: Vec<Box<dyn Predicate<K>>>,
    /// The `source` of the causes it records.
    label: Arc<str>,
    /// The object of an event as a cause's trigger, for sources of Kubernetes objects.
    describe: Option<Describe<K>>,
}

/// How many events a watch takes, at most, as one batch: the events its source has ready
/// at once, whose causes share one reading of the clock (a cause's time is then when the
/// watch woke for the batch: the event's arrival, to within the time the watch takes to hand
/// on the batch's earlier events).
const BATCH: usize = 64;

/// How a watch of objects makes an event's object a cause's trigger.
type Describe<K> = fn(&Arc<K>) -> Arc<dyn Trigger>;

impl<K, H> ErasedWatch for Watch<K, H>
where
    K: Send + Sync + 'static,
    H: EventHandler<K> + 'static,
{
    fn set_label(&mut self, label: Arc<str>) {
        self.label = label;
    }

    fn spawn(
        self: Box<Self>,
        queue: Queue,
        stop: CancellationToken,
    ) -> Result<(Synced, JoinHandle<()>), SourceError> {
        let Watch {
            source,
            handler,
            predicates,
            label,
            describe,
        } = *self;
        let started = source.start()?;
        let mut events = started.events;
        // This task's own handle: it carries the cause of the event being handled, so each
        // key the handler adds through it carries it into the queue.
        let mut queue = queue;
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: the controller keeps the handle and its run joins it (stop_watches)"
        )]
        let task = tokio::spawn(async move {
            // The causes made in the current batch, one per event kind: their time is read
            // once a batch (see `BATCH`), and an event's cause is a clone of its kind's,
            // about the event's object.
            let mut made: Vec<Cause> = Vec::new();
            let mut in_batch = 0_usize;
            loop {
                // Whether the source had to be waited for: its event then starts a batch.
                let mut waited = false;
                let mut pending = events.next();
                let next = tokio::select! {
                    biased;
                    () = stop.cancelled() => return,
                    event = futures::future::poll_fn(|cx| {
                        let polled = pending.poll_unpin(cx);
                        waited |= polled.is_pending();
                        polled
                    }) => event,
                };
                let Some(event) = next else {
                    return;
                };
                if waited || in_batch == BATCH {
                    made.clear();
                    in_batch = 0;
                }
                in_batch += 1;
                if predicates.iter().all(|p| p.filter(&event)) {
                    let name = event.cause_name();
                    let cause = match made.iter().find(|c| std::ptr::eq(c.event(), name)) {
                        Some(cause) => cause.clone(),
                        None => {
                            let cause = Cause::new(Arc::clone(&label), name);
                            made.push(cause.clone());
                            cause
                        }
                    };
                    let cause = match describe {
                        Some(describe) => cause.about(describe(event.object_arc())),
                        None => cause,
                    };
                    queue.set_payload(QueuedCauses::new(cause));
                    handler.handle(&event, &queue);
                    queue.set_payload(QueuedCauses::default());
                }
            }
        });
        Ok((started.synced, task))
    }
}
