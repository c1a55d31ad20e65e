//! `cargo xtask demo`: the ChaosPod controller on a local control plane, for a bounded time.

use std::path::PathBuf;
use std::process::Command;

use xtask::util::{cargo, run as sh, step};

/// Entry point for `cargo xtask demo [demo args]`: installs the control plane unless
/// `--kubeconfig` names a cluster, then runs the demo binary, whose exit status is ours.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.args(["run", "--quiet", "-p", "chaospod", "--bin", "demo", "--"])
        .args(args);
    with_assets(&mut cmd, args)?;
    sh(&mut cmd)
}

/// Runs the demo binary a previous `cargo test --workspace` built in `profile` (so CI
/// compiles nothing more), for `seconds`.
pub(crate) fn run_built(profile: &str, seconds: u32) -> Result<(), String> {
    let binary = target_dir()?.join(profile).join("demo");
    let seconds = seconds.to_string();
    let args = ["--duration", seconds.as_str()];
    let mut cmd = Command::new(&binary);
    cmd.args(args);
    with_assets(&mut cmd, &args)?;
    sh(&mut cmd)
}

/// Points the demo at the envtest binaries (installing them if needed) unless it runs
/// against a cluster or only prints its help.
fn with_assets(cmd: &mut Command, args: &[&str]) -> Result<(), String> {
    let local = !args
        .iter()
        .any(|a| matches!(*a, "--kubeconfig" | "--help" | "-h"));
    if local {
        let assets = step("envtest install", || xtask::envtest::install(false))?;
        cmd.env("RUDDER_ENVTEST_ASSETS", assets);
    }
    Ok(())
}

/// Cargo's target directory, from `cargo metadata`.
pub(crate) fn target_dir() -> Result<PathBuf, String> {
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .map_err(|e| format!("could not run cargo metadata: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // `"target_directory":"<path>"`: paths are JSON strings; ours need no unescaping
    // beyond `\\` and `\"`.
    let start = text
        .find("\"target_directory\":\"")
        .map(|i| i + "\"target_directory\":\"".len())
        .ok_or("cargo metadata has no target_directory")?;
    let mut path = String::new();
    let mut chars = text[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Ok(PathBuf::from(path)),
            '\\' => path.extend(chars.next()),
            c => path.push(c),
        }
    }
    Err("cargo metadata's target_directory is not terminated".into())
}
