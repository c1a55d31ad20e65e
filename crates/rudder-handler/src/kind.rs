//! [`Kind`]: a source on the shared informers of one type from rudder-cache.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use kube::Resource;
use rudder_cache::{Cache, Informer, Scope, Typed};
use rudder_core::backoff::Backoff;
use rudder_core::sync::LockExt;

use crate::source::{SourceError, Started};
use crate::{Event, Source, Synced};

/// Events of one type from shared informers (controller-runtime's `Kind` source): every
/// object the informers hold, then every change. Synced when every informer's first list is
/// stored.
///
/// Declaring a `Kind` with [`from_cache`](Self::from_cache) or [`in_scope`](Self::in_scope)
/// only records the cache and the type: the informers are asked for when the source starts
/// (when its controller runs), so a declaration that is dropped, or a builder that fails
/// later, leaves no informer behind. A cache with several default namespaces has one
/// informer per namespace for the type; the source merges their events and is synced when
/// all of them are.
///
/// If the API server does not serve the type yet (a CRD not installed), the informers log it
/// once at info and ask again quietly (500 ms doubling to 10 s; see
/// [`Informer::resource_served`]); the source stays unsynced until the type appears, then
/// works, so a controller started before its CRD does not fail the process (within its
/// cache-sync timeout). A CRD deleted later empties the informers (their objects' deletes
/// are sent) and they wait the same way until it is served again; the source stays synced. If an informer fails (its watch task died), a `Kind` on
/// the cache asks the cache for a replacement (with backoff, 100 ms doubling to 10 s) and
/// subscribes to it, so the controller keeps getting events; a `Kind` on informers you
/// made just loses that informer's events.
///
/// A `Kind` on the cache holds a use ([`rudder_cache::InformerUse`]) of each of its
/// informers while it runs: when it is dropped (its controller stopped or removed), an
/// informer that no other source or reader holds or pinned stops, and its memory is freed.
pub struct Kind<K> {
    target: Target<K>,
}

enum Target<K> {
    /// Informers made by the caller.
    Informers(Vec<Informer<K>>),
    /// The type's informers in the cache's default scopes, or in one scope.
    Cache { cache: Cache, scope: Option<Scope> },
}

impl<K> std::fmt::Debug for Kind<K>
where
    K: Resource + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Kind");
        d.field("type", &std::any::type_name::<K>());
        match &self.target {
            Target::Informers(informers) => d.field("informers", &informers.len()),
            Target::Cache { scope, .. } => d.field("scope", scope),
        };
        d.finish()
    }
}

impl<K> Kind<K>
where
    K: Resource + Send + Sync + 'static,
{
    /// A source on `informer`, already made.
    pub fn new(informer: Informer<K>) -> Self {
        Self::from_informers(vec![informer])
    }

    /// A source on several informers of one type (several namespaces, say), merged.
    pub fn from_informers(informers: Vec<Informer<K>>) -> Self {
        Self {
            target: Target::Informers(informers),
        }
    }
}

impl<K: Typed> Kind<K> {
    /// A source on the cache's shared informers for `K` in its default scopes (one per
    /// default namespace, or one for all namespaces), asked for when the source starts.
    pub fn from_cache(cache: &Cache) -> Self {
        Self {
            target: Target::Cache {
                cache: cache.clone(),
                scope: None,
            },
        }
    }

    /// A source on the cache's shared informer for `K` in `scope`, asked for when the
    /// source starts.
    pub fn in_scope(cache: &Cache, scope: Scope) -> Self {
        Self {
            target: Target::Cache {
                cache: cache.clone(),
                scope: Some(scope),
            },
        }
    }
}

impl<K: Typed> Source<K> for Kind<K> {
    fn start(self: Box<Self>) -> Result<Started<K>, SourceError> {
        let (informers, resolvers) = match self.target {
            Target::Informers(informers) => (informers, None),
            Target::Cache { cache, scope } => {
                // The source holds a use of each informer while it runs (the uses live in the
                // resolvers, which live in its event stream): when its controller goes, the
                // informers only it used stop.
                let uses = match &scope {
                    None => cache
                        .scopes::<K>()
                        .iter()
                        .map(|scope| cache.acquire::<K>(scope))
                        .collect::<Result<Vec<_>, _>>()?,
                    Some(scope) => vec![cache.acquire::<K>(scope)?],
                };
                // Asks the cache again for the informer at `index` (a replacement).
                let acquire = move |index: usize| match &scope {
                    None => cache
                        .scopes::<K>()
                        .get(index)
                        .ok_or(rudder_cache::Error::Stopped)
                        .and_then(|scope| cache.acquire::<K>(scope)),
                    Some(scope) => cache.acquire::<K>(scope),
                };
                let informers: Vec<_> = uses.iter().map(|u| u.informer().clone()).collect();
                let held = Arc::new(Mutex::new(uses));
                let acquire = Arc::new(acquire);
                let resolvers = (0..informers.len())
                    .map(|index| {
                        let (acquire, held) = (Arc::clone(&acquire), Arc::clone(&held));
                        Arc::new(move || {
                            let new = acquire(index)?;
                            let informer = new.informer().clone();
                            if let Some(slot) = held.lock_unpoisoned().get_mut(index) {
                                *slot = new;
                            }
                            Ok(informer)
                        }) as Resolve<K>
                    })
                    .collect();
                (informers, Some(resolvers))
            }
        };
        Ok(start(informers, resolvers))
    }
}

