//! The start and stop sequence of [`Manager::start`].

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use rudder_core::LeaderGate;
use rudder_core::sync::LockExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::group::{Ended, Group};
use super::{Error, GracefulShutdown, Late, Manager};
use crate::leader_election::{Error as ElectionError, Leadership};
use crate::runnable::Runnable;
use crate::server::{Routes, Served, serve};

/// Runnables, boxed.
type Runnables = Vec<Box<dyn Runnable>>;

/// The runnables once started, and this replica's bid for leadership.
struct Running<'a> {
    plain: Group,
    leader: Group,
    /// The leader runnables that start once this replica leads (`None` once started).
    waiting: Option<Runnables>,
    campaign: Campaign<'a>,
    /// Runnables added, and removals asked for, while the manager runs.
    late: mpsc::UnboundedReceiver<Late>,
    /// The gate leader runnables take (with an election).
    gate: Option<LeaderGate>,
    warm_standby: bool,
    graceful_shutdown: GracefulShutdown,
    /// Runnables told to stop by a removal, not ended yet.
    removing: Vec<Removal>,
}

/// A runnable being removed while the manager runs.
struct Removal {
    name: String,
    /// When it is aborted if it has not ended (`None`: never).
    deadline: Option<tokio::time::Instant>,
    /// Whether it was aborted.
    aborted: bool,
    /// Who asked, told when it has ended.
    done: Vec<oneshot::Sender<bool>>,
}

