//! [`MetricsProvider`] on the `metrics` crate, under client-go's metric names.

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label};

use crate::{MetricsProvider, QueueMetrics};

/// Reports queue metrics through the `metrics` crate's global recorder, with client-go's
/// names and a `name` label (plus any labels added with [`label`](Self::label)).
///
/// Install a recorder (for example `metrics-exporter-prometheus`) before building queues;
/// handles are resolved once per queue, so the hot path only touches atomics or the
/// recorder's own handle types.
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
            depth: metrics::gauge!("workqueue_depth", labels.clone()),
            adds: metrics::counter!("workqueue_adds_total", labels.clone()),
            latency: metrics::histogram!("workqueue_queue_duration_seconds", labels.clone()),
            work: metrics::histogram!("workqueue_work_duration_seconds", labels.clone()),
            unfinished: metrics::gauge!("workqueue_unfinished_work_seconds", labels.clone()),
            longest: metrics::gauge!(
                "workqueue_longest_running_processor_seconds",
                labels.clone()
            ),
            retries: metrics::counter!("workqueue_retries_total", labels),
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
