//! The event handlers: which requests an event puts on the work queue. The
//! [`EventHandler`] contract, the [`Queue`] and [`enqueue`] are rudder-core's (their one
//! path), imported here for the crate's own use.
//!
//! Requests for old news (objects from the first list, resyncs that changed nothing; see
//! [`Event::is_low_priority`]) are queued at [`LOW_PRIORITY`], everything else at priority 0,
//! so that fresh changes overtake a backlog. The work queue's ageing keeps old news from
//! waiting forever.

use std::any::TypeId;
use std::marker::PhantomData;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
pub(crate) use rudder_core::{EventHandler, Queue, enqueue};

use crate::{Event, Request};

/// Queues a request for the object itself (controller-runtime's
/// `EnqueueRequestForObject`).
#[derive(Clone, Copy, Debug, Default)]
pub struct EnqueueObject;

impl<K: Resource> EventHandler<K> for EnqueueObject {
    fn handle(&self, event: &Event<K>, queue: &Queue) {
        match Request::from_object(event.object()) {
            Some(request) => enqueue(queue, event, request),
            None => tracing::debug!(event = event.kind(), "object without a name, ignored"),
        }
    }
}

/// Queues a request for the object's owner of type `Owner` (controller-runtime's
/// `EnqueueRequestForOwner`); for an update, for the owners of both the old and the new
/// object, so a change of owner reaches both.
///
/// By default only the controller owner reference (`controller: true`) counts;
/// [`all_owners`](Self::all_owners) takes every owner of that kind. An owner matches when its
/// reference's kind and API group (the version may differ) are `Owner`'s. A namespaced owner
/// is looked up in the object's namespace (owner references cannot cross namespaces); a
/// cluster-scoped owner has none. A cluster-scoped object cannot have a namespaced owner, so
/// such a reference is ignored.
pub struct EnqueueOwner<Owner> {
    controller_only: bool,
    _owner: PhantomData<fn() -> Owner>,
}

impl<Owner> std::fmt::Debug for EnqueueOwner<Owner> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnqueueOwner")
            .field("controller_only", &self.controller_only)
            .finish()
    }
}

impl<Owner> Default for EnqueueOwner<Owner> {
    fn default() -> Self {
        Self {
            controller_only: true,
            _owner: PhantomData,
        }
    }
}

impl<Owner> EnqueueOwner<Owner>
where
    Owner: Resource<DynamicType = ()> + 'static,
{
    /// Queues the controller owner of type `Owner`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues every owner of type `Owner`, not only the controller.
    pub fn all_owners(mut self) -> Self {
        self.controller_only = false;
        self
    }

    fn matches(&self, owner: &OwnerReference) -> bool {
        if self.controller_only && owner.controller != Some(true) {
            return false;
        }
        let group = owner
            .api_version
            .rsplit_once('/')
            .map_or("", |(group, _version)| group);
        owner.kind == Owner::kind(&()) && group == Owner::group(&())
    }

    fn requests_for<K: Resource>(&self, object: &K) -> impl Iterator<Item = Request> {
        let meta = object.meta();
        let namespaced = TypeId::of::<Owner::Scope>() == TypeId::of::<NamespaceResourceScope>();
        let namespace = meta.namespace.as_deref();
        meta.owner_references
            .iter()
            .flatten()
            .filter(|o| self.matches(o))
            .filter_map(move |o| match (namespaced, namespace) {
                (true, Some(ns)) => Some(Request::namespaced(ns, &o.name)),
                (true, None) => None,
                (false, _) => Some(Request::cluster(&o.name)),
            })
    }
}

impl<K, Owner> EventHandler<K> for EnqueueOwner<Owner>
where
    K: Resource,
    Owner: Resource<DynamicType = ()> + 'static,
{
    fn handle(&self, event: &Event<K>, queue: &Queue) {
        if let Event::Update { old, .. } = event {
            for request in self.requests_for(&**old) {
                enqueue(queue, event, request);
            }
        }
        for request in self.requests_for(event.object()) {
            enqueue(queue, event, request);
        }
    }
}

/// Queues what a function maps the object to (controller-runtime's
/// `EnqueueRequestsFromMapFunc`); for an update, the old and the new object are both mapped.
pub struct EnqueueMapped<F>(pub F);

impl<F> std::fmt::Debug for EnqueueMapped<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EnqueueMapped")
    }
}

impl<K, F> EventHandler<K> for EnqueueMapped<F>
where
    K: Resource,
    F: Fn(&K) -> Vec<Request> + Send + Sync,
{
    fn handle(&self, event: &Event<K>, queue: &Queue) {
        if let Event::Update { old, .. } = event {
            for request in (self.0)(old) {
                enqueue(queue, event, request);
            }
        }
        for request in (self.0)(event.object()) {
            enqueue(queue, event, request);
        }
    }
}

type WithFlag<K> = Option<Box<dyn Fn(&K, bool, &Queue) + Send + Sync>>;
type OldNew<K> = Option<Box<dyn Fn(&K, &K, &Queue) + Send + Sync>>;
type Plain<K> = Option<Box<dyn Fn(&K, &Queue) + Send + Sync>>;

/// Closures per event kind, each given the queue; a kind without one does nothing.
pub struct HandlerFuncs<K> {
    create: WithFlag<K>,
    update: OldNew<K>,
    delete: WithFlag<K>,
    generic: Plain<K>,
}

impl<K> Default for HandlerFuncs<K> {
    fn default() -> Self {
        Self {
            create: None,
            update: None,
            delete: None,
            generic: None,
        }
    }
}

impl<K> std::fmt::Debug for HandlerFuncs<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerFuncs").finish_non_exhaustive()
    }
}

impl<K> HandlerFuncs<K> {
    /// No closures yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// On create: `(object, initial_list, queue)`.
    pub fn on_create(mut self, f: impl Fn(&K, bool, &Queue) + Send + Sync + 'static) -> Self {
        self.create = Some(Box::new(f));
        self
    }

    /// On update: `(old, new, queue)`.
    pub fn on_update(mut self, f: impl Fn(&K, &K, &Queue) + Send + Sync + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    /// On delete: `(object, final_state_unknown, queue)`.
    pub fn on_delete(mut self, f: impl Fn(&K, bool, &Queue) + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }

    /// On a generic event: `(object, queue)`.
    pub fn on_generic(mut self, f: impl Fn(&K, &Queue) + Send + Sync + 'static) -> Self {
        self.generic = Some(Box::new(f));
        self
    }
}

impl<K> EventHandler<K> for HandlerFuncs<K> {
    fn handle(&self, event: &Event<K>, queue: &Queue) {
        match event {
            Event::Create {
                object,
                initial_list,
            } => {
                if let Some(f) = &self.create {
                    f(object, *initial_list, queue);
                }
            }
            Event::Update { old, new } => {
                if let Some(f) = &self.update {
                    f(old, new, queue);
                }
            }
            Event::Delete {
                object,
                final_state_unknown,
            } => {
                if let Some(f) = &self.delete {
                    f(object, *final_state_unknown, queue);
                }
            }
            Event::Generic { object } => {
                if let Some(f) = &self.generic {
                    f(object, queue);
                }
            }
        }
    }
}
