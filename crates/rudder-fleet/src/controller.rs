//! [`FleetControllerBuilder`]: a controller declared once and run in every member cluster.
//!
//! Its declaration is the single-cluster builder's (rudder-builder's `Declaration`): the
//! methods the two share delegate to one record, and check their call order with the same
//! marker traits.

use std::sync::Arc;
use std::time::Duration;

use kube::Resource;
use rudder_cache::Typed;
use rudder_controller::{Controller, Options};
use rudder_core::EventHandler;
use rudder_core::LeaderGate;
use rudder_core::MetaPredicate;
use rudder_core::MetaPredicates;
use rudder_core::Predicate;
use rudder_core::Reconciler;
use rudder_core::Source;
use rudder_core::backoff::Backoff;
use rudder_core::{Shutdown, Synced};
use rudder_manager::rbac::{Permissions, Verb};
use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::fleet::{Fleet, Recipe, Running};
use crate::metrics::CONTROLLER_RESTARTS_TOTAL;
use rudder_builder::declaration::{Declaration, Echoes, Site, Watch};
use rudder_builder::order::{
    CompleteWithAfterFor, EventFilterAfterFor, ForOnce, NamedAfterFor, OwnsAfterFor,
    OwnsWithAfterFor, OwnsWritesAfterFor, PermissionsAfterFor, ReadsAfterFor, WatchesAfterFor,
    WatchesKindAfterFor, WatchesKindWithAfterFor, WatchesWithAfterFor, WithOptionsAfterFor,
};
use rudder_builder::{Error, FleetError, Result, Tools};

type ClusterFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Declares a controller of a [`Fleet`]: it runs once in every member cluster it serves,
/// each instance with its own queue, workers and rate limiter, watching that cluster's
/// cache, its reconciler made for that cluster ([`Tools::cluster`], [`Tools::client`] on that
/// cluster; Events to the home cluster unless
/// [`FleetBuilder::events_in_members`](crate::FleetBuilder::events_in_members)) and its
/// reconciles' [`Context::cluster`](rudder_core::Context::cluster) naming it.
/// Start with [`Fleet::new_controller`].
///
/// # One declaration
///
/// Its methods are `rudder::ControllerBuilder`'s, delegating to the same
/// record, so a controller is declared the same way for one cluster or a fleet: `for_`,
/// `for_with`, `owns`, `owns_with`, `owns_writes`, `watches_kind`, `watches_kind_with`,
/// `watches`, `watches_with`, `reads`, `permissions`, `event_filter`, `named`,
/// `with_options`, with the same call order checked by the compiler. What differs is what
/// a fleet cannot share between members:
///
/// - [`watches`](Self::watches) takes a function that makes the source for each member (a
///   source is consumed as it starts, and reads from one cluster), where the single-cluster
///   builder takes the source;
/// - [`with_options`](Self::with_options) takes the same [`Options`], cloned for each
///   instance; a rate limiter in them must be made per instance
///   ([`Options::rate_limiter_with`]), or `complete_with` refuses it;
/// - handlers and predicates are shared by the instances (they take `&self`, and the queue
///   they feed is handed to them);
/// - there is no `sharded` (a fleet shards its clusters: [`FleetBuilder::sharded`](crate::FleetBuilder::sharded))
///   and no `watches_raw`; [`clusters`](Self::clusters) chooses the members served.
///
/// # Permissions
///
/// The builder records what each instance needs in its member as the single-cluster
/// builder does (list and watch on every watched or read type, what `owns` writes, what
/// `permissions` declares, Events about the primary), and [`complete_with`](Self::complete_with)
/// records them on the manager, placed where a member's cache watches (the fleet's
/// [`cache`](crate::FleetBuilder::cache) options): they are in
/// [`Manager::permissions`](rudder_manager::Manager::permissions) and so in the rendered
/// Role or ClusterRole (`rudder::manifests`). That is the role to bind, in each
/// member, to the identity its kubeconfig names; in the home cluster it also covers the
/// Events, which go there by default. Unlike the single-cluster builder, `complete_with`
/// cannot check that the API server serves each type (members are not known yet): an
/// instance whose member lacks one stays unsynced until `Options::cache_sync_timeout`, and
/// is started again with backoff.
pub struct FleetControllerBuilder<'f, K> {
    fleet: &'f Fleet,
    declaration: Declaration<K, Cluster>,
    filter: Option<ClusterFilter>,
}

