//! `cargo xtask bench-workqueue`: Rudder's work queue against client-go's and
//! controller-runtime's, in one sitting.
//!
//! The Go side is `go/workqueue` in the repository's Go module (client-go and
//! controller-runtime pinned in `go/go.mod`): benchmarks with the same shapes as Rudder's
//! benches, one sub-benchmark per library (client-go's queue; controller-runtime's priority
//! queue, its controllers' default), run with the machine's Go (`go test -bench`, see
//! [`crate::go`]). Rudder's side of those shapes is
//! `crates/rudder-workqueue/bench` (`cargo bench --manifest-path
//! crates/rudder-workqueue/bench/Cargo.toml --bench production`): a package of its own so that
//! tokio is built as in production, without the `test-util` feature that `rudder-workqueue`'s
//! dev-dependencies turn on (with it, once any runtime in the process pauses its clock, every
//! clock read takes a mutex shared by the runtime's threads). Then `cargo bench -p
//! rudder-workqueue --bench workqueue` runs the rows against kube-runtime that need a paused
//! clock to be fair to it. With `--runs N` all three are run N times, in turn, and the tables
//! give the range of each figure and of each ratio (computed per run, so a ratio compares
//! measurements taken minutes apart, not hours). On a shared machine absolute times drift; the
//! ratios are the result.
//!
//! Beside the wall clock each side reports its process's CPU time per key (Go's `getrusage`,
//! Rust's `CLOCK_PROCESS_CPUTIME_ID`, over the same iterations: every thread's, so a queue's
//! background goroutines, the garbage collector and a runtime's spinning workers count), and
//! each run ends with Rudder's instructions per single-task cycle under valgrind's callgrind
//! (`examples/profile.rs` run twice with different counts; the difference over the difference
//! in cycles, so start-up cancels out; without valgrind the command says so and leaves them
//! out). Instruction counts do not move with the machine's load; Go's runtime does not run
//! usefully under valgrind, so they compare builds of Rudder.

use std::collections::BTreeMap;
use std::process::Stdio;

use crate::go::Go;
use crate::report;
use crate::util;

/// The Go libraries, as `go/workqueue` names its sub-benchmarks.
const LIBRARIES: [&str; 2] = ["client-go", "controller-runtime"];

/// Rudder's rows (as `benches/workqueue.rs` names them) and the Go benchmark of the same shape
/// (in `go/workqueue/bench_test.go`).
const SHAPES: &[(&str, &str)] = &[
    ("add+get+done, u64 key", "CycleInt"),
    // client-go has no priorities: strict priority is its order, without ageing's clock read.
    // controller-runtime's priorities are strict, so this row is its like for like.
    ("add+get+done, u64 key, strict priority", "CycleInt"),
    ("add+get+done, namespace/name key", "CycleString"),
    ("dedup hit (add of a waiting key)", "DedupHit"),
    (
        "rate-limiting queue: add+get+forget+done, default controller limiter",
        "RateLimitingCycle",
    ),
    (
        "2 producers, 2 workers, 20k keys; per key",
        "ProducersWorkers",
    ),
    (
        "2 producers, 2 workers, 20k keys, strict priority; per key",
        "ProducersWorkers",
    ),
    (
        "add_after 1000 keys (1-10 µs, real clock), then drain; per key",
        "AddAfterDrain",
    ),
    // controller-runtime takes the new key ahead of the backlog, as Rudder does; client-go,
    // without priorities, does the same operations in FIFO order.
    (
        "10k keys waiting at low priority, add+get+done at normal priority",
        "PriorityBacklog",
    ),
    (
        "10k keys waiting at low priority, add+get+done at normal priority, strict priority",
        "PriorityBacklog",
    ),
];

const HELP: &str = "usage: cargo xtask bench-workqueue [--runs N]";

/// The cycles `instructions_per_cycle` runs under callgrind: two counts whose difference is
/// what is measured.
const CALLGRIND_CYCLES: [u64; 2] = [100_000, 300_000];

