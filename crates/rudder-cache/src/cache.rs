//! The cache: get-or-create one shared informer per (type, namespace, selectors), and a
//! reader served from their stores.

use std::any::{Any, TypeId};
use std::fmt::{self, Debug};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use hashbrown::HashMap;
use kube::api::{ApiResource, DynamicObject};
use kube::core::{
    ClusterResourceScope, DynamicResourceScope, NamespaceResourceScope, PartialObjectMeta,
};
use kube::core::{Selector, SelectorExt};
use kube::{Api, Client, Resource};
use kube_runtime::watcher;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{Error, Result, SyncError};
use crate::informer::{DEFAULT_RESYNC, Informer, InformerBuilder};
use crate::store::{NAMESPACE_INDEX, ObjectKey};
use crate::transform::{Transform, strip_managed_fields};

/// How long the reader waits for a new informer's first list by default.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// Which objects one informer watches: a namespace (or all) and label and field selectors.
///
/// Each distinct scope of a type is its own watch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Scope {
    /// Watch only this namespace; `None` watches all (and is the only choice for
    /// cluster-scoped types, which ignore it).
    pub namespace: Option<String>,
    /// A label selector in the API server's syntax, e.g. `app=web,tier!=db`.
    pub labels: Option<String>,
    /// A field selector in the API server's syntax, e.g. `metadata.name=x`.
    pub fields: Option<String>,
}

impl Scope {
    /// Every object of the type, in every namespace.
    pub fn all() -> Self {
        Self::default()
    }

    /// Every object in one namespace.
    pub fn namespace(namespace: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            ..Self::default()
        }
    }

    /// Adds a label selector.
    #[must_use]
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.labels = Some(selector.into());
        self
    }

    /// Adds a field selector.
    #[must_use]
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.fields = Some(selector.into());
        self
    }

    fn watcher_config(&self) -> watcher::Config {
        let mut config = watcher::Config::default();
        if let Some(labels) = &self.labels {
            config = config.labels(labels);
        }
        if let Some(fields) = &self.fields {
            config = config.fields(fields);
        }
        config
    }
}

/// Per-type options: the scope the reader and [`Cache::informer`] use for the type, and the
/// transform its informers apply.
pub struct ByObject<K> {
    scope: Option<Scope>,
    transform: Option<Option<Transform<K>>>,
}

impl<K> Default for ByObject<K> {
    fn default() -> Self {
        Self {
            scope: None,
            transform: None,
        }
    }
}

impl<K: Resource> ByObject<K> {
    /// Options that change nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The type's default scope, overriding the cache's default namespace.
    #[must_use]
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = Some(scope);
        self
    }

    /// A transform for this type's objects, replacing [`strip_managed_fields`].
    #[must_use]
    pub fn transform(mut self, transform: impl Fn(&mut K) + Send + Sync + 'static) -> Self {
        self.transform = Some(Some(Arc::new(transform)));
        self
    }

    /// Store this type's objects as the server sends them, `managedFields` included.
    #[must_use]
    pub fn keep_managed_fields(mut self) -> Self {
        self.transform = Some(None);
        self
    }
}

/// How to make an `Api` for a type in a namespace, by the type's scope; implemented for
/// kube's three scope markers.
pub trait ApiScope: sealed::Sealed {
    /// Whether objects of this scope live outside namespaces (then a [`Scope`]'s namespace
    /// is ignored, and dropped from the informer's identity).
    const CLUSTER: bool = false;

    /// An `Api<K>` over `namespace`, or over all namespaces (always, for cluster scope).
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for kube::core::NamespaceResourceScope {}
    impl Sealed for kube::core::ClusterResourceScope {}
    impl Sealed for kube::core::DynamicResourceScope {}
}

impl ApiScope for NamespaceResourceScope {
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        match namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        }
    }
}

impl ApiScope for ClusterResourceScope {
    const CLUSTER: bool = true;

    fn api<K>(client: Client, _namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        Api::all(client)
    }
}

