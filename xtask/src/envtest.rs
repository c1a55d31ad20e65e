//! `cargo xtask envtest ...`: finds, or builds from Go modules and caches, the control plane
//! that rudder-envtest runs: kube-apiserver, kube-controller-manager and kube-scheduler of one
//! Kubernetes release, etcd, and KWOK (fake nodes that make Pods run) with its stages.
//!
//! Lookup order: `$RUDDER_ENVTEST_ASSETS`, then the cache (`$XDG_CACHE_HOME/rudder/envtest/
//! v<version>/`, else `~/.cache/rudder/envtest/v<version>/`). When the cache lacks the version
//! asked for (default [`DEFAULT_KUBERNETES`]), everything is built with the machine's Go from
//! the Go module proxy:
//!
//! - Kubernetes: in a module of our own, each `k8s.io/...` staging module that
//!   `k8s.io/kubernetes@v1.M.P`'s go.mod replaces with a `./staging/...` path is pinned to its
//!   published `v0.M.P`, then `cmd/kube-apiserver`, `cmd/kube-controller-manager` and
//!   `cmd/kube-scheduler` are built with the version stamped (so `--version` and `/version`
//!   print `v1.M.P` and kubectl can parse it). Generated code is committed upstream: no code
//!   generator runs.
//! - etcd: `go.etcd.io/etcd/server/v3` (its `main` package), one release for every Kubernetes
//!   version, built once.
//! - KWOK: `sigs.k8s.io/kwok/cmd/kwok`, plus a stages file assembled at install time from the
//!   stage definitions in the downloaded module (nodes become Ready and renew their Lease; Pods
//!   get an IP and become Running, Jobs' Pods complete, deleted Pods go away).
//!
//! Go's module and build caches live in `<cache>/rudder/go/{mod,build}`, shared with the Go
//! anchors (`go/`), so a second version or a rebuild reuses what the first downloaded and
//! compiled. Every step is skipped when its result exists, and results are assembled in a
//! scratch directory renamed into place at the end, so an interrupted install resumes and a
//! finished one returns at once. The figures are in `docs/envtest.md`.
//!
//! Earlier releases of the project built v1.20.2 from Debian's `kubernetes` source package in
//! GOPATH mode. That path is gone: it needs Go 1.19, stops at a server thirteen minor versions
//! below what k8s-openapi 0.29 supports, and a machine without a new enough Go can still point
//! `RUDDER_ENVTEST_ASSETS` at official binaries of any release from 1.20 on.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::versions::{DEFAULT_KUBERNETES, ETCD as ETCD_VERSION, KWOK as KWOK_VERSION};
use crate::{go, util};

/// The environment variable rudder-envtest reads; also searched first here.
const ASSETS_ENV: &str = "RUDDER_ENVTEST_ASSETS";
const APISERVER: &str = "kube-apiserver";
const CONTROLLER_MANAGER: &str = "kube-controller-manager";
const SCHEDULER: &str = "kube-scheduler";
const ETCD: &str = "etcd";
const KWOK: &str = "kwok";
/// KWOK's stage definitions, next to the binaries (rudder-envtest passes it to `kwok --config`).
const KWOK_STAGES: &str = "kwok-stages.yaml";
/// The stages taken from KWOK's module, in the order they are written: nodes become Ready and
/// keep a Lease; Pods run, complete when they belong to a Job, and go when deleted.
const STAGE_FILES: &[&str] = &[
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
];
const USAGE: &str = "usage: cargo xtask envtest install [--version X.Y.Z] [--print-path]";

