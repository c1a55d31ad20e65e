//! controller-runtime's reconcile metrics, through the `metrics` crate.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `controller_runtime_reconcile_total` | counter | `controller`, `result` (`success`, `error`, `requeue`, `requeue_after`) |
//! | `controller_runtime_reconcile_errors_total` | counter | `controller` |
//! | `controller_runtime_terminal_reconcile_errors_total` | counter | `controller` |
//! | `controller_runtime_reconcile_panics_total` | counter | `controller` |
//! | `controller_runtime_reconcile_time_seconds` | histogram | `controller` |
//! | `controller_runtime_max_concurrent_reconciles` | gauge | `controller` |
//! | `controller_runtime_active_workers` | gauge | `controller` |
//! | `rudder_controller_write_wait_seconds` | histogram | `controller`: how long keys were held back until the cache had the writes of their last reconcile ([read-your-writes](crate#reading-your-own-writes)) |
//! | `rudder_controller_write_wait_timeouts_total` | counter | `controller`: keys reconciled anyway because their own writes did not arrive within the bound |
//! | `rudder_controller_writes_pending` | gauge | `controller`: writes of its reconciles the cache has not delivered yet |
//! | `rudder_shard_reconciles_cancelled_total` | counter | `controller`: reconciles of a sharded controller cancelled because this replica's hold on the key's shard passed while they ran (reported from the first one on; each also counts as a `result="error"` reconcile and in `controller_runtime_reconcile_errors_total`) |
//!
//! The work queue's metrics (`workqueue_*`) carry `name` and `controller`, both the
//! controller's name. A controller serving one member cluster of a fleet
//! ([`Options::cluster`](crate::Options::cluster)) adds a `cluster` label to each of them,
//! so the instances of one controller in several clusters report apart.
//!
//! # When the series exist
//!
//! A controller makes its handles (its own and its work queue's) when it starts to
//! [`run`](crate::Controller::run), not when it is built, so a controller built before the
//! process installs its recorder still reports to it. Its series appear at start, at zero.
//! [`describe`] gives a recorder every help text and unit; [`HISTOGRAM_BUCKETS`] gives an
//! exporter controller-runtime's buckets for every histogram here and in the work queue
//! (without them, `metrics-exporter-prometheus` exports a summary). `rudder-manager` uses
//! both when it installs its recorder.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Unit};
use rudder_workqueue::metrics::MetricsProvider;
use rudder_workqueue::metrics::QueueMetrics;
use rudder_workqueue::metrics_crate as workqueue;
use rudder_workqueue::metrics_crate::MetricsCrateProvider;

/// `controller_runtime_reconcile_total{controller, result}`.
pub const RECONCILE_TOTAL: &str = "controller_runtime_reconcile_total";
/// `controller_runtime_reconcile_errors_total{controller}`.
pub const RECONCILE_ERRORS_TOTAL: &str = "controller_runtime_reconcile_errors_total";
/// `controller_runtime_terminal_reconcile_errors_total{controller}`.
pub const TERMINAL_RECONCILE_ERRORS_TOTAL: &str =
    "controller_runtime_terminal_reconcile_errors_total";
