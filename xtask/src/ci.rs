//! `cargo xtask ci`: everything CI checks, in the order that fails fastest.

use crate::util::{cargo, run as sh, step};

/// Runs the whole CI pipeline. Extra arguments are passed to `cargo test`.
pub(crate) fn run_ci(test_args: &[&str]) -> Result<(), String> {
    let assets = step("envtest install", || crate::envtest::install(false))?;
    // A scaffolded controller goes through every check and test below, then is removed.
    let _scaffold = step(
        "cargo xtask new-controller (for CI)",
        crate::scaffold::scaffold_for_ci,
    )?;
    step("cargo fmt --check", || {
        sh(cargo().args(["fmt", "--all", "--check"]))
    })?;
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
    step("cargo doc", || {
        sh(cargo()
            .args(["doc", "--workspace", "--no-deps", "--all-features"])
            .env("RUSTDOCFLAGS", "-D warnings"))
    })?;
    step("cargo test", || {
        sh(cargo()
            .args(["test", "--workspace", "--all-features"])
            .args(test_args)
            .env("RUDDER_ENVTEST_ASSETS", &assets))
    })?;
    step(
        "cargo xtask new-operator (a project outside the workspace)",
        || crate::new_operator::ci_check(&assets),
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

/// Entry point for `cargo xtask ci [-- test args]`.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    let test_args = match args {
        [] => &[][..],
        ["--", rest @ ..] => rest,
        other => return Err(format!("unexpected arguments to `ci`: {}", other.join(" "))),
    };
    run_ci(test_args)
}
