//! `cargo xtask envtest ...`: finds, or builds and caches, the control plane binaries that
//! rudder-envtest runs (kube-apiserver, etcd and kube-controller-manager).
//!
//! Lookup order: `$RUDDER_ENVTEST_ASSETS`, the cache (`$XDG_CACHE_HOME/rudder/envtest/v*/`,
//! else `~/.cache/rudder/envtest/v*/`), `PATH`. When none has them and the machine has apt,
//! kube-apiserver and kube-controller-manager are built from Debian's `kubernetes` source
//! package (v1.20.2) and etcd comes from Debian's `etcd-server`, as `shared/ENVTEST.md`
//! describes. Every step is skipped when its result already exists, so an interrupted install
//! resumes and a finished one returns at once.
//!
//! Measured on a machine of the project's kind (2 cores) from an empty cache
//! (`XDG_CACHE_HOME=$(mktemp -d) cargo xtask envtest install`, apt packages already present):
//! 466 s in all (source download 2 s, extract and patch 2 s, kube-apiserver 384 s,
//! kube-controller-manager 77 s); the build directory then holds 2.2 GB. A second run takes
//! under 0.01 s.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::util;

/// The environment variable rudder-envtest reads; also searched first here.
const ASSETS_ENV: &str = "RUDDER_ENVTEST_ASSETS";
const APISERVER: &str = "kube-apiserver";
const ETCD: &str = "etcd";
const CONTROLLER_MANAGER: &str = "kube-controller-manager";
/// Debian packages the build needs: the Go toolchain, etcd, tools the Kubernetes makefiles
/// call, and a reflect2 that works with Go 1.19 (the vendored 1.0.1 builds, then panics).
const PACKAGES: &[&str] = &[
    "make",
    "golang-go",
    "etcd-server",
    "rsync",
    "jq",
    "golang-github-modern-go-reflect2-dev",
];
const REFLECT2_DEBIAN: &str = "/usr/share/gocode/src/github.com/modern-go/reflect2";
const REFLECT2_VENDORED: &str = "vendor/github.com/modern-go/reflect2";
/// Written into the source tree once it is extracted and patched.
const PREPARED_MARKER: &str = ".rudder-prepared";

/// Entry point for `cargo xtask envtest <subcommand>`.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    match args {
        ["install"] => install(false).map(|_| ()),
        ["install", "--print-path"] => install(true).map(|_| ()),
        other => Err(format!(
            "unknown envtest subcommand: {} (expected `install [--print-path]`)",
            other.join(" ")
        )),
    }
}

/// Finds or installs the binaries and returns the directory holding them.
///
/// With `print_path`, stdout gets only that directory (progress goes to stderr), so
/// `export RUDDER_ENVTEST_ASSETS=$(cargo xtask envtest install --print-path)` works.
pub(crate) fn install(print_path: bool) -> Result<PathBuf, String> {
    let started = Instant::now();
    let installer = Installer::new(print_path)?;
    let dir = installer.find_or_build()?;
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
    /// `.../rudder/envtest`: one `v<version>/` directory per installed version.
    cache: PathBuf,
    /// `.../rudder/envtest/build`: downloads, the source tree, Go's caches.
    build: PathBuf,
}

