//! `go tool pprof` for the profiling tests: a profile fetched from the manager, read as
//! Go's own tool reads it.

use std::ffi::{OsStr, OsString};

/// The Go command (`$GO`, or `go` on the PATH), which must run.
pub(crate) fn go() -> OsString {
    let go = std::env::var_os("GO").unwrap_or_else(|| "go".into());
    assert!(
        std::process::Command::new(&go)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "this test reads the profile with `go tool pprof`: Go must be on the PATH (or in $GO)"
    );
    go
}

/// What `go tool pprof -top -nodecount=200 ARGS` prints of `profile` (saved as `file`);
/// fails the test if pprof cannot read it.
pub(crate) fn pprof_top(go: &OsStr, profile: &[u8], file: &str, args: &[&str]) -> String {
    let dir = std::env::temp_dir().join(format!("rudder-{file}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    std::fs::write(&path, profile).unwrap();
    let top = std::process::Command::new(go)
        .args(["tool", "pprof", "-top", "-nodecount=200"])
        .args(args)
        .arg(&path)
        .env("PPROF_TMPDIR", &dir)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        top.status.success(),
        "go tool pprof failed: {}",
        String::from_utf8_lossy(&top.stderr)
    );
    String::from_utf8_lossy(&top.stdout).into_owned()
}
