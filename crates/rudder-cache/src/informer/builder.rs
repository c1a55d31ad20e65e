//! Options for one informer ([`InformerBuilder`]) and the event stream they make: the
//! list/watch engine (`watch/`), switched to per-object decoding when an object does not
//! decode.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::watch_task::start_on;
use super::{Informer, footprint};
use crate::WireFormat;
use crate::lenient::Lenient;
use crate::transform::{Transform, Transforming, strip_managed_fields};
use crate::watch::{self, Event, ListMode, ListStrategy};
use crate::writes::{Tracked, WriteTracker};

/// Options for one informer; start it with [`InformerBuilder::start`].
pub struct InformerBuilder<K> {
    api: Api<K>,
    /// Set by [`skip_malformed`](InformerBuilder::skip_malformed): the same watch, decoding
    /// each object on its own.
    lenient: Option<Api<Lenient<K>>>,
    /// The watch's options: every setter below that is about listing and watching writes
    /// its field.
    config: watch::Config,
    transform: Option<Transform<K>>,
    /// Whether the transform is the default, [`strip_managed_fields`]: then protobuf
    /// decoding skips managedFields unread.
    strips_managed_fields: bool,
    resync: Option<Duration>,
    token: CancellationToken,
    tracker: TaskTracker,
    writes: Option<Arc<WriteTracker>>,
    cluster: Option<Arc<str>>,
}

impl<K> InformerBuilder<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
{
    /// Watches only objects whose labels match `selector` (the API server's syntax, e.g.
    /// `app=web,tier!=cache`).
    #[must_use]
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.config.labels = Some(selector.into());
        self
    }

    /// Watches only objects whose fields match `selector` (the API server's syntax, e.g.
    /// `metadata.name=one`).
    #[must_use]
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.config.fields = Some(selector.into());
        self
    }

    /// Objects per page of a paginated list (default 500).
    #[must_use]
    pub fn page_size(mut self, objects: u32) -> Self {
        self.config.page_size = objects.max(1);
        self
    }

    /// The server-side timeout of each watch request, in seconds (default 290; at least 1):
    /// the server ends the watch then and the informer resumes it from where it was.
    #[must_use]
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.config = self.config.timeout(seconds);
        self
    }

    /// How the informer lists: [`ListStrategy::Streaming`] (the default) falls back to
    /// [`ListStrategy::Paginated`] on servers that refuse streaming lists;
    /// `Paginated` never tries streaming.
    #[must_use]
    pub fn list_strategy(mut self, strategy: ListStrategy) -> Self {
        self.config.strategy = strategy;
        self
    }

    /// How the informer's lists and watches are encoded: [`WireFormat::Protobuf`] (the
    /// default) asks for protobuf for a built-in type and decodes it straight into its
    /// k8s-openapi type (custom resources and other types stay JSON);
    /// [`WireFormat::Json`] asks for JSON for every type. The format in use is in
    /// [`InformerStats::wire_format`](crate::InformerStats::wire_format).
    #[must_use]
    pub fn wire_format(mut self, wire: WireFormat) -> Self {
        self.config.wire = wire;
        self
    }

    /// How long the informer's watch may send nothing at all, not even a bookmark, before it
    /// is taken for dead (a frozen API server, a connection a middlebox dropped without a
    /// word), dropped and resumed from the last resourceVersion. Default: the watch's timeout
    /// plus [`SILENCE_MARGIN`](crate::watch::SILENCE_MARGIN) (290 s + 30 s); the server sends
    /// a bookmark about every minute, so a healthy watch is never that silent.
    #[must_use]
    pub fn silence_bound(mut self, bound: Duration) -> Self {
        self.config.silence_bound = Some(bound);
        self
    }

    /// How long a streaming list may go without an event before its end-of-initial-events
    /// bookmark has arrived; past it the informer falls back to paginated lists, as a server
    /// too old to know `sendInitialEvents` sends the objects and then nothing more (default
    /// [`DEFAULT_INITIAL_EVENTS_BOUND`](crate::DEFAULT_INITIAL_EVENTS_BOUND)). The bound is
    /// on the silence, not on the whole list, so a large collection streams for as long as
    /// its objects keep coming.
    #[must_use]
    pub fn initial_events_bound(mut self, bound: Duration) -> Self {
        self.config.initial_events_bound = bound;
        self
    }

    /// After a fall back to paginated lists, the first relist this long after it streams
    /// again (default [`DEFAULT_STREAMING_RETRY`](crate::DEFAULT_STREAMING_RETRY)): a server
    /// upgraded since, or whose feature gate was turned on, is used as it now allows. A
    /// healthy watch is never broken to retry; only a relist the watch needs anyway does.
    #[must_use]
    pub fn streaming_retry(mut self, after: Duration) -> Self {
        self.config.streaming_retry = after;
        self
    }

    /// A transform applied to every object before it is stored, replacing the default
    /// ([`strip_managed_fields`]).
    #[must_use]
    pub fn transform(mut self, transform: impl Fn(&mut K) + Send + Sync + 'static) -> Self {
        self.transform = Some(Arc::new(transform));
        self.strips_managed_fields = false;
        self
    }

    /// Like [`transform`](Self::transform), with an already shared function, or `None` to
    /// store objects exactly as the server sends them (`managedFields` included).
    #[must_use]
    pub fn transform_opt(mut self, transform: Option<Transform<K>>) -> Self {
        self.transform = transform;
        self.strips_managed_fields = false;
        self
    }

    /// Re-deliver every stored object as an [`Event::Update`](rudder_core::Event::Update) this often, plus up to 10%
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

    /// Tells `tracker` what the informer stores and removes, so writes recorded with it are
    /// reached when this informer delivers them. A [`Cache`](crate::Cache) does this for
    /// each informer it starts, with its own tracker.
    #[must_use]
    pub fn track_writes(mut self, tracker: Arc<WriteTracker>) -> Self {
        self.writes = Some(tracker);
        self
    }

    /// Labels the informer's metrics with `cluster` (a process with informers of several
    /// clusters: the `rudder` facade's fleet), so the same resource in two clusters makes two
    /// series.
    #[must_use]
    pub fn cluster(self, name: impl Into<Arc<str>>) -> Self {
        self.cluster_opt(Some(name.into()))
    }

    pub(crate) fn cluster_opt(mut self, cluster: Option<Arc<str>>) -> Self {
        self.cluster = cluster;
        self
    }

    /// Starts the watch on the current tokio runtime and returns the informer.
    pub fn start(self) -> Informer<K> {
        let resource = describe(&self.api, &self.config);
        let writes = self
            .writes
            .map(|tracker| Tracked::new(tracker, self.api.resource_url()));
        let mode = Arc::new(ListMode::default());
        let mut config = self.config;
        config.skip_managed_fields = self.strips_managed_fields;
        let strict = watch::watch_with(
            self.api,
            config.clone(),
            Arc::clone(&mode),
            resource.clone(),
        )
        .map(|item| item.map(|event| event.map(Lenient::Ok)))
        .boxed();
        let stream = match self.lenient {
            Some(api) => {
                lenient_on_failure(strict, api, config, Arc::clone(&mode), resource.clone()).boxed()
            }
            None => strict,
        };
        start_on(
            super::Described {
                resource,
                cluster: self.cluster,
            },
            stream,
            Transforming {
                // The default transform only takes `managedFields` away.
                may_add: self.transform.is_some() && !self.strips_managed_fields,
                transform: self.transform,
            },
            self.resync,
            self.token,
            self.tracker,
            writes,
            mode,
            Some(footprint::json_size::<K>),
        )
    }
}

