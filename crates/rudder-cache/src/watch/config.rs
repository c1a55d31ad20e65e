//! [`Config`]: what one engine lists and watches, and how.

use std::time::Duration;

use rudder_core::backoff::Backoff;

use super::strategy::{DEFAULT_INITIAL_EVENTS_BOUND, DEFAULT_STREAMING_RETRY, ListStrategy};
use super::wire::WireFormat;

/// The default of [`Config::silence_bound`] past the server's own watch timeout: the server
/// sends a bookmark about every minute, so a healthy watch is never this silent.
pub const SILENCE_MARGIN: Duration = Duration::from_secs(30);

/// What one engine lists and watches, and how.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// A label selector in the API server's syntax.
    pub labels: Option<String>,
    /// A field selector in the API server's syntax.
    pub fields: Option<String>,
    /// The server-side timeout of each watch request, in seconds (the server ends the watch
    /// then, and the engine resumes it).
    pub timeout: u32,
    /// Objects per page of a paginated list.
    pub page_size: u32,
    /// How to list.
    pub strategy: ListStrategy,
    /// See [`ListStrategy::Streaming`].
    pub initial_events_bound: Duration,
    /// See [`ListStrategy::Streaming`].
    pub streaming_retry: Duration,
    /// How long a watch may send nothing at all before it is dropped and resumed; `None`
    /// (the default) for the watch's timeout plus [`SILENCE_MARGIN`] (see
    /// [`Config::effective_silence_bound`]).
    pub silence_bound: Option<Duration>,
    /// The waits after errors.
    pub backoff: Backoff,
    /// How lists and watches are encoded: protobuf for built-in types by default.
    pub wire: WireFormat,
    /// Whether protobuf decoding skips `metadata.managedFields` unread (an informer whose
    /// transform drops them anyway).
    pub(crate) skip_managed_fields: bool,
}

impl Default for Config {
    fn default() -> Self {
        let timeout = 290;
        Self {
            labels: None,
            fields: None,
            timeout,
            page_size: 500,
            strategy: ListStrategy::default(),
            initial_events_bound: DEFAULT_INITIAL_EVENTS_BOUND,
            streaming_retry: DEFAULT_STREAMING_RETRY,
            silence_bound: None,
            backoff: Backoff::default(),
            wire: WireFormat::default(),
            skip_managed_fields: false,
        }
    }
}

impl Config {
    /// Only objects whose labels match `selector`.
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.labels = Some(selector.to_owned());
        self
    }

    /// Only objects whose fields match `selector`.
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.fields = Some(selector.to_owned());
        self
    }

    /// How to list.
    #[must_use]
    pub fn strategy(mut self, strategy: ListStrategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// The server-side timeout of each watch request, in seconds (at least 1: a `0` would
    /// leave the timeout to the server, and the silence bound would no longer follow it);
    /// the silence bound follows it unless set with [`silence_bound`](Self::silence_bound).
    #[must_use]
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.timeout = seconds.max(1);
        self
    }

    /// How long a watch may send nothing at all before it is dropped and resumed, whatever
    /// the timeout (set before or after this).
    #[must_use]
    pub fn silence_bound(mut self, bound: Duration) -> Self {
        self.silence_bound = Some(bound);
        self
    }

    /// The bound on a watch's silence in effect: [`silence_bound`](Self::silence_bound) if
    /// set, else the watch's timeout plus [`SILENCE_MARGIN`] (the server ends a healthy watch
    /// at its timeout and sends a bookmark about every minute before it).
    pub fn effective_silence_bound(&self) -> Duration {
        self.silence_bound
            .unwrap_or_else(|| Duration::from_secs(self.timeout.into()) + SILENCE_MARGIN)
    }

    /// The waits after errors.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How lists and watches are encoded ([`WireFormat::Protobuf`] by default: protobuf
    /// for the types that have it, JSON for the rest).
    #[must_use]
    pub fn wire(mut self, wire: WireFormat) -> Self {
        self.wire = wire;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silence_bound_survives_a_timeout_set_after_it() {
        let config = Config::default()
            .silence_bound(Duration::from_secs(5))
            .timeout(10);
        assert_eq!(config.effective_silence_bound(), Duration::from_secs(5));
        let config = Config::default().timeout(10);
        assert_eq!(config.effective_silence_bound(), Duration::from_secs(40));
        assert_eq!(Config::default().timeout(0).timeout, 1);
    }
}
