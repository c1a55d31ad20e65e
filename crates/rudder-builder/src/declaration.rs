//! [`Declaration`]: what a controller declares (its primary type, owned and watched types,
//! sources, predicates, options, name and permissions), one record shared by the
//! single-cluster `ControllerBuilder` (the facade's, `rudder::ControllerBuilder`) and the
//! fleet's `FleetControllerBuilder` (rudder-fleet's), so that the two cannot drift: each of
//! their methods delegates here.
//!
//! Watches are recorded as makers, called where the controller runs (a [`Place`]): once for
//! a single-cluster controller (the manager's cache), once per member cluster for a fleet's
//! (each member's cache). A handler or predicate the user gives is shared by every instance
//! (they take `&self`, and the queue they feed is handed to them); a source cannot be, as
//! starting it consumes it and it reads from one cluster, so the fleet takes a function that
//! makes one for each member, and the single-cluster builder's one source is recorded as a
//! watch made once ([`Declared::Once`], which only the single-cluster builder records).

use std::marker::PhantomData;
use std::sync::Arc;

use kube::Resource;
use kube::core::GroupVersionKind;
use rudder_cache::writes::WriteTracker;
use rudder_cache::{Cache, Typed};
use rudder_controller::{Options, WatchSpec};
use rudder_core::Event;
use rudder_core::EventHandler;
use rudder_core::MetaPredicate;
use rudder_core::MetaPredicates;
use rudder_core::Predicate;
use rudder_core::Queue;
use rudder_core::Source;
use rudder_core::writes::WriteObserver;
use rudder_handler::{DropOwnEchoes, EnqueueObject, EnqueueOwner, Kind};
use rudder_manager::Manager;
use rudder_manager::rbac::{Permissions, Verb};

/// Where a controller's watches are made: the manager (one cluster), or a fleet's member.
pub trait Place: Send + Sync + 'static {
    /// The cache the controller's typed watches read.
    fn cache(&self) -> &Cache;
}

impl Place for Manager {
    fn cache(&self) -> &Cache {
        Manager::cache(self)
    }
}

/// A member cluster of a fleet, as the fleet's controllers see it: its name, its client and
/// its cache ([`Tools::for_cluster`](crate::Tools::for_cluster) makes a reconciler's tools from
/// them). rudder-fleet's `Cluster` is the one implementation.
pub trait Member {
    /// The cluster's name in the fleet.
    fn name(&self) -> &str;
    /// The client of the cluster's API server.
    fn kube(&self) -> &kube::Client;
    /// The cluster's own cache.
    fn cache(&self) -> &Cache;
}

/// The echoes of a controller's own writes to drop (with `Options::filter_own_echoes`): the
/// place's write tracker and the controller's observer.
pub type Echoes = Option<(Arc<WriteTracker>, Arc<dyn WriteObserver>)>;

/// What a watch is made with: its place, and what is known once the controller is built.
pub struct Site<'a, P> {
    /// Where the controller runs: the manager, or a fleet's member.
    pub place: &'a P,
    /// The [`event_filter`](Declaration::event_filter) predicates.
    pub global: &'a MetaPredicates,
    /// The echoes of the controller's own writes to drop, when it filters them.
    pub echoes: &'a Echoes,
}

