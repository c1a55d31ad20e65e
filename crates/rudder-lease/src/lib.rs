//! Lease coordination: replicas of a controller agreeing, through `coordination.k8s.io/v1`
//! Leases, on who leads ([`leader_election`]) and who owns which shard of the keys
//! ([`sharding`]).
//!
//! Start with [`leader_election::LeaderElection`] for one leader among replicas, or
//! [`sharding::Ring`] to spread one controller's keys across them. The manager
//! (`rudder-manager`) runs both for you; this crate has them without it.
//!
//! ```no_run
//! use rudder_lease::leader_election::{LeaderElection, LeaderElectionConfig};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let election = LeaderElection::new(
//!     client,
//!     LeaderElectionConfig::new("operators", "my-operator-lock").with_release_on_cancel(true),
//! )?;
//! let stop = CancellationToken::new();
//! let leadership = election.acquire(stop.clone()).await?;
//! // Leader-only work runs while `election.validity()` says the lease is still ours.
//! stop.cancel();
//! leadership.finished().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # One set of Lease rules
//!
//! Leader election and sharding judge a Lease the same way, in one place
//! (`leader_election/record.rs`): client-go's record, expiry judged by the local time the
//! record was last seen to change, every write carrying the resourceVersion it read. A
//! shard is a Lease held by a [`LeaderElection`](leader_election::LeaderElection), so
//! what holds for a leader holds for a shard's owner: it admits work only while its last
//! successful renewal is younger than the lease.
//!
//! # Where sharding's halves are
//!
//! The ring (membership, assignment, shard Leases) is [`sharding`], here. The worker side,
//! the [`ShardGate`](rudder_controller::ShardGate) that admits a key only while its shard
//! is open, is in `rudder-controller` (`shard.rs`), since the controller's workers consult
//! it and this crate depends on the controller, not the reverse. The manager runs a
//! [`Ring`](sharding::Ring) as a runnable (`rudder-manager`'s `ring.rs`), and the facade's
//! `ControllerBuilder::sharded` wires a ring, a gate and (in label mode) the shard-label
//! writer to a controller.
//!
//! # Metrics
//!
//! `leader_election_master_status{name}` and the ring's `rudder_shard_*` series; the
//! descriptions and the one histogram's buckets are in [`metrics`].

// Unit tests may spawn: the test is the owner. The library build keeps clippy's
// `disallowed_methods` (clippy.toml: a spawn is owned by whoever joins it).
#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests may spawn: the test owns its tasks"
    )
)]

pub mod leader_election;
pub mod metrics;
pub mod sharding;
