//! [`Fleet`]: member clusters engaged and disengaged as providers announce them, and the
//! controllers that serve each one.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rudder_cache::{Cache, CacheBuilder};
use rudder_client::layers::{self, ObserveLayer, host_of};
use rudder_controller::ShardPermit;
use rudder_core::LeaderGate;
use rudder_core::Request;
use rudder_core::Runnable;
use rudder_core::backoff::Backoff;
use rudder_core::sync::LockExt;
use rudder_core::{BoxError, Shutdown, Synced};
use rudder_lease::sharding::{Ring, ShardingConfig};
use rudder_manager::{GracefulShutdown, Manager};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;

use crate::cluster::{Cluster, Health};
use crate::decide::{self, Action, Inputs, Shards};
use crate::metrics::{self, CLUSTER_ENGAGED, CLUSTER_SYNCED, CLUSTERS_ENGAGED, ENGAGE_SECONDS};
use crate::provider::{Announcement, Announcer, Provider};
use rudder_builder::{Error, FleetError, Result};

/// How a member cluster's cache is built from its client (the fleet's default: a cache of
/// every namespace, as the manager's).
type CacheOptions = Arc<dyn Fn(CacheBuilder) -> CacheBuilder + Send + Sync>;

/// A controller of the fleet, started once in each cluster it serves.
pub(crate) trait Recipe: Send + Sync + 'static {
    /// The controller's name.
    fn name(&self) -> &str;
    /// Whether it serves the cluster `cluster`.
    fn serves(&self, cluster: &str) -> bool;
    /// Starts it in `cluster`, its workers gated by `gate`, until the returned
    /// [`Running::shutdown`] fires.
    fn start(&self, cluster: &Cluster, gate: LeaderGate) -> Running;
}

/// One controller started in one cluster: the engine spawns `run` into the cluster's
/// engagement, which joins it when the cluster is disengaged.
pub(crate) struct Running {
    pub(crate) shutdown: Shutdown,
    /// Runs the controller (made again after an error) until `shutdown` fires.
    pub(crate) run: BoxFuture<'static, ()>,
    /// Whether its sources have synced (the controller of the moment, across restarts).
    pub(crate) synced: Synced,
}

/// The members engaged on this replica, as the engine last published them.
type Members = Arc<BTreeMap<String, Member>>;

/// One engaged member in the published snapshot.
#[derive(Clone)]
struct Member {
    cluster: Cluster,
    /// Each of its controllers' sync signal.
    synced: Vec<Synced>,
}

/// A manager's member clusters: providers announce them, the fleet engages each (a client,
/// a cache and one instance of every multi-cluster controller for it) and disengages it when
/// its provider withdraws it, without touching the others. See the
/// [module docs](super) for the whole picture.
///
/// Cloning gives another handle on the same fleet.
#[derive(Clone)]
pub struct Fleet {
    inner: Arc<Inner>,
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("name", &self.inner.name)
            .field("engaged", &self.engaged())
            .finish_non_exhaustive()
    }
}

struct Inner {
    name: String,
    home: kube::Client,
    cache_options: Option<CacheOptions>,
    probe_every: Duration,
    probe_timeout: Duration,
    events_in_members: bool,
    /// How long a disengaged cluster's controllers get to finish their reconciles.
    disengage_grace: Option<Duration>,
    recipes: Mutex<Vec<Arc<dyn Recipe>>>,
    /// To the running fleet: a recipe added after start.
    added: mpsc::UnboundedSender<Arc<dyn Recipe>>,
    added_rx: Mutex<Option<mpsc::UnboundedReceiver<Arc<dyn Recipe>>>>,
    /// The clusters engaged now, written by the engine only (after each engagement and
    /// disengagement), read by [`Fleet::cluster`], [`Fleet::engaged`], [`Fleet::has_synced`]
    /// and the ring's key lister.
    members: watch::Sender<Members>,
    /// With sharding: the ring's gate (which shards, so which clusters, are held here).
    shards: Option<rudder_controller::ShardGate>,
    /// Where the controllers' permissions go: the manager's rendered RBAC.
    rules: rudder_manager::rbac::RulesRecorder,
}

/// Builds a [`Fleet`] on a manager: [`Fleet::builder`].
pub struct FleetBuilder<'m> {
    manager: &'m Manager,
    name: String,
    providers: Vec<Box<dyn Provider>>,
    sharding: Option<ShardingConfig>,
    cache_options: Option<CacheOptions>,
    probe_every: Duration,
    probe_timeout: Duration,
    events_in_members: bool,
}

/// How often an engaged cluster's API server is asked for its version by default.
pub const DEFAULT_PROBE_PERIOD: Duration = Duration::from_secs(10);

/// How long a probe waits for its answer by default ([`FleetBuilder::probe_timeout`]).
const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// At most this much of the time left when a cluster is disengaged is kept between its
/// controllers' deadline and the fleet's own: a controller still running at its deadline is
/// aborted then, and its abort joined and its cache stopped before the fleet's deadline, so
/// that the manager never has to abort the fleet to end its stop.
const JOIN_MARGIN: Duration = Duration::from_secs(1);

