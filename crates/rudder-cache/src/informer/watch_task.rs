//! The watch task: applies the engine's events to the store one object at a time and fans the
//! resulting events out; a relist's diff (epochs, then a sweep), resync, errors, malformed
//! objects and panics caught in user code.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use kube::Resource;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use rudder_core::Event;

use super::subscribers::send;
use super::{Informer, Refusal, Shared, Stats, count_panic, record_panic};
use crate::lenient::{Lenient, Malformed};
use crate::store::{Applied, Epoch, IndexPanic, ObjectKey, Store};
use crate::transform::Transforming;
use crate::unwind;
use crate::watch::{self as engine, Event as W};
use crate::writes::{Seen, Tracked};

/// Starts an informer's task on `stream`.
#[allow(
    clippy::too_many_arguments,
    reason = "the parts of one informer, handed over once by its builder and the tests"
)]
pub(crate) fn start_on<K, S>(
    described: impl Into<super::Described>,
    stream: S,
    transform: impl Into<Transforming<K>>,
    resync: Option<Duration>,
    token: CancellationToken,
    tracker: TaskTracker,
    writes: Option<Tracked>,
    lists: Arc<crate::watch::ListMode>,
    sizer: Option<super::footprint::Sizer<K>>,
) -> Informer<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    S: Stream<Item = Result<W<Lenient<Arc<K>>>, engine::Error>> + Send + 'static,
{
    let (synced, _) = watch::channel(false);
    let (refused, _) = watch::channel(None);
    let super::Described { resource, cluster } = described.into();
    let shared = Arc::new(Shared {
        resource,
        cluster,
        store: Store::new(),
        subscribers: Mutex::new(Vec::new()),
        synced,
        refused,
        running: AtomicBool::new(true),
        failed: AtomicBool::new(false),
        stats: Stats::default(),
        token,
        tracker,
        writes,
        lists,
        footprint: super::footprint::Footprint::default(),
        sizer,
    });
    let task = supervise(
        Arc::clone(&shared),
        run(Arc::clone(&shared), stream, transform.into(), resync),
    );
    shared.tracker.spawn(task);
    let handles = Arc::new(shared.token.clone().drop_guard());
    Informer {
        shared,
        _handles: handles,
    }
}

/// Runs the watch loop `run` and, however it ends, ends every subscriber's stream and
/// marks the informer not running. A panic that escapes it (none from user code: index
/// functions and transforms are caught where they run) also marks the informer failed and
/// stops it, so that it is seen as dead rather than silently idle.
pub(crate) async fn supervise<K>(shared: Arc<Shared<K>>, run: impl Future<Output = ()> + Send) {
    // `AssertUnwindSafe`: after a panic only `shared`'s atomics, its token and its
    // subscriber list (behind a lock that ignores poisoning, and only ever pushed to,
    // filtered or cleared) are touched. The store holds no lock outside its own methods,
    // which catch the one kind of user code they run, so it is as the last finished
    // operation left it, and stays readable.
    let outcome = std::panic::AssertUnwindSafe(run).catch_unwind().await;
    if let Err(payload) = outcome {
        shared.failed.store(true, Ordering::Release);
        tracing::error!(
            resource = %shared.resource,
            panic = %rudder_core::panic_message(&*payload),
            "the informer's watch task panicked; the informer has stopped"
        );
        shared.token.cancel();
    }
    shared.running.store(false, Ordering::Release);
    #[cfg(feature = "metrics")]
    forget_gauges(&shared);
    // Dropping the senders ends every subscriber's stream once it has drained its queue.
    shared.subscribers().clear();
}