impl Installer {
    fn new(print_path: bool) -> Result<Self, String> {
        let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
            Some(xdg) => PathBuf::from(xdg),
            None => std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
                .ok_or("neither XDG_CACHE_HOME nor HOME is set; cannot choose a cache directory")?,
        };
        let cache = base.join("rudder").join("envtest");
        let build = cache.join("build");
        Ok(Self {
            print_path,
            cache,
            build,
        })
    }

    fn find_or_build(&self) -> Result<PathBuf, String> {
        let has_apt = find_on_path("apt-get").is_some();
        if let Some(dir) = std::env::var_os(ASSETS_ENV).filter(|v| !v.is_empty()) {
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
        // Complete means all three; without apt, two will do (rudder-envtest only needs the
        // controller manager when a test asks for it).
        let complete = |dir: &Path| {
            has_binary(dir, APISERVER)
                && has_binary(dir, ETCD)
                && (has_binary(dir, CONTROLLER_MANAGER) || !has_apt)
        };
        if let Some(dir) = self.cached_versions().into_iter().find(|d| complete(d)) {
            return Ok(dir);
        }
        if let (Some(apiserver), Some(etcd)) = (find_on_path(APISERVER), find_on_path(ETCD)) {
            return self.link_from_path(&apiserver, &etcd);
        }
        if !has_apt {
            return Err(format!(
                "kube-apiserver and etcd are not in {ASSETS_ENV}, {}, or PATH, and this machine \
                 has no apt-get to build them from Debian's sources. Put official kube-apiserver \
                 and etcd binaries (v1.20 or newer; kube-controller-manager too for its tests) in \
                 a directory and set {ASSETS_ENV} to it",
                self.cache.display()
            ));
        }
        self.build_from_debian()
    }

    /// `v*` directories of the cache, newest first.
    fn cached_versions(&self) -> Vec<PathBuf> {
        let Ok(entries) = fs::read_dir(&self.cache) else {
            return Vec::new();
        };
        let mut found: Vec<(Vec<u32>, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                Some((parse_version(&name)?, e.path()))
            })
            .collect();
        found.sort_by(|a, b| b.0.cmp(&a.0));
        found.into_iter().map(|(_, dir)| dir).collect()
    }

    /// Binaries on PATH may sit in different directories; one directory of links gives
    /// `RUDDER_ENVTEST_ASSETS` a single value.
    fn link_from_path(&self, apiserver: &Path, etcd: &Path) -> Result<PathBuf, String> {
        let dir = self.cache.join("from-path");
        fs::create_dir_all(&dir).map_err(|e| format!("could not create {}: {e}", dir.display()))?;
        let mut links = vec![(APISERVER, apiserver.to_owned()), (ETCD, etcd.to_owned())];
        if let Some(cm) = find_on_path(CONTROLLER_MANAGER) {
            links.push((CONTROLLER_MANAGER, cm));
        }
        for (name, target) in links {
            relink(&target, &dir.join(name))?;
        }
        Ok(dir)
    }

    fn build_from_debian(&self) -> Result<PathBuf, String> {
        self.say(&format!(
            "building kube-apiserver and kube-controller-manager from Debian's source into {} \
             (about 10-15 minutes the first time on 2 cores)",
            self.build.display()
        ));
        mkdir(&self.build)?;
        let src = self.build.join("src");

        if missing_packages().is_empty() {
            self.say("apt packages: all installed");
        } else {
            self.step("apt-get update", || {
                self.sh(Command::new("apt-get").args(["update", "-q"]))
            })?;
            self.step("apt-get install build packages and etcd", || {
                self.sh(Command::new("apt-get")
                    .args(["install", "-y", "-q", "--no-install-recommends"])
                    .args(PACKAGES)
                    .env("DEBIAN_FRONTEND", "noninteractive"))
            })?;
        }

        let built = |name| built_binary(&src, name);
        if built(APISERVER).is_none() || built(CONTROLLER_MANAGER).is_none() {
            if !src.join(PREPARED_MARKER).exists() {
                let tarball = match self.orig_tarball() {
                    Some(t) => t,
                    None => {
                        self.step("download the kubernetes source package", || {
                            self.download_source()
                        })?;
                        self.orig_tarball().ok_or_else(|| {
                            format!(
                                "apt-get source left no kubernetes_*.orig.tar.gz in {}",
                                self.build.display()
                            )
                        })?
                    }
                };
                self.step("extract and patch the source tree", || {
                    self.prepare_tree(&tarball, &src)
                })?;
            }
            for name in [APISERVER, CONTROLLER_MANAGER] {
                if built(name).is_none() {
                    self.step(&format!("make WHAT=cmd/{name}"), || self.make(&src, name))?;
                }
            }
        }
        self.step("install into the cache", || self.install_binaries(&src))
    }

    fn orig_tarball(&self) -> Option<PathBuf> {
        fs::read_dir(&self.build)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("kubernetes_") && n.ends_with(".orig.tar.gz"))
            })
    }

    /// `apt-get source` needs a deb-src entry, which the machine's apt config lacks. A private
    /// sources file (derived from the machine's own entries, so no mirror is hard-coded) and
    /// private lists directory leave the system's apt state untouched.
    fn download_source(&self) -> Result<(), String> {
        let apt = self.build.join("apt");
        let parts = apt.join("sources.list.d");
        let lists = apt.join("lists");
        mkdir(&parts)?;
        mkdir(&lists.join("partial"))?;
        let (file_name, text) = deb_src_sources()?;
        let file = parts.join(file_name);
        fs::write(&file, &text).map_err(|e| format!("could not write {}: {e}", file.display()))?;
        let apt_get = || {
            let mut cmd = Command::new("apt-get");
            cmd.arg("-o")
                .arg("Dir::Etc::sourcelist=/dev/null")
                .arg("-o")
                .arg(format!("Dir::Etc::sourceparts={}", parts.display()))
                .arg("-o")
                .arg(format!("Dir::State::Lists={}", lists.display()))
                .current_dir(&self.build)
                .env("DEBIAN_FRONTEND", "noninteractive");
            cmd
        };
        self.sh(apt_get().args(["update", "-q"]))?;
        self.sh(apt_get().args(["source", "--download-only", "kubernetes"]))
    }

    /// Extracts the upstream tarball (Debian's patches only touch kubectl), swaps in Debian's
    /// reflect2, and lays out the GOPATH the Kubernetes makefiles expect. Works in a scratch
    /// directory and renames it at the end, so a half-done tree is never mistaken for a ready one.
    fn prepare_tree(&self, tarball: &Path, src: &Path) -> Result<(), String> {
        let scratch = self.build.join("src.partial");
        remove_dir(&scratch)?;
        mkdir(&scratch)?;
        self.sh(Command::new("tar")
            .arg("-xzf")
            .arg(tarball)
            .arg("-C")
            .arg(&scratch)
            .arg("--strip-components=1"))?;
        let vendored = scratch.join(REFLECT2_VENDORED);
        remove_dir(&vendored)?;
        copy_go_package(Path::new(REFLECT2_DEBIAN), &vendored)?;
        let gopath = scratch.join(".go/src/k8s.io");
        mkdir(&gopath)?;
        std::os::unix::fs::symlink("../../..", gopath.join("kubernetes"))
            .map_err(|e| format!("could not link the GOPATH: {e}"))?;
        fs::write(scratch.join(PREPARED_MARKER), "")
            .map_err(|e| format!("could not mark the tree prepared: {e}"))?;
        remove_dir(src)?;
        fs::rename(&scratch, src).map_err(|e| format!("could not move the tree into place: {e}"))
    }

    fn make(&self, src: &Path, name: &str) -> Result<(), String> {
        let home = self.build.join("home");
        mkdir(&home)?;
        self.sh(Command::new("make")
            .arg(format!("WHAT=cmd/{name}"))
            .current_dir(src)
            .env("GOPATH", src.join(".go"))
            .env("CGO_ENABLED", "0")
            // Go's build cache lives under HOME; keep it with the rest of the build.
            .env("HOME", &home))?;
        built_binary(src, name).map(|_| ()).ok_or_else(|| {
            format!(
                "make finished but no {name} was found under {}/_output",
                src.display()
            )
        })
    }

    fn install_binaries(&self, src: &Path) -> Result<PathBuf, String> {
        let apiserver = built_binary(src, APISERVER)
            .ok_or_else(|| format!("no built kube-apiserver under {}", src.display()))?;
        let out = Command::new(&apiserver)
            .arg("--version")
            .output()
            .map_err(|e| format!("could not run {}: {e}", apiserver.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text
            .split_whitespace()
            .find(|w| parse_version(w).is_some())
            .ok_or_else(|| format!("unexpected `kube-apiserver --version` output: {text:?}"))?
            .to_owned();
        let etcd = find_on_path(ETCD).ok_or("etcd is not on PATH after installing etcd-server")?;

        let dest = self.cache.join(&version);
        let scratch = self.cache.join(format!("{version}.partial"));
        remove_dir(&scratch)?;
        mkdir(&scratch)?;
        for name in [APISERVER, CONTROLLER_MANAGER] {
            let from = built_binary(src, name)
                .ok_or_else(|| format!("no built {name} under {}", src.display()))?;
            fs::copy(&from, scratch.join(name))
                .map_err(|e| format!("could not copy {}: {e}", from.display()))?;
        }
        relink(&etcd, &scratch.join(ETCD))?;
        remove_dir(&dest)?;
        fs::rename(&scratch, &dest)
            .map_err(|e| format!("could not move binaries to {}: {e}", dest.display()))?;
        Ok(dest)
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

/// Packages from [`PACKAGES`] that dpkg does not list as installed.
fn missing_packages() -> Vec<&'static str> {
    PACKAGES
        .iter()
        .copied()
        .filter(|pkg| {
            let out = Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", pkg])
                .output();
            !matches!(out, Ok(o) if o.status.success()
                && String::from_utf8_lossy(&o.stdout).ends_with("installed"))
        })
        .collect()
}

/// A deb-src version of the machine's binary package sources: deb822 from
/// `/etc/apt/sources.list.d/debian.sources` (Debian 12's default), else one-line entries from
/// `/etc/apt/sources.list`. Returns the file name to use (its extension tells apt the format)
/// and the text.
fn deb_src_sources() -> Result<(&'static str, String), String> {
    let deb822 = Path::new("/etc/apt/sources.list.d/debian.sources");
    if let Ok(text) = fs::read_to_string(deb822) {
        let out = deb822_to_deb_src(&text);
        if !out.is_empty() {
            return Ok(("rudder-src.sources", out));
        }
    }
    let list = Path::new("/etc/apt/sources.list");
    if let Ok(text) = fs::read_to_string(list) {
        let out = one_line_to_deb_src(&text);
        if !out.is_empty() {
            return Ok(("rudder-src.list", out));
        }
    }
    Err(format!(
        "found no `deb` entry in {} or {} to derive a deb-src entry from",
        deb822.display(),
        list.display()
    ))
}

/// Copies each stanza whose `Types:` include `deb`, as `Types: deb-src`, without comments.
fn deb822_to_deb_src(text: &str) -> String {
    let mut out = String::new();
    for stanza in text.split("\n\n") {
        let lines: Vec<&str> = stanza
            .lines()
            .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
            .collect();
        let is_deb = lines.iter().any(|l| {
            l.strip_prefix("Types:")
                .is_some_and(|types| types.split_whitespace().any(|t| t == "deb"))
        });
        let disabled = lines
            .iter()
            .any(|l| l.replace(' ', "").eq_ignore_ascii_case("Enabled:no"));
        if !is_deb || disabled {
            continue;
        }
        for line in lines {
            if line.starts_with("Types:") {
                out.push_str("Types: deb-src\n");
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push('\n');
    }
    out
}

/// Turns each `deb ...` line into `deb-src ...`.
fn one_line_to_deb_src(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("deb "))
        .map(|rest| format!("deb-src {rest}\n"))
        .collect()
}

/// Where `make` put `name`: `_output/bin/` (a link to the platform directory) or
/// `_output/local/bin/<os>/<arch>/`.
fn built_binary(src: &Path, name: &str) -> Option<PathBuf> {
    let direct = src.join("_output/bin").join(name);
    if has_binary(direct.parent()?, name) {
        return Some(direct);
    }
    let platforms = src.join("_output/local/bin");
    for os in fs::read_dir(platforms).ok()?.filter_map(Result::ok) {
        for arch in fs::read_dir(os.path()).ok()?.filter_map(Result::ok) {
            if has_binary(&arch.path(), name) {
                return Some(arch.path().join(name));
            }
        }
    }
    None
}

/// Copies a Go package directory, leaving out its tests (they import packages the vendor
/// tree lacks).
fn copy_go_package(from: &Path, to: &Path) -> Result<(), String> {
    mkdir(to)?;
    let entries = fs::read_dir(from).map_err(|e| {
        format!(
            "could not read {} (is golang-github-modern-go-reflect2-dev installed?): {e}",
            from.display()
        )
    })?;
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            copy_go_package(&path, &to.join(&name))?;
        } else if !name.to_string_lossy().ends_with("_test.go") {
            fs::copy(&path, to.join(&name))
                .map_err(|e| format!("could not copy {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// `v1.20.2` -> `[1, 20, 2]`.
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

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .find(|dir| has_binary(dir, name))
        .map(|dir| dir.join(name))
}

fn relink(target: &Path, link: &Path) -> Result<(), String> {
    let _ = fs::remove_file(link);
    std::os::unix::fs::symlink(target, link).map_err(|e| {
        format!(
            "could not link {} to {}: {e}",
            link.display(),
            target.display()
        )
    })
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
    fn derives_deb_src_stanzas_from_debian_sources() {
        let text = "Types: deb\n# a comment\nURIs: http://mirror.example/debian\n\
                    Suites: bookworm bookworm-updates\nComponents: main\n\
                    Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                    Types: deb-src\nURIs: http://x\nSuites: y\nComponents: main\n";
        let out = deb822_to_deb_src(text);
        assert_eq!(
            out,
            "Types: deb-src\nURIs: http://mirror.example/debian\n\
             Suites: bookworm bookworm-updates\nComponents: main\n\
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        );
    }

    #[test]
    fn derives_deb_src_lines_from_sources_list() {
        let text = "# comment\ndeb http://m/debian bookworm main\ndeb-src http://m/debian x main\n";
        assert_eq!(
            one_line_to_deb_src(text),
            "deb-src http://m/debian bookworm main\n"
        );
    }

    #[test]
    fn parses_cache_directory_versions() {
        assert_eq!(parse_version("v1.20.2"), Some(vec![1, 20, 2]));
        assert_eq!(parse_version("v1.31.0-rc.1"), Some(vec![1, 31, 0]));
        assert_eq!(parse_version("build"), None);
        assert_eq!(parse_version("v1.20.2.partial"), None);
        assert!(parse_version("v1.9.0") < parse_version("v1.20.2"));
    }

    #[test]
    fn finds_built_binaries_in_the_platform_directory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("xtask-envtest-{}", std::process::id()));
        let bin = dir.join("_output/local/bin/linux/amd64");
        fs::create_dir_all(&bin).unwrap();
        let exe = bin.join(APISERVER);
        fs::write(&exe, "").unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(built_binary(&dir, APISERVER), Some(exe));
        assert_eq!(built_binary(&dir, CONTROLLER_MANAGER), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
