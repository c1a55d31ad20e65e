//! The `/metrics` endpoint: every metric reported through the `metrics` crate (work queues,
//! controllers, leader election) in Prometheus text format, plus the process's own.

use std::sync::{Mutex, OnceLock, PoisonError};

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use rudder_controller::metrics::RECONCILE_TIME_BUCKETS;

/// client-go's buckets for the work queue's latency histograms (10 ns to 10 s, by 10).
const WORKQUEUE_BUCKETS: &[f64] = &[1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0];

/// The process-wide Prometheus recorder, installed on first use.
///
/// Installs `metrics-exporter-prometheus` as the global `metrics` recorder, with
/// controller-runtime's buckets for the reconcile-time histogram, client-go's for the work
/// queue's, and [`REBALANCE_BUCKETS`](crate::sharding::REBALANCE_BUCKETS) for a sharding
/// ring's rebalance time. Fails if another global recorder was installed first; pass that recorder's
/// handle to the manager instead. Safe to call from many threads at once: the first installs,
/// the others wait for it and share its handle.
pub fn prometheus() -> Result<PrometheusHandle, BuildError> {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    // Held while installing, so a second first caller waits instead of failing to install
    // a second global recorder.
    static INSTALLING: Mutex<()> = Mutex::new(());
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let _installing = INSTALLING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("controller_runtime_reconcile_time_seconds".into()),
            RECONCILE_TIME_BUCKETS,
        )?
        .set_buckets_for_metric(Matcher::Prefix("workqueue_".into()), WORKQUEUE_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full("rudder_shard_rebalance_seconds".into()),
            crate::sharding::REBALANCE_BUCKETS,
        )?
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
