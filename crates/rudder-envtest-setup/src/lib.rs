//! Downloads, verifies and installs the control plane binaries that rudder-envtest runs, for
//! projects outside Rudder's repository: what `setup-envtest` is to Go's controller-runtime.
//!
//! Start with [`Installer::new`] and [`Installer::ensure`]; `cargo rudder envtest use` runs
//! the same code, and rudder-envtest re-exports this crate as `rudder_envtest::setup`.
//!
//! ```no_run
//! use rudder_envtest_setup::{Installer, Selector};
//!
//! # fn main() -> Result<(), rudder_envtest_setup::Error> {
//! // The newest 1.37 patch release, into the directory rudder-envtest searches: its tests
//! // then find the binaries with no variable set.
//! let selector: Selector = "1.37.x".parse()?;
//! let installed = Installer::new()?.ensure(&selector)?;
//! println!("{} in {}", installed.version, installed.dir.display());
//! # Ok(())
//! # }
//! ```
//!
//! # Where each file comes from, and what is verified
//!
//! | file | from | verified |
//! |---|---|---|
//! | `kube-apiserver`, `etcd`, `kubectl` | the archive `envtest-vX.Y.Z-<os>-<arch>.tar.gz` that controller-tools' index (`envtest-releases.yaml`, [`DEFAULT_INDEX_URL`]) lists, from its `selfLink` | the archive's SHA-512 against the index's `hash` |
//! | `kube-controller-manager`, `kube-scheduler` | Kubernetes' release downloads, `<base>/vX.Y.Z/bin/<os>/<arch>/<name>` ([`DEFAULT_RELEASE_URL`]) | SHA-512 against `<name>.sha512` beside it |
//! | `kwok` | KWOK's GitHub release ([`KWOK_VERSION`]), `<base>/vX.Y.Z/kwok-<os>-<arch>` ([`DEFAULT_KWOK_URL`]) | not verified: KWOK publishes no checksums; only its length against the server's |
//! | `kwok-stages.yaml` | carried by this crate (KWOK publishes its stages only as sources) | compiled in |
//!
//! Every download is also checked against the length the server announced, so a cut
//! connection is [`Error::Truncated`], not a corrupt binary. The index and its `hash` are
//! trusted as served over HTTPS; a mirror is trusted as much as its index.
//!
//! The optional [`Component`]s (kube-controller-manager, kube-scheduler, KWOK) are
//! installed by default, so every rudder-envtest option works (`controller_manager(true)`,
//! `nodes(n)`); [`Installer::components`] picks fewer.
//!
//! # The install directory
//!
//! Each release goes in its own directory under [`cache_dir`] (`~/.cache/rudder/envtest/`,
//! or `$XDG_CACHE_HOME/rudder/envtest/`): `v1.37.2/` holds `kube-apiserver`, `etcd`,
//! `kubectl`, `kube-controller-manager`, `kube-scheduler`, `kwok` and `kwok-stages.yaml`.
//! That is the directory rudder-envtest searches (newest release first) and the layout
//! `cargo xtask envtest install` writes in Rudder's repository, so tests find downloaded
//! binaries as they find built ones. To pin a test run to one release, point
//! [`ASSETS_ENV`] (`RUDDER_ENVTEST_ASSETS`) at [`Installed::dir`].
//!
//! # Installing atomically
//!
//! A release is assembled in a scratch directory beside its target
//! (`v1.37.2.<pid>-<n>.partial`, which rudder-envtest skips), every file verified there,
//! and the directory renamed into place at the end: a version directory exists only
//! complete. A wrong hash, a truncated download, an archive without the API server, a
//! full disk: the error is returned and the scratch directory removed. A component added
//! to an existing install is verified in a scratch directory too, then renamed in, its
//! binary last. Two processes installing the same release at once both succeed; the second
//! uses the first's directory. A directory of a release's name that lacks kube-apiserver or
//! etcd is not an install: a complete one replaces it.
//!
//! # Mirrors and offline machines
//!
//! [`Installer::index_url`], [`Installer::release_url`] and [`Installer::kwok_url`] point at
//! mirrors in the upstream layouts (the index's `selfLink`s say where archives are).
//! [`Installer::offline`] downloads nothing: it finds the newest installed release that
//! matches, or fails with [`Error::NotInstalled`].
//!
//! # Versions
//!
//! A [`Selector`] is what a user types: `1.37.2` (that release), `1.37` or `1.37.x` (its
//! newest patch), `latest` or nothing (the newest release). The newest match the index has
//! for this [`Platform`] (`linux` or `darwin`, `amd64` or `arm64`) is installed; an exact
//! release already installed is used without reading the index. [`Installer::list`] shows
//! the index's releases beside the installed ones; [`Installer::cleanup`] removes installs.

mod archive;
mod cache;
mod component;
mod error;
mod http;
mod index;
mod installer;
mod version;

pub use cache::{ASSETS_ENV, Installed, cache_dir};
pub use component::{Component, KWOK_VERSION};
pub use error::{Error, Result};
pub use index::Platform;
pub use installer::{
    DEFAULT_INDEX_URL, DEFAULT_KWOK_URL, DEFAULT_RELEASE_URL, Installer, Listed, Progress,
};
pub use version::{Selector, Version};