/// The watch loop: applies the engine's events to the store, one object at a time, and fans
/// the resulting events out.
pub(crate) async fn run<K, S>(
    shared: Arc<Shared<K>>,
    stream: S,
    transform: Transforming<K>,
    resync: Option<Duration>,
) where
    K: Resource + Clone + Send + Sync + 'static,
    S: Stream<Item = Result<W<Lenient<Arc<K>>>, engine::Error>> + Send,
{
    // As the informer starts, not when it is built: the recorder is installed by now.
    #[cfg(feature = "metrics")]
    {
        crate::metrics::describe();
        // The informer's counters exist from its start, at zero: an alert on their
        // `increase` then sees the first relist or malformed object, which a series born
        // at 1 would hide. (Panics carry a `function` label and appear when one happens.)
        for name in [
            crate::metrics::WATCH_ERRORS_TOTAL,
            crate::metrics::MALFORMED_OBJECTS_TOTAL,
            crate::metrics::RELISTS_TOTAL,
        ] {
            metrics::counter!(name, shared.labels()).increment(0);
        }
        // Refusals too, for each code a refusal can carry.
        for code in ["401", "403"] {
            let mut labels = shared.labels();
            labels.push(metrics::Label::new("code", code));
            metrics::counter!(crate::metrics::WATCH_REFUSALS_TOTAL, labels).increment(0);
        }
    }
    let mut stream = pin!(stream);
    let mut watch = Watch {
        shared,
        transform,
        resync,
        epoch: 0,
        first_list: true,
        relisted: None,
        next_resync: None,
        published: None,
        unpublished: None,
    };
    loop {
        let next_resync = watch.next_resync;
        let resync_due = async {
            match next_resync {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let unpublished = watch.unpublished;
        let publish_due = async {
            match unpublished {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let item = tokio::select! {
            biased;
            () = watch.shared.token.cancelled() => break,
            () = resync_due => {
                resync_all(&watch.shared);
                watch.schedule_resync();
                continue;
            }
            () = publish_due => {
                watch.publish(true);
                continue;
            }
            item = stream.next() => item,
        };
        let Some(item) = item else { break };
        match item {
            Ok(event) => {
                // Something was listed or watched: whatever refused it before allows it now.
                allowed(&watch.shared);
                let list_ended = matches!(event, W::InitDone);
                watch.apply(event);
                watch.publish(list_ended);
            }
            Err(engine::Error::Refused(refusal)) => record_refusal(&watch.shared, refusal),
            Err(err) => record_error(&watch.shared, &err),
        }
    }
}

/// What the watch loop keeps between events.
struct Watch<K> {
    shared: Arc<Shared<K>>,
    transform: Transforming<K>,
    resync: Option<Duration>,
    /// Every list gets a new epoch; objects not stamped with it at its end are gone.
    epoch: Epoch,
    first_list: bool,
    /// During a relist (a list after the first), the objects it brought that the store does
    /// not hold at their version, applied together when it ends (objects it holds unchanged
    /// are only stamped, so the relist holds no second copy of them).
    relisted: Option<Vec<(Arc<K>, usize)>>,
    next_resync: Option<Instant>,
    /// When the gauges were last published.
    published: Option<Instant>,
    /// When changes not yet published are due to be, so that the last change of a burst
    /// is published too.
    unpublished: Option<Instant>,
}

impl<K> Watch<K>
where
    K: Resource + Clone + Send + Sync + 'static,
{
    /// Applies one engine event to the store and sends what it changed.
    fn apply(&mut self, event: W<Lenient<Arc<K>>>) {
        let mut panics = Vec::new();
        match event {
            W::Init => self.list_begins(),
            W::InitApply(Lenient::Malformed(bad)) | W::Apply(Lenient::Malformed(bad)) => {
                record_malformed(&self.shared, &bad);
                // Keep the last good version through a relist's sweep.
                self.shared
                    .store
                    .touch(&key_of_meta(&bad.metadata), self.epoch);
            }
            W::Delete(Lenient::Malformed(bad)) => {
                self.delete_malformed(&bad, &mut panics);
            }
            W::InitApply(Lenient::Ok(obj)) | W::Apply(Lenient::Ok(obj)) => {
                self.add_or_update(obj, &mut panics);
            }
            W::InitDone => self.list_ends(&mut panics),
            W::Delete(Lenient::Ok(obj)) => self.delete(obj, &mut panics),
        }
        for panic in panics {
            record_index_panic(&self.shared, &panic);
        }
    }

    /// A list (the first, or a relist) begins: a new epoch.
    fn list_begins(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        // A relist that began before is dropped with what it gathered: this one lists again.
        self.relisted = (!self.first_list).then(Vec::new);
        if !self.first_list {
            self.shared.stats.relists.fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "metrics")]
            metrics::counter!(crate::metrics::RELISTS_TOTAL, self.shared.labels()).increment(1);
            tracing::info!(resource = %self.shared.resource, "relisting");
        }
    }

    /// A list ends: what it did not stamp is gone; the first one syncs the informer. A
    /// relist's changes are applied here, with its removals, in one step.
    fn list_ends(&mut self, panics: &mut Vec<IndexPanic>) {
        let shared = &self.shared;
        let mut subscribers = shared.subscribers();
        let gone = match self.relisted.take() {
            Some(changed) => {
                let (applied, gone) = shared.store.replace(changed, self.epoch, panics);
                for applied in applied {
                    self.applied(applied, false, &mut subscribers);
                }
                gone
            }
            None => shared.store.sweep(self.epoch, panics),
        };
        for obj in gone {
            self.tell_deleted(&obj);
            send(
                &mut subscribers,
                &Event::Delete {
                    object: obj,
                    final_state_unknown: true,
                },
            );
        }
        drop(subscribers);
        if self.first_list {
            self.first_list = false;
            self.shared.footprint.synced();
            self.shared.synced.send_replace(true);
            self.schedule_resync();
            tracing::debug!(resource = %self.shared.resource, objects = self.shared.store.len(), "synced");
        }
    }

    /// An object listed or changed: stored (transformed, compacted) and sent as an add or
    /// an update.
    fn add_or_update(&mut self, obj: Arc<K>, panics: &mut Vec<IndexPanic>) {
        let initial_list = self.first_list;
        let obj = match self.transformed(obj) {
            Ok(obj) => obj,
            Err(key) => {
                // Keep the last good version, if any, through a relist's sweep.
                self.shared.store.touch(&key, self.epoch);
                return;
            }
        };
        if self.relisted.is_some() {
            // Relisting: stamp what is unchanged, keep the rest for the list's end.
            if self.shared.store.has_version_of(&obj) {
                self.shared.store.touch(&ObjectKey::of(&*obj), self.epoch);
            } else if self.relisted.is_some() {
                let obj = self.exact(obj);
                let size = self.size(&obj);
                if let Some(changed) = &mut self.relisted {
                    changed.push((obj, size));
                }
            }
            return;
        }
        // During the first list nothing is unchanged, so the lookup is skipped; an unchanged
        // object is about to be dropped, so it is neither copied nor measured.
        let (obj, size) = if !self.first_list && self.shared.store.has_version_of(&obj) {
            (obj, 0)
        } else {
            let obj = self.exact(obj);
            let size = self.size(&obj);
            (obj, size)
        };
        let shared = &self.shared;
        let mut subscribers = shared.subscribers();
        let applied = shared.store.apply(obj, size, self.epoch, panics);
        self.applied(applied, initial_list, &mut subscribers);
    }

    /// Counts, reports and sends what applying an object to the store did.
    fn applied(
        &self,
        applied: Applied<K>,
        initial_list: bool,
        subscribers: &mut Vec<tokio::sync::mpsc::UnboundedSender<Event<K>>>,
    ) {
        match applied {
            Applied::Added(obj) => {
                self.tell_stored(&obj);
                send(
                    subscribers,
                    &Event::Create {
                        object: obj,
                        initial_list,
                    },
                );
            }
            Applied::Updated { old, new } => {
                self.tell_stored(&new);
                send(subscribers, &Event::Update { old, new });
            }
            Applied::Unchanged | Applied::Skipped => {}
        }
    }

    /// An object deleted: removed and sent as a delete (the stored version stands for it
    /// when its transform panicked).
    fn delete(&self, obj: Arc<K>, panics: &mut Vec<IndexPanic>) {
        let transformed = self.transformed(obj);
        let key = match &transformed {
            Ok(obj) => ObjectKey::of(&**obj),
            Err(key) => key.clone(),
        };
        let shared = &self.shared;
        let mut subscribers = shared.subscribers();
        let stored = shared.store.remove(&key, panics);
        match (&transformed, &stored) {
            (Ok(obj), _) => self.tell_deleted(obj),
            (Err(_), Some(obj)) => self.tell_deleted(obj),
            (Err(_), None) => {}
        }
        // The object is gone either way; without a transformed copy, the last
        // stored version stands for it, as for a malformed one.
        let event = match (transformed, stored) {
            (Ok(obj), _) => Some(Event::Delete {
                object: obj,
                final_state_unknown: false,
            }),
            (Err(_), Some(obj)) => Some(Event::Delete {
                object: obj,
                final_state_unknown: true,
            }),
            (Err(_), None) => None,
        };
        if let Some(event) = event {
            send(&mut subscribers, &event);
        }
    }

    /// A malformed object deleted: its last good version, if stored, stands for it.
    fn delete_malformed(&self, bad: &Malformed, panics: &mut Vec<IndexPanic>) {
        record_malformed(&self.shared, bad);
        let key = key_of_meta(&bad.metadata);
        let shared = &self.shared;
        let mut subscribers = shared.subscribers();
        if let Some(obj) = shared.store.remove(&key, panics) {
            self.tell_deleted(&obj);
            // The last good version stands for the deleted object.
            send(
                &mut subscribers,
                &Event::Delete {
                    object: obj,
                    final_state_unknown: true,
                },
            );
        }
    }

    /// What `obj` counts for in [`InformerStats::bytes_held`](super::InformerStats::bytes_held),
    /// measured once, as it is stored; the store keeps it beside the object.
    fn size(&self, obj: &K) -> usize {
        self.shared.sizer.map_or(0, |size| size(obj))
    }

    /// Publishes the informer's gauges now (`now`: at the end of a list, or when changes
    /// were left unpublished), or else at most every
    /// [`PUBLISH_EVERY`](super::footprint::PUBLISH_EVERY) (a gauge per event would cost a
    /// recorder lookup per event), leaving the rest due at the end of that period.
    fn publish(&mut self, now: bool) {
        if !cfg!(feature = "metrics") {
            return;
        }
        let at = Instant::now();
        let due = self
            .published
            .is_none_or(|last| at.duration_since(last) >= super::footprint::PUBLISH_EVERY);
        if now || due {
            self.published = Some(at);
            self.unpublished = None;
            #[cfg(feature = "metrics")]
            publish_gauges(&self.shared);
        } else if self.unpublished.is_none() {
            self.unpublished = self
                .published
                .map(|last| last + super::footprint::PUBLISH_EVERY);
        }
    }

    /// Tells the cache's write tracker, if any, that `obj` is stored at its version.
    fn tell_stored(&self, obj: &K) {
        if let Some(writes) = &self.shared.writes {
            let meta = obj.meta();
            writes.observed(
                meta.namespace.as_deref(),
                meta.name.as_deref().unwrap_or_default(),
                Seen::Present {
                    resource_version: meta.resource_version.as_deref(),
                    uid: meta.uid.as_deref(),
                },
            );
        }
    }

    /// Tells the cache's write tracker, if any, that `obj` was removed.
    fn tell_deleted(&self, obj: &K) {
        if let Some(writes) = &self.shared.writes {
            let meta = obj.meta();
            writes.observed(
                meta.namespace.as_deref(),
                meta.name.as_deref().unwrap_or_default(),
                Seen::Deleted {
                    uid: meta.uid.as_deref(),
                },
            );
        }
    }

    /// `obj` through the transform. A transform that panics may leave `obj` half changed;
    /// that copy is dropped and nothing else has been touched, so the object is skipped as
    /// if never received (`Err` with its key). The engine's `Arc` is the only one, so the
    /// object is changed in place.
    fn transformed(&self, mut obj: Arc<K>) -> Result<Arc<K>, ObjectKey> {
        match &self.transform.transform {
            Some(t) => match unwind::catch(|| t(Arc::make_mut(&mut obj))) {
                Ok(()) => Ok(obj),
                Err(message) => {
                    record_panic(&self.shared, "transform", &ObjectKey::of(&*obj), &message);
                    Err(ObjectKey::of(&*obj))
                }
            },
            None => Ok(obj),
        }
    }

    /// `obj` without spare capacity. serde's decoding grows `Vec`s as elements come (a
    /// one-element `Vec` is allocated for four), and a clone allocates exactly, so a JSON
    /// object is cloned and the decoded copy dropped. The protobuf decoder sizes each
    /// repeated field once for all its values, so its objects are stored as decoded (no
    /// copy, half the allocations of a sync), unless a transform that may add to them ran
    /// (a caller's own; the default, [`strip_managed_fields`](crate::strip_managed_fields),
    /// only takes a field away, and says so through [`Transforming::may_add`]).
    #[allow(
        clippy::redundant_clone,
        reason = "the clone is the point: it allocates exactly"
    )]
    fn exact(&self, obj: Arc<K>) -> Arc<K> {
        if !self.transform.may_add && self.shared.lists.wire() == crate::WireFormat::Protobuf {
            obj
        } else {
            Arc::new(K::clone(&obj))
        }
    }

    /// The next resync, a jittered period from now (none without a period).
    fn schedule_resync(&mut self) {
        self.next_resync = self.resync.map(|p| Instant::now() + jittered(p));
    }
}

