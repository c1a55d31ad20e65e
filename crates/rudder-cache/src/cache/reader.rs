//! The reader: [`Cache::get`] and [`Cache::list`] (and their dynamic forms), served from the
//! stores of the type's informers once they have synced.

use std::any::TypeId;
use std::sync::Arc;

use kube::Resource;
use kube::api::{ApiResource, DynamicObject};
use kube::core::SelectorExt;

use super::registry::{InformerKey, TypeKey};
use super::{Cache, ListOptions, Scope, Typed};
use crate::error::{Error, Result, SyncError};
use crate::informer::Informer;
use crate::store::{NAMESPACE_INDEX, ObjectKey};
use crate::writes::{Cached, WriteTracker};
use rudder_core::writes::ObjectRef;

impl Cache {
    /// The cache's write tracker (read-your-writes): writing clients record the writes they
    /// make inside a reconcile with it, and this cache's informers tell it what they deliver.
    pub fn writes(&self) -> &Arc<WriteTracker> {
        &self.inner.writes
    }

    /// [`cached`](Self::cached) for an object named by its API group and resource
    /// (`object`), from every running informer of that resource whatever its Rust type
    /// (typed, metadata-only, dynamic): what a write handed over from another replica is
    /// checked against.
    pub fn cached_ref(&self, object: &ObjectRef) -> Cached {
        let informers = self.inner.informers();
        let namespace = object.namespace.as_deref();
        let mut covered = false;
        for (slot_key, slot) in informers.iter() {
            let scope = &slot_key.scope;
            let same_type = slot
                .written_as
                .as_ref()
                .is_some_and(|(g, r)| *g == object.group && *r == object.resource);
            if !same_type
                || scope.labels.is_some()
                || scope.fields.is_some()
                || slot.token.is_cancelled()
            {
                continue;
            }
            if let (Some(a), Some(b)) = (&scope.namespace, namespace)
                && a != b
            {
                continue;
            }
            covered = true;
            if let Some((resource_version, uid)) = (slot.peek)(namespace, &object.name) {
                return Cached::Present {
                    resource_version,
                    uid,
                };
            }
        }
        if covered {
            Cached::Absent
        } else {
            Cached::NotCached
        }
    }

    /// What the cache holds of the object `namespace/name` of `K` right now, from the
    /// informers already running (none is started, nothing waits): [`Cached::NotCached`] when
    /// no running informer of `K`'s resource without selectors covers `namespace`, for a writing client
    /// to know whether the cache will ever deliver its write.
    pub fn cached<K: Typed>(&self, namespace: Option<&str>, name: &str) -> Cached {
        self.cached_ref(&ObjectRef::new(
            K::group(&()),
            K::plural(&()),
            namespace,
            name,
        ))
    }

    /// The object `namespace/name` (`namespace` is `None` for cluster-scoped types) from
    /// the cache, waiting for `K`'s informers to sync first. A namespace that none of the
    /// type's default scopes covers is [`Error::NotCached`].
    pub async fn get<K: Typed>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<K>>> {
        let scopes = self.typed_scopes::<K>();
        let informers = self
            .reader_informers::<K>(
                TypeKey::Typed(TypeId::of::<K>()),
                &scopes,
                namespace,
                |scope, pin| self.start_in::<K>(scope, pin),
            )
            .await?;
        Ok(informers
            .iter()
            .find_map(|i| i.store().get(&key(namespace, name))))
    }

    /// The objects of `K` that match `options`, from the cache.
    pub async fn list<K: Typed>(&self, options: &ListOptions) -> Result<Vec<Arc<K>>> {
        let scopes = self.typed_scopes::<K>();
        let informers = self
            .reader_informers::<K>(
                TypeKey::Typed(TypeId::of::<K>()),
                &scopes,
                options.namespace.as_deref(),
                |scope, pin| self.start_in::<K>(scope, pin),
            )
            .await?;
        list(&informers, options)
    }

    /// [`get`](Self::get) for dynamic objects of `resource`.
    pub async fn get_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<DynamicObject>>> {
        let ty = TypeKey::dynamic(resource);
        let scopes = self.inner.default_scopes::<DynamicObject>(&ty);
        let informers = self
            .reader_informers::<DynamicObject>(ty, &scopes, namespace, |scope, pin| {
                self.start_dynamic_in(resource, scope, pin)
            })
            .await?;
        Ok(informers
            .iter()
            .find_map(|i| i.store().get(&key(namespace, name))))
    }

    /// [`list`](Self::list) for dynamic objects of `resource`.
    pub async fn list_dynamic(
        &self,
        resource: &ApiResource,
        options: &ListOptions,
    ) -> Result<Vec<Arc<DynamicObject>>> {
        let ty = TypeKey::dynamic(resource);
        let scopes = self.inner.default_scopes::<DynamicObject>(&ty);
        let informers = self
            .reader_informers::<DynamicObject>(
                ty,
                &scopes,
                options.namespace.as_deref(),
                |scope, pin| self.start_dynamic_in(resource, scope, pin),
            )
            .await?;
        list(&informers, options)
    }