impl fmt::Debug for FleetBuilder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetBuilder")
            .field("name", &self.name)
            .field(
                "providers",
                &self.providers.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .field("sharding", &self.sharding)
            .finish_non_exhaustive()
    }
}

impl<'m> FleetBuilder<'m> {
    /// Adds a provider of member clusters (several may be given; a name announced by two
    /// is the one announced last).
    #[must_use]
    pub fn provider(mut self, provider: impl Provider) -> Self {
        self.providers.push(Box::new(provider));
        self
    }

    /// Adds the built-in [`KubeconfigSecrets`](crate::KubeconfigSecrets) provider, watching
    /// the manager's cluster unless it was given a client.
    #[must_use]
    pub fn kubeconfig_secrets(mut self, mut provider: crate::KubeconfigSecrets) -> Self {
        provider.resolve_client(self.manager.client());
        self.providers.push(Box::new(provider));
        self
    }

    /// Adds the built-in [`ClusterApiClusters`](crate::ClusterApiClusters) provider (Cluster
    /// API `Cluster`s and their kubeconfig Secrets), watching the manager's cluster unless it
    /// was given a client.
    #[must_use]
    pub fn cluster_api(mut self, mut provider: crate::ClusterApiClusters) -> Self {
        provider.resolve_client(self.manager.client());
        self.providers.push(Box::new(provider));
        self
    }

    /// Adds the built-in [`ClusterProfiles`](crate::ClusterProfiles) provider (Cluster
    /// Inventory API `ClusterProfile`s and their kubeconfig Secrets), watching the manager's
    /// cluster unless it was given a client.
    #[must_use]
    pub fn cluster_profiles(mut self, mut provider: crate::ClusterProfiles) -> Self {
        provider.resolve_client(self.manager.client());
        self.providers.push(Box::new(provider));
        self
    }

    /// The fleet's name (default `fleet`): its runnable is `fleet <name>`, and with
    /// [`sharded`](Self::sharded) the ring's Leases carry the ring's own name.
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Spreads the member clusters over the replicas of the operator with a ring of Leases
    /// in the home cluster (see `rudder::lease::sharding`): each cluster hashes to a shard, and a
    /// replica engages a cluster only while it holds that shard's Lease, with its
    /// controllers gated by that holding. A shard handed over is released only once the
    /// clusters it held here are disengaged (their reconciles ended), so no cluster is served
    /// by two replicas at once; a replica that stops renewing (dead, frozen) loses its shards
    /// when their Leases expire. Without it, the fleet runs on the leader only (when the
    /// manager has leader election) and engages every cluster.
    #[must_use]
    pub fn sharded(mut self, config: ShardingConfig) -> Self {
        self.sharding = Some(config);
        self
    }

    /// How each member cluster's cache is built (default namespaces, per-type options,
    /// resync); the default caches every namespace.
    #[must_use]
    pub fn cache(
        mut self,
        options: impl Fn(CacheBuilder) -> CacheBuilder + Send + Sync + 'static,
    ) -> Self {
        self.cache_options = Some(Arc::new(options));
        self
    }

    /// How often each engaged cluster's API server is probed (`GET /version`, default
    /// [`DEFAULT_PROBE_PERIOD`]; at least 100 ms). An idle cluster sends no request but its
    /// open watches, which stay open on the credentials they started with; the probe is what
    /// notices, within a period, a member that stopped answering or refuses revoked
    /// credentials (401), and one that answers again. A refused permission (403) shows on
    /// the next request that needs it.
    #[must_use]
    pub fn probe_every(mut self, period: Duration) -> Self {
        self.probe_every = period.max(Duration::from_millis(100));
        self
    }