/// Entry point for `cargo xtask bench-workqueue`.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    let runs = match args {
        [] => 1,
        ["--runs", n] => n
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("--runs takes a positive number, not `{n}`\n{HELP}"))?,
        other => {
            return Err(format!(
                "unexpected arguments `{}`\n{HELP}",
                other.join(" ")
            ));
        }
    };
    let go = Go::find()?;
    println!(
        "{} for client-go and controller-runtime (go/go.mod)",
        go.version()
    );
    let callgrind = util::on_path("valgrind");
    if !callgrind {
        println!(
            "valgrind not found (Debian's `valgrind` package): instructions per cycle are not counted"
        );
    }
    let mut results = Vec::new();
    for run in 1..=runs {
        let load_before = report::load_average();
        let go_results = util::step(
            &format!("client-go and controller-runtime benchmarks, run {run}/{runs}"),
            || go_bench(&go),
        )?;
        let production = util::step(
            &format!("Rudder benchmarks, production build, run {run}/{runs}"),
            || rust_bench(PRODUCTION_BENCH),
        )?;
        let paused = util::step(
            &format!("Rudder and kube-runtime benchmarks, paused clock, run {run}/{runs}"),
            || rust_bench(PAUSED_BENCH),
        )?;
        let instructions = if callgrind {
            Some(util::step(
                &format!(
                    "Rudder's instructions per single-task cycle (callgrind), run {run}/{runs}"
                ),
                instructions_per_cycle,
            )?)
        } else {
            None
        };
        results.push(Run {
            go: go_results,
            production,
            paused,
            instructions,
            load: (load_before, report::load_average()),
        });
    }
    println!();
    let loads: Vec<String> = results
        .iter()
        .map(|r| {
            let show = |l: Option<f64>| l.map_or_else(|| "?".to_owned(), |l| format!("{l:.2}"));
            format!("{} -> {}", show(r.load.0), show(r.load.1))
        })
        .collect();
    println!(
        "Load (1-minute average) at each run's start and end: {}",
        loads.join("; ")
    );
    println!();
    println!("Rudder (production build, real clock) against client-go and controller-runtime:");
    println!();
    println!("{}", table(&results, Side::Production));
    println!("client-go / Rudder and controller-runtime / Rudder by run:");
    println!();
    println!("{}", ratios_by_run(&results));
    println!("CPU time per key (the process's, every thread's, over the same iterations):");
    println!();
    println!("{}", cpu_table(&results));
    println!("Rudder's instructions per single-task cycle (callgrind), by run:");
    println!();
    println!("{}", instructions_table(&results));
    println!("Rudder against kube-runtime, both on a paused clock (tokio with test-util):");
    println!();
    println!("{}", table(&results, Side::Paused));
    Ok(())
}

/// Runs `go/workqueue`'s benchmarks and returns their figures by benchmark name
/// (`CycleInt/client-go`).
fn go_bench(go: &Go) -> Result<BTreeMap<String, Figures>, String> {
    let output = go
        .command()
        .args([
            "test",
            "-run",
            "^$",
            "-bench",
            ".",
            "-benchtime",
            "2s",
            "./workqueue",
        ])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run `go test`: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    print!("{text}");
    if !output.status.success() {
        return Err(format!("`go test` failed ({})", output.status));
    }
    let results = parse_go(&text);
    if results.is_empty() {
        return Err("`go test` printed no benchmark results".to_owned());
    }
    Ok(results)
}

/// One side's figures for one shape: wall-clock and CPU nanoseconds per key.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Figures {
    wall: f64,
    cpu: Option<f64>,
}

/// One row of a Rust bench's table: Rudder's and kube-runtime's nanoseconds per operation,
/// and Rudder's CPU nanoseconds per operation (the production bench has it).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct RustRow {
    rudder: Option<f64>,
    kube: Option<f64>,
    rudder_cpu: Option<f64>,
}

/// The rows of a Rust bench's table, by row name.
type RustRows = BTreeMap<String, RustRow>;

/// Rudder's bench in client-go's shapes, on tokio built without `test-util`.
const PRODUCTION_BENCH: &[&str] = &[
    "bench",
    "--manifest-path",
    "crates/rudder-workqueue/bench/Cargo.toml",
    "--bench",
    "production",
];

/// Rudder against kube-runtime on a paused clock (`rudder-workqueue`'s own bench).
const PAUSED_BENCH: &[&str] = &["bench", "-p", "rudder-workqueue", "--bench", "workqueue"];

/// Runs one of Rudder's benches (`cargo` with `args`) and reads the table it prints at the end.
fn rust_bench(args: &[&str]) -> Result<RustRows, String> {
    let output = util::cargo()
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run cargo bench: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        print!("{text}");
        return Err(format!("cargo bench failed ({})", output.status));
    }
    let rows = parse_rust(&text);
    for line in text.lines().filter(|l| l.starts_with('|')) {
        println!("{line}");
    }
    if rows.is_empty() {
        return Err("cargo bench printed no table".to_owned());
    }
    Ok(rows)
}