/// This replica's leader election while the manager runs.
struct Campaign<'a> {
    /// Cancels the election when the manager stops.
    token: CancellationToken,
    /// The bid, granted at once without an election.
    acquiring: Pin<Box<dyn Future<Output = Result<Option<Leadership>, ElectionError>> + Send + 'a>>,
    /// Whether `acquiring` has yet to finish.
    electing: bool,
    leadership: Option<Leadership>,
    /// Resolves when the leadership held is lost; never before.
    lost: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Manager {
    /// Runs everything until `cancel` fires or a runnable fails, then stops everything in
    /// reverse order and returns.
    pub async fn start(&self, cancel: CancellationToken) -> Result<(), Error> {
        if self.started.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::AlreadyStarted);
        }
        // Again at start: a handle given to the builder belongs to a recorder installed
        // elsewhere, whose descriptions only the recorder present now can take.
        crate::metrics::describe();
        // Before anything that makes spans.
        #[cfg(feature = "otlp")]
        self.otlp.start();
        let mut servers = Vec::new();
        let result = self.run(&cancel, &mut servers).await;
        // Servers last: probes keep answering while the rest stops, within the same
        // deadline as everything else (set when the stop began, or now if the run ended
        // before any runnable started).
        let deadline = self.stop_deadline();
        // The webhook server after the controllers (which may still write objects it is
        // called for), before the probes.
        #[cfg(feature = "webhook")]
        self.tls.stop(deadline).await;
        futures::future::join_all(servers.into_iter().map(|s| s.stop(deadline))).await;
        self.cache_token.cancel();
        self.cache.stop().await;
        // Last, so the spans of everything above are exported, within the same deadline.
        #[cfg(feature = "otlp")]
        self.otlp.stop(deadline).await;
        result
    }

    /// The start sequence, then the wait for a reason to stop, then the stop of the
    /// runnables (the servers `start` stops after it).
    async fn run(
        &self,
        cancel: &CancellationToken,
        servers: &mut Vec<Served>,
    ) -> Result<(), Error> {
        self.raise_fd_limit_if_configured();
        self.serve_health_probes(servers).await?;
        self.serve_metrics(servers).await?;
        #[cfg(feature = "profiling")]
        self.serve_profiles(servers).await?;
        // The webhook server before the cache: a conversion webhook is on the cache's own
        // path (its lists are converted by it), so waiting for the cache first would never
        // end.
        // Self-signed certificates before the webhook server: it must have one to serve.
        #[cfg(feature = "webhook")]
        self.tls.start(&self.client).await?;
        self.resolve_version_order().await;
        // Caches next: informers created so far (by controllers' sources) list first.
        if !self.wait_for_cache_sync(cancel).await? {
            return Ok(());
        }
        let mut running = self.start_runnables();
        let failure = running.supervise(cancel).await;
        self.stop_runnables(running, failure).await
    }

    /// Asks the API server's version (bounded) and tells the cache's write tracker whether
    /// resourceVersions compare as integers there (Kubernetes 1.35 and later, KEP-5504), so
    /// a newer version in the cache reaches an older write (read-your-writes). Without an
    /// answer the tracker keeps what it was told (by default: opaque versions, equality).
    async fn resolve_version_order(&self) {
        const ASK_FOR: std::time::Duration = std::time::Duration::from_secs(10);
        let answer = tokio::time::timeout(ASK_FOR, self.client.apiserver_version()).await;
        match answer {
            Ok(Ok(info)) => {
                let comparable = comparable_resource_versions(&info.major, &info.minor);
                tracing::debug!(major = %info.major, minor = %info.minor, comparable,
                    "resourceVersions compare as integers on this server: {comparable}");
                self.cache.writes().set_comparable(comparable);
            }
            Ok(Err(error)) => tracing::warn!(%error,
                "cannot read the API server's version; read-your-writes compares resourceVersions for equality only"),
            Err(_) => tracing::warn!(after = ?ASK_FOR,
                "the API server did not say its version; read-your-writes compares resourceVersions for equality only"),
        }
    }

    /// Raises the soft file descriptor limit to the hard one, unless told not to.
    fn raise_fd_limit_if_configured(&self) {
        if !self.raise_fd_limit {
            return;
        }
        match rudder_server::raise_fd_limit() {
            Ok(limit) if limit.raised() => tracing::info!(
                from = ?limit.before,
                to = ?limit.after,
                "raised the soft file descriptor limit to the hard limit"
            ),
            Ok(limit) => {
                tracing::debug!(limit = ?limit.after, "file descriptor limit unchanged");
            }
            Err(error) => tracing::warn!(%error, "cannot raise the file descriptor limit"),
        }
    }

    /// Serves `/healthz` and `/readyz`, if they have an address.
    async fn serve_health_probes(&self, servers: &mut Vec<Served>) -> Result<(), Error> {
        let Some(addr) = self.health_address else {
            return Ok(());
        };
        let routes = Routes::Health(self.health.clone());
        let server = listen("health probes", addr, routes).await?;
        self.bound.lock_unpoisoned().health = Some(server.local_addr());
        servers.push(server);
        Ok(())
    }

    /// Serves `/metrics` and the extra handlers (over HTTPS with secure metrics), if they
    /// have an address and a recorder.
    async fn serve_metrics(&self, servers: &mut Vec<Served>) -> Result<(), Error> {
        let (Some(addr), Some(handle)) = (self.metrics_address, self.metrics.clone()) else {
            return Ok(());
        };
        let routes = Routes::Metrics {
            handle: handle.clone(),
            extra: Arc::clone(&self.extra),
        };
        #[cfg(feature = "webhook")]
        let secure = self
            .tls
            .serve_metrics(addr, routes.clone(), &self.client)
            .await;
        #[cfg(not(feature = "webhook"))]
        let secure: Option<Result<Served, Error>> = None;
        let server = match secure {
            Some(served) => served?,
            None => listen("metrics", addr, routes).await?,
        }
        .with_upkeep(handle);
        self.bound.lock_unpoisoned().metrics = Some(server.local_addr());
        servers.push(server);
        Ok(())
    }

    /// Serves CPU profiles (over HTTPS behind the same filter as secure metrics, when they
    /// are on), if they have an address.
    #[cfg(feature = "profiling")]
    async fn serve_profiles(&self, servers: &mut Vec<Served>) -> Result<(), Error> {
        let Some(addr) = self.profiling_address else {
            return Ok(());
        };
        let routes = Routes::Profiles(crate::profiling::Profiler);
        #[cfg(feature = "webhook")]
        let secure = self
            .tls
            .serve_metrics(addr, routes.clone(), &self.client)
            .await;
        #[cfg(not(feature = "webhook"))]
        let secure: Option<Result<Served, Error>> = None;
        let server = match secure {
            Some(served) => served?,
            None => listen("profiles", addr, routes).await?,
        };
        tracing::info!(addr = %server.local_addr(), "serving CPU profiles at /debug/pprof/profile");
        self.bound.lock_unpoisoned().profiling = Some(server.local_addr());
        servers.push(server);
        Ok(())
    }

    /// Waits for the cache's informers to sync: `false` if `cancel` fired first.
    async fn wait_for_cache_sync(&self, cancel: &CancellationToken) -> Result<bool, Error> {
        tokio::select! {
            () = cancel.cancelled() => Ok(false),
            synced = self.cache.wait_for_sync(self.cache_sync_timeout) => {
                synced.map_err(Error::CacheSync)?;
                Ok(true)
            }
        }
    }

    /// Starts the runnables that need no leadership, and (with warm standby) the leader
    /// runnables that take the gate; the others wait for leadership, which is not sought
    /// until [`Running::supervise`].
    fn start_runnables(&self) -> Running<'_> {
        let (tx, late) = mpsc::unbounded_channel();
        // Under the lock `add` takes first, so a runnable added meanwhile is either taken
        // here or sent to the running manager.
        let runnables = {
            let mut sender = self.late.lock_unpoisoned();
            *sender = Some(tx);
            std::mem::take(&mut *self.runnables.lock_unpoisoned())
        };
        let (leader, plain): (Vec<_>, Vec<_>) = runnables
            .into_iter()
            .partition(|r| r.needs_leader_election());
        let gate = self
            .election
            .as_ref()
            .map(|election| LeaderGate::new(election.validity()));
        let mut running = Running {
            plain: Group::default(),
            leader: Group::default(),
            waiting: None,
            campaign: self.campaign(),
            late,
            gate: gate.clone(),
            warm_standby: self.warm_standby,
            graceful_shutdown: self.graceful_shutdown,
            removing: Vec::new(),
        };
        for r in plain {
            running.plain.spawn(r);
        }
        let (warm, cold) = self.gate_leader_runnables(leader, gate.as_ref());
        if !warm.is_empty() {
            tracing::info!(
                runnables = warm.len(),
                "warm standby: starting controllers before leading; they reconcile once this replica leads"
            );
        }
        for r in warm {
            running.leader.spawn(r);
        }
        running.waiting = Some(cold);
        running
    }

    /// With an election, every runnable that takes the gate gets it (so a leader whose
    /// leadership runs out stops taking work at once, whatever else is going on); with warm
    /// standby those start now, before this replica leads, and wait on it. Returns the
    /// runnables to start now and those to start once leading.
    fn gate_leader_runnables(
        &self,
        leader: Vec<Box<dyn Runnable>>,
        gate: Option<&LeaderGate>,
    ) -> (Runnables, Runnables) {
        let Some(gate) = gate else {
            return (Vec::new(), leader);
        };
        let (warm, cold): (Vec<_>, Vec<_>) = leader
            .into_iter()
            .map(|mut r| (r.set_leader_gate(gate.clone()) && self.warm_standby, r))
            .partition(|(warm, _)| *warm);
        let strip =
            |tagged: Vec<(bool, Box<dyn Runnable>)>| tagged.into_iter().map(|(_, r)| r).collect();
        (strip(warm), strip(cold))
    }

    /// This replica's bid for leadership (immediately granted without an election), not
    /// yet sent.
    fn campaign(&self) -> Campaign<'_> {
        let token = CancellationToken::new();
        let election = self.election.as_ref();
        let cancel = token.clone();
        Campaign {
            token,
            acquiring: Box::pin(async move {
                match election {
                    Some(election) => election.acquire(cancel).await.map(Some),
                    None => Ok(None),
                }
            }),
            electing: true,
            leadership: None,
            lost: Box::pin(std::future::pending()),
        }
    }

    /// Stops the runnables with one deadline: the leader runnables, then leadership, then
    /// the others. Returns the first failure, or whether the stop kept its deadline.
    async fn stop_runnables(
        &self,
        mut running: Running<'_>,
        mut failure: Option<Error>,
    ) -> Result<(), Error> {
        // One deadline for the whole stop, handed down to every runnable.
        let now = tokio::time::Instant::now();
        let deadline = self.stop_deadline();
        tracing::info!(deadline_in = ?deadline.map(|d| d.saturating_duration_since(now)), "stopping runnables");
        // Added from now on: never started (the manager cannot start again).
        self.late.lock_unpoisoned().take();
        let mut stuck = Vec::new();
        running.leader.stop_all(deadline);
        stuck.extend(running.leader.drain(deadline, &mut failure).await);
        // Leadership is given up (released, if configured) only once nothing that needs it
        // runs.
        if running.campaign.give_up().await && failure.is_none() {
            failure = Some(Error::LeadershipLost);
        }
        running.plain.stop_all(deadline);
        stuck.extend(running.plain.drain(deadline, &mut failure).await);
        // Removals under way ended with everything else.
        for removal in running.removing {
            for done in removal.done {
                let _ = done.send(true);
            }
        }
        match failure.or_else(|| self.shutdown_timeout(stuck)) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// The error a stop that aborted `stuck` (what still ran at its deadline) ends with,
    /// if it is one: not with `Immediately`, which asked for it.
    fn shutdown_timeout(&self, stuck: Vec<String>) -> Option<Error> {
        match self.graceful_shutdown {
            GracefulShutdown::After(timeout) if !stuck.is_empty() => Some(Error::ShutdownTimeout {
                timeout,
                left: stuck,
            }),
            GracefulShutdown::Immediately if !stuck.is_empty() => {
                tracing::info!(aborted = %stuck.join(", "), "stopped immediately, as configured");
                None
            }
            _ => None,
        }
    }

    /// The deadline of this manager's stop, fixed the first time it is asked for (when the
    /// stop begins) from [`GracefulShutdown`]; `None`: no deadline.
    fn stop_deadline(&self) -> Option<tokio::time::Instant> {
        *self
            .stop_deadline
            .get_or_init(|| deadline_from_now(self.graceful_shutdown))
    }
}

