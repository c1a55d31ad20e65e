//! Rudder's list/watch engine: consistent lists (streaming, or in pages), watches resumed from
//! the last resourceVersion, `410 Gone` answered by a relist, a resource not served as a
//! state, a bound on silence, one backoff policy; on kube-client's HTTP client.
//!
//! [`watch`] turns an [`Api`] into a stream of [`Event`]s that never ends on its own: a
//! list's objects between an [`Event::Init`] and an [`Event::InitDone`], then changes. Every
//! informer of the cache runs on it; other watches of the workspace use it directly.
//!
//! - **Consistent lists.** A streaming list is a watch with `sendInitialEvents=true`,
//!   `resourceVersionMatch=NotOlderThan`, no `resourceVersion` and bookmarks: the server sends
//!   the most recent state (after its watch cache has caught up with the latest write), then
//!   a bookmark annotated `k8s.io/initial-events-end: "true"`, at which the list ends. A
//!   paginated list (`limit`/`continue`) asks with no `resourceVersion` either, and the
//!   watch then starts from the list's resourceVersion. Neither reads the past: a
//!   `resourceVersion=0` would let a watch cache answer from it.
//! - **Falling back and back.** As [`ListStrategy::Streaming`] says: a streaming list refused
//!   (`400`, `422`) or silent without its end bookmark for
//!   [`Config::initial_events_bound`] lists in pages instead, and streams again at the first
//!   relist after [`Config::streaming_retry`].
//! - **Resuming.** A watch that ends (the server's `timeoutSeconds`, a dropped connection) is
//!   opened again from the last resourceVersion seen, a bookmark's included, without a list.
//!   `410 Gone` (as the answer, or as an `ERROR` event in the stream) means that version has
//!   been compacted away: the engine lists again.
//! - **Not served.** A `404` (a CRD not installed yet, or deleted) is a state, not an error:
//!   the engine hands a store that held a list an empty one (the objects went with the
//!   resource), waits (500 ms doubling to 10 s) and asks again.
//! - **Silence.** A watch that sends nothing, not even a bookmark, for
//!   [`Config::silence_bound`] is taken for dead ([`Error::Silent`]) and resumed.
//! - **Errors** are [`Error`]s, each followed by a [`Backoff`] wait (client-go's reflector's
//!   policy by default) before the engine tries again.

mod engine;
mod error;
mod request;
pub(crate) mod strategy;

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use kube::{Api, Resource};
use rudder_core::backoff::Backoff;
use serde::de::DeserializeOwned;

pub use error::Error;
pub(crate) use strategy::{
    DEFAULT_INITIAL_EVENTS_BOUND, DEFAULT_STREAMING_RETRY, ListMode, ListStrategy, Lists,
};

/// The annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// The default of [`Config::silence_bound`] past the server's own watch timeout: the server
/// sends a bookmark about every minute, so a healthy watch is never this silent.
pub const SILENCE_MARGIN: Duration = Duration::from_secs(30);

/// One event of the engine's stream.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<K> {
    /// A list begins (the first, or a relist): what it does not bring again is gone.
    Init,
    /// An object of the list.
    InitApply(K),
    /// The list has ended: the objects since [`Event::Init`] are the whole state.
    InitDone,
    /// An object added or changed.
    Apply(K),
    /// An object deleted.
    Delete(K),
}

/// What one engine lists and watches, and how.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// A label selector in the API server's syntax.
    pub labels: Option<String>,
    /// A field selector in the API server's syntax.
    pub fields: Option<String>,
    /// The server-side timeout of each watch request, in seconds (the server ends the watch
    /// then, and the engine resumes it).
    pub timeout: u32,
    /// Objects per page of a paginated list.
    pub page_size: u32,
    /// How to list.
    pub strategy: ListStrategy,
    /// See [`ListStrategy::Streaming`].
    pub initial_events_bound: Duration,
    /// See [`ListStrategy::Streaming`].
    pub streaming_retry: Duration,
    /// How long a watch may send nothing at all before it is dropped and resumed.
    pub silence_bound: Duration,
    /// The waits after errors.
    pub backoff: Backoff,
}

impl Default for Config {
    fn default() -> Self {
        let timeout = 290;
        Self {
            labels: None,
            fields: None,
            timeout,
            page_size: 500,
            strategy: ListStrategy::default(),
            initial_events_bound: DEFAULT_INITIAL_EVENTS_BOUND,
            streaming_retry: DEFAULT_STREAMING_RETRY,
            silence_bound: Duration::from_secs(timeout.into()) + SILENCE_MARGIN,
            backoff: Backoff::default(),
        }
    }
}

impl Config {
    /// Only objects whose labels match `selector`.
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.labels = Some(selector.to_owned());
        self
    }

    /// Only objects whose fields match `selector`.
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.fields = Some(selector.to_owned());
        self
    }

    /// How to list.
    #[must_use]
    pub fn strategy(mut self, strategy: ListStrategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// The server-side timeout of each watch request, in seconds; the silence bound
    /// follows it.
    #[must_use]
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.timeout = seconds;
        self.silence_bound = Duration::from_secs(seconds.into()) + SILENCE_MARGIN;
        self
    }

    /// How long a watch may send nothing at all before it is dropped and resumed.
    #[must_use]
    pub fn silence_bound(mut self, bound: Duration) -> Self {
        self.silence_bound = bound;
        self
    }

    /// The waits after errors.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The selectors, page size and timeout of a kube-runtime watcher configuration (what
    /// [`InformerBuilder::config`](crate::InformerBuilder::config) takes), with the list
    /// options of `lists`.
    pub(crate) fn of_watcher(config: &kube_runtime::watcher::Config, lists: &Lists) -> Self {
        let mut out = Self::default().timeout(config.timeout.unwrap_or(290));
        out.labels.clone_from(&config.label_selector);
        out.fields.clone_from(&config.field_selector);
        out.page_size = config.page_size.unwrap_or(500);
        out.strategy = lists.strategy;
        out.initial_events_bound = lists.initial_events_bound;
        out.streaming_retry = lists.streaming_retry;
        out
    }
}

/// The events of `api`'s objects as [`Config`] says: lists, then changes, for as long as the
/// stream is polled. Errors are items, each followed by a backoff wait; the stream never ends
/// on its own.
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// use futures::StreamExt;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use rudder_cache::watch::{self, Event};
///
/// let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
/// let mut events = std::pin::pin!(watch::watch(api, watch::Config::default()));
/// while let Some(event) = events.next().await {
///     match event {
///         Ok(Event::InitDone) => println!("synced"),
///         Ok(Event::Apply(cm)) => println!("changed: {:?}", cm.metadata.name),
///         Ok(_) => {}
///         Err(error) => eprintln!("{error}"),
///     }
/// }
/// # }
/// ```
pub fn watch<K>(api: Api<K>, config: Config) -> impl Stream<Item = Result<Event<K>, Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let resource = api.resource_url().to_owned();
    watch_with(api, config, Arc::new(ListMode::default()), resource)
}

/// [`watch`], telling `mode` what it lists with and whether the resource is served.
pub(crate) fn watch_with<K>(
    api: Api<K>,
    config: Config,
    mode: Arc<ListMode>,
    resource: String,
) -> impl Stream<Item = Result<Event<K>, Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let engine = engine::Engine::new(api, config, mode, resource);
    futures::stream::unfold(engine, |mut engine| async move {
        let item = engine.next().await;
        Some((item, engine))
    })
}
