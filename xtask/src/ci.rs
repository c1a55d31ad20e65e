//! `cargo xtask ci`: everything CI checks, in the order that fails fastest.

use xtask::util::{cargo, run as sh, step};
use xtask::versions::{DEFAULT_KUBERNETES, OLDEST_KUBERNETES};

/// Runs the whole CI pipeline. Extra arguments are passed to `cargo test`; `commands` are
/// xtask's commands, which `tidy` checks the docs name.
pub(crate) fn run_ci(test_args: &[&str], commands: &[&str]) -> Result<(), String> {
    // The default control plane first: a failed build stops CI before the Rust builds. The
    // oldest one then builds in a child process while the checks below run (on a cold
    // machine Go's build and cargo's fill each other's idle cores: the checks leave about a
    // third of two cores unused), joined before the tests.
    let assets = step(
        &format!("envtest install (Kubernetes {DEFAULT_KUBERNETES}, the default)"),
        || xtask::envtest::install(false),
    )?;
    let oldest_install = step(
        &format!(
            "envtest install (Kubernetes {OLDEST_KUBERNETES}, the oldest supported): started beside the checks"
        ),
        || InstallBeside::start(OLDEST_KUBERNETES),
    )?;
    step(
        "tools the checks run (promtool, ss, dot)",
        install_test_tools,
    )?;
    // A scaffolded controller goes through every check and test below, then is removed.
    let _scaffold = step(
        "cargo xtask new-controller (for CI)",
        crate::scaffold::scaffold_for_ci,
    )?;
    step("cargo fmt --check", || {
        sh(cargo().args(["fmt", "--all", "--check"]))
    })?;
    step("cargo xtask tidy", || crate::tidy::run(&[], commands))?;
    // The dependency tree against deny.toml (licenses, duplicate versions, sources; the
    // advisories need GitHub, so the GitHub workflow checks them), and docs/ as a book.
    // Both tools are installed at pinned versions into ~/.cache/rudder/tools the first time.
    step(
        "cargo xtask deny (cargo deny check licenses bans sources)",
        crate::tools::deny,
    )?;
    step("cargo xtask book (mdbook build)", crate::tools::book)?;
    step(
        "TLS crates only where a feature asks for them",
        tls_by_feature,
    )?;
    step(
        "cargo check -p rudder-runtime --no-default-features --features manager",
        || {
            sh(cargo().args([
                "check",
                "-p",
                "rudder-runtime",
                "--no-default-features",
                "--features",
                "manager",
            ]))
        },
    )?;
    step("cargo clippy", || {
        sh(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ]))
    })?;
    // The work queue's production-build benches are a workspace of their own (see their
    // Cargo.toml); built here so that they keep compiling with the queue they measure.
    step("cargo clippy (crates/rudder-workqueue/bench)", || {
        sh(cargo().args([
            "clippy",
            "--manifest-path",
            "crates/rudder-workqueue/bench/Cargo.toml",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    })?;
    // Every publishable crate's surface against its committed public-api.txt: one nightly
    // `cargo doc` with JSON output for all of them (their dependencies checked once).
    step(
        "cargo xtask public-api --check (nightly rustdoc JSON)",
        || crate::public_api::run(crate::public_api::Mode::Check),
    )?;
    step("cargo doc", || {
        sh(cargo()
            .args(["doc", "--workspace", "--no-deps", "--all-features"])
            .env("RUSTDOCFLAGS", "-D warnings"))
    })?;
    step("cargo package (every publishable crate)", package)?;
    step("cargo xtask checkov", crate::checkov::run_checkov)?;
    step(
        "go/: go mod tidy -diff, go vet, the protobuf schema, the benches built and run briefly",
        go_checks,
    )?;
    step(
        "cargo fuzz: each target of fuzz/ briefly (nightly)",
        fuzz_briefly,
    )?;
    let oldest = step(
        &format!("envtest install (Kubernetes {OLDEST_KUBERNETES}, the oldest supported): joined"),
        || oldest_install.join(),
    )?;
    // What is tested is what ships (DESIGN.md, invariant 21): the default features, as an
    // operator builds them, then each feature-gated test in a build with its feature on.
    step("cargo test", || {
        sh(cargo()
            .args(["test", "--workspace"])
            .args(test_args)
            .env("RUDDER_REQUIRE_PROMTOOL", "1")
            .env("RUDDER_ENVTEST_ASSETS", &assets))
    })?;
    for feature_test in FEATURE_TESTS {
        step(&feature_test.describe(), || {
            sh(cargo()
                .args(feature_test.args())
                .args(test_args)
                .env("RUDDER_REQUIRE_PROMTOOL", "1")
                .env("RUDDER_ENVTEST_ASSETS", &assets))
        })?;
    }
    // The same tests, already built, on the oldest release k8s-openapi supports: the whole
    // suite, as a cold run still fits CI's time (docs/envtest.md has the figures).
    step(
        &format!("cargo test on Kubernetes {OLDEST_KUBERNETES}"),
        || {
            sh(cargo()
                .args(["test", "--workspace"])
                .args(test_args)
                .env("RUDDER_REQUIRE_PROMTOOL", "1")
                .env("RUDDER_ENVTEST_ASSETS", &oldest))
        },
    )?;
    step(
        "cargo xtask new-operator (a project outside the workspace)",
        || crate::scaffold::operator_ci_check(&assets),
    )?;
    // The binary the tests built: in the profile they were built in.
    let profile = if test_args.contains(&"--release") {
        "release"
    } else {
        "debug"
    };
    step("demo (12 s)", || crate::demo::run_built(profile, 12))?;
    println!("ci: all checks passed");
    Ok(())
}

/// A control plane installed by a child `cargo xtask envtest install --print-path` while
/// other steps run: its progress goes to a log file, printed when it is joined; if CI stops
/// before joining it (a step failed), it is killed with the Go builds it started (its
/// process group) and reaped.
struct InstallBeside {
    child: Option<std::process::Child>,
    log: std::path::PathBuf,
    version: &'static str,
}

impl InstallBeside {
    fn start(version: &'static str) -> Result<Self, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find xtask's own binary to run the install: {e}"))?;
        Self::spawn(
            std::process::Command::new(exe).args([
                "envtest",
                "install",
                "--version",
                version,
                "--print-path",
            ]),
            version,
        )
    }

    /// Starts `command`, whose stdout is the installed directory and stderr its progress.
    fn spawn(command: &mut std::process::Command, version: &'static str) -> Result<Self, String> {
        let log = std::env::temp_dir().join(format!(
            "rudder-ci-envtest-{version}-{}.log",
            std::process::id()
        ));
        let file =
            std::fs::File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        use std::os::unix::process::CommandExt as _;
        let child = command
            // A group of its own: the `go` builds it starts are killed with it.
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(file)
            .spawn()
            .map_err(|e| format!("starting the install of {version}: {e}"))?;
        println!("  its progress: {}", log.display());
        Ok(Self {
            child: Some(child),
            log,
            version,
        })
    }

    /// Waits for the install, prints its progress, and returns the installed directory.
    fn join(mut self) -> Result<std::path::PathBuf, String> {
        let Some(child) = self.child.take() else {
            return Err(format!("the install of {} was joined twice", self.version));
        };
        // stdout carries one line (the directory), well within a pipe's buffer.
        let output = child
            .wait_with_output()
            .map_err(|e| format!("waiting for the install of {}: {e}", self.version))?;
        let progress = std::fs::read_to_string(&self.log).unwrap_or_default();
        let _ = std::fs::remove_file(&self.log);
        print!("{progress}");
        if !output.status.success() {
            return Err(format!(
                "the install of Kubernetes {} failed ({}); its output is above",
                self.version, output.status
            ));
        }
        let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if dir.is_empty() {
            return Err(format!(
                "the install of Kubernetes {} printed no directory",
                self.version
            ));
        }
        Ok(std::path::PathBuf::from(dir))
    }
}

impl Drop for InstallBeside {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // The whole group (its id is the child's), then the child itself in case `kill`
            // could not be run.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// A test target run in a build of one package with exactly `features` on, beside the
/// workspace's default-feature run.
struct FeatureTest {
    package: &'static str,
    /// Empty: the package's own default features, which the workspace's run does not build
    /// (another member turns more on there, and cargo unifies them).
    features: &'static str,
    /// `["--test", NAME]`, or `["--lib"]`.
    targets: &'static [&'static str],
}

impl FeatureTest {
    fn args(&self) -> Vec<&'static str> {
        let mut args = vec!["test", "-p", self.package];
        if !self.features.is_empty() {
            args.extend(["--features", self.features]);
        }
        args.extend(self.targets);
        args
    }

    fn describe(&self) -> String {
        format!("cargo {}", self.args().join(" "))
    }
}

/// The tests a default-feature run leaves out, each in a build with exactly what it needs.
/// Every feature that is not a default, and where its tests run:
///
/// - `rudder-cache/metrics`: on in the workspace run (rudder-manager enables it: every
///   manager ships the cache's metrics), so its tests run there; the cache used alone has it
///   off, and its unit tests run so below.
/// - `rudder-workqueue/metrics`: on in the workspace run (rudder-controller enables it), the
///   `prometheus` test included; the queue alone has it off, and its unit tests run so below.
/// - `rudder-webhook/http2` (and the `rudder-server/http2` it turns on): `tests/http2.rs`.
/// - `rudder-runtime/webhook-http2`: the API server calling a webhook over HTTP/2 in
///   `tests/webhook.rs`.
/// - `rudder-runtime/openssl-tls`, `rudder-envtest/openssl-tls`: no test of their own (the
///   client's TLS stack is kube's); `tls_by_feature` checks what they bring, and clippy and
///   the docs build them with `--all-features`.
/// - `rudder-manager/profiling` (and `rudder-runtime/profiling`, which turns it on): a CPU
///   profile taken while a controller works, read by `go tool pprof` (`tests/profiling.rs`),
///   and the unit tests of `profiling.rs`.
/// - `rudder-manager/heap-profiling` (and `rudder-runtime/heap-profiling`): a heap profile
///   from jemalloc's profiler in a binary that makes it the allocator, read by `go tool
///   pprof` (`tests/heap_profiling.rs`), the `501` of a process without `prof:true`
///   (`tests/heap_profiling_off.rs`), and the unit tests of `profiling.rs` with it on (the
///   `501` of a process whose allocator is the system's).
/// - `rudder-manager/otlp` (and `rudder-runtime/otlp`, which turns it on, and the
///   `rudder-webhook/otlp` it turns on): a reconcile span exported over HTTP/protobuf by the
///   manager's own setup (`tests/otlp.rs`), a webhook span under the `traceparent` sent,
///   exported over gRPC from the program's own subscriber (`tests/otlp_webhook.rs`), the
///   `OTEL_*` variables honoured in child processes (`tests/otlp_env.rs`), all read by a
///   receiver decoding the protocol's own messages; and the unit tests of `otlp`.
/// - `rudder-runtime/envtest`: a re-export of rudder-envtest, which the tests use directly
///   (and docs/writing-an-operator.md's blocks, compiled by `doctests/`, through the facade).
/// - `rudder-doctests/profiling`, `rudder-doctests/heap-profiling`, `rudder-doctests/otlp`:
///   docs/operating.md's three blocks that use those facade features (`--doc`).
///
/// Each feature set rebuilds the crates above the ones it changes (and third-party crates
/// whose features differ in a one-package build). In the cold run of 2026-12-07 (before the
/// `heap-profiling` set, which also builds jemalloc) the sets took 451 s in all, builds and
/// tests (docs/envtest.md, "Figures").
const FEATURE_TESTS: &[FeatureTest] = &[
    FeatureTest {
        package: "rudder-cache",
        features: "",
        targets: &["--lib"],
    },
    FeatureTest {
        package: "rudder-workqueue",
        features: "",
        targets: &["--lib"],
    },
    FeatureTest {
        package: "rudder-webhook",
        features: "http2",
        targets: &["--test", "http2"],
    },
    FeatureTest {
        package: "rudder-runtime",
        features: "webhook-http2",
        targets: &["--test", "webhook"],
    },
    FeatureTest {
        package: "rudder-manager",
        features: "profiling",
        targets: &["--test", "profiling", "--test", "secure_metrics", "--lib"],
    },
    FeatureTest {
        package: "rudder-manager",
        features: "heap-profiling",
        targets: &[
            "--test",
            "heap_profiling",
            "--test",
            "heap_profiling_off",
            "--lib",
        ],
    },
    FeatureTest {
        package: "rudder-manager",
        features: "otlp",
        targets: &[
            "--test",
            "otlp",
            "--test",
            "otlp_env",
            "--test",
            "otlp_webhook",
            "--lib",
        ],
    },
    // docs/operating.md's blocks for the three opt-in features: last, so the manager's
    // otlp and profiling builds above are there to reuse.
    FeatureTest {
        package: "rudder-doctests",
        features: "heap-profiling,otlp",
        targets: &["--doc"],
    },
];

/// The Go module's own checks: go.mod and go.sum as `go mod tidy` leaves them, `go vet`,
/// rudder-protobuf's `schema.json` as `go/cmd/proto-schema` prints it, and
/// each benchmark built and run a hundred times, so the anchors keep working between sittings.
fn go_checks() -> Result<(), String> {
    let go = xtask::go::Go::find()?;
    sh(go.command().args(["mod", "tidy", "-diff"]))?;
    sh(go.command().args(["vet", "./..."]))?;
    // rudder-protobuf's schema is what the Go program prints (tidy checks the Rust made
    // from it).
    let root = xtask::util::workspace_root();
    let committed =
        std::fs::read_to_string(crate::protobuf::schema_path(&root)).unwrap_or_default();
    if committed != crate::protobuf::go_schema()? {
        return Err(format!(
            "{}: not what go/cmd/proto-schema prints; run `cargo xtask protobuf`",
            crate::protobuf::schema_path(&root).display()
        ));
    }
    sh(go.command().args([
        "test",
        "-run",
        "^$",
        "-bench",
        ".",
        "-benchtime=100x",
        "./...",
    ]))
}

/// cargo-fuzz, installed from crates.io with its lock file into the tools cache.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// The targets under `fuzz/fuzz_targets/` (fuzz/README.md says what each checks).
const FUZZ_TARGETS: &[&str] = &[
    "protobuf_decode",
    "watch_frames",
    "admission_review",
    "defaulting_patch",
];

/// How long CI runs each fuzz target, from the committed seeds: long enough to catch a
/// decoder that panics on its first mutations, short enough for CI's budget (the targets'
/// cold build is most of the step; fuzz/README.md has the figures).
const FUZZ_SECONDS: u32 = 15;

/// Installs cargo-fuzz into `~/.cache/rudder/tools` if it is not there, builds the fuzz
/// targets with nightly (no sanitizer: the decoders are safe Rust, and a sanitized build of
/// their dependencies costs minutes), and runs each for [`FUZZ_SECONDS`] from its seeds. A
/// crash fails the step, its input saved under `fuzz/artifacts/<target>/`.
fn fuzz_briefly() -> Result<(), String> {
    let tools = xtask::util::cache_base()?.join("tools");
    let bin = tools.join("bin");
    // The rustup proxy, not the toolchain's cargo this task runs under: `+nightly` is the
    // proxy's, and the task's own toolchain variables would pin the stable one.
    let rustup_cargo = || {
        let mut cmd = xtask::util::cargo_of_path();
        cmd.env_remove("RUSTUP_TOOLCHAIN").env_remove("CARGO");
        cmd
    };
    if !bin.join("cargo-fuzz").is_file() {
        sh(rustup_cargo()
            .args([
                "install",
                "--locked",
                "--version",
                CARGO_FUZZ_VERSION,
                "--root",
            ])
            .arg(&tools)
            .arg("cargo-fuzz")
            // A temporary target directory, removed once installed.
            .env_remove("CARGO_TARGET_DIR"))?;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&path)))
        .map_err(|e| format!("cannot put the tools cache on PATH: {e}"))?;
    let root = xtask::util::workspace_root();
    let fuzz = |args: &[&str]| {
        let mut cmd = rustup_cargo();
        cmd.current_dir(&root)
            .env("PATH", &path)
            .args(["+nightly", "fuzz"])
            .args(args);
        cmd
    };
    sh(&mut fuzz(&["build", "-s", "none"]))?;
    for target in FUZZ_TARGETS {
        let corpus = root.join("fuzz/corpus").join(target);
        std::fs::create_dir_all(&corpus)
            .map_err(|e| format!("creating {}: {e}", corpus.display()))?;
        let seeds = format!("fuzz/seeds/{target}");
        let corpus = corpus.display().to_string();
        let seconds = format!("-max_total_time={FUZZ_SECONDS}");
        sh(&mut fuzz(&[
            "run", target, "-s", "none", &corpus, &seeds, "--", &seconds,
        ]))?;
    }
    Ok(())
}

