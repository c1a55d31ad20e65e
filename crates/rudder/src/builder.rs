//! [`ControllerBuilder`]: declare a controller on a manager, like controller-runtime's
//! `NewControllerManagedBy(mgr).For(..).Owns(..).Complete(r)`.
//!
//! Declaring has no side effects: the builder records what to watch, and nothing touches
//! the cache until the controller runs (a [`Kind`] asks for its informers when it starts).
//! So a `complete` that fails, or a builder that is dropped, leaves nothing behind.

use std::sync::Arc;

use kube::Client;
use kube::Resource;
use kube::core::GroupVersionKind;
use rudder_cache::Typed;
use rudder_cache::writes::Written;
use rudder_controller::{Controller, KeyLister, Options};
use rudder_core::EventHandler;
use rudder_core::MetaPredicate;
use rudder_core::MetaPredicates;
use rudder_core::Predicate;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_core::Source;
use rudder_handler::Kind;
use rudder_lease::sharding::fence::Fence;
use rudder_lease::sharding::{Ring, ShardMode, ShardingConfig};
use rudder_manager::Manager;
use rudder_manager::rbac::{Permissions, Verb};

use rudder_builder::{Error, Result, Tools};

use rudder_builder::declaration::{Declaration, Declared, Echoes, Site};
use rudder_builder::order::{
    CompleteAfterFor, CompleteWithAfterFor, EventFilterAfterFor, ForOnce, NamedAfterFor,
    OwnsAfterFor, OwnsWithAfterFor, OwnsWritesAfterFor, PermissionsAfterFor, ReadsAfterFor,
    ShardedAfterFor, WatchesAfterFor, WatchesKindAfterFor, WatchesKindWithAfterFor,
    WatchesRawAfterFor, WatchesWithAfterFor, WithOptionsAfterFor,
};

/// Declares a controller on `manager` (controller-runtime's `NewControllerManagedBy`): call
/// [`for_`](ControllerBuilder::for_) with the primary type first, then
/// [`complete`](ControllerBuilder::complete).
pub fn new_controller(manager: &Manager) -> ControllerBuilder<'_, ()> {
    ControllerBuilder {
        manager,
        declaration: Declaration::new(),
        sharding: None,
    }
}

/// A controller being declared; `K` is its primary type once [`for_`](Self::for_) is called.
///
/// # Order
///
/// [`for_`](Self::for_) (or [`for_with`](Self::for_with)) comes first, once; every other
/// method needs the primary type. The compiler checks the order: a builder without a primary
/// type is a `ControllerBuilder<'_, ()>`, whose methods other than `for_` ask of `()` a trait
/// it lacks, so calling one, or `complete`, before `for_` fails to compile with the fix as
/// its message:
///
/// ```text
/// error[E0277]: call `.for_::<K>()` first: `owns` needs the controller's primary type
/// ```
///
/// and a second `for_` with "the controller's primary type is already `ConfigMap`: call
/// `for_` or `for_with` once".
///
/// The declaration (every method but [`sharded`](Self::sharded) and the `complete`s) is
/// the one a fleet's controller makes too
/// ([`FleetControllerBuilder`](crate::multicluster::FleetControllerBuilder)): the two
/// builders delegate to one record of it, so they cannot drift.
pub struct ControllerBuilder<'m, K> {
    manager: &'m Manager,
    declaration: Declaration<K, Manager>,
    sharding: Option<ShardingConfig>,
}

impl<K> std::fmt::Debug for ControllerBuilder<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerBuilder")
            .field("declaration", &self.declaration)
            .field("sharding", &self.sharding.is_some())
            .finish_non_exhaustive()
    }
}