fn resync_all<K: Resource>(shared: &Shared<K>) {
    shared.stats.resyncs.fetch_add(1, Ordering::Relaxed);
    let mut subscribers = shared.subscribers();
    shared.store.for_each(|obj| {
        send(
            &mut subscribers,
            &Event::Update {
                old: Arc::clone(obj),
                new: Arc::clone(obj),
            },
        );
    });
}

fn key_of_meta(meta: &kube::core::ObjectMeta) -> ObjectKey {
    ObjectKey {
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

fn record_malformed<K>(shared: &Shared<K>, bad: &Malformed) {
    shared.stats.malformed.fetch_add(1, Ordering::Relaxed);
    #[cfg(feature = "metrics")]
    metrics::counter!(crate::metrics::MALFORMED_OBJECTS_TOTAL, shared.labels()).increment(1);
    tracing::warn!(resource = %shared.resource, object = %bad, "skipping an object that does not decode");
}

fn record_index_panic<K>(shared: &Shared<K>, panic: &IndexPanic) {
    tracing::error!(
        resource = %shared.resource,
        object = %panic.key,
        index = %panic.index,
        panic = %panic.message,
        "an index function panicked; skipping the object"
    );
    count_panic(shared, "index");
}

fn record_error<K>(shared: &Shared<K>, err: &engine::Error) {
    if err.is_decode() {
        shared.stats.malformed.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(crate::metrics::MALFORMED_OBJECTS_TOTAL, shared.labels()).increment(1);
        tracing::warn!(resource = %shared.resource, error = %err, "skipping an object that does not decode");
    } else {
        shared.stats.errors.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(crate::metrics::WATCH_ERRORS_TOTAL, shared.labels()).increment(1);
        tracing::warn!(resource = %shared.resource, error = %err, "watch error; retrying with backoff");
    }
}

/// A list or watch refused (401, 403): counted every time, as a watch error and as a
/// refusal, and told to whoever waits for the sync; logged at `warn` only when it begins a
/// streak of refusals, at `debug` while the streak goes on (each retry after the engine's
/// backoff would otherwise log again, for as long as the RBAC is missing).
fn record_refusal<K>(shared: &Shared<K>, refusal: Refusal) {
    shared.stats.errors.fetch_add(1, Ordering::Relaxed);
    shared.stats.refusals.fetch_add(1, Ordering::Relaxed);
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(crate::metrics::WATCH_ERRORS_TOTAL, shared.labels()).increment(1);
        let mut labels = shared.labels();
        labels.push(metrics::Label::new("code", refusal.code.to_string()));
        metrics::counter!(crate::metrics::WATCH_REFUSALS_TOTAL, labels).increment(1);
    }
    let begins = shared.refused.borrow().is_none();
    if begins {
        tracing::warn!(
            resource = %shared.resource,
            code = refusal.code,
            error = %refusal.message,
            "the API server refuses to list or watch the resource: this identity's RBAC lacks \
             list or watch on it here (or its credentials were refused); reads that wait for \
             this informer fail until it is allowed; retrying with backoff, logged again when \
             allowed"
        );
    } else {
        tracing::debug!(resource = %shared.resource, code = refusal.code, error = %refusal.message, "still refused");
    }
    shared.refused.send_replace(Some(refusal));
}

/// A list or watch went through: a streak of refusals, if any, has ended (logged once).
fn allowed<K>(shared: &Shared<K>) {
    if shared.refused.borrow().is_none() {
        return;
    }
    shared.refused.send_replace(None);
    tracing::info!(resource = %shared.resource, "the API server allows listing and watching the resource again");
}

/// `period` plus a random fraction of up to 10% of it.
pub(crate) fn jittered(period: Duration) -> Duration {
    let random = RandomState::new().hash_one(Instant::now());
    // The top 53 bits as a fraction in [0, 1).
    let fraction = (random >> 11) as f64 / (1_u64 << 53) as f64;
    period + period.mul_f64(0.1 * fraction)
}

#[cfg(feature = "metrics")]
/// Sets an informer's gauges to what it holds now.
fn publish_gauges<K: Resource + Send + Sync + 'static>(shared: &Shared<K>) {
    let labels = shared.labels();
    #[allow(clippy::cast_precision_loss, reason = "a gauge is a float")]
    {
        metrics::gauge!(crate::metrics::OBJECTS, labels.clone()).set(shared.store.len() as f64);
        metrics::gauge!(crate::metrics::OBJECT_BYTES, labels.clone())
            .set(shared.store.bytes() as f64);
    }
    let sync = shared
        .footprint
        .sync_duration()
        .map_or(0.0, |d| d.as_secs_f64());
    metrics::gauge!(crate::metrics::SYNC_DURATION_SECONDS, labels.clone()).set(sync);
    let current = shared.lists.current();
    for strategy in [
        crate::ListStrategy::Streaming,
        crate::ListStrategy::Paginated,
    ] {
        metrics::gauge!(
            crate::metrics::LIST_STRATEGY,
            with_label(&labels, "strategy", strategy.as_str())
        )
        .set(if strategy == current { 1.0 } else { 0.0 });
    }
    let wire = shared.lists.wire();
    for format in [crate::WireFormat::Protobuf, crate::WireFormat::Json] {
        metrics::gauge!(
            crate::metrics::WIRE_FORMAT,
            with_label(&labels, "format", format.as_str())
        )
        .set(if format == wire { 1.0 } else { 0.0 });
    }
}