/// The deadline of a stop that begins now under `graceful_shutdown` (`None`: no deadline).
fn deadline_from_now(graceful_shutdown: GracefulShutdown) -> Option<tokio::time::Instant> {
    let now = tokio::time::Instant::now();
    match graceful_shutdown {
        GracefulShutdown::After(d) => Some(now + d),
        GracefulShutdown::Immediately => Some(now),
        GracefulShutdown::Forever => None,
    }
}

/// Waits until `at` (forever for `None`).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Starts a server, naming it in the error if its address is unavailable.
async fn listen(what: &'static str, addr: SocketAddr, routes: Routes) -> Result<Served, Error> {
    serve(addr, routes)
        .await
        .map_err(|source| Error::Bind { what, addr, source })
}

impl Running<'_> {
    /// Seeks leadership and waits for the first reason to stop: `cancel` (`None`), a failed
    /// election, lost leadership, or a runnable's error.
    async fn supervise(&mut self, cancel: &CancellationToken) -> Option<Error> {
        loop {
            let abort_at = self
                .removing
                .iter()
                .filter(|r| !r.aborted)
                .filter_map(|r| r.deadline)
                .min();
            tokio::select! {
                () = cancel.cancelled() => return None,
                acquired = &mut self.campaign.acquiring, if self.campaign.electing => {
                    self.campaign.electing = false;
                    match acquired {
                        Ok(held) => self.lead(held),
                        Err(error) => return Some(Error::LeaderElection(error)),
                    }
                }
                () = &mut self.campaign.lost => {
                    tracing::error!("leader election lost: stopping leader-only runnables");
                    return Some(Error::LeadershipLost);
                }
                Some(ended) = self.leader.join_next(), if !self.leader.is_empty() => {
                    if let Some(error) = self.ended(ended) {
                        return Some(error);
                    }
                }
                Some(ended) = self.plain.join_next(), if !self.plain.is_empty() => {
                    if let Some(error) = self.ended(ended) {
                        return Some(error);
                    }
                }
                Some(late) = self.late.recv() => match late {
                    Late::Add(runnable) => self.add(runnable),
                    Late::Remove { name, done } => self.remove(name, done),
                },
                () = sleep_until(abort_at), if abort_at.is_some() => self.abort_late_removals(),
            }
        }
    }

    /// What a runnable's end means: the error to stop the manager with, unless it was
    /// being removed (then whoever asked is told, and the manager goes on).
    fn ended(&mut self, ended: Ended) -> Option<Error> {
        let Some(at) = self.removing.iter().position(|r| r.name == ended.name) else {
            ended.log("stopping the manager");
            return ended.error;
        };
        let removal = self.removing.swap_remove(at);
        ended.log("it was being removed; the manager goes on");
        tracing::info!(runnable = %ended.name, "removed");
        for done in removal.done {
            let _ = done.send(true);
        }
        None
    }

    /// Starts a runnable added while the manager runs, as it would have been at start: one
    /// that needs no leadership now, a leader runnable now if this replica leads (or it takes
    /// the gate under warm standby), else once it leads.
    fn add(&mut self, mut runnable: Box<dyn Runnable>) {
        if !runnable.needs_leader_election() {
            self.plain.spawn(runnable);
            return;
        }
        let warm = match &self.gate {
            Some(gate) => runnable.set_leader_gate(gate.clone()) && self.warm_standby,
            None => false,
        };
        match &mut self.waiting {
            Some(waiting) if !warm => waiting.push(runnable),
            _ => self.leader.spawn(runnable),
        }
    }

    /// Removes the runnable called `name`: one waiting for leadership is dropped; a running
    /// one is told to stop within the graceful-shutdown timeout (aborted after it), and
    /// `done` hears when it has ended. `done` hears `false` when there is none.
    fn remove(&mut self, name: String, done: oneshot::Sender<bool>) {
        if let Some(waiting) = &mut self.waiting {
            let before = waiting.len();
            waiting.retain(|r| r.name() != name);
            if waiting.len() < before {
                tracing::info!(runnable = %name, "removed before it started");
                let _ = done.send(true);
                return;
            }
        }
        if let Some(removal) = self.removing.iter_mut().find(|r| r.name == name) {
            removal.done.push(done);
            return;
        }
        let deadline = deadline_from_now(self.graceful_shutdown);
        let leader = self.leader.stop_one(&name, deadline);
        let plain = self.plain.stop_one(&name, deadline);
        if leader || plain {
            tracing::info!(runnable = %name, "removing: stopping it");
            self.removing.push(Removal {
                name,
                deadline,
                aborted: false,
                done: vec![done],
            });
        } else {
            let _ = done.send(false);
        }
    }

    /// Aborts the runnables still running past their removal's deadline.
    fn abort_late_removals(&mut self) {
        let now = tokio::time::Instant::now();
        for removal in &mut self.removing {
            if !removal.aborted && removal.deadline.is_some_and(|d| d <= now) {
                removal.aborted = true;
                self.leader.abort_one(&removal.name);
                self.plain.abort_one(&removal.name);
            }
        }
    }

    /// Once this replica leads (at once without an election): watches for the loss of
    /// `held` and starts the leader runnables that waited.
    fn lead(&mut self, held: Option<Leadership>) {
        if let Some(held) = held {
            let signal = held.lost();
            self.campaign.lost = Box::pin(async move {
                signal.await;
            });
            self.campaign.leadership = Some(held);
        }
        for r in self.waiting.take().into_iter().flatten() {
            self.leader.spawn(r);
        }
    }
}

