//! Failures that must be clear errors, not panics or hangs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use rudder_envtest::{Error, TestEnv};

/// Run as a child process with nothing to find (changing this process's environment would
/// affect the other tests). Does nothing in a normal run.
#[tokio::test]
async fn child_without_binaries() {
    if std::env::var_os("RUDDER_ENVTEST_TEST_CHILD").is_none() {
        return;
    }
    let err = TestEnv::start().await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            Error::BinaryNotFound {
                binary: "kube-apiserver",
                ..
            }
        ),
        "{text}"
    );
    assert!(text.contains("cargo xtask envtest install"), "{text}");
    assert!(text.contains("RUDDER_ENVTEST_ASSETS"), "{text}");
}

#[test]
fn a_missing_binary_is_a_clear_error() {
    let empty = std::env::temp_dir().join(format!("envtest-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_without_binaries"])
        .env("RUDDER_ENVTEST_TEST_CHILD", "1")
        .env("RUDDER_ENVTEST_ASSETS", &empty)
        .env("XDG_CACHE_HOME", &empty)
        .env("PATH", &empty)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&empty).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[tokio::test]
async fn a_process_that_fails_to_start_reports_its_log() {
    // An unknown flag makes kube-apiserver exit at once.
    let err = TestEnv::builder()
        .apiserver_arg("--no-such-flag=1")
        .start()
        .await
        .unwrap_err();
    let Error::NotReady {
        process, log, tail, ..
    } = &err
    else {
        panic!("unexpected error: {err}");
    };
    assert_eq!(*process, "kube-apiserver");
    assert!(tail.contains("no-such-flag"), "{err}");
    assert!(err.to_string().contains(&log.display().to_string()));
    // The directory is kept for reading the logs; clean it up here.
    let dir = log.parent().unwrap().parent().unwrap();
    assert!(log.exists());
    std::fs::remove_dir_all(dir).unwrap();
}
