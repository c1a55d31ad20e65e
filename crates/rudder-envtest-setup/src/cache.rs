//! The install directory: one sub-directory per Kubernetes release (`v1.37.2/`) holding
//! that release's binaries, as rudder-envtest searches it; what is installed there, and the
//! scratch directories an install is assembled in before it is renamed into place.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::component::{Component, KWOK_STAGES, REQUIRED};
use crate::error::{Error, Result};
use crate::version::Version;

/// The environment variable naming a directory that holds `kube-apiserver` and `etcd` (and,
/// optionally, the other components); rudder-envtest searches it before the install
/// directory.
pub const ASSETS_ENV: &str = "RUDDER_ENVTEST_ASSETS";

/// The directory control planes are installed in, one sub-directory per Kubernetes release
/// (`v1.37.2/`), and the one rudder-envtest searches: `$XDG_CACHE_HOME/rudder/envtest`, or
/// `$HOME/.cache/rudder/envtest` when `XDG_CACHE_HOME` is unset. `None` when neither is set.
pub fn cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(xdg) => PathBuf::from(xdg),
        None => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".cache"),
    };
    Some(base.join("rudder").join("envtest"))
}

/// A release installed in the install directory: its directory holds at least
/// `kube-apiserver` and `etcd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    /// The release, from the directory's name.
    pub version: Version,
    /// The directory holding its binaries: point `RUDDER_ENVTEST_ASSETS` here to pin a test
    /// run to this release.
    pub dir: PathBuf,
    /// The optional components it holds, in [`Component::ALL`]'s order.
    pub components: Vec<Component>,
}

impl Installed {
    /// The components of `wanted` it lacks.
    pub fn missing(&self, wanted: &[Component]) -> Vec<Component> {
        wanted
            .iter()
            .filter(|c| !self.components.contains(c))
            .copied()
            .collect()
    }
}

/// The release directories under `root` (named `vX.Y.Z`, whatever they hold), newest first.
/// An absent `root` holds none.
pub(crate) fn release_dirs(root: &Path) -> Result<Vec<(Version, PathBuf)>> {
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read", root, e)),
    };
    let mut dirs: Vec<(Version, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let version = Version::release(e.file_name().to_str()?)?;
            // `1.37.2` is not a name rudder-envtest reads; only `v1.37.2` is.
            e.file_name()
                .to_str()?
                .starts_with('v')
                .then(|| (version, e.path()))
        })
        .collect();
    dirs.sort_by(|a, b| b.0.cmp(&a.0));
    Ok(dirs)
}

/// What is installed under `root`, newest first: each release directory that holds the
/// required binaries.
pub(crate) fn installed(root: &Path) -> Result<Vec<Installed>> {
    Ok(release_dirs(root)?
        .into_iter()
        .filter(|(_, dir)| REQUIRED.iter().all(|name| is_executable(&dir.join(name))))
        .map(|(version, dir)| Installed {
            components: Component::ALL
                .into_iter()
                .filter(|c| has_component(&dir, *c))
                .collect(),
            version,
            dir,
        })
        .collect())
}

/// Whether `dir` holds every file of `component` (its binary executable).
pub(crate) fn has_component(dir: &Path, component: Component) -> bool {
    component.files().iter().all(|name| {
        let path = dir.join(name);
        if *name == KWOK_STAGES {
            path.is_file()
        } else {
            is_executable(&path)
        }
    })
}

/// The scratch directories of this crate's installs under `root` (`vX.Y.Z.<pid>-<n>.partial`),
/// which an install that was killed leaves behind. `cargo xtask envtest install`'s own
/// (`vX.Y.Z.partial`) are not among them.
pub(crate) fn scratch_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name();
            let Some(name) = name.to_str() else {
                return false;
            };
            let Some(stem) = name.strip_suffix(".partial") else {
                return false;
            };
            let Some((release, id)) = stem.rsplit_once('.') else {
                return false;
            };
            let Some((pid, n)) = id.split_once('-') else {
                return false;
            };
            release.starts_with('v')
                && Version::release(release).is_some()
                && [pid, n]
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|e| e.path())
        .collect()
}

