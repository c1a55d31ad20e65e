//! The [`Installer`]: finds a release in the index, downloads and verifies it with its
//! components, and installs it atomically; lists and removes installs.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::archive::unpack;
use crate::cache::{
    self, Installed, Scratch, cache_dir, has_component, make_executable, release_dirs,
    remove_dir_if_present, scratch_dirs,
};
use crate::component::{Component, KWOK_STAGES, KWOK_STAGES_YAML, KWOK_VERSION};
use crate::error::{Error, Result};
use crate::http::Http;
use crate::index::{Archive, Index, Platform, cut, is_sha512};
use crate::version::{Selector, Version};

/// controller-tools' index of envtest archives, which `setup-envtest` reads too.
pub const DEFAULT_INDEX_URL: &str =
    "https://raw.githubusercontent.com/kubernetes-sigs/controller-tools/HEAD/envtest-releases.yaml";
/// Kubernetes' release downloads: `<base>/vX.Y.Z/bin/<os>/<arch>/<name>` and `<name>.sha512`.
pub const DEFAULT_RELEASE_URL: &str = "https://dl.k8s.io/release";
/// KWOK's GitHub releases: `<base>/vX.Y.Z/kwok-<os>-<arch>`.
pub const DEFAULT_KWOK_URL: &str = "https://github.com/kubernetes-sigs/kwok/releases/download";

/// The index is well under 1 MiB; anything far larger is not it.
const INDEX_LIMIT: u64 = 16 << 20;
/// A `.sha512` file is 128 hex digits, maybe with a file name.
const CHECKSUM_LIMIT: u64 = 4 << 10;

/// What an [`Installer`] is doing, for a command to show progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress<'a> {
    /// Reading the index.
    Index {
        /// Its URL.
        url: &'a str,
    },
    /// A download starts.
    Download {
        /// What is downloaded.
        url: &'a str,
    },
    /// A download's SHA-512 is the published one.
    Verified {
        /// What was downloaded.
        url: &'a str,
    },
    /// A download that has no published checksum (KWOK's binary) is complete.
    Unverified {
        /// What was downloaded.
        url: &'a str,
    },
}

impl fmt::Display for Progress<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Index { url } => write!(f, "reading the index {url}"),
            Self::Download { url } => write!(f, "downloading {url}"),
            Self::Verified { url } => write!(f, "verified {url} (SHA-512)"),
            Self::Unverified { url } => {
                write!(f, "downloaded {url} (its project publishes no checksum)")
            }
        }
    }
}

/// A release as [`Installer::list`] shows it: in the index for this platform, installed, or
/// both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The release.
    pub version: Version,
    /// Where it is installed, if it is.
    pub installed: Option<PathBuf>,
    /// Whether the index has an archive of it for the installer's platform (always `false`
    /// offline, where the index is not read).
    pub available: bool,
}

type ProgressFn = dyn Fn(&Progress<'_>) + Send + Sync;

/// Downloads, verifies and installs control planes for rudder-envtest, like Go's
/// `setup-envtest`: what `cargo rudder envtest use | list | cleanup` runs.
///
/// Built with [`Installer::new`] (the install directory rudder-envtest searches,
/// [`cache_dir`]) or [`Installer::with_dir`], then configured with the builder methods.
/// Calls block (a download takes its time); call them from `spawn_blocking` in async code.
#[derive(Clone)]
pub struct Installer {
    dir: PathBuf,
    index_url: String,
    release_url: String,
    kwok_url: String,
    offline: bool,
    platform: Platform,
    components: Vec<Component>,
    progress: Option<Arc<ProgressFn>>,
    http: Http,
}

impl fmt::Debug for Installer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Installer")
            .field("dir", &self.dir)
            .field("index_url", &self.index_url)
            .field("release_url", &self.release_url)
            .field("kwok_url", &self.kwok_url)
            .field("offline", &self.offline)
            .field("platform", &self.platform)
            .field("components", &self.components)
            .finish_non_exhaustive()
    }
}

impl Installer {
    /// An installer for the directory rudder-envtest searches ([`cache_dir`]), with the
    /// upstream download sites, this machine's platform and every component.
    /// [`Error::NoCacheDir`] when neither `XDG_CACHE_HOME` nor `HOME` is set.
    pub fn new() -> Result<Self> {
        Ok(Self::with_dir(cache_dir().ok_or(Error::NoCacheDir)?))
    }

