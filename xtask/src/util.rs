//! Helpers shared by the tasks: running commands and timing steps.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// The workspace root (the parent of this crate's directory): as `cargo run` says it now,
/// else as it was when xtask was built. Two clones sharing one `CARGO_TARGET_DIR` can run one
/// clone's build of xtask from the other (cargo hashes a path package by name and version and
/// checks the files its last build read), and a root fixed at build time would then check
/// the other clone's tree.
pub fn workspace_root() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.join("Cargo.toml").is_file())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// The base of every cache the project keeps outside the checkout (control planes, Go's
/// caches, checkov's virtualenv, CI's target directory): `$XDG_CACHE_HOME/rudder`, else
/// `~/.cache/rudder`.
pub fn cache_base() -> Result<PathBuf, String> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(xdg) => PathBuf::from(xdg),
        None => std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .map(|h| PathBuf::from(h).join(".cache"))
            .ok_or("neither XDG_CACHE_HOME nor HOME is set; cannot choose a cache directory")?,
    };
    Ok(base.join("rudder"))
}

/// Runs `cmd`, inheriting the terminal, and fails with the command line when it exits non-zero.
pub fn run(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("could not start {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

/// Prints a step's name, runs it, then prints how long it took.
pub fn step<T>(name: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    println!("==> {name}");
    let started = Instant::now();
    let out = f();
    let took = started.elapsed();
    match &out {
        Ok(_) => println!("<== {name}: done in {:.1} s", took.as_secs_f64()),
        Err(_) => println!("<== {name}: failed after {:.1} s", took.as_secs_f64()),
    }
    out
}

/// Whether `program` can be started from the PATH (run as `program --version`, its output
/// discarded; some tools, wrk among them, exit non-zero after printing their version, so
/// only starting counts).
pub fn on_path(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok()
}

/// The `cargo` this task was started by, so nested runs use the same toolchain.
pub fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root());
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_by_cargo_run) {
            cmd.env_remove(key);
        }
    }
    // The tasks build everything once (CI, the demo, benches): incremental artifacts would
    // only take disk, 13 GB of the 27 GB a whole `cargo xtask ci` left. A caller's choice wins.
    if std::env::var_os("CARGO_INCREMENTAL").is_none() {
        cmd.env("CARGO_INCREMENTAL", "0");
    }
    cmd
}

/// Whether `key` is one of the variables `cargo run` sets for the xtask binary itself
/// (`CARGO_PKG_*`, `CARGO_MANIFEST_*`, ...). Passed on to an inner cargo, they differ from a
/// plain cargo's environment, and build scripts that watch them (ring's) rerun: the
/// dependencies of every crate were rebuilt on each switch between `cargo xtask` and `cargo`.
fn set_by_cargo_run(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || key.starts_with("CARGO_MANIFEST_")
        || matches!(
            key,
            "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_RUSTC_CURRENT_DIR"
        )
}

/// `cargo` as found on PATH (rustup's proxy where rustup manages the toolchains), with the
/// variables `cargo run` set for this task removed as [`cargo`] removes them.
pub fn cargo_of_path() -> Command {
    let from_task = cargo();
    let mut cmd = Command::new("cargo");
    for (key, value) in from_task.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    cmd
}
