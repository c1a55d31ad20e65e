//! The cache: get-or-create one shared informer per (type, namespace, selectors), and a
//! reader served from their stores.
//!
//! `scope.rs` holds what an informer watches and what the reader lists, `options.rs` the
//! builder and per-type options, `registry.rs` the informers by (type, scope), `reader.rs`
//! the reads.

use std::any::TypeId;
use std::fmt::{self, Debug};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject};
use kube::{Api, Resource};
use rudder_core::sync::LockExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Result, SyncError};
use crate::informer::Informer;

mod options;
mod reader;
mod registry;
mod scope;
mod users;

pub use options::{CacheBuilder, DEFAULT_SYNC_TIMEOUT};
pub use scope::{ApiScope, ByObject, ListOptions, Scope};
use users::Hold;
pub use users::InformerUse;

use registry::{InformerKey, Inner, TypeKey};

/// Shared informers, one per (type, [`Scope`]), and a reader over their stores.
///
/// Four methods give an informer, one for each pair of the two choices that matter: a typed
/// object or a dynamic one, and pinned or held.
///
/// | | pinned (runs until the cache stops or it is removed) | held (runs while an [`InformerUse`] exists) |
/// |---|---|---|
/// | typed `K` (`PartialObjectMeta<K>` for metadata only) | [`informer`](Self::informer) | [`acquire`](Self::acquire) |
/// | dynamic, by [`ApiResource`] | [`dynamic_informer`](Self::dynamic_informer) | [`acquire_dynamic`](Self::acquire_dynamic) |
///
/// The scope is always an argument: a type's scopes (its [`ByObject`] scope, one per
/// default namespace, or all namespaces, unless [`set_scopes`](Self::set_scopes) replaced
/// them) are [`scopes`](Self::scopes), one informer each, so "the default informers" are a
/// loop over them, not more methods; metadata-only informers are a type, not a method.
///
/// Cloning gives another handle to the same cache.
#[derive(Clone)]
pub struct Cache {
    pub(crate) inner: Arc<Inner>,
}

impl Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("informers", &self.inner.informers().len())
            .field("stopped", &self.inner.token.is_cancelled())
            .finish()
    }
}

impl Cache {
    /// The shared informer for `K` in `scope`, started if there is none. An informer started
    /// here is pinned: it runs until the cache stops or
    /// [`remove_informer`](Self::remove_informer), whoever else uses it (see
    /// [`acquire`](Self::acquire) for one that stops when its users go). A cluster-scoped
    /// `K`'s scope never names a namespace (one given is ignored). For metadata only, ask for
    /// `PartialObjectMeta<K>`: its watch asks the server for metadata alone.
    ///
    /// The informers the cache reads `K` from are those of [`scopes`](Self::scopes):
    ///
    /// ```no_run
    /// # fn demo(cache: rudder_cache::Cache) -> rudder_cache::Result<()> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    ///
    /// for scope in cache.scopes::<ConfigMap>() {
    ///     let informer = cache.informer::<ConfigMap>(&scope)?;
    ///     println!("{} ConfigMaps in {scope:?}", informer.store().len());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn informer<K>(&self, scope: &Scope) -> Result<Informer<K>>
    where
        K: Typed,
    {
        self.start_in::<K>(scope, true)
    }

    /// A hold on the shared informer for `K` in `scope`, started if there is none: it runs
    /// while a use of it exists (or something pinned it with [`informer`](Self::informer)),
    /// and stops when the last one is dropped. See [`InformerUse`].
    pub fn acquire<K>(&self, scope: &Scope) -> Result<InformerUse<K>>
    where
        K: Typed,
    {
        let scope = typed_scope::<K>(scope);
        let hold = Hold::new(
            &self.inner,
            InformerKey::new(TypeKey::Typed(TypeId::of::<K>()), &scope),
        );
        let informer = self.start_in::<K>(&scope, false)?;
        Ok(InformerUse::new(informer, hold))
    }

    /// The shared informer for dynamic objects of `resource` in `scope`, pinned as
    /// [`informer`](Self::informer) pins. An `ApiResource` does not say whether the resource
    /// is namespaced: give a cluster-scoped one [`Scope::all`].
    pub fn dynamic_informer(
        &self,
        resource: &ApiResource,
        scope: &Scope,
    ) -> Result<Informer<DynamicObject>> {
        self.start_dynamic_in(resource, scope, true)
    }