    /// How long a probe ([`probe_every`](Self::probe_every)) waits for its answer (default
    /// 5 s; at least 100 ms). A probe not answered in time is a failure, as a refused
    /// connection is: the cluster is `Unreachable` and counted with `reason="unreachable"`.
    /// So an API server that accepts connections but no longer answers (a frozen process, a
    /// network that drops packets) is seen failing within a period plus this timeout.
    #[must_use]
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.probe_timeout = timeout.max(Duration::from_millis(100));
        self
    }

    /// Records the controllers' Events in the member cluster of the object they are about,
    /// instead of the home cluster (the default: a member's credentials may not allow it,
    /// and the object's namespace may not exist at home). The member's kubeconfig identity
    /// then needs `create` and `patch` on `events.k8s.io` Events there.
    #[must_use]
    pub fn events_in_members(mut self, on: bool) -> Self {
        self.events_in_members = on;
        self
    }

    /// Builds the fleet and adds it to the manager (and, when sharded, its ring). Nothing
    /// runs until the manager starts: providers are asked for clusters then.
    ///
    /// # Errors
    ///
    /// [`Error::Sharding`] for a ring's invalid Lease timings.
    pub fn build(self) -> Result<Fleet> {
        let home = self.manager.client().clone();
        let mut permissions = rudder_manager::rbac::Permissions::new();
        for provider in &self.providers {
            permissions = permissions.and(provider.permissions());
        }
        let ring = match self.sharding {
            Some(config) => {
                permissions = permissions.and(config.permissions());
                Some(Ring::new(home.clone(), config).map_err(Error::Sharding)?)
            }
            None => None,
        };
        let (added, added_rx) = mpsc::unbounded_channel();
        let disengage_grace = match self.manager.graceful_shutdown() {
            GracefulShutdown::After(grace) => Some(grace),
            GracefulShutdown::Immediately => Some(Duration::ZERO),
            GracefulShutdown::Forever => None,
        };
        let fleet = Fleet {
            inner: Arc::new(Inner {
                name: self.name,
                home,
                cache_options: self.cache_options,
                probe_every: self.probe_every,
                probe_timeout: self.probe_timeout,
                events_in_members: self.events_in_members,
                disengage_grace,
                recipes: Mutex::new(Vec::new()),
                added,
                added_rx: Mutex::new(Some(added_rx)),
                members: watch::Sender::new(Arc::default()),
                shards: ring.as_ref().map(Ring::gate),
                rules: self.manager.rules_recorder(),
            }),
        };
        self.manager.record_permissions(&permissions);
        let sharded = ring.is_some();
        if let Some(ring) = ring {
            // Weak: the gate is the fleet's too, and a strong handle would make a cycle.
            let lister = Arc::downgrade(&fleet.inner);
            ring.gate().set_key_lister(Arc::new(move || {
                lister.upgrade().map_or_else(Vec::new, |inner| {
                    Fleet { inner }
                        .engaged()
                        .iter()
                        .map(|name| Request::cluster(name))
                        .collect()
                })
            }));
            self.manager.add(ring);
        }
        self.manager.add(FleetRunnable {
            fleet: fleet.clone(),
            providers: self.providers.into_iter().map(Arc::from).collect(),
            sharded,
            gate: LeaderGate::always_open(),
        });
        Ok(fleet)
    }
}

impl Fleet {
    /// A fleet on `manager`: add providers, then [`build`](FleetBuilder::build) it.
    pub fn builder(manager: &Manager) -> FleetBuilder<'_> {
        FleetBuilder {
            manager,
            name: "fleet".to_owned(),
            providers: Vec::new(),
            sharding: None,
            cache_options: None,
            probe_every: DEFAULT_PROBE_PERIOD,
            probe_timeout: DEFAULT_PROBE_TIMEOUT,
            events_in_members: false,
        }
    }

    /// The fleet's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The home cluster's client (the manager's): where Leases and Events live.
    pub fn home(&self) -> &kube::Client {
        &self.inner.home
    }

    /// Whether Events are recorded in the members ([`FleetBuilder::events_in_members`]).
    pub(crate) fn events_in_members(&self) -> bool {
        self.inner.events_in_members
    }

    /// The names of the clusters engaged on this replica now, sorted.
    pub fn engaged(&self) -> Vec<String> {
        self.members().keys().cloned().collect()
    }

    /// The cluster `name`, if it is engaged on this replica.
    pub fn cluster(&self, name: &str) -> Option<Cluster> {
        self.members()
            .get(name)
            .map(|member| member.cluster.clone())
    }

    /// Whether every controller of the engaged cluster `name` has synced (`false` if it is
    /// not engaged here).
    pub fn has_synced(&self, name: &str) -> bool {
        self.members()
            .get(name)
            .is_some_and(|member| member.synced.iter().all(Synced::is_synced))
    }

    /// The engine's last published snapshot of the members.
    fn members(&self) -> Members {
        Arc::clone(&self.inner.members.borrow())
    }

    /// Adds a controller to run in every cluster it serves: before the fleet starts, or
    /// while it runs (then it starts at once in the clusters engaged).
    pub(crate) fn add_recipe(&self, recipe: Arc<dyn Recipe>) -> Result<()> {
        let mut recipes = self.inner.recipes.lock_unpoisoned();
        if recipes.iter().any(|r| r.name() == recipe.name()) {
            return Err(Error::Fleet(FleetError::DuplicateController {
                name: recipe.name().to_owned(),
            }));
        }
        recipes.push(Arc::clone(&recipe));
        drop(recipes);
        // Before start, the run loop finds it in `recipes`; the channel's receiver is
        // taken at start, and a recipe sent before then is skipped as already known.
        let _ = self.inner.added.send(recipe);
        Ok(())
    }

    /// Records `permissions` on the manager, placed where a member's cache watches (the
    /// [`cache`](FleetBuilder::cache) options): what a fleet controller's instance needs in
    /// its member, rendered with the manager's RBAC.
    pub(crate) fn record_permissions(&self, permissions: &rudder_manager::rbac::Permissions) {
        // A cache of a member's shape, never started: it only answers where types are read.
        let shape = self.cache_for(
            &Arc::from("shape"),
            self.inner.home.clone(),
            &tokio_util::sync::CancellationToken::new(),
        );
        self.inner.rules.record(&permissions.resolve(&shape));
    }

    fn client_for(
        &self,
        name: &Arc<str>,
        config: kube::Config,
    ) -> Result<(kube::Client, Arc<Health>), kube::Error> {
        let host = host_of(&config.cluster_url);
        let health = Health::new(Arc::clone(name));
        // Counting and health in the client's own stack: one request buffer, not one per
        // layer.
        let observe = ObserveLayer::new()
            .count_requests(&host)
            .observe_shared(Arc::clone(&health) as Arc<dyn layers::Observer>);
        let client = layers::build(config, &observe)?;
        Ok((client, health))
    }

    fn cache_for(
        &self,
        name: &Arc<str>,
        client: kube::Client,
        token: &tokio_util::sync::CancellationToken,
    ) -> Cache {
        let builder = Cache::builder(client).cluster(Arc::clone(name));
        let builder = match &self.inner.cache_options {
            Some(options) => options(builder),
            None => builder,
        };
        builder.build(token)
    }
}

