//! The registry of informers: one slot per (type, scope), started on first request
//! ([`Inner::get_or_start`]), replaced when stopped, removed on request or when its last
//! user lets go ([`Inner::release`]) unless something pinned it.

use std::any::{Any, TypeId};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use hashbrown::HashMap;
use kube::api::ApiResource;
use kube::{Client, Resource};
use rudder_core::sync::LockExt;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{ByObject, Scope};
use crate::error::{Error, Result, SyncError};
use crate::informer::{Informer, InformerBuilder};
use crate::transform::Transform;
use crate::writes::WriteTracker;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TypeKey {
    Typed(TypeId),
    Dynamic {
        group: String,
        version: String,
        plural: String,
    },
}

impl TypeKey {
    pub(crate) fn dynamic(resource: &ApiResource) -> Self {
        Self::Dynamic {
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.plural.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct InformerKey {
    pub(crate) ty: TypeKey,
    pub(crate) scope: Scope,
}

impl InformerKey {
    pub(crate) fn new(ty: TypeKey, scope: &Scope) -> Self {
        Self {
            ty,
            scope: scope.clone(),
        }
    }
}

pub(crate) struct Slot {
    /// An `Informer<K>` for the slot's type.
    pub(crate) informer: Box<dyn Any + Send + Sync>,
    /// Whether that informer has synced, without knowing its type.
    pub(crate) synced: Box<dyn Fn() -> bool + Send + Sync>,
    /// Whether that informer has failed.
    pub(crate) failed: Box<dyn Fn() -> bool + Send + Sync>,
    /// Waits (at most the given time) for that informer to sync.
    pub(crate) wait: Box<
        dyn Fn(Duration) -> BoxFuture<'static, std::result::Result<(), SyncError>> + Send + Sync,
    >,
    pub(crate) token: CancellationToken,
    pub(crate) tracker: TaskTracker,
    /// The informer's type as writes name it (API group, resource), when it tells the
    /// cache's write tracker what it stores.
    pub(crate) written_as: Option<(String, String)>,
    /// What the informer stores of `namespace/name`: its resourceVersion and uid.
    pub(crate) peek: Peek,
    /// Kept until the cache stops or it is removed, whatever its users: it was asked for
    /// without a use ([`Cache::informer`](super::Cache::informer), or a read that
    /// found none running).
    pub(crate) pinned: bool,
}

/// An object's version and uid, as [`Slot::peek`] finds it.
pub(crate) type Peeked = (Option<String>, Option<String>);

/// [`Slot::peek`]: what an informer stores of `namespace/name`.
pub(crate) type Peek = Box<dyn Fn(Option<&str>, &str) -> Option<Peeked> + Send + Sync>;

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) default_namespaces: Vec<String>,
    pub(crate) by_object: HashMap<TypeKey, Box<dyn Any + Send + Sync>>,
    pub(crate) resync: Option<Duration>,
    pub(crate) fail_on_missing_informer: bool,
    pub(crate) sync_timeout: Duration,
    pub(crate) list_strategy: crate::ListStrategy,
    pub(crate) wire_format: crate::WireFormat,
    /// The member cluster the cache is of (`CacheBuilder::cluster`), for its metrics.
    pub(crate) cluster: Option<Arc<str>>,
    pub(crate) informers: Mutex<HashMap<InformerKey, Slot>>,
    /// Scopes set at run time ([`Cache::set_scopes`](super::Cache::set_scopes)), which the
    /// reader and `informers` use instead of the default ones.
    pub(crate) scopes_set: Mutex<HashMap<TypeKey, Vec<Scope>>>,
    /// How many [`InformerUse`](super::InformerUse)s hold each (type, scope). Locked after
    /// `informers` when both are.
    pub(crate) users: Mutex<HashMap<InformerKey, usize>>,
    pub(crate) token: CancellationToken,
    pub(crate) tracker: TaskTracker,
    /// Writes made through this cache's clients that its informers have not delivered yet.
    pub(crate) writes: Arc<WriteTracker>,
}

impl Inner {
    /// The client informers watch with: the cache's own (the list/watch engine makes
    /// every list consistent on any client).
    pub(crate) fn informer_client(&self) -> Client {
        self.client.clone()
    }

    pub(crate) fn informers(&self) -> MutexGuard<'_, HashMap<InformerKey, Slot>> {
        self.informers.lock_unpoisoned()
    }