/// Entry point for `cargo xtask envtest <subcommand>`.
pub fn run(args: &[&str]) -> Result<(), String> {
    let ["install", rest @ ..] = args else {
        return Err(format!(
            "unknown envtest subcommand: {}\n{USAGE}",
            args.join(" ")
        ));
    };
    let mut print_path = false;
    let mut version = None;
    let mut rest = rest.iter();
    while let Some(arg) = rest.next() {
        match *arg {
            "--print-path" => print_path = true,
            "--version" => {
                version = rest
                    .next()
                    .map(|v| v.trim_start_matches('v').to_owned())
                    .filter(|v| parse_version(&format!("v{v}")).is_some_and(|p| p.len() == 3))
                    .map(Some)
                    .ok_or_else(|| format!("--version needs a release such as 1.37.2\n{USAGE}"))?;
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    match version {
        Some(version) => install_version(&version, print_path).map(|_| ()),
        None => install(print_path).map(|_| ()),
    }
}

/// Finds or installs the default version and returns the directory holding its binaries;
/// `$RUDDER_ENVTEST_ASSETS`, when set, is that directory instead (it must hold kube-apiserver
/// and etcd).
///
/// With `print_path`, stdout gets only that directory (progress goes to stderr), so
/// `export RUDDER_ENVTEST_ASSETS=$(cargo xtask envtest install --print-path)` works.
pub fn install(print_path: bool) -> Result<PathBuf, String> {
    install_inner(DEFAULT_KUBERNETES, true, print_path)
}

/// Finds or installs `version` (`1.37.2`) in the cache and returns the directory holding its
/// binaries. A version asked for by name ignores `$RUDDER_ENVTEST_ASSETS`.
pub fn install_version(version: &str, print_path: bool) -> Result<PathBuf, String> {
    install_inner(version, false, print_path)
}

fn install_inner(version: &str, honour_env: bool, print_path: bool) -> Result<PathBuf, String> {
    let started = Instant::now();
    let installer = Installer::new(print_path)?;
    let dir = installer.find_or_build(version, honour_env)?;
    if print_path {
        println!("{}", dir.display());
    } else {
        println!(
            "envtest binaries: {} ({:.1} s); tests find them there, or set {ASSETS_ENV}={}",
            dir.display(),
            started.elapsed().as_secs_f64(),
            dir.display()
        );
    }
    Ok(dir)
}

struct Installer {
    print_path: bool,
    /// `.../rudder/envtest`: one `v<version>/` directory per installed Kubernetes version.
    cache: PathBuf,
    /// `.../rudder/envtest/build`: one Go module directory per thing built.
    build: PathBuf,
    /// `.../rudder/go`: Go's module and build caches.
    go_cache: PathBuf,
}

impl Installer {
    fn new(print_path: bool) -> Result<Self, String> {
        let base = util::cache_base()?;
        let cache = base.join("envtest");
        Ok(Self {
            print_path,
            build: cache.join("build"),
            cache,
            go_cache: base.join("go"),
        })
    }

    fn find_or_build(&self, version: &str, honour_env: bool) -> Result<PathBuf, String> {
        if let Some(dir) = std::env::var_os(ASSETS_ENV).filter(|v| honour_env && !v.is_empty()) {
            let dir = PathBuf::from(dir);
            return if has_binary(&dir, APISERVER) && has_binary(&dir, ETCD) {
                Ok(dir)
            } else {
                Err(format!(
                    "{ASSETS_ENV}={} lacks an executable kube-apiserver or etcd; fix or unset it",
                    dir.display()
                ))
            };
        }
        let dest = self.cache.join(format!("v{version}"));
        if complete(&dest) {
            return Ok(dest);
        }
        self.build_version(version, &dest)
    }

    fn build_version(&self, version: &str, dest: &Path) -> Result<PathBuf, String> {
        self.say(&format!(
            "building Kubernetes v{version}, etcd v{ETCD_VERSION} and KWOK v{KWOK_VERSION} from Go \
             modules into {} (about 15 minutes the first time on 2 cores)",
            self.cache.display()
        ));
        let go = self.go()?;
        let kube = self.step(&format!("Kubernetes v{version}"), || {
            self.build_kubernetes(&go, version)
        })?;
        let etcd = self.step(&format!("etcd v{ETCD_VERSION}"), || self.build_etcd(&go))?;
        let kwok = self.step(&format!("KWOK v{KWOK_VERSION}"), || self.build_kwok(&go))?;

        let scratch = self.cache.join(format!("v{version}.partial"));
        remove_dir(&scratch)?;
        mkdir(&scratch)?;
        for name in [APISERVER, CONTROLLER_MANAGER, SCHEDULER] {
            link_or_copy(&kube.join(name), &scratch.join(name))?;
        }
        link_or_copy(&etcd.join(ETCD), &scratch.join(ETCD))?;
        link_or_copy(&kwok.join(KWOK), &scratch.join(KWOK))?;
        link_or_copy(&kwok.join(KWOK_STAGES), &scratch.join(KWOK_STAGES))?;
        let reported = self.reported_version(&scratch.join(APISERVER))?;
        if reported != format!("v{version}") {
            return Err(format!(
                "the kube-apiserver built for v{version} reports {reported}"
            ));
        }
        remove_dir(dest)?;
        fs::rename(&scratch, dest)
            .map_err(|e| format!("could not move binaries to {}: {e}", dest.display()))?;
        Ok(dest.to_owned())
    }

    /// Builds Kubernetes' three control-plane binaries into `build/kubernetes-v<version>/bin`.
    fn build_kubernetes(&self, go: &Go, version: &str) -> Result<PathBuf, String> {
        let module = self.build.join(format!("kubernetes-v{version}"));
        let bin = module.join("bin");
        if [APISERVER, CONTROLLER_MANAGER, SCHEDULER]
            .iter()
            .all(|name| has_binary(&bin, name))
        {
            return Ok(bin);
        }
        let parts = parse_version(&format!("v{version}")).unwrap_or_default();
        let [major, minor, patch] = parts[..] else {
            return Err(format!("not a release version: {version}"));
        };
        let upstream = go.download(&format!("k8s.io/kubernetes@v{version}"))?;
        let go_mod = fs::read_to_string(&upstream.go_mod)
            .map_err(|e| format!("could not read {}: {e}", upstream.go_mod.display()))?;
        go.check_version(go::go_line(&go_mod), "k8s.io/kubernetes")?;
        let staging = staging_modules(&go_mod);
        if staging.is_empty() {
            return Err(format!(
                "k8s.io/kubernetes@v{version}'s go.mod replaces no module with ./staging"
            ));
        }
        let mut text = String::from(
            "// Written by `cargo xtask envtest install`: Kubernetes' binaries as Go modules.\n\
             module rudder.local/envtest/kubernetes\n\n",
        );
        text.push_str(&format!(
            "go {}\n\n",
            go::go_line(&go_mod).unwrap_or(&go.version)
        ));
        for name in &staging {
            text.push_str(&format!("replace {name} => {name} v0.{minor}.{patch}\n"));
        }
        mkdir(&module)?;
        write(&module.join("go.mod"), &text)?;
        let commands = [APISERVER, CONTROLLER_MANAGER, SCHEDULER]
            .map(|name| format!("k8s.io/kubernetes/cmd/{name}@v{version}"));
        self.sh(go.command(&module).arg("get").args(&commands))?;
        // What Kubernetes' own build stamps (hack/lib/version.sh), in both version packages.
        let mut ldflags = String::from("-s -w");
        for package in [
            "k8s.io/component-base/version",
            "k8s.io/client-go/pkg/version",
        ] {
            for (var, value) in [
                ("gitVersion", format!("v{version}")),
                ("gitMajor", major.to_string()),
                ("gitMinor", minor.to_string()),
                ("gitTreeState", "clean".to_owned()),
            ] {
                ldflags.push_str(&format!(" -X {package}.{var}={value}"));
            }
        }
        let scratch = module.join("bin.partial");
        remove_dir(&scratch)?;
        mkdir(&scratch)?;
        self.sh(go
            .command(&module)
            .args(["build", "-trimpath", "-ldflags", &ldflags, "-o"])
            .arg(&scratch)
            .args(
                [APISERVER, CONTROLLER_MANAGER, SCHEDULER]
                    .map(|name| format!("k8s.io/kubernetes/cmd/{name}")),
            ))?;
        remove_dir(&bin)?;
        fs::rename(&scratch, &bin).map_err(|e| format!("could not move {}: {e}", bin.display()))?;
        Ok(bin)
    }

    /// Builds etcd's server into `build/etcd-v<version>/bin`.
    fn build_etcd(&self, go: &Go) -> Result<PathBuf, String> {
        let package = "go.etcd.io/etcd/server/v3";
        self.build_module(go, ETCD_VERSION, package, ETCD, &[], |_| Ok(()))
    }

    /// Builds KWOK into `build/kwok-v<version>/bin`, with its stages beside it.
    fn build_kwok(&self, go: &Go) -> Result<PathBuf, String> {
        let package = "sigs.k8s.io/kwok/cmd/kwok";
        self.build_module(go, KWOK_VERSION, package, KWOK, &[KWOK_STAGES], |bin| {
            let module = go.download(&format!("sigs.k8s.io/kwok@v{KWOK_VERSION}"))?;
            let mut stages = format!(
                "# KWOK v{KWOK_VERSION}'s stages, assembled by `cargo xtask envtest install` from \
                 the sigs.k8s.io/kwok module.\n"
            );
            for file in STAGE_FILES {
                let path = module.dir.join(file);
                let text = fs::read_to_string(&path)
                    .map_err(|e| format!("could not read KWOK's stage {}: {e}", path.display()))?;
                stages.push_str("---\n");
                stages.push_str(text.trim_start_matches("---\n"));
                if !stages.ends_with('\n') {
                    stages.push('\n');
                }
            }
            write(&bin.join(KWOK_STAGES), &stages)
        })
    }

    /// Builds `package@v<version>` (a `main` package) as `binary` in a module of our own under
    /// `build/<binary>-v<version>/bin`, then lets `extra` write the files named in `beside`
    /// next to it (the build counts as done only with all of them).
    fn build_module(
        &self,
        go: &Go,
        version: &str,
        package: &str,
        binary: &str,
        beside: &[&str],
        extra: impl FnOnce(&Path) -> Result<(), String>,
    ) -> Result<PathBuf, String> {
        let module = self.build.join(format!("{binary}-v{version}"));
        let bin = module.join("bin");
        if has_binary(&bin, binary) && beside.iter().all(|file| bin.join(file).is_file()) {
            return Ok(bin);
        }
        mkdir(&module)?;
        write(
            &module.join("go.mod"),
            &format!(
                "// Written by `cargo xtask envtest install`.\nmodule rudder.local/envtest/{binary}\n\n\
                 go {}\n",
                go.version
            ),
        )?;
        self.sh(go
            .command(&module)
            .arg("get")
            .arg(format!("{package}@v{version}")))?;
        let scratch = module.join("bin.partial");
        remove_dir(&scratch)?;
        mkdir(&scratch)?;
        self.sh(go
            .command(&module)
            .args(["build", "-trimpath", "-ldflags=-s -w", "-o"])
            .arg(scratch.join(binary))
            .arg(package))?;
        extra(&scratch)?;
        remove_dir(&bin)?;
        fs::rename(&scratch, &bin).map_err(|e| format!("could not move {}: {e}", bin.display()))?;
        Ok(bin)
    }

    /// The machine's Go, set up to use the project's caches and never to fetch a toolchain.
    fn go(&self) -> Result<Go, String> {
        let out = Command::new("go")
            .args(["env", "GOVERSION"])
            .env("GOTOOLCHAIN", "local")
            .output()
            .map_err(|e| {
                format!(
                    "cannot run `go` ({e}): building the control plane needs Go 1.26 or newer \
                     on PATH (https://go.dev/dl), or set {ASSETS_ENV} to a directory holding \
                     official kube-apiserver and etcd binaries"
                )
            })?;
        let version = String::from_utf8_lossy(&out.stdout)
            .trim()
            .trim_start_matches("go")
            .to_owned();
        if !out.status.success() || parse_version(&format!("v{version}")).is_none() {
            return Err(format!("`go env GOVERSION` printed {version:?}"));
        }
        Ok(Go {
            version,
            mod_cache: self.go_cache.join("mod"),
            build_cache: self.go_cache.join("build"),
        })
    }

    fn reported_version(&self, apiserver: &Path) -> Result<String, String> {
        let out = Command::new(apiserver)
            .arg("--version")
            .output()
            .map_err(|e| format!("could not run {}: {e}", apiserver.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace()
            .find(|w| parse_version(w).is_some())
            .map(str::to_owned)
            .ok_or_else(|| format!("unexpected `kube-apiserver --version` output: {text:?}"))
    }

    /// Runs a step with its timing; progress goes to stderr when stdout is reserved for the
    /// path.
    fn step<T>(&self, name: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        if !self.print_path {
            return util::step(name, f);
        }
        eprintln!("==> {name}");
        let started = Instant::now();
        let out = f();
        let verdict = if out.is_ok() {
            "done in"
        } else {
            "failed after"
        };
        eprintln!(
            "<== {name}: {verdict} {:.1} s",
            started.elapsed().as_secs_f64()
        );
        out
    }

    fn say(&self, line: &str) {
        if self.print_path {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    fn sh(&self, cmd: &mut Command) -> Result<(), String> {
        if self.print_path {
            cmd.stdout(std::io::stderr());
        }
        util::run(cmd)
    }
}

/// The machine's Go toolchain and the caches it is pointed at.
struct Go {
    /// `1.26.8`.
    version: String,
    mod_cache: PathBuf,
    build_cache: PathBuf,
}

/// Where `go mod download` put a module.
struct Downloaded {
    go_mod: PathBuf,
    dir: PathBuf,
}

impl Go {
    /// `go` in `dir`, with the project's caches, static binaries, and no toolchain switch (a
    /// module asking for a newer Go fails with Go's own message instead of downloading one).
    fn command(&self, dir: &Path) -> Command {
        let mut cmd = Command::new("go");
        cmd.current_dir(dir)
            .env("GOMODCACHE", &self.mod_cache)
            .env("GOCACHE", &self.build_cache)
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "-mod=mod")
            .env("CGO_ENABLED", "0");
        cmd
    }

    /// Downloads `module@version` into the module cache and says where it is.
    fn download(&self, module: &str) -> Result<Downloaded, String> {
        let tmp = std::env::temp_dir();
        let out = self
            .command(&tmp)
            .args(["mod", "download", "-json", module])
            .output()
            .map_err(|e| format!("could not run go mod download: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "go mod download {module} failed: {}{}",
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let field = |name: &str| {
            json_string_field(&text, name)
                .map(PathBuf::from)
                .ok_or_else(|| format!("go mod download {module} printed no {name}: {text}"))
        };
        Ok(Downloaded {
            go_mod: field("GoMod")?,
            dir: field("Dir")?,
        })
    }

    /// Fails clearly when `required` (a go.mod's `go` line) is newer than this Go.
    fn check_version(&self, required: Option<&str>, what: &str) -> Result<(), String> {
        let Some(required) = required else {
            return Ok(());
        };
        if !go::new_enough(&format!("go{}", self.version), required) {
            return Err(format!(
                "{what} needs Go {required} or newer and this machine has Go {}: install a newer \
                 Go (https://go.dev/dl), or set {ASSETS_ENV} to a directory holding official \
                 kube-apiserver and etcd binaries",
                self.version
            ));
        }
        Ok(())
    }
}

/// Whether `dir` holds a whole installed version.
fn complete(dir: &Path) -> bool {
    [APISERVER, CONTROLLER_MANAGER, SCHEDULER, ETCD, KWOK]
        .iter()
        .all(|name| has_binary(dir, name))
        && dir.join(KWOK_STAGES).is_file()
}

/// The modules a Kubernetes go.mod replaces with a `./staging/...` directory.
fn staging_modules(go_mod: &str) -> Vec<String> {
    go_mod
        .lines()
        .filter_map(|line| {
            let line = line.trim().trim_start_matches("replace ").trim();
            let (module, target) = line.split_once("=>")?;
            target
                .trim()
                .starts_with("./staging/")
                .then(|| module.trim().to_owned())
        })
        .collect()
}

/// The string value of `"name": "..."` in `go ... -json` output (paths need no unescaping
/// beyond `\\` and `\"`).
fn json_string_field(text: &str, name: &str) -> Option<String> {
    let key = format!("\"{name}\":");
    let start = text.find(&key)? + key.len();
    let rest = text[start..].trim_start().strip_prefix('"')?;
    let mut value = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => value.extend(chars.next()),
            c => value.push(c),
        }
    }
    None
}

/// `v1.37.2` -> `[1, 37, 2]`.
fn parse_version(text: &str) -> Option<Vec<u32>> {
    let core = text.strip_prefix('v')?.split(['-', '+']).next()?;
    let parts: Option<Vec<u32>> = core.split('.').map(|p| p.parse().ok()).collect();
    parts.filter(|p| p.len() >= 2)
}

fn has_binary(dir: &Path, name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    dir.join(name)
        .metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A hard link (the build tree and the version directory share one copy on disk), else a copy.
fn link_or_copy(from: &Path, to: &Path) -> Result<(), String> {
    let _ = fs::remove_file(to);
    if fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| format!("could not copy {} to {}: {e}", from.display(), to.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("could not write {}: {e}", path.display()))
}

fn mkdir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("could not create {}: {e}", dir.display()))
}

fn remove_dir(dir: &Path) -> Result<(), String> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("could not remove {}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn finds_the_staging_modules_of_a_kubernetes_go_mod() {
        let go_mod = "module k8s.io/kubernetes\n\ngo 1.26.0\n\nrequire (\n\tk8s.io/api v0.0.0\n)\n\n\
                      replace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\
                      \tk8s.io/client-go => ./staging/src/k8s.io/client-go\n\
                      \tgithub.com/x/y => github.com/x/z v1.0.0\n)\n\
                      replace k8s.io/kms => ./staging/src/k8s.io/kms\n";
        assert_eq!(
            staging_modules(go_mod),
            ["k8s.io/api", "k8s.io/client-go", "k8s.io/kms"]
        );
    }

    #[test]
    fn reads_paths_from_go_json_output() {
        let text = "{\n\t\"Path\": \"k8s.io/kubernetes\",\n\t\"GoMod\": \"/c/mod/k8s.io/@v/v1.37.2.mod\",\n\
                    \t\"Dir\": \"/c/a \\\"b\\\"\"\n}";
        assert_eq!(
            json_string_field(text, "GoMod").as_deref(),
            Some("/c/mod/k8s.io/@v/v1.37.2.mod")
        );
        assert_eq!(
            json_string_field(text, "Dir").as_deref(),
            Some("/c/a \"b\"")
        );
        assert_eq!(json_string_field(text, "Zip"), None);
    }

    #[test]
    fn parses_versions() {
        assert_eq!(parse_version("v1.37.2"), Some(vec![1, 37, 2]));
        assert_eq!(parse_version("v1.31.0-rc.1"), Some(vec![1, 31, 0]));
        assert_eq!(parse_version("build"), None);
        assert!(parse_version("v1.9.0") < parse_version("v1.20.2"));
    }

    #[test]
    fn a_go_older_than_the_module_asks_is_refused_clearly() {
        let go = Go {
            version: "1.25.3".to_owned(),
            mod_cache: PathBuf::new(),
            build_cache: PathBuf::new(),
        };
        let err = go
            .check_version(Some("1.26.0"), "k8s.io/kubernetes")
            .unwrap_err();
        assert!(err.contains("needs Go 1.26.0 or newer"), "{err}");
        assert!(err.contains("Go 1.25.3"), "{err}");
        go.check_version(Some("1.24"), "x").unwrap();
        go.check_version(None, "x").unwrap();
    }

    #[test]
    fn a_version_directory_is_complete_only_with_every_binary_and_the_stages() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("xtask-envtest-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for name in [APISERVER, CONTROLLER_MANAGER, SCHEDULER, ETCD, KWOK] {
            assert!(!complete(&dir));
            let exe = dir.join(name);
            fs::write(&exe, "").unwrap();
            fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
        }
        assert!(!complete(&dir));
        fs::write(dir.join(KWOK_STAGES), "").unwrap();
        assert!(complete(&dir));
        fs::remove_dir_all(&dir).unwrap();
    }
}
