//! The `/metrics` endpoint: every metric reported through the `metrics` crate (work queues,
//! controllers, leader election, webhooks, API requests, sharding) in Prometheus text
//! format, plus the process's own.
//!
//! # Order does not matter
//!
//! A `metrics` handle made before a recorder is installed is bound to the no-op recorder
//! for good, and a description given before then is lost. So no metric here depends on
//! being made after the recorder: controllers make their handles (and their work queues')
//! when they start; the leader-election gauge, webhook, API-request and cache counts are
//! resolved through the current recorder each time they are recorded; a sharding ring
//! makes its handles when it runs. Every description lives in the crate that reports the
//! metric, and [`describe`] hands them all to the current recorder: [`prometheus`] calls it
//! right after installing its recorder, and [`Manager::start`](crate::Manager::start)
//! calls it again (for a recorder installed elsewhere, [`ManagerBuilder::metrics_handle`](crate::ManagerBuilder::metrics_handle)).
//!
//! A histogram's kind depends on the exporter: `metrics-exporter-prometheus` exports a
//! summary for a histogram it has no buckets for. [`builder`] sets controller-runtime's
//! buckets for every histogram in [`HISTOGRAM_BUCKETS`], which gathers each crate's table.
//!
//! | metric | kind | labels | from |
//! |---|---|---|---|
//! | `controller_runtime_reconcile_total` | counter | `controller`, `result` | rudder-controller |
//! | `controller_runtime_reconcile_errors_total` | counter | `controller` | rudder-controller |
//! | `controller_runtime_terminal_reconcile_errors_total` | counter | `controller` | rudder-controller |
//! | `controller_runtime_reconcile_panics_total` | counter | `controller` | rudder-controller |
//! | `controller_runtime_reconcile_time_seconds` | histogram | `controller` | rudder-controller |
//! | `controller_runtime_max_concurrent_reconciles` | gauge | `controller` | rudder-controller |
//! | `controller_runtime_active_workers` | gauge | `controller` | rudder-controller |
//! | `workqueue_depth`, `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds` | gauge | `name`, `controller` | rudder-workqueue |
//! | `workqueue_adds_total`, `workqueue_retries_total` | counter | `name`, `controller` | rudder-workqueue |
//! | `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds` | histogram | `name`, `controller` | rudder-workqueue |
//! | `leader_election_master_status` | gauge | `name` (the Lease) | [`leader_election`](rudder_lease::leader_election) |
//! | `rest_client_requests_total` | counter | `code`, `method`, `host` | [`rudder_client::layers`] |
//! | `controller_runtime_webhook_requests_total` | counter | `webhook`, `code` | rudder-webhook |
//! | `controller_runtime_webhook_requests_in_flight` | gauge | `webhook` | rudder-webhook |
//! | `controller_runtime_webhook_latency_seconds` | histogram | `webhook` | rudder-webhook |
//! | `rudder_shard_*` | gauge, counter, histogram | `ring` | [`sharding`](rudder_lease::sharding) |
//! | `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds` | counter, gauge | | `/proc/self` |

use std::sync::{Mutex, OnceLock};

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use rudder_core::sync::LockExt;

/// Every histogram Rudder reports, by crate, with the buckets it is exported with.
pub const HISTOGRAM_BUCKETS: &[&[(&str, &[f64])]] = &[
    rudder_controller::metrics::HISTOGRAM_BUCKETS,
    #[cfg(feature = "webhook")]
    rudder_webhook::metrics::HISTOGRAM_BUCKETS,
    rudder_lease::metrics::HISTOGRAM_BUCKETS,
];

/// Describes every metric Rudder reports (help text and unit) to the recorder current at
/// this call: the controllers' and work queues', the webhook server's, the API client's,
/// leader election's and sharding's. Descriptions given to no recorder are lost, so call it
/// once the recorder is installed ([`prometheus`] and [`Manager::start`](crate::Manager::start)
/// do). Calling it again is harmless.
pub fn describe() {
    rudder_controller::metrics::describe();
    #[cfg(feature = "webhook")]
    rudder_webhook::metrics::describe();
    rudder_client::layers::describe();
    rudder_lease::metrics::describe();
}

/// A Prometheus exporter's builder with the buckets of every histogram Rudder reports
/// ([`HISTOGRAM_BUCKETS`]), so each is exported as a histogram, not a summary: for a
/// process that installs its own recorder (add its own buckets, install it, call
/// [`describe`], and pass the handle to [`ManagerBuilder::metrics_handle`](crate::ManagerBuilder::metrics_handle)).
///
/// # Errors
///
/// [`BuildError`] when a bucket list is empty (none here is).
pub fn builder() -> Result<PrometheusBuilder, BuildError> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in HISTOGRAM_BUCKETS.iter().copied().flatten() {
        builder = builder.set_buckets_for_metric(Matcher::Full((*name).to_owned()), buckets)?;
    }
    Ok(builder)
}

/// The process-wide Prometheus recorder, installed on first use.
///
/// Installs `metrics-exporter-prometheus`, built by [`builder`], as the global `metrics`
/// recorder, and right after [`describe`]s every metric to it. Fails if another global
/// recorder was installed first; pass that recorder's handle to the manager instead. Safe
/// to call from many threads at once: the first installs, the others wait for it and share
/// its handle.
pub fn prometheus() -> Result<PrometheusHandle, BuildError> {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    // Held while installing, so a second first caller waits instead of failing to install
    // a second global recorder.
    static INSTALLING: Mutex<()> = Mutex::new(());
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let _installing = INSTALLING.lock_unpoisoned();
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let handle = builder()?.install_recorder()?;
    describe();
    Ok(HANDLE.get_or_init(|| handle).clone())
}

