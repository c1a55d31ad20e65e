//! The engine's state machine: which request comes next (a list page, a streaming list, a
//! resumed watch), what each answer and event means, and what each failure calls for.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;

use kube::core::WatchEvent;
use kube::{Api, Client, Resource};
use rudder_core::backoff::Backoff;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::config::Config;
use super::error::Error;
use super::event::{Event, INITIAL_EVENTS_END};
use super::request;
use super::strategy::{ListMode, ListStrategy};
use super::wire::{self, Answer, Events, Failure, Page, WireFormat};

/// The first wait before asking again for a resource the server does not serve.
const ABSENT_BACKOFF_MIN: Duration = Duration::from_millis(500);
/// The longest wait between two asks.
const ABSENT_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// One list/watch of one resource: what it has seen and what it does next.
pub(crate) struct Engine<K> {
    api: Api<K>,
    client: Client,
    config: Config,
    mode: Arc<ListMode>,
    resource: String,
    /// How the engine lists now.
    current: ListStrategy,
    fell_back_at: Option<Instant>,
    /// The last resourceVersion seen, where a dropped watch resumes; `None` when a list is
    /// needed (the first, after `410 Gone`, or after a list that did not end).
    version: Option<String>,
    /// The type's protobuf decoder while the engine asks for protobuf; `None` in JSON.
    protobuf: Option<rudder_protobuf::Decoder<K>>,
    /// The open watch.
    events: Option<Events<K>>,
    /// Whether the open watch is a streaming list still sending its initial events.
    initial: bool,
    /// Whether a paginated list has begun (its `Init` sent), and the token of its next page.
    paging: Option<Option<String>>,
    /// Events ready to hand out, each object behind the `Arc` the cache stores it in.
    pending: VecDeque<Event<Arc<K>>>,
    /// Whether the next list is asked for whole, without pages: a paginated list's
    /// continue token expired (`410` on a later page), as client-go's pager does then.
    unpaged: bool,
    /// Whether a list has ended (the consumer holds a whole list).
    synced: bool,
    /// While the server does not serve the resource: the waits between asks.
    absent: Option<Backoff>,
    /// The wait before the next request.
    wait: Option<Duration>,
    /// When the open watch was opened, and how many events (bookmarks too) it has sent: a
    /// watch the server ends at once with nothing sent is not resumed at once (a server or
    /// proxy closing every watch would otherwise be asked again as fast as it answers).
    opened: Option<(Instant, u64)>,
}

/// A watch that ends sooner than this having sent nothing is waited on before it is
/// resumed (client-go's reflector calls such a watch "very short").
const SHORT_WATCH: Duration = Duration::from_secs(1);

/// What a failure happened during, for the rules that depend on it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum During {
    /// A streaming list's request or its initial events: `400`/`422` is a refusal of
    /// streaming lists.
    StreamingList,
    /// A paginated list.
    List,
    /// A watch after a list.
    Watch,
}

