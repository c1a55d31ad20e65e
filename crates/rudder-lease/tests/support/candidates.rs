//! Leader-election candidates in processes of their own, Rudder's and client-go's, for the
//! interop test and the election bench: each prints what it believes, stamped with
//! `CLOCK_MONOTONIC` (one clock for every process on the machine).
//!
//! client-go's candidate is `go/cmd/elector` in the repository's Go module (`go/go.mod` pins
//! client-go), built with the machine's Go and cached by a hash of the module's `go.mod`,
//! `go.sum`, the candidate's source and the Go version. Rudder's candidate is the calling test
//! or bench binary run again with [`CHILD_ENV`] set, which calls [`rudder_candidate`].
//!
//! Lines printed by both, `<ns>` being monotonic nanoseconds:
//! `candidate <ns>` (about to try), `started <ns>` (client-go: in `OnStartedLeading`; Rudder:
//! when `acquire` returned), `stopped <ns> <why>` (its leader work is over: before a release
//! is written, or when the loss is noticed), `exited <ns>`. Rudder's also prints
//! `valid <ns> <sent ns>` whenever its validity moves: the instant until which it may start
//! leader work, and when the write that gave it was sent. A `release` line on stdin stops
//! leading and releases the Lease.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};
use rustix::time::{ClockId, clock_gettime};

/// Set (to the candidate's settings) in a Rudder candidate's environment.
pub(crate) const CHILD_ENV: &str = "RUDDER_ELECTION_CANDIDATE";

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub(crate) fn mono() -> i64 {
    let ts = clock_gettime(ClockId::Monotonic);
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// A tokio instant on the monotonic clock, in nanoseconds (tokio's clock is std's, which is
/// `CLOCK_MONOTONIC` on Linux, when it is not paused).
pub(crate) fn mono_of(instant: tokio::time::Instant) -> i64 {
    let (now, now_mono) = (tokio::time::Instant::now(), mono());
    if instant >= now {
        now_mono + i64::try_from((instant - now).as_nanos()).unwrap_or(i64::MAX)
    } else {
        now_mono - i64::try_from((now - instant).as_nanos()).unwrap_or(i64::MAX)
    }
}

/// Lease duration, renew deadline, retry period.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timings {
    pub(crate) lease: Duration,
    pub(crate) renew: Duration,
    pub(crate) retry: Duration,
}

impl Timings {
    /// client-go's defaults.
    pub(crate) const DEFAULT: Self = Self {
        lease: Duration::from_secs(15),
        renew: Duration::from_secs(10),
        retry: Duration::from_secs(2),
    };
    /// Short ones, for tests.
    pub(crate) const SHORT: Self = Self {
        lease: Duration::from_secs(3),
        renew: Duration::from_secs(2),
        retry: Duration::from_millis(500),
    };
}

/// Which elector a candidate runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// client-go's, from `go/cmd/elector`.
    Go,
    /// Rudder's, with or without its Lease watch.
    Rudder { watch: bool },
}

/// One line a candidate printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    Candidate(i64),
    Started(i64),
    Valid { until: i64, sent: i64 },
    Stopped(i64, String),
    Exited(i64),
}

/// Where one candidate's Lease is and how to reach the API server.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) kubeconfig: PathBuf,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) timings: Timings,
}

