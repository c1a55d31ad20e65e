//! The informer: one watch feeding one [`Store`], fanned out to every handler.

use std::collections::hash_map::RandomState;
use std::fmt::{self, Debug};
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use kube::{Api, Resource};
use kube_runtime::WatchStreamExt;
use kube_runtime::watcher::{self, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use crate::error::SyncError;
use crate::lenient::{Lenient, Malformed};
use crate::store::{Applied, IndexPanic, ObjectKey, Store};
use crate::transform::{Transform, strip_managed_fields};
use crate::unwind;

/// The default resync period, as in controller-runtime: 10 hours, plus up to 10% jitter.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(10 * 60 * 60);

/// What a handler is told.
#[derive(Debug)]
pub enum Event<K> {
    /// An object appeared.
    Add {
        /// The object as stored.
        obj: Arc<K>,
        /// Whether it came from the informer's first list (or, for a handler registered
        /// later, from the replay of the store's contents), rather than from a watch event.
        initial_list: bool,
    },
    /// An object changed (its `resourceVersion` differs), or a resync re-delivers it, in
    /// which case `old` and `new` are the same `Arc`.
    Update {
        /// The object as stored before.
        old: Arc<K>,
        /// The object as stored now.
        new: Arc<K>,
    },
    /// An object went away.
    Delete {
        /// The object from the delete event, or the last stored version when the delete
        /// was inferred from a relist.
        obj: Arc<K>,
        /// True when the delete was inferred: the object was missing from a relist, so its
        /// final state (and whether it was deleted or only stopped matching) is unknown.
        final_state_unknown: bool,
    },
}

impl<K> Clone for Event<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Add { obj, initial_list } => Self::Add {
                obj: Arc::clone(obj),
                initial_list: *initial_list,
            },
            Self::Update { old, new } => Self::Update {
                old: Arc::clone(old),
                new: Arc::clone(new),
            },
            Self::Delete {
                obj,
                final_state_unknown,
            } => Self::Delete {
                obj: Arc::clone(obj),
                final_state_unknown: *final_state_unknown,
            },
        }
    }
}

impl<K> Event<K> {
    /// The object the event is about (the new one for an update).
    pub fn object(&self) -> &Arc<K> {
        match self {
            Self::Add { obj, .. } | Self::Delete { obj, .. } => obj,
            Self::Update { new, .. } => new,
        }
    }
}

/// Counters an informer keeps about its watch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InformerStats {
    /// Objects in the watch stream that could not be decoded into the informer's type. Each
    /// was logged at `warn` and skipped (and, with the `metrics` feature, counted in
    /// `rudder_cache_malformed_objects_total`).
    pub malformed_objects: u64,
    /// Other errors from the watch (failed lists, failed or broken watches), each logged and
    /// followed by kube-runtime's default backoff.
    pub watch_errors: u64,
    /// Lists after the first one (a watch that could not be resumed, e.g. 410 Gone).
    pub relists: u64,
    /// Resyncs done.
    pub resyncs: u64,
    /// Panics caught in the user's index functions and transforms. Each was logged at
    /// `error` with the object's key, and the object skipped: it is neither stored nor sent,
    /// and a stored older version stays (as for a malformed object) until the object is
    /// deleted. With the `metrics` feature each is also counted in
    /// `rudder_cache_panics_total` (labels `resource`, and `function`: `index` or
    /// `transform`).
    pub panics: u64,
}

/// Options for one informer; start it with [`InformerBuilder::start`].
pub struct InformerBuilder<K> {
    api: Api<K>,
    /// Set by [`skip_malformed`](InformerBuilder::skip_malformed): the same watch, decoding
    /// each object on its own.
    lenient: Option<Api<Lenient<K>>>,
    config: watcher::Config,
    transform: Option<Transform<K>>,
    resync: Option<Duration>,
    token: CancellationToken,
    tracker: TaskTracker,
}

