//! Go, as the project runs it: the module in `go/` at the repository's root (client-go and
//! controller-runtime pinned once, in `go/go.mod` and `go/go.sum`), with the machine's own
//! toolchain and one module and build cache for the whole project.
//!
//! The environment is the same everywhere Go runs (here, and in rudder-lease's
//! `tests/support/candidates.rs`, which cannot depend on the xtask): `GOTOOLCHAIN=local` (never
//! download another Go), `GOFLAGS=-mod=readonly -buildvcs=false` (go.mod and go.sum as
//! committed; no VCS stamp, so a build does not depend on the checkout's state),
//! `CGO_ENABLED=0`, and `GOMODCACHE`/`GOCACHE` in [`cache_dir`].

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util;

/// The `go` on the PATH, checked to be new enough for `go/go.mod`.
pub struct Go {
    version: String,
    cache: PathBuf,
}

impl Go {
    /// Finds `go`, and fails with what to do when it is missing or older than `go/go.mod`
    /// needs.
    pub fn find() -> Result<Self, String> {
        let go_mod = read_go_mod()?;
        let needed = go_line(&go_mod).ok_or("go/go.mod has no `go` line")?;
        let output = Command::new("go")
            .args(["env", "GOVERSION"])
            .env("GOTOOLCHAIN", "local")
            .output()
            .map_err(|e| {
                format!(
                    "could not run `go` ({e}): the Go programs in go/ need Go {needed} or newer \
                     on the PATH"
                )
            })?;
        let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if !output.status.success() || version.is_empty() {
            return Err(format!(
                "`go env GOVERSION` failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        if !new_enough(&version, needed) {
            return Err(format!(
                "go/go.mod needs Go {needed} or newer, and the `go` on the PATH is {version}"
            ));
        }
        Ok(Self {
            version,
            cache: cache_dir()?,
        })
    }

    /// The version, as `go env GOVERSION` prints it (`go1.26.8`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// `go` in the module's directory, with the project's environment.
    pub fn command(&self) -> Command {
        let mut command = Command::new("go");
        command
            .current_dir(module_dir())
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "-mod=readonly -buildvcs=false")
            .env("CGO_ENABLED", "0")
            .env("GOMODCACHE", self.cache.join("mod"))
            .env("GOCACHE", self.cache.join("build"));
        command
    }

    /// Builds the module's `./cmd/<name>` into `output`.
    pub fn build(&self, name: &str, output: &Path) -> Result<(), String> {
        util::run(
            self.command()
                .arg("build")
                .arg("-o")
                .arg(output)
                .arg(format!("./cmd/{name}")),
        )
    }
}

/// The Go module's directory, `go/` at the repository's root.
pub fn module_dir() -> PathBuf {
    util::workspace_root().join("go")
}

/// Go's module and build caches live in `mod` and `build` here: `$XDG_CACHE_HOME/rudder/go`,
/// else `$HOME/.cache/rudder/go` (shared with the envtest install's builds).
pub fn cache_dir() -> Result<PathBuf, String> {
    Ok(util::cache_base()?.join("go"))
}

fn read_go_mod() -> Result<String, String> {
    let path = module_dir().join("go.mod");
    std::fs::read_to_string(&path).map_err(|e| format!("could not read {}: {e}", path.display()))
}

/// The version in go.mod's `go` line (the oldest Go that builds the module).
pub fn go_line(go_mod: &str) -> Option<&str> {
    go_mod
        .lines()
        .find_map(|line| line.trim().strip_prefix("go "))
        .map(str::trim)
}

/// Whether `version` (`go1.26.8`, `go1.27rc1`) is at least `needed` (`1.26.0`, `1.26`).
pub fn new_enough(version: &str, needed: &str) -> bool {
    let numbers = |v: &str| -> Vec<u32> {
        v.split(|c: char| !c.is_ascii_digit())
            .map_while(|n| n.parse().ok())
            .collect()
    };
    let have = numbers(version.strip_prefix("go").unwrap_or(version));
    !have.is_empty() && have >= numbers(needed)
}

/// The version go.mod requires `module` at, from a `require` line or block.
#[cfg(test)]
fn required(go_mod: &str, module: &str) -> Option<String> {
    let mut in_block = false;
    for line in go_mod.lines() {
        let line = line.split("//").next().unwrap_or_default().trim();
        let entry = if in_block {
            if line == ")" {
                in_block = false;
                continue;
            }
            line
        } else if line == "require (" {
            in_block = true;
            continue;
        } else if let Some(single) = line.strip_prefix("require ") {
            single
        } else {
            continue;
        };
        if let [name, version] = entry.split_whitespace().collect::<Vec<_>>()[..]
            && name == module
        {
            return Some(version.to_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::DEFAULT_KUBERNETES;

    #[test]
    fn go_mod_pins_the_client_go_of_the_default_kubernetes() {
        let go_mod = read_go_mod().unwrap();
        let (major, rest) = DEFAULT_KUBERNETES.split_once('.').unwrap();
        assert_eq!(major, "1", "Kubernetes 1.x has Go modules at v0.x");
        let expected = format!("v0.{rest}");
        for module in ["k8s.io/client-go", "k8s.io/api", "k8s.io/apimachinery"] {
            assert_eq!(
                required(&go_mod, module).as_deref(),
                Some(expected.as_str()),
                "go/go.mod must require {module} at {expected}, the default Kubernetes \
                 {DEFAULT_KUBERNETES}'s (xtask/src/versions.rs)"
            );
        }
        let go_sum = std::fs::read_to_string(module_dir().join("go.sum")).unwrap();
        assert!(
            go_sum.contains(&format!("k8s.io/client-go {expected} h1:")),
            "go/go.sum has no hash of k8s.io/client-go {expected}: run `go mod tidy` in go/"
        );
        assert!(
            required(&go_mod, "sigs.k8s.io/controller-runtime").is_some(),
            "go/go.mod requires controller-runtime"
        );
    }

    #[test]
    fn reads_requirements_in_blocks_and_lines() {
        let go_mod = "module example.com/m\n\ngo 1.26.0\n\nrequire example.com/one v1.2.3\n\n\
            require (\n\tk8s.io/client-go v0.37.2\n\tk8s.io/klog/v2 v2.140.0 // indirect\n)\n";
        assert_eq!(
            required(go_mod, "example.com/one").as_deref(),
            Some("v1.2.3")
        );
        assert_eq!(
            required(go_mod, "k8s.io/client-go").as_deref(),
            Some("v0.37.2")
        );
        assert_eq!(
            required(go_mod, "k8s.io/klog/v2").as_deref(),
            Some("v2.140.0")
        );
        assert_eq!(required(go_mod, "k8s.io/client"), None);
        assert_eq!(go_line(go_mod), Some("1.26.0"));
    }

    #[test]
    fn compares_go_versions() {
        assert!(new_enough("go1.26.8", "1.26.0"));
        assert!(new_enough("go1.26.0", "1.26"));
        assert!(new_enough("go1.27rc1", "1.26.0"));
        assert!(!new_enough("go1.25.9", "1.26.0"));
        assert!(!new_enough("go1.9.2", "1.26"));
        assert!(!new_enough("devel", "1.26"));
    }
}