/// Debian packages of the programs some checks run, by the program each provides: Prometheus'
/// own metrics linter, the socket statistics that show a listener's backlog, and Graphviz,
/// whose renderings `tidy` compares with the committed diagrams.
const TEST_TOOLS: &[(&str, &str)] = &[
    ("promtool", "prometheus"),
    ("ss", "iproute2"),
    ("dot", "graphviz"),
];

/// Installs the [`TEST_TOOLS`] missing from `PATH` with apt-get. The test steps then set
/// `RUDDER_REQUIRE_PROMTOOL`, so a test that cannot find promtool fails instead of skipping it.
fn install_test_tools() -> Result<(), String> {
    let missing: Vec<&str> = TEST_TOOLS
        .iter()
        .filter(|(program, _)| !on_path(program))
        .map(|(_, package)| *package)
        .collect();
    if !missing.is_empty() {
        let apt = || {
            let mut cmd = std::process::Command::new("apt-get");
            cmd.env("DEBIAN_FRONTEND", "noninteractive");
            cmd
        };
        let install = |cmd: &mut std::process::Command| {
            sh(cmd
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&missing))
        };
        // A machine whose package lists are missing or stale needs an update first.
        if install(&mut apt()).is_err() {
            sh(apt().args(["update", "-q"]))?;
            install(&mut apt())?;
        }
    }
    for (program, package) in TEST_TOOLS {
        if !on_path(program) {
            return Err(format!(
                "{program} is not on PATH after installing {package}"
            ));
        }
    }
    Ok(())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The facade's TLS promise: the library crates choose no TLS stack, so the crates of one