impl Campaign<'_> {
    /// Ends the election: one still in progress is let finish its request, so it can
    /// release a Lease it just took; leadership held is given up (released, if
    /// configured). `true` if it had been lost.
    async fn give_up(self) -> bool {
        self.token.cancel();
        if self.electing {
            let _ = self.acquiring.await;
        }
        match self.leadership {
            Some(held) => held.finished().await.is_err(),
            None => false,
        }
    }
}

/// Whether a server of version `major`.`minor` (as `/version` gives them: `"1"`, `"35+"`)
/// guarantees comparable resourceVersions (KEP-5504, GA in 1.35).
fn comparable_resource_versions(major: &str, minor: &str) -> bool {
    let number = |s: &str| {
        s.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse::<u32>()
            .ok()
    };
    match (number(major), number(minor)) {
        (Some(major), _) if major > 1 => true,
        (Some(1), Some(minor)) => minor >= 35,
        _ => false,
    }
}

#[cfg(test)]
mod version_tests {
    use super::comparable_resource_versions;

    #[test]
    fn resource_versions_compare_from_1_35() {
        assert!(comparable_resource_versions("1", "37"));
        assert!(comparable_resource_versions("1", "35+"));
        assert!(!comparable_resource_versions("1", "34"));
        assert!(!comparable_resource_versions("1", "33+"));
        assert!(!comparable_resource_versions("1", ""));
        assert!(comparable_resource_versions("2", "0"));
    }
}
