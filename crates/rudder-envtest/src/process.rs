//! Child processes of a control plane: spawning with output to a log file, stopping, and the
//! watchdog that kills them and removes the directory if the test process dies first.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};

use crate::error::{Error, Result};

/// One running control plane process (etcd, kube-apiserver or kube-controller-manager).
#[derive(Debug)]
pub(crate) struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `path` with `args` in its own process group, its stdout and stderr going to
    /// `log`, and registers it with the watchdog.
    pub(crate) fn spawn(
        name: &'static str,
        path: &Path,
        args: &[String],
        log: PathBuf,
        watchdog: &mut Watchdog,
    ) -> Result<Self> {
        let out = File::create(&log).map_err(|source| Error::Io {
            action: "create the log file",
            path: log.clone(),
            source,
        })?;
        let err = out.try_clone().map_err(|source| Error::Io {
            action: "open the log file",
            path: log.clone(),
            source,
        })?;
        let child = Command::new(path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own group: a Ctrl-C aimed at the test run reaches the watchdog's cleanup
            // instead of racing it, and the watchdog can kill the whole group.
            .process_group(0)
            .spawn()
            .map_err(|source| Error::Spawn {
                path: path.to_owned(),
                source,
            })?;
        watchdog.guard(child.id());
        tracing::debug!(name, pid = child.id(), log = %log.display(), "started");
        Ok(Self { name, child, log })
    }

    /// The process's name (`etcd`, ...).
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has already exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Kills the process (SIGKILL: the data directory is thrown away, so there is nothing to
    /// flush) and reaps it, so its `/proc` entry is gone when this returns.
    pub(crate) fn kill(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// An error saying this process did not become ready, with its log's last lines.
    pub(crate) fn not_ready(&self, reason: String) -> Error {
        Error::NotReady {
            process: self.name,
            reason,
            tail: log_tail(&self.log, 25),
            log: self.log.clone(),
        }
    }
}

/// The last `lines` lines of a log file, each indented, or a note saying it could not be read.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    const WINDOW: u64 = 16 * 1024;
    let read = || -> std::io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(WINDOW)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            let start = all.len().saturating_sub(lines);
            all[start..]
                .iter()
                .map(|l| format!("    {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        }
        Err(e) => format!("    (could not read the log: {e})"),
    }
}

/// A small `sh` process that outlives nothing: it reads commands from a pipe whose other end
/// only this process holds. When the pipe closes without a `done` line, because the test
/// process exited or was killed (a shared control plane lives in a static, which is never
/// dropped), it kills every registered process group and removes the directory.
///
/// This avoids `prctl(PR_SET_PDEATHSIG)`, which needs unsafe code, and needs no polling: the
/// kernel closes the pipe when the process dies, however it dies.
#[derive(Debug)]
pub(crate) struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

const WATCHDOG_SCRIPT: &str = r#"dir="$1"; groups=""
while read -r cmd arg; do
  case "$cmd" in
    pg) groups="$groups $arg" ;;
    done) exit 0 ;;
  esac
done
for g in $groups; do kill -KILL "-$g" 2>/dev/null; done
rm -rf -- "$dir"
"#;

impl Watchdog {
    /// Starts a watchdog that removes `dir` when this process dies.
    pub(crate) fn start(dir: &Path) -> Result<Self> {
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("rudder-envtest-watchdog")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group, so a Ctrl-C sent to the test run does not kill it before it acts.
            .process_group(0)
            .spawn()
            .map_err(|source| Error::Spawn {
                path: PathBuf::from("/bin/sh"),
                source,
            })?;
        let stdin = child.stdin.take();
        Ok(Self { child, stdin })
    }

    /// Registers a process group (a child started with `process_group(0)`, so its pid).
    fn guard(&mut self, pgid: u32) {
        if let Some(stdin) = &mut self.stdin {
            let _ = writeln!(stdin, "pg {pgid}");
        }
    }

    /// Tells the watchdog everything is cleaned up (or deliberately kept) and waits for it.
    pub(crate) fn disarm(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "done");
        }
        let _ = self.child.wait();
    }
}
