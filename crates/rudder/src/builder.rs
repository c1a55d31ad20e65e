//! [`ControllerBuilder`]: declare a controller on a manager, like controller-runtime's
//! `NewControllerManagedBy(mgr).For(..).Owns(..).Complete(r)`.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;
use kube::Resource;
use kube::core::GroupVersionKind;
use rudder_cache::Typed;
use rudder_controller::{Controller, Reconciler, WatchSpec};
use rudder_handler::{
    EnqueueObject, EnqueueOwner, EventHandler, Kind, MetaPredicate, MetaPredicates, Predicate,
    Request, Source,
};
use rudder_manager::Manager;
use rudder_workqueue::RateLimiter;

use crate::{Error, Result, Tools};

type ServedCheck = Box<dyn FnOnce(Client) -> BoxFuture<'static, Result<()>> + Send>;

/// A watch waiting for the builder's global predicates, known only at `complete`.
type PendingWatch = Box<dyn FnOnce(&MetaPredicates) -> WatchSpec + Send>;

/// Declares a controller on `manager`: call [`for_`](ControllerBuilder::for_) with the
/// primary type first.
pub fn controller(manager: &Manager) -> ControllerBuilder<'_, ()> {
    ControllerBuilder {
        manager,
        name: None,
        watches: Vec::new(),
        global: Vec::new(),
        served: Vec::new(),
        error: None,
        workers: None,
        rate_limiter: None,
        reconcile_timeout: None,
        cache_sync_timeout: None,
        _primary: PhantomData,
    }
}

/// A controller being declared; `K` is its primary type once [`for_`](Self::for_) is called
/// (a builder without one has no `complete`, so forgetting it does not compile).
pub struct ControllerBuilder<'m, K> {
    manager: &'m Manager,
    name: Option<String>,
    watches: Vec<PendingWatch>,
    global: Vec<Arc<dyn MetaPredicate>>,
    served: Vec<ServedCheck>,
    error: Option<Error>,
    workers: Option<usize>,
    rate_limiter: Option<Box<dyn RateLimiter<Request>>>,
    reconcile_timeout: Option<Duration>,
    cache_sync_timeout: Option<Duration>,
    _primary: PhantomData<fn() -> K>,
}

impl<K> std::fmt::Debug for ControllerBuilder<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerBuilder")
            .field("name", &self.name)
            .field("watches", &self.watches.len())
            .finish_non_exhaustive()
    }
}

impl<'m> ControllerBuilder<'m, ()> {
    /// The primary type: its objects are reconciled, each event queueing the object itself.
    pub fn for_<K: Typed>(self) -> ControllerBuilder<'m, K> {
        self.for_with::<K>(Vec::new())
    }

    /// [`for_`](Self::for_) with predicates on the primary type's events.
    pub fn for_with<K: Typed>(
        self,
        predicates: Vec<Box<dyn Predicate<K>>>,
    ) -> ControllerBuilder<'m, K> {
        let next = ControllerBuilder {
            manager: self.manager,
            name: self.name,
            watches: self.watches,
            global: self.global,
            served: self.served,
            error: self.error,
            workers: self.workers,
            rate_limiter: self.rate_limiter,
            reconcile_timeout: self.reconcile_timeout,
            cache_sync_timeout: self.cache_sync_timeout,
            _primary: PhantomData,
        };
        next.watch_kind::<K, _>(EnqueueObject, predicates)
    }
}

impl<'m, K: Typed> ControllerBuilder<'m, K> {
    /// Objects of type `O` that the primary type owns (controller owner reference): their
    /// events queue their owner.
    pub fn owns<O: Typed>(self) -> Self {
        self.owns_with::<O>(Vec::new())
    }

    /// [`owns`](Self::owns) with predicates on the owned type's events.
    pub fn owns_with<O: Typed>(self, predicates: Vec<Box<dyn Predicate<O>>>) -> Self {
        self.watch_kind::<O, _>(EnqueueOwner::<K>::new(), predicates)
    }

    /// Any other source of objects, with its own handler and predicates (after the global
    /// ones).
    pub fn watches<T, H>(
        mut self,
        source: impl Source<T>,
        handler: H,
        predicates: Vec<Box<dyn Predicate<T>>>,
    ) -> Self
    where
        T: Resource + Send + Sync + 'static,
        H: EventHandler<T> + 'static,
    {
        self.watches.push(pending(source, handler, predicates));
        self
    }

    /// A source of anything, not only Kubernetes objects: the global predicates, which read
    /// metadata, do not apply (controller-runtime's `WatchesRawSource`).
    pub fn watches_raw<T, H>(
        mut self,
        source: impl Source<T>,
        handler: H,
        predicates: Vec<Box<dyn Predicate<T>>>,
    ) -> Self
    where
        T: Send + Sync + 'static,
        H: EventHandler<T> + 'static,
    {
        let spec = WatchSpec::new(source, handler, predicates);
        self.watches.push(Box::new(move |_: &MetaPredicates| spec));
        self
    }

