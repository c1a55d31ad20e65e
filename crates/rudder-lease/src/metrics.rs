//! The metrics of leader election and sharding, described for whichever recorder is
//! current when [`describe`] is called (the manager calls it right after installing its
//! own), with the buckets of the one histogram.

use crate::leader_election::LEADER_ELECTION_MASTER_STATUS;

/// The sharding ring's histogram (`rudder_shard_rebalance_seconds`), with its buckets.
pub const HISTOGRAM_BUCKETS: &[(&str, &[f64])] = &[(
    crate::sharding::REBALANCE_SECONDS,
    crate::sharding::REBALANCE_BUCKETS,
)];

/// Describes leader election's gauge and every metric of a sharding ring to the recorder
/// current at this call. Calling it again is harmless.
pub fn describe() {
    crate::sharding::describe();
    metrics::describe_gauge!(
        LEADER_ELECTION_MASTER_STATUS,
        "Whether this process leads the Lease `name`: 1 while leading, 0 otherwise."
    );
}
