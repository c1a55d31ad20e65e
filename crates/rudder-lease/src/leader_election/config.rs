//! The elector's settings: which Lease, who we are, and the three timings.

use std::time::Duration;

use super::error::ConfigError;
use super::random_u64;

/// client-go's `JitterFactor`: waits between acquire attempts last the retry period plus up to
/// this many retry periods more, and the renew deadline must exceed the longest such wait.
pub const JITTER_FACTOR: f64 = 1.2;

/// Settings of a [`LeaderElection`](super::LeaderElection).
///
/// The defaults are client-go's and controller-runtime's: lease 15 s, renew deadline 10 s,
/// retry period 2 s, no release on cancel, and an identity made of the hostname and a random
/// suffix ([`default_identity`]). Beyond client-go, a waiting candidate also watches the Lease
/// ([`with_watch`](Self::with_watch)).
#[derive(Clone, Debug)]
pub struct LeaderElectionConfig {
    lease_name: String,
    lease_namespace: String,
    identity: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    release_on_cancel: bool,
    watch: bool,
}

impl LeaderElectionConfig {
    /// Settings for the Lease `name` in `namespace`, with the defaults for everything else.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            lease_name: name.into(),
            lease_namespace: namespace.into(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: false,
            watch: true,
        }
    }

    /// Sets the identity written as the Lease's holder; it must be unique among the
    /// candidates, or two of them would both believe they lead.
    #[must_use]
    pub fn with_identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// Sets how long other candidates wait, after they last saw the Lease change, before
    /// taking it over. It is written in whole seconds, rounded up.
    #[must_use]
    pub fn with_lease_duration(mut self, duration: Duration) -> Self {
        self.lease_duration = duration;
        self
    }

    /// Sets how long the leader keeps trying to renew before it gives up leadership.
    #[must_use]
    pub fn with_renew_deadline(mut self, deadline: Duration) -> Self {
        self.renew_deadline = deadline;
        self
    }

    /// Sets the wait between attempts to acquire or renew.
    #[must_use]
    pub fn with_retry_period(mut self, period: Duration) -> Self {
        self.retry_period = period;
        self
    }

    /// Sets whether the leader clears the Lease's holder when it is cancelled, so that a
    /// successor takes over at once (one that watches the Lease, see
    /// [`with_watch`](Self::with_watch)) or at its next retry (one that only polls) instead
    /// of waiting out the lease. Only safe when
    /// everything that needs leadership has stopped before the cancellation.
    #[must_use]
    pub fn with_release_on_cancel(mut self, release: bool) -> Self {
        self.release_on_cancel = release;
        self
    }

    /// Sets whether a candidate that does not lead watches its Lease (on by default), besides
    /// polling it every retry period. With the watch, a Lease that is released (its holder
    /// emptied) or deleted is tried at once, so a successor takes over within milliseconds of
    /// a release instead of at its next retry (up to 2.2 retry periods). The watch changes
    /// nothing in what is written, so candidates with and without it (and client-go's) share
    /// a Lease safely; off, the elector polls exactly as client-go's does.
    ///
    /// The watch needs the `list` and `watch` verbs on `leases` in the Lease's namespace (a
    /// field-selected list and watch of the one Lease). Without them, or when the watch fails,
    /// it is retried with a backoff (0.8 s doubling up to 30 s) and polling goes on meanwhile.
    #[must_use]
    pub fn with_watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// Whether a candidate that does not lead watches its Lease.
    pub fn watch(&self) -> bool {
        self.watch
    }

    /// The Lease's name.
    pub fn lease_name(&self) -> &str {
        &self.lease_name
    }

    /// The Lease's namespace.
    pub fn lease_namespace(&self) -> &str {
        &self.lease_namespace
    }

    /// The identity written as the Lease's holder.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The lease duration.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// The renew deadline.
    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    /// The retry period.
    pub fn retry_period(&self) -> Duration {
        self.retry_period
    }

    /// Whether the leader releases the Lease when cancelled.
    pub fn release_on_cancel(&self) -> bool {
        self.release_on_cancel
    }

    /// Checks the settings as client-go does: names and identity non-empty, lease duration at
    /// least one second and longer than the renew deadline, renew deadline longer than
    /// [`JITTER_FACTOR`] retry periods, retry period not zero.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_name.is_empty() {
            return Err(ConfigError::EmptyLeaseName);
        }
        if self.lease_namespace.is_empty() {
            return Err(ConfigError::EmptyLeaseNamespace);
        }
        if self.identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err(ConfigError::LeaseDurationTooShort(self.lease_duration));
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::ZeroRetryPeriod);
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::LeaseNotLongerThanRenewDeadline {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
            });
        }
        if self.renew_deadline.as_secs_f64() <= self.retry_period.as_secs_f64() * JITTER_FACTOR {
            return Err(ConfigError::RenewDeadlineTooShort {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        if self.lease_duration_seconds().is_none() {
            return Err(ConfigError::LeaseDurationTooLong(self.lease_duration));
        }
        Ok(())
    }

    /// The lease duration as written in the Lease: whole seconds, rounded up.
    pub(crate) fn lease_duration_seconds(&self) -> Option<i32> {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs).ok()
    }
}

/// The default identity: the hostname (the `HOSTNAME` variable, else `/etc/hostname`, else
/// `rudder`), an underscore and eight random hexadecimal digits, so that two processes on one
/// host (or a restarted pod) are different candidates.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "rudder".to_owned());
    format!("{host}_{:08x}", random_u64() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_client_gos_and_valid() {
        let config = LeaderElectionConfig::new("ns", "lease");
        assert_eq!(config.lease_duration(), Duration::from_secs(15));
        assert_eq!(config.renew_deadline(), Duration::from_secs(10));
        assert_eq!(config.retry_period(), Duration::from_secs(2));
        assert!(!config.release_on_cancel());
        assert!(config.watch());
        assert!(config.validate().is_ok());
        assert_eq!(config.lease_duration_seconds(), Some(15));
    }

    #[test]
    fn default_identities_differ_in_their_suffix() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b);
        let suffix = a.rsplit('_').next().unwrap_or_default();
        assert_eq!(suffix.len(), 8);
        assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn sub_second_lease_durations_round_up() {
        let config = LeaderElectionConfig::new("ns", "lease")
            .with_lease_duration(Duration::from_millis(2500));
        assert_eq!(config.lease_duration_seconds(), Some(3));
    }
}
