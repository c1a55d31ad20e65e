//! Informers at scale: one namespace of ConfigMaps (50,000 by default, one 400-byte value
//! each) synced by Rudder's informer (streaming and paginated lists), kube-runtime's
//! reflector (streaming lists on and off) and client-go's shared informer (WatchListClient on
//! and off, and on with managedFields dropped as Rudder drops them), each in a process of its
//! own, in turn (client-go also with JSON on the wire, as Rust's clients talk, beside its
//! default protobuf): sync time, CPU time, and resident memory before the informer starts, at its peak
//! until the sync (`VmHWM`), at the sync and after a settling time. Then Rudder's cache
//! informer released by its last user: resident memory before it was created, with it, and
//! after it stopped.
//!
//! `cargo xtask bench-informers` builds client-go's side (`go/cmd/informer-rss`) and runs
//! this; directly: `cargo bench -p rudder-cache --bench scale -- --bench [--objects N]
//! [--runs N] [--settle S] [--go-binary PATH]` (without `--go-binary`, no client-go rows).
//! It needs the envtest binaries, as the tests do.

#![allow(
    clippy::disallowed_methods,
    reason = "benches may spawn: the bench owns its tasks"
)]
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::cast_precision_loss
)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use kube_runtime::watcher::{self, watcher};
use kube_runtime::{WatchStreamExt, reflector};
use rudder_cache::{Cache, Informer, ListStrategy, Scope};
use rudder_envtest::TestEnv;
use tokio_util::sync::CancellationToken;

/// Set in a child process: which implementation it runs.
const CHILD: &str = "RUDDER_SCALE_CHILD";
/// The ConfigMaps' namespace, for a Rust child.
const NAMESPACE: &str = "RUDDER_SCALE_NAMESPACE";
/// How long a child waits after the sync before the steady reading, in seconds.
const SETTLE: &str = "RUDDER_SCALE_SETTLE";

/// An implementation measured: its name in the table, and how to run it.
struct Run {
    name: &'static str,
    how: How,
}

enum How {
    /// This bench as a child, with `CHILD` set to the given mode.
    Rust(&'static str),
    /// client-go's program, with the WatchListClient feature on or off, managedFields dropped
    /// or kept, protobuf (client-go's default for built-in types) or JSON on the wire.
    Go {
        watch_list: bool,
        strip: bool,
        json: bool,
        controller_runtime: bool,
    },
}

const RUNS: [Run; 9] = [
    Run {
        name: "Rudder informer, streaming list (default; drops managedFields)",
        how: How::Rust("rudder"),
    },
    Run {
        name: "Rudder informer, paginated lists",
        how: How::Rust("rudder-paginated"),
    },
    Run {
        name: "kube-runtime reflector, streaming list",
        how: How::Rust("kube-runtime-streaming"),
    },
    Run {
        name: "kube-runtime reflector, paginated lists (default)",
        how: How::Rust("kube-runtime"),
    },
    Run {
        name: "client-go informer, WatchListClient on (default; protobuf)",
        how: How::Go {
            watch_list: true,
            strip: false,
            json: false,
            controller_runtime: false,
        },
    },
    Run {
        name: "client-go informer, WatchListClient off (protobuf)",
        how: How::Go {
            watch_list: false,
            strip: false,
            json: false,
            controller_runtime: false,
        },
    },
    Run {
        name: "client-go informer, WatchListClient on, managedFields dropped (protobuf)",
        how: How::Go {
            watch_list: true,
            strip: true,
            json: false,
            controller_runtime: false,
        },
    },
    Run {
        name: "client-go informer, WatchListClient on, managedFields dropped, JSON as Rust's clients",
        how: How::Go {
            watch_list: true,
            strip: true,
            json: true,
            controller_runtime: false,
        },
    },
    Run {
        name: "controller-runtime cache (its default: WatchListClient on, protobuf)",
        how: How::Go {
            watch_list: true,
            strip: false,
            json: false,
            controller_runtime: true,
        },
    },
];

/// What the sweep (`--objects` with several counts) runs at each count: Rudder, kube-runtime
/// and controller-runtime as a user gets each by default (indexes into [`RUNS`]).
const SWEEP: [usize; 3] = [0, 3, 8];

/// This process's CPU time so far (user and system, every thread), in milliseconds, from
/// `/proc/self/stat` (clock ticks of 10 ms), as client-go's program reads it.
fn cpu_millis() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command name, which ends with the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields[i].parse::<u64>().unwrap();
    (ticks(11) + ticks(12)) * 10
}

/// A field of `/proc/self/status`, in bytes.
fn status(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    kb * 1024
}

fn config_map(i: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("scale-{i:06}")),
            ..Default::default()
        },
        data: Some([("value".to_owned(), "x".repeat(400))].into()),
        ..Default::default()
    }
}

