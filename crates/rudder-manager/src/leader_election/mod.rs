//! Leader election with a `coordination.k8s.io/v1` Lease, compatible with client-go's.
//!
//! Start with [`LeaderElection::new`] and [`LeaderElection::acquire`]:
//!
//! ```no_run
//! use rudder_manager::leader_election::{LeaderElection, LeaderElectionConfig};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let config = LeaderElectionConfig::new("operators", "my-operator-lock")
//!     .with_release_on_cancel(true);
//! let election = LeaderElection::new(client, config)?;
//! let stop = CancellationToken::new();
//!
//! // Waits until this process leads; a task then keeps renewing the Lease.
//! let leadership = election.acquire(stop.clone()).await?;
//! let work = CancellationToken::new();
//! tokio::select! {
//!     lost = leadership.lost() => {
//!         // Another process may lead already: stop leader-only work and exit.
//!         work.cancel();
//!         return Err(lost.into());
//!     }
//!     () = stop.cancelled() => {}
//! }
//! // Stop the leader-only work first, then let the task release the Lease.
//! work.cancel();
//! leadership.finished().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # The rules (client-go's)
//!
//! The Lease's spec holds the record: `holderIdentity`, `leaseDurationSeconds`,
//! `acquireTime`, `renewTime` and `leaseTransitions`.
//!
//! - **Acquire.** A candidate creates the Lease if there is none. If another candidate holds
//!   it, it waits until the record has not changed for `leaseDurationSeconds`, judged by its
//!   own clock from when it saw the record change (clocks of different machines are never
//!   compared), retrying every retry period plus a jitter of up to 1.2 retry periods. Taking
//!   over writes `acquireTime` now and `leaseTransitions` plus one.
//! - **Renew.** The leader writes `renewTime` every retry period, keeping `acquireTime` and
//!   `leaseTransitions`. Every write carries the `resourceVersion` read, so two candidates
//!   writing at once cannot both win: the loser's write is a conflict, a failed attempt. If
//!   no renewal succeeds within the renew deadline, leadership is lost ([`LeadershipLost`]):
//!   the process should stop its leader-only work and exit.
//! - **Release.** With [`release_on_cancel`](LeaderElectionConfig::with_release_on_cancel),
//!   a leader that is cancelled writes an empty holder (and `leaseDurationSeconds` 1), so a
//!   successor takes over at its next retry instead of waiting out the lease.
//!
//! Defaults: lease 15 s, renew deadline 10 s, retry period 2 s. Without release, a successor
//! takes over between one lease duration and one lease duration plus 2.2 retry periods after
//! the leader's last renewal; with release, within 2.2 retry periods.
//!
//! # Observability
//!
//! The gauge `leader_election_master_status{name="<lease name>"}` is 1 while this process
//! leads and 0 otherwise, as in client-go. Acquiring, failed renewals, the loss and the
//! release are logged with `tracing`.

mod config;
mod elector;
mod error;
#[cfg(test)]
mod fake;
mod record;

pub use config::{JITTER_FACTOR, LeaderElectionConfig, default_identity};
pub use elector::{LeaderElection, Leadership};
pub use error::{ConfigError, Error, LeadershipLost, Result};

/// A random number, good enough for identities and jitter (not for secrets), without a
/// dependency on the operating system's generator: std seeds `RandomState` randomly.
fn random_u64() -> u64 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    std::collections::hash_map::RandomState::new().hash_one((
        nanos,
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed),
    ))
}
