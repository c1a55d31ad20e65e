//! How an informer lists: streaming lists (a watch with `sendInitialEvents=true`) first, and
//! paginated lists when the server refuses them, remembered per informer and retried later.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::{Api, Resource};
use kube_runtime::WatchStreamExt;
use kube_runtime::watcher::{self, watcher};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

/// How an informer gets its first list, and every relist after a watch that cannot resume.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ListStrategy {
    /// A streaming list (KEP-3157, `WatchList`): one watch with `sendInitialEvents=true` that
    /// sends the current objects as events, marks their end with a bookmark annotated
    /// `k8s.io/initial-events-end`, and goes on watching. The server never builds the whole
    /// list in one answer, nor the client holds one. The default: when the server refuses it
    /// (a `400` or `422` answer, as Kubernetes before 1.34 gives with the `WatchList` feature
    /// off) or sends no end-of-initial-events bookmark and then nothing for
    /// [`InformerBuilder::initial_events_bound`](super::InformerBuilder::initial_events_bound)
    /// (a server too old to know the parameter), the informer lists with
    /// [`Paginated`](Self::Paginated) instead, and tries streaming again at the first relist
    /// after [`InformerBuilder::streaming_retry`](super::InformerBuilder::streaming_retry).
    #[default]
    Streaming,
    /// A paginated LIST (`limit`/`continue`, 500 objects a page), then a watch from the list's
    /// resourceVersion: what every server serves.
    Paginated,
}

impl ListStrategy {
    /// The strategy's name in logs and metrics: `streaming` or `paginated`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Streaming => "streaming",
            Self::Paginated => "paginated",
        }
    }
}

/// The default of [`InformerBuilder::initial_events_bound`](super::InformerBuilder::initial_events_bound).
pub const DEFAULT_INITIAL_EVENTS_BOUND: Duration = Duration::from_secs(30);

/// The default of [`InformerBuilder::streaming_retry`](super::InformerBuilder::streaming_retry).
pub const DEFAULT_STREAMING_RETRY: Duration = Duration::from_secs(10 * 60);

/// What an informer lists with now, shared between its watch stream and its handles.
#[derive(Debug, Default)]
pub(crate) struct ListMode {
    /// Set while the informer lists with [`ListStrategy::Paginated`].
    paginated: AtomicBool,
    /// How many times the informer fell back from streaming to paginated lists.
    fallbacks: AtomicU64,
    /// Set while the server answers 404 for the resource (its CRD not installed yet, or
    /// deleted).
    not_served: AtomicBool,
}

impl ListMode {
    pub(crate) fn current(&self) -> ListStrategy {
        if self.paginated.load(Ordering::Acquire) {
            ListStrategy::Paginated
        } else {
            ListStrategy::Streaming
        }
    }

    pub(crate) fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// Whether the server serves the resource, as far as the last answer said.
    pub(crate) fn served(&self) -> bool {
        !self.not_served.load(Ordering::Acquire)
    }

    fn set(&self, strategy: ListStrategy) {
        self.paginated
            .store(strategy == ListStrategy::Paginated, Ordering::Release);
    }
}

/// What the stream of [`watch`] needs to choose and change its strategy.
#[derive(Clone, Debug)]
pub(crate) struct Lists {
    pub(crate) strategy: ListStrategy,
    pub(crate) initial_events_bound: Duration,
    pub(crate) streaming_retry: Duration,
}

impl Default for Lists {
    fn default() -> Self {
        Self {
            strategy: ListStrategy::default(),
            initial_events_bound: DEFAULT_INITIAL_EVENTS_BOUND,
            streaming_retry: DEFAULT_STREAMING_RETRY,
        }
    }
}

type Events<T> = BoxStream<'static, Result<watcher::Event<T>, watcher::Error>>;