impl<K> Engine<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    pub(crate) fn new(api: Api<K>, config: Config, mode: Arc<ListMode>, resource: String) -> Self {
        // An engine made for a lenient decode starts where the informer is: streaming,
        // unless an earlier engine of the same informer (the strict one) already fell back.
        let current = if config.strategy == ListStrategy::Streaming
            && mode.current() == ListStrategy::Streaming
        {
            ListStrategy::Streaming
        } else {
            ListStrategy::Paginated
        };
        mode.set(current);
        let protobuf = match config.wire {
            WireFormat::Protobuf if !K::metadata_api() => rudder_protobuf::decoder::<K>(),
            _ => None,
        };
        mode.protobuf.store(protobuf.is_some(), Ordering::Release);
        let client = api.clone().into_client();
        Self {
            api,
            client,
            config,
            mode,
            resource,
            current,
            fell_back_at: None,
            version: None,
            protobuf,
            events: None,
            initial: false,
            paging: None,
            pending: VecDeque::new(),
            unpaged: false,
            synced: false,
            absent: None,
            wait: None,
            opened: None,
        }
    }

    /// The next event or error; waits as long as it takes.
    pub(crate) async fn next(&mut self) -> Result<Event<Arc<K>>, Error> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            if let Some(wait) = self.wait.take() {
                tokio::time::sleep(wait).await;
            }
            let step = if self.events.is_some() {
                self.read().await
            } else if let Some(version) = self.version.clone() {
                self.open_watch(Some(version)).await
            } else {
                self.list().await
            };
            if let Err(Some(error)) = step {
                return Err(error);
            }
        }
    }

    /// Lists: a page of a paginated list, or a streaming list's request.
    async fn list(&mut self) -> Result<(), Option<Error>> {
        if self.paging.is_none() && self.retry_due() {
            // The relist the watch needs anyway streams again.
            tracing::info!(resource = %self.resource, "trying streaming lists again");
            self.switch(ListStrategy::Streaming);
        }
        match self.current {
            ListStrategy::Streaming => self.open_watch(None).await,
            ListStrategy::Paginated => self.list_page().await,
        }
    }

    async fn list_page(&mut self) -> Result<(), Option<Error>> {
        // `paging` is `Some` once the list's first page (and its `Init`) is out.
        let begun = self.paging.is_some();
        let token = self.paging.take().flatten();
        let continued = token.is_some();
        let mut params = request::list_page(&self.config, token);
        if self.unpaged {
            params.limit = None;
        }
        let page = match self.protobuf {
            Some(decode) => {
                match wire::list(
                    &self.client,
                    self.api.resource_url(),
                    &params,
                    decode,
                    self.config.skip_managed_fields,
                )
                .await
                {
                    Ok(Answer::Protobuf(page)) => Ok(page),
                    Ok(Answer::Json(page)) => {
                        self.answered_json();
                        page.ok_or(Failure::Decode("an empty answer".into()))
                    }
                    Err(failure) => Err(failure),
                }
            }
            None => self
                .api
                .list(&params)
                .await
                .map(Page::from)
                .map_err(Failure::of_kube),
        };
        let page = match page {
            Ok(page) => page,
            Err(Failure::Kube(kube::Error::Api(status))) if status.code == 410 && continued => {
                // The continue token expired before the list ended (etcd compacted past the
                // list's version): the list again, whole, as client-go's pager does.
                tracing::info!(resource = %self.resource,
                    "a paginated list's continue token expired (410); listing again without pages");
                self.unpaged = true;
                self.initial = false;
                self.paging = None;
                self.version = None;
                return Ok(());
            }
            Err(Failure::Kube(error)) => return Err(self.failed(error, During::List)),
            Err(Failure::Decode(error)) => return Err(self.undecodable_page(error)),
        };
        self.served();
        if !begun {
            self.pending.push_back(Event::Init);
        }
        self.pending
            .extend(page.items.into_iter().map(Event::InitApply));
        match page.continue_.filter(|token| !token.is_empty()) {
            Some(token) => self.paging = Some(Some(token)),
            None => {
                self.paging = None;
                let Some(version) = page.resource_version.filter(|v| !v.is_empty()) else {
                    // The list did not end: the next one begins with an `Init` of its own.
                    self.pending.clear();
                    self.wait = Some(self.config.backoff.next_delay());
                    return Err(Some(Error::NoResourceVersion));
                };
                self.version = Some(version);
                self.unpaged = false;
                self.list_ended();
            }
        }
        Ok(())
    }

    /// Opens a watch: from `version`, or a streaming list without one.
    async fn open_watch(&mut self, version: Option<String>) -> Result<(), Option<Error>> {
        let streaming_list = version.is_none();
        let during = if streaming_list {
            During::StreamingList
        } else {
            During::Watch
        };
        let request = match request::watch(
            self.api.resource_url(),
            &self.config,
            version.as_deref(),
            K::metadata_api(),
        ) {
            Ok(request) => request,
            Err(error) => {
                self.wait = Some(self.config.backoff.next_delay());
                return Err(Some(Error::Request(kube::Error::BuildRequest(
                    kube::core::request::Error::BuildRequest(error),
                ))));
            }
        };
        let opened = match self.protobuf {
            Some(decode) => match wire::watch(
                &self.client,
                request,
                decode,
                self.config.skip_managed_fields,
            )
            .await
            {
                Ok(Answer::Protobuf(events)) => Ok(events),
                Ok(Answer::Json(_)) => {
                    // Asked again at once, in JSON.
                    self.answered_json();
                    return Ok(());
                }
                Err(error) => Err(error),
            },
            None => self
                .client
                .request_events::<K>(request)
                .await
                .map(|events| {
                    events
                        .map(|item| item.map(wire::behind_arc).map_err(Failure::of_kube))
                        .boxed()
                }),
        };
        match opened {
            Ok(events) => {
                self.opened = Some((Instant::now(), 0));
                self.served();
                if streaming_list {
                    self.pending.push_back(Event::Init);
                    self.initial = true;
                }
                self.events = Some(events);
                Ok(())
            }
            Err(error) => Err(self.failed(error, during)),
        }
    }

    /// The server answered JSON to a request for protobuf: it has no protobuf for the type
    /// (an aggregated API server may not). JSON from now on, said once.
    fn answered_json(&mut self) {
        tracing::info!(resource = %self.resource,
            "the server answers JSON when asked for protobuf; using JSON for this resource");
        self.protobuf = None;
        self.mode.protobuf.store(false, Ordering::Release);
    }

    /// A list page with an object that does not decode: reported (an informer then lists
    /// again decoding each object on its own), after a backoff wait, the list begun again.
    fn undecodable_page(&mut self, error: wire::BoxError) -> Option<Error> {
        self.events = None;
        self.initial = false;
        self.paging = None;
        self.version = None;
        self.wait = Some(self.config.backoff.next_delay());
        Some(Error::Decode(error))
    }

    /// Reads the open watch's next event, within the bound on silence.
    async fn read(&mut self) -> Result<(), Option<Error>> {
        let Some(events) = self.events.as_mut() else {
            return Ok(());
        };
        let streaming_list = self.initial && self.current == ListStrategy::Streaming;
        let bound = if streaming_list {
            self.config.initial_events_bound
        } else {
            self.config.effective_silence_bound()
        };
        let item = match tokio::time::timeout(bound, events.next()).await {
            Ok(item) => item,
            Err(_) if streaming_list => {
                self.fall_back(&format!(
                    "no end-of-initial-events bookmark, and no event for {bound:?}"
                ));
                return Ok(());
            }
            Err(_) => {
                tracing::debug!(resource = %self.resource, ?bound, "the watch is silent; resuming it");
                self.events = None;
                self.wait = Some(self.config.backoff.next_delay());
                return Err(Some(Error::Silent(bound)));
            }
        };
        match item {
            None => {
                // The server ended the watch (its timeout) or the connection closed: resume
                // from the last version seen. A streaming list that had not ended lists again.
                self.events = None;
                if self.initial {
                    self.initial = false;
                    self.version = None;
                    self.wait = Some(self.config.backoff.next_delay());
                } else if let Some((at, 0)) = self.opened
                    && at.elapsed() < SHORT_WATCH
                {
                    let wait = self.config.backoff.next_delay();
                    tracing::debug!(resource = %self.resource, ?wait,
                        "the watch ended at once with nothing sent; resuming it after a wait");
                    self.wait = Some(wait);
                }
                self.opened = None;
                Ok(())
            }
            Some(Ok(event)) => self.event(event),
            // An object that did not decode: reported, and the watch goes on.
            Some(Err(Failure::Decode(error))) => Err(Some(Error::Decode(error))),
            Some(Err(Failure::Kube(error))) => {
                let during = if self.initial {
                    During::StreamingList
                } else {
                    During::Watch
                };
                Err(self.failed(error, during))
            }
        }
    }

    /// One watch event.
    fn event(&mut self, event: WatchEvent<Arc<K>>) -> Result<(), Option<Error>> {
        if let Some((_, events)) = &mut self.opened {
            *events += 1;
        }
        match event {
            WatchEvent::Added(object) | WatchEvent::Modified(object) => {
                self.seen(&object);
                self.pending.push_back(if self.initial {
                    Event::InitApply(object)
                } else {
                    Event::Apply(object)
                });
            }
            WatchEvent::Deleted(object) => {
                self.seen(&object);
                self.pending.push_back(Event::Delete(object));
            }
            WatchEvent::Bookmark(bookmark) => {
                let meta = bookmark.metadata;
                let ends = self.initial
                    && meta.annotations.get(INITIAL_EVENTS_END).map(String::as_str) == Some("true");
                if !meta.resource_version.is_empty() && (ends || !self.initial) {
                    self.version = Some(meta.resource_version);
                }
                if ends {
                    self.initial = false;
                    self.list_ended();
                }
            }
            WatchEvent::Error(status) => {
                let during = if self.initial {
                    During::StreamingList
                } else {
                    During::Watch
                };
                return Err(self.failed(kube::Error::Api(status), during));
            }
        }
        Ok(())
    }

    /// An object's version is where a dropped watch resumes; during a streaming list's
    /// initial events it is not (they are not in version order), the end bookmark's is.
    fn seen(&mut self, object: &K) {
        if self.initial {
            return;
        }
        if let Some(version) = object.meta().resource_version.as_ref()
            && !version.is_empty()
        {
            self.version = Some(version.clone());
        }
    }

    fn list_ended(&mut self) {
        self.pending.push_back(Event::InitDone);
        self.synced = true;
    }

    /// What a failed request or an `ERROR` event calls for: the engine's own rules first
    /// (404, 410, a refused streaming list), then an error to report after a backoff wait.
    fn failed(&mut self, error: kube::Error, during: During) -> Option<Error> {
        self.events = None;
        let list_broken = during != During::Watch;
        if list_broken {
            // A list that did not end is listed again from its start.
            self.initial = false;
            self.paging = None;
            self.version = None;
        }
        let code = match &error {
            kube::Error::Api(status) => status.code,
            _ => 0,
        };
        match code {
            404 => {
                self.not_served();
                None
            }
            410 => {
                tracing::info!(resource = %self.resource, "the watch's resourceVersion is gone (410); relisting");
                self.initial = false;
                self.paging = None;
                self.version = None;
                None
            }
            400 | 422
                if during == During::StreamingList && self.current == ListStrategy::Streaming =>
            {
                let reason = match &error {
                    kube::Error::Api(status) => status.reason.clone(),
                    _ => String::new(),
                };
                tracing::debug!(resource = %self.resource, %error, "the streaming list's answer");
                self.fall_back(&format!("the server answered {code} {reason}"));
                None
            }
            _ => {
                self.wait = Some(self.config.backoff.next_delay());
                Some(Error::of_kube(error))
            }
        }
    }

    /// The server answered 404 for the resource: its CRD is not installed yet, or was
    /// deleted. Rather than an error every backoff, one line at info, an empty list for a
    /// consumer that held one (the objects went with the resource; one that never synced
    /// stays unsynced, so a controller waits for its CRD), then a quiet wait before the
    /// same list is asked for again.
    fn not_served(&mut self) {
        self.initial = false;
        self.paging = None;
        self.version = None;
        if let Some(backoff) = &mut self.absent {
            tracing::debug!(resource = %self.resource, "the server still does not serve the resource");
            self.wait = Some(backoff.next_delay());
            return;
        }
        tracing::info!(
            resource = %self.resource,
            "the server does not serve the resource (404: its CRD not installed yet, or \
             deleted); waiting until it does"
        );
        self.mode.not_served.store(true, Ordering::Release);
        if self.synced {
            self.pending.clear();
            self.pending.push_back(Event::Init);
            self.pending.push_back(Event::InitDone);
        }
        let mut backoff = Backoff::new(ABSENT_BACKOFF_MIN, ABSENT_BACKOFF_MAX).jitter(0.1);
        self.wait = Some(backoff.next_delay());
        self.absent = Some(backoff);
    }

    /// An answer came: the resource is served (again).
    fn served(&mut self) {
        if self.absent.take().is_some() {
            self.mode.not_served.store(false, Ordering::Release);
            tracing::info!(resource = %self.resource, "the server serves the resource again; listing it");
        }
    }

    fn retry_due(&self) -> bool {
        self.current == ListStrategy::Paginated
            && self.config.strategy == ListStrategy::Streaming
            && self
                .fell_back_at
                .is_some_and(|at| at.elapsed() >= self.config.streaming_retry)
    }

    /// Lists in pages from now on. Logged at `info`, as what the server offers rather than
    /// a fault: the reason names the answer's code and reason (`422 Invalid`), not its
    /// message, which a log reader would take for an RBAC denial ("sendInitialEvents is
    /// forbidden ..."); the whole answer is logged at `debug`.
    fn fall_back(&mut self, why: &str) {
        tracing::info!(
            resource = %self.resource,
            reason = %why,
            retry_in = ?self.config.streaming_retry,
            "the server does not serve streaming lists; listing in pages"
        );
        self.mode.fallbacks.fetch_add(1, Ordering::Relaxed);
        self.fell_back_at = Some(Instant::now());
        self.events = None;
        self.initial = false;
        self.paging = None;
        self.version = None;
        self.switch(ListStrategy::Paginated);
    }

    fn switch(&mut self, to: ListStrategy) {
        self.current = to;
        self.mode.set(to);
    }
}
