//! The cache's options: per-type ([`ByObject`]) and for the whole cache ([`CacheBuilder`]).

use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hashbrown::HashMap;
use kube::api::{ApiResource, DynamicObject};
use kube::{Client, Resource};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Cache;
use super::registry::{Inner, TypeKey};
use super::scope::ByObject;
use crate::informer::DEFAULT_RESYNC;
use crate::writes::WriteTracker;
use crate::{ListStrategy, WireFormat};

/// How long the reader waits for a new informer's first list by default.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(60);

impl Cache {
    /// A builder with the defaults: all namespaces, [`strip_managed_fields`](crate::strip_managed_fields), resync every
    /// 10 hours with jitter, informers started on demand.
    pub fn builder(client: Client) -> CacheBuilder {
        CacheBuilder {
            client,
            default_namespaces: Vec::new(),
            by_object: HashMap::new(),
            resync: Some(DEFAULT_RESYNC),
            fail_on_missing_informer: false,
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            list_strategy: ListStrategy::default(),
            wire_format: WireFormat::default(),
            cluster: None,
        }
    }
}

/// Builds a [`Cache`]; see [`Cache::builder`].
pub struct CacheBuilder {
    pub(crate) client: Client,
    pub(crate) default_namespaces: Vec<String>,
    pub(crate) by_object: HashMap<TypeKey, Box<dyn Any + Send + Sync>>,
    pub(crate) resync: Option<Duration>,
    pub(crate) fail_on_missing_informer: bool,
    pub(crate) sync_timeout: Duration,
    pub(crate) list_strategy: ListStrategy,
    pub(crate) wire_format: WireFormat,
    pub(crate) cluster: Option<Arc<str>>,
}

impl CacheBuilder {
    /// Watch only this namespace unless a type's [`ByObject`] says otherwise.
    #[must_use]
    pub fn default_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.default_namespaces = vec![namespace.into()];
        self
    }

    /// Watch only these namespaces unless a type's [`ByObject`] says otherwise: one
    /// informer per namespace and type, which the reader consults together ([`Cache::scopes`]
    /// lists them). An empty list means all namespaces.
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

    /// The resync period of every informer (default [`DEFAULT_RESYNC`](crate::DEFAULT_RESYNC), 10 hours plus up to
    /// 10% jitter); `None` turns resync off.
    #[must_use]
    pub fn resync(mut self, period: Option<Duration>) -> Self {
        self.resync = period;
        self
    }

    /// Make the reader fail with [`Error::MissingInformer`](crate::Error::MissingInformer) for a type that has no informer
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

    /// How every informer of the cache lists (see [`ListStrategy`]): streaming lists with a
    /// fall back to paginated ones by default; [`ListStrategy::Paginated`] never streams.
    #[must_use]
    pub fn list_strategy(mut self, strategy: ListStrategy) -> Self {
        self.list_strategy = strategy;
        self
    }

    /// How every informer of the cache encodes its lists and watches (see [`WireFormat`]):
    /// protobuf for built-in types by default, [`WireFormat::Json`] for JSON everywhere.
    #[must_use]
    pub fn wire_format(mut self, wire: WireFormat) -> Self {
        self.wire_format = wire;
        self
    }

    /// The member cluster this cache is of, for a process with a cache per cluster (the
    /// `rudder` facade's fleet sets it): its informers' metrics carry a `cluster` label, so
    /// the same resource in two clusters makes two series.
    #[must_use]
    pub fn cluster(mut self, name: impl Into<Arc<str>>) -> Self {
        self.cluster = Some(name.into());
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
                list_strategy: self.list_strategy,
                wire_format: self.wire_format,
                cluster: self.cluster,
                informers: Mutex::new(HashMap::new()),
                scopes_set: Mutex::new(HashMap::new()),
                users: Mutex::new(HashMap::new()),
                token: token.child_token(),
                tracker: TaskTracker::new(),
                writes: Arc::new(WriteTracker::new()),
            }),
        }
    }
}