/// The fleet's runnable: providers, engagement, disengagement.
struct FleetRunnable {
    fleet: Fleet,
    providers: Vec<Arc<dyn Provider>>,
    sharded: bool,
    gate: LeaderGate,
}

impl Runnable for FleetRunnable {
    fn name(&self) -> String {
        format!("fleet {}", self.fleet.inner.name)
    }

    fn needs_leader_election(&self) -> bool {
        // Sharded, every replica serves its own clusters; otherwise only the leader.
        !self.sharded
    }

    fn set_leader_gate(&mut self, gate: LeaderGate) -> bool {
        self.gate = gate;
        true
    }

    fn start(self: Box<Self>, shutdown: Shutdown) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move {
            let mut engine = Engine::new(*self);
            engine.run(shutdown).await;
            Ok(())
        })
    }
}

/// What a provider last said about a cluster.
struct Wanted {
    config: kube::Config,
    generation: u64,
    announced: Instant,
}

/// A cluster engaged here, and the tasks it owns: its controllers in `instances`, its
/// probe, the waiter that reports it synced and (sharded) the holder of its shard's permit
/// in `tasks`; its disengagement joins both.
struct Engagement {
    generation: u64,
    cluster: Cluster,
    /// Each controller's stop, and whether it synced.
    running: Vec<(Shutdown, Synced)>,
    instances: JoinSet<()>,
    tasks: JoinSet<()>,
    /// The names of the controllers in `running`.
    running_names: HashSet<String>,
    /// With sharding: dropping it lets the ring release the cluster's shard.
    release: Option<oneshot::Sender<()>>,
    gate: LeaderGate,
    announced: Instant,
    synced_once: bool,
}

impl Engagement {
    /// Starts `recipe` in the cluster: its controller's task is the engagement's.
    fn start(&mut self, recipe: &dyn Recipe) {
        let Running {
            shutdown,
            run,
            synced,
        } = recipe.start(&self.cluster, self.gate.clone());
        self.instances.spawn(run);
        self.running_names.insert(recipe.name().to_owned());
        self.running.push((shutdown, synced));
    }

    /// Its controllers' sync signals.
    fn synced(&self) -> Vec<Synced> {
        self.running
            .iter()
            .map(|(_, synced)| synced.clone())
            .collect()
    }

    /// Reports to the engine, through `tx`, once every controller started so far has
    /// synced (a task of the engagement, ended by its disengagement if that comes first).
    fn report_synced(&mut self, name: &str, tx: &mpsc::UnboundedSender<SyncedNow>) {
        let synced = self.synced();
        let stopped = self.cluster.stopped();
        let report = SyncedNow(name.to_owned(), self.generation);
        let tx = tx.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = futures::future::join_all(synced.iter().map(Synced::wait)) => {
                    let _ = tx.send(report);
                }
                () = stopped.cancelled() => {}
            }
        });
    }
}

/// The holding of a cluster's shard passed (a frozen or cut-off replica): its name and the
/// generation engaged.
struct Lost(String, u64);

/// Every controller of a cluster's engagement (its name and generation) has synced.
struct SyncedNow(String, u64);

struct Engine {
    fleet: Fleet,
    providers: Vec<Arc<dyn Provider>>,
    gate: LeaderGate,
    wanted: BTreeMap<String, Wanted>,
    engaged: BTreeMap<String, Engagement>,
    /// The disengagements under way (each returns its cluster's name), and which cluster each
    /// task stops: a cluster is engaged again only once its last engagement ended.
    disengaging: JoinSet<String>,
    stopping: HashMap<tokio::task::Id, String>,
    next_generation: u64,
    /// Sharded: the shards held here, as the ring's gate publishes them.
    held: Option<watch::Receiver<BTreeSet<usize>>>,
    lost_tx: mpsc::UnboundedSender<Lost>,
    lost_rx: mpsc::UnboundedReceiver<Lost>,
    synced_tx: mpsc::UnboundedSender<SyncedNow>,
    synced_rx: mpsc::UnboundedReceiver<SyncedNow>,
}