    pub(crate) fn by_object<K: 'static>(&self, ty: &TypeKey) -> Option<&ByObject<K>> {
        self.by_object
            .get(ty)
            .and_then(|b| b.downcast_ref::<ByObject<K>>())
    }

    /// The scopes the reader and `informer(s)` use for a type: its [`ByObject`] scope, or one
    /// per default namespace, or all namespaces.
    pub(crate) fn default_scopes<K: 'static>(&self, ty: &TypeKey) -> Vec<Scope> {
        if let Some(scope) = self.by_object::<K>(ty).and_then(|b| b.scope.clone()) {
            return vec![scope];
        }
        if self.default_namespaces.is_empty() {
            return vec![Scope::all()];
        }
        self.default_namespaces
            .iter()
            .map(Scope::namespace)
            .collect()
    }

    /// Whether the reader still reads `ty` from `scope`: always, unless scopes were set at
    /// run time for `ty` and `scope` is no longer among them.
    pub(crate) fn still_read(&self, ty: &TypeKey, scope: &Scope) -> bool {
        self.scopes_set
            .lock_unpoisoned()
            .get(ty)
            .is_none_or(|scopes| scopes.contains(scope))
    }

    /// The informer of `ty` in `scope`, started if there is none; `pin` keeps it until the
    /// cache stops or it is removed (see [`Slot::pinned`]).
    pub(crate) fn get_or_start<K>(
        &self,
        ty: TypeKey,
        scope: &Scope,
        pin: bool,
        builder: impl FnOnce(Option<&str>) -> InformerBuilder<K>,
    ) -> Result<Informer<K>>
    where
        K: Resource + Clone + DeserializeOwned + serde::Serialize + Debug + Send + Sync + 'static,
    {
        let key = InformerKey::new(ty, scope);
        let mut informers = self.informers();
        if self.token.is_cancelled() {
            return Err(Error::Stopped);
        }
        // An informer stopped through its own handle is replaced, not handed out again; its
        // replacement stays pinned if it was.
        let mut pin = pin;
        if informers
            .get(&key)
            .is_some_and(|slot| slot.token.is_cancelled())
        {
            pin |= informers.remove(&key).is_some_and(|slot| slot.pinned);
        }
        if let Some(slot) = informers.get_mut(&key) {
            slot.pinned |= pin;
            return slot
                .informer
                .downcast_ref::<Informer<K>>()
                .cloned()
                .ok_or(Error::Stopped);
        }
        // `None`: the informer's default, which drops managedFields (and so need not
        // decode them).
        let transform: Option<Option<Transform<K>>> = self
            .by_object::<K>(&key.ty)
            .and_then(|b| b.transform.clone());
        let token = self.token.child_token();
        let tracker = TaskTracker::new();
        let mut informer = scope
            .selected(builder(scope.namespace.as_deref()))
            .list_strategy(self.list_strategy)
            .wire_format(self.wire_format);
        if let Some(transform) = transform {
            informer = informer.transform_opt(transform);
        }
        let informer = informer
            .resync(self.resync)
            .with_token(token.clone())
            .tracker(tracker.clone())
            .track_writes(Arc::clone(&self.writes))
            .cluster_opt(self.cluster.clone())
            .start();
        let mut slot = self.slot(&informer, token, tracker);
        slot.pinned = pin;
        informers.insert(key, slot);
        Ok(informer)
    }

    /// Counts one more user of `key`'s informer.
    pub(crate) fn hold(&self, key: &InformerKey) {
        *self.users.lock_unpoisoned().entry(key.clone()).or_default() += 1;
    }

    /// One user of `key`'s informer lets go: when it was the last, an informer that nothing
    /// pinned is stopped and forgotten (its tasks end on their own; the cache's tracker
    /// still waits for them at stop).
    pub(crate) fn release(&self, key: &InformerKey) {
        let mut informers = self.informers();
        let mut users = self.users.lock_unpoisoned();
        let Some(count) = users.get_mut(key) else {
            return;
        };
        *count = count.saturating_sub(1);
        if *count > 0 {
            return;
        }
        users.remove(key);
        if informers.get(key).is_some_and(|slot| !slot.pinned)
            && let Some(slot) = informers.remove(key)
        {
            tracing::debug!(scope = ?key.scope, "the last user of an informer let go; stopping it");
            slot.token.cancel();
        }
    }

    /// How many users hold `key`'s informer.
    pub(crate) fn users(&self, key: &InformerKey) -> usize {
        self.users.lock_unpoisoned().get(key).copied().unwrap_or(0)
    }

    /// The slot for a new informer whose tasks `tracker` tracks.
    pub(crate) fn slot<K>(
        &self,
        informer: &Informer<K>,
        token: CancellationToken,
        tracker: TaskTracker,
    ) -> Slot
    where
        K: Resource + Send + Sync + 'static,
    {
        // The cache's tracker waits for each informer's tracker, so `stop` covers them all.
        let waiter = tracker.clone();
        self.tracker.spawn(async move { waiter.wait().await });
        tracker.close();
        Slot {
            informer: Box::new(informer.clone()),
            synced: {
                let informer = informer.clone();
                Box::new(move || informer.has_synced())
            },
            failed: {
                let informer = informer.clone();
                Box::new(move || informer.has_failed())
            },
            wait: {
                let informer = informer.clone();
                Box::new(move |timeout| {
                    let informer = informer.clone();
                    Box::pin(async move { informer.wait_for_sync(timeout).await })
                })
            },
            token,
            tracker,
            pinned: false,
            written_as: informer.written_as(),
            peek: {
                let informer = informer.clone();
                Box::new(move |namespace, name| {
                    let key = crate::store::ObjectKey {
                        namespace: namespace.map(str::to_owned),
                        name: name.to_owned(),
                    };
                    informer.store().get(&key).map(|obj| {
                        let meta = obj.meta();
                        (meta.resource_version.clone(), meta.uid.clone())
                    })
                })
            },
        }
    }

    pub(crate) async fn remove(&self, key: &InformerKey) -> bool {
        let slot = self.informers().remove(key);
        match slot {
            Some(slot) => {
                slot.token.cancel();
                slot.tracker.wait().await;
                true
            }
            None => false,
        }
    }
}