/// `BenchmarkName/sub-2   123   456 ns/op   78.0 cpu-ns/key   789.0 ns/key` lines: the
/// `ns/key` and `cpu-ns/key` figures by name (`Name/sub`).
fn parse_go(text: &str) -> BTreeMap<String, Figures> {
    let mut results = BTreeMap::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(name) = words.first().and_then(|w| w.strip_prefix("Benchmark")) else {
            continue;
        };
        // The suffix is GOMAXPROCS, left out when it is 1.
        let name = match name.rsplit_once('-') {
            Some((n, procs)) if procs.parse::<u32>().is_ok() => n,
            _ => name,
        };
        let metric = |unit: &str| {
            words
                .windows(2)
                .find(|w| w[1] == unit)
                .and_then(|w| w[0].parse::<f64>().ok())
        };
        if let Some(wall) = metric("ns/key") {
            let cpu = metric("cpu-ns/key");
            results.insert(name.to_owned(), Figures { wall, cpu });
        }
    }
    results
}

/// `| row | rudder | kube-runtime | ratio |` lines, with a fifth column `rudder CPU` in the
/// production bench's table; `-` where a side has no figure.
fn parse_rust(text: &str) -> RustRows {
    let mut rows = BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // A leading and a trailing empty cell around four or five columns.
        let (row, rudder, kube, cpu) = match cells.as_slice() {
            [_, row, rudder, kube, _, _] => (row, rudder, kube, None),
            [_, row, rudder, kube, _, cpu, _] => (row, rudder, kube, Some(cpu)),
            _ => continue,
        };
        let rudder = rudder.parse::<f64>().ok();
        if rudder.is_none() {
            continue; // the header and the separator
        }
        rows.insert(
            (*row).to_owned(),
            RustRow {
                rudder,
                kube: kube.parse::<f64>().ok(),
                rudder_cpu: cpu.and_then(|c| c.parse::<f64>().ok()),
            },
        );
    }
    rows
}

/// Rudder's instructions per single-task cycle (ageing on, the default; and strict
/// priority), from two callgrind runs of `examples/profile.rs` per mode.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Instructions {
    ageing: f64,
    strict: f64,
}

/// Builds `examples/profile.rs` (release, as the production bench) and counts its
/// instructions under callgrind for [`CALLGRIND_CYCLES`] cycles of each mode.
fn instructions_per_cycle() -> Result<Instructions, String> {
    let output = util::cargo()
        .args([
            "build",
            "--release",
            "--manifest-path",
            "crates/rudder-workqueue/bench/Cargo.toml",
            "--example",
            "profile",
            "--message-format=json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run cargo build: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo build failed ({})", output.status));
    }
    let binary = executable(&String::from_utf8_lossy(&output.stdout))
        .ok_or("cargo build named no executable for examples/profile.rs")?;
    let per_cycle = |mode: &str| -> Result<f64, String> {
        let [few, many] = CALLGRIND_CYCLES;
        let counts = CALLGRIND_CYCLES
            .iter()
            .map(|cycles| collected(&binary, mode, *cycles))
            .collect::<Result<Vec<u64>, String>>()?;
        let per = counts[1].saturating_sub(counts[0]) as f64 / (many - few) as f64;
        println!(
            "    {mode}: {per:.0} instructions per cycle ({counts:?} for {CALLGRIND_CYCLES:?} cycles)"
        );
        Ok(per)
    };
    Ok(Instructions {
        ageing: per_cycle("cycle")?,
        strict: per_cycle("cycle-strict")?,
    })
}

/// The executable a `cargo build --message-format=json` built (its last `"executable"`).
fn executable(messages: &str) -> Option<std::path::PathBuf> {
    messages
        .lines()
        .filter_map(|l| l.split_once("\"executable\":\"").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_once('"').map(|(path, _)| path))
        .next_back()
        .map(std::path::PathBuf::from)
}

/// Instructions callgrind collected running `binary mode cycles`.
fn collected(binary: &std::path::Path, mode: &str, cycles: u64) -> Result<u64, String> {
    let output = std::process::Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(binary)
        .arg(mode)
        .arg(cycles.to_string())
        .output()
        .map_err(|e| format!("could not run valgrind (Debian's `valgrind` package): {e}"))?;
    let text = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!("valgrind failed ({}):\n{text}", output.status));
    }
    parse_collected(&text).ok_or_else(|| format!("valgrind printed no `Collected` line:\n{text}"))
}