    /// The synced informers among `scopes` that can hold objects in `namespace` (all of
    /// them for `None`), started unless the cache fails on missing informers. `start` is
    /// told to pin an informer it starts (a read keeps what it started) and not one that
    /// runs already (a read does not keep another user's informer alive).
    async fn reader_informers<K>(
        &self,
        ty: TypeKey,
        scopes: &[Scope],
        namespace: Option<&str>,
        start: impl Fn(&Scope, bool) -> Result<Informer<K>>,
    ) -> Result<Vec<Informer<K>>>
    where
        K: Resource + Send + Sync + 'static,
    {
        let describe = |scope: &Scope| match &ty {
            TypeKey::Typed(_) => format!("{} in {scope:?}", std::any::type_name::<K>()),
            TypeKey::Dynamic {
                group,
                version,
                plural,
            } => {
                format!("{group}/{version}/{plural} in {scope:?}")
            }
        };
        // Only scopes set at run time can be none at all (`Cache::set_scopes`): nothing to read.
        if scopes.is_empty() {
            return Ok(Vec::new());
        }
        let covering: Vec<&Scope> = scopes
            .iter()
            .filter(|s| match (&s.namespace, namespace) {
                (None, _) | (_, None) => true,
                (Some(a), Some(b)) => a == b,
            })
            .collect();
        if covering.is_empty() {
            return Err(Error::NotCached {
                namespace: namespace.unwrap_or_default().to_owned(),
                resource: describe(&Scope::all()),
            });
        }
        let mut informers = Vec::with_capacity(covering.len());
        for scope in covering {
            // An informer can stop while a read waits for it: its scope was dropped at run
            // time (a shard handed to another replica, `Cache::set_scopes`), and then the read
            // goes on without it, or it was stopped through a handle (as a failed watch is)
            // while its scope is still read, and then its replacement is started once.
            let mut restarted = false;
            loop {
                let informer = if self.inner.fail_on_missing_informer {
                    let key = InformerKey::new(ty.clone(), scope);
                    let found = self
                        .inner
                        .informers()
                        .get(&key)
                        .and_then(|slot| slot.informer.downcast_ref::<Informer<K>>().cloned());
                    found.ok_or_else(|| Error::MissingInformer {
                        resource: describe(scope),
                    })?
                } else {
                    let key = InformerKey::new(ty.clone(), scope);
                    let running = self.inner.informers().contains_key(&key);
                    let informer = start(scope, !running)?;
                    if !running && scope.namespace.is_none() && !restarted {
                        warn_started_by_read(informer.resource(), self.inner.cluster.as_deref());
                    }
                    informer
                };
                match informer.wait_for_sync(self.inner.sync_timeout).await {
                    Ok(()) => informers.push(informer),
                    Err(SyncError::Stopped { .. }) if !self.inner.still_read(&ty, scope) => {}
                    Err(SyncError::Stopped { .. })
                        if !restarted && !self.inner.fail_on_missing_informer =>
                    {
                        restarted = true;
                        continue;
                    }
                    Err(error) => return Err(error.into()),
                }
                break;
            }
        }
        Ok(informers)
    }
}

/// A read found no informer for a cluster-wide scope and starts one: the process now holds
/// every object of that kind in the cluster, which nothing declared (a controller's watch, or
/// `Cache::informer` at start, would have started it before any read).
fn warn_started_by_read(resource: &str, cluster: Option<&str>) {
    #[cfg(feature = "metrics")]
    {
        let mut labels = vec![metrics::Label::new("resource", resource.to_owned())];
        if let Some(cluster) = cluster {
            labels.push(metrics::Label::new("cluster", cluster.to_owned()));
        }
        metrics::counter!(crate::metrics::READER_STARTED_INFORMERS_TOTAL, labels).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = cluster;
    tracing::warn!(
        %resource,
        "a cached read starts a cluster-wide informer that no controller declared; it holds \
         every object of this kind from now on (watch the kind in a controller, start it with \
         Cache::informer, or give the cache a default namespace or a ByObject scope)"
    );
}

fn key(namespace: Option<&str>, name: &str) -> ObjectKey {
    ObjectKey {
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
    }
}

fn list<K: Resource + Send + Sync + 'static>(
    informers: &[Informer<K>],
    options: &ListOptions,
) -> Result<Vec<Arc<K>>> {
    let mut objects = Vec::new();
    for informer in informers {
        let store = informer.store();
        objects.extend(match (&options.index, &options.namespace) {
            (Some((index, value)), _) => store.by_index(index, value)?,
            (None, Some(ns)) => store.by_index(NAMESPACE_INDEX, ns)?,
            (None, None) => store.list(),
        });
    }
    objects.retain(|obj| {
        let meta = obj.meta();
        let ns_ok = options
            .namespace
            .as_deref()
            .is_none_or(|ns| meta.namespace.as_deref() == Some(ns));
        let labels_ok = options
            .labels
            .as_ref()
            .is_none_or(|sel| match &meta.labels {
                Some(labels) => sel.matches(labels),
                None => sel.matches(&Default::default()),
            });
        ns_ok && labels_ok
    });
    Ok(objects)
}