/// A watch made again at each place the controller runs.
pub type Watch<P> = Arc<dyn Fn(&Site<'_, P>) -> WatchSpec + Send + Sync>;

/// A watch of a source given once, made where the one controller runs.
pub type WatchOnce<P> = Box<dyn FnOnce(&Site<'_, P>) -> WatchSpec + Send>;

/// A watch as declared.
pub enum Declared<P> {
    /// Made at each place (every member of a fleet).
    Each(Watch<P>),
    /// A source given once, for a single-cluster controller.
    Once(WatchOnce<P>),
}

/// A controller's declaration; `K` is its primary type once [`for_`](Self::for_) is called,
/// `P` where it runs.
pub struct Declaration<K, P> {
    /// The name given ([`named`](Self::named)); the primary kind in lower case otherwise.
    pub name: Option<String>,
    /// The controller's options ([`with_options`](Self::with_options)).
    pub options: Options,
    /// What the controller needs from the API server: its watches' reads and what it
    /// declared beyond them.
    pub permissions: Permissions,
    /// Every type watched or read through the cache, for a check that the API server serves
    /// it.
    pub served: Vec<GroupVersionKind>,
    /// The [`event_filter`](Self::event_filter) predicates, for every watch.
    pub global: Vec<Arc<dyn MetaPredicate>>,
    /// The watches besides the primary type's, in their order.
    pub watches: Vec<Declared<P>>,
    /// The primary type's own predicate.
    pub primary: Option<Arc<dyn Predicate<K>>>,
    _primary: PhantomData<fn() -> K>,
}

impl<K, P> std::fmt::Debug for Declaration<K, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declaration")
            .field("name", &self.name)
            .field("watches", &self.watches.len())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<P> Default for Declaration<(), P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P> Declaration<(), P> {
    /// Nothing declared yet.
    pub fn new() -> Self {
        Self {
            name: None,
            options: Options::default(),
            permissions: Permissions::new(),
            served: Vec::new(),
            global: Vec::new(),
            watches: Vec::new(),
            primary: None,
            _primary: PhantomData,
        }
    }
}

impl<K, P: Place> Declaration<K, P> {
    /// The primary type `T`, with its own predicate: list and watch on it (its informer),
    /// and a check that it is served.
    pub fn for_<T: Typed>(self, predicate: Option<Arc<dyn Predicate<T>>>) -> Declaration<T, P> {
        let mut declaration = Declaration {
            name: self.name,
            options: self.options,
            permissions: self.permissions,
            served: self.served,
            global: self.global,
            watches: self.watches,
            primary: predicate,
            _primary: PhantomData,
        };
        declaration.served.push(gvk::<T>());
        declaration.permissions = std::mem::take(&mut declaration.permissions).informer::<T>();
        declaration
    }

    /// Owned objects of type `O`, written with `writes`, their events queueing their owner.
    pub fn owns<O: Typed>(
        mut self,
        writes: impl IntoIterator<Item = Verb>,
        predicate: Option<Arc<dyn Predicate<O>>>,
    ) -> Self
    where
        K: Typed,
    {
        let writes: Vec<Verb> = writes.into_iter().collect();
        let references = writes
            .iter()
            .any(|verb| matches!(verb, Verb::Create | Verb::Update | Verb::Patch));
        let mut permissions = std::mem::take(&mut self.permissions).verbs::<O>(writes);
        if references {
            // Writing an owner reference with `blockOwnerDeletion` asks for this of the
            // owner (the API server's `OwnerReferencesPermissionEnforcement`).
            permissions = permissions.subresource::<K>("finalizers", [Verb::Update]);
        }
        self.permissions = permissions;
        self.watch_kind_labelled::<O, _>(EnqueueOwner::<K>::new(), predicate, OWNS)
    }

    /// `T` from the place's cache through `handler`: list and watch on `T`, and a check
    /// that it is served.
    pub fn watch_kind<T: Typed, H: EventHandler<T> + 'static>(
        self,
        handler: H,
        predicate: Option<Arc<dyn Predicate<T>>>,
    ) -> Self {
        self.watch_kind_labelled(handler, predicate, WATCHES)
    }

    /// [`watch_kind`](Self::watch_kind), its causes labelled `label`.
    fn watch_kind_labelled<T: Typed, H: EventHandler<T> + 'static>(
        mut self,
        handler: H,
        predicate: Option<Arc<dyn Predicate<T>>>,
        label: &'static str,
    ) -> Self {
        self.served.push(gvk::<T>());
        self.permissions = std::mem::take(&mut self.permissions).informer::<T>();
        let handler = Arc::new(handler);
        self.watches
            .push(Declared::Each(Arc::new(move |site: &Site<'_, P>| {
                typed_spec(
                    Kind::<T>::from_cache(site.place.cache()),
                    Shared(Arc::clone(&handler)),
                    predicate.as_ref(),
                    site,
                    label,
                )
            })));
        self
    }

    /// A type read through the client: its informer starts with the controller (its events
    /// queue nothing), list and watch on it, and a check that it is served.
    pub fn reads<T: Typed>(mut self) -> Self {
        self.served.push(gvk::<T>());
        self.permissions = std::mem::take(&mut self.permissions).informer::<T>();
        self.watches
            .push(Declared::Each(Arc::new(|site: &Site<'_, P>| {
                WatchSpec::new(
                    Kind::<T>::from_cache(site.place.cache()),
                    |_: &Event<T>, _: &Queue| {},
                    Vec::new(),
                )
                .labelled(READS)
            })));
        self
    }

    /// A source made at each place by `source`, through `handler`; the global predicates,
    /// then `predicate`, apply.
    pub fn watches_each<T, S, H>(
        mut self,
        source: impl Fn(&P) -> S + Send + Sync + 'static,
        handler: H,
        predicate: Option<Arc<dyn Predicate<T>>>,
    ) -> Self
    where
        T: Resource + Send + Sync + 'static,
        S: Source<T>,
        H: EventHandler<T> + 'static,
    {
        let handler = Arc::new(handler);
        self.watches
            .push(Declared::Each(Arc::new(move |site: &Site<'_, P>| {
                meta_spec(
                    source(site.place),
                    Shared(Arc::clone(&handler)),
                    predicate.as_ref(),
                    site,
                )
                .labelled(WATCHES)
            })));
        self
    }

    /// More permissions.
    pub fn permissions(mut self, permissions: Permissions) -> Self {
        self.permissions = std::mem::take(&mut self.permissions).and(permissions);
        self
    }

    /// A predicate on every watch but raw ones, before their own.
    pub fn event_filter(mut self, predicate: impl MetaPredicate + 'static) -> Self {
        self.global.push(Arc::new(predicate));
        self
    }

    /// The controller's name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How the controller (each instance of it) runs.
    pub fn with_options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }
}