impl ApiScope for DynamicResourceScope {
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        match namespace {
            Some(ns) => Api::namespaced_with(client, ns, &()),
            None => Api::all(client),
        }
    }
}

/// What the reader's `list` returns.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Only objects in this namespace.
    pub namespace: Option<String>,
    /// Only objects whose labels match.
    pub labels: Option<Selector>,
    /// Only objects filed under `(index, value)`; the lookup costs O(matches).
    pub index: Option<(String, String)>,
}

impl ListOptions {
    /// Only objects in `namespace`.
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only objects whose labels match `selector`.
    #[must_use]
    pub fn labels(mut self, selector: Selector) -> Self {
        self.labels = Some(selector);
        self
    }

    /// Only objects filed under `value` in `index`.
    #[must_use]
    pub fn index(mut self, index: impl Into<String>, value: impl Into<String>) -> Self {
        self.index = Some((index.into(), value.into()));
        self
    }
}

/// Builds a [`Cache`]; see [`Cache::builder`].
pub struct CacheBuilder {
    client: Client,
    default_namespaces: Vec<String>,
    by_object: HashMap<TypeKey, Box<dyn Any + Send + Sync>>,
    resync: Option<Duration>,
    fail_on_missing_informer: bool,
    sync_timeout: Duration,
}

impl CacheBuilder {
    /// Watch only this namespace unless a type's [`ByObject`] says otherwise.
    #[must_use]
    pub fn default_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.default_namespaces = vec![namespace.into()];
        self
    }

    /// Watch only these namespaces unless a type's [`ByObject`] says otherwise: one
    /// informer per namespace and type, which the reader consults together. With more than
    /// one, [`Cache::informer`] is an error ([`Error::SeveralInformers`]); use
    /// [`Cache::informers`]. An empty list means all namespaces.
    #[must_use]
    pub fn default_namespaces<I, S>(mut self, namespaces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.default_namespaces = namespaces.into_iter().map(Into::into).collect();
        self.default_namespaces.sort();
        self.default_namespaces.dedup();
        self
    }

    /// Options for the typed objects `K` (or `PartialObjectMeta<K>` for metadata-only).
    #[must_use]
    pub fn by_object<K>(mut self, options: ByObject<K>) -> Self
    where
        K: Resource + Send + Sync + 'static,
    {
        self.by_object
            .insert(TypeKey::Typed(TypeId::of::<K>()), Box::new(options));
        self
    }

    /// Options for dynamic objects of the resource `resource`.
    #[must_use]
    pub fn by_dynamic(mut self, resource: &ApiResource, options: ByObject<DynamicObject>) -> Self {
        self.by_object
            .insert(TypeKey::dynamic(resource), Box::new(options));
        self
    }

    /// The resync period of every informer (default [`DEFAULT_RESYNC`], 10 hours plus up to
    /// 10% jitter); `None` turns resync off.
    #[must_use]
    pub fn resync(mut self, period: Option<Duration>) -> Self {
        self.resync = period;
        self
    }

    /// Make the reader fail with [`Error::MissingInformer`] for a type that has no informer
    /// yet, instead of starting one.
    #[must_use]
    pub fn fail_on_missing_informer(mut self, fail: bool) -> Self {
        self.fail_on_missing_informer = fail;
        self
    }

    /// How long the reader waits for an informer's first list (default 60 s).
    #[must_use]
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = timeout;
        self
    }

    /// The cache; its informers stop when `token` is cancelled (or on [`Cache::stop`]).
    pub fn build(self, token: &CancellationToken) -> Cache {
        Cache {
            inner: Arc::new(Inner {
                client: self.client,
                default_namespaces: self.default_namespaces,
                by_object: self.by_object,
                resync: self.resync,
                fail_on_missing_informer: self.fail_on_missing_informer,
                sync_timeout: self.sync_timeout,
                informers: Mutex::new(HashMap::new()),
                token: token.child_token(),
                tracker: TaskTracker::new(),
            }),
        }
    }
}