    /// [`acquire`](Self::acquire) for dynamic objects of `resource`.
    pub fn acquire_dynamic(
        &self,
        resource: &ApiResource,
        scope: &Scope,
    ) -> Result<InformerUse<DynamicObject>> {
        let hold = Hold::new(
            &self.inner,
            InformerKey::new(TypeKey::dynamic(resource), scope),
        );
        let informer = self.start_dynamic_in(resource, scope, false)?;
        Ok(InformerUse::new(informer, hold))
    }

    /// How many [`InformerUse`]s hold `K`'s informer in `scope` now.
    pub fn informer_users<K: Typed>(&self, scope: &Scope) -> usize {
        self.inner.users(&InformerKey::new(
            TypeKey::Typed(TypeId::of::<K>()),
            &typed_scope::<K>(scope),
        ))
    }

    /// `K`'s informers in its scopes ([`scopes`](Self::scopes)), started if needed, pinned.
    pub(crate) fn informers<K>(&self) -> Result<Vec<Informer<K>>>
    where
        K: Typed,
    {
        self.typed_scopes::<K>()
            .iter()
            .map(|scope| self.informer::<K>(scope))
            .collect()
    }

    /// `K`'s informer in `scope`, started if there is none, pinned if `pin`.
    fn start_in<K>(&self, scope: &Scope, pin: bool) -> Result<Informer<K>>
    where
        K: Typed,
    {
        let client = self.inner.informer_client();
        let scope = &typed_scope::<K>(scope);
        self.inner
            .get_or_start(TypeKey::Typed(TypeId::of::<K>()), scope, pin, |ns| {
                let informer = Informer::builder(<K::Scope as ApiScope>::api::<K>(client, ns));
                // Metadata decodes whatever the object's type; a full object may not.
                if K::metadata_api() {
                    informer
                } else {
                    informer.skip_malformed()
                }
            })
    }

    /// The informer for dynamic objects of `resource` in `scope`, started if there is none,
    /// pinned if `pin`.
    fn start_dynamic_in(
        &self,
        resource: &ApiResource,
        scope: &Scope,
        pin: bool,
    ) -> Result<Informer<DynamicObject>> {
        let client = self.inner.informer_client();
        self.inner
            .get_or_start(TypeKey::dynamic(resource), scope, pin, |ns| {
                Informer::builder(match ns {
                    Some(ns) => Api::namespaced_with(client, ns, resource),
                    None => Api::all_with(client, resource),
                })
            })
    }

    /// Stops and forgets the informer for `K` in `scope`, if there is one, pinned or held,
    /// and waits for its tasks. Handles to it still read its (now frozen) store; the next
    /// request for it starts a new watch. Returns whether there was one.
    pub async fn remove_informer<K: Typed>(&self, scope: &Scope) -> bool {
        self.inner
            .remove(&InformerKey::new(
                TypeKey::Typed(TypeId::of::<K>()),
                &typed_scope::<K>(scope),
            ))
            .await
    }

    /// [`remove_informer`](Self::remove_informer) for dynamic objects.
    pub async fn remove_dynamic_informer(&self, resource: &ApiResource, scope: &Scope) -> bool {
        self.inner
            .remove(&InformerKey::new(TypeKey::dynamic(resource), scope))
            .await
    }

    /// Adds an index to the stores of `K`'s default-scope informers (starting them if
    /// needed).
    pub fn add_index<K, F>(&self, name: impl Into<String>, index: F) -> Result<()>
    where
        K: Typed,
        F: Fn(&K) -> Vec<String> + Send + Sync + 'static,
    {
        let name = name.into();
        let index = Arc::new(index);
        for informer in self.informers::<K>()? {
            let index = Arc::clone(&index);
            informer
                .store()
                .add_index(name.clone(), move |obj: &K| index(obj))?;
        }
        Ok(())
    }

    /// The number of informers running.
    pub fn informer_count(&self) -> usize {
        self.inner.informers().len()
    }

    /// Whether every informer started so far has stored its first list (true with none).
    pub fn has_synced(&self) -> bool {
        self.inner.informers().values().all(|slot| (slot.synced)())
    }

