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
//! | `rudder_shard_reconciles_cancelled_total` | counter | `controller`: reconciles of a sharded controller cancelled because this replica's hold on the key's shard passed while they ran (reported from the first one on; each also counts as a `result="error"` reconcile and in `controller_runtime_reconcile_errors_total`) |
//!
//! The work queue's metrics (`workqueue_*`) carry `name` and `controller`, both the
//! controller's name. Histogram buckets are the exporter's to set; use
//! [`RECONCILE_TIME_BUCKETS`] for controller-runtime's.

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`.
pub const RECONCILE_TIME_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Reconciles of a sharded controller cancelled because the replica's hold on the key's
/// shard passed while they ran.
pub const SHARD_CANCELLED_TOTAL: &str = "rudder_shard_reconciles_cancelled_total";

const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

/// One controller's metric handles, resolved once.
pub(crate) struct Metrics {
    totals: [Counter; 4],
    errors: Counter,
    terminal: Counter,
    panics: Counter,
    time: Histogram,
    max_concurrent: Gauge,
    active: Gauge,
}

impl Metrics {
    pub(crate) fn new(controller: &str) -> Self {
        let c = controller.to_owned();
        let totals = RESULTS.map(|result| {
            let counter = metrics::counter!(
                "controller_runtime_reconcile_total",
                "controller" => c.clone(),
                "result" => result
            );
            // Present from the start, at zero, as in controller-runtime.
            counter.increment(0);
            counter
        });
        let counter = |name: &'static str| {
            let counter = metrics::counter!(name, "controller" => c.clone());
            counter.increment(0);
            counter
        };
        Self {
            totals,
            errors: counter("controller_runtime_reconcile_errors_total"),
            terminal: counter("controller_runtime_terminal_reconcile_errors_total"),
            panics: counter("controller_runtime_reconcile_panics_total"),
            time: metrics::histogram!("controller_runtime_reconcile_time_seconds", "controller" => c.clone()),
            max_concurrent: metrics::gauge!("controller_runtime_max_concurrent_reconciles", "controller" => c.clone()),
            active: metrics::gauge!("controller_runtime_active_workers", "controller" => c),
        }
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