/// appear only with the feature that picks it (`rustls-tls`, `openssl-tls` for the client;
/// `webhook` for serving, always rustls).
fn tls_by_feature() -> Result<(), String> {
    const RUSTLS: &[&str] = &["rustls", "ring", "tokio-rustls", "hyper-rustls"];
    const OPENSSL: &[&str] = &["openssl", "openssl-sys"];
    for (features, forbidden) in [
        ("manager", [RUSTLS, OPENSSL].concat()),
        ("manager,openssl-tls", RUSTLS.to_vec()),
        ("manager,rustls-tls", OPENSSL.to_vec()),
        ("webhook", OPENSSL.to_vec()),
    ] {
        let output = cargo()
            .args([
                "tree",
                "-p",
                "rudder-runtime",
                "--no-default-features",
                "--features",
            ])
            .args([features, "-e", "normal", "--prefix", "none"])
            .output()
            .map_err(|e| format!("cannot run cargo tree: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "cargo tree --features {features} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let tree = String::from_utf8_lossy(&output.stdout);
        let found: std::collections::BTreeSet<&str> = tree
            .lines()
            .filter_map(|line| line.split(' ').next())
            .filter(|name| forbidden.contains(name))
            .collect();
        if !found.is_empty() {
            return Err(format!(
                "rudder with features {features} depends on {found:?}, which no chosen feature asks for"
            ));
        }
        println!("  --features {features}: none of {forbidden:?}");
    }
    Ok(())
}

/// `cargo package` of every publishable package under `crates/` (those whose manifest does
/// not say `publish = false`), together, so cargo packages the ones that depend on each
/// other against each other's packaged sources, and verifies each by building it from its
/// `.crate` file alone: a file a crate needs but does not ship (a template, a README) fails
/// here, not on crates.io.
///
/// `--allow-dirty`: CI scaffolds `examples/scaffold-check` and rewrites `Cargo.lock` for it
/// (both put back at the end), and a contributor's run has edits of its own; what is checked
/// is the packages, not the state of the checkout.
fn package() -> Result<(), String> {
    let root = xtask::util::workspace_root();
    let packages = publishable(&root)?;
    // Verification builds each crate against the others taken from a temporary registry, and
    // cargo caches a registry crate's build by name and version alone: in a target directory
    // that verified these crates before, one changed since (at the same version) is checked
    // against its old build, and a crate using its new items fails. So verification gets a
    // directory of its own, where every build of these names is such a registry build, and
    // those are forgotten first; the third-party builds there stay cached.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), std::path::PathBuf::from)
        .join("package-verify");
    forget_builds(&target, &packages)?;
    forget_sources(&packages)?;
    let mut cmd = cargo();
    cmd.args(["package", "--allow-dirty"])
        .env("CARGO_TARGET_DIR", &target);
    for package in &packages {
        cmd.args(["--package", package]);
    }
    sh(&mut cmd)?;
    println!("  packaged and verified: {}", packages.join(", "));
    Ok(())
}

/// Removes the fingerprints of `packages`' builds under `target` (every profile), so cargo
/// builds them again; a directory not made yet has none.
fn forget_builds(target: &std::path::Path, packages: &[String]) -> Result<(), String> {
    let Ok(profiles) = std::fs::read_dir(target) else {
        return Ok(());
    };
    for profile in profiles.flatten() {
        let Ok(fingerprints) = std::fs::read_dir(profile.path().join(".fingerprint")) else {
            continue;
        };
        for entry in fingerprints.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // `<package>-<16 hex digits>`
            let ours = name.rsplit_once('-').is_some_and(|(package, hash)| {
                hash.len() == 16
                    && hash.bytes().all(|b| b.is_ascii_hexdigit())
                    && packages.iter().any(|p| p == package)
            });
            if ours {
                std::fs::remove_dir_all(entry.path())
                    .map_err(|e| format!("cannot remove {}: {e}", entry.path().display()))?;
            }
        }
    }
    Ok(())
}

/// Removes the sources cargo unpacked of `packages` from the temporary registry of an earlier
/// verification (`$CARGO_HOME/registry/src/<that registry>/<package>-<version>`): cargo
/// unpacks a registry crate once and reuses the directory while it exists, so the next
/// verification of the same version built the old sources, and a crate using items added
/// since failed (`no method named ...`). crates.io's sources are left alone.
fn forget_sources(packages: &[String]) -> Result<(), String> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")));
    let Some(cargo_home) = cargo_home else {
        return Ok(());
    };
    let Ok(registries) = std::fs::read_dir(cargo_home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        if registry
            .file_name()
            .to_string_lossy()
            .starts_with("index.crates.io-")
        {
            continue;
        }
        let Ok(crates) = std::fs::read_dir(registry.path()) else {
            continue;
        };
        for entry in crates.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // `<package>-<version>`
            let ours = name.rsplit_once('-').is_some_and(|(package, version)| {
                version.starts_with(|c: char| c.is_ascii_digit())
                    && packages.iter().any(|p| p == package)
            });
            if ours {
                std::fs::remove_dir_all(entry.path())
                    .map_err(|e| format!("cannot remove {}: {e}", entry.path().display()))?;
            }
        }
    }
    Ok(())
}

