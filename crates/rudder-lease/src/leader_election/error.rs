//! Errors of leader election: bad settings, an acquire that was cancelled, leadership lost.

use std::time::Duration;

/// Settings that [`LeaderElectionConfig::validate`](super::LeaderElectionConfig::validate)
/// rejects. Fix the settings; retrying does not help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The Lease's name is empty.
    #[error("leader election needs a lease name")]
    EmptyLeaseName,

    /// The Lease's namespace is empty.
    #[error("leader election needs a lease namespace")]
    EmptyLeaseNamespace,

    /// The identity is empty; an empty holder means "nobody" in a Lease.
    #[error("leader election needs a non-empty identity")]
    EmptyIdentity,

    /// The lease duration is under one second, the Lease's unit.
    #[error("lease duration {0:?} must be at least 1s")]
    LeaseDurationTooShort(Duration),

    /// The lease duration in seconds does not fit the Lease's 32-bit field.
    #[error("lease duration {0:?} is too long")]
    LeaseDurationTooLong(Duration),

    /// The retry period is zero.
    #[error("retry period must be greater than zero")]
    ZeroRetryPeriod,

    /// The lease duration is not longer than the renew deadline, so the lease could expire
    /// for the others while the leader still believes it leads.
    #[error(
        "lease duration {lease_duration:?} must be greater than renew deadline {renew_deadline:?}"
    )]
    LeaseNotLongerThanRenewDeadline {
        /// The lease duration.
        lease_duration: Duration,
        /// The renew deadline.
        renew_deadline: Duration,
    },

    /// The renew deadline is not longer than the retry period times the jitter factor (1.2,
    /// as in client-go), leaving no room for a retry.
    #[error(
        "renew deadline {renew_deadline:?} must be greater than retry period {retry_period:?} times 1.2"
    )]
    RenewDeadlineTooShort {
        /// The renew deadline.
        renew_deadline: Duration,
        /// The retry period.
        retry_period: Duration,
    },
}

/// Errors of [`LeaderElection::acquire`](super::LeaderElection::acquire).
///
/// Failed requests to the API server are not errors here: they count as failed attempts,
/// are logged, and are retried after the retry period, as in client-go.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The cancellation token fired before this candidate became the leader.
    #[error("cancelled before acquiring lease {namespace}/{name}")]
    Cancelled {
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        name: String,
    },
}

/// The leader could not renew its Lease within the renew deadline (the API server was
/// unreachable, or another candidate took the Lease over), so it no longer leads.
///
/// Everything that needs leadership must stop at once, as another process may already be
/// leading. The process should exit (and be restarted) rather than try to lead again: it
/// cannot know what its leader-only work left half done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("leadership of lease {namespace}/{name} lost by {identity}")]
pub struct LeadershipLost {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This candidate's identity.
    pub identity: String,
}

/// The result of [`LeaderElection::acquire`](super::LeaderElection::acquire).
pub type Result<T, E = Error> = std::result::Result<T, E>;