/// Asks the cache again for one of a `Kind`'s informers.
type Resolve<K> = Arc<dyn Fn() -> rudder_cache::Result<Informer<K>> + Send + Sync>;

/// The first wait before asking the cache for a replacement of an informer that ended.
const REPLACE_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between two asks.
const REPLACE_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Subscribes to every informer (merging their events) and makes the signal that is on when
/// all of them have synced.
///
/// An informer's stream ends only when the informer stops or fails (its watch task died).
/// With `resolvers` (a `Kind` on the cache), the source then asks the cache again, which
/// replaces a failed informer, and subscribes to the new one: its replay of every object
/// (as creates from the initial list, so at low priority) catches up on whatever changed
/// meanwhile. When the cache is stopped the ask fails and that part of the stream ends.
fn start<K>(informers: Vec<Informer<K>>, resolvers: Option<Vec<Resolve<K>>>) -> Started<K>
where
    K: Resource + Send + Sync + 'static,
{
    let mut resolvers = resolvers.map(Vec::into_iter);
    let parts: Vec<_> = informers
        .iter()
        .enumerate()
        .map(|(index, informer)| {
            (
                index,
                informer.clone(),
                resolvers.as_mut().and_then(Iterator::next),
            )
        })
        .collect();
    let current = Arc::new(Mutex::new(informers));
    let parts = parts
        .into_iter()
        .map(|(index, informer, resolve)| part(index, &informer, resolve, Arc::clone(&current)));
    let events = futures::stream::select_all(parts).boxed();
    let (probe, waiter) = (Arc::clone(&current), current);
    let synced = Synced::from_fn(
        move || probe.lock_unpoisoned().iter().all(Informer::has_synced),
        move || {
            let current = Arc::clone(&waiter);
            Box::pin(async move {
                // The informers of the moment; a replacement syncs on its own, and the
                // probe above reads the current ones.
                let informers = current.lock_unpoisoned().clone();
                for informer in informers {
                    loop {
                        match informer.wait_for_sync(Duration::MAX).await {
                            Ok(()) => break,
                            // Refused (RBAC): the informer retries in the background, and
                            // syncs once its list is allowed; the controller's sync timeout
                            // bounds the wait, and the cache has logged the refusal.
                            Err(rudder_cache::SyncError::Refused { .. }) => {
                                informer.wait_until_allowed().await;
                                if informer.is_stopped() {
                                    std::future::pending::<()>().await;
                                }
                            }
                            // Stopped informers never sync: wait forever rather than claim so.
                            Err(_) => std::future::pending::<()>().await,
                        }
                    }
                }
            })
        },
    );
    Started::new(events, synced)
}

/// The events of the informer at `index`, resubscribing to a replacement when it ends (if it
/// can be resolved again).
fn part<K>(
    index: usize,
    informer: &Informer<K>,
    resolve: Option<Resolve<K>>,
    current: Arc<Mutex<Vec<Informer<K>>>>,
) -> BoxStream<'static, Event<K>>
where
    K: Resource + Send + Sync + 'static,
{
    let Some(resolve) = resolve else {
        return informer.subscribe().boxed();
    };
    resubscribing(
        informer,
        move || resolve(),
        move |new| {
            if let Some(slot) = current.lock_unpoisoned().get_mut(index) {
                *slot = new.clone();
            }
        },
    )
}

/// The events of `informer`, then of its replacements: an informer's stream ends only when
/// the informer stops or fails (its watch task died), and then `resolve` is asked for a new
/// one (the cache's `informer` replaces a failed informer), after a backoff of 100 ms
/// doubling up to 10 s; `replaced` hears of each replacement, whose replay of every object
/// catches up on what changed meanwhile. The stream ends when `resolve` fails (the cache is
/// stopping). What a [`Kind`] on the cache does for each of its informers, for sources that
/// manage informers of their own.
pub fn resubscribing<K>(
    informer: &Informer<K>,
    resolve: impl Fn() -> rudder_cache::Result<Informer<K>> + Send + 'static,
    replaced: impl Fn(&Informer<K>) + Send + 'static,
) -> BoxStream<'static, Event<K>>
where
    K: Resource + Send + Sync + 'static,
{
    struct State<K, R, P> {
        events: BoxStream<'static, Event<K>>,
        resolve: R,
        replaced: P,
        resource: String,
    }
    let state = State {
        resource: informer.resource().to_string(),
        events: informer.subscribe().boxed(),
        resolve,
        replaced,
    };
    futures::stream::unfold(state, |mut state| async move {
        let mut backoff = Backoff::new(REPLACE_BACKOFF_MIN, REPLACE_BACKOFF_MAX);
        loop {
            if let Some(event) = state.events.next().await {
                return Some((event, state));
            }
            let wait = backoff.next_delay();
            tracing::warn!(
                resource = %state.resource,
                backoff = ?wait,
                "an informer this source reads from ended; asking the cache for a new one"
            );
            tokio::time::sleep(wait).await;
            match (state.resolve)() {
                Ok(informer) => {
                    state.events = informer.subscribe().boxed();
                    (state.replaced)(&informer);
                }
                Err(error) => {
                    tracing::debug!(resource = %state.resource, %error,
                        "no new informer (the cache is stopping): this part of the source ends");
                    return None;
                }
            }
        }
    })
    .boxed()
}