/// Shared informers, one per (type, [`Scope`]), and a reader over their stores.
///
/// Cloning gives another handle to the same cache.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
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
    /// A builder with the defaults: all namespaces, [`strip_managed_fields`], resync every
    /// 10 hours with jitter, informers started on demand.
    pub fn builder(client: Client) -> CacheBuilder {
        CacheBuilder {
            client,
            default_namespaces: Vec::new(),
            by_object: HashMap::new(),
            resync: Some(DEFAULT_RESYNC),
            fail_on_missing_informer: false,
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
        }
    }

    /// The shared informer for `K` in its default scope, started if there is none.
    ///
    /// Fails with [`Error::SeveralInformers`] when the cache has several default
    /// namespaces; see [`Cache::informers`].
    pub fn informer<K>(&self) -> Result<Informer<K>>
    where
        K: Typed,
    {
        let mut informers = self.informers::<K>()?;
        match informers.len() {
            1 => informers.pop().ok_or(Error::Stopped),
            _ => Err(Error::SeveralInformers {
                resource: std::any::type_name::<K>().to_owned(),
            }),
        }
    }

    /// The shared informers for `K` in its default scopes (one per default namespace, or
    /// one), started if there are none.
    pub fn informers<K>(&self) -> Result<Vec<Informer<K>>>
    where
        K: Typed,
    {
        self.typed_scopes::<K>()
            .iter()
            .map(|scope| self.informer_in::<K>(scope))
            .collect()
    }

    /// The shared informer for `K` in `scope`, started if there is none.
    pub fn informer_in<K>(&self, scope: &Scope) -> Result<Informer<K>>
    where
        K: Typed,
    {
        let client = self.inner.client.clone();
        let scope = &typed_scope::<K>(scope);
        self.inner
            .get_or_start(TypeKey::Typed(TypeId::of::<K>()), scope, |ns| {
                let informer = Informer::builder(<K::Scope as ApiScope>::api::<K>(client, ns));
                // Metadata decodes whatever the object's type; a full object may not.
                if K::metadata_api() {
                    informer
                } else {
                    informer.skip_malformed()
                }
            })
    }

    /// The shared metadata-only informer for `K` in its default scope: it stores
    /// `PartialObjectMeta<K>` and its watch asks the server for metadata only.
    pub fn metadata_informer<K>(&self) -> Result<Informer<PartialObjectMeta<K>>>
    where
        PartialObjectMeta<K>: Typed,
    {
        self.informer::<PartialObjectMeta<K>>()
    }

    /// The shared informer for dynamic objects of `resource` in its default scope.
    ///
    /// An `ApiResource` does not say whether the resource is namespaced, so for a
    /// cluster-scoped one in a cache with a default namespace, give it [`Scope::all`] (with
    /// [`CacheBuilder::by_dynamic`] or [`Cache::dynamic_informer_in`]).
    pub fn dynamic_informer(&self, resource: &ApiResource) -> Result<Informer<DynamicObject>> {
        let mut informers = self.dynamic_informers(resource)?;
        match informers.len() {
            1 => informers.pop().ok_or(Error::Stopped),
            _ => Err(Error::SeveralInformers {
                resource: resource.plural.clone(),
            }),
        }
    }

    /// The shared informers for dynamic objects of `resource` in its default scopes.
    pub fn dynamic_informers(
        &self,
        resource: &ApiResource,
    ) -> Result<Vec<Informer<DynamicObject>>> {
        self.inner
            .default_scopes::<DynamicObject>(&TypeKey::dynamic(resource))
            .iter()
            .map(|scope| self.dynamic_informer_in(resource, scope))
            .collect()
    }

    /// The shared informer for dynamic objects of `resource` in `scope`.
    pub fn dynamic_informer_in(
        &self,
        resource: &ApiResource,
        scope: &Scope,
    ) -> Result<Informer<DynamicObject>> {
        let client = self.inner.client.clone();
        self.inner
            .get_or_start(TypeKey::dynamic(resource), scope, |ns| {
                Informer::builder(match ns {
                    Some(ns) => Api::namespaced_with(client, ns, resource),
                    None => Api::all_with(client, resource),
                })
            })
    }

    /// Stops and forgets the informer for `K` in `scope`, if there is one, and waits for its
    /// tasks. Handles to it still read its (now frozen) store; the next request for it
    /// starts a new watch. Returns whether there was one.
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
                |scope| self.informer_in::<K>(scope),
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
                |scope| self.informer_in::<K>(scope),
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
            .reader_informers::<DynamicObject>(ty, &scopes, namespace, |scope| {
                self.dynamic_informer_in(resource, scope)
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
            .reader_informers::<DynamicObject>(ty, &scopes, options.namespace.as_deref(), |scope| {
                self.dynamic_informer_in(resource, scope)
            })
            .await?;
        list(&informers, options)
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
    /// [`SyncError::Stopped`] if an informer was stopped first.
    pub async fn wait_for_sync(&self, timeout: Duration) -> std::result::Result<(), SyncError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (count, waits) = {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let slots = self.inner.informers();
                let waits: Vec<_> = slots.values().map(|slot| (slot.wait)(left)).collect();
                (slots.len(), waits)
            };
            for result in futures::future::join_all(waits).await {
                match result {
                    Ok(()) => {}
                    Err(SyncError::Timeout { .. }) => {
                        return Err(SyncError::CacheTimeout {
                            unsynced: self.unsynced_count(),
                            timeout,
                        });
                    }
                    Err(other) => return Err(other),
                }
            }
            // Informers started while we waited must sync too.
            if self.informer_count() == count {
                return Ok(());
            }
        }
    }

    /// Stops every informer and waits until all their tasks have ended.
    pub async fn stop(&self) {
        self.inner.token.cancel();
        let informers: Vec<_> = self.inner.informers().drain().collect();
        drop(informers);
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }

    /// `K`'s default scopes, normalised for its scope kind.
    fn typed_scopes<K: Typed>(&self) -> Vec<Scope> {
        let mut scopes: Vec<Scope> = self
            .inner
            .default_scopes::<K>(&TypeKey::Typed(TypeId::of::<K>()))
            .iter()
            .map(typed_scope::<K>)
            .collect();
        scopes.dedup();
        scopes
    }

    /// The synced informers among `scopes` that can hold objects in `namespace` (all of
    /// them for `None`), started unless the cache fails on missing informers.
    async fn reader_informers<K>(
        &self,
        ty: TypeKey,
        scopes: &[Scope],
        namespace: Option<&str>,
        start: impl Fn(&Scope) -> Result<Informer<K>>,
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
                start(scope)?
            };
            informer.wait_for_sync(self.inner.sync_timeout).await?;
            informers.push(informer);
        }
        Ok(informers)
    }
}