/// `==123== Collected : 139182590`: callgrind's total.
fn parse_collected(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.split_once("Collected :"))
        .and_then(|(_, n)| n.trim().parse().ok())
}

struct Run {
    /// client-go's and controller-runtime's figures, by Go benchmark name (`CycleInt/client-go`).
    go: BTreeMap<String, Figures>,
    /// The production-build bench (client-go's shapes).
    production: RustRows,
    /// The paused-clock bench (kube-runtime's rows).
    paused: RustRows,
    /// Rudder's instructions per single-task cycle (`None` without valgrind).
    instructions: Option<Instructions>,
    /// The 1-minute load average at the run's start and end.
    load: (Option<f64>, Option<f64>),
}

/// Which of Rudder's benches a table shows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// The production build, beside client-go (and kube-runtime where that bench has it).
    Production,
    /// The paused-clock bench, beside kube-runtime.
    Paused,
}

impl Run {
    /// A Go library's wall-clock figure for one Go benchmark.
    fn go_figure(&self, benchmark: &str, library: &str) -> Option<f64> {
        self.go
            .get(&format!("{benchmark}/{library}"))
            .map(|f| f.wall)
    }

    /// A Go library's CPU figure for one Go benchmark.
    fn go_cpu(&self, benchmark: &str, library: &str) -> Option<f64> {
        self.go
            .get(&format!("{benchmark}/{library}"))
            .and_then(|f| f.cpu)
    }

    fn rust(&self, side: Side) -> &RustRows {
        match side {
            Side::Production => &self.production,
            Side::Paused => &self.paused,
        }
    }
}

/// One markdown table: every row of one of Rudder's benches, client-go's and
/// controller-runtime's figures where they have the shape (production build only), and ratios
/// (other / Rudder: above 1 means Rudder is faster), as ranges over the runs.
fn table(runs: &[Run], side: Side) -> String {
    let mut rows: Vec<String> = match side {
        Side::Production => SHAPES.iter().map(|(row, _)| (*row).to_owned()).collect(),
        Side::Paused => Vec::new(),
    };
    for run in runs {
        for row in run.rust(side).keys() {
            if !rows.contains(row) {
                rows.push(row.clone());
            }
        }
    }
    let mut out = String::from(match side {
        Side::Production => {
            "| shape | client-go ns | controller-runtime ns | Rudder ns | kube-runtime ns \
             | client-go / Rudder | controller-runtime / Rudder | kube-runtime / Rudder |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n"
        }
        Side::Paused => {
            "| shape | Rudder ns | kube-runtime ns | kube-runtime / Rudder |\n\
             |---|---:|---:|---:|\n"
        }
    });
    for row in rows {
        let go_name = SHAPES
            .iter()
            .find(|(r, _)| *r == row && side == Side::Production)
            .map(|(_, g)| *g);
        let mut rudder = Vec::new();
        let mut kube = Vec::new();
        let mut kube_ratio = Vec::new();
        // Per Go library: its figures and its ratios to Rudder.
        let mut go = LIBRARIES.map(|_| (Vec::new(), Vec::new()));
        for run in runs {
            let RustRow {
                rudder: r, kube: k, ..
            } = run.rust(side).get(&row).copied().unwrap_or_default();
            rudder.extend(r);
            kube.extend(k);
            if let (Some(k), Some(r)) = (k, r) {
                kube_ratio.push(k / r);
            }
            for (library, (figures, ratios)) in LIBRARIES.iter().zip(&mut go) {
                let g = go_name.and_then(|name| run.go_figure(name, library));
                figures.extend(g);
                if let (Some(g), Some(r)) = (g, r) {
                    ratios.push(g / r);
                }
            }
        }
        let [(client_go, client_go_ratio), (runtime, runtime_ratio)] = &go;
        out.push_str(&match side {
            Side::Production => format!(
                "| {row} | {} | {} | {} | {} | {} | {} | {} |\n",
                report::range(client_go, 0, ""),
                report::range(runtime, 0, ""),
                report::range(&rudder, 0, ""),
                report::range(&kube, 0, ""),
                report::range(client_go_ratio, 2, "x"),
                report::range(runtime_ratio, 2, "x"),
                report::range(&kube_ratio, 2, "x"),
            ),
            Side::Paused => format!(
                "| {row} | {} | {} | {} |\n",
                report::range(&rudder, 0, ""),
                report::range(&kube, 0, ""),
                report::range(&kube_ratio, 2, "x"),
            ),
        });
    }
    out
}