/// `controller_runtime_reconcile_panics_total{controller}`.
pub const RECONCILE_PANICS_TOTAL: &str = "controller_runtime_reconcile_panics_total";
/// `controller_runtime_reconcile_time_seconds{controller}`, a histogram.
pub const RECONCILE_TIME_SECONDS: &str = "controller_runtime_reconcile_time_seconds";
/// `controller_runtime_max_concurrent_reconciles{controller}`.
pub const MAX_CONCURRENT_RECONCILES: &str = "controller_runtime_max_concurrent_reconciles";
/// `controller_runtime_active_workers{controller}`.
pub const ACTIVE_WORKERS: &str = "controller_runtime_active_workers";

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`.
pub const RECONCILE_TIME_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Every histogram a controller reports (its work queue's included), with controller-runtime's
/// buckets.
pub const HISTOGRAM_BUCKETS: &[(&str, &[f64])] = &[
    (RECONCILE_TIME_SECONDS, RECONCILE_TIME_BUCKETS),
    (WRITE_WAIT_SECONDS, WRITE_WAIT_BUCKETS),
    (
        workqueue::QUEUE_DURATION_SECONDS,
        workqueue::DURATION_BUCKETS,
    ),
    (
        workqueue::WORK_DURATION_SECONDS,
        workqueue::DURATION_BUCKETS,
    ),
];

/// Reconciles of a sharded controller cancelled because the replica's hold on the key's
/// shard passed while they ran.
pub const SHARD_CANCELLED_TOTAL: &str = "rudder_shard_reconciles_cancelled_total";

/// `rudder_controller_write_wait_seconds{controller}`, a histogram: how long a key was held
/// back for the cache to deliver the writes of its last reconcile (read-your-writes).
pub const WRITE_WAIT_SECONDS: &str = "rudder_controller_write_wait_seconds";
/// `rudder_controller_write_wait_timeouts_total{controller}`: keys reconciled anyway because
/// the cache had not delivered their own writes within the bound.
pub const WRITE_WAIT_TIMEOUTS_TOTAL: &str = "rudder_controller_write_wait_timeouts_total";
/// `rudder_controller_writes_pending{controller}`: writes of the controller's reconciles the
/// cache has not delivered yet.
pub const WRITES_PENDING: &str = "rudder_controller_writes_pending";

/// `rudder_controller_reconcile_triggers_total{controller,source,event}`: reconciles by what
/// first queued their key since it last ran (its [`Cause`](rudder_core::cause::Cause)): the watch
/// (`for`, `owns`, `watches`, or a name the builder gave it) and the event (`create`,
/// `update`, `delete`, `generic`, `initial`), or `requeue`/`requeue`,
/// `requeue`/`requeue_after`, `retry`/`error`, `retry`/`panic`, `handoff`/`handoff`, and
/// `unknown`/`unknown` when nothing was recorded for the key.
pub const RECONCILE_TRIGGERS_TOTAL: &str = "rudder_controller_reconcile_triggers_total";

/// Buckets of `rudder_controller_write_wait_seconds`: from a loopback watch's milliseconds
/// to the default bound (5 s) and past it.
pub const WRITE_WAIT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Describes every metric a controller reports, its work queue's included (help text and
/// unit), to the recorder current at this call. A controller calls it when it starts; a
/// process that installs its recorder later calls it then (`rudder-manager` does). Calling it
/// again is harmless.
pub fn describe() {
    workqueue::describe();
    metrics::describe_counter!(
        RECONCILE_TOTAL,
        "Total number of reconciliations per controller, by result."
    );
    metrics::describe_counter!(
        RECONCILE_ERRORS_TOTAL,
        "Total number of reconciliation errors per controller."
    );
    metrics::describe_counter!(
        TERMINAL_RECONCILE_ERRORS_TOTAL,
        "Total number of terminal reconciliation errors per controller."
    );
    metrics::describe_counter!(
        RECONCILE_PANICS_TOTAL,
        "Total number of reconciliation panics per controller."
    );
    metrics::describe_histogram!(
        RECONCILE_TIME_SECONDS,
        Unit::Seconds,
        "Length of time per reconciliation per controller."
    );
    metrics::describe_gauge!(
        MAX_CONCURRENT_RECONCILES,
        "Maximum number of concurrent reconciles per controller."
    );
    metrics::describe_gauge!(
        ACTIVE_WORKERS,
        "Number of currently used workers per controller."
    );
    metrics::describe_counter!(
        SHARD_CANCELLED_TOTAL,
        "Total number of reconciles of a sharded controller cancelled because this \
         replica's hold on the key's shard passed while they ran."
    );
    metrics::describe_histogram!(
        WRITE_WAIT_SECONDS,
        Unit::Seconds,
        "Time a key was held back until the cache had the writes of its last reconcile."
    );
    metrics::describe_counter!(
        WRITE_WAIT_TIMEOUTS_TOTAL,
        "Total number of keys reconciled before the cache had their own writes, because \
         the wait for them timed out."
    );
    metrics::describe_counter!(
        RECONCILE_TRIGGERS_TOTAL,
        "Total number of reconciles per controller, by the source and event that first \
         queued their key."
    );
    metrics::describe_gauge!(
        WRITES_PENDING,
        "Number of writes of the controller's reconciles the cache has not delivered yet."
    );
}

const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

/// A trigger's labels: its source and event.
type Trigger = (Box<str>, &'static str);

/// One controller's metric handles, resolved once, when it starts.
pub(crate) struct Metrics {
    totals: [Counter; 4],
    errors: Counter,
    terminal: Counter,
    panics: Counter,
    time: Histogram,
    max_concurrent: Gauge,
    active: Gauge,
    /// The controller's (and cluster's) labels, for the triggers' counters.
    labels: Vec<metrics::Label>,
    /// `rudder_controller_reconcile_triggers_total` by (source, event), resolved once each:
    /// the first [`TRIGGER_SLOTS`] read without a lock, the rest under one.
    triggers: [OnceLock<(Trigger, Counter)>; TRIGGER_SLOTS],
    /// The (source, event) pairs past the slots, and the lock under which a slot is filled.
    more_triggers: std::sync::Mutex<Vec<(Trigger, Counter)>>,
}

/// How many (source, event) pairs of a controller's trigger counter are found without a
/// lock: a controller's watches times the event kinds, and the worker's own sources.
const TRIGGER_SLOTS: usize = 16;

/// Whether `key` is the pair (`source`, `event`): the event (a `&'static str`, nearly always
/// the same constant) compared by address first.
#[inline]
fn is_trigger(key: &Trigger, source: &str, event: &'static str) -> bool {
    (std::ptr::eq(key.1, event) || key.1 == event) && &*key.0 == source
}