impl Engine {
    fn new(runnable: FleetRunnable) -> Self {
        let (lost_tx, lost_rx) = mpsc::unbounded_channel();
        let (synced_tx, synced_rx) = mpsc::unbounded_channel();
        let held = runnable
            .fleet
            .inner
            .shards
            .as_ref()
            .map(rudder_controller::ShardGate::held);
        Self {
            fleet: runnable.fleet,
            providers: runnable.providers,
            gate: runnable.gate,
            wanted: BTreeMap::new(),
            engaged: BTreeMap::new(),
            disengaging: JoinSet::new(),
            stopping: HashMap::new(),
            next_generation: 0,
            held,
            lost_tx,
            lost_rx,
            synced_tx,
            synced_rx,
        }
    }

    /// Runs the fleet until `shutdown`, then disengages every cluster with its deadline and
    /// joins everything it started (disengagements, providers) before returning. It acts
    /// only when told: an announcement, a controller added, a shard opened or closed, a
    /// disengagement ended, a holding lost, a member synced; it keeps no timer of its own.
    async fn run(&mut self, shutdown: Shutdown) {
        metrics::describe();
        let (announce_tx, mut announcements) = mpsc::unbounded_channel();
        let mut providers = JoinSet::new();
        for provider in &self.providers {
            let announcer = Announcer::new(announce_tx.clone(), &provider.name());
            providers.spawn(supervise(Arc::clone(provider), announcer, shutdown.clone()));
        }
        drop(announce_tx);
        let mut added = self.fleet.inner.added_rx.lock_unpoisoned().take();
        let mut held = self.held.clone();
        self.publish();
        loop {
            tokio::select! {
                _ = shutdown.stopped() => break,
                Some(announcement) = announcements.recv() => self.announced(announcement),
                Some(recipe) = recv(&mut added) => self.recipe_added(&recipe),
                Some(done) = self.disengaging.join_next_with_id() => {
                    if let Some(name) = self.disengaged(done) {
                        self.converge(&name);
                    }
                }
                Some(lost) = self.lost_rx.recv() => self.lost(lost),
                Some(synced) = self.synced_rx.recv() => self.synced(synced),
                true = changed(&mut held) => self.converge_all(),
            }
        }
        // Stop every cluster with the manager's deadline, then the providers (stopped by
        // the same shutdown). Each disengagement ends by the deadline (what still runs at its
        // controllers' deadline is aborted), so the engine ends by it too, with nothing of
        // its own left running.
        let names: Vec<String> = self.engaged.keys().cloned().collect();
        for name in names {
            self.disengage(&name, shutdown.deadline());
        }
        while let Some(done) = self.disengaging.join_next_with_id().await {
            self.disengaged(done);
        }
        while let Some(ended) = providers.join_next().await {
            log_panic(ended, "a cluster provider");
        }
    }

    fn announced(&mut self, announcement: Announcement) {
        match announcement {
            Announcement::Engage {
                name,
                config,
                provider,
            } => {
                tracing::info!(cluster = %name, provider = %provider, "member cluster announced");
                self.next_generation += 1;
                self.wanted.insert(
                    name.clone(),
                    Wanted {
                        config: *config,
                        generation: self.next_generation,
                        announced: Instant::now(),
                    },
                );
                self.converge(&name);
            }
            Announcement::Disengage { name, provider } => {
                tracing::info!(cluster = %name, provider = %provider, "member cluster withdrawn");
                self.wanted.remove(&name);
                self.converge(&name);
            }
        }
    }

    fn recipe_added(&mut self, recipe: &Arc<dyn Recipe>) {
        let mut changed = false;
        for (name, engagement) in &mut self.engaged {
            // A recipe known at start was started with the cluster already.
            if !recipe.serves(name) || engagement.running_names.contains(recipe.name()) {
                continue;
            }
            engagement.start(recipe.as_ref());
            if !engagement.synced_once {
                // The waiter started before counts without this controller; this one
                // waits for all of them.
                engagement.report_synced(name, &self.synced_tx);
            }
            changed = true;
        }
        if changed {
            self.publish();
        }
    }

    /// A disengagement ended: the name of the cluster it stopped, which may be engaged again.
    fn disengaged(&mut self, done: Result<(tokio::task::Id, String), JoinError>) -> Option<String> {
        let id = match &done {
            Ok((id, _)) => *id,
            Err(error) => error.id(),
        };
        let name = self.stopping.remove(&id);
        if let Err(error) = done {
            log_panic::<()>(Err(error), "a member cluster's disengagement");
        }
        name
    }

    fn lost(&mut self, Lost(name, generation): Lost) {
        if self
            .engaged
            .get(&name)
            .is_some_and(|e| e.generation == generation)
        {
            tracing::warn!(cluster = %name, "this replica's hold on a member cluster's shard passed; disengaging it");
            self.disengage(&name, Some(Instant::now()));
        }
    }

    /// Every controller of an engagement synced (as far as its waiter knew): counted once
    /// per engagement, with the time from its announcement.
    fn synced(&mut self, SyncedNow(name, generation): SyncedNow) {
        let Some(engagement) = self
            .engaged
            .get_mut(&name)
            .filter(|e| e.generation == generation && !e.synced_once)
        else {
            return;
        };
        // A controller added after this report's waiter started has a waiter of its own.
        if !engagement.running.iter().all(|(_, s)| s.is_synced()) {
            return;
        }
        engagement.synced_once = true;
        let took = engagement.announced.elapsed();
        metrics::gauge_set_cluster(CLUSTER_SYNCED, &name, 1.0);
        metrics::gauge_set_cluster(ENGAGE_SECONDS, &name, took.as_secs_f64());
        tracing::info!(cluster = %name, took_ms = took.as_millis() as u64, "member cluster synced");
    }