impl<K: Typed, P: Place> Declaration<K, P> {
    /// The controller's name: the one given, or the primary kind in lower case.
    pub fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| K::kind(&()).to_lowercase())
    }

    /// The primary type's watch of `source` (its informers, or a shard's), each event
    /// queueing the object itself.
    pub fn primary_spec(&self, source: impl Source<K>, site: &Site<'_, P>) -> WatchSpec {
        typed_spec(source, EnqueueObject, self.primary.as_ref(), site, FOR)
    }
}

impl<K: Typed, P: Place> Declaration<K, P> {
    /// Every watch of a fleet's declaration (`P` a member), made again for each member: the
    /// primary type's on the member's cache first, then the others in their order. (Only a
    /// `Declaration<_, Manager>` records a source given once, so a member's declaration has
    /// only watches made per member.)
    pub fn per_member(&mut self) -> Vec<Watch<P>> {
        let predicate = self.primary.clone();
        let primary: Watch<P> = Arc::new(move |site: &Site<'_, P>| {
            typed_spec(
                Kind::<K>::from_cache(site.place.cache()),
                EnqueueObject,
                predicate.as_ref(),
                site,
                FOR,
            )
        });
        std::iter::once(primary)
            .chain(
                std::mem::take(&mut self.watches)
                    .into_iter()
                    .filter_map(|watch| match watch {
                        Declared::Each(watch) => Some(watch),
                        Declared::Once(_) => None,
                    }),
            )
            .collect()
    }
}