/// The child's side: sync with `which` and print the figures as client-go's program does.
async fn child(which: &str) {
    let namespace = std::env::var(NAMESPACE).unwrap();
    let settle = Duration::from_secs(std::env::var(SETTLE).unwrap().parse().unwrap());
    let client = kube::Client::try_default().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    // One request first, so the connection and the client's own buffers are in the baseline.
    api.list(&kube::api::ListParams::default().limit(1))
        .await
        .unwrap();
    let base = status("VmRSS");
    let cpu = cpu_millis();
    let start = Instant::now();
    let figures = |objects: usize, took: Duration| {
        let (peak, synced) = (status("VmHWM"), status("VmRSS"));
        println!("objects {objects}");
        println!("sync-ms {}", took.as_millis());
        println!("cpu-ms {}", cpu_millis() - cpu);
        println!("base {base}\npeak {peak}\nsynced {synced}");
    };
    match which {
        "rudder" | "rudder-paginated" => {
            let strategy = if which == "rudder" {
                ListStrategy::Streaming
            } else {
                ListStrategy::Paginated
            };
            let informer = Informer::builder(api).list_strategy(strategy).start();
            informer
                .wait_for_sync(Duration::from_secs(600))
                .await
                .unwrap();
            figures(informer.store().len(), start.elapsed());
            eprintln!("{which}: listed with {}", informer.list_strategy().as_str());
            tokio::time::sleep(settle).await;
            println!("steady {}", status("VmRSS"));
        }
        "kube-runtime" | "kube-runtime-streaming" => {
            let mut config = watcher::Config::default();
            if which == "kube-runtime-streaming" {
                config = config.streaming_lists();
            }
            let (reader, writer) = reflector::store::<ConfigMap>();
            let events = watcher(api, config).default_backoff();
            let task = tokio::spawn(reflector(writer, events).for_each(|_| async {}));
            reader.wait_until_ready().await.unwrap();
            figures(reader.state().len(), start.elapsed());
            tokio::time::sleep(settle).await;
            println!("steady {}", status("VmRSS"));
            task.abort();
        }
        "rudder-released" => {
            let cache = Cache::builder(client).build(&CancellationToken::new());
            let held = cache
                .acquire_informer_in::<ConfigMap>(&Scope::namespace(&namespace))
                .unwrap();
            held.wait_for_sync(Duration::from_secs(600)).await.unwrap();
            figures(held.store().len(), start.elapsed());
            tokio::time::sleep(settle).await;
            println!("steady {}", status("VmRSS"));
            let informer = held.informer().clone();
            drop(held);
            let stopped = Instant::now();
            while informer.is_running() {
                assert!(stopped.elapsed() < Duration::from_secs(30), "still running");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(cache.informer_count(), 0);
            drop(informer);
            tokio::time::sleep(settle).await;
            println!("released {}", status("VmRSS"));
            cache.stop().await;
        }
        other => panic!("unknown implementation {other}"),
    }
}

/// What a child printed.
type Figures = HashMap<String, String>;

fn parse(text: &str) -> Figures {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn number(figures: &Figures, key: &str) -> f64 {
    figures
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {figures:?}"))
}

/// Runs one implementation in a process of its own; what it printed.
fn measure(how: &How, env: &TestEnv, namespace: &str, settings: &Settings) -> Figures {
    let mut command = match how {
        How::Rust(mode) => {
            let mut command = Command::new(std::env::current_exe().unwrap());
            command
                .arg("--bench")
                .env(CHILD, mode)
                .env(NAMESPACE, namespace)
                .env(SETTLE, settings.settle.to_string());
            command
        }
        How::Go {
            watch_list,
            strip,
            json,
            controller_runtime,
        } => {
            let mut command = Command::new(settings.go_binary.as_ref().unwrap());
            command
                .arg("-kubeconfig")
                .arg(env.kubeconfig_path())
                .arg("-namespace")
                .arg(namespace)
                .arg(format!("-settle={}s", settings.settle))
                .arg(format!("-strip={strip}"))
                .arg(format!("-json={json}"))
                .arg(format!("-controller-runtime={controller_runtime}"))
                .env("KUBE_FEATURE_WatchListClient", watch_list.to_string());
            command
        }
    };
    let output = command
        .env("KUBECONFIG", env.kubeconfig_path())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "a child failed: {output:?}");
    let figures = parse(&String::from_utf8_lossy(&output.stdout));
    assert_eq!(
        number(&figures, "objects") as usize,
        settings.objects,
        "{figures:?}"
    );
    figures
}

struct Settings {
    /// The object count of the table, or the counts of the sweep.
    counts: Vec<usize>,
    /// Where the sweep draws its plot.
    plot: Option<PathBuf>,
    objects: usize,
    runs: usize,
    settle: u64,
    go_binary: Option<PathBuf>,
}

fn settings() -> Settings {
    let mut settings = Settings {
        counts: vec![50_000],
        plot: None,
        objects: 50_000,
        runs: 1,
        settle: 10,
        go_binary: None,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        let mut value = || {
            rest.next()
                .unwrap_or_else(|| panic!("{arg} needs a value"))
                .clone()
        };
        match arg.as_str() {
            "--objects" => {
                settings.counts = value().split(',').map(|n| n.parse().unwrap()).collect();
                settings.objects = settings.counts[0];
            }
            "--plot" => settings.plot = Some(PathBuf::from(value())),
            "--runs" => settings.runs = value().parse().unwrap(),
            "--settle" => settings.settle = value().parse().unwrap(),
            "--go-binary" => settings.go_binary = Some(PathBuf::from(value())),
            _ => {}
        }
    }
    settings
}

fn mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

async fn run() {
    let settings = settings();
    if settings.counts.len() > 1 {
        return sweep(settings).await;
    }
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("scale").await.unwrap();
    let api = ns.api::<ConfigMap>();
    let created = Instant::now();
    create(&api, 0, settings.objects).await;
    let sample = api.get("scale-000000").await.unwrap();
    let json = serde_json::to_vec(&sample).unwrap().len();
    println!(
        "{} ConfigMaps created in {:.1?} ({json} bytes of JSON each as the server returns them)",
        settings.objects,
        created.elapsed()
    );
    let runs: Vec<&Run> = RUNS
        .iter()
        .filter(|r| matches!(r.how, How::Rust(_)) || settings.go_binary.is_some())
        .collect();
    for sitting in 1..=settings.runs {
        let load_before = load_average();
        let mut rows: Vec<(&str, Figures)> = Vec::new();
        // Rotate the order between sittings, so no implementation always runs first.
        for i in 0..runs.len() {
            let run = runs[(i + sitting - 1) % runs.len()];
            eprintln!("sitting {sitting}: {}", run.name);
            rows.push((run.name, measure(&run.how, env, ns.name(), &settings)));
        }
        rows.sort_by_key(|(name, _)| RUNS.iter().position(|r| r.name == *name));
        let go_peak = rows
            .iter()
            .find(|(name, _)| *name == RUNS[4].name)
            .map(|(_, f)| number(f, "peak"));
        let rudder_steady = number(&rows[0].1, "steady");
        println!();
        println!(
            "Sitting {sitting} of {}: {} ConfigMaps, settle {} s, load average before {load_before}, after {}",
            settings.runs,
            settings.objects,
            settings.settle,
            load_average()
        );
        println!();
        println!(
            "| implementation | sync | CPU to sync | RSS before | peak until synced | steady | peak / steady | (steady - before) per object | peak / client-go's |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (name, f) in &rows {
            let (base, peak, steady) = (number(f, "base"), number(f, "peak"), number(f, "steady"));
            println!(
                "| {name} | {:.2} s | {:.2} s | {} | {} | {} | {:.2}x | {:.2} KB | {} |",
                number(f, "sync-ms") / 1000.0,
                number(f, "cpu-ms") / 1000.0,
                mb(base),
                mb(peak),
                mb(steady),
                peak / steady,
                (steady - base) / settings.objects as f64 / 1000.0,
                go_peak.map_or_else(|| "-".to_owned(), |g| format!("{:.2}x", peak / g)),
            );
        }
        let _ = rudder_steady;
        let released = measure(&How::Rust("rudder-released"), env, ns.name(), &settings);
        let (base, steady, after) = (
            number(&released, "base"),
            number(&released, "steady"),
            number(&released, "released"),
        );
        println!();
        println!(
            "Rudder's cache informer released by its last use: RSS before it was created {}, with it {}, \
             {} s after it stopped {} ({:.2}x of before)",
            mb(base),
            mb(steady),
            settings.settle,
            mb(after),
            after / base
        );
    }
}

/// Creates ConfigMaps `from..to` in `api`'s namespace.
async fn create(api: &Api<ConfigMap>, from: usize, to: usize) {
    futures::stream::iter(from..to)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &config_map(i))
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(32)
        .for_each(|_| async {})
        .await;
}