/// A scratch directory beside the release directories, removed when dropped unless its
/// contents were committed.
pub(crate) struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Makes `root/vX.Y.Z.<pid>-<n>.partial`: beside the target, so renaming it into place is
    /// atomic, and skipped by rudder-envtest's search (it ends in `.partial`).
    pub(crate) fn new(root: &Path, version: &Version) -> Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        fs::create_dir_all(root).map_err(|e| Error::io("create", root, e))?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = root.join(format!("{version}.{}-{n}.partial", std::process::id()));
        // One left by an earlier process with the same id is stale.
        remove_dir_if_present(&path)?;
        fs::create_dir(&path).map_err(|e| Error::io("create", &path, e))?;
        Ok(Self { path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the whole directory to `target`, which must not exist. On failure the
    /// scratch directory is still removed on drop.
    pub(crate) fn commit(self, target: &Path) -> std::io::Result<()> {
        fs::rename(&self.path, target)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // After a successful commit the path no longer exists; otherwise nothing of a failed
        // install stays behind.
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Removes `path` and everything under it; absent is fine.
pub(crate) fn remove_dir_if_present(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", path, e)),
        _ => Ok(()),
    }
}

/// Marks `path` executable by everyone, as the binaries of an install are.
pub(crate) fn make_executable(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io("set permissions of", path, e))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Whether `path` is a file this user may run.
pub(crate) fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("envtest-setup-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn executable(path: &Path) {
        fs::write(path, "#!/bin/sh\n").unwrap();
        make_executable(path).unwrap();
    }

    #[test]
    fn installed_releases_are_those_with_the_required_binaries_newest_first() {
        let tmp = TempDir::new("scan");
        let root = &tmp.0;
        for dir in [
            "v1.33.13",
            "v1.37.2",
            "v1.9.0",
            "v1.36.0",
            "1.35.0",
            "v1.38.0.123-0.partial",
            "v1.38.0.partial",
            "build",
        ] {
            fs::create_dir_all(root.join(dir)).unwrap();
            for name in REQUIRED {
                executable(&root.join(dir).join(name));
            }
        }
        // Lacking etcd: not installed, but still a release directory (cleanup removes it).
        fs::remove_file(root.join("v1.36.0/etcd")).unwrap();
        executable(&root.join("v1.37.2/kube-scheduler"));
        fs::write(root.join("v1.37.2/kwok"), "not executable").unwrap();
        fs::write(root.join("v1.37.2/kwok-stages.yaml"), "").unwrap();
        fs::write(root.join("v1.33.13/kwok-stages.yaml"), "").unwrap();
        executable(&root.join("v1.33.13/kwok"));

        let found = installed(root).unwrap();
        let versions: Vec<_> = found.iter().map(|i| i.version.to_string()).collect();
        assert_eq!(versions, ["v1.37.2", "v1.33.13", "v1.9.0"]);
        assert_eq!(found[0].components, [Component::Scheduler]);
        assert_eq!(found[0].dir, root.join("v1.37.2"));
        assert_eq!(found[1].components, [Component::Kwok]);
        assert_eq!(
            found[0].missing(&Component::ALL),
            [Component::ControllerManager, Component::Kwok]
        );
        let dirs: Vec<_> = release_dirs(root)
            .unwrap()
            .into_iter()
            .map(|(v, _)| v.to_string())
            .collect();
        assert_eq!(dirs, ["v1.37.2", "v1.36.0", "v1.33.13", "v1.9.0"]);
        assert_eq!(scratch_dirs(root), [root.join("v1.38.0.123-0.partial")]);
        assert!(installed(&root.join("absent")).unwrap().is_empty());
    }

    #[test]
    fn a_scratch_directory_goes_unless_committed() {
        let tmp = TempDir::new("scratch");
        let version = Version::new(1, 37, 2);
        let scratch = Scratch::new(&tmp.0, &version).unwrap();
        let path = scratch.path().to_owned();
        assert!(path.is_dir());
        assert!(path.to_str().unwrap().ends_with(".partial"));
        fs::write(path.join("etcd"), "x").unwrap();
        drop(scratch);
        assert!(!path.exists());

        let scratch = Scratch::new(&tmp.0, &version).unwrap();
        fs::write(scratch.path().join("etcd"), "x").unwrap();
        scratch.commit(&tmp.0.join("v1.37.2")).unwrap();
        assert!(tmp.0.join("v1.37.2/etcd").is_file());
        assert!(scratch_dirs(&tmp.0).is_empty());
    }
}