impl<K> Declaration<K, Manager> {
    /// A source given once (a single-cluster controller's), through `handler`; the global
    /// predicates, then `predicate`, apply.
    pub fn watches_once<T, H>(
        mut self,
        source: impl Source<T>,
        handler: H,
        predicate: Option<Arc<dyn Predicate<T>>>,
    ) -> Self
    where
        T: Resource + Send + Sync + 'static,
        H: EventHandler<T> + 'static,
    {
        self.watches
            .push(Declared::Once(Box::new(move |site: &Site<'_, Manager>| {
                meta_spec(source, handler, predicate.as_ref(), site).labelled(WATCHES)
            })));
        self
    }

    /// A source of anything, given once, through `handler`; no global predicate applies.
    pub fn watches_raw<T, H>(mut self, source: impl Source<T>, handler: H) -> Self
    where
        T: Send + Sync + 'static,
        H: EventHandler<T> + 'static,
    {
        let spec = WatchSpec::new(source, handler, Vec::new()).labelled(WATCHES);
        self.watches
            .push(Declared::Once(Box::new(move |_: &Site<'_, Manager>| spec)));
        self
    }
}

/// A predicate or handler shared by the watches of every place.
struct Shared<T: ?Sized>(Arc<T>);

impl<K, P: Predicate<K> + ?Sized> Predicate<K> for Shared<P> {
    fn filter(&self, event: &Event<K>) -> bool {
        self.0.filter(event)
    }
}

impl<K, H: EventHandler<K> + ?Sized> EventHandler<K> for Shared<H> {
    fn handle(&self, event: &Event<K>, queue: &Queue) {
        self.0.handle(event, queue);
    }
}

/// A typed watch (the primary, owned types, `watches_kind`): the echoes of the controller's
/// own writes dropped first (with `Options::filter_own_echoes`), then the global
/// predicates, then `predicate`.
fn typed_spec<T: Typed, P>(
    source: impl Source<T>,
    handler: impl EventHandler<T> + 'static,
    predicate: Option<&Arc<dyn Predicate<T>>>,
    site: &Site<'_, P>,
    label: &'static str,
) -> WatchSpec {
    let mut all: Vec<Box<dyn Predicate<T>>> = Vec::with_capacity(3);
    if let Some((tracker, observer)) = site.echoes {
        all.push(Box::new(DropOwnEchoes::<T>::new(
            Arc::clone(tracker),
            Arc::clone(observer),
        )));
    }
    if !site.global.is_empty() {
        all.push(Box::new(site.global.clone()));
    }
    all.extend(predicate.map(|p| Box::new(Shared(Arc::clone(p))) as Box<dyn Predicate<T>>));
    WatchSpec::objects(source, handler, all).labelled(label)
}

/// A watch of a source of the user's: the global predicates, then `predicate`.
fn meta_spec<T, P>(
    source: impl Source<T>,
    handler: impl EventHandler<T> + 'static,
    predicate: Option<&Arc<dyn Predicate<T>>>,
    site: &Site<'_, P>,
) -> WatchSpec
where
    T: Resource + Send + Sync + 'static,
{
    let mut all: Vec<Box<dyn Predicate<T>>> = Vec::with_capacity(2);
    if !site.global.is_empty() {
        all.push(Box::new(site.global.clone()));
    }
    all.extend(predicate.map(|p| Box::new(Shared(Arc::clone(p))) as Box<dyn Predicate<T>>));
    WatchSpec::new(source, handler, all)
}

/// The `source` of the causes a primary watch records (`for_`), and of the
/// `rudder_controller_reconcile_triggers_total` it counts under.
const FOR: &str = "for";
/// ... an owned type's watch (`owns`).
const OWNS: &str = "owns";
/// ... another watch (`watches_kind`, `watches`, `watches_raw`).
const WATCHES: &str = "watches";
/// ... a type only read (`reads`; its events queue nothing).
const READS: &str = "reads";

fn gvk<T: Typed>() -> GroupVersionKind {
    GroupVersionKind::gvk(&T::group(&()), &T::version(&()), &T::kind(&()))
}