impl<K> InformerBuilder<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Watcher options: label and field selectors, page size, timeouts.
    #[must_use]
    pub fn config(mut self, config: watcher::Config) -> Self {
        self.config = config;
        self
    }

    /// A transform applied to every object before it is stored, replacing the default
    /// ([`strip_managed_fields`]).
    #[must_use]
    pub fn transform(mut self, transform: impl Fn(&mut K) + Send + Sync + 'static) -> Self {
        self.transform = Some(Arc::new(transform));
        self
    }

    /// Like [`transform`](Self::transform), with an already shared function, or `None` to
    /// store objects exactly as the server sends them (`managedFields` included).
    #[must_use]
    pub fn transform_opt(mut self, transform: Option<Transform<K>>) -> Self {
        self.transform = transform;
        self
    }

    /// Re-deliver every stored object as an [`Event::Update`] this often, plus up to 10%
    /// jitter; `None` (the default for a bare informer) turns resync off.
    #[must_use]
    pub fn resync(mut self, period: Option<Duration>) -> Self {
        self.resync = period;
        self
    }

    /// Stop when `token` is cancelled (the informer's own token is a child of it).
    #[must_use]
    pub fn cancel_on(mut self, token: &CancellationToken) -> Self {
        self.token = token.child_token();
        self
    }

    /// Use `token` itself as the informer's token.
    pub(crate) fn with_token(mut self, token: CancellationToken) -> Self {
        self.token = token;
        self
    }

    /// Track the informer's tasks in `tracker` as well, so its owner can wait for them.
    pub(crate) fn tracker(mut self, tracker: TaskTracker) -> Self {
        self.tracker = tracker;
        self
    }

    /// Starts the watch on the current tokio runtime and returns the informer.
    pub fn start(self) -> Informer<K> {
        let resource = describe(&self.api, &self.config);
        let strict = watcher(self.api, self.config.clone())
            .default_backoff()
            .map(|item| item.map(wrap))
            .boxed();
        let stream = match self.lenient {
            Some(api) => lenient_on_failure(strict, api, self.config).boxed(),
            None => strict,
        };
        start_on(
            resource,
            stream,
            self.transform,
            self.resync,
            self.token,
            self.tracker,
        )
    }
}

/// Starts an informer's task on `stream`.
pub(crate) fn start_on<K, S>(
    resource: String,
    stream: S,
    transform: Option<Transform<K>>,
    resync: Option<Duration>,
    token: CancellationToken,
    tracker: TaskTracker,
) -> Informer<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    S: Stream<Item = Result<watcher::Event<Lenient<K>>, watcher::Error>> + Send + 'static,
{
    let (synced, _) = watch::channel(false);
    let shared = Arc::new(Shared {
        resource,
        store: Store::new(),
        subscribers: Mutex::new(Vec::new()),
        synced,
        running: AtomicBool::new(true),
        failed: AtomicBool::new(false),
        stats: Stats::default(),
        token,
        tracker,
    });
    let task = supervise(
        Arc::clone(&shared),
        run(Arc::clone(&shared), stream, transform, resync),
    );
    shared.tracker.spawn(task);
    let handles = Arc::new(shared.token.clone().drop_guard());
    Informer {
        shared,
        _handles: handles,
    }
}

impl<K> InformerBuilder<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    /// Decode each object of a list or watch on its own, so that one object that does not
    /// decode into `K` is skipped (logged, counted in
    /// [`InformerStats::malformed_objects`]) instead of failing its whole list page, which
    /// would keep the informer from ever syncing. A stored object that turns malformed
    /// keeps its last good version until it is deleted. Pages and events are decoded whole,
    /// as usual, until one fails on such an object; from then on the informer lists and
    /// watches again decoding each object on its own (about 20% more decoding time per object, `cargo bench -p
    /// rudder-cache --bench decode`). [`Cache`](crate::Cache) turns it on for every typed
    /// informer.
    #[must_use]
    pub fn skip_malformed(mut self) -> Self {
        let client = self.api.clone().into_client();
        let dt = K::DynamicType::default();
        self.lenient = Some(match self.api.namespace() {
            Some(ns) => Api::namespaced_with(client, ns, &dt),
            None => Api::all_with(client, &dt),
        });
        self
    }
}

type WatchStream<K> =
    futures::stream::BoxStream<'static, Result<watcher::Event<Lenient<K>>, watcher::Error>>;

/// `strict` until an object does not decode (in a list page or a watch event), then a new
/// watch of `lenient` (from a fresh list) for good: decoding objects one by one costs
/// nothing until some object needs it.
fn lenient_on_failure<K>(
    strict: WatchStream<K>,
    lenient: Api<Lenient<K>>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<Lenient<K>>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let fallback = Some((lenient, config));
    futures::stream::unfold(
        (strict, fallback),
        |(mut stream, mut fallback)| async move {
            loop {
                let item = stream.next().await?;
                // A list page that failed on one object, or a watch event whose object did
                // not decode (skipping it would lose that object's later deletion: the watch
                // resumes after it, and the store would keep the old version for good).
                let malformed = matches!(&item, Err(e) if is_malformed(e));
                match fallback.take() {
                    Some((api, config)) if malformed => {
                        tracing::info!(
                            resource = %describe(&api, &config),
                            "an object does not decode; listing again, decoding each object on its own"
                        );
                        stream = watcher(api, config).default_backoff().boxed();
                    }
                    unused => {
                        fallback = unused;
                        return Some((item, (stream, fallback)));
                    }
                }
            }
        },
    )
}

