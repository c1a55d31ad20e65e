//! Finding the control plane's binaries (environment variable, then the install cache, then
//! `PATH`) and reading the API server's version.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use rudder_envtest_setup::{ASSETS_ENV, Version, cache_dir};

use crate::error::{Error, Result};

/// The API server binary's file name.
pub(crate) const KUBE_APISERVER: &str = "kube-apiserver";
/// The etcd binary's file name.
pub(crate) const ETCD: &str = "etcd";
/// The controller manager binary's file name.
pub(crate) const KUBE_CONTROLLER_MANAGER: &str = "kube-controller-manager";
/// The scheduler binary's file name.
pub(crate) const KUBE_SCHEDULER: &str = "kube-scheduler";
/// KWOK's binary's file name: it plays the kubelet of fake nodes.
pub(crate) const KWOK: &str = "kwok";
/// KWOK's stages (how nodes and Pods move through their lifecycle), beside its binary.
pub(crate) const KWOK_STAGES: &str = "kwok-stages.yaml";

/// Finds `name` in `explicit` (a builder override), then `$RUDDER_ENVTEST_ASSETS`, then the
/// install cache (newest version first), then `PATH`.
pub(crate) fn find(name: &'static str, explicit: Option<&Path>) -> Result<PathBuf> {
    let dirs = search_dirs(explicit);
    for (_, dir) in &dirs {
        let candidate = dir.join(name);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    let searched = dirs
        .iter()
        .filter(|(label, _)| !label.is_empty())
        .map(|(label, dir)| format!("{label} ({})", dir.display()))
        .chain(std::iter::once("PATH".to_owned()))
        .collect::<Vec<_>>()
        .join(", ");
    Err(Error::BinaryNotFound {
        binary: name,
        searched,
    })
}

/// The stages file beside a found KWOK binary, which `cargo xtask envtest install` writes
/// there; KWOK without stages leaves nodes and Pods as they are.
pub(crate) fn kwok_stages(kwok: &Path) -> Result<PathBuf> {
    let stages = kwok.with_file_name(KWOK_STAGES);
    if stages.is_file() {
        Ok(stages)
    } else {
        Err(Error::BinaryNotFound {
            binary: KWOK_STAGES,
            searched: format!(
                "beside {} (KWOK's stages, written there by the install)",
                kwok.display()
            ),
        })
    }
}

/// Runs `<binary> --version` (kube-apiserver or kube-controller-manager) once per path per
/// process and parses the answer.
pub(crate) fn kube_version(path: &Path) -> Result<Version> {
    static SEEN: OnceLock<Mutex<HashMap<PathBuf, Version>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(v) = seen.lock().ok().and_then(|m| m.get(path).cloned()) {
        return Ok(v);
    }
    let out = Command::new(path)
        .arg("--version")
        .output()
        .map_err(|e| Error::Version {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = Version::parse(&text).ok_or_else(|| Error::Version {
        path: path.to_owned(),
        reason: format!("unexpected output {:?}", text.trim()),
    })?;
    if let Ok(mut m) = seen.lock() {
        m.insert(path.to_owned(), version.clone());
    }
    Ok(version)
}

/// The directories searched, in order, each with a label for error messages (PATH entries have
/// an empty label and are summarised as `PATH`).
fn search_dirs(explicit: Option<&Path>) -> Vec<(String, PathBuf)> {
    let mut dirs = Vec::new();
    if let Some(dir) = explicit {
        dirs.push(("the builder's binary_dir".to_owned(), dir.to_owned()));
    }
    if let Some(dir) = std::env::var_os(ASSETS_ENV).filter(|v| !v.is_empty()) {
        dirs.push((ASSETS_ENV.to_owned(), PathBuf::from(dir)));
    }
    if let Some(cache) = cache_dir() {
        let mut versions = cached_versions(&cache);
        if versions.is_empty() {
            dirs.push(("the install cache".to_owned(), cache));
        } else {
            versions.sort_by(|a, b| b.0.cmp(&a.0));
            dirs.extend(
                versions
                    .into_iter()
                    .map(|(_, dir)| ("the install cache".to_owned(), dir)),
            );
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    dirs.extend(std::env::split_paths(&path).map(|dir| (String::new(), dir)));
    dirs
}

/// The `v*` sub-directories of the cache that parse as versions, leaving out the `.partial`
/// directories an install in progress writes to.
fn cached_versions(cache: &Path) -> Vec<(Version, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            if name.ends_with(".partial") {
                return None;
            }
            Some((Version::parse(&name)?, e.path()))
        })
        .collect()
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn cache_scan_skips_partial_and_unversioned_directories() {
        let cache = std::env::temp_dir().join(format!("envtest-cache-{}", std::process::id()));
        // `.partial`: an install in progress, the xtask's or rudder-envtest-setup's.
        for d in [
            "v1.20.2",
            "v1.21.0.partial",
            "v1.21.0.4242-0.partial",
            "build",
            "from-path",
        ] {
            std::fs::create_dir_all(cache.join(d)).unwrap();
        }
        let found = cached_versions(&cache);
        std::fs::remove_dir_all(&cache).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0.text, "v1.20.2");
    }
}
