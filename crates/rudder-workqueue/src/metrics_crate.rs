//! [`MetricsProvider`] on the `metrics` crate, under client-go's metric names, and the
//! descriptions and histogram buckets an exporter needs to show them as controller-runtime
//! does.

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label, Unit};

use crate::metrics::{MetricsProvider, QueueMetrics};

/// `workqueue_depth`: keys ready and waiting for a worker.
pub const DEPTH: &str = "workqueue_depth";
/// `workqueue_adds_total`: adds that put a new key into the queue.
pub const ADDS_TOTAL: &str = "workqueue_adds_total";
/// `workqueue_queue_duration_seconds`: time a key waited, from ready to handed out.
pub const QUEUE_DURATION_SECONDS: &str = "workqueue_queue_duration_seconds";
/// `workqueue_work_duration_seconds`: time a worker held a key.
pub const WORK_DURATION_SECONDS: &str = "workqueue_work_duration_seconds";
/// `workqueue_unfinished_work_seconds`: the summed time in-flight keys have been held.
pub const UNFINISHED_WORK_SECONDS: &str = "workqueue_unfinished_work_seconds";
/// `workqueue_longest_running_processor_seconds`: the longest an in-flight key has been held.
pub const LONGEST_RUNNING_PROCESSOR_SECONDS: &str = "workqueue_longest_running_processor_seconds";
/// `workqueue_retries_total`: rate-limited adds.
pub const RETRIES_TOTAL: &str = "workqueue_retries_total";

/// controller-runtime's buckets for both work-queue duration histograms: 10 ns to 1000 s,
/// by factors of 10.
pub const DURATION_BUCKETS: &[f64] = &[
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0,
];

/// Every histogram this crate reports, with its buckets: an exporter that is not given them
/// reports a summary instead, which dashboards querying `_bucket` do not find.
pub const HISTOGRAM_BUCKETS: &[(&str, &[f64])] = &[
    (QUEUE_DURATION_SECONDS, DURATION_BUCKETS),
    (WORK_DURATION_SECONDS, DURATION_BUCKETS),
];

/// Describes every work-queue metric (help text and unit) to the recorder current at this
/// call.
///
/// A recorder keeps the descriptions it was given and shows them beside series made later,
/// so call this once the recorder is installed (`rudder-manager` does, right after it
/// installs its own); a description given to no recorder (before one is installed) is lost.
/// Calling it again is harmless.
pub fn describe() {
    metrics::describe_gauge!(
        DEPTH,
        "Current depth of the work queue: keys ready for a worker."
    );
    metrics::describe_counter!(
        ADDS_TOTAL,
        "Total number of adds handled by the work queue."
    );
    metrics::describe_histogram!(
        QUEUE_DURATION_SECONDS,
        Unit::Seconds,
        "How long in seconds a key stays in the work queue before a worker takes it."
    );
    metrics::describe_histogram!(
        WORK_DURATION_SECONDS,
        Unit::Seconds,
        "How long in seconds processing a key from the work queue takes."
    );
    metrics::describe_gauge!(
        UNFINISHED_WORK_SECONDS,
        Unit::Seconds,
        "How many seconds of work is in progress and not yet observed by work_duration; \
         large values indicate stuck workers."
    );
    metrics::describe_gauge!(
        LONGEST_RUNNING_PROCESSOR_SECONDS,
        Unit::Seconds,
        "How many seconds the longest-running worker of the work queue has held its key."
    );
    metrics::describe_counter!(
        RETRIES_TOTAL,
        "Total number of retries handled by the work queue."
    );
}

/// Reports queue metrics through the `metrics` crate's recorder, with client-go's names and
/// a `name` label (plus any labels added with [`label`](Self::label)).
///
/// A queue's handles are resolved once, when [`queue_metrics`](MetricsProvider::queue_metrics)
/// is called (when the queue is built), against the recorder current then, so the hot path
/// only touches the recorder's own handle types. A queue built before a recorder is installed
/// reports nowhere: install the recorder first, or, as `rudder-controller` does, defer the
/// call to `queue_metrics` until the component that owns the queue starts.
#[derive(Clone, Debug, Default)]
pub struct MetricsCrateProvider {
    labels: Vec<(String, String)>,
}

impl MetricsCrateProvider {
    /// A provider adding only the `name` label.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a constant label to every metric (controller-runtime adds `controller`).
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.push((key.into(), value.into()));
        self
    }
}

struct Sink {
    depth: Gauge,
    adds: Counter,
    latency: Histogram,
    work: Histogram,
    unfinished: Gauge,
    longest: Gauge,
    retries: Counter,
}

impl MetricsProvider for MetricsCrateProvider {
    fn queue_metrics(&self, name: &str) -> Box<dyn QueueMetrics> {
        let mut labels = vec![Label::new("name", name.to_owned())];
        labels.extend(
            self.labels
                .iter()
                .map(|(k, v)| Label::new(k.clone(), v.clone())),
        );
        Box::new(Sink {
            depth: metrics::gauge!(DEPTH, labels.clone()),
            adds: metrics::counter!(ADDS_TOTAL, labels.clone()),
            latency: metrics::histogram!(QUEUE_DURATION_SECONDS, labels.clone()),
            work: metrics::histogram!(WORK_DURATION_SECONDS, labels.clone()),
            unfinished: metrics::gauge!(UNFINISHED_WORK_SECONDS, labels.clone()),
            longest: metrics::gauge!(LONGEST_RUNNING_PROCESSOR_SECONDS, labels.clone()),
            retries: metrics::counter!(RETRIES_TOTAL, labels),
        })
    }
}

impl QueueMetrics for Sink {
    fn set_depth(&self, depth: usize) {
        self.depth.set(depth as f64);
    }
    fn add(&self) {
        self.adds.increment(1);
    }
    fn queue_latency(&self, waited: Duration) {
        self.latency.record(waited.as_secs_f64());
    }
    fn work_duration(&self, held: Duration) {
        self.work.record(held.as_secs_f64());
    }
    fn unfinished_work(&self, total: Duration, longest: Duration) {
        self.unfinished.set(total.as_secs_f64());
        self.longest.set(longest.as_secs_f64());
    }
    fn retry(&self) {
        self.retries.increment(1);
    }
}
