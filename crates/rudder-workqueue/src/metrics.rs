//! Queue metrics: a small provider trait, and client-go's metric names.
//!
//! The queue keeps no global state: it reports to the [`QueueMetrics`] its
//! [`MetricsProvider`] made for it when it was built. With the `metrics` feature,
//! `MetricsCrateProvider` reports through the `metrics` crate
//! (and so to a Prometheus exporter) under client-go's names:
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `workqueue_depth` | gauge | keys ready and waiting for a worker |
//! | `workqueue_adds_total` | counter | adds that put a new key into the queue |
//! | `workqueue_queue_duration_seconds` | histogram | time a key waited, from ready to handed out |
//! | `workqueue_work_duration_seconds` | histogram | time a worker held a key |
//! | `workqueue_unfinished_work_seconds` | gauge | sum of the time in-flight keys have been held |
//! | `workqueue_longest_running_processor_seconds` | gauge | the longest an in-flight key has been held |
//! | `workqueue_retries_total` | counter | rate-limited adds |
//!
//! All are labelled with the queue's `name`.

use std::time::Duration;

/// Creates the metric sinks of one named queue.
pub trait MetricsProvider: Send + Sync {
    /// The sink for the queue called `name`; called once, when the queue is built.
    fn queue_metrics(&self, name: &str) -> Box<dyn QueueMetrics>;
}

/// Receives one queue's measurements. Calls are made outside the queue's lock and must not
/// block.
pub trait QueueMetrics: Send + Sync {
    /// The number of ready keys changed to `depth`.
    fn set_depth(&self, depth: usize);
    /// A key that was not in the queue was added.
    fn add(&self);
    /// A key was handed to a worker after waiting `waited` since it became ready.
    fn queue_latency(&self, waited: Duration);
    /// A worker finished a key it held for `held`.
    fn work_duration(&self, held: Duration);
    /// Periodic: the summed and the longest time the keys now in flight have been held.
    fn unfinished_work(&self, total: Duration, longest: Duration);
    /// A rate-limited add.
    fn retry(&self);
}

/// How often the unfinished-work gauges are refreshed, client-go's period.
pub const UNFINISHED_WORK_UPDATE_PERIOD: Duration = Duration::from_millis(500);
