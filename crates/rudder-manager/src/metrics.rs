//! The `/metrics` endpoint: every metric reported through the `metrics` crate (work queues,
//! controllers, leader election) in Prometheus text format, plus the process's own.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use rudder_controller::metrics::RECONCILE_TIME_BUCKETS;

/// client-go's buckets for the work queue's latency histograms (10 ns to 10 s, by 10).
const WORKQUEUE_BUCKETS: &[f64] = &[1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0];

/// The process-wide Prometheus recorder, installed on first use.
///
/// Installs `metrics-exporter-prometheus` as the global `metrics` recorder, with
/// controller-runtime's buckets for the reconcile-time histogram and client-go's for the work
/// queue's. Fails if another global recorder was installed first; pass that recorder's
/// handle to the manager instead.
pub fn prometheus() -> Result<PrometheusHandle, BuildError> {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("controller_runtime_reconcile_time_seconds".into()),
            RECONCILE_TIME_BUCKETS,
        )?
        .set_buckets_for_metric(Matcher::Prefix("workqueue_".into()), WORKQUEUE_BUCKETS)?
        .install_recorder()?;
    Ok(HANDLE.get_or_init(|| handle).clone())
}

/// Renders the registry plus process metrics read from `/proc/self` (Linux; elsewhere only
/// the registry).
pub(crate) fn render(handle: &PrometheusHandle) -> String {
    let mut text = handle.render();
    text.push_str(&process_metrics());
    text
}

/// `process_*` metrics as Prometheus' client libraries report them, from `/proc/self`.
/// CPU time assumes 100 clock ticks per second and memory 4 KiB pages, Linux's usual values.
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
        let cpu = (utime + stime) / 100.0;
        out.push_str(&format!(
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
             # TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {cpu}\n"
        ));
    }
    if let (Some(vsize), Some(rss)) = (field(20), field(21)) {
        let rss = rss * 4096.0;
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