impl<'m, K> ControllerBuilder<'m, K> {
    /// The primary type: its objects are reconciled, each event queueing the object itself.
    ///
    /// Records list and watch on `P` ([`Verb::INFORMER`]): what the cache's informer of
    /// `P` needs, and so every read of it through the client. Writes to it (a finalizer's
    /// patch, its status) are declared with [`permissions`](ControllerBuilder::permissions).
    pub fn for_<P: Typed>(self) -> ControllerBuilder<'m, P>
    where
        K: ForOnce,
    {
        self.primary(None)
    }

    /// [`for_`](Self::for_) with a predicate on the primary type's events (compose several
    /// with [`Compose`](rudder_core::Compose): `a.and(b)`, `a.or(b)`, `a.not()`).
    pub fn for_with<P: Typed>(
        self,
        predicate: impl Predicate<P> + 'static,
    ) -> ControllerBuilder<'m, P>
    where
        K: ForOnce,
    {
        self.primary(Some(Arc::new(predicate)))
    }

    fn primary<P: Typed>(
        self,
        predicate: Option<Arc<dyn Predicate<P>>>,
    ) -> ControllerBuilder<'m, P> {
        ControllerBuilder {
            manager: self.manager,
            declaration: self.declaration.for_(predicate),
            sharding: self.sharding,
        }
    }
}