/// kube-runtime's watcher (with its default backoff) over `api`, listing as `lists` says and
/// falling back as [`ListStrategy::Streaming`] describes; `mode` is told what it runs on.
pub(crate) fn watch<T>(
    api: Api<T>,
    config: watcher::Config,
    lists: Lists,
    mode: std::sync::Arc<ListMode>,
    resource: String,
) -> impl Stream<Item = Result<watcher::Event<T>, watcher::Error>> + Send
where
    T: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    // A stream made for a fallback starts where the informer is: streaming, unless an
    // earlier stream of the same informer (the strict one, before a lenient one replaced
    // it) already fell back.
    let start =
        if lists.strategy == ListStrategy::Streaming && mode.current() == ListStrategy::Streaming {
            ListStrategy::Streaming
        } else {
            ListStrategy::Paginated
        };
    mode.set(start);
    let state = State {
        stream: open(&api, &config, start),
        api,
        config,
        lists,
        mode,
        resource,
        current: start,
        initial: false,
        fell_back_at: None,
        synced: false,
        absent: None,
    };
    futures::stream::unfold(state, |mut state| async move {
        let item = state.next().await?;
        Some((item, state))
    })
}

struct State<T> {
    api: Api<T>,
    config: watcher::Config,
    lists: Lists,
    mode: std::sync::Arc<ListMode>,
    resource: String,
    stream: Events<T>,
    current: ListStrategy,
    /// Between a list's `Init` and its `InitDone`: while streaming, the time to the
    /// end-of-initial-events bookmark is bounded.
    initial: bool,
    fell_back_at: Option<Instant>,
    /// Whether a list has ended since the stream began (the store holds a whole list).
    synced: bool,
    /// While the server does not serve the resource: what is left to do about it.
    absent: Option<Absent>,
}

/// The informer's state while the server answers 404 for its resource.
#[derive(Debug)]
struct Absent {
    /// The empty list still to hand to the store (a `Init` then an `InitDone`), so that it
    /// drops what it held: every object went with the resource.
    empty_list: Option<bool>,
    /// How long to wait before asking again.
    backoff: Duration,
}

/// The first wait before asking again for a resource the server does not serve.
const ABSENT_BACKOFF_MIN: Duration = Duration::from_millis(500);
/// The longest wait between two asks.
const ABSENT_BACKOFF_MAX: Duration = Duration::from_secs(10);