/// Each Go library's figure over Rudder's (production build) per run, one line per shape, so
/// that a range can be read with the runs that make it.
fn ratios_by_run(runs: &[Run]) -> String {
    let mut out = String::new();
    for (row, go_name) in SHAPES {
        let by_library: Vec<String> = LIBRARIES
            .iter()
            .map(|library| {
                let ratios: Vec<String> = runs
                    .iter()
                    .map(|run| {
                        let r = run.production.get(*row).and_then(|r| r.rudder);
                        match (run.go_figure(go_name, library), r) {
                            (Some(g), Some(r)) => format!("{:.2}x", g / r),
                            _ => "-".to_owned(),
                        }
                    })
                    .collect();
                format!("{library} {}", ratios.join(", "))
            })
            .collect();
        out.push_str(&format!("- {row}: {}\n", by_library.join("; ")));
    }
    out
}

/// CPU nanoseconds per key of each side on client-go's shapes, and the ratios (other /
/// Rudder), as ranges over the runs.
fn cpu_table(runs: &[Run]) -> String {
    let mut out = String::from(
        "| shape | client-go CPU ns | controller-runtime CPU ns | Rudder CPU ns \
         | client-go / Rudder | controller-runtime / Rudder |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for (row, go_name) in SHAPES {
        let mut rudder = Vec::new();
        let mut go = LIBRARIES.map(|_| (Vec::new(), Vec::new()));
        for run in runs {
            let r = run.production.get(*row).and_then(|r| r.rudder_cpu);
            rudder.extend(r);
            for (library, (figures, ratios)) in LIBRARIES.iter().zip(&mut go) {
                let g = run.go_cpu(go_name, library);
                figures.extend(g);
                if let (Some(g), Some(r)) = (g, r) {
                    ratios.push(g / r);
                }
            }
        }
        let [(client_go, client_go_ratio), (runtime, runtime_ratio)] = &go;
        out.push_str(&format!(
            "| {row} | {} | {} | {} | {} | {} |\n",
            report::range(client_go, 0, ""),
            report::range(runtime, 0, ""),
            report::range(&rudder, 0, ""),
            report::range(client_go_ratio, 2, "x"),
            report::range(runtime_ratio, 2, "x"),
        ));
    }
    out
}