    /// How many informers have failed: their watch task panicked and they stopped (see
    /// [`Informer::has_failed`]). Each also counts in [`unsynced_count`](Self::unsynced_count)
    /// and makes [`has_synced`](Self::has_synced) false, until the next request for its type
    /// and scope starts a new one in its place.
    pub fn failed_count(&self) -> usize {
        self.inner
            .informers()
            .values()
            .filter(|slot| (slot.failed)())
            .count()
    }

    /// How many informers started so far have not stored their first list yet, or have
    /// failed.
    pub fn unsynced_count(&self) -> usize {
        self.inner
            .informers()
            .values()
            .filter(|slot| !(slot.synced)())
            .count()
    }

    /// Waits until every informer started so far has synced, at most `timeout` (controller-
    /// runtime's `WaitForCacheSync`); informers started meanwhile count too.
    ///
    /// # Errors
    ///
    /// [`SyncError::CacheTimeout`] with how many had not synced when the time ran out;
    /// [`SyncError::Refused`] as soon as the API server refuses an informer's list or watch
    /// (401, 403) before it synced; [`SyncError::Stopped`] if an informer was stopped first.
    pub async fn wait_for_sync(&self, timeout: Duration) -> std::result::Result<(), SyncError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (count, waits) = {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let slots = self.inner.informers();
                let waits: Vec<_> = slots.values().map(|slot| (slot.wait)(left)).collect();
                (slots.len(), waits)
            };
            // The first failure ends the wait: a refused informer fails it at once.
            match futures::future::try_join_all(waits).await {
                Ok(_) => {}
                Err(SyncError::Timeout { .. }) => {
                    return Err(SyncError::CacheTimeout {
                        unsynced: self.unsynced_count(),
                        timeout,
                    });
                }
                Err(other) => return Err(other),
            }
            // Informers started while we waited must sync too.
            if self.informer_count() == count {
                return Ok(());
            }
        }
    }

    /// The scopes `K`'s informers watch by default: the type's [`ByObject`] scope, or one
    /// per default namespace, or all namespaces (a cluster-scoped type's scopes never name a
    /// namespace). What an operator needs permission to list and watch (RBAC rendered from
    /// the code reads it); nothing is started.
    pub fn default_scopes<K: Typed>(&self) -> Vec<Scope> {
        let mut scopes: Vec<Scope> = self
            .inner
            .default_scopes::<K>(&TypeKey::Typed(TypeId::of::<K>()))
            .iter()
            .map(typed_scope::<K>)
            .collect();
        scopes.dedup();
        scopes
    }

    /// [`default_scopes`](Self::default_scopes) for dynamic objects of `resource`.
    pub fn default_dynamic_scopes(&self, resource: &ApiResource) -> Vec<Scope> {
        self.inner
            .default_scopes::<DynamicObject>(&TypeKey::dynamic(resource))
    }

    /// Stops every informer and waits until all their tasks have ended, and the request
    /// buffer task of the client they watched with.
    pub async fn stop(&self) {
        self.inner.token.cancel();
        let informers: Vec<_> = self.inner.informers().drain().collect();
        drop(informers);
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }

    /// Replaces the scopes `K` is read from: from now on [`get`](Self::get),
    /// [`list`](Self::list) and [`scopes`](Self::scopes) use the informers of `scopes`
    /// (started on first use, as usual) instead of those of [`default_scopes`](Self::default_scopes), which stay what
    /// they were (they say what the operator needs permission for). An empty list makes
    /// `get` find nothing and `list` list nothing. Informers of scopes dropped from the list
    /// keep running until [`remove_informer`](Self::remove_informer).
    ///
    /// A sharded controller in label mode reads its primary type this way, from one
    /// informer per shard it holds (each with a label selector), changing the list as
    /// shards come and go.
    ///
    /// A read waiting for an informer whose scope this drops goes on without it (it does not
    /// fail because that informer is then removed).
    pub fn set_scopes<K: Typed>(&self, scopes: Vec<Scope>) {
        let scopes = scopes
            .into_iter()
            .map(|scope| typed_scope::<K>(&scope))
            .collect();
        self.inner
            .scopes_set
            .lock_unpoisoned()
            .insert(TypeKey::Typed(TypeId::of::<K>()), scopes);
    }

    /// Goes back to reading `K` from its [`default_scopes`](Self::default_scopes) (undoes
    /// [`set_scopes`](Self::set_scopes)).
    pub fn reset_scopes<K: Typed>(&self) {
        self.inner
            .scopes_set
            .lock_unpoisoned()
            .remove(&TypeKey::Typed(TypeId::of::<K>()));
    }

    /// The scopes `K` is read from now: those given to [`set_scopes`](Self::set_scopes), or
    /// the [`default_scopes`](Self::default_scopes).
    pub fn scopes<K: Typed>(&self) -> Vec<Scope> {
        self.typed_scopes::<K>()
    }

    /// `K`'s scopes (set, or default), normalised for its scope kind.
    fn typed_scopes<K: Typed>(&self) -> Vec<Scope> {
        let ty = TypeKey::Typed(TypeId::of::<K>());
        let set = self.inner.scopes_set.lock_unpoisoned().get(&ty).cloned();
        let mut scopes: Vec<Scope> = set
            .unwrap_or_else(|| self.inner.default_scopes::<K>(&ty))
            .iter()
            .map(typed_scope::<K>)
            .collect();
        scopes.dedup();
        scopes
    }
}