/// Builds client-go's candidate (once per version of its module, its source and Go) and
/// returns its path.
pub(crate) fn go_elector() -> Result<PathBuf, String> {
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../go");
    let cache = rudder_envtest::setup::cache_dir()
        .and_then(|envtest| Some(envtest.parent()?.join("go")))
        .ok_or("neither XDG_CACHE_HOME nor HOME is set, so there is no Go cache directory")?;
    let go_mod = read(&module.join("go.mod"))?;
    let version = go_version(&go_mod)?;
    let mut hasher = DefaultHasher::new();
    version.hash(&mut hasher);
    go_mod.hash(&mut hasher);
    read(&module.join("go.sum"))?.hash(&mut hasher);
    read(&module.join("cmd/elector/main.go"))?.hash(&mut hasher);
    let bin = cache.join("bin");
    let binary = bin.join(format!("elector-{:016x}", hasher.finish()));
    if binary.is_file() {
        return Ok(binary);
    }
    std::fs::create_dir_all(&bin).map_err(|e| format!("create {}: {e}", bin.display()))?;
    // Built under a name of its own, then renamed: a concurrent test binary never runs half
    // a file.
    let partial = bin.join(format!("elector.{}.partial", std::process::id()));
    let output = go(&cache)
        .arg("build")
        .arg("-o")
        .arg(&partial)
        .arg("./cmd/elector")
        .current_dir(&module)
        .output()
        .map_err(|e| format!("could not run `go build`: {e}"))?;
    if !output.status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(format!(
            "`go build ./cmd/elector` in {} failed: {}",
            module.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    std::fs::rename(&partial, &binary).map_err(|e| format!("install {}: {e}", binary.display()))?;
    Ok(binary)
}

/// `go` as the project runs it everywhere: the machine's toolchain only, go.mod and go.sum as
/// committed, and one module and build cache (`cache`, which the envtest install and the
/// xtask benches share); no VCS stamp, so the binary does not depend on the checkout's state.
fn go(cache: &Path) -> Command {
    let mut command = Command::new("go");
    command
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=readonly -buildvcs=false")
        .env("GOMODCACHE", cache.join("mod"))
        .env("GOCACHE", cache.join("build"))
        .env("CGO_ENABLED", "0");
    command
}

/// The machine's Go version (`go1.26.8`), checked against the `go` line of `go_mod`.
fn go_version(go_mod: &str) -> Result<String, String> {
    let needed = go_mod
        .lines()
        .find_map(|line| line.strip_prefix("go "))
        .map(str::trim)
        .ok_or("go/go.mod has no `go` line")?;
    let output = Command::new("go")
        .arg("env")
        .arg("GOVERSION")
        .env("GOTOOLCHAIN", "local")
        .output()
        .map_err(|e| {
            format!(
                "could not run `go` ({e}): client-go's candidate is built from the Go module in \
                 go/, which needs Go {needed} or newer on the PATH"
            )
        })?;
    let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let numbers = |v: &str| -> Vec<u32> {
        v.split(|c: char| !c.is_ascii_digit())
            .map_while(|n| n.parse().ok())
            .collect()
    };
    let have = numbers(version.strip_prefix("go").unwrap_or_default());
    if !output.status.success() || have.is_empty() {
        return Err(format!(
            "`go env GOVERSION` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    if have < numbers(needed) {
        return Err(format!(
            "go/go.mod needs Go {needed} or newer, and the `go` on the PATH is {version}"
        ));
    }
    Ok(version)
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))
}

/// A candidate process and what it printed so far.
pub(crate) struct Candidate {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    namespace: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<(Mutex<Vec<Line>>, Condvar)>,
    /// When it was killed, if it was.
    pub(crate) killed: Option<i64>,
}

impl Candidate {
    /// Starts a candidate named `name`; `rudder_exe` and `rudder_args` run a Rudder candidate
    /// (the calling binary, which calls [`rudder_candidate`] when it sees [`CHILD_ENV`]).
    pub(crate) fn spawn(
        kind: Kind,
        name: &str,
        target: &Target,
        go: &Path,
        rudder_exe: &Path,
        rudder_args: &[&str],
    ) -> Self {
        let t = target.timings;
        let mut command = match kind {
            Kind::Go => {
                let mut c = Command::new(go);
                c.arg(format!("-kubeconfig={}", target.kubeconfig.display()))
                    .arg(format!("-namespace={}", target.namespace))
                    .arg(format!("-name={}", target.name))
                    .arg(format!("-identity={name}"))
                    .arg(format!("-lease={}ms", t.lease.as_millis()))
                    .arg(format!("-renew={}ms", t.renew.as_millis()))
                    .arg(format!("-retry={}ms", t.retry.as_millis()));
                c
            }
            Kind::Rudder { watch } => {
                let mut c = Command::new(rudder_exe);
                c.args(rudder_args).env(
                    CHILD_ENV,
                    [
                        target.kubeconfig.display().to_string(),
                        target.namespace.clone(),
                        target.name.clone(),
                        name.to_owned(),
                        t.lease.as_millis().to_string(),
                        t.renew.as_millis().to_string(),
                        t.retry.as_millis().to_string(),
                        watch.to_string(),
                    ]
                    .join("|"),
                );
                c
            }
        };
        // Rudder's candidates print nothing on stderr but a panic; client-go's log there,
        // kept in a file in case a test fails.
        let stderr = if kind == Kind::Go {
            std::fs::File::create(log_path(&target.namespace, name))
                .map_or_else(|_| Stdio::null(), Stdio::from)
        } else {
            Stdio::inherit()
        };
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start a candidate");
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for text in BufReader::new(stdout).lines() {
                let Ok(text) = text else { break };
                if let Some(line) = parse(&text) {
                    let (lock, changed) = &*sink;
                    lock.lock().unwrap().push(line);
                    changed.notify_all();
                }
            }
        });
        Self {
            name: name.to_owned(),
            kind,
            namespace: target.namespace.clone(),
            stdin: child.stdin.take(),
            child,
            lines,
            killed: None,
        }
    }

    /// Where a client-go candidate's log (its stderr) is kept.
    pub(crate) fn log(&self) -> PathBuf {
        log_path(&self.namespace, &self.name)
    }

    /// Everything printed so far.
    pub(crate) fn lines(&self) -> Vec<Line> {
        self.lines.0.lock().unwrap().clone()
    }

    /// Waits until a printed line matches, and returns it.
    pub(crate) fn wait_for(&self, timeout: Duration, what: impl Fn(&Line) -> bool) -> Option<Line> {
        let (lock, changed) = &*self.lines;
        let deadline = std::time::Instant::now() + timeout;
        let mut lines = lock.lock().unwrap();
        loop {
            if let Some(line) = lines.iter().find(|l| what(l)) {
                return Some(line.clone());
            }
            let left = deadline.checked_duration_since(std::time::Instant::now())?;
            lines = changed.wait_timeout(lines, left).unwrap().0;
        }
    }

    /// Waits until the lines printed so far satisfy `what`; false on timeout.
    pub(crate) fn wait_until(&self, timeout: Duration, what: impl Fn(&[Line]) -> bool) -> bool {
        let (lock, changed) = &*self.lines;
        let deadline = std::time::Instant::now() + timeout;
        let mut lines = lock.lock().unwrap();
        loop {
            if what(&lines) {
                return true;
            }
            let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else {
                return false;
            };
            lines = changed.wait_timeout(lines, left).unwrap().0;
        }
    }

    /// When it started leading, if it did (the first `started`).
    pub(crate) fn started(&self) -> Option<i64> {
        self.lines().iter().find_map(|l| match l {
            Line::Started(t) => Some(*t),
            _ => None,
        })
    }

    /// Waits until it leads.
    pub(crate) fn wait_started(&self, timeout: Duration) -> Option<i64> {
        self.wait_for(timeout, |l| matches!(l, Line::Started(_)))
            .map(|l| match l {
                Line::Started(t) => t,
                _ => unreachable!(),
            })
    }

    /// Asks it to stop leading and release the Lease.
    pub(crate) fn release(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "release").expect("write to the candidate");
        stdin.flush().expect("write to the candidate");
    }

    fn signal(&self, signal: Signal) {
        let pid = Pid::from_child(&self.child);
        kill_process(pid, signal).expect("signal the candidate");
    }

    /// Kills it (SIGKILL) and returns the monotonic time after the kill was sent.
    pub(crate) fn kill(&mut self) -> i64 {
        self.signal(Signal::KILL);
        let _ = self.child.wait();
        let at = mono();
        self.killed = Some(at);
        at
    }

    /// Freezes it (SIGSTOP).
    pub(crate) fn pause(&self) {
        self.signal(Signal::STOP);
    }

    /// Resumes it (SIGCONT) and returns the monotonic time just before the signal (the
    /// candidate may run before this process reads the clock again).
    pub(crate) fn resume(&self) -> i64 {
        let at = mono();
        self.signal(Signal::CONT);
        at
    }

    /// Waits for it to exit (after a release or a loss).
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the candidate") {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The intervals during which it believed it led, in monotonic nanoseconds, taken
    /// conservatively: from `started` (for Rudder, from when its acquiring write was sent,
    /// which is earlier) to `stopped`, its kill, or `end` if it still leads. For Rudder, a
    /// leadership also ends when its last validity runs out, since no leader work starts
    /// after it (that is what a frozen process relies on). The validity is printed by a task
    /// of the candidate's runtime right after each renewal; a freeze landing in the few
    /// microseconds between a renewal and that print would make this end one renewal early.
    pub(crate) fn intervals(&self, end: i64) -> Vec<(i64, i64)> {
        let rudder = matches!(self.kind, Kind::Rudder { .. });
        let mut out = Vec::new();
        // The current leadership: its start, its earliest send and latest validity.
        let mut start: Option<i64> = None;
        let mut first_sent: Option<i64> = None;
        let mut last_until: Option<i64> = None;
        let close = |stop: i64, start: i64, first_sent: Option<i64>, until: Option<i64>| {
            let start = if rudder {
                first_sent.map_or(start, |s| s.min(start))
            } else {
                start
            };
            let stop = if rudder {
                until.map_or(stop, |u| u.min(stop))
            } else {
                stop
            };
            (start, stop)
        };
        for line in self.lines() {
            match line {
                Line::Valid { until, sent } => {
                    first_sent = Some(first_sent.map_or(sent, |f| f.min(sent)));
                    last_until = Some(last_until.map_or(until, |u| u.max(until)));
                }
                Line::Started(t) => start = Some(t),
                Line::Stopped(t, _) => {
                    if let Some(begun) = start.take() {
                        out.push(close(t, begun, first_sent, last_until));
                    }
                    (first_sent, last_until) = (None, None);
                }
                _ => {}
            }
        }
        if let Some(begun) = start {
            out.push(close(
                self.killed.unwrap_or(end),
                begun,
                first_sent,
                last_until,
            ));
        }
        out
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn log_path(namespace: &str, name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rudder-elector-{namespace}-{name}.log"))
}

fn parse(text: &str) -> Option<Line> {
    // libtest prints `test <name> ... ` before running a test, on the line the test's first
    // output then continues.
    let text = text.rsplit_once(" ... ").map_or(text, |(_, rest)| rest);
    let mut words = text.split_whitespace();
    let word = words.next()?;
    let mut number = || words.next().and_then(|w| w.parse::<i64>().ok());
    Some(match word {
        "candidate" => Line::Candidate(number()?),
        "started" => Line::Started(number()?),
        "valid" => {
            let until = number()?;
            let sent = number()?;
            Line::Valid { until, sent }
        }
        "stopped" => {
            let at = number()?;
            Line::Stopped(at, words.next().unwrap_or_default().to_owned())
        }
        "exited" => Line::Exited(number()?),
        _ => return None,
    })
}

/// Fails with every candidate's intervals if two of them overlap at all.
pub(crate) fn assert_no_overlap(candidates: &[Candidate], end: i64) {
    let mut all: Vec<(i64, i64, &str)> = candidates
        .iter()
        .flat_map(|c| {
            c.intervals(end)
                .into_iter()
                .map(move |(a, b)| (a, b, c.name.as_str()))
        })
        .collect();
    all.sort_unstable();
    let table = || {
        let origin = all.first().map_or(0, |a| a.0);
        all.iter()
            .map(|(a, b, n)| {
                format!(
                    "  {n:>10}: {:>9.3} s .. {:>9.3} s",
                    (a - origin) as f64 / 1e9,
                    (b - origin) as f64 / 1e9
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    for pair in all.windows(2) {
        let ((_, end_a, a), (start_b, _, b)) = (pair[0], pair[1]);
        assert!(
            end_a <= start_b,
            "{a} and {b} both believed they led for {} µs; leading intervals:\n{}",
            (end_a - start_b) / 1000,
            table()
        );
    }
}

/// A Rudder candidate, in the child process: reads its settings from [`CHILD_ENV`], tries to
/// lead, and prints what it believes; exits 0 after a release, 3 on a loss.
pub(crate) async fn rudder_candidate(settings: &str) -> ! {
    use rudder_lease::leader_election::{LeaderElection, LeaderElectionConfig};
    use tokio_util::sync::CancellationToken;

    let fields: Vec<&str> = settings.split('|').collect();
    let [
        kubeconfig,
        namespace,
        name,
        identity,
        lease,
        renew,
        retry,
        watch,
    ] = fields[..]
    else {
        panic!("bad {CHILD_ENV}: {settings}");
    };
    let ms = |v: &str| Duration::from_millis(v.parse().expect("milliseconds"));
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("read the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("the kubeconfig's config");
    let client = kube::Client::try_from(config).expect("a client");
    let election = LeaderElection::new(
        client,
        LeaderElectionConfig::new(namespace, name)
            .with_identity(identity)
            .with_lease_duration(ms(lease))
            .with_renew_deadline(ms(renew))
            .with_retry_period(ms(retry))
            .with_release_on_cancel(true)
            .with_watch(watch == "true"),
    )
    .expect("valid settings");
    let lease_duration = ms(lease);

    let mut validity = election.validity();
    tokio::spawn(async move {
        while validity.changed().await.is_ok() {
            let until = *validity.borrow_and_update();
            if let Some(until) = until {
                let until = mono_of(until);
                // When the write the validity counts from was sent: the last one, or the first
                // of a run that client-go cannot tell apart (renewals within one second).
                let sent = until - i64::try_from(lease_duration.as_nanos()).unwrap_or(0);
                println!("valid {until} {sent}");
            }
        }
    });

    let leading = Arc::new(Mutex::new(false));
    let stop = CancellationToken::new();
    {
        let (leading, stop) = (Arc::clone(&leading), stop.clone());
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                if line.is_ok_and(|l| l == "release") {
                    let mut leading = leading.lock().unwrap();
                    if *leading {
                        // The leader work would end here, before the Lease is released.
                        println!("stopped {} released", mono());
                        *leading = false;
                    }
                    stop.cancel();
                }
            }
        });
    }
    println!("candidate {}", mono());
    let Ok(leadership) = election.acquire(stop.clone()).await else {
        println!("exited {}", mono());
        std::process::exit(0);
    };
    {
        let mut leading = leading.lock().unwrap();
        *leading = true;
        println!("started {}", mono());
    }
    tokio::select! {
        _ = leadership.lost() => {
            let mut leading = leading.lock().unwrap();
            if *leading {
                println!("stopped {} lost", mono());
                *leading = false;
            }
            println!("exited {}", mono());
            std::process::exit(3);
        }
        () = stop.cancelled() => {
            let _ = leadership.finished().await;
            println!("exited {}", mono());
            std::process::exit(0);
        }
    }
}