/// A strict watcher's event, as a lenient one's.
fn wrap<K>(event: watcher::Event<K>) -> watcher::Event<Lenient<K>> {
    match event {
        watcher::Event::Apply(obj) => watcher::Event::Apply(Lenient::Ok(obj)),
        watcher::Event::Delete(obj) => watcher::Event::Delete(Lenient::Ok(obj)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(obj) => watcher::Event::InitApply(Lenient::Ok(obj)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// One watch feeding one [`Store`], shared by every handler registered on it.
///
/// Cloning gives another handle to the same informer. When the last handle and the last
/// [`subscribe`](Informer::subscribe) stream are dropped, the informer is told to stop (as by
/// [`Informer::stop`], without waiting), so a forgotten informer does not watch forever;
/// handlers from [`add_handler`](Informer::add_handler) do not keep it running. A
/// [`Cache`](crate::Cache) keeps a handle to each of its informers until it is stopped or
/// dropped.
pub struct Informer<K> {
    shared: Arc<Shared<K>>,
    /// Cancels the informer's token when the last handle goes.
    _handles: Arc<DropGuard>,
}

impl<K> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            _handles: Arc::clone(&self._handles),
        }
    }
}

impl<K> Debug for Informer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informer")
            .field("resource", &self.shared.resource)
            .field("synced", &*self.shared.synced.borrow())
            .field("store", &self.shared.store)
            .finish()
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// An informer over `api` (which fixes the namespace scope, and for
    /// `Api<PartialObjectMeta<K>>` makes it a metadata-only watch). Defaults: no selectors,
    /// [`strip_managed_fields`] as the transform, no resync.
    pub fn builder(api: Api<K>) -> InformerBuilder<K> {
        InformerBuilder {
            api,
            lenient: None,
            config: watcher::Config::default(),
            transform: Some(Arc::new(strip_managed_fields::<K>)),
            resync: None,
            token: CancellationToken::new(),
            tracker: TaskTracker::new(),
        }
    }
}

impl<K: Resource + Send + Sync + 'static> Informer<K> {
    /// The store the watch fills.
    pub fn store(&self) -> &Store<K> {
        &self.shared.store
    }

    /// Whether the first list has been stored completely, and the watch has not failed
    /// (see [`has_failed`](Self::has_failed)).
    pub fn has_synced(&self) -> bool {
        *self.shared.synced.borrow() && !self.has_failed()
    }

    /// Whether the watch task is still running: false once it has ended, whether stopped
    /// or failed.
    pub fn is_running(&self) -> bool {
        self.shared.running.load(Ordering::Acquire)
    }

    /// Whether the watch task ended by a panic (outside the index functions and transforms,
    /// whose panics are caught and skipped). The informer is then stopped: subscribers'
    /// streams end, [`has_synced`](Self::has_synced) is false and
    /// [`wait_for_sync`](Self::wait_for_sync) fails with [`SyncError::Failed`]; the store
    /// keeps what it held. A [`Cache`](crate::Cache) counts it in
    /// [`Cache::failed_count`](crate::Cache::failed_count) and starts a new informer the next
    /// time one is asked for.
    pub fn has_failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// Waits until the first list has been stored, at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`SyncError::Timeout`] if the time ran out, [`SyncError::Stopped`] if the informer
    /// was stopped before it synced, [`SyncError::Failed`] if its watch failed.
    pub async fn wait_for_sync(&self, timeout: Duration) -> Result<(), SyncError> {
        let mut synced = self.shared.synced.subscribe();
        let wait = async {
            tokio::select! {
                res = synced.wait_for(|s| *s) => res.is_ok(),
                () = self.shared.token.cancelled() => *self.shared.synced.borrow(),
            }
        };
        let outcome = tokio::time::timeout(timeout, wait).await;
        // A failure cancels the token after setting the flag, so it is seen here.
        if self.has_failed() {
            return Err(SyncError::Failed {
                resource: self.shared.resource.clone(),
            });
        }
        match outcome {
            Ok(true) => Ok(()),
            Ok(false) => Err(SyncError::Stopped {
                resource: self.shared.resource.clone(),
            }),
            Err(_) => Err(SyncError::Timeout {
                resource: self.shared.resource.clone(),
                timeout,
            }),
        }
    }

    /// A stream of events with a queue of its own: it first yields an [`Event::Add`] (with
    /// `initial_list` set) for every object already stored, then every change.
    ///
    /// The queue is unbounded, so a consumer that falls behind never slows the watch or
    /// other consumers; its backlog (one small event per change, sharing the stored `Arc`s)
    /// grows instead, and it sees every event in order when it catches up. Dropping the
    /// stream unregisters it. The stream ends when the informer stops.
    pub fn subscribe(&self) -> EventStream<K> {
        self.subscribe_holding(Some(Arc::clone(&self._handles)))
    }

    /// A subscription; with `handle`, it keeps the informer running like a handle does.
    fn subscribe_holding(&self, handle: Option<Arc<DropGuard>>) -> EventStream<K> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut subscribers = self.shared.subscribers();
        self.shared.store.for_each(|obj| {
            let _ = tx.send(Event::Add {
                obj: Arc::clone(obj),
                initial_list: true,
            });
        });
        if !self.shared.token.is_cancelled() {
            subscribers.push(tx);
        }
        EventStream {
            rx,
            _handle: handle,
        }
    }

    /// Registers an async handler, run on a task of its own over its own [`subscribe`]
    /// queue: one event at a time, in order, each awaited before the next. A slow handler
    /// delays only itself (see [`subscribe`] for what its backlog costs).
    ///
    /// On stop the handler finishes the event it is on and gets no more.
    ///
    /// [`subscribe`]: Informer::subscribe
    pub fn add_handler<F, Fut>(&self, mut handler: F)
    where
        F: FnMut(Event<K>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        // The handler's task does not keep the informer running: it ends with it.
        let mut events = self.subscribe_holding(None);
        let token = self.shared.token.clone();
        self.shared.tracker.spawn(async move {
            loop {
                let event = tokio::select! {
                    biased;
                    () = token.cancelled() => break,
                    event = events.next() => event,
                };
                match event {
                    Some(event) => handler(event).await,
                    None => break,
                }
            }
        });
    }

    /// The informer's counters.
    pub fn stats(&self) -> InformerStats {
        let s = &self.shared.stats;
        InformerStats {
            malformed_objects: s.malformed.load(Ordering::Relaxed),
            watch_errors: s.errors.load(Ordering::Relaxed),
            relists: s.relists.load(Ordering::Relaxed),
            resyncs: s.resyncs.load(Ordering::Relaxed),
            panics: s.panics.load(Ordering::Relaxed),
        }
    }

    /// What the informer watches, for messages: kind, namespace and selectors.
    pub fn resource(&self) -> &str {
        &self.shared.resource
    }

    /// Stops the watch and the handlers, and waits for their tasks to end.
    pub async fn stop(&self) {
        self.shared.token.cancel();
        self.shared.tracker.close();
        self.shared.tracker.wait().await;
    }

    /// Whether the informer has been told to stop.
    pub fn is_stopped(&self) -> bool {
        self.shared.token.is_cancelled()
    }
}