/// The names of the publishable packages under `root`'s `crates/`, sorted.
fn publishable(root: &std::path::Path) -> Result<Vec<String>, String> {
    Ok(crate::manifests::manifests(root)?
        .into_values()
        .filter(|m| m.publish)
        .map(|m| m.name)
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn verification_forgets_only_the_builds_of_the_packaged_crates() {
        let target = std::env::temp_dir().join(format!("forget-builds-{}", std::process::id()));
        let fingerprints = target.join("debug").join(".fingerprint");
        let names = [
            "rudder-core-0123456789abcdef",
            "rudder-core-fedcba9876543210",
            "rudder-0123456789abcdef",
            "serde-0123456789abcdef",
            "rudder-core-extra-0123456789abcdef",
            "rudder-core",
        ];
        for name in names {
            std::fs::create_dir_all(fingerprints.join(name)).unwrap();
        }
        let packages = vec!["rudder".to_owned(), "rudder-core".to_owned()];
        forget_builds(&target, &packages).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&fingerprints)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "rudder-core",
                "rudder-core-extra-0123456789abcdef",
                "serde-0123456789abcdef"
            ]
        );
        std::fs::remove_dir_all(&target).unwrap();
        forget_builds(&target, &packages).unwrap();
    }

    #[test]
    fn an_install_beside_returns_its_directory_and_its_failure() {
        let done = InstallBeside::spawn(
            std::process::Command::new("sh").args(["-c", "echo progress >&2; echo /some/dir"]),
            "0.0.1",
        )
        .unwrap();
        let log = done.log.clone();
        assert_eq!(done.join().unwrap(), std::path::PathBuf::from("/some/dir"));
        assert!(!log.exists(), "the log is removed once printed");
        let failed = InstallBeside::spawn(
            std::process::Command::new("sh").args(["-c", "echo broken >&2; exit 3"]),
            "0.0.2",
        )
        .unwrap();
        let error = failed.join().unwrap_err();
        assert!(
            error.contains("0.0.2") && error.contains("failed"),
            "{error}"
        );
    }

    #[test]
    fn an_install_beside_not_joined_is_killed_with_what_it_started() {
        // The child starts a process of its own (as the install starts `go`), says its pid.
        let running = InstallBeside::spawn(
            std::process::Command::new("sh").args(["-c", "sleep 600 & echo $! >&2; wait"]),
            "0.0.3",
        )
        .unwrap();
        let pid = running.child.as_ref().unwrap().id();
        let grandchild = within_10s("the child to say its own child's pid", || {
            std::fs::read_to_string(&running.log)
                .ok()
                .and_then(|said| said.trim().parse::<u32>().ok())
        });
        drop(running);
        // Reaped: no process, not even a zombie, has the child's pid.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        // Its own child was killed too: gone, or a zombie until init reaps it.
        within_10s("the child's own child to be killed", || {
            let stat = std::fs::read_to_string(format!("/proc/{grandchild}/stat"));
            stat.map_or(true, |stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z'))
            })
            .then_some(())
        });
    }

    /// `f`'s first `Some`, polled for at most 10 s; the test fails naming `what` otherwise.
    fn within_10s<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let started = std::time::Instant::now();
        loop {
            if let Some(value) = f() {
                return value;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "waited 10 s for {what}"
            );
            std::thread::yield_now();
        }
    }

    #[test]
    fn publishable_crates_are_those_not_saying_publish_false() {
        let crates = publishable(&xtask::util::workspace_root()).unwrap();
        assert!(crates.contains(&"rudder-runtime".to_owned()), "{crates:?}");
        assert!(crates.contains(&"cargo-rudder".to_owned()), "{crates:?}");
        let bench = "[package]\nname = \"b\"\npublish = false\n\n[dependencies]\n";
        assert!(!crate::manifests::parse(bench).unwrap().publish);
        let feature = "[package]\nname = \"a\"\n[features]\npublish = false\n";
        assert!(crate::manifests::parse(feature).unwrap().publish);
    }
}