    /// A predicate for every watch declared with [`for_`](ControllerBuilder::for_),
    /// [`owns`](Self::owns) or [`watches`](Self::watches), before or after this call
    /// (controller-runtime's `WithEventFilter`). It runs before each watch's own predicates;
    /// an event must pass all of them. Any of the built-in predicates will do, or a closure
    /// over a [`MetaEvent`](rudder_handler::MetaEvent).
    pub fn event_filter(mut self, predicate: impl MetaPredicate + 'static) -> Self {
        self.global.push(Arc::new(predicate));
        self
    }

    /// The controller's name (default: the primary kind, lowercased); unique in the process.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How many reconciles may run at once (default 1).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = Some(workers);
        self
    }

    /// The retry rate limiter (default: client-go's controller default).
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<Request> + 'static) -> Self {
        self.rate_limiter = Some(Box::new(limiter));
        self
    }

    /// Cancels a reconcile's context after this long.
    pub fn reconcile_timeout(mut self, timeout: Duration) -> Self {
        self.reconcile_timeout = Some(timeout);
        self
    }

    /// How long the controller waits for its sources to sync.
    pub fn cache_sync_timeout(mut self, timeout: Duration) -> Self {
        self.cache_sync_timeout = Some(timeout);
        self
    }

    /// Builds the controller around `reconciler` and adds it to the manager.
    ///
    /// # Errors
    ///
    /// [`Error::NotServed`] if the API server does not serve a watched type (a CRD not
    /// installed), [`Error::Cache`] if its informer could not be made, [`Error::Controller`]
    /// for a duplicate or empty name.
    pub async fn complete<R: Reconciler>(self, reconciler: R) -> Result<Controller<R>> {
        self.complete_with(|_| reconciler).await
    }

    /// [`complete`](Self::complete) with a reconciler made from the controller's [`Tools`]:
    /// the manager's client and cache, and an event recorder reporting as the controller.
    ///
    /// # Errors
    ///
    /// As [`complete`](Self::complete). `make` is called once the API server is known to
    /// serve every watched type, before the name is checked.
    pub async fn complete_with<R: Reconciler>(
        self,
        make: impl FnOnce(Tools) -> R,
    ) -> Result<Controller<R>> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let client = self.manager.client().clone();
        for check in self.served {
            check(client.clone()).await?;
        }
        let name = self.name.unwrap_or_else(|| K::kind(&()).to_lowercase());
        let reconciler = make(Tools::new(self.manager, &name));
        let mut builder = Controller::builder(name, reconciler);
        if let Some(workers) = self.workers {
            builder = builder.workers(workers);
        }
        if let Some(limiter) = self.rate_limiter {
            builder = builder.rate_limiter(limiter);
        }
        if let Some(timeout) = self.reconcile_timeout {
            builder = builder.reconcile_timeout(timeout);
        }
        if let Some(timeout) = self.cache_sync_timeout {
            builder = builder.cache_sync_timeout(timeout);
        }
        let controller = builder.build().map_err(Error::Controller)?;
        let global = MetaPredicates::new(self.global);
        for watch in self.watches {
            controller.add_watch(watch(&global));
        }
        self.manager.add_controller(controller.clone());
        Ok(controller)
    }
}

impl<'m, K> ControllerBuilder<'m, K> {
    /// Watches the shared informer for `T` through `handler`, and checks at `complete` that
    /// the server serves `T`.
    fn watch_kind<T: Typed, H: EventHandler<T> + 'static>(
        mut self,
        handler: H,
        predicates: Vec<Box<dyn Predicate<T>>>,
    ) -> Self {
        self.served
            .push(Box::new(|client| Box::pin(served::<T>(client))));
        match Kind::<T>::from_cache(self.manager.cache()) {
            Ok(source) => self.watches.push(pending(source, handler, predicates)),
            Err(error) => {
                self.error.get_or_insert(Error::Cache(error));
            }
        }
        self
    }
}

/// A watch of `source` whose predicates are the global ones, then `predicates`.
fn pending<T, H>(
    source: impl Source<T>,
    handler: H,
    predicates: Vec<Box<dyn Predicate<T>>>,
) -> PendingWatch
where
    T: Resource + Send + Sync + 'static,
    H: EventHandler<T> + 'static,
{
    Box::new(move |global: &MetaPredicates| {
        let all = if global.is_empty() {
            predicates
        } else {
            let mut all: Vec<Box<dyn Predicate<T>>> = Vec::with_capacity(predicates.len() + 1);
            all.push(Box::new(global.clone()));
            all.extend(predicates);
            all
        };
        WatchSpec::new(source, handler, all)
    })
}

/// Whether the API server serves `T`, by discovery.
async fn served<T: Typed>(client: Client) -> Result<()> {
    let gvk = GroupVersionKind::gvk(&T::group(&()), &T::version(&()), &T::kind(&()));
    kube::discovery::pinned_kind(&client, &gvk)
        .await
        .map(|_| ())
        .map_err(|source| Error::NotServed {
            kind: format!("{}/{} {}", gvk.group, gvk.version, gvk.kind),
            source,
        })
}
