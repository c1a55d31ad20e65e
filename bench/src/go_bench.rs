//! A Cargo bench that runs against one Go program: build the program from `go/cmd/`, install
//! (or find) the envtest control plane, run the bench with `--bench --go-binary PATH`.

use std::fs;

use crate::go::Go;
use crate::{envtest, util};

/// Builds `go/cmd/<program>` into a scratch directory, then runs `cargo bench -p <package>
/// --bench <bench> -- --bench --go-binary PATH <passed>` with `RUDDER_ENVTEST_ASSETS` set;
/// `anchor` names what the Go side is, for the first line printed.
pub(crate) fn run(
    program: &str,
    anchor: &str,
    package: &str,
    bench: &str,
    passed: &[String],
) -> Result<(), String> {
    let go = Go::find()?;
    println!("{} for {anchor} (go/go.mod)", go.version());
    let dir = std::env::temp_dir().join(format!("rudder-bench-{program}-{}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| format!("could not create {}: {e}", dir.display()))?;
    let binary = dir.join(program);
    let result = util::step(&format!("build go/cmd/{program}"), || {
        go.build(program, &binary)
    })
    .and_then(|()| {
        let assets = envtest::install(false)?;
        util::step(&format!("{bench} bench"), || {
            util::run(
                util::cargo()
                    .args(["bench", "-p", package, "--bench", bench, "--", "--bench"])
                    .arg("--go-binary")
                    .arg(&binary)
                    .args(passed)
                    .env("RUDDER_ENVTEST_ASSETS", &assets),
            )
        })
    });
    let _ = fs::remove_dir_all(&dir);
    result
}
