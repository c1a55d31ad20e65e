//! Timing helpers for the production-build benches of `rudder-workqueue` (see
//! `benches/production.rs`): criterion runs each row, and every sample's time per operation
//! is kept so that the table printed at the end gives medians and ratios in the format
//! `cargo xtask bench-workqueue` reads (`| row | rudder ns/op | kube-runtime ns/op | ratio |`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use tokio::runtime::Runtime;

/// Rudder's side of a row.
pub const RUDDER: &str = "rudder";
/// kube-runtime's side of a row.
pub const KUBE: &str = "kube-runtime";

/// Per-sample nanoseconds per operation, by (row, side).
static SAMPLES: Mutex<BTreeMap<(String, &'static str), Vec<f64>>> = Mutex::new(BTreeMap::new());

/// Runs `body(iters)` on `rt` as criterion's sample, recording ns per `ops_per_iter`
/// operations under (`row`, `side`).
pub fn measure<F, Fut>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    row: &str,
    side: &'static str,
    ops_per_iter: u64,
    rt: &Runtime,
    body: F,
) where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    g.bench_function(side, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            rt.block_on(body(iters));
            let took = start.elapsed();
            let per_op = took.as_nanos() as f64 / (iters * ops_per_iter) as f64;
            SAMPLES
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry((row.to_owned(), side))
                .or_default()
                .push(per_op);
            took
        });
    });
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The table of medians: one line per row, in the order rows were first measured.
pub fn table() -> String {
    let mut samples = SAMPLES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut rows: Vec<String> = Vec::new();
    for (row, _) in samples.keys() {
        if !rows.contains(row) {
            rows.push(row.clone());
        }
    }
    let mut out = String::from(
        "| row | rudder ns/op | kube-runtime ns/op | kube-runtime / rudder |\n|---|---:|---:|---:|\n",
    );
    for row in rows {
        let r = samples.get_mut(&(row.clone(), RUDDER)).map(|v| median(v));
        let k = samples.get_mut(&(row.clone(), KUBE)).map(|v| median(v));
        match (r, k) {
            (Some(r), Some(k)) => {
                out.push_str(&format!("| {row} | {r:.1} | {k:.1} | {:.2}x |\n", k / r))
            }
            (Some(r), None) => out.push_str(&format!("| {row} | {r:.1} | - | - |\n")),
            _ => {}
        }
    }
    out
}