impl Metrics {
    pub(crate) fn new(controller: &str, cluster: Option<&str>) -> Self {
        let mut labels = vec![metrics::Label::new("controller", controller.to_owned())];
        if let Some(cluster) = cluster {
            labels.push(metrics::Label::new("cluster", cluster.to_owned()));
        }
        let totals = RESULTS.map(|result| {
            let mut labels = labels.clone();
            labels.push(metrics::Label::new("result", result));
            let counter = metrics::counter!(RECONCILE_TOTAL, labels);
            // Present from the start, at zero, as in controller-runtime.
            counter.increment(0);
            counter
        });
        let counter = |name: &'static str| {
            let counter = metrics::counter!(name, labels.clone());
            counter.increment(0);
            counter
        };
        Self {
            totals,
            errors: counter(RECONCILE_ERRORS_TOTAL),
            terminal: counter(TERMINAL_RECONCILE_ERRORS_TOTAL),
            panics: counter(RECONCILE_PANICS_TOTAL),
            time: metrics::histogram!(RECONCILE_TIME_SECONDS, labels.clone()),
            max_concurrent: metrics::gauge!(MAX_CONCURRENT_RECONCILES, labels.clone()),
            active: metrics::gauge!(ACTIVE_WORKERS, labels.clone()),
            labels,
            triggers: std::array::from_fn(|_| OnceLock::new()),
            more_triggers: std::sync::Mutex::default(),
        }
    }

    /// Counts a reconcile first queued by `source`'s `event`: its counter's handle found
    /// among those resolved before, without a lock (an atomic load a slot) for the first
    /// [`TRIGGER_SLOTS`] pairs; a new pair's handle is registered once, under the lock.
    pub(crate) fn triggered(&self, source: &str, event: &'static str) {
        use rudder_core::sync::LockExt;
        for slot in &self.triggers {
            match slot.get() {
                Some((key, counter)) if is_trigger(key, source, event) => {
                    counter.increment(1);
                    return;
                }
                Some(_) => {}
                // Slots are filled in order: the pair is in none of them.
                None => break,
            }
        }
        // Filled under the lock, so a pair is registered once.
        let mut more = self.more_triggers.lock_unpoisoned();
        for slot in &self.triggers {
            match slot.get() {
                Some((key, counter)) if is_trigger(key, source, event) => {
                    counter.increment(1);
                    return;
                }
                Some(_) => {}
                None => {
                    let (_, counter) = slot.get_or_init(|| self.trigger(source, event));
                    counter.increment(1);
                    return;
                }
            }
        }
        if let Some((_, counter)) = more.iter().find(|(key, _)| is_trigger(key, source, event)) {
            counter.increment(1);
            return;
        }
        let (key, counter) = self.trigger(source, event);
        counter.increment(1);
        more.push((key, counter));
    }

    /// The handle of `rudder_controller_reconcile_triggers_total` for (`source`, `event`).
    fn trigger(&self, source: &str, event: &'static str) -> (Trigger, Counter) {
        let mut labels = self.labels.clone();
        labels.push(metrics::Label::new("source", source.to_owned()));
        labels.push(metrics::Label::new("event", event));
        let counter = metrics::counter!(RECONCILE_TRIGGERS_TOTAL, labels);
        ((source.into(), event), counter)
    }

    pub(crate) fn reconciled(&self, result: &str) {
        if let Some(i) = RESULTS.iter().position(|r| *r == result) {
            self.totals[i].increment(1);
        }
    }

    pub(crate) fn error(&self) {
        self.errors.increment(1);
    }

    pub(crate) fn terminal_error(&self) {
        self.terminal.increment(1);
    }

    pub(crate) fn panic(&self) {
        self.panics.increment(1);
    }

    pub(crate) fn reconcile_time(&self, took: Duration) {
        self.time.record(took.as_secs_f64());
    }

    pub(crate) fn set_max_concurrent(&self, workers: usize) {
        self.max_concurrent.set(workers as f64);
    }

    pub(crate) fn active_workers(&self, delta: f64) {
        self.active.increment(delta);
    }
}