// Each method asks `K` for its own marker trait, implemented by every `Typed` type but not by
// `()`, for a message that names the method and the fix when it is called before `for_`
// (`order`).
impl<K> ControllerBuilder<'_, K> {
    /// Objects of type `O` that the primary type owns (controller owner reference): their
    /// events queue their owner.
    ///
    /// # Permissions
    ///
    /// Records exactly what watching and keeping an owned object with the client's helpers
    /// need, so that every verb rendered is one the code uses:
    ///
    /// - list and watch on `O` ([`Verb::INFORMER`]): the cache's informer of `O`;
    /// - get, create and patch on `O` ([`Verb::CREATE_OR_PATCH`]): what
    ///   [`Client::create_or_patch`](crate::client::Client::create_or_patch) sends (a get, then
    ///   a create or a merge patch); [`Client::apply`](crate::client::Client::apply) and
    ///   [`Client::create`](crate::client::Client::create) need a subset;
    /// - update on the primary's `finalizers` subresource, which the API server's
    ///   `OwnerReferencesPermissionEnforcement` admission asks of whoever writes an object
    ///   with `blockOwnerDeletion` (as [`set_controller_reference`](crate::client::set_controller_reference)
    ///   sets it).
    ///
    /// Not update nor delete: a reconciler that replaces or deletes what it owns
    /// (`create_or_update`, `update`, `delete`), or writes it with fewer verbs, says which
    /// with [`owns_writes`](Self::owns_writes) instead.
    pub fn owns<O: Typed>(self) -> Self
    where
        K: OwnsAfterFor,
    {
        self.declare(|d| d.owns::<O>(Verb::CREATE_OR_PATCH, None))
    }

    /// [`owns`](Self::owns) with a predicate on the owned type's events; records the same
    /// permissions.
    pub fn owns_with<O: Typed>(self, predicate: impl Predicate<O> + 'static) -> Self
    where
        K: OwnsWithAfterFor,
    {
        self.declare(|d| d.owns::<O>(Verb::CREATE_OR_PATCH, Some(Arc::new(predicate))))
    }

    /// [`owns`](Self::owns), with the reconciler writing `O` with exactly `writes` (in place
    /// of `owns`' get, create and patch). Records list and watch on `O` (its informer),
    /// `writes` on `O`, and, when `writes` holds a verb that writes an owner reference
    /// (create, update or patch), update on the primary's `finalizers` subresource (see
    /// [`owns`](Self::owns)).
    ///
    /// What the [client](crate::client::Client)'s calls send:
    ///
    /// | call | verbs on `O` |
    /// |---|---|
    /// | `create` | create |
    /// | `create_or_patch` | get, create, patch ([`Verb::CREATE_OR_PATCH`]) |
    /// | `create_or_update` | get, create, update ([`Verb::CREATE_OR_UPDATE`]) |
    /// | `apply` | create, patch ([`Verb::APPLY`]) |
    /// | `patch`, `add_finalizer`, `remove_finalizer` | patch |
    /// | `update` | update |
    /// | `delete` | delete |
    /// | `get`, `list` | none beyond the informer's: they read the cache |
    ///
    /// ```no_run
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    /// # use rudder::prelude::*;
    /// # use rudder::manager::rbac::Verb;
    /// # struct R;
    /// # impl Reconciler for R {
    /// #     type Error = std::convert::Infallible;
    /// #     async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> { Ok(Action::done()) }
    /// # }
    /// # async fn demo(manager: &Manager) -> rudder::Result<()> {
    /// rudder::new_controller(manager)
    ///     .for_::<ConfigMap>()
    ///     // The reconciler creates its Pods, and deletes them: nothing else.
    ///     .owns_writes::<Pod>([Verb::Create, Verb::Delete])
    ///     .complete(R)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn owns_writes<O: Typed>(self, writes: impl IntoIterator<Item = Verb>) -> Self
    where
        K: OwnsWritesAfterFor,
    {
        self.declare(|d| d.owns::<O>(writes, None))
    }

    /// A type the reconciler reads through the client ([`Client::get`](crate::client::Client::get),
    /// [`Client::list`](crate::client::Client::list), [`Tools::get`]) without its events
    /// queueing anything. Records list and watch on `T` ([`Verb::INFORMER`]: what the cache's
    /// informer of `T`, and so every read of it, needs), and starts that informer with the
    /// controller, shared with every other reader of `T`: it has synced before the first
    /// reconcile. Like [`for_`](ControllerBuilder::for_), `complete` checks that the API
    /// server serves `T`.
    ///
    /// A type read through the client that no declaration covers (this one,
    /// [`for_`](ControllerBuilder::for_), [`owns`](Self::owns),
    /// [`watches_kind`](Self::watches_kind), or [`permissions`](Self::permissions) with
    /// [`Permissions::informer`]) is a read the rendered RBAC does not allow: it fails at
    /// once with [`ClientError::Undeclared`](crate::client::ClientError::Undeclared) (see
    /// [`ManagerBuilder::require_declared_reads`](rudder_manager::ManagerBuilder::require_declared_reads)).
    pub fn reads<T: Typed>(self) -> Self
    where
        K: ReadsAfterFor,
    {
        self.declare(Declaration::reads::<T>)
    }

    /// Permissions the reconciler needs beyond what the builder sees (it records list and
    /// watch on every watched or read type, what [`owns`](Self::owns) and
    /// [`owns_writes`](Self::owns_writes) say of owned ones, and Events about the primary
    /// when the reconciler is made with [`complete_with`](Self::complete_with)): writes to the
    /// primary, its status or finalizers, other objects it reads or writes directly. They
    /// end up in the operator's generated Role or ClusterRole
    /// ([`Manager::permissions`](rudder_manager::Manager::permissions),
    /// [`manifests`](crate::manifests)); declare them once, here, next to the reconciler.
    ///
    /// ```no_run
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # use rudder::prelude::*;
    /// # use rudder::manager::rbac::{Permissions, Verb};
    /// # struct R;
    /// # impl Reconciler for R {
    /// #     type Error = std::convert::Infallible;
    /// #     async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> { Ok(Action::done()) }
    /// # }
    /// # async fn demo(manager: &Manager) -> rudder::Result<()> {
    /// rudder::new_controller(manager)
    ///     .for_::<ConfigMap>()
    ///     // The reconciler adds a finalizer (a patch) and patches the status.
    ///     .permissions(
    ///         Permissions::new()
    ///             .verbs::<ConfigMap>([Verb::Patch])
    ///             .subresource::<ConfigMap>("status", [Verb::Patch]),
    ///     )
    ///     .complete(R)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn permissions(self, permissions: Permissions) -> Self
    where
        K: PermissionsAfterFor,
    {
        self.declare(|d| d.permissions(permissions))
    }

    /// Objects of type `T` from the manager's shared cache, through `handler` (for example
    /// [`EnqueueMapped`](rudder_handler::EnqueueMapped) to queue related objects). Like
    /// [`for_`](ControllerBuilder::for_) and [`owns`](Self::owns), `complete` checks that
    /// the API server serves `T`. Records list and watch on `T` ([`Verb::INFORMER`]).
    pub fn watches_kind<T, H>(self, handler: H) -> Self
    where
        K: WatchesKindAfterFor,
        T: Typed,
        H: EventHandler<T> + 'static,
    {
        self.declare(|d| d.watch_kind::<T, H>(handler, None))
    }

    /// [`watches_kind`](Self::watches_kind) with a predicate on `T`'s events.
    pub fn watches_kind_with<T, H>(self, handler: H, predicate: impl Predicate<T> + 'static) -> Self
    where
        K: WatchesKindWithAfterFor,
        T: Typed,
        H: EventHandler<T> + 'static,
    {
        self.declare(|d| d.watch_kind::<T, H>(handler, Some(Arc::new(predicate))))
    }

    /// Any other source of objects (a [`Kind`] in a scope of your choosing, a channel),
    /// with its own handler; the global predicates apply to it. `complete` cannot check
    /// what a source you made reads from: a `Kind` on a type the server does not serve keeps
    /// the controller unsynced until its cache-sync timeout. Nor can the builder know what
    /// the source needs permission to read: declare it with [`permissions`](Self::permissions).
    ///
    /// A fleet's controller takes a function that makes the source for each member
    /// ([`FleetControllerBuilder::watches`](crate::multicluster::FleetControllerBuilder::watches)):
    /// a source is consumed as it starts, and reads from one cluster.
    pub fn watches<T, H>(self, source: impl Source<T>, handler: H) -> Self
    where
        K: WatchesAfterFor,
        T: Resource + Send + Sync + 'static,
        H: EventHandler<T> + 'static,
    {
        self.declare(|d| d.watches_once(source, handler, None))
    }

    /// [`watches`](Self::watches) with a predicate on the source's events (after the global
    /// ones).
    pub fn watches_with<T, H>(
        self,
        source: impl Source<T>,
        handler: H,
        predicate: impl Predicate<T> + 'static,
    ) -> Self
    where
        K: WatchesWithAfterFor,
        T: Resource + Send + Sync + 'static,
        H: EventHandler<T> + 'static,
    {
        self.declare(|d| d.watches_once(source, handler, Some(Arc::new(predicate))))
    }

    /// A source of anything, not only Kubernetes objects: the global predicates, which read
    /// metadata, do not apply (controller-runtime's `WatchesRawSource`).
    pub fn watches_raw<T, H>(self, source: impl Source<T>, handler: H) -> Self
    where
        K: WatchesRawAfterFor,
        T: Send + Sync + 'static,
        H: EventHandler<T> + 'static,
    {
        self.declare(|d| d.watches_raw(source, handler))
    }

    /// A predicate for every watch declared with [`for_`](ControllerBuilder::for_),
    /// [`owns`](Self::owns), [`watches_kind`](Self::watches_kind) or
    /// [`watches`](Self::watches), before or after this call (controller-runtime's
    /// `WithEventFilter`). It runs before each watch's own predicate; an event must pass all
    /// of them. Any of the built-in predicates will do, or a closure over a
    /// [`MetaEvent`](rudder_core::MetaEvent).
    pub fn event_filter(self, predicate: impl MetaPredicate + 'static) -> Self
    where
        K: EventFilterAfterFor,
    {
        self.declare(|d| d.event_filter(predicate))
    }

    /// The controller's name (default: the primary kind, lowercased); unique in the process.
    pub fn named(self, name: impl Into<String>) -> Self
    where
        K: NamedAfterFor,
    {
        self.declare(|d| d.named(name))
    }

    /// How the controller runs: workers, timeouts, the retry rate limiter
    /// (controller-runtime's `WithOptions`).
    pub fn with_options(self, options: Options) -> Self
    where
        K: WithOptionsAfterFor,
    {
        self.declare(|d| d.with_options(options))
    }

    /// Shards the controller's primary objects across the replicas of the ring `config`
    /// names, coordinated by Leases (`docs/sharding.md`): each replica reconciles only the
    /// keys of the shards it holds, and the controller runs on every replica instead of only
    /// on the leader. At `complete`, a [`Ring`] is added to the manager and the controller is
    /// gated on it, its resync listing the primary objects from the manager's cache.
    ///
    /// In the default [`ShardMode::QueueFilter`] the cache holds every primary object. With
    /// `config.with_mode(ShardMode::Labels)` each object gets the label
    /// `shard.rudder.dev/<ring>=<shard>` from the replica holding its shard, and each
    /// replica's cache holds only the primary objects of the shards it holds (one informer per
    /// shard, by label selector; reads through the cache and the tools' client see just
    /// those), so memory per replica falls with the number of replicas.
    ///
    /// Records the permissions the ring's Leases need: get, list, watch, create and update on
    /// `leases` in the ring's namespace; in label mode also `patch` on the primary type.
    pub fn sharded(mut self, config: ShardingConfig) -> Self
    where
        K: ShardedAfterFor,
    {
        self.sharding = Some(config);
        self
    }

    /// Builds the controller around `reconciler` and adds it to the manager.
    ///
    /// # Errors
    ///
    /// [`Error::NotServed`] if the API server does not serve a type watched with
    /// [`for_`](ControllerBuilder::for_), [`owns`](Self::owns) or
    /// [`watches_kind`](Self::watches_kind) (a CRD not installed), [`Error::Controller`]
    /// for a duplicate or empty name, [`Error::Sharding`] for a ring's invalid Lease
    /// timings. Nothing is left behind by a failure.
    pub async fn complete<R: Reconciler>(self, reconciler: R) -> Result<Controller<R>>
    where
        K: CompleteAfterFor,
    {
        self.finish(|_| reconciler, false).await
    }

    /// [`complete`](Self::complete) with a reconciler made from the controller's [`Tools`]:
    /// the manager's client and cache, and an event recorder reporting as the controller.
    ///
    /// # Errors
    ///
    /// As [`complete`](Self::complete). `make` is called once the API server is known to
    /// serve every watched type, before the name is checked.
    ///
    /// Records the permission to create and patch Events about the primary type where it
    /// lives (the tools' event recorder).
    pub async fn complete_with<R: Reconciler>(
        self,
        make: impl FnOnce(Tools) -> R,
    ) -> Result<Controller<R>>
    where
        K: CompleteWithAfterFor,
    {
        self.finish(make, true).await
    }

    async fn finish<R: Reconciler>(
        self,
        make: impl FnOnce(Tools) -> R,
        events: bool,
    ) -> Result<Controller<R>>
    where
        K: Typed,
    {
        let manager = self.manager;
        let client = manager.client().clone();
        let mut declaration = self.declaration;
        // A manager that only renders manifests has no API server to ask.
        if !manager.is_render_only() {
            for gvk in &declaration.served {
                served(&client, gvk).await?;
            }
        }
        if events {
            declaration = declaration.permissions(Permissions::new().events_about::<K>());
        }
        if let Some(config) = &self.sharding {
            declaration = declaration.permissions(config.permissions());
            if config.mode() == ShardMode::Labels {
                // The holder of a shard writes its label on the objects that lack it.
                declaration = declaration.permissions(Permissions::new().verbs::<K>([Verb::Patch]));
            }
        }
        let ring = self
            .sharding
            .map(|config| Ring::new(client.clone(), config))
            .transpose()
            .map_err(Error::Sharding)?;
        let name = declaration.name();
        let reconciler = make(Tools::new(manager, &name));
        let controller = Controller::builder(name, reconciler)
            .options(declaration.options.clone())
            .build()
            .map_err(Error::Controller)?;
        let echoes: Echoes = controller
            .filters_own_echoes()
            .then(|| controller.write_observer())
            .flatten()
            .map(|observer| (Arc::clone(manager.cache().writes()), observer));
        let global = MetaPredicates::new(declaration.global.clone());
        let site = Site {
            place: manager,
            global: &global,
            echoes: &echoes,
        };
        let labelled = ring
            .as_ref()
            .filter(|ring| ring.config().mode() == ShardMode::Labels);
        let (primary, shard_keys) = match labelled {
            Some(ring) => {
                let (source, keys) =
                    rudder_lease::sharding::labels::source::<K>(manager.cache(), &client, ring);
                (declaration.primary_spec(source, &site), Some(keys))
            }
            None => (
                declaration.primary_spec(Kind::<K>::from_cache(manager.cache()), &site),
                None,
            ),
        };
        // Before `run`, adding a watch only records it.
        controller.add_watch(primary).map_err(Error::Watch)?;
        for watch in declaration.watches {
            let spec = match watch {
                Declared::Each(make) => make(&site),
                Declared::Once(make) => make(&site),
            };
            controller.add_watch(spec).map_err(Error::Watch)?;
        }
        if let Some(mut ring) = ring {
            if controller.write_observer().is_some() {
                ring.set_fence(fence(&controller, &ring, manager.cache()));
            }
            let cache = manager.cache().clone();
            let keys: KeyLister = shard_keys.unwrap_or_else(|| {
                Arc::new(move || {
                    cache
                        .scopes::<K>()
                        .iter()
                        .filter_map(|scope| cache.informer::<K>(scope).ok())
                        .flat_map(|informer| informer.store().list())
                        .filter_map(|object| Request::from_object(&*object))
                        .collect()
                })
            });
            controller
                .set_shard_gate(ring.gate(), keys)
                .map_err(Error::Watch)?;
            manager.add(ring);
        }
        manager.record_permissions(&declaration.permissions);
        manager.add_controller(controller.clone());
        Ok(controller)
    }
}

impl<K> ControllerBuilder<'_, K> {
    /// Hands the declaration to `declare`: every method the fleet's builder shares goes
    /// through here.
    fn declare(
        mut self,
        declare: impl FnOnce(Declaration<K, Manager>) -> Declaration<K, Manager>,
    ) -> Self {
        self.declaration = declare(self.declaration);
        self
    }
}

/// The shard fence of a sharded controller that reads its own writes: as a shard is released
/// its recent writes of the shard's keys go with it; as one is taken, the previous owner's
/// become writes the controller waits for its cache to reach.
fn fence<R: Reconciler>(
    controller: &Controller<R>,
    ring: &Ring,
    cache: &rudder_cache::Cache,
) -> Fence {
    let gate = ring.gate();
    let exporting = controller.clone();
    let importing = controller.clone();
    let cache = cache.clone();
    Fence {
        export: Arc::new(move |shard| exporting.recent_writes(|key| gate.shard_of(key) == shard)),
        import: Arc::new(move |_shard, writes| {
            importing.expect_writes(&writes, |scope, write| {
                let written = Written::Version {
                    resource_version: write.resource_version.clone(),
                    uid: None,
                };
                cache
                    .writes()
                    .record(write.object.clone(), written, scope, || {
                        cache.cached_ref(&write.object)
                    });
            });
        }),
    }
}

/// Whether the API server serves the kind `gvk`, by discovery.
async fn served(client: &Client, gvk: &GroupVersionKind) -> Result<()> {
    kube::discovery::pinned_kind(client, gvk)
        .await
        .map(|_| ())
        .map_err(|source| Error::NotServed {
            kind: format!("{}/{} {}", gvk.group, gvk.version, gvk.kind),
            source,
        })
}