impl<T> State<T>
where
    T: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    async fn next(&mut self) -> Option<Result<watcher::Event<T>, watcher::Error>> {
        loop {
            if let Some(absent) = &mut self.absent {
                // The empty list first (`Some(true)`: its `Init`, then its `InitDone`).
                match absent.empty_list.take() {
                    Some(true) => {
                        absent.empty_list = Some(false);
                        return Some(Ok(watcher::Event::Init));
                    }
                    Some(false) => return Some(Ok(watcher::Event::InitDone)),
                    None => {}
                }
            }
            let bounded = self.current == ListStrategy::Streaming && self.initial;
            let item = if bounded {
                match tokio::time::timeout(self.lists.initial_events_bound, self.stream.next())
                    .await
                {
                    Ok(item) => item,
                    Err(_) => {
                        self.fall_back(
                            &format!(
                                "no end-of-initial-events bookmark, and no event for {:?}",
                                self.lists.initial_events_bound
                            ),
                            None,
                        );
                        continue;
                    }
                }
            } else {
                self.stream.next().await
            }?;
            if let Err(error) = &item
                && not_found(error)
            {
                self.wait_until_served().await;
                continue;
            }
            if self.absent.take().is_some() {
                self.mode.not_served.store(false, Ordering::Release);
                tracing::info!(resource = %self.resource, "the server serves the resource again; listing it");
            }
            match &item {
                Err(error) if self.current == ListStrategy::Streaming => {
                    if let Some(refusal) = refusal(error) {
                        self.fall_back(&refusal, Some(error));
                        continue;
                    }
                }
                Ok(watcher::Event::Init) => {
                    if self.retry_due() {
                        // The list-and-watch stream is about to list again: this relist
                        // streams instead (its own `Init` follows).
                        tracing::info!(resource = %self.resource, "trying streaming lists again");
                        self.switch(ListStrategy::Streaming);
                        continue;
                    }
                    self.initial = true;
                }
                Ok(watcher::Event::InitDone) => {
                    self.initial = false;
                    self.synced = true;
                }
                _ => {}
            }
            return Some(item);
        }
    }

    /// The server answered 404 for the resource: its CRD is not installed yet, or was
    /// deleted. Rather than a watch error every backoff, one line at info, an empty list for
    /// a store that held one (the objects went with the resource; a store that never synced
    /// stays unsynced, so a controller waits for its CRD), then a quiet wait (500 ms
    /// doubling to 10 s) before the same list is asked for again.
    async fn wait_until_served(&mut self) {
        let backoff = match &mut self.absent {
            Some(absent) => {
                tracing::debug!(resource = %self.resource, "the server still does not serve the resource");
                let backoff = absent.backoff;
                absent.backoff = (backoff * 2).min(ABSENT_BACKOFF_MAX);
                backoff
            }
            None => {
                tracing::info!(
                    resource = %self.resource,
                    "the server does not serve the resource (404: its CRD not installed yet, or \
                     deleted); waiting until it does"
                );
                self.mode.not_served.store(true, Ordering::Release);
                self.absent = Some(Absent {
                    empty_list: self.synced.then_some(true),
                    backoff: (ABSENT_BACKOFF_MIN * 2).min(ABSENT_BACKOFF_MAX),
                });
                ABSENT_BACKOFF_MIN
            }
        };
        // Nothing is asked meanwhile: the stream that answered 404 is dropped.
        self.stream = futures::stream::pending().boxed();
        tokio::time::sleep(backoff).await;
        self.initial = false;
        self.stream = open(&self.api, &self.config, self.current);
    }

    fn retry_due(&self) -> bool {
        self.current == ListStrategy::Paginated
            && self.lists.strategy == ListStrategy::Streaming
            && self
                .fell_back_at
                .is_some_and(|at| at.elapsed() >= self.lists.streaming_retry)
    }

    /// Lists in pages from now on. Logged at `info`, as what the server offers rather than
    /// a fault: the reason names the answer's code and reason (`422 Invalid`), not its
    /// message, which a log reader would take for an RBAC denial ("sendInitialEvents is
    /// forbidden ..."); the whole answer is logged at `debug`.
    fn fall_back(&mut self, why: &str, detail: Option<&watcher::Error>) {
        tracing::info!(
            resource = %self.resource,
            reason = %why,
            retry_in = ?self.lists.streaming_retry,
            "the server does not serve streaming lists; listing in pages"
        );
        if let Some(error) = detail {
            tracing::debug!(resource = %self.resource, %error, "the streaming list's answer");
        }
        self.mode.fallbacks.fetch_add(1, Ordering::Relaxed);
        self.fell_back_at = Some(Instant::now());
        self.switch(ListStrategy::Paginated);
    }

    fn switch(&mut self, to: ListStrategy) {
        self.current = to;
        self.mode.set(to);
        // Either stream begins with an `Init` of its own (a streaming one once the server
        // has accepted the watch).
        self.initial = false;
        self.stream = open(&self.api, &self.config, to);
    }
}

fn open<T>(api: &Api<T>, config: &watcher::Config, strategy: ListStrategy) -> Events<T>
where
    T: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let config = match strategy {
        ListStrategy::Streaming => config.clone().streaming_lists(),
        ListStrategy::Paginated => {
            let mut config = config.clone();
            config.initial_list_strategy = watcher::InitialListStrategy::ListWatch;
            config
        }
    };
    watcher(api.clone(), config).default_backoff().boxed()
}

/// Whether the watcher error is a `404 Not Found` answer to a list or a watch: the server
/// does not serve the resource (no such CRD, or no longer).
fn not_found(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 404,
        watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

/// The server refusing a streaming list, as its code and reason (`422 Invalid`), if the
/// watcher error is that: a `400 Bad Request` or `422 Invalid` answer to the watch
/// (Kubernetes 1.27-1.33 with `WatchList` off answer 422, "sendInitialEvents is forbidden for
/// watch unless the WatchList feature gate is enabled"). Neither is transient, so retrying
/// the same request cannot help.
fn refusal(error: &watcher::Error) -> Option<String> {
    let (code, reason) = match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => (status.code, &status.reason),
        watcher::Error::WatchError(status) => (status.code, &status.reason),
        _ => return None,
    };
    matches!(code, 400 | 422).then(|| format!("the server answered {code} {reason}"))
}