impl<K> InformerBuilder<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    /// Decode each object of a list or watch on its own, so that one object that does not
    /// decode into `K` is skipped (logged, counted in
    /// [`InformerStats::malformed_objects`](crate::InformerStats::malformed_objects)) instead of failing its whole list page, which
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
            config: watch::Config::default(),
            transform: Some(Arc::new(strip_managed_fields::<K>)),
            strips_managed_fields: true,
            resync: None,
            token: CancellationToken::new(),
            tracker: TaskTracker::new(),
            writes: None,
            cluster: None,
        }
    }
}

type WatchStream<K> =
    futures::stream::BoxStream<'static, Result<Event<Lenient<Arc<K>>>, watch::Error>>;

/// `strict` until an object does not decode (in a list page or a watch event), then a new
/// watch of `lenient` (from a fresh list) for good: decoding objects one by one costs
/// nothing until some object needs it.
fn lenient_on_failure<K>(
    strict: WatchStream<K>,
    lenient: Api<Lenient<K>>,
    config: watch::Config,
    mode: Arc<ListMode>,
    resource: String,
) -> impl Stream<Item = Result<Event<Lenient<Arc<K>>>, watch::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    // Boxed: `unfold` moves its state into each item's future and back out.
    let fallback = Some(Box::new((lenient, config, mode, resource)));
    futures::stream::unfold(
        (strict, fallback),
        |(mut stream, mut fallback)| async move {
            loop {
                let item = stream.next().await?;
                // A list page that failed on one object, or a watch event whose object did
                // not decode (skipping it would lose that object's later deletion: the watch
                // resumes after it, and the store would keep the old version for good).
                let malformed = matches!(&item, Err(e) if e.is_decode());
                match fallback.take() {
                    Some(boxed) if malformed => {
                        let (api, config, mode, resource) = *boxed;
                        tracing::info!(
                            %resource,
                            "an object does not decode; listing again, decoding each object on its own"
                        );
                        stream = watch::watch_with(api, config, mode, resource)
                            .map(|item| item.map(|event| event.map(as_strict)))
                            .boxed();
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

/// A lenient engine's object, as the strict engine's: a decoded one behind an `Arc` of its
/// own (the lenient decode is the slow path, taken only once some object did not decode).
fn as_strict<K: Clone>(object: Arc<Lenient<K>>) -> Lenient<Arc<K>> {
    match Arc::unwrap_or_clone(object) {
        Lenient::Ok(object) => Lenient::Ok(Arc::new(object)),
        Lenient::Malformed(bad) => Lenient::Malformed(bad),
    }
}

fn describe<K: Resource>(api: &Api<K>, config: &watch::Config) -> String {
    let mut out = api.resource_url().to_owned();
    if let Some(labels) = &config.labels {
        out.push_str(&format!(" labels={labels}"));
    }
    if let Some(fields) = &config.fields {
        out.push_str(&format!(" fields={fields}"));
    }
    out
}