/// Rudder's instructions per single-task cycle, by run.
fn instructions_table(runs: &[Run]) -> String {
    let mut out = String::from(
        "| run | add+get+done, u64 key (ageing, the default) | the same, strict priority |\n\
         |---|---:|---:|\n",
    );
    for (i, run) in runs.iter().enumerate() {
        let (ageing, strict) = run.instructions.map_or_else(
            || ("-".to_owned(), "-".to_owned()),
            |n| (format!("{:.0}", n.ageing), format!("{:.0}", n.strict)),
        );
        out.push_str(&format!("| {} | {ageing} | {strict} |\n", i + 1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_go_benchmark_lines() {
        let text = "goos: linux\n\
            BenchmarkCycleInt/client-go-2   6780530   189.7 ns/op   191.2 cpu-ns/key   189.7 ns/key\n\
            BenchmarkCycleInt/controller-runtime-2   300000   3539 ns/op   3539 ns/key\n\
            BenchmarkProducersWorkers/client-go-2   151   6761952 ns/op   338.1 ns/key\n\
            BenchmarkDedupHit/controller-runtime   100   820.1 ns/op   142.6 ns/key\n\
            BenchmarkNoMetric-2   10   5 ns/op\n\
            PASS\n";
        let got = parse_go(text);
        let wall = |name: &str| got.get(name).map(|f| f.wall);
        assert_eq!(
            got.get("CycleInt/client-go"),
            Some(&Figures {
                wall: 189.7,
                cpu: Some(191.2)
            })
        );
        assert_eq!(wall("CycleInt/controller-runtime"), Some(3539.0));
        assert_eq!(got["CycleInt/controller-runtime"].cpu, None);
        assert_eq!(wall("ProducersWorkers/client-go"), Some(338.1));
        // With GOMAXPROCS=1 Go prints no suffix; the name's own dash stays.
        assert_eq!(wall("DedupHit/controller-runtime"), Some(142.6));
        assert_eq!(got.len(), 4);
    }

    #[test]
    fn reads_the_rust_table() {
        let text = "criterion noise\n\
            | row | rudder ns/op | kube-runtime ns/op | kube-runtime / rudder |\n\
            |---|---:|---:|---:|\n\
            | add+get+done, u64 key | 90.5 | 118.7 | 1.31x |\n\
            | rate-limiting queue: add+get+forget+done, default controller limiter | 120.0 | - | - |\n\
            | row | rudder ns/op | kube-runtime ns/op | kube-runtime / rudder | rudder CPU ns/op |\n\
            |---|---:|---:|---:|---:|\n\
            | dedup hit (add of a waiting key) | 13.1 | - | - | 13.4 |\n";
        let got = parse_rust(text);
        assert_eq!(
            got.get("add+get+done, u64 key"),
            Some(&RustRow {
                rudder: Some(90.5),
                kube: Some(118.7),
                rudder_cpu: None
            })
        );
        assert_eq!(
            got.get("dedup hit (add of a waiting key)"),
            Some(&RustRow {
                rudder: Some(13.1),
                kube: None,
                rudder_cpu: Some(13.4)
            })
        );
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn reads_callgrinds_total() {
        let text = "==8935== Events    : Ir\n==8935== Collected : 139182590\n==8935==\n";
        assert_eq!(parse_collected(text), Some(139_182_590));
        assert_eq!(parse_collected("==1== no total\n"), None);
        let messages = "{\"reason\":\"compiler-artifact\",\"executable\":null}\n\
            {\"reason\":\"compiler-artifact\",\"executable\":\"/t/release/examples/profile\",\"fresh\":true}\n\
            {\"reason\":\"build-finished\",\"success\":true}\n";
        assert_eq!(
            executable(messages),
            Some(std::path::PathBuf::from("/t/release/examples/profile"))
        );
    }

    #[test]
    fn ratios_are_per_run_and_shown_as_ranges() {
        let figures = |wall: f64| Figures {
            wall,
            cpu: Some(wall * 1.5),
        };
        let row = |rudder: f64, kube: f64, rudder_cpu: Option<f64>| RustRow {
            rudder: Some(rudder),
            kube: Some(kube),
            rudder_cpu,
        };
        let run = |go: f64, rudder: f64| Run {
            go: BTreeMap::from([
                ("CycleInt/client-go".to_owned(), figures(go)),
                ("CycleInt/controller-runtime".to_owned(), figures(go * 2.0)),
            ]),
            production: BTreeMap::from([(
                "add+get+done, u64 key".to_owned(),
                row(rudder, 100.0, Some(rudder)),
            )]),
            paused: BTreeMap::from([("add+get+done, u64 key".to_owned(), row(50.0, 75.0, None))]),
            instructions: (rudder < 120.0).then_some(Instructions {
                ageing: 694.0,
                strict: rudder,
            }),
            load: (None, None),
        };
        let runs = [run(300.0, 100.0), run(250.0, 125.0)];
        let out = table(&runs, Side::Production);
        let line = out
            .lines()
            .find(|l| l.starts_with("| add+get+done, u64 key"))
            .unwrap_or_default();
        assert_eq!(
            line,
            "| add+get+done, u64 key | 250-300 | 500-600 | 100-125 | 100 | 2.00-3.00x | 4.00-6.00x \
             | 0.80-1.00x |"
        );
        assert!(out.contains("| dedup hit (add of a waiting key) | - | - | - | - | - | - | - |"));
        let by_run = ratios_by_run(&runs);
        assert!(
            by_run.contains(
                "- add+get+done, u64 key: client-go 3.00x, 2.00x; controller-runtime 6.00x, 4.00x\n"
            ),
            "{by_run}"
        );
        assert!(
            by_run.contains(
                "- dedup hit (add of a waiting key): client-go -, -; controller-runtime -, -\n"
            ),
            "{by_run}"
        );
        // The paused bench's table: its own figures, no client-go, only the rows it has.
        let paused = table(&runs, Side::Paused);
        assert!(paused.contains("| add+get+done, u64 key | 50 | 75 | 1.50x |"));
        assert!(!paused.contains("dedup hit"));
        // CPU: Go's 1.5x its wall time against Rudder's equal to it.
        let cpu = cpu_table(&runs);
        assert!(
            cpu.contains(
                "| add+get+done, u64 key | 375-450 | 750-900 | 100-125 | 3.00-4.50x | 6.00-9.00x |"
            ),
            "{cpu}"
        );
        assert!(cpu.contains("| dedup hit (add of a waiting key) | - | - | - | - | - |"));
        let instructions = instructions_table(&runs);
        // The second run had no valgrind.
        assert!(
            instructions.contains("| 1 | 694 | 100 |\n| 2 | - | - |"),
            "{instructions}"
        );
    }
}
