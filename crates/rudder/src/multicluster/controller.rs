//! [`FleetControllerBuilder`]: a controller declared once and run in every member cluster.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use rudder_cache::{Typed, WriteTracker};
use rudder_controller::{Controller, LeaderGate, Options, Reconciler, WatchSpec};
use rudder_core::backoff::Backoff;
use rudder_core::writes::WriteObserver;
use rudder_core::{Event, Shutdown, Synced};
use rudder_handler::{DropOwnEchoes, EnqueueObject, EnqueueOwner, EventHandler, Kind, Predicate};
use tokio::sync::watch;

use super::cluster::Cluster;
use super::error::FleetError;
use super::fleet::{Fleet, Recipe, Running};
use super::metrics::CONTROLLER_RESTARTS_TOTAL;
use crate::{Result, Tools};

/// Own echoes to drop: the cluster's write tracker and the controller's observer.
type Echoes = Option<(Arc<WriteTracker>, Arc<dyn WriteObserver>)>;

/// One watch, made again for each cluster.
type WatchFactory = Arc<dyn Fn(&Cluster, &Echoes) -> WatchSpec + Send + Sync>;

/// Options, made again for each cluster (each has its own rate limiter).
type OptionsFactory = Arc<dyn Fn() -> Options + Send + Sync>;

type ClusterFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// A predicate shared by the watches of every cluster.
struct Shared<P: ?Sized>(Arc<P>);

impl<K, P: Predicate<K> + ?Sized> Predicate<K> for Shared<P> {
    fn filter(&self, event: &Event<K>) -> bool {
        self.0.filter(event)
    }
}

/// Declares a controller of a [`Fleet`]: it runs once in every member cluster it serves,
/// each instance with its own queue, workers and rate limiter, watching that cluster's
/// cache, its reconciler made for that cluster ([`Tools::cluster`], [`Tools::client`] on that
/// cluster; Events to the home cluster unless
/// [`FleetBuilder::events_in_members`](super::FleetBuilder::events_in_members)) and its reconciles' [`Context::cluster`](crate::Context::cluster) naming it.
/// Start with [`Fleet::new_controller`].
pub struct FleetControllerBuilder<'f, K> {
    fleet: &'f Fleet,
    name: Option<String>,
    watches: Vec<WatchFactory>,
    options: OptionsFactory,
    filter: Option<ClusterFilter>,
    _primary: PhantomData<fn() -> K>,
}

impl<K> std::fmt::Debug for FleetControllerBuilder<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetControllerBuilder")
            .field("name", &self.name)
            .field("watches", &self.watches.len())
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
            name: None,
            watches: Vec::new(),
            options: Arc::new(Options::default),
            filter: None,
            _primary: PhantomData,
        }
    }
}

impl<'f> FleetControllerBuilder<'f, ()> {
    /// The primary type: its objects are reconciled, each event queueing the object itself.
    pub fn for_<K: Typed>(self) -> FleetControllerBuilder<'f, K> {
        self.primary::<K>(None)
    }

    /// [`for_`](Self::for_) with a predicate on the primary type's events (shared by the
    /// watches of every cluster).
    pub fn for_with<K: Typed>(
        self,
        predicate: impl Predicate<K> + 'static,
    ) -> FleetControllerBuilder<'f, K> {
        self.primary::<K>(Some(Arc::new(predicate)))
    }

    fn primary<K: Typed>(
        self,
        predicate: Option<Arc<dyn Predicate<K>>>,
    ) -> FleetControllerBuilder<'f, K> {
        let mut builder = FleetControllerBuilder {
            fleet: self.fleet,
            name: self.name,
            watches: self.watches,
            options: self.options,
            filter: self.filter,
            _primary: PhantomData,
        };
        builder
            .watches
            .push(kind_watch::<K, _>(|| EnqueueObject, predicate));
        builder
    }
}