/// The work queue's metrics of one controller, made when the controller starts.
///
/// The queue is built with the controller and asks its provider for a sink then; this
/// provider hands it one that reports nowhere until [`bind`](Self::bind), which the
/// controller calls as it starts, so the queue's handles come from the recorder installed by
/// then, not the one (often none) that existed when the controller was declared.
#[derive(Clone)]
pub(crate) struct DeferredQueueMetrics {
    controller: Arc<str>,
    cluster: Option<Arc<str>>,
    sink: Arc<OnceLock<Box<dyn QueueMetrics>>>,
}

impl DeferredQueueMetrics {
    pub(crate) fn new(controller: &str, cluster: Option<Arc<str>>) -> Self {
        Self {
            controller: Arc::from(controller),
            cluster,
            sink: Arc::default(),
        }
    }

    /// Makes the queue's handles against the current recorder (once; later calls keep the
    /// first), and reports the queue's depth now, as the gauge would have shown it.
    pub(crate) fn bind(&self, depth: usize) {
        let sink = self.sink.get_or_init(|| {
            let mut provider =
                MetricsCrateProvider::new().label("controller", self.controller.to_string());
            if let Some(cluster) = &self.cluster {
                provider = provider.label("cluster", cluster.to_string());
            }
            provider.queue_metrics(&self.controller)
        });
        sink.set_depth(depth);
    }
}

impl MetricsProvider for DeferredQueueMetrics {
    fn queue_metrics(&self, _name: &str) -> Box<dyn QueueMetrics> {
        Box::new(Deferred(Arc::clone(&self.sink)))
    }
}

/// A sink that forwards to the one bound at start, and drops what comes before.
struct Deferred(Arc<OnceLock<Box<dyn QueueMetrics>>>);

impl QueueMetrics for Deferred {
    fn set_depth(&self, depth: usize) {
        if let Some(sink) = self.0.get() {
            sink.set_depth(depth);
        }
    }
    fn add(&self) {
        if let Some(sink) = self.0.get() {
            sink.add();
        }
    }
    fn queue_latency(&self, waited: Duration) {
        if let Some(sink) = self.0.get() {
            sink.queue_latency(waited);
        }
    }
    fn work_duration(&self, held: Duration) {
        if let Some(sink) = self.0.get() {
            sink.work_duration(held);
        }
    }
    fn unfinished_work(&self, total: Duration, longest: Duration) {
        if let Some(sink) = self.0.get() {
            sink.unfinished_work(total, longest);
        }
    }
    fn retry(&self) {
        if let Some(sink) = self.0.get() {
            sink.retry();
        }
    }
}