#[cfg(feature = "metrics")]
/// Sets a stopped informer's gauges to zero: it holds nothing any more for the process (a
/// `metrics` recorder cannot remove a series).
fn forget_gauges<K>(shared: &Shared<K>) {
    let labels = shared.labels();
    metrics::gauge!(crate::metrics::OBJECTS, labels.clone()).set(0.0);
    metrics::gauge!(crate::metrics::OBJECT_BYTES, labels.clone()).set(0.0);
    for strategy in [
        crate::ListStrategy::Streaming,
        crate::ListStrategy::Paginated,
    ] {
        metrics::gauge!(
            crate::metrics::LIST_STRATEGY,
            with_label(&labels, "strategy", strategy.as_str())
        )
        .set(0.0);
    }
    for format in [crate::WireFormat::Protobuf, crate::WireFormat::Json] {
        metrics::gauge!(
            crate::metrics::WIRE_FORMAT,
            with_label(&labels, "format", format.as_str())
        )
        .set(0.0);
    }
}

#[cfg(feature = "metrics")]
/// `labels` and one more.
fn with_label(
    labels: &[metrics::Label],
    key: &'static str,
    value: &'static str,
) -> Vec<metrics::Label> {
    let mut all = labels.to_vec();
    all.push(metrics::Label::new(key, value));
    all
}