/// One point of the sweep: an implementation's sync time and steady RSS at a count.
struct Point {
    run: usize,
    objects: usize,
    sync: f64,
    cpu: f64,
    steady: f64,
}

/// Sync time and steady RSS against the object count for Rudder, kube-runtime and
/// controller-runtime, the namespace grown from one count to the next; a table, and a plot
/// where `--plot` says.
async fn sweep(mut settings: Settings) {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("scale-sweep").await.unwrap();
    let api = ns.api::<ConfigMap>();
    let counts = settings.counts.clone();
    let mut points = Vec::new();
    let mut made = 0;
    let load_before = load_average();
    for &count in &counts {
        create(&api, made, count).await;
        made = count;
        settings.objects = count;
        for &run in &SWEEP {
            if matches!(RUNS[run].how, How::Go { .. }) && settings.go_binary.is_none() {
                continue;
            }
            eprintln!("{count} objects: {}", RUNS[run].name);
            let f = measure(&RUNS[run].how, env, ns.name(), &settings);
            points.push(Point {
                run,
                objects: count,
                sync: number(&f, "sync-ms") / 1000.0,
                cpu: number(&f, "cpu-ms") / 1000.0,
                steady: number(&f, "steady"),
            });
        }
    }
    println!();
    println!(
        "Sync time, CPU to sync and steady RSS against the object count (settle {} s, load average before {load_before}, after {}):",
        settings.settle,
        load_average()
    );
    println!();
    println!("| implementation | objects | sync | CPU to sync | steady RSS |");
    println!("|---|---:|---:|---:|---:|");
    for p in &points {
        println!(
            "| {} | {} | {:.2} s | {:.2} s | {} |",
            RUNS[p.run].name,
            p.objects,
            p.sync,
            p.cpu,
            mb(p.steady)
        );
    }
    if let Some(path) = &settings.plot {
        std::fs::write(path, svg(&points)).unwrap();
        println!();
        println!("plot: {}", path.display());
    }
}