/// Renders the registry plus process metrics read from `/proc/self` (Linux; elsewhere only
/// the registry).
pub(crate) fn render(handle: &PrometheusHandle) -> String {
    let mut text = handle.render();
    text.push_str(&process_metrics());
    text
}

/// `AT_PAGESZ` and `AT_CLKTCK`: the auxiliary vector's page size and clock ticks per second.
const AT_PAGESZ: usize = 6;
const AT_CLKTCK: usize = 17;

/// The page size and clock ticks per second from an auxiliary vector (`/proc/self/auxv`:
/// native-endian word pairs, ended by a zero key), where present.
fn page_size_and_ticks(auxv: &[u8]) -> (Option<u64>, Option<u64>) {
    const WORD: usize = size_of::<usize>();
    let (mut page, mut ticks) = (None, None);
    for pair in auxv.chunks_exact(2 * WORD) {
        let word = |at: usize| {
            pair[at..at + WORD]
                .try_into()
                .map_or(0, usize::from_ne_bytes)
        };
        let value = u64::try_from(word(WORD)).ok().filter(|v| *v > 0);
        match word(0) {
            0 => break,
            AT_PAGESZ => page = value,
            AT_CLKTCK => ticks = value,
            _ => {}
        }
    }
    (page, ticks)
}

/// This process's page size and clock ticks per second, read once; Linux's usual 4096 and
/// 100 where the kernel does not say.
fn page_size_and_ticks_here() -> (f64, f64) {
    static HERE: OnceLock<(f64, f64)> = OnceLock::new();
    *HERE.get_or_init(|| {
        let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
        let (page, ticks) = page_size_and_ticks(&auxv);
        (page.unwrap_or(4096) as f64, ticks.unwrap_or(100) as f64)
    })
}

/// `process_*` metrics as Prometheus' client libraries report them, from `/proc/self`, in
/// the kernel's own clock ticks and page size.
fn process_metrics() -> String {
    let mut out = String::new();
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return out;
    };
    // Fields after the command name (which may contain spaces) start at "state".
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return out;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n).and_then(|v| v.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the state.
    if let (Some(utime), Some(stime)) = (field(11), field(12)) {
        let cpu = (utime + stime) / page_size_and_ticks_here().1;
        out.push_str(&format!(
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
             # TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {cpu}\n"
        ));
    }
    if let (Some(vsize), Some(rss)) = (field(20), field(21)) {
        let rss = rss * page_size_and_ticks_here().0;
        out.push_str(&format!(
            "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n\
             # TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes {vsize}\n\
             # HELP process_resident_memory_bytes Resident memory size in bytes.\n\
             # TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {rss}\n"
        ));
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        let open = fds.count();
        out.push_str(&format!(
            "# HELP process_open_fds Number of open file descriptors.\n\
             # TYPE process_open_fds gauge\nprocess_open_fds {open}\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics::Unit;

    /// Takes the names of the histograms described to it.
    #[derive(Default)]
    struct Histograms(Mutex<Vec<String>>);

    impl metrics::Recorder for Histograms {
        fn describe_counter(&self, _: metrics::KeyName, _: Option<Unit>, _: metrics::SharedString) {
        }
        fn describe_gauge(&self, _: metrics::KeyName, _: Option<Unit>, _: metrics::SharedString) {}
        fn describe_histogram(
            &self,
            name: metrics::KeyName,
            _: Option<Unit>,
            _: metrics::SharedString,
        ) {
            self.0.lock_unpoisoned().push(name.as_str().to_owned());
        }
        fn register_counter(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Counter {
            metrics::Counter::noop()
        }
        fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::noop()
        }
        fn register_histogram(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    #[test]
    fn every_described_histogram_has_buckets() {
        let described = Histograms::default();
        metrics::with_local_recorder(&described, describe);
        let described = described
            .0
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        assert!(
            described.len() >= 4,
            "reconcile time, two work-queue durations, rebalance: {described:?}"
        );
        let bucketed: Vec<&str> = HISTOGRAM_BUCKETS
            .iter()
            .copied()
            .flatten()
            .map(|(name, _)| *name)
            .collect();
        for name in &described {
            assert!(
                bucketed.contains(&name.as_str()),
                "{name} has no buckets: it would be a summary"
            );
        }
    }

    fn auxv(pairs: &[(usize, usize)]) -> Vec<u8> {
        pairs
            .iter()
            .flat_map(|(k, v)| k.to_ne_bytes().into_iter().chain(v.to_ne_bytes()))
            .collect()
    }

    #[test]
    fn page_size_and_ticks_come_from_the_auxiliary_vector() {
        let found = page_size_and_ticks(&auxv(&[(3, 64), (6, 16384), (17, 250), (0, 0), (6, 1)]));
        assert_eq!(found, (Some(16384), Some(250)));
        assert_eq!(page_size_and_ticks(&auxv(&[(0, 0)])), (None, None));
        assert_eq!(page_size_and_ticks(&[1, 2, 3]), (None, None));
        // This machine's, when it has one.
        if let Ok(here) = std::fs::read("/proc/self/auxv") {
            let (page, ticks) = page_size_and_ticks(&here);
            assert!(page.is_some_and(|p| p.is_power_of_two()), "{page:?}");
            assert!(ticks.is_some_and(|t| t > 0), "{ticks:?}");
        }
    }
}
