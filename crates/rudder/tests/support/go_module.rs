//! CustomResourceDefinitions as a Go module publishes them: `go mod download -json` fetches the
//! module at a pinned version from the Go module proxy into the project's Go module cache (the
//! one the envtest install and the xtask share), and the CRD YAML is read from its directory.
//! Projects such as Cluster API ship their CRDs this way, so the tests install the real ones
//! without a copy in the tree.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The directory of `module` at `version`, downloaded first if the cache lacks it.
///
/// # Panics
///
/// When `go` cannot be run or the download fails, saying what to do.
pub(crate) fn module_dir(module: &str, version: &str) -> PathBuf {
    let cache = rudder_envtest::setup::cache_dir()
        .and_then(|envtest| Some(envtest.parent()?.join("go")))
        .expect("neither XDG_CACHE_HOME nor HOME is set, so there is no Go module cache");
    let at = format!("{module}@{version}");
    let output = Command::new("go")
        .args(["mod", "download", "-json", &at])
        // Outside any module, so that no go.mod around the working directory is read.
        .current_dir(std::env::temp_dir())
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("GOMODCACHE", cache.join("mod"))
        .env("GOCACHE", cache.join("build"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "could not run `go` ({e}): these tests install the CRDs of {module} from the Go \
                 module proxy with `go mod download`, so they need Go on the PATH"
            )
        });
    // `-json` reports a failure in the JSON's `Error` as well as in the exit status.
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    if !output.status.success() || answer.get("Error").is_some() {
        panic!(
            "`go mod download -json {at}` failed ({}): {} {}",
            output.status,
            answer["Error"].as_str().unwrap_or_default(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let dir = answer["Dir"]
        .as_str()
        .unwrap_or_else(|| panic!("`go mod download -json {at}` named no Dir: {answer}"));
    PathBuf::from(dir)
}

/// The CRDs in the YAML file `path` of `module` at `version`.
pub(crate) fn crds(module: &str, version: &str, path: &str) -> Vec<CustomResourceDefinition> {
    let file = module_dir(module, version).join(Path::new(path));
    rudder_envtest::crds_from_file(&file)
        .unwrap_or_else(|e| panic!("the CRDs of {module}@{version} at {path}: {e}"))
}