    /// Carries out what [`decide`](decide::decide) says for every member.
    fn converge_all(&mut self) {
        let actions = self.decide(None);
        self.act(actions);
    }

    /// Carries out what [`decide`](decide::decide) says for `name`.
    fn converge(&mut self, name: &str) {
        let actions = self.decide(Some(name));
        self.act(actions);
    }

    /// The decision's inputs, for `only` one member or all of them, and its actions.
    fn decide(&self, only: Option<&str>) -> Vec<Action> {
        let of_interest = |name: &str| only.is_none_or(|only| only == name);
        let wanted: BTreeMap<String, u64> = self
            .wanted
            .iter()
            .filter(|(name, _)| of_interest(name))
            .map(|(name, wanted)| (name.clone(), wanted.generation))
            .collect();
        let engaged: BTreeMap<String, u64> = self
            .engaged
            .iter()
            .filter(|(name, _)| of_interest(name))
            .map(|(name, engagement)| (name.clone(), engagement.generation))
            .collect();
        let stopping: BTreeSet<String> = self
            .stopping
            .values()
            .filter(|name| of_interest(name))
            .cloned()
            .collect();
        let gate = self.fleet.inner.shards.as_ref();
        let shard_of = |name: &str| gate.map_or(0, |gate| gate.shard_of(&Request::cluster(name)));
        let held = self.held.as_ref().map(|held| held.borrow().clone());
        decide::decide(&Inputs {
            wanted: &wanted,
            engaged: &engaged,
            stopping: &stopping,
            shards: held.as_ref().map(|held| Shards {
                held,
                shard_of: &shard_of,
            }),
        })
    }

    fn act(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Engage(name) => self.engage(&name),
                // A replaced cluster is engaged again when its disengagement has ended.
                Action::Disengage(name) | Action::Replace(name) => {
                    let grace = self.fleet.inner.disengage_grace;
                    self.disengage(&name, grace.map(|g| Instant::now() + g));
                }
            }
        }
    }

    /// Publishes the members engaged now: the one snapshot every reader of the fleet uses.
    fn publish(&self) {
        let members: BTreeMap<String, Member> = self
            .engaged
            .iter()
            .map(|(name, engagement)| {
                let member = Member {
                    cluster: engagement.cluster.clone(),
                    synced: engagement.synced(),
                };
                (name.clone(), member)
            })
            .collect();
        metrics::gauge_set(CLUSTERS_ENGAGED, members.len() as f64);
        self.fleet.inner.members.send_replace(Arc::new(members));
    }

    fn engage(&mut self, name: &str) {
        let Some(wanted) = self.wanted.get(name) else {
            return;
        };
        let generation = wanted.generation;
        let announced = wanted.announced;
        let permit = match &self.fleet.inner.shards {
            None => None,
            // Held, but its validity passed: the ring closes it (a change of `held`) and
            // opens it again once it holds the Lease anew.
            Some(gate) => match gate.admit(&Request::cluster(name)) {
                Some(permit) => Some(permit),
                None => return,
            },
        };
        let gate = permit
            .as_ref()
            .map_or_else(|| self.gate.clone(), ShardPermit::gate);
        let cluster_name: Arc<str> = Arc::from(name);
        let (client, health) = match self.fleet.client_for(&cluster_name, wanted.config.clone()) {
            Ok(made) => made,
            Err(error) => {
                tracing::warn!(cluster = %name, %error, "cannot make a client for a member cluster; it is not engaged");
                metrics::provider_error("client");
                // Not engaged until announced again.
                self.wanted.remove(name);
                return;
            }
        };
        let fleet = self.fleet.clone();
        let cluster = Cluster::new(
            Arc::clone(&cluster_name),
            client,
            health,
            |client, token| fleet.cache_for(&cluster_name, client, token),
        );
        let mut tasks = JoinSet::new();
        tasks.spawn(probe(
            cluster.clone(),
            self.fleet.inner.probe_every,
            self.fleet.inner.probe_timeout,
        ));
        let release = permit.map(|permit| {
            let (release, released) = oneshot::channel();
            tasks.spawn(hold(
                permit,
                released,
                self.lost_tx.clone(),
                name.to_owned(),
                generation,
            ));
            release
        });
        let mut engagement = Engagement {
            generation,
            cluster,
            running: Vec::new(),
            instances: JoinSet::new(),
            tasks,
            running_names: HashSet::new(),
            release,
            gate,
            announced,
            synced_once: false,
        };
        let recipes: Vec<Arc<dyn Recipe>> = self.fleet.inner.recipes.lock_unpoisoned().clone();
        for recipe in recipes.iter().filter(|r| r.serves(name)) {
            engagement.start(recipe.as_ref());
        }
        engagement.report_synced(name, &self.synced_tx);
        let controllers = engagement.running.len();
        metrics::gauge_set_cluster(CLUSTER_ENGAGED, name, 1.0);
        metrics::gauge_set_cluster(CLUSTER_SYNCED, name, 0.0);
        tracing::info!(cluster = %name, controllers, "member cluster engaged");
        self.engaged.insert(name.to_owned(), engagement);
        self.publish();
    }

    /// Stops `name`'s controllers (their reconciles get until about `deadline`), then its
    /// cache and probe, then releases its shard, in a disengagement the engine joins.
    fn disengage(&mut self, name: &str, deadline: Option<Instant>) {
        let Some(engagement) = self.engaged.remove(name) else {
            return;
        };
        self.publish();
        metrics::gauge_set_cluster(CLUSTER_ENGAGED, name, 0.0);
        metrics::gauge_set_cluster(CLUSTER_SYNCED, name, 0.0);
        let task = self
            .disengaging
            .spawn(disengagement(engagement, name.to_owned(), deadline));
        self.stopping.insert(task.id(), name.to_owned());
    }
}

