//! [`Kind`]: a source on a shared informer from rudder-cache.

use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use kube::Resource;
use rudder_cache::{Cache, Informer, Typed};

use crate::{Event, Source, Synced};

/// Events of one type from a shared informer (controller-runtime's `Kind` source): every
/// object the informer holds, then every change. Synced when the informer's first list is
/// stored.
///
/// If the API server does not serve the type yet (a CRD not installed), the informer keeps
/// retrying with backoff and logs each failure; the source stays unsynced until the type
/// appears, then works, so a controller started before its CRD does not fail the process
/// (within its cache-sync timeout).
pub struct Kind<K> {
    informer: Informer<K>,
}

impl<K> std::fmt::Debug for Kind<K>
where
    K: Resource + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kind")
            .field("resource", &self.informer.resource())
            .field("synced", &self.informer.has_synced())
            .finish()
    }
}

impl<K> Kind<K>
where
    K: Resource + Send + Sync + 'static,
{
    /// A source on `informer`.
    pub fn new(informer: Informer<K>) -> Self {
        Self { informer }
    }
}

impl<K: Typed> Kind<K> {
    /// A source on the cache's shared informer for `K` in its default scope (starting it if
    /// this is its first user).
    pub fn from_cache(cache: &Cache) -> rudder_cache::Result<Self> {
        Ok(Self::new(cache.informer::<K>()?))
    }
}

impl<K> Source<K> for Kind<K>
where
    K: Resource + Send + Sync + 'static,
{
    fn start(self: Box<Self>) -> BoxStream<'static, Event<K>> {
        self.informer
            .subscribe()
            .map(|event| match event {
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
            .boxed()
    }

    fn synced(&self) -> Synced {
        let (probe, waiter) = (self.informer.clone(), self.informer.clone());
        Synced::from_fn(
            move || probe.has_synced(),
            move || {
                let informer = waiter.clone();
                Box::pin(async move {
                    // Stopped informers never sync: wait forever rather than claim so.
                    if informer.wait_for_sync(Duration::MAX).await.is_err() {
                        std::future::pending::<()>().await;
                    }
                })
            },
        )
    }
}