/// The events of one subscriber, from [`Informer::subscribe`].
#[derive(Debug)]
pub struct EventStream<K> {
    rx: mpsc::UnboundedReceiver<Event<K>>,
    /// Keeps the informer running while the stream is held, as a handle does.
    _handle: Option<Arc<DropGuard>>,
}

impl<K> EventStream<K> {
    /// The number of events waiting in this subscriber's queue.
    pub fn backlog(&self) -> usize {
        self.rx.len()
    }
}

impl<K> Stream for EventStream<K> {
    type Item = Event<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

#[derive(Default)]
struct Stats {
    malformed: AtomicU64,
    errors: AtomicU64,
    relists: AtomicU64,
    resyncs: AtomicU64,
    panics: AtomicU64,
}

struct Shared<K> {
    resource: String,
    store: Store<K>,
    /// Held while an event is applied to the store and sent, so a new subscriber's replay
    /// of the store and its later events neither overlap nor leave a gap.
    subscribers: Mutex<Vec<mpsc::UnboundedSender<Event<K>>>>,
    synced: watch::Sender<bool>,
    /// Cleared when the watch task ends, for any reason.
    running: AtomicBool,
    /// Set when the watch task ended by a panic.
    failed: AtomicBool,
    stats: Stats,
    token: CancellationToken,
    tracker: TaskTracker,
}

impl<K> Shared<K> {
    fn subscribers(&self) -> MutexGuard<'_, Vec<mpsc::UnboundedSender<Event<K>>>> {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn send<K>(subscribers: &mut Vec<mpsc::UnboundedSender<Event<K>>>, event: &Event<K>) {
    subscribers.retain(|tx| tx.send(event.clone()).is_ok());
}

/// Runs the watch loop `run` and, however it ends, ends every subscriber's stream and
/// marks the informer not running. A panic that escapes it (none from user code: index
/// functions and transforms are caught where they run) also marks the informer failed and
/// stops it, so that it is seen as dead rather than silently idle.
async fn supervise<K>(shared: Arc<Shared<K>>, run: impl Future<Output = ()> + Send) {
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
            panic = %unwind::message(&*payload),
            "the informer's watch task panicked; the informer has stopped"
        );
        shared.token.cancel();
    }
    shared.running.store(false, Ordering::Release);
    // Dropping the senders ends every subscriber's stream once it has drained its queue.
    shared.subscribers().clear();
}