    /// An installer for another directory: each release goes in `dir/vX.Y.Z/`. rudder-envtest
    /// finds it there through `RUDDER_ENVTEST_ASSETS` (pointing at the release's directory).
    pub fn with_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            index_url: DEFAULT_INDEX_URL.to_owned(),
            release_url: DEFAULT_RELEASE_URL.to_owned(),
            kwok_url: DEFAULT_KWOK_URL.to_owned(),
            offline: false,
            platform: Platform::current(),
            components: Component::ALL.to_vec(),
            progress: None,
            http: Http::new(),
        }
    }

    /// The index of archives to read (a mirror of [`DEFAULT_INDEX_URL`]). Its `selfLink`s
    /// say where each archive is downloaded from.
    pub fn index_url(mut self, url: impl Into<String>) -> Self {
        self.index_url = url.into();
        self
    }

    /// Where kube-controller-manager and kube-scheduler are downloaded from (a mirror of
    /// [`DEFAULT_RELEASE_URL`], in its layout).
    pub fn release_url(mut self, url: impl Into<String>) -> Self {
        self.release_url = url.into();
        self
    }

    /// Where KWOK is downloaded from (a mirror of [`DEFAULT_KWOK_URL`], in its layout).
    pub fn kwok_url(mut self, url: impl Into<String>) -> Self {
        self.kwok_url = url.into();
        self
    }

    /// Offline, nothing is downloaded: [`ensure`](Self::ensure) only finds what is
    /// installed, and [`list`](Self::list) shows only that.
    pub fn offline(mut self, offline: bool) -> Self {
        self.offline = offline;
        self
    }

    /// The platform to install for (default: this machine's).
    pub fn platform(mut self, platform: Platform) -> Self {
        self.platform = platform;
        self
    }

    /// The optional components to install beside the API server and etcd (default: all).
    pub fn components(mut self, components: impl IntoIterator<Item = Component>) -> Self {
        let mut list: Vec<Component> = components.into_iter().collect();
        list.sort();
        list.dedup();
        self.components = list;
        self
    }

    /// Calls `progress` as the installer reads the index and downloads, verifies each file.
    pub fn on_progress(mut self, progress: impl Fn(&Progress<'_>) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(progress));
        self
    }

    /// The install directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The newest release `selector` matches, installed with the components asked for:
    /// what `cargo rudder envtest use` does.
    ///
    /// An installed release is used without reading the index when the selector names it
    /// exactly (or offline, the newest installed match). Otherwise the index says which
    /// release is newest; it is downloaded if missing, verified, and renamed into place as
    /// a whole, so its directory exists only complete. Components missing from an install
    /// are added to it, each file renamed into place once verified. On any error nothing of
    /// the attempt is left behind.
    pub fn ensure(&self, selector: &Selector) -> Result<Installed> {
        let installed = cache::installed(&self.dir)?;
        let matching: Vec<&Installed> = installed
            .iter()
            .filter(|i| selector.matches(&i.version))
            .collect();
        if self.offline {
            return match matching
                .iter()
                .find(|i| i.missing(&self.components).is_empty())
            {
                Some(found) => Ok((*found).clone()),
                None => Err(Error::NotInstalled {
                    selector: selector.to_string(),
                    dir: self.dir.clone(),
                    missing: matching
                        .first()
                        .map(|i| missing_files(&i.missing(&self.components)))
                        .unwrap_or_default(),
                }),
            };
        }
        if let Selector::Exact(_) = selector
            && let Some(found) = matching.first()
            && found.missing(&self.components).is_empty()
        {
            return Ok((*found).clone());
        }
        let index = self.index()?;
        let (version, archive) = index.select(selector, &self.platform, &self.index_url)?;
        match installed.iter().find(|i| same_release(&i.version, version)) {
            Some(found) => self.complete(found),
            None => self.install(version, archive),
        }
    }

    /// What is installed, newest first (the index is not read).
    pub fn installed(&self) -> Result<Vec<Installed>> {
        cache::installed(&self.dir)
    }

    /// The releases the index has for this platform and those installed, newest first;
    /// offline, only those installed.
    pub fn list(&self) -> Result<Vec<Listed>> {
        let mut rows: BTreeMap<(u32, u32, u32), Listed> = BTreeMap::new();
        if !self.offline {
            let index = self.index()?;
            for version in index.versions() {
                if index.archive(version, &self.platform).is_some() {
                    rows.insert(
                        numbers(version),
                        Listed {
                            version: version.clone(),
                            installed: None,
                            available: true,
                        },
                    );
                }
            }
        }
        for found in cache::installed(&self.dir)? {
            rows.entry(numbers(&found.version))
                .or_insert_with(|| Listed {
                    version: found.version.clone(),
                    installed: None,
                    available: false,
                })
                .installed = Some(found.dir);
        }
        Ok(rows.into_values().rev().collect())
    }

    /// Removes every installed release `selector` matches ([`Selector::Any`]: all of them),
    /// complete or not, and the scratch directories of installs that were killed; returns
    /// the directories removed. Nothing outside release and scratch directories is touched.
    pub fn cleanup(&self, selector: &Selector) -> Result<Vec<PathBuf>> {
        let mut removed = Vec::new();
        for (version, dir) in release_dirs(&self.dir)? {
            if selector.matches(&version) {
                remove_dir_if_present(&dir)?;
                removed.push(dir);
            }
        }
        for dir in scratch_dirs(&self.dir) {
            remove_dir_if_present(&dir)?;
            removed.push(dir);
        }
        Ok(removed)
    }

    fn say(&self, progress: Progress<'_>) {
        if let Some(f) = &self.progress {
            f(&progress);
        }
    }

    fn index(&self) -> Result<Index> {
        self.say(Progress::Index {
            url: &self.index_url,
        });
        let text = self.http.text(&self.index_url, INDEX_LIMIT)?;
        Index::parse(&text, &self.index_url)
    }

    /// Installs `version` from its archive, with the components, in a scratch directory
    /// renamed into place at the end.
    fn install(&self, version: &Version, archive: &Archive) -> Result<Installed> {
        let scratch = Scratch::new(&self.dir, version)?;
        let tarball = scratch.path().join(&archive.name);
        self.download_verified(&archive.url, &tarball, &archive.sha512)?;
        unpack(&tarball, scratch.path(), &archive.url)?;
        fs::remove_file(&tarball).map_err(|e| Error::io("remove", &tarball, e))?;
        for component in &self.components {
            self.fetch(*component, version, scratch.path())?;
        }
        let target = self.dir.join(&version.text);
        if target.exists() && !installed_at(&self.dir, version)? {
            // A directory of that name without the API server and etcd (emptied by hand,
            // say) is not an install: it goes, through a scratch directory of its own.
            let trash = Scratch::new(&self.dir, version)?;
            let aside = trash.path().join("replaced");
            fs::rename(&target, &aside).map_err(|e| Error::io("move aside", &target, e))?;
        }
        if let Err(e) = scratch.commit(&target) {
            // Another process may have installed it meanwhile: use that one, completed.
            return match cache::installed(&self.dir)?
                .into_iter()
                .find(|i| same_release(&i.version, version))
            {
                Some(found) => self.complete(&found),
                None => Err(Error::io("rename into", &target, e)),
            };
        }
        self.found(version)
    }

    /// Adds the components `found` lacks: each downloaded and verified into a scratch
    /// directory, then its files renamed into the release's directory, binary last.
    fn complete(&self, found: &Installed) -> Result<Installed> {
        let missing = found.missing(&self.components);
        if missing.is_empty() {
            return Ok(found.clone());
        }
        let scratch = Scratch::new(&self.dir, &found.version)?;
        for component in &missing {
            self.fetch(*component, &found.version, scratch.path())?;
        }
        for component in &missing {
            for name in component.files() {
                let (from, to) = (scratch.path().join(name), found.dir.join(name));
                fs::rename(&from, &to).map_err(|e| Error::io("rename into", &to, e))?;
            }
        }
        self.found(&found.version)
    }

    /// The install of `version` as it now is.
    fn found(&self, version: &Version) -> Result<Installed> {
        let dir = self.dir.join(&version.text);
        Ok(Installed {
            version: version.clone(),
            components: Component::ALL
                .into_iter()
                .filter(|c| has_component(&dir, *c))
                .collect(),
            dir,
        })
    }

    /// Downloads `component` of `version` into `into` (verified where its project publishes
    /// a checksum).
    fn fetch(&self, component: Component, version: &Version, into: &Path) -> Result<()> {
        let Platform { os, arch } = &self.platform;
        match component {
            Component::ControllerManager | Component::Scheduler => {
                let name = component.files().last().copied().unwrap_or_default();
                let url = format!(
                    "{}/{version}/bin/{os}/{arch}/{name}",
                    self.release_url.trim_end_matches('/')
                );
                let checksum_url = format!("{url}.sha512");
                let expected = parse_checksum(
                    &self.http.text(&checksum_url, CHECKSUM_LIMIT)?,
                    &checksum_url,
                )?;
                let path = into.join(name);
                self.download_verified(&url, &path, &expected)?;
                make_executable(&path)
            }
            Component::Kwok => {
                let stages = into.join(KWOK_STAGES);
                fs::write(&stages, KWOK_STAGES_YAML).map_err(|e| Error::io("write", &stages, e))?;
                let url = format!(
                    "{}/v{KWOK_VERSION}/kwok-{os}-{arch}",
                    self.kwok_url.trim_end_matches('/')
                );
                let path = into.join("kwok");
                self.say(Progress::Download { url: &url });
                self.http.to_file(&url, &path)?;
                self.say(Progress::Unverified { url: &url });
                make_executable(&path)
            }
        }
    }

    /// Downloads `url` to `path` and checks its SHA-512 is `expected`.
    fn download_verified(&self, url: &str, path: &Path, expected: &str) -> Result<()> {
        self.say(Progress::Download { url });
        let got = self.http.to_file(url, path)?;
        if got.sha512 != expected {
            return Err(Error::HashMismatch {
                url: url.to_owned(),
                expected: expected.to_owned(),
                actual: got.sha512,
            });
        }
        self.say(Progress::Verified { url });
        Ok(())
    }
}