impl<K> std::fmt::Debug for FleetControllerBuilder<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetControllerBuilder")
            .field("declaration", &self.declaration)
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// Declares a controller that runs in every member cluster (or those chosen with
    /// [`clusters`](FleetControllerBuilder::clusters)); call
    /// [`for_`](FleetControllerBuilder::for_) first. Declaring has no side effects: nothing
    /// runs until the fleet engages a cluster.
    pub fn new_controller(&self) -> FleetControllerBuilder<'_, ()> {
        FleetControllerBuilder {
            fleet: self,
            declaration: Declaration::new(),
            filter: None,
        }
    }
}

impl<'f, K> FleetControllerBuilder<'f, K> {
    /// The primary type: its objects are reconciled, each event queueing the object itself.
    /// Records list and watch on `P`.
    pub fn for_<P: Typed>(self) -> FleetControllerBuilder<'f, P>
    where
        K: ForOnce,
    {
        self.primary(None)
    }

    /// [`for_`](Self::for_) with a predicate on the primary type's events (shared by the
    /// watches of every cluster).
    pub fn for_with<P: Typed>(
        self,
        predicate: impl Predicate<P> + 'static,
    ) -> FleetControllerBuilder<'f, P>
    where
        K: ForOnce,
    {
        self.primary(Some(Arc::new(predicate)))
    }

    fn primary<P: Typed>(
        self,
        predicate: Option<Arc<dyn Predicate<P>>>,
    ) -> FleetControllerBuilder<'f, P> {
        FleetControllerBuilder {
            fleet: self.fleet,
            declaration: self.declaration.for_(predicate),
            filter: self.filter,
        }
    }
}