/// The bounds the cache needs of a typed object (met by every k8s-openapi type, kube
/// custom resources, and their `PartialObjectMeta`).
pub trait Typed:
    Resource<DynamicType = (), Scope: ApiScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Typed for K where
    K: Resource<DynamicType = (), Scope: ApiScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// `scope` without its namespace for cluster-scoped types, so that asking with or without
/// one finds the same informer.
fn typed_scope<K: Typed>(scope: &Scope) -> Scope {
    let mut scope = scope.clone();
    if <K::Scope as ApiScope>::CLUSTER {
        scope.namespace = None;
    }
    scope
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use crate::watch::Event as W;
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use tokio::sync::mpsc;

    use tokio_util::sync::CancellationToken;
    use tokio_util::task::TaskTracker;

    use super::*;
    use crate::informer::start_on;
    use crate::lenient::Lenient;

    #[tokio::test]
    async fn a_failed_informer_makes_the_cache_unready_until_it_is_replaced() {
        // Nothing listens there; the informer under test is fed by hand.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let cache = Cache::builder(kube::Client::try_from(config).unwrap())
            .build(&CancellationToken::new());
        let (tx, rx) = mpsc::unbounded_channel::<Option<W<Lenient<Arc<ConfigMap>>>>>();
        // `None` stands for something in the watch panicking.
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            let event = rx.recv().await?.expect("the watch broke");
            Some((Ok(event), rx))
        });
        let token = cache.inner.token.child_token();
        let tracker = TaskTracker::new();
        let informer = start_on(
            "configmaps",
            stream,
            None,
            None,
            token.clone(),
            tracker.clone(),
            None,
            Arc::default(),
            None,
        );
        let key = InformerKey::new(TypeKey::Typed(TypeId::of::<ConfigMap>()), &Scope::all());
        let slot = cache.inner.slot(&informer, token, tracker);
        cache.inner.informers().insert(key, slot);
        let mut events = informer.subscribe();
        tx.send(Some(W::Init)).unwrap();
        tx.send(Some(W::InitDone)).unwrap();
        cache.wait_for_sync(Duration::from_secs(5)).await.unwrap();
        assert_eq!((cache.unsynced_count(), cache.failed_count()), (0, 0));

        tx.send(None).unwrap();
        let end = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
        assert!(matches!(end, Ok(None)), "the stream ends");
        assert!(!cache.has_synced());
        assert_eq!((cache.unsynced_count(), cache.failed_count()), (1, 1));
        assert!(matches!(
            cache.wait_for_sync(Duration::from_secs(5)).await,
            Err(SyncError::Failed { .. })
        ));

        // The next request starts a new informer in its place.
        let new = cache.informer::<ConfigMap>(&Scope::all()).unwrap();
        assert!(new.is_running());
        assert_eq!((cache.informer_count(), cache.failed_count()), (1, 0));
        cache.stop().await;
    }
}