/// Ends `engagement`: its controllers are told to stop by a deadline a little before
/// `deadline` ([`JOIN_MARGIN`]) and aborted at it if still running, each abort joined; then
/// its cache and probe stop and its shard's permit is let go of. Returns the cluster's name.
async fn disengagement(engagement: Engagement, name: String, deadline: Option<Instant>) -> String {
    let Engagement {
        cluster,
        running,
        mut instances,
        mut tasks,
        release,
        ..
    } = engagement;
    let instances_by = deadline.map(|deadline| {
        let left = deadline.saturating_duration_since(Instant::now());
        deadline - (left / 4).min(JOIN_MARGIN)
    });
    for (shutdown, _) in &running {
        shutdown.stop(instances_by);
    }
    let stopped = match instances_by {
        // The controllers cancel their reconciles' contexts before their deadline; one that
        // ignores its context is aborted at it (derived from the deadline handed down, no
        // timer of the fleet's own), so a stop or a hand-off is never blocked forever.
        Some(at) => tokio::time::timeout_at(at, join_all(&mut instances, &name))
            .await
            .is_ok(),
        None => {
            join_all(&mut instances, &name).await;
            true
        }
    };
    if !stopped {
        tracing::warn!(cluster = %name, "a member cluster's controller did not stop by its deadline; aborted");
        instances.abort_all();
        join_all(&mut instances, &name).await;
    }
    // Cancels the probe too; the holder of the shard's permit lets go of it once `release`
    // is dropped.
    cluster.stop().await;
    drop(release);
    join_all(&mut tasks, &name).await;
    tracing::info!(cluster = %name, "member cluster disengaged");
    name
}

/// Joins every task of `set`, logging a panic (an abort is expected).
async fn join_all(set: &mut JoinSet<()>, cluster: &str) {
    while let Some(ended) = set.join_next().await {
        if let Err(error) = ended
            && error.is_panic()
        {
            tracing::error!(cluster = %cluster, panic = %rudder_core::panic_message(&*error.into_panic()), "a task of a member cluster panicked");
        }
    }
}

/// Logs how `what` ended if it panicked.
fn log_panic<T>(ended: Result<T, JoinError>, what: &str) {
    if let Err(error) = ended
        && error.is_panic()
    {
        tracing::error!(panic = %rudder_core::panic_message(&*error.into_panic()), "{what} panicked");
    }
}

/// Asks `cluster`'s API server for its version every `period` until the cluster is stopped.
/// Its health layer records each answer; a probe not answered within `timeout` is recorded
/// here, as a failure like a refused connection, since no answer reaches that layer.
async fn probe(cluster: Cluster, period: Duration, timeout: Duration) {
    let stopped = cluster.stopped();
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            () = stopped.cancelled() => return,
        }
        let ask = tokio::time::timeout(timeout, cluster.kube().apiserver_version());
        tokio::select! {
            answered = ask => {
                if answered.is_err() {
                    cluster.record_unanswered();
                }
            }
            () = stopped.cancelled() => return,
        }
    }
}

/// Waits for the next change of `held` (`true`); never returns without one, or once its
/// sender is gone.
async fn changed(held: &mut Option<watch::Receiver<BTreeSet<usize>>>) -> bool {
    if let Some(rx) = held
        && rx.changed().await.is_ok()
    {
        return true;
    }
    std::future::pending().await
}

