//! What the benchmarks' tables share.

/// `min-max` (or the one value) with `precision` decimals and a unit; `-` when there is none.
pub(crate) fn range(values: &[f64], precision: usize, unit: &str) -> String {
    let min = values.iter().copied().reduce(f64::min);
    let max = values.iter().copied().reduce(f64::max);
    match (min, max) {
        (Some(min), Some(max)) if format!("{min:.precision$}") == format!("{max:.precision$}") => {
            format!("{min:.precision$}{unit}")
        }
        (Some(min), Some(max)) => format!("{min:.precision$}-{max:.precision$}{unit}"),
        _ => "-".to_owned(),
    }
}

/// The 1-minute load average (from /proc/loadavg), when there is one.
pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