/// Two panels, sync time and steady RSS against the object count (both axes logarithmic),
/// one line per implementation.
fn svg(points: &[Point]) -> String {
    const W: f64 = 420.0;
    const H: f64 = 300.0;
    const PAD: f64 = 55.0;
    const COLOURS: [&str; 3] = ["#1f77b4", "#d62728", "#2ca02c"];
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <!-- generated by cargo xtask bench-informers with several object counts; do not edit -->\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        2.0 * W,
        H + 60.0
    );
    type Panel = (&'static str, fn(&Point) -> f64);
    let panels: [Panel; 2] = [
        ("sync time (s)", |p| p.sync),
        ("steady RSS (MB)", |p| p.steady / 1e6),
    ];
    let log = |v: f64| v.max(1e-3).log10();
    let (x_min, x_max) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
        (a.min(log(p.objects as f64)), b.max(log(p.objects as f64)))
    });
    for (panel, (title, value)) in panels.iter().enumerate() {
        let left = panel as f64 * W;
        let (y_min, y_max) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
            (a.min(log(value(p))), b.max(log(value(p))))
        });
        let x =
            |v: f64| left + PAD + (log(v) - x_min) / (x_max - x_min).max(1e-9) * (W - 1.5 * PAD);
        let y = |v: f64| H - (log(v) - y_min) / (y_max - y_min).max(1e-9) * (H - 1.5 * PAD);
        out += &format!(
            "<text x=\"{}\" y=\"18\" font-size=\"13\">{title}, against objects (log-log)</text>\n\
             <line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n\
             <line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"30\" stroke=\"black\"/>\n",
            left + PAD,
            H,
            left + W - PAD / 2.0,
        );
        let mut counts: Vec<usize> = points.iter().map(|p| p.objects).collect();
        counts.dedup();
        for count in counts {
            out += &format!(
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{count}</text>\n",
                x(count as f64),
                H + 15.0
            );
        }
        for v in [y_min, (y_min + y_max) / 2.0, y_max] {
            let value = 10f64.powf(v);
            out += &format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{value:.2}</text>\n",
                left + PAD - 4.0,
                y(value) + 4.0
            );
        }
        for (line, &run) in SWEEP.iter().enumerate() {
            let coords: Vec<String> = points
                .iter()
                .filter(|p| p.run == run)
                .map(|p| format!("{:.1},{:.1}", x(p.objects as f64), y(value(p))))
                .collect();
            if coords.is_empty() {
                continue;
            }
            out += &format!(
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n",
                COLOURS[line],
                coords.join(" ")
            );
        }
    }
    for (line, &run) in SWEEP.iter().enumerate() {
        out += &format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n",
            PAD,
            H + 32.0 + 14.0 * line as f64,
            COLOURS[line],
            RUNS[run].name
        );
    }
    out += "</svg>\n";
    out
}

fn main() {
    // `cargo test` runs bench targets without `--bench`; only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // A child runs on the runtime an operator's `#[tokio::main]` gives it: a thread per core
    // (client-go's program has GOMAXPROCS threads likewise).
    let rt = match std::env::var_os(CHILD) {
        Some(_) => tokio::runtime::Builder::new_multi_thread(),
        None => tokio::runtime::Builder::new_current_thread(),
    }
    .enable_all()
    .build()
    .unwrap();
    match std::env::var(CHILD) {
        Ok(which) => rt.block_on(child(&which)),
        Err(_) => rt.block_on(run()),
    }
}