async fn recv<T>(rx: &mut Option<mpsc::UnboundedReceiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Holds a cluster's shard permit until `released` fires (the cluster is disengaged) and
/// reports [`Lost`] if the holding passes first.
async fn hold(
    mut permit: ShardPermit,
    mut released: oneshot::Receiver<()>,
    lost: mpsc::UnboundedSender<Lost>,
    name: String,
    generation: u64,
) {
    tokio::select! {
        _ = &mut released => {}
        () = permit.lost() => {
            let _ = lost.send(Lost(name, generation));
            // Kept until the disengagement lets go of it: the ring's drain waits for it.
            let _ = released.await;
        }
    }
    drop(permit);
}

/// Runs `provider` until `shutdown`, again after a failure (1 s doubling to 60 s, each wait
/// jittered up to twice as long).
async fn supervise(provider: Arc<dyn Provider>, announcer: Announcer, shutdown: Shutdown) {
    let name = provider.name();
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        match provider.run(announcer.clone(), shutdown.clone()).await {
            Ok(()) if shutdown.is_stopped() => return,
            Ok(()) => {
                // A provider that stopped by itself has announced all it will.
                shutdown.stopped().await;
                return;
            }
            Err(error) => {
                tracing::warn!(provider = %name, error = %rudder_core::ErrorChain(&*error), "a cluster provider failed; running it again");
                metrics::provider_error(&name);
            }
        }
        tokio::select! {
            () = backoff.wait() => {}
            _ = shutdown.stopped() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use rudder_controller::{KeyAffinity, ShardGate};

    use super::*;
    use crate::StaticClusters;

    /// A client configuration for a server nobody asks (the probe's period is an hour, and
    /// no controller runs).
    fn config() -> kube::Config {
        kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"))
    }

    /// A sharded fleet on `gate`, with no manager: its engine runs on its own.
    fn fleet(gate: &ShardGate) -> Fleet {
        let (added, added_rx) = mpsc::unbounded_channel();
        Fleet {
            inner: Arc::new(Inner {
                name: "fleet".to_owned(),
                home: kube::Client::try_from(config()).expect("a client"),
                cache_options: None,
                probe_every: Duration::from_secs(3600),
                probe_timeout: DEFAULT_PROBE_TIMEOUT,
                events_in_members: false,
                disengage_grace: Some(Duration::ZERO),
                recipes: Mutex::new(Vec::new()),
                added,
                added_rx: Mutex::new(Some(added_rx)),
                members: watch::Sender::new(Arc::default()),
                shards: Some(gate.clone()),
                rules: rudder_manager::rbac::RulesRecorder::default(),
            }),
        }
    }

    /// Starts `fleet`'s engine in `tasks` with one member, `name`, announced.
    fn start(fleet: &Fleet, name: &str, tasks: &mut JoinSet<()>, shutdown: &Shutdown) {
        let runnable = Box::new(FleetRunnable {
            fleet: fleet.clone(),
            providers: vec![Arc::new(StaticClusters::new().with(name, config()))],
            sharded: true,
            gate: LeaderGate::always_open(),
        });
        let run = runnable.start(shutdown.clone());
        tasks.spawn(async move {
            run.await.expect("the engine ends cleanly");
        });
    }

    /// Waits, snapshot by snapshot (no timer), until `fleet` has `engaged` engaged.
    async fn until_engaged(fleet: &Fleet, seen: &mut watch::Receiver<Members>, engaged: &[&str]) {
        while fleet.engaged() != engaged {
            seen.changed().await.expect("the fleet is alive");
        }
    }

    /// The ring's hand-over, played on two replicas' gates: a replica engages a member as its
    /// shard opens and disengages it as the shard closes, told by the gate and not by a
    /// timer, so on paused time no time passes between the gate's change and the fleet's.
    #[tokio::test(start_paused = true)]
    async fn a_shard_handed_to_another_replica_is_engaged_there_as_it_opens() {
        let (gate_a, gate_b) = (
            ShardGate::new(4, 7, KeyAffinity::Name),
            ShardGate::new(4, 7, KeyAffinity::Name),
        );
        let shard = gate_a.shard_of(&Request::cluster("c0"));
        let (_validity, valid) = watch::channel(Some(Instant::now() + Duration::from_secs(3600)));
        let (a, b) = (fleet(&gate_a), fleet(&gate_b));
        let (mut seen_a, mut seen_b) = (a.inner.members.subscribe(), b.inner.members.subscribe());
        let shutdown = Shutdown::new();
        let mut tasks = JoinSet::new();

        // A holds the shard: the announcement engages c0 there; B, without it, does not.
        gate_a.open(shard, valid.clone());
        start(&a, "c0", &mut tasks, &shutdown);
        start(&b, "c0", &mut tasks, &shutdown);
        until_engaged(&a, &mut seen_a, &["c0"]).await;
        assert!(b.engaged().is_empty());

        // The ring moves the shard: A closes it, which alone disengages c0 there; the
        // shard is drained once that disengagement let go of its permit.
        let moved = Instant::now();
        gate_a.close(shard);
        until_engaged(&a, &mut seen_a, &[]).await;
        gate_a.drained(shard).await;
        assert!(b.engaged().is_empty(), "B does not hold the shard yet");
        // B's opening alone engages it there.
        gate_b.open(shard, valid);
        until_engaged(&b, &mut seen_b, &["c0"]).await;
        assert_eq!(moved.elapsed(), Duration::ZERO, "no timer was waited for");
        assert!(a.engaged().is_empty());

        shutdown.stop(None);
        while let Some(ended) = tasks.join_next().await {
            ended.expect("the engine ends cleanly");
        }
        assert!(b.engaged().is_empty(), "stopped, B disengaged c0");
    }
}