/// The bounds the cache needs of a typed object (met by every k8s-openapi type, kube
/// custom resources, and their `PartialObjectMeta`).
pub trait Typed:
    Resource<DynamicType = (), Scope: ApiScope>
    + Clone
    + DeserializeOwned
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

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum TypeKey {
    Typed(TypeId),
    Dynamic {
        group: String,
        version: String,
        plural: String,
    },
}

impl TypeKey {
    fn dynamic(resource: &ApiResource) -> Self {
        Self::Dynamic {
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.plural.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct InformerKey {
    ty: TypeKey,
    scope: Scope,
}

impl InformerKey {
    fn new(ty: TypeKey, scope: &Scope) -> Self {
        Self {
            ty,
            scope: scope.clone(),
        }
    }
}

struct Slot {
    /// An `Informer<K>` for the slot's type.
    informer: Box<dyn Any + Send + Sync>,
    /// Whether that informer has synced, without knowing its type.
    synced: Box<dyn Fn() -> bool + Send + Sync>,
    /// Whether that informer has failed.
    failed: Box<dyn Fn() -> bool + Send + Sync>,
    /// Waits (at most the given time) for that informer to sync.
    wait: Box<
        dyn Fn(Duration) -> BoxFuture<'static, std::result::Result<(), SyncError>> + Send + Sync,
    >,
    token: CancellationToken,
    tracker: TaskTracker,
}

struct Inner {
    client: Client,
    default_namespaces: Vec<String>,
    by_object: HashMap<TypeKey, Box<dyn Any + Send + Sync>>,
    resync: Option<Duration>,
    fail_on_missing_informer: bool,
    sync_timeout: Duration,
    informers: Mutex<HashMap<InformerKey, Slot>>,
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Inner {
    fn informers(&self) -> MutexGuard<'_, HashMap<InformerKey, Slot>> {
        self.informers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn by_object<K: 'static>(&self, ty: &TypeKey) -> Option<&ByObject<K>> {
        self.by_object
            .get(ty)
            .and_then(|b| b.downcast_ref::<ByObject<K>>())
    }

    /// The scopes the reader and `informer(s)` use for a type: its [`ByObject`] scope, or one
    /// per default namespace, or all namespaces.
    fn default_scopes<K: 'static>(&self, ty: &TypeKey) -> Vec<Scope> {
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

    fn get_or_start<K>(
        &self,
        ty: TypeKey,
        scope: &Scope,
        builder: impl FnOnce(Option<&str>) -> InformerBuilder<K>,
    ) -> Result<Informer<K>>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let key = InformerKey::new(ty, scope);
        let mut informers = self.informers();
        if self.token.is_cancelled() {
            return Err(Error::Stopped);
        }
        // An informer stopped through its own handle is replaced, not handed out again.
        if informers
            .get(&key)
            .is_some_and(|slot| slot.token.is_cancelled())
        {
            informers.remove(&key);
        }
        if let Some(slot) = informers.get(&key) {
            return slot
                .informer
                .downcast_ref::<Informer<K>>()
                .cloned()
                .ok_or(Error::Stopped);
        }
        let transform: Option<Transform<K>> = match self
            .by_object::<K>(&key.ty)
            .and_then(|b| b.transform.clone())
        {
            Some(t) => t,
            None => Some(Arc::new(strip_managed_fields::<K>)),
        };
        let token = self.token.child_token();
        let tracker = TaskTracker::new();
        let informer = builder(scope.namespace.as_deref())
            .config(scope.watcher_config())
            .transform_opt(transform)
            .resync(self.resync)
            .with_token(token.clone())
            .tracker(tracker.clone())
            .start();
        informers.insert(key, self.slot(&informer, token, tracker));
        Ok(informer)
    }

    /// The slot for a new informer whose tasks `tracker` tracks.
    fn slot<K>(
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
        }
    }

    async fn remove(&self, key: &InformerKey) -> bool {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube_runtime::watcher::Event as W;
    use tokio::sync::mpsc;

    use super::*;
    use crate::informer::start_on;
    use crate::lenient::Lenient;

    #[tokio::test]
    async fn a_failed_informer_makes_the_cache_unready_until_it_is_replaced() {
        // Nothing listens there; the informer under test is fed by hand.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let cache =
            Cache::builder(Client::try_from(config).unwrap()).build(&CancellationToken::new());
        let (tx, rx) = mpsc::unbounded_channel::<Option<W<Lenient<ConfigMap>>>>();
        // `None` stands for something in the watch panicking.
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            let event = rx.recv().await?.expect("the watch broke");
            Some((Ok(event), rx))
        });
        let token = cache.inner.token.child_token();
        let tracker = TaskTracker::new();
        let informer = start_on(
            "configmaps".into(),
            stream,
            None,
            None,
            token.clone(),
            tracker.clone(),
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
        let new = cache.informer::<ConfigMap>().unwrap();
        assert!(new.is_running());
        assert_eq!((cache.informer_count(), cache.failed_count()), (1, 0));
        cache.stop().await;
    }
}