// The same marker traits as `ControllerBuilder`'s (rudder-builder's `order`): a call before
// `for_` fails to compile with the fix as its message.
impl<K> FleetControllerBuilder<'_, K> {
    /// Objects of type `O` that the primary type owns (controller owner reference), in the
    /// same cluster: their events queue their owner. Records what
    /// `rudder::ControllerBuilder::owns` records.
    #[must_use]
    pub fn owns<O: Typed>(self) -> Self
    where
        K: OwnsAfterFor,
    {
        self.declare(|d| d.owns::<O>(Verb::CREATE_OR_PATCH, None))
    }

    /// [`owns`](Self::owns) with a predicate on the owned type's events.
    #[must_use]
    pub fn owns_with<O: Typed>(self, predicate: impl Predicate<O> + 'static) -> Self
    where
        K: OwnsWithAfterFor,
    {
        self.declare(|d| d.owns::<O>(Verb::CREATE_OR_PATCH, Some(Arc::new(predicate))))
    }

    /// [`owns`](Self::owns), the reconciler writing `O` with exactly `writes`
    /// (`rudder::ControllerBuilder::owns_writes`).
    #[must_use]
    pub fn owns_writes<O: Typed>(self, writes: impl IntoIterator<Item = Verb>) -> Self
    where
        K: OwnsWritesAfterFor,
    {
        self.declare(|d| d.owns::<O>(writes, None))
    }

    /// A type the reconciler reads through the client without its events queueing anything
    /// (`rudder::ControllerBuilder::reads`): its informer starts
    /// with each instance, in its member.
    #[must_use]
    pub fn reads<T: Typed>(self) -> Self
    where
        K: ReadsAfterFor,
    {
        self.declare(Declaration::reads::<T>)
    }

    /// Permissions each instance needs in its member beyond what the builder sees
    /// (`rudder::ControllerBuilder::permissions`); recorded
    /// on the manager by [`complete_with`](Self::complete_with).
    #[must_use]
    pub fn permissions(self, permissions: Permissions) -> Self
    where
        K: PermissionsAfterFor,
    {
        self.declare(|d| d.permissions(permissions))
    }

    /// Watches `T` in each cluster's cache through `handler`, shared by the instances.
    /// Records list and watch on `T`.
    #[must_use]
    pub fn watches_kind<T, H>(self, handler: H) -> Self
    where
        K: WatchesKindAfterFor,
        T: Typed,
        H: EventHandler<T> + 'static,
    {
        self.declare(|d| d.watch_kind::<T, H>(handler, None))
    }

    /// [`watches_kind`](Self::watches_kind) with a predicate on `T`'s events.
    #[must_use]
    pub fn watches_kind_with<T, H>(self, handler: H, predicate: impl Predicate<T> + 'static) -> Self
    where
        K: WatchesKindWithAfterFor,
        T: Typed,
        H: EventHandler<T> + 'static,
    {
        self.declare(|d| d.watch_kind::<T, H>(handler, Some(Arc::new(predicate))))
    }

    /// Any other source of objects, made for each member by `source` (a [`Kind`](rudder_handler::Kind) on the
    /// member's cache in a scope of your choosing, a channel per member), through
    /// `handler` (shared by the instances); the global predicates apply to it. A source is
    /// consumed as it starts and reads from one cluster, so each instance needs its own:
    /// `source` is called each time an instance is built in a member (again after a
    /// restart). As with `rudder::ControllerBuilder::watches`,
    /// declare what the source reads with [`permissions`](Self::permissions).
    ///
    /// ```no_run
    /// # use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    /// # use rudder::multicluster::Fleet;
    /// # use rudder::handler::EnqueueMapped;
    /// # use rudder::prelude::*;
    /// # use rudder::manager::rbac::Permissions;
    /// # struct R;
    /// # impl Reconciler for R {
    /// #     type Error = std::convert::Infallible;
    /// #     async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> { Ok(Action::done()) }
    /// # }
    /// # fn demo(fleet: &Fleet) -> rudder::Result<()> {
    /// fleet
    ///     .new_controller()
    ///     .for_::<ConfigMap>()
    ///     // Each member's Secrets queue the ConfigMap of the same name there.
    ///     .watches(
    ///         |cluster| Kind::<Secret>::from_cache(cluster.cache()),
    ///         EnqueueMapped(|secret: &Secret| Request::from_object(secret).into_iter().collect()),
    ///     )
    ///     .permissions(Permissions::new().informer::<Secret>())
    ///     .complete_with(|_| R)?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn watches<T, S, H>(
        self,
        source: impl Fn(&Cluster) -> S + Send + Sync + 'static,
        handler: H,
    ) -> Self
    where
        K: WatchesAfterFor,
        T: Resource + Send + Sync + 'static,
        S: Source<T>,
        H: EventHandler<T> + 'static,
    {
        self.declare(|d| d.watches_each(source, handler, None))
    }

    /// [`watches`](Self::watches) with a predicate on the source's events (after the global
    /// ones).
    #[must_use]
    pub fn watches_with<T, S, H>(
        self,
        source: impl Fn(&Cluster) -> S + Send + Sync + 'static,
        handler: H,
        predicate: impl Predicate<T> + 'static,
    ) -> Self
    where
        K: WatchesWithAfterFor,
        T: Resource + Send + Sync + 'static,
        S: Source<T>,
        H: EventHandler<T> + 'static,
    {
        self.declare(|d| d.watches_each(source, handler, Some(Arc::new(predicate))))
    }

    /// A predicate for every watch of every instance, before each watch's own
    /// (`rudder::ControllerBuilder::event_filter`).
    #[must_use]
    pub fn event_filter(self, predicate: impl MetaPredicate + 'static) -> Self
    where
        K: EventFilterAfterFor,
    {
        self.declare(|d| d.event_filter(predicate))
    }

    /// The controller's name (default: the primary kind in lower case); unique in the
    /// fleet. Each cluster's instance has this name with the cluster in its metrics' and
    /// logs' `cluster` label.
    #[must_use]
    pub fn named(self, name: impl Into<String>) -> Self
    where
        K: NamedAfterFor,
    {
        self.declare(|d| d.named(name))
    }

    /// How each cluster's instance runs: each gets a clone of `options`, with workers of its
    /// own, so a slow cluster never takes another's. A rate limiter must be one per
    /// instance: give it with [`Options::rate_limiter_with`] (one given with
    /// [`Options::rate_limiter`] would be shared by every member's instance, its keys' backoff
    /// mixed across clusters, and is refused by [`complete_with`](Self::complete_with)).
    #[must_use]
    pub fn with_options(self, options: Options) -> Self
    where
        K: WithOptionsAfterFor,
    {
        self.declare(|d| d.with_options(options))
    }

    /// Runs only in the clusters whose name `serves` accepts (default: all).
    #[must_use]
    pub fn clusters(mut self, serves: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.filter = Some(Arc::new(serves));
        self
    }

    /// Hands the declaration to `declare`: every method shared with the single-cluster
    /// builder goes through here.
    fn declare(
        mut self,
        declare: impl FnOnce(Declaration<K, Cluster>) -> Declaration<K, Cluster>,
    ) -> Self {
        self.declaration = declare(self.declaration);
        self
    }

    /// Adds the controller to the fleet, each cluster's reconciler made by `make` from that
    /// cluster's [`Tools`] (its typed client and cache; Events go to the home cluster
    /// unless [`FleetBuilder::events_in_members`](crate::FleetBuilder::events_in_members)),
    /// and records its permissions on the manager (see [Permissions](Self#permissions)),
    /// with create and patch on Events about the primary type for the tools' recorder.
    ///
    /// # Errors
    ///
    /// [`Error::Fleet`](rudder_builder::Error::Fleet): [`FleetError::DuplicateController`] if the
    /// fleet has a controller of that name, [`FleetError::SharedRateLimiter`] if the options
    /// carry one rate limiter for every instance. Nothing is recorded by a failure.
    pub fn complete_with<R: Reconciler>(
        self,
        make: impl Fn(Tools) -> R + Send + Sync + 'static,
    ) -> Result<()>
    where
        K: CompleteWithAfterFor,
    {
        let mut declaration = self
            .declaration
            .permissions(Permissions::new().events_about::<K>());
        if declaration.options.shares_rate_limiter() {
            return Err(Error::Fleet(FleetError::SharedRateLimiter));
        }
        let recipe = ControllerRecipe {
            name: declaration.name(),
            filter: self.filter,
            watches: declaration.per_member(),
            global: MetaPredicates::new(declaration.global.clone()),
            options: declaration.options.clone(),
            make: Arc::new(make),
            home: self.fleet.home().clone(),
            events_in_members: self.fleet.events_in_members(),
        };
        self.fleet.add_recipe(Arc::new(recipe))?;
        self.fleet.record_permissions(&declaration.permissions);
        Ok(())
    }
}

struct ControllerRecipe<R> {
    name: String,
    filter: Option<ClusterFilter>,
    watches: Vec<Watch<Cluster>>,
    /// The `event_filter` predicates.
    global: MetaPredicates,
    options: Options,
    make: Arc<dyn Fn(Tools) -> R + Send + Sync>,
    home: kube::Client,
    events_in_members: bool,
}

impl<R: Reconciler> Recipe for ControllerRecipe<R> {
    fn name(&self) -> &str {
        &self.name
    }

    fn serves(&self, cluster: &str) -> bool {
        self.filter.as_ref().is_none_or(|serves| serves(cluster))
    }

    fn start(&self, cluster: &Cluster, gate: LeaderGate) -> Running {
        let shutdown = Shutdown::new();
        // On while the instance of the moment has synced; off while it is (re)built.
        let synced = Arc::new(watch::Sender::new(false));
        let instance = Instance {
            name: self.name.clone(),
            cluster: cluster.clone(),
            watches: self.watches.clone(),
            global: self.global.clone(),
            options: self.options.clone(),
            make: Arc::clone(&self.make),
            events: if self.events_in_members {
                cluster.kube().clone()
            } else {
                self.home.clone()
            },
            gate,
            synced: Arc::clone(&synced),
        };
        let run = Box::pin(instance.supervise(shutdown.clone()));
        let is_synced = Arc::clone(&synced);
        Running {
            shutdown,
            run,
            synced: Synced::from_fn(
                move || *is_synced.borrow(),
                move || {
                    let mut on = synced.subscribe();
                    Box::pin(async move {
                        // The sender lives in this closure, so the channel stays open.
                        let _ = on.wait_for(|synced| *synced).await;
                    })
                },
            ),
        }
    }
}

/// One controller in one cluster, made again after it ends with an error.
struct Instance<R> {
    name: String,
    cluster: Cluster,
    watches: Vec<Watch<Cluster>>,
    global: MetaPredicates,
    options: Options,
    make: Arc<dyn Fn(Tools) -> R + Send + Sync>,
    /// Where its Events are recorded.
    events: kube::Client,
    gate: LeaderGate,
    /// On once the instance of the moment synced.
    synced: Arc<watch::Sender<bool>>,
}

impl<R: Reconciler> Instance<R> {
    fn build(&self) -> Result<Controller<R>, FleetError> {
        let options = self
            .options
            .clone()
            .cluster(self.cluster.name_arc())
            // The fleet keeps names unique; an instance being replaced may still hold its
            // name a moment after the new one is built.
            .skip_name_validation();
        let tools = Tools::for_cluster(&self.cluster, &self.events, &self.name);
        let controller = Controller::builder(self.name.clone(), (self.make)(tools))
            .options(options)
            .build()
            .map_err(FleetError::Build)?;
        controller
            .set_leader_gate(self.gate.clone())
            .map_err(FleetError::Setup)?;
        let echoes: Echoes = controller
            .filters_own_echoes()
            .then(|| controller.write_observer())
            .flatten()
            .map(|observer| (Arc::clone(self.cluster.cache().writes()), observer));
        let site = Site {
            place: &self.cluster,
            global: &self.global,
            echoes: &echoes,
        };
        for watch in &self.watches {
            controller
                .add_watch(watch(&site))
                .map_err(FleetError::Setup)?;
        }
        Ok(controller)
    }

    async fn supervise(self, shutdown: Shutdown) {
        let cluster = self.cluster.name().to_owned();
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        loop {
            let error = match self.build() {
                Ok(controller) => {
                    let synced = controller.synced();
                    let run = controller.run_until(shutdown.clone());
                    let mut run = std::pin::pin!(run);
                    let ran = tokio::select! {
                        ran = &mut run => ran,
                        () = synced.wait() => {
                            self.synced.send_replace(true);
                            run.await
                        }
                    };
                    self.synced.send_replace(false);
                    match ran {
                        Ok(()) => return,
                        Err(error) => FleetError::Run(error),
                    }
                }
                Err(error) => error,
            };
            if shutdown.is_stopped() {
                return;
            }
            let wait = backoff.next_delay();
            tracing::warn!(
                cluster = %cluster,
                controller = %self.name,
                error = %rudder_core::ErrorChain(&error),
                retry_in_ms = wait.as_millis() as u64,
                "a member cluster's controller ended; starting it again"
            );
            metrics::counter!(
                CONTROLLER_RESTARTS_TOTAL,
                "cluster" => cluster.clone(),
                "controller" => self.name.clone()
            )
            .increment(1);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = shutdown.stopped() => return,
            }
        }
    }
}
