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
//! - **Protobuf.** A built-in type (one `rudder-protobuf` has a generated decoder for) is
//!   listed and watched in protobuf, as client-go and controller-runtime do, and decoded
//!   straight into its k8s-openapi type; custom resources, dynamic objects and
//!   metadata-only watches in JSON ([`WireFormat`](crate::WireFormat), [`Config::wire`]). A server that
//!   answers JSON when asked for protobuf is read in JSON from then on.
//! - **Errors** are [`Error`]s, each followed by a [`Backoff`](rudder_core::backoff::Backoff) wait (client-go's reflector's
//!   policy by default) before the engine tries again; but an object that does not decode
//!   ([`Error::Decode`]) is reported and the watch goes on at once (an informer then
//!   switches to lenient decoding).

mod config;
mod engine;
mod error;
mod event;
mod request;
pub(crate) mod strategy;
pub(crate) mod wire;

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

pub use config::{Config, SILENCE_MARGIN};
pub use error::Error;
pub use event::{Event, INITIAL_EVENTS_END};
pub(crate) use strategy::{ListMode, ListStrategy};

/// The events of `api`'s objects as [`Config`] says: lists, then changes, for as long as the
/// stream is polled. Errors are items, each followed by a backoff wait (but for an object that
/// does not decode, after which the watch goes on); the stream never ends on its own.
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
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let resource = api.resource_url().to_owned();
    watch_with(api, config, Arc::new(ListMode::default()), resource)
        .map(|item| item.map(|event| event.map(Arc::unwrap_or_clone)))
}

/// [`watch`], telling `mode` what it lists with and whether the resource is served, each
/// object behind the `Arc` the cache stores it in (put there as it is decoded, it moves as a
/// pointer from then on; unique, so taking it out clones nothing).
pub(crate) fn watch_with<K>(
    api: Api<K>,
    config: Config,
    mode: Arc<ListMode>,
    resource: String,
) -> impl Stream<Item = Result<Event<Arc<K>>, Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    // Boxed: `unfold` moves its state into each item's future and back out, and the
    // engine is several hundred bytes; a box moves as a pointer.
    let engine = Box::new(engine::Engine::new(api, config, mode, resource));
    futures::stream::unfold(engine, |mut engine| async move {
        let item = engine.next().await;
        Some((item, engine))
    })
}
