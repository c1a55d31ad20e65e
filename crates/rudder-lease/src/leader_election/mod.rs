//! Leader election with a `coordination.k8s.io/v1` Lease, compatible with client-go's, with
//! takeover in milliseconds and a validity that work needing leadership can check.
//!
//! Start with [`LeaderElection::new`] and [`LeaderElection::acquire`]:
//!
//! ```no_run
//! use rudder_lease::leader_election::{LeaderElection, LeaderElectionConfig};
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
//!   no renewal succeeds within the renew deadline, counted from when the last successful
//!   renewal was sent (not from when the renewing task last ran, so a process frozen past it
//!   sees the loss as soon as it resumes, without sending anything), or if a renewal finds
//!   another candidate holding the Lease, leadership is lost ([`LeadershipLost`]): the
//!   process should stop its leader-only work and exit.
//! - **Release.** With [`release_on_cancel`](LeaderElectionConfig::with_release_on_cancel),
//!   a leader that is cancelled writes an empty holder (and `leaseDurationSeconds` 1), so a
//!   successor takes over at once instead of waiting out the lease.
//!
//! # Beyond client-go
//!
//! - **The watch.** A candidate that does not lead also watches its Lease (a list and watch
//!   selecting its name), and tries at once when the Lease is released or deleted instead of
//!   at its next retry. Polling every retry period goes on beside it, with the rules above,
//!   so an expired Lease is still taken over, and a failing watch (retried with a backoff)
//!   only costs the speed. [`with_watch(false)`](LeaderElectionConfig::with_watch) turns it
//!   off. What is written in the Lease is the same either way. Deleting a held Lease is outside
//!   the protocol, here as in client-go: a candidate then creates it while the old leader
//!   still believes it leads until its next renewal, and with the watch this happens at once.
//! - **The validity.** [`LeaderElection::validity`] says until when this process's leadership
//!   is certain: the instant the last successful acquire or renew request was sent, plus the
//!   lease duration (monotonic clock). No other candidate can take the Lease over before
//!   then, so work that needs leadership may start only while `now < valid_until`, checked
//!   at the moment it starts. This is what keeps a process resumed after a freeze from acting
//!   before its renewing task has run: the validity passed while it was frozen.
//!
//! Candidates with and without the watch, and client-go's, share one Lease safely: what is
//! written and how expiry is judged are the same (the interop test runs them together and
//! checks that their leading intervals never overlap). What Rudder cannot fix is on
//! client-go's side: its elector, resumed after a freeze past its lease, believes it leads
//! for up to its renew deadline (measured with client-go 1.20.2 in `docs/benchmarks.md`).
//!
//! The monotonic clock (`CLOCK_MONOTONIC` on Linux) stops while the whole machine is
//! suspended; the rules above, client-go's included, assume the machines' clocks run alike.
//!
//! # Timings
//!
//! Defaults: lease 15 s, renew deadline 10 s, retry period 2 s. With release, a watching
//! successor holds the Lease within milliseconds of the release (6 to 25 ms over 20 rounds
//! on a local API server, against a median of 2.2 s for client-go's elector:
//! `docs/benchmarks.md`); without the watch, within 2.2 retry periods. Without
//! release (a killed leader), a successor takes over between one lease duration and one lease
//! duration plus 2.2 retry periods after the leader's last renewal. A leader whose renewals
//! fail stops leading at most a renew deadline after its last successful renewal was sent.
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
pub(crate) mod record;

pub use config::{JITTER_FACTOR, LeaderElectionConfig, default_identity};
pub use elector::{LEADER_ELECTION_MASTER_STATUS, LeaderElection, Leadership};
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
