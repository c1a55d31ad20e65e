//! What the facade's and rudder-fleet's benches share (rudder-fleet's include this module by
//! its path): their flags, and the process's own CPU time and RSS.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

/// The value after `name` among the process's arguments.
pub(crate) fn arg_value(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The number after `name` among the process's arguments, `default` without one.
pub(crate) fn arg(name: &str, default: usize) -> usize {
    arg_value(name).map_or(default, |v| v.parse().unwrap())
}

/// The process's CPU time so far, user and system, every thread, at nanosecond resolution
/// (`/proc/self/stat` counts 10 ms ticks).
pub(crate) fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The process's resident memory (`VmRSS`), in bytes.
pub(crate) fn rss_bytes() -> u64 {
    status_bytes("VmRSS")
}

/// A `kB` field of `/proc/self/status` (`VmRSS`, `RssAnon`, `RssFile`), in bytes.
pub(crate) fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .map_or(0, |kb| kb.trim().parse::<u64>().unwrap() * 1024)
}