/// The hash in a `.sha512` file: its first word (the file may name the file after it), in
/// lowercase.
fn parse_checksum(text: &str, url: &str) -> Result<String> {
    let word = text.split_whitespace().next().unwrap_or_default();
    let hash = word.to_ascii_lowercase();
    if is_sha512(&hash) {
        Ok(hash)
    } else {
        Err(Error::BadChecksum {
            url: url.to_owned(),
            found: cut(text.trim()),
        })
    }
}

/// Whether `root` holds an install of `version` (with the API server and etcd).
fn installed_at(root: &Path, version: &Version) -> Result<bool> {
    Ok(cache::installed(root)?
        .iter()
        .any(|i| same_release(&i.version, version)))
}

/// The files the components of `missing` would add, for an error message.
fn missing_files(missing: &[Component]) -> Vec<String> {
    missing
        .iter()
        .flat_map(|c| c.files().iter().map(|f| (*f).to_owned()))
        .collect()
}

fn numbers(v: &Version) -> (u32, u32, u32) {
    (v.major, v.minor, v.patch)
}

fn same_release(a: &Version, b: &Version) -> bool {
    numbers(a) == numbers(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::REQUIRED;

    const HASH: &str = "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e";

    #[test]
    fn a_checksum_file_is_a_hash_with_or_without_a_file_name() {
        assert_eq!(parse_checksum(HASH, "u").unwrap(), HASH);
        assert_eq!(
            parse_checksum(&format!("{}  kube-scheduler\n", HASH.to_uppercase()), "u").unwrap(),
            HASH
        );
        for bad in ["", "<html>404</html>", &HASH[1..], &format!("{HASH}0")] {
            assert!(
                matches!(parse_checksum(bad, "u"), Err(Error::BadChecksum { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn offline_finds_only_what_is_installed() {
        let dir = std::env::temp_dir().join(format!("envtest-offline-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let release = dir.join("v1.37.2");
        fs::create_dir_all(&release).unwrap();
        for name in REQUIRED {
            fs::write(release.join(name), "").unwrap();
            make_executable(&release.join(name)).unwrap();
        }
        // No server at all: nothing may be downloaded.
        let offline = Installer::with_dir(&dir)
            .index_url("http://127.0.0.1:9/never")
            .offline(true);
        let any = offline
            .clone()
            .components([])
            .ensure(&Selector::Any)
            .unwrap();
        assert_eq!(any.version.to_string(), "v1.37.2");
        assert_eq!(any.dir, release);

        let err = offline.ensure(&"1.37".parse().unwrap()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "1.37.x is not installed in {} (an install there lacks kube-controller-manager, \
                 kube-scheduler, kwok-stages.yaml, kwok): run without --offline to download it",
                dir.display()
            )
        );
        let err = offline.ensure(&"1.36".parse().unwrap()).unwrap_err();
        assert!(
            matches!(&err, Error::NotInstalled { missing, .. } if missing.is_empty()),
            "{err}"
        );
        let listed = offline.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].installed.as_deref(), Some(release.as_path()));
        assert!(!listed[0].available);

        // An exact selector whose install is complete is used without the index.
        let online = Installer::with_dir(&dir)
            .index_url("http://127.0.0.1:9/never")
            .components([]);
        assert_eq!(
            online.ensure(&"1.37.2".parse().unwrap()).unwrap().dir,
            release
        );
        // Anything else reads the index, which is not there.
        assert!(matches!(
            online.ensure(&"1.37".parse().unwrap()),
            Err(Error::Http { .. })
        ));
        fs::remove_dir_all(&dir).unwrap();
    }
}
