//! Which objects an informer watches ([`Scope`]), how its `Api` is made ([`ApiScope`]),
//! what the reader lists ([`ListOptions`]), and a type's own scope and transform
//! ([`ByObject`]).

use std::sync::Arc;

use kube::core::{ClusterResourceScope, DynamicResourceScope, NamespaceResourceScope, Selector};
use kube::{Api, Client, Resource};
use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::InformerBuilder;

#[cfg(doc)]
use super::Cache;
use crate::transform::Transform;

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

    /// `informer` with this scope's selectors.
    pub(crate) fn selected<K>(&self, mut informer: InformerBuilder<K>) -> InformerBuilder<K>
    where
        K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
    {
        if let Some(labels) = &self.labels {
            informer = informer.labels(labels.clone());
        }
        if let Some(fields) = &self.fields {
            informer = informer.fields(fields.clone());
        }
        informer
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

/// Per-type options: the scope the reader and [`Cache::informer`] use for the type, and the
/// transform its informers apply.
pub struct ByObject<K> {
    pub(crate) scope: Option<Scope>,
    pub(crate) transform: Option<Option<Transform<K>>>,
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

    /// A transform for this type's objects, replacing [`strip_managed_fields`](crate::strip_managed_fields).
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