/// The watch loop: applies watcher events to the store, one object at a time, and fans
/// the resulting events out.
async fn run<K, S>(
    shared: Arc<Shared<K>>,
    stream: S,
    transform: Option<Transform<K>>,
    resync: Option<Duration>,
) where
    K: Resource + Clone + Send + Sync + 'static,
    S: Stream<Item = Result<watcher::Event<Lenient<K>>, watcher::Error>> + Send,
{
    let mut stream = pin!(stream);
    // Every list gets a new epoch; objects not stamped with it at its end are gone.
    let mut epoch = 0_u64;
    let mut first_list = true;
    let mut next_resync: Option<Instant> = None;
    loop {
        let resync_due = async {
            match next_resync {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let item = tokio::select! {
            biased;
            () = shared.token.cancelled() => break,
            () = resync_due => {
                resync_all(&shared);
                next_resync = resync.map(|p| Instant::now() + jittered(p));
                continue;
            }
            item = stream.next() => item,
        };
        let Some(item) = item else { break };
        let event = match item {
            Ok(event) => event,
            Err(err) => {
                record_error(&shared, &err);
                continue;
            }
        };
        // A transform that panics may leave `obj` half changed; that copy is dropped and
        // nothing else has been touched, so the object is skipped as if never received.
        let transformed = |mut obj: K| match &transform {
            Some(t) => match unwind::catch(|| t(&mut obj)) {
                Ok(()) => Ok(obj),
                Err(message) => {
                    record_panic(&shared, "transform", &ObjectKey::of(&obj), &message);
                    Err(ObjectKey::of(&obj))
                }
            },
            None => Ok(obj),
        };
        let mut panics = Vec::new();
        // Decoded objects carry spare capacity (a one-element `Vec` is allocated for four);
        // a clone allocates exactly, so objects that will be stored are cloned and the
        // decoded copies dropped. Unchanged objects are not, as they are about to be dropped.
        #[allow(
            clippy::redundant_clone,
            reason = "the clone is the point: it allocates exactly"
        )]
        let compact = |obj: K| {
            // During the first list nothing is unchanged, so the lookup is skipped.
            if !first_list && shared.store.has_version_of(&obj) {
                obj
            } else {
                obj.clone()
            }
        };
        match event {
            watcher::Event::Init => {
                epoch += 1;
                if !first_list {
                    shared.stats.relists.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(resource = %shared.resource, "relisting");
                }
            }
            watcher::Event::InitApply(Lenient::Malformed(bad))
            | watcher::Event::Apply(Lenient::Malformed(bad)) => {
                record_malformed(&shared, &bad);
                // Keep the last good version through a relist's sweep.
                shared.store.touch(&key_of_meta(&bad.metadata), epoch);
            }
            watcher::Event::Delete(Lenient::Malformed(bad)) => {
                record_malformed(&shared, &bad);
                let key = key_of_meta(&bad.metadata);
                let mut subscribers = shared.subscribers();
                if let Some(obj) = shared.store.remove(&key, &mut panics) {
                    // The last good version stands for the deleted object.
                    send(
                        &mut subscribers,
                        &Event::Delete {
                            obj,
                            final_state_unknown: true,
                        },
                    );
                }
            }
            watcher::Event::InitApply(Lenient::Ok(obj))
            | watcher::Event::Apply(Lenient::Ok(obj)) => {
                let initial_list = first_list;
                let obj = match transformed(obj) {
                    Ok(obj) => compact(obj),
                    Err(key) => {
                        // Keep the last good version, if any, through a relist's sweep.
                        shared.store.touch(&key, epoch);
                        continue;
                    }
                };
                let mut subscribers = shared.subscribers();
                match shared.store.apply(obj, epoch, &mut panics) {
                    Applied::Added(obj) => {
                        send(&mut subscribers, &Event::Add { obj, initial_list });
                    }
                    Applied::Updated { old, new } => {
                        send(&mut subscribers, &Event::Update { old, new });
                    }
                    Applied::Unchanged | Applied::Skipped => {}
                }
            }
            watcher::Event::InitDone => {
                let mut subscribers = shared.subscribers();
                for obj in shared.store.sweep(epoch, &mut panics) {
                    send(
                        &mut subscribers,
                        &Event::Delete {
                            obj,
                            final_state_unknown: true,
                        },
                    );
                }
                drop(subscribers);
                if first_list {
                    first_list = false;
                    shared.synced.send_replace(true);
                    next_resync = resync.map(|p| Instant::now() + jittered(p));
                    tracing::debug!(resource = %shared.resource, objects = shared.store.len(), "synced");
                }
            }
            watcher::Event::Delete(Lenient::Ok(obj)) => {
                let transformed = transformed(obj);
                let key = match &transformed {
                    Ok(obj) => ObjectKey::of(obj),
                    Err(key) => key.clone(),
                };
                let mut subscribers = shared.subscribers();
                let stored = shared.store.remove(&key, &mut panics);
                // The object is gone either way; without a transformed copy, the last
                // stored version stands for it, as for a malformed one.
                let event = match (transformed, stored) {
                    (Ok(obj), _) => Some(Event::Delete {
                        obj: Arc::new(obj),
                        final_state_unknown: false,
                    }),
                    (Err(_), Some(obj)) => Some(Event::Delete {
                        obj,
                        final_state_unknown: true,
                    }),
                    (Err(_), None) => None,
                };
                if let Some(event) = event {
                    send(&mut subscribers, &event);
                }
            }
        }
        for panic in panics {
            record_index_panic(&shared, &panic);
        }
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
    metrics::counter!("rudder_cache_malformed_objects_total", "resource" => shared.resource.clone())
        .increment(1);
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

fn record_panic<K>(shared: &Shared<K>, function: &'static str, key: &ObjectKey, message: &str) {
    tracing::error!(
        resource = %shared.resource,
        object = %key,
        panic = %message,
        "a {function} panicked; skipping the object"
    );
    count_panic(shared, function);
}

fn count_panic<K>(shared: &Shared<K>, function: &'static str) {
    shared.stats.panics.fetch_add(1, Ordering::Relaxed);
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "rudder_cache_panics_total",
        "resource" => shared.resource.clone(),
        "function" => function
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = function;
}

fn record_error<K>(shared: &Shared<K>, err: &watcher::Error) {
    if is_malformed(err) {
        shared.stats.malformed.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!("rudder_cache_malformed_objects_total", "resource" => shared.resource.clone())
            .increment(1);
        tracing::warn!(resource = %shared.resource, error = %err, "skipping an object that does not decode");
    } else {
        shared.stats.errors.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!("rudder_cache_watch_errors_total", "resource" => shared.resource.clone())
            .increment(1);
        tracing::warn!(resource = %shared.resource, error = %err, "watch error; retrying with backoff");
    }
}

/// Whether a watcher error is an object that did not decode. kube-client reports a watch
/// line that is not a `WatchEvent<K>` as a `SerdeError`, or, when the line happens to parse
/// as a `Status` (every field of which is optional), as an API error with code 0, which a
/// real status from the server never has.
pub(crate) fn is_malformed(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchFailed(e) | watcher::Error::InitialListFailed(e) => match e {
            kube::Error::SerdeError(_) => true,
            kube::Error::Api(status) => status.code == 0,
            _ => false,
        },
        _ => false,
    }
}

/// `period` plus a random fraction of up to 10% of it.
fn jittered(period: Duration) -> Duration {
    let random = RandomState::new().hash_one(Instant::now());
    // The top 53 bits as a fraction in [0, 1).
    let fraction = (random >> 11) as f64 / (1_u64 << 53) as f64;
    period + period.mul_f64(0.1 * fraction)
}

fn describe<K: Resource>(api: &Api<K>, config: &watcher::Config) -> String {
    let mut out = api.resource_url().to_owned();
    if let Some(labels) = &config.label_selector {
        out.push_str(&format!(" labels={labels}"));
    }
    if let Some(fields) = &config.field_selector {
        out.push_str(&format!(" fields={fields}"));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn jitter_stays_within_ten_percent() {
        let period = Duration::from_secs(1000);
        for _ in 0..100 {
            let d = jittered(period);
            assert!(
                d >= period && d <= period + Duration::from_secs(100),
                "{d:?}"
            );
        }
    }

    #[test]
    fn decode_failures_count_as_malformed_and_api_errors_do_not() {
        let serde = serde_json::from_str::<u32>("x").unwrap_err();
        assert!(is_malformed(&watcher::Error::WatchFailed(
            kube::Error::SerdeError(serde)
        )));
        let lenient = kube::core::Status::default();
        assert!(is_malformed(&watcher::Error::WatchFailed(
            kube::Error::Api(Box::new(lenient))
        )));
        let gone = kube::core::Status {
            code: 410,
            ..Default::default()
        };
        assert!(!is_malformed(&watcher::Error::WatchFailed(
            kube::Error::Api(Box::new(gone))
        )));
        assert!(!is_malformed(&watcher::Error::NoResourceVersion));
    }

    fn cm(name: &str, rv: &str) -> Lenient<k8s_openapi::api::core::v1::ConfigMap> {
        Lenient::Ok(k8s_openapi::api::core::v1::ConfigMap {
            metadata: kube::core::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn bad(name: &str) -> Lenient<k8s_openapi::api::core::v1::ConfigMap> {
        Lenient::Malformed(Box::new(Malformed {
            metadata: kube::core::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            error: "invalid type".into(),
        }))
    }

    #[tokio::test]
    async fn a_malformed_object_keeps_its_last_good_version_until_deleted() {
        use watcher::Event as W;
        type Cm = k8s_openapi::api::core::v1::ConfigMap;
        let (tx, rx) = mpsc::unbounded_channel::<W<Lenient<Cm>>>();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (Ok(event), rx))
        });
        let informer = start_on(
            "configmaps".into(),
            stream,
            None,
            None,
            CancellationToken::new(),
            TaskTracker::new(),
        );
        let mut events = informer.subscribe();
        let mut next = async || {
            let event = tokio::time::timeout(Duration::from_secs(5), events.next())
                .await
                .unwrap()
                .unwrap();
            match event {
                Event::Add { obj, initial_list } => format!(
                    "add {} {initial_list}",
                    obj.metadata.name.as_deref().unwrap()
                ),
                Event::Update { new, .. } => {
                    format!("update {}", new.metadata.name.as_deref().unwrap())
                }
                Event::Delete {
                    obj,
                    final_state_unknown,
                } => format!(
                    "delete {}@{} {final_state_unknown}",
                    obj.metadata.name.as_deref().unwrap(),
                    obj.metadata.resource_version.as_deref().unwrap()
                ),
            }
        };
        let key = |name: &str| ObjectKey::namespaced("ns", name);
        for event in [
            W::Init,
            W::InitApply(cm("a", "1")),
            W::InitApply(cm("b", "1")),
            W::InitDone,
        ] {
            tx.send(event).unwrap();
        }
        assert_eq!(next().await, "add a true");
        assert_eq!(next().await, "add b true");

        // `a` turns malformed on the watch, then in a relist: its last good version stays.
        tx.send(W::Apply(bad("a"))).unwrap();
        for event in [
            W::Init,
            W::InitApply(bad("a")),
            W::InitApply(cm("b", "1")),
            W::InitDone,
        ] {
            tx.send(event).unwrap();
        }
        tx.send(W::Apply(cm("marker", "2"))).unwrap();
        assert_eq!(
            next().await,
            "add marker false",
            "no delete of a, no update of b"
        );
        assert_eq!(
            informer
                .store()
                .get(&key("a"))
                .unwrap()
                .metadata
                .resource_version
                .as_deref(),
            Some("1")
        );
        assert_eq!(informer.stats().malformed_objects, 2);
        assert_eq!(informer.stats().relists, 1);

        // Its deletion removes that version; a malformed unknown object's deletion is nothing.
        tx.send(W::Delete(bad("unknown"))).unwrap();
        tx.send(W::Delete(bad("a"))).unwrap();
        assert_eq!(next().await, "delete a@1 true");
        assert!(informer.store().get(&key("a")).is_none());
        assert_eq!(informer.stats().malformed_objects, 4);
        informer.stop().await;
    }

    type Cm = k8s_openapi::api::core::v1::ConfigMap;
    type Sender = mpsc::UnboundedSender<watcher::Event<Lenient<Cm>>>;

    /// An informer fed by hand, through the returned sender.
    fn fed_informer(transform: Option<Transform<Cm>>) -> (Sender, Informer<Cm>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (Ok(event), rx))
        });
        let informer = start_on(
            "configmaps".into(),
            stream,
            transform,
            None,
            CancellationToken::new(),
            TaskTracker::new(),
        );
        (tx, informer)
    }

    async fn next_name(events: &mut EventStream<Cm>) -> String {
        let event = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("an event within 5 s")
            .expect("the stream goes on");
        let kind = match &event {
            Event::Add { .. } => "add",
            Event::Update { .. } => "update",
            Event::Delete { .. } => "delete",
        };
        format!(
            "{kind} {}",
            event.object().metadata.name.as_deref().unwrap()
        )
    }

    fn names(objs: &[Arc<Cm>]) -> Vec<String> {
        let mut names: Vec<_> = objs
            .iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn an_index_function_panic_skips_the_object_and_the_watch_goes_on() {
        use watcher::Event as W;
        let (tx, informer) = fed_informer(None);
        informer
            .store()
            .add_index("name", |c: &Cm| {
                let name = c.metadata.name.clone().unwrap();
                assert!(name != "bad", "the index refuses bad");
                vec![name]
            })
            .unwrap();
        let mut events = informer.subscribe();
        for event in [
            W::Init,
            W::InitApply(cm("a", "1")),
            W::InitApply(cm("bad", "1")),
            W::InitApply(cm("c", "1")),
            W::InitDone,
        ] {
            tx.send(event).unwrap();
        }
        assert_eq!(next_name(&mut events).await, "add a");
        assert_eq!(next_name(&mut events).await, "add c");
        informer
            .wait_for_sync(Duration::from_secs(5))
            .await
            .unwrap();
        assert!(informer.has_synced());
        tx.send(W::Apply(cm("d", "2"))).unwrap();
        assert_eq!(next_name(&mut events).await, "add d");

        let store = informer.store();
        assert_eq!(names(&store.list()), ["a", "c", "d"]);
        assert_eq!(names(&store.list_namespace("ns")), ["a", "c", "d"]);
        let mut values = store.index_values("name").unwrap();
        values.sort();
        assert_eq!(values, ["a", "c", "d"]);
        assert_eq!(informer.stats().panics, 1);
        assert!(informer.is_running());
        assert!(!informer.has_failed());

        // Its deletion reaches the subscribers, and the store stays as it was.
        tx.send(W::Delete(cm("bad", "3"))).unwrap();
        assert_eq!(next_name(&mut events).await, "delete bad");
        assert_eq!(store.len(), 3);
        informer.stop().await;
    }

    #[tokio::test]
    async fn a_transform_panic_skips_the_object_and_the_watch_goes_on() {
        use watcher::Event as W;
        let transform: Transform<Cm> = Arc::new(|c: &mut Cm| {
            c.data = Some([("seen".to_owned(), "yes".to_owned())].into());
            let rv = c.metadata.resource_version.as_deref().unwrap();
            assert!(rv != "666", "the transform refuses 666");
        });
        let (tx, informer) = fed_informer(Some(transform));
        let mut events = informer.subscribe();
        for event in [
            W::Init,
            W::InitApply(cm("a", "1")),
            W::InitApply(cm("bad", "666")),
            W::InitDone,
        ] {
            tx.send(event).unwrap();
        }
        assert_eq!(next_name(&mut events).await, "add a");
        // A panicking update keeps the last good version; a later good one replaces it.
        tx.send(W::Apply(cm("a", "666"))).unwrap();
        tx.send(W::Apply(cm("c", "2"))).unwrap();
        assert_eq!(next_name(&mut events).await, "add c");
        let key = ObjectKey::namespaced("ns", "a");
        let stored = informer.store().get(&key).unwrap();
        assert_eq!(stored.metadata.resource_version.as_deref(), Some("1"));
        assert_eq!(informer.stats().panics, 2);
        assert!(informer.has_synced());

        // Its deletion still removes it, and tells with the last good version.
        tx.send(W::Delete(cm("a", "666"))).unwrap();
        assert_eq!(next_name(&mut events).await, "delete a");
        assert!(informer.store().get(&key).is_none());
        assert_eq!(informer.stats().panics, 3);
        assert_eq!(names(&informer.store().list()), ["c"]);
        informer.stop().await;
    }

    #[tokio::test]
    async fn a_watch_task_that_panics_ends_every_stream_and_says_it_failed() {
        use watcher::Event as W;
        let (tx, rx) = mpsc::unbounded_channel::<Option<W<Lenient<Cm>>>>();
        // `None` stands for something in the watch (kube-runtime, say) panicking.
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            let event = rx.recv().await?;
            let event = event.expect("the watch broke");
            Some((Ok(event), rx))
        });
        let informer = start_on(
            "configmaps".into(),
            stream,
            None,
            None,
            CancellationToken::new(),
            TaskTracker::new(),
        );
        let mut events = informer.subscribe();
        for event in [W::Init, W::InitApply(cm("a", "1")), W::InitDone] {
            tx.send(Some(event)).unwrap();
        }
        assert_eq!(next_name(&mut events).await, "add a");
        informer
            .wait_for_sync(Duration::from_secs(5))
            .await
            .unwrap();
        assert!(informer.is_running());

        tx.send(None).unwrap();
        let end = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
        assert!(matches!(end, Ok(None)), "the stream ends");
        assert!(informer.has_failed());
        assert!(!informer.is_running());
        assert!(!informer.has_synced());
        assert!(informer.is_stopped());
        assert!(matches!(
            informer.wait_for_sync(Duration::from_secs(5)).await,
            Err(SyncError::Failed { .. })
        ));
        // A late subscriber gets what the store held, then the end.
        let mut late = informer.subscribe();
        assert_eq!(next_name(&mut late).await, "add a");
        assert!(late.next().await.is_none());
        informer.stop().await;
    }
}
