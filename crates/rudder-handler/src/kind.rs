//! [`Kind`]: a source on the shared informers of one type from rudder-cache.

use std::time::Duration;

use futures::stream::StreamExt;
use kube::Resource;
use rudder_cache::{Cache, Informer, Scope, Typed};

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
/// If the API server does not serve the type yet (a CRD not installed), the informers keep
/// retrying with backoff and log each failure; the source stays unsynced until the type
/// appears, then works, so a controller started before its CRD does not fail the process
/// (within its cache-sync timeout).
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
        let informers = match self.target {
            Target::Informers(informers) => informers,
            Target::Cache { cache, scope: None } => cache.informers::<K>()?,
            Target::Cache {
                cache,
                scope: Some(scope),
            } => vec![cache.informer_in::<K>(&scope)?],
        };
        Ok(start(informers))
    }
}

/// Subscribes to every informer (merging their events) and makes the signal that is on when
/// all of them have synced.
fn start<K>(informers: Vec<Informer<K>>) -> Started<K>
where
    K: Resource + Send + Sync + 'static,
{
    let events = futures::stream::select_all(informers.iter().map(|informer| {
        informer.subscribe().map(|event| match event {
            rudder_cache::Event::Add { obj, initial_list } => Event::Create {
                object: obj,
                initial_list,
            },
            rudder_cache::Event::Update { old, new } => Event::Update { old, new },
            rudder_cache::Event::Delete {
                obj,
                final_state_unknown,
            } => Event::Delete {
                object: obj,
                final_state_unknown,
            },
        })
    }))
    .boxed();
    let probes = informers.clone();
    let synced = Synced::from_fn(
        move || probes.iter().all(Informer::has_synced),
        move || {
            let informers = informers.clone();
            Box::pin(async move {
                for informer in informers {
                    // Stopped informers never sync: wait forever rather than claim so.
                    if informer.wait_for_sync(Duration::MAX).await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            })
        },
    );
    Started::new(events, synced)
}