impl<K: Typed> FleetControllerBuilder<'_, K> {
    /// Objects of type `O` that the primary type owns (controller owner reference), in the
    /// same cluster: their events queue their owner.
    #[must_use]
    pub fn owns<O: Typed>(mut self) -> Self {
        self.watches
            .push(kind_watch::<O, _>(EnqueueOwner::<K>::new, None));
        self
    }

    /// [`owns`](Self::owns) with a predicate on the owned type's events.
    #[must_use]
    pub fn owns_with<O: Typed>(mut self, predicate: impl Predicate<O> + 'static) -> Self {
        self.watches.push(kind_watch::<O, _>(
            EnqueueOwner::<K>::new,
            Some(Arc::new(predicate)),
        ));
        self
    }

    /// Watches `T` in each cluster's cache through a handler `handler` makes (one per
    /// cluster).
    #[must_use]
    pub fn watches_kind<T: Typed, H: EventHandler<T> + 'static>(
        mut self,
        handler: impl Fn() -> H + Send + Sync + 'static,
    ) -> Self {
        self.watches.push(kind_watch::<T, _>(handler, None));
        self
    }

    /// The controller's name (default: the primary kind in lower case); unique in the
    /// fleet. Each cluster's instance has this name with the cluster in its metrics' and
    /// logs' `cluster` label.
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How each cluster's instance runs: `options` is called once per cluster (each instance
    /// has its own rate limiter); workers are per cluster, so a slow cluster never takes
    /// another's.
    #[must_use]
    pub fn with_options(mut self, options: impl Fn() -> Options + Send + Sync + 'static) -> Self {
        self.options = Arc::new(options);
        self
    }

    /// Runs only in the clusters whose name `serves` accepts (default: all).
    #[must_use]
    pub fn clusters(mut self, serves: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.filter = Some(Arc::new(serves));
        self
    }

    /// Adds the controller to the fleet, each cluster's reconciler made by `make` from that
    /// cluster's [`Tools`] (its typed client and cache; Events go to the home cluster).
    ///
    /// # Errors
    ///
    /// [`Error::Fleet`](crate::Error::Fleet) ([`FleetError::DuplicateController`]) if the
    /// fleet has a controller of that name.
    pub fn complete_with<R: Reconciler>(
        self,
        make: impl Fn(Tools) -> R + Send + Sync + 'static,
    ) -> Result<()> {
        let name = self.name.unwrap_or_else(|| K::kind(&()).to_lowercase());
        self.fleet.add_recipe(Arc::new(ControllerRecipe {
            name,
            filter: self.filter,
            watches: self.watches,
            options: self.options,
            make: Arc::new(make),
            home: self.fleet.home().clone(),
            events_in_members: self.fleet.events_in_members(),
        }))
    }
}

/// A watch of `T` in a cluster's cache, with the handler `handler` makes and `predicate`.
fn kind_watch<T: Typed, H: EventHandler<T> + 'static>(
    handler: impl Fn() -> H + Send + Sync + 'static,
    predicate: Option<Arc<dyn Predicate<T>>>,
) -> WatchFactory {
    Arc::new(move |cluster: &Cluster, echoes: &Echoes| {
        let mut predicates: Vec<Box<dyn Predicate<T>>> = Vec::with_capacity(2);
        if let Some((tracker, observer)) = echoes {
            predicates.push(Box::new(DropOwnEchoes::<T>::new(
                Arc::clone(tracker),
                Arc::clone(observer),
            )));
        }
        if let Some(predicate) = &predicate {
            predicates.push(Box::new(Shared(Arc::clone(predicate))));
        }
        WatchSpec::new(
            Kind::<T>::from_cache(cluster.cache()),
            handler(),
            predicates,
        )
    })
}

struct ControllerRecipe<R> {
    name: String,
    filter: Option<ClusterFilter>,
    watches: Vec<WatchFactory>,
    options: OptionsFactory,
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
            options: Arc::clone(&self.options),
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
    watches: Vec<WatchFactory>,
    options: OptionsFactory,
    make: Arc<dyn Fn(Tools) -> R + Send + Sync>,
    /// Where its Events are recorded.
    events: kube::Client,
    gate: LeaderGate,
    /// On once the instance of the moment synced.
    synced: Arc<watch::Sender<bool>>,
}

impl<R: Reconciler> Instance<R> {
    fn build(&self) -> Result<Controller<R>, FleetError> {
        let options = (self.options)()
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
        for watch in &self.watches {
            controller
                .add_watch(watch(&self.cluster, &echoes))
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
                        Err(error) => rudder_core::ErrorChain(&error).to_string(),
                    }
                }
                Err(error) => rudder_core::ErrorChain(&error).to_string(),
            };
            if shutdown.is_stopped() {
                return;
            }
            let wait = backoff.next_delay();
            tracing::warn!(
                cluster = %cluster,
                controller = %self.name,
                error = %error,
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
