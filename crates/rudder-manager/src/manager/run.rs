//! The start and stop sequence of [`Manager::start`].

use std::net::SocketAddr;
use std::sync::{Arc, PoisonError};

use rudder_controller::{LeaderGate, Shutdown};
use rudder_server::ServerHandle;
use tokio_util::sync::CancellationToken;

use super::group::Group;
use super::{Error, GracefulShutdown, Manager};
use crate::leader_election::Leadership;
use crate::server::{Routes, serve};

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

    async fn run(
        &self,
        cancel: &CancellationToken,
        servers: &mut Vec<ServerHandle>,
    ) -> Result<(), Error> {
        if self.raise_fd_limit {
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
        if let Some(addr) = self.health_address {
            let routes = Routes::Health(self.health.clone());
            let server = listen("health probes", addr, routes).await?;
            self.bound
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .health = Some(server.local_addr());
            servers.push(server);
        }
        if let (Some(addr), Some(handle)) = (self.metrics_address, self.metrics.clone()) {
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
            self.bound
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .metrics = Some(server.local_addr());
            servers.push(server);
        }

        // The webhook server before the cache: a conversion webhook is on the cache's own
        // path (its lists are converted by it), so waiting for the cache first would never
        // end.
        // Self-signed certificates before the webhook server: it must have one to serve.
        #[cfg(feature = "webhook")]
        self.tls.start(&self.client).await?;

        // Caches next: informers created so far (by controllers' sources) list first.
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            synced = self.cache.wait_for_sync(self.cache_sync_timeout) => {
                synced.map_err(Error::CacheSync)?;
            }
        }

        let runnables = std::mem::take(
            &mut *self
                .runnables
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let (leader, plain): (Vec<_>, Vec<_>) = runnables
            .into_iter()
            .partition(|r| r.needs_leader_election());
        let plain_stop = Shutdown::new();
        let leader_stop = Shutdown::new();
        let election_token = CancellationToken::new();
        let mut plain_set = Group::default();
        let mut leader_set = Group::default();
        for r in plain {
            plain_set.spawn(r, plain_stop.clone());
        }
        // With an election, every runnable that takes the gate gets it (so a leader whose
        // leadership runs out stops taking work at once, whatever else is going on); with
        // warm standby those start now, before this replica leads, and wait on it.
        let (warm, cold): (Vec<_>, Vec<_>) = match &self.election {
            Some(election) => {
                let gate = LeaderGate::new(election.validity());
                leader
                    .into_iter()
                    .map(|mut r| (r.set_leader_gate(gate.clone()) && self.warm_standby, r))
                    .partition(|(warm, _)| *warm)
            }
            None => (Vec::new(), leader.into_iter().map(|r| (false, r)).collect()),
        };
        if !warm.is_empty() {
            tracing::info!(
                runnables = warm.len(),
                "warm standby: starting controllers before leading; they reconcile once this replica leads"
            );
        }
        for (_, r) in warm {
            leader_set.spawn(r, leader_stop.clone());
        }
        let mut leader = Some(cold.into_iter().map(|(_, r)| r).collect::<Vec<_>>());
        let mut leadership: Option<Leadership> = None;
        let mut lost: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> =
            Box::pin(std::future::pending());
        let acquiring = async {
            match &self.election {
                Some(election) => election.acquire(election_token.clone()).await.map(Some),
                None => Ok(None),
            }
        };
        let mut acquiring = std::pin::pin!(acquiring);
        let mut electing = true;

        let mut failure = None;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                acquired = &mut acquiring, if electing => {
                    electing = false;
                    match acquired {
                        Ok(held) => {
                            if let Some(held) = held {
                                let signal = held.lost();
                                lost = Box::pin(async move {
                                    signal.await;
                                });
                                leadership = Some(held);
                            }
                            for r in leader.take().into_iter().flatten() {
                                leader_set.spawn(r, leader_stop.clone());
                            }
                        }
                        Err(error) => {
                            failure = Some(Error::LeaderElection(error));
                            break;
                        }
                    }
                }
                () = &mut lost => {
                    tracing::error!("leader election lost: stopping leader-only runnables");
                    failure = Some(Error::LeadershipLost);
                    break;
                }
                Some(ended) = leader_set.join_next(), if !leader_set.is_empty() => {
                    if let Some(error) = ended {
                        failure = Some(error);
                        break;
                    }
                }
                Some(ended) = plain_set.join_next(), if !plain_set.is_empty() => {
                    if let Some(error) = ended {
                        failure = Some(error);
                        break;
                    }
                }
            }
        }
        // One deadline for the whole stop, handed down to every runnable.
        let now = tokio::time::Instant::now();
        let deadline = self.stop_deadline();
        tracing::info!(deadline_in = ?deadline.map(|d| d.saturating_duration_since(now)), "stopping runnables");
        let mut stuck = Vec::new();
        leader_stop.stop(deadline);
        stuck.extend(leader_set.drain(deadline, &mut failure).await);
        // Leadership is given up (released, if configured) only once nothing that needs it
        // runs. An election still in progress is let finish its request, so it can release
        // a Lease it just took.
        election_token.cancel();
        if electing {
            let _ = acquiring.await;
        }
        if let Some(held) = leadership
            && held.finished().await.is_err()
            && failure.is_none()
        {
            failure = Some(Error::LeadershipLost);
        }
        plain_stop.stop(deadline);
        stuck.extend(plain_set.drain(deadline, &mut failure).await);
        if let Some(error) = failure {
            return Err(error);
        }
        match self.graceful_shutdown {
            GracefulShutdown::After(timeout) if !stuck.is_empty() => Err(Error::ShutdownTimeout {
                timeout,
                left: stuck,
            }),
            GracefulShutdown::Immediately if !stuck.is_empty() => {
                tracing::info!(aborted = %stuck.join(", "), "stopped immediately, as configured");
                Ok(())
            }
            _ => Ok(()),
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
