//! The start and stop sequence of [`Manager::start`].

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use rudder_controller::{LeaderGate, Shutdown};
use rudder_core::sync::LockExt;
use rudder_server::ServerHandle;
use tokio_util::sync::CancellationToken;

use super::group::Group;
use super::{Error, GracefulShutdown, Manager};
use crate::leader_election::{Error as ElectionError, Leadership};
use crate::runnable::Runnable;
use crate::server::{Routes, serve};

/// Runnables, boxed.
type Runnables = Vec<Box<dyn Runnable>>;

/// The runnables once started, and this replica's bid for leadership.
struct Running<'a> {
    plain: Group,
    plain_stop: Shutdown,
    leader: Group,
    leader_stop: Shutdown,
    /// The leader runnables that start once this replica leads (`None` once started).
    waiting: Option<Runnables>,
    campaign: Campaign<'a>,
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
        result
    }

    /// The start sequence, then the wait for a reason to stop, then the stop of the
    /// runnables (the servers `start` stops after it).
    async fn run(
        &self,
        cancel: &CancellationToken,
        servers: &mut Vec<ServerHandle>,
    ) -> Result<(), Error> {
        self.raise_fd_limit_if_configured();
        self.serve_health_probes(servers).await?;
        self.serve_metrics(servers).await?;
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
    async fn serve_health_probes(&self, servers: &mut Vec<ServerHandle>) -> Result<(), Error> {
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
    async fn serve_metrics(&self, servers: &mut Vec<ServerHandle>) -> Result<(), Error> {
        let (Some(addr), Some(handle)) = (self.metrics_address, self.metrics.clone()) else {
            return Ok(());
        };
        let routes = Routes::Metrics {
            handle,
            extra: Arc::clone(&self.extra),
        };
        #[cfg(feature = "webhook")]
        let secure = self
            .tls
            .serve_metrics(addr, routes.clone(), &self.client)
            .await;
        #[cfg(not(feature = "webhook"))]
        let secure: Option<Result<ServerHandle, Error>> = None;
        let server = match secure {
            Some(served) => served?,
            None => listen("metrics", addr, routes).await?,
        };
        self.bound.lock_unpoisoned().metrics = Some(server.local_addr());
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
        let runnables = std::mem::take(&mut *self.runnables.lock_unpoisoned());
        let (leader, plain): (Vec<_>, Vec<_>) = runnables
            .into_iter()
            .partition(|r| r.needs_leader_election());
        let mut running = Running {
            plain: Group::default(),
            plain_stop: Shutdown::new(),
            leader: Group::default(),
            leader_stop: Shutdown::new(),
            waiting: None,
            campaign: self.campaign(),
        };
        for r in plain {
            running.plain.spawn(r, running.plain_stop.clone());
        }
        let (warm, cold) = self.gate_leader_runnables(leader);
        if !warm.is_empty() {
            tracing::info!(
                runnables = warm.len(),
                "warm standby: starting controllers before leading; they reconcile once this replica leads"
            );
        }
        for r in warm {
            running.leader.spawn(r, running.leader_stop.clone());
        }
        running.waiting = Some(cold);
        running
    }

    /// With an election, every runnable that takes the gate gets it (so a leader whose
    /// leadership runs out stops taking work at once, whatever else is going on); with warm
    /// standby those start now, before this replica leads, and wait on it. Returns the
    /// runnables to start now and those to start once leading.
    fn gate_leader_runnables(&self, leader: Vec<Box<dyn Runnable>>) -> (Runnables, Runnables) {
        let Some(election) = &self.election else {
            return (Vec::new(), leader);
        };
        let gate = LeaderGate::new(election.validity());
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
        let mut stuck = Vec::new();
        running.leader_stop.stop(deadline);
        stuck.extend(running.leader.drain(deadline, &mut failure).await);
        // Leadership is given up (released, if configured) only once nothing that needs it
        // runs.
        if running.campaign.give_up().await && failure.is_none() {
            failure = Some(Error::LeadershipLost);
        }
        running.plain_stop.stop(deadline);
        stuck.extend(running.plain.drain(deadline, &mut failure).await);
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
        *self.stop_deadline.get_or_init(|| {
            let now = tokio::time::Instant::now();
            match self.graceful_shutdown {
                GracefulShutdown::After(d) => Some(now + d),
                GracefulShutdown::Immediately => Some(now),
                GracefulShutdown::Forever => None,
            }
        })
    }
}

/// Starts a server, naming it in the error if its address is unavailable.
async fn listen(
    what: &'static str,
    addr: SocketAddr,
    routes: Routes,
) -> Result<ServerHandle, Error> {
    serve(addr, routes)
        .await
        .map_err(|source| Error::Bind { what, addr, source })
}

impl Running<'_> {
    /// Seeks leadership and waits for the first reason to stop: `cancel` (`None`), a failed
    /// election, lost leadership, or a runnable's error.
    async fn supervise(&mut self, cancel: &CancellationToken) -> Option<Error> {
        loop {
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
                    if let Some(error) = ended {
                        return Some(error);
                    }
                }
                Some(ended) = self.plain.join_next(), if !self.plain.is_empty() => {
                    if let Some(error) = ended {
                        return Some(error);
                    }
                }
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
            self.leader.spawn(r, self.leader_stop.clone());
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
